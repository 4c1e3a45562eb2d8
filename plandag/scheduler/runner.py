"""The event-driven runner (ARCHITECTURE.md, "Execution").

No polling loop: every step keeps a count of parents that have not succeeded yet. When a
step succeeds, each child's count drops by one, and every child at zero is started at once:
the task that ran the step goes on with the highest of them (below), and the others wait in a
queue the run's tasks take from; a standby task of the run's task group
(:mod:`plandag.scheduler.tasks`) takes the next one as soon as every task running steps is
suspended, and another standby is started while steps wait, so no waiting step is ever held
up by a step that suspends, and steps that never suspend run without a task each. When a step
fails, its descendants are marked ``skipped`` with ``reason="upstream_failed"``;
independent branches run to the end. This is the scheduler
LLMCompiler (Kim et al., ICML 2024) describes, without its 10 ms polling loop.

"At once" is one after another on the event loop, and under a concurrency limit the steps
waiting for a slot take them in the order they asked: ready steps that start together (the
roots, a resumed run's ready steps, the children one success makes ready) start highest
bottom level first, the longest remaining path to the end of the plan (HLFET list
scheduling: Adam, Chandy & Dickson, CACM 1974; :func:`plandag.dag.graph.bottom_levels`),
each step weighing its seconds in the run's plan estimate, 1 where unknown or without one;
equal levels keep plan order. What runs is the same; only the order of their starts changes.

Per step:

1. acquire the tool's limiter (``tool.max_concurrency`` or ``tool_limits[name]``), then
   the global one (``max_concurrency``); a step waiting here is still ``pending``;
2. the step is ``running`` from here: resolve its args' references; check every write
   target against the write boundary (before the tool is called);
3. call the tool with a :class:`~plandag.tools.base.ToolContext`, under the tool's
   timeout (seconds, counted from here). A sync tool runs in a worker thread that is
   abandoned at the timeout, so a blocking function cannot hold the run: the step fails
   with ``reason="timeout"`` and its late result is discarded;
4. evaluate every check of the step (their args' references resolved too); any failed
   check fails the step with ``reason="check_failed"``, keeping the result on the record;
5. a failed attempt is described (:func:`plandag.errors.describe_failure`: exception groups
   unwrapped to their real leaf) and, under a :class:`~plandag.brakes.retry.RetryPolicy`,
   tried again after a backoff outside the concurrency limits, as the policy decides.

A step's exception is caught and recorded on the step; it never reaches the task group, so
siblings are never cancelled and the caller never sees an ``ExceptionGroup``.

The brakes of :class:`~plandag.scheduler.limits.RunLimits` (ARCHITECTURE.md, "Brakes"):

* ``max_seconds``: a cancel scope around every step, with its deadline fixed at the run's
  start. At the deadline running steps end ``cancelled`` and steps not started ``skipped``,
  both with reason ``deadline``; the run ends ``timed_out``. Retry delays that would end
  past the deadline are not waited: the step fails at once.
* ``max_cost_usd`` / ``max_tokens``: before each attempt the tool's estimate
  (``cost_estimate_usd``, ``tokens_estimate``) is reserved (:mod:`plandag.brakes.budget`);
  after it, the reservation is settled with the cost the tool reported through
  ``ctx.report_cost`` (the estimate when it reported nothing). A tool whose cost depends on
  its arguments (a model call) reserves per call from inside the attempt with
  ``ctx.reserve(usd, tokens)``; what it held is settled with the rest. A reservation refused
  there fails the step, reason ``budget``, and ends the run ``budget_exceeded`` too. A first
  attempt that cannot be reserved does not start: the step ends ``skipped``, reason
  ``budget``, and its descendants too; a retry that cannot be reserved is not made. Either
  way the run ends ``budget_exceeded``; branches that fit the budget run on.
* ``breaker_after``: the circuit breaker (:mod:`plandag.scheduler.breaker`): after that
  many steps in a row of one tool, or to one HTTP host, failed (their retries spent), the
  dependency is down and the steps that need it fail at once, reason ``dependency_down``,
  without an attempt.
* ``heartbeat_every`` / ``stall_after`` / ``stop_on_stall``: see
  :mod:`plandag.scheduler.heartbeat`. A stop on a stall ends running steps ``cancelled`` and
  the others ``skipped``, reason ``stalled``, and the run ``timed_out`` (a time brake, like
  the deadline; ``interrupted`` stays for a person's Ctrl-C or SIGTERM).
* ``plan_cost_factor`` / ``plan_time_factor``: limits relative to the plan's estimate
  (:mod:`plandag.scheduler.estimate`, :class:`~plandag.brakes.budget.PlanBudget`). When
  the run's spend passes ``plan_cost_factor`` times the estimated cost (checked as each
  attempt is settled), or its elapsed time ``plan_time_factor`` times the estimated time
  (checked as each step ends, and by a deadline on the event loop for a step that hangs;
  time waiting for a person is left out), the run stops: running steps end ``cancelled``
  and the others ``skipped``, reason ``plan_budget``, and the run ends ``escalated`` with
  ``escalation="plan_budget"`` and a detail saying which limit and by how much.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.lowlevel

from plandag.brakes.retry import RetryPolicy
from plandag.brakes.waiting import observe_waits
from plandag.dag.graph import BottomLevels, bottom_levels
from plandag.dag.references import (
    ArgsTemplate,
    ReferenceResolutionError,
    compile_template,
    find_references,
)
from plandag.errors import (
    InvalidOutputError,
    error_message,
)
from plandag.scheduler import events, spans
from plandag.scheduler.attempts import AttemptOutcome, StepAttempts
from plandag.scheduler.breaker import CircuitBreaker
from plandag.scheduler.failures import detail_of, reason_of
from plandag.scheduler.failures import one_line as one_line
from plandag.scheduler.heartbeat import monitor
from plandag.scheduler.limits import RunLimits as RunLimits
from plandag.scheduler.result import RunResult, RunStatus, StepErrorInfo, StepRecord
from plandag.scheduler.tasks import StepTasks, step_tasks
from plandag.surrogates import ESCAPED_NOTE, escape_text

__all__ = ["RunLimits", "one_line"]

logger = logging.getLogger("plandag.scheduler")

_YIELD_EVERY_S = 0.005
"""A task running a chain of steps yields to the event loop at least this often (seconds)."""


def _referenced_steps(output: Any) -> tuple[int, ...]:
    """The step ids ``output`` references, in order (a step once per reference)."""
    return tuple(
        reference.step_id
        for _, reference in find_references(output)
        if reference.step_id is not None
    )


@functools.lru_cache(maxsize=256)
def _output_template(output: str) -> tuple[tuple[int, ...], ArgsTemplate]:
    """:func:`_referenced_steps` and the compiled template of a plan's output written as
    one string (``"<step_9_result>"``), computed once per distinct text: both depend on
    the text alone."""
    return _referenced_steps(output), compile_template(output)


class _Run(StepAttempts):
    """One run: its steps started as they become ready, each to a terminal state, and its
    result (:func:`~plandag.scheduler.run_plan` is its public face)."""

    # -- the run ---------------------------------------------------------------------------

    async def run(self) -> RunResult:
        """Run every step; return the complete result (see :func:`run_plan`), inside a
        live ``plandag run`` span (:mod:`plandag.scheduler.spans`) when tracing is on."""
        span = self.run_span = spans.start_run(self.run_id, len(self.records))
        result: RunResult | None = None
        try:
            with observe_waits(self):  # a wait for a rate-limit slot is not a stall
                result = await self.run_inside_span()
            return result
        finally:
            self.tool_calls.close()
            spans.end_run(span, result.status if result is not None else "interrupted")

    async def run_inside_span(self) -> RunResult:
        """:meth:`run` without its span."""
        limits = self.limits
        started_at = self.started_at = self.now()
        self.started = self.last_progress = self.monotonic()
        max_seconds = limits.seconds_cap
        if max_seconds is not None:
            self.deadline = self.started + max_seconds
            self.cap_loop_deadline = anyio.current_time() + max_seconds
            self.run_scope = anyio.CancelScope(deadline=self.cap_loop_deadline)
            self.guard()
        if self.observers:
            self.emit(events.RunStarted(self.run_id, len(self.records), started_at))
        if self.pending_estimate is not None:
            estimate, measured = self.pending_estimate
            self.arm_plan_budget(estimate, measured)
        send = bool(self.observers) and (
            limits.heartbeat_every is not None or limits.stall_cap is not None
        )
        watch = send or (limits.stop_on_stall and limits.stall_cap is not None)
        try:
            if watch and self.records:
                async with anyio.create_task_group() as monitor_group:
                    monitor_group.start_soon(self.watch, send)
                    await self.run_steps()
                    monitor_group.cancel_scope.cancel()
            elif self.in_order and self.deadline is None and self.plan_budget is None:
                # Nothing can cancel the run scope of this run: no deadline, no plan budget,
                # no monitor; and steps run in order in this task check it between steps.
                # Entering it would cost the loop's task lookups for nothing.
                await self.run_in_order()
            else:
                await self.run_steps()
        except anyio.get_cancelled_exc_class():  # asked only when something was raised
            # Cancelled from outside: every step recorded where it got to; return the
            # complete picture rather than lose it (documented in run_plan).
            pass
        return self.finish(started_at, self.started)

    async def watch(self, send: bool) -> None:
        """The heartbeat monitor's task (see :mod:`plandag.scheduler.heartbeat`)."""
        limits = self.limits
        await monitor(
            self,
            clock=self.clock,
            every=limits.heartbeat_every,
            stall_after=limits.stall_cap,
            stop_on_stall=limits.stop_on_stall,
            send=send,
        )

    async def run_steps(self) -> None:
        """Start the roots; return when every step has ended or the run scope stopped."""
        with self.run_scope:
            if self.in_order:
                await self.run_in_order()
                return
            async with step_tasks() as task_group:
                self.task_group = task_group
                if type(task_group) is StepTasks and self.deadline is not None:
                    self.calling = task_group.calling
                    task_group.on_abandon = self.abandon_attempts
                starts = self.seed() if self.completed else self.compiled.roots
                if len(starts) > 1:
                    starts = self.priorities().highest_first(starts)
                for step_id in starts:
                    self.active += 1
                    task_group.start_soon(self.run_step, step_id)

    async def run_in_order(self) -> None:
        """Run every step in one task, in plan order (a topological order), each once all
        its parents succeeded.

        For plans whose every tool is inline (cheap sync code that runs on the event loop
        and never suspends, ARCHITECTURE.md "Tools"): such steps never overlap anyway, so
        a task per ready step buys nothing and costs a task spawn each. Everything else is
        the same as in :meth:`run_steps`: each step goes through :meth:`run_one_step`
        (limits, retries, checks, records); a failed step's descendants end skipped and
        every independent step still runs; the loop yields to the event loop at least
        every :data:`_YIELD_EVERY_S` so that a deadline or a stall monitor gets in.
        """
        if self.completed:
            self.seed()
        records = self.records
        remaining = self.remaining
        self.driving_in_order = True
        self.active += 1
        last_yield = time.perf_counter()
        try:
            for step_id in self.compiled.order:
                if records[step_id].status != "pending" or remaining[step_id]:
                    continue  # done (resumed), skipped, or a parent did not succeed
                scope = self._run_scope
                if scope is not None and scope.cancel_called:  # stopping
                    break  # left pending: finish() ends it skipped with the stop's reason
                await self.run_one_step(step_id)
                if time.perf_counter() - last_yield > _YIELD_EVERY_S:
                    await anyio.lowlevel.checkpoint()
                    last_yield = time.perf_counter()
        finally:
            self.driving_in_order = False
            self.task_ended()

    def task_ended(self) -> None:
        """A step task (or a step waiting in :attr:`ready_queue`) is done: one fewer
        :attr:`active`; at none, the run is idle."""
        self.active -= 1
        if not self.active:
            if self.idle_event is not None:
                self.idle_event.set()
            if self.waiting_for_person:
                self.update_pause()  # nothing runs while a person decides

    def seed(self) -> list[int]:
        """Mark the steps of ``completed`` succeeded with their results (a resumed run:
        they never run again) and return the steps ready to start, in plan order (the
        caller starts them highest bottom level first)."""
        for step_id in self.compiled.order:
            if step_id in self.completed:
                record = self.records[step_id]
                record.status = "succeeded"
                record.result = self.results[step_id] = self.completed[step_id]
                record.tainted = self.taint_of[step_id] = self.steps[step_id].tainted_output
                for child in self.steps[step_id].children:
                    self.remaining[child] -= 1
        return [
            step_id
            for step_id in self.compiled.order
            if step_id not in self.completed and self.remaining[step_id] == 0
        ]

    def priorities(self) -> BottomLevels:
        """The bottom levels ready steps start by (module docstring), worked out on first
        use, once per run: a plan without two steps ready together never needs them."""
        levels = self.start_order
        if levels is None:
            levels = self.start_order = self.weigh(
                self.compiled.order, self.steps is self.compiled.steps
            )
        return levels

    def weigh(self, order: Sequence[int], as_compiled: bool) -> BottomLevels:
        """The bottom levels of the steps of ``order`` (each before its children) as
        :attr:`steps` holds them, weighed by :attr:`start_estimate`'s seconds; the
        compiled plan's own levels in steps (kept on it) when ``as_compiled`` (the steps
        are the plan's) and the weights would give the same order (none, or all equal)."""
        weights = self.estimated_seconds()
        if weights is None and as_compiled:
            return self.compiled.bottom_levels
        return bottom_levels(order, self.steps, weights)

    def estimated_seconds(self) -> dict[int, float | None] | None:
        """Each step's seconds in :attr:`start_estimate`, or None when every step of the
        run weighs the same (no estimate; every figure unknown, weighing 1; or all equal
        and above 0): levels in steps then give the same order."""
        estimate = self.start_estimate
        if estimate is None:
            return None
        weights = {1.0 if figure is None else figure for figure in estimate.distinct_seconds()}
        if len(weights) <= 1:
            weight = weights.pop() if weights else 1.0
            # a step the estimate does not hold weighs 1
            if weight == 1.0 or (weight > 0 and estimate.covers(self.records.keys())):
                return None
        return estimate.step_seconds()

    def finish(self, started_at: float, started: float) -> RunResult:
        """Close every record still open, build the RunResult and emit RunFinished."""
        self.finished = True
        cause = self.stop_cause()
        interrupted = False
        # every step succeeded, was replaced by a replan, or was rejected by a person (a
        # step-by-step approval approves the plan without it)
        all_succeeded = True
        for record in self.records.values():
            if record.status in ("pending", "running"):
                self.interrupt(record, cause)
            if record.reason == "interrupted":
                interrupted = True
            if (
                record.status != "succeeded"
                and record.superseded_by is None
                and not (record.status == "skipped" and record.reason == "rejected")
            ):
                all_succeeded = False
        status: RunStatus
        stop_reason: str | None = None
        if interrupted:
            status, stop_reason = "interrupted", "interrupted"
        elif self.escalation is not None:
            status = "escalated"
            if self.stopping:
                stop_reason = cause
        elif self.stopping and cause == "plan_budget":
            status, stop_reason = "gave_up", "plan_budget"  # escalation mode never
        elif self.stopping:
            status, stop_reason = "timed_out", cause
        elif self.budget_refused:
            status, stop_reason = "budget_exceeded", "budget"
        elif self.rejected:
            status, stop_reason = "rejected", "rejected"
        elif all_succeeded:
            status = "succeeded"
        elif self.gave_up:
            status = "gave_up"
        else:
            status = "failed"
        result = RunResult(
            run_id=self.run_id,
            status=status,
            steps=self.records,
            output=self.resolve_output(),
            started_at=started_at,
            ended_at=self.now(),
            duration_s=self.monotonic() - started,
            spent_usd=self.budget.spent_usd,
            spent_tokens=self.budget.spent_tokens,
            stop_reason=stop_reason,
            first_tool_start_s=(
                max(0.0, self.first_started_at - started_at)
                if self.first_started_at is not None
                else None
            ),
            escalation=self.escalation[0] if status == "escalated" and self.escalation else None,
            escalation_detail=(
                self.escalation[1] if status == "escalated" and self.escalation else None
            ),
            dependencies_down=self.breaker.snapshot() if self.breaker is not None else (),
            usage_over_reservation=self.budget.usage_over_reservation,
        )
        self.final_result = result
        if self.observers:
            self.emit(events.RunFinished(self.run_id, result, result.ended_at))
        return result

    def resolve_output(self) -> Any:
        """The output (``plan.output``, or a session's replacement) resolved, when every
        step it references succeeded; else None."""
        output = self.output
        if output is None:
            return None
        if type(output) is str:
            step_ids, template = _output_template(output)
        else:
            step_ids, template = _referenced_steps(output), compile_template(output)
        records = self.records
        for step_id in step_ids:
            if step_id not in records or records[step_id].status != "succeeded":
                return None
        try:
            return template(self.result_of, self.params)
        except ReferenceResolutionError as error:
            logger.warning("run %s: the plan's output did not resolve: %s", self.run_id, error)
            return None

    # -- one step --------------------------------------------------------------------------

    async def stand_by(self) -> None:
        """A standby task: take a step waiting in :attr:`ready_queue` and run it (then go on
        as :meth:`run_step` does), or end when none is left (the tasks that ran on took
        them all).

        It runs when every task before it in the event loop's queue is suspended or done:
        a step that suspends holds up no waiting step. Before running its step it starts
        two more standbys when steps still wait and none is pending, so that a fan-out of
        steps that all suspend starts in a few loop turns (doubling).
        """
        self.standbys -= 1
        queue = self.ready_queue
        if queue and not self.stopping:
            step_id = queue.popleft()
            self.active -= 1  # the step is this task's now
            if queue and not self.standbys:
                self.start_standbys(2)
            await self.run_step(step_id)
            return
        if self.stopping:  # the steps left waiting end skipped (finish)
            self.active -= len(queue)
            queue.clear()
        self.task_ended()

    def start_standbys(self, count: int) -> None:
        """Start ``count`` standby tasks (:meth:`stand_by`)."""
        task_group = self.task_group
        assert task_group is not None
        self.standbys += count
        self.active += count
        for _ in range(count):
            task_group.start_soon(self.stand_by)

    async def run_step(self, step_id: int) -> None:
        """Run a step, then go on in this same task with one of the children it made ready,
        then with the steps waiting in :attr:`ready_here` and :attr:`ready_queue`.

        Continuing in the current task saves a task spawn per step along every chain, and
        per step of a fan-out whose steps do not suspend.
        """
        next_step: int | None = step_id
        last_yield = time.perf_counter()
        started = self.started_monotonic
        seen = len(started)  # steps of the run started when this task last yielded
        ran = 0  # steps this task ran since
        if self.paused_at is not None:
            self.update_pause()  # a step runs: the clocks go on
        try:
            while next_step is not None:
                next_step = await self.run_one_step(next_step)
                ran += 1
                # stopping: the steps ready are left, to end skipped
                if (
                    next_step is None
                    and (self.ready_here or self.ready_queue)
                    and not self.stopping
                ):
                    if self.ready_here:
                        next_step = self.ready_here.popleft()
                    else:
                        next_step = self.ready_queue.popleft()
                        self.active -= 1  # the step is this task's now
                if next_step is not None and time.perf_counter() - last_yield > _YIELD_EVERY_S:
                    # A chain of inline steps never suspends on its own: let other tasks
                    # (siblings, the heartbeat, the deadline) in at least every few ms;
                    # unless they had their turn: other tasks started steps since (this
                    # task suspended meanwhile), or the next step asks for a limiter's slot
                    # (which yields once it has its place in line). The step made ready goes
                    # on first, before the siblings it was made ready with (it is the
                    # highest of them).
                    if len(started) - seen <= ran and (
                        self.global_limiter is None and self.tool_limiter.get(next_step) is None
                    ):
                        await anyio.lowlevel.checkpoint()
                    last_yield = time.perf_counter()
                    seen = len(started)
                    ran = 0
        finally:
            self.task_ended()

    async def run_one_step(self, step_id: int) -> int | None:
        """Run one step to a terminal state, then start its ready children or prune.

        Returns:
            A ready child for the caller to run next in the same task, or None.
        """
        record = self.records[step_id]
        breaker = self.breaker
        try:
            # attempt_or_reask, without its coroutine for the attempt that succeeds (nor
            # attempt_within_limits' for a step no concurrency limit applies to)
            if self.driving_in_order or (
                self.global_limiter is None and self.tool_limiter[step_id] is None
            ):
                outcome = await self.attempt(step_id, record, 0.0)
            else:
                outcome = await self.attempt_within_limits(step_id, record, 0.0)
            if outcome.error is not None:
                if self.reasks(step_id, record, outcome.error):
                    outcome = await self.attempt_within_limits(step_id, record, 0.0)
                if outcome.error is not None and self.retry is not None and outcome.down is None:
                    outcome = await self.retry_step(step_id, record, outcome, self.retry)
        except anyio.get_cancelled_exc_class():
            self.interrupt(record, self.stop_cause())
            raise
        if self.deadline is not None and record.status == "running" and self.past_deadline():
            # The step outlived the wall-clock cap without being stopped (an inline tool
            # that blocked the event loop, a tool that ignored its cancellation): its late
            # outcome is discarded, the step ends cancelled and the run stops.
            self.stop("deadline")
            self.interrupt(record, "deadline")
            return None
        if outcome.error is None:
            if outcome.refused is not None:
                self.refuse(step_id, record, outcome.refused)
                return None
            if breaker is not None and breaker.streaks:
                breaker.succeeded(self.dependencies_of(step_id))
            return self.succeed(step_id, record, outcome)
        self.fail(step_id, record, outcome)
        if breaker is not None:
            self.count_failure(breaker, step_id, record)
        return None

    def count_failure(self, breaker: CircuitBreaker, step_id: int, record: StepRecord) -> None:
        """Count a failed step against its dependencies; report those it took down."""
        opened = breaker.failed(
            step_id,
            self.dependencies_of(step_id),
            record.reason,
            record.detail or "",
            self.now(),
        )
        for down in opened:
            logger.warning("run %s: %s", self.run_id, down.describe())
            if self.observers:
                self.emit(
                    events.DependencyDown(
                        self.run_id,
                        down.dependency.kind,
                        down.dependency.name,
                        down.failed_steps,
                        down.detail,
                        down.time,
                    )
                )

    async def retry_step(
        self, step_id: int, record: StepRecord, outcome: AttemptOutcome, policy: RetryPolicy
    ) -> AttemptOutcome:
        """Try a failed step again while ``policy`` allows; return the last outcome.

        The backoff is waited outside the concurrency limits (the step stays ``running``).
        The counters (attempts, total delay) are this step's own.
        """
        tool = self.steps[step_id].tool
        waited = 0.0
        while True:
            failure = outcome.failure
            assert failure is not None
            last = record.attempt_log[-1]
            decision = policy.decide(
                failure,
                attempts=record.attempts,
                waited_s=waited,
                idempotent=tool.idempotent,
                remaining_s=self.remaining_s(),
            )
            if not decision.retry:
                last.retry = decision.stop
                if decision.stop != "permanent" and policy.retries > 0:
                    outcome.explanation = decision.explanation
                return outcome
            breaker = self.breaker
            if breaker is not None and breaker.down:
                down = breaker.blocking(self.dependencies_of(step_id))
                if down is not None:
                    last.retry = "dependency_down"
                    outcome.explanation = f"not retried: {down.dependency} is down"
                    return outcome  # not waiting a backoff for nothing
            last.retry = "retried"
            self.hand_over_queue()  # the steps queued in this task do not wait for the backoff
            if self.observers:
                error = record.attempt_log[-1].error
                assert error is not None
                self.emit(
                    events.StepRetrying(
                        self.run_id,
                        step_id,
                        record.attempts,
                        last.reason or "tool_error",
                        error,
                        decision.delay_s,
                        self.now(),
                    )
                )
            await self.clock.sleep(decision.delay_s)
            waited += decision.delay_s
            following = await self.attempt_or_reask(step_id, record, decision.delay_s)
            if following.down is not None:
                last.retry = "dependency_down"
                outcome.explanation = f"not retried: {following.down.dependency} is down"
                outcome.ended_at = None  # the step ends now, after the backoff
                return outcome
            if following.refused is not None:
                last.retry = "budget"
                self.budget_refused = True
                outcome.explanation = f"not retried: {following.refused}"
                outcome.ended_at = None  # the step ends now, after the backoff
                return outcome
            if following.error is None:
                return following
            outcome = following

    def hand_over_queue(self) -> None:
        """Start a task of its own for the steps queued in :attr:`ready_here` (this task
        is about to wait)."""
        here = self.ready_here
        task_group = self.task_group
        if here and task_group is not None and not self.driving_in_order and not self.stopping:
            self.active += 1
            task_group.start_soon(self.run_step, here.popleft())

    async def attempt_or_reask(
        self, step_id: int, record: StepRecord, delay_before: float
    ) -> AttemptOutcome:
        """One attempt; when it failed with an :class:`~plandag.errors.InvalidOutputError`
        asking for a re-ask (a model's reply that did not fit its schema), one more attempt
        at once, outside the retry policy: the re-ask is an attempt of its own, and a step
        gets at most one (:meth:`reasks`)."""
        if self.driving_in_order:  # steps run one at a time are within every limit
            outcome = await self.attempt(step_id, record, delay_before)
        else:
            outcome = await self.attempt_within_limits(step_id, record, delay_before)
        if outcome.error is not None and self.reasks(step_id, record, outcome.error):
            outcome = await self.attempt_within_limits(step_id, record, 0.0)
        return outcome

    def reasks(self, step_id: int, record: StepRecord, error: BaseException) -> bool:
        """Whether the attempt that just failed with ``error`` is asked again at once: an
        :class:`~plandag.errors.InvalidOutputError` asking for a re-ask, on a step that had
        none yet. When it is, its attempt is marked ``retry="reask"`` and observers get a
        :class:`~plandag.scheduler.events.StepRetrying` with no delay."""
        if not (
            isinstance(error, InvalidOutputError)
            and error.reask
            and not any(attempt.retry == "reask" for attempt in record.attempt_log)
        ):
            return False
        last = record.attempt_log[-1]
        last.retry = "reask"
        if self.observers:
            self.emit(
                events.StepRetrying(
                    self.run_id,
                    step_id,
                    record.attempts,
                    last.reason or "invalid_output",
                    last.error or StepErrorInfo(type(error).__name__, str(error)),
                    0.0,
                    self.now(),
                )
            )
        return True

    # -- terminal states -------------------------------------------------------------------

    def close(self, step_id: int, record: StepRecord, ended_at: float | None = None) -> None:
        """End ``record``'s clocks: its end (``ended_at``, the reading its last attempt
        ended at: a step ends when its last attempt ends; now when None), its duration, and
        a look at the plan-relative time limit."""
        record.ended_at = self.now() if ended_at is None else ended_at
        now = self.last_progress = self.monotonic()
        started = self.started_monotonic.get(step_id)
        if started is not None:
            record.duration_s = now - started
        budget = self.plan_budget
        if budget is not None:
            # Only the time limit can have been passed since the last look: this run's
            # spend changes in settle(), which looks at once (check_plan_budget).
            limit = budget.time_limit_s
            if limit is not None and self.plan_elapsed() > limit:
                self.check_plan_budget()

    def succeed(self, step_id: int, record: StepRecord, outcome: AttemptOutcome) -> int | None:
        """Record success, then start every child whose parents have all succeeded.

        Ready children are taken highest bottom level first (:meth:`priorities`; equal
        levels in plan order). Those whose tool is inline (sync code that never suspends)
        and under no concurrency limit are queued in :attr:`ready_here`, to run one after
        another in the tasks already running (they would never overlap in tasks of their
        own either); the caller runs the highest other ready child next itself when nothing
        is queued there, and the rest wait in :attr:`ready_queue` for a task, in that
        order (:meth:`stand_by`; a session starts each in a new task here, in that order).

        Returns:
            The step the caller runs next in its own task (a queued one first), or None.
        """
        record.status = "succeeded"
        record.result = outcome.result
        record.checks = outcome.checks
        record.tainted = self.taint_of.get(step_id, False)
        if step_id in self.escaped_steps:
            record.detail = ESCAPED_NOTE
        written = self.pending_clean.pop(step_id, None)
        if written:
            self.clean_files.update(written)
        self.close(step_id, record, outcome.ended_at)
        self.results[step_id] = outcome.result
        if self.observers:
            self.emit(
                events.StepSucceeded(
                    self.run_id,
                    step_id,
                    record.duration_s or 0.0,
                    record.ended_at or 0.0,
                    outcome.result,
                    record,
                )
            )
        remaining = self.remaining
        if self.driving_in_order:  # run_in_order starts each child in its turn
            for child in self.steps[step_id].children:
                remaining[child] -= 1
            return None
        task_group = self.task_group
        assert task_group is not None
        records = self.records
        steps = self.steps
        here = self.ready_here
        continue_with: int | None = None
        stopped: bool | None = None  # stopping: children left pending end skipped
        children = steps[step_id].children
        if len(children) > 1:  # highest bottom level first (module docstring)
            children = (self.start_order or self.priorities()).children.get(step_id, children)
        for child in children:
            remaining[child] -= 1
            if remaining[child] == 0 and records[child].status == "pending":
                if stopped is None:  # asked once, when a child is ready
                    scope = self._run_scope
                    stopped = scope is not None and scope.cancel_called
                if stopped:
                    continue
                tool = steps[child].tool
                if (
                    self.queues_inline_steps
                    and tool.inline
                    and not tool.is_async
                    and self.global_limiter is None
                    and self.tool_limiter.get(child) is None
                ):
                    here.append(child)  # never suspends: run in this task, no task spawned
                elif continue_with is None:
                    continue_with = child
                elif self.queues_inline_steps:
                    self.active += 1
                    self.ready_queue.append(child)
                    if not self.standbys:
                        self.start_standbys(1)
                else:
                    self.active += 1
                    task_group.start_soon(self.run_step, child)
        if here:
            if continue_with is not None:
                # a step that may suspend would hold up the steps queued here: its own task
                self.active += 1
                task_group.start_soon(self.run_step, continue_with)
            return here.popleft()
        return continue_with

    def fail(self, step_id: int, record: StepRecord, outcome: AttemptOutcome) -> None:
        """Record the failure, then skip every descendant."""
        error = outcome.error
        assert error is not None
        record.status = "failed"
        message = error_message(error)
        escaped = escape_text(message)
        record.error = StepErrorInfo(type(error).__name__, escaped)
        record.reason = reason_of(error)
        detail = detail_of(error)
        shown = escape_text(detail)
        if escaped is not message or shown is not detail:
            self.escaped_steps.add(step_id)
        record.detail = f"{shown} ({outcome.explanation})" if outcome.explanation else shown
        if step_id in self.escaped_steps:
            record.detail = f"{record.detail}; {ESCAPED_NOTE}"
        record.checks = outcome.checks
        if outcome.keep_result:
            record.result = outcome.result
        self.close(step_id, record, outcome.ended_at)
        if self.observers:
            self.emit(
                events.StepFailed(
                    self.run_id,
                    step_id,
                    record.reason,
                    record.error,
                    record.ended_at or 0.0,
                    record,
                )
            )
        self.skip_descendants(step_id)

    def refuse(self, step_id: int, record: StepRecord, detail: str) -> None:
        """A step the cost cap left no room for: skipped (``budget``), and its descendants."""
        self.budget_refused = True
        now = self.now()
        record.status = "skipped"
        record.reason = "budget"
        record.detail = detail
        record.ended_at = now
        if self.observers:
            self.emit(events.StepSkipped(self.run_id, step_id, "budget", detail, now))
        self.skip_descendants(
            step_id, "budget", f"upstream {step_id} was not started: the cost cap left no room"
        )

    def skip_descendants(
        self, failed_id: int, reason: str = "upstream_failed", detail: str | None = None
    ) -> None:
        """Mark every pending descendant of ``failed_id`` skipped (``upstream_failed``, or
        ``reason`` with ``detail`` for a step the budget did not start).

        Failed steps are never ancestors of one another (a step only starts after all its
        ancestors succeeded), so the failed ids listed on a skipped step are exactly the
        nearest failed steps upstream of it: ``"upstream 2 failed"``, ``"upstream 2, 5
        failed"``. A later failure upstream of an already skipped step is added to its detail.
        """
        steps = self.steps
        records = self.records
        seen: set[int] = set()
        stack = list(steps[failed_id].children)
        now = self.now()
        failed = detail is None
        while stack:
            step_id = stack.pop()
            if step_id in seen:
                continue
            seen.add(step_id)
            stack.extend(steps[step_id].children)
            record = records[step_id]
            if record.status == "pending":
                record.status = "skipped"
                record.reason = reason
                if failed:
                    self.failed_upstream[step_id] = [failed_id]
                    record.detail = f"upstream {failed_id} failed"
                else:
                    record.detail = detail
                record.ended_at = now
                if self.observers:
                    self.emit(
                        events.StepSkipped(self.run_id, step_id, reason, record.detail or "", now)
                    )
            elif failed and record.status == "skipped" and step_id in self.failed_upstream:
                upstream = self.failed_upstream[step_id]
                if failed_id not in upstream:
                    upstream.append(failed_id)
                    upstream.sort()
                    record.detail = f"upstream {', '.join(map(str, upstream))} failed"

    def interrupt(self, record: StepRecord, reason: str = "interrupted") -> None:
        """Close a record the run stopped on: running → cancelled, pending → skipped.

        ``reason``: ``interrupted`` (from outside), ``deadline`` or ``stalled``.
        """
        now = self.now()
        if record.status == "running":
            record.status = "cancelled"
            record.reason = reason
            record.detail = f"{self.stop_words(reason)} while this step was running"
            if record.attempt_log and record.attempt_log[-1].error is None:
                record.attempt_log[-1].reason = reason
            self.close(record.id, record)
            if self.observers:
                self.emit(events.StepCancelled(self.run_id, record.id, reason, now, record))
        elif record.status == "pending":
            record.status = "skipped"
            record.reason = reason
            record.detail = f"{self.stop_words(reason)} before this step started"
            record.ended_at = now
            if self.observers:
                self.emit(events.StepSkipped(self.run_id, record.id, reason, record.detail, now))

    def stop_words(self, reason: str) -> str:
        """What stopped the run, in words: the start of a cancelled or skipped detail."""
        if reason == "deadline":
            return f"the run reached its wall-clock cap of {self.limits.seconds_cap or 0:g} s"
        if reason == "stalled":
            stall = self.limits.stall_cap or 0.0
            return f"the run stopped on a stall (no step finished for {stall:g} s)"
        if reason == "plan_budget":
            return f"the run passed its plan-relative budget ({self.plan_budget_detail})"
        return "the run was interrupted"
