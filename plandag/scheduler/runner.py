"""The event-driven runner (ARCHITECTURE.md, "Execution").

No polling loop: every step keeps a count of parents that have not succeeded yet. When a
step succeeds, each child's count drops by one, and every child at zero is started at once
(``TaskGroup.start_soon``). When a step fails, its descendants are marked ``skipped`` with
``reason="upstream_failed"``; independent branches run to the end. This is the scheduler
LLMCompiler (Kim et al., ICML 2024) describes, without its 10 ms polling loop.

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

import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import anyio.lowlevel

from plandag.brakes.budget import Reservation
from plandag.brakes.retry import RetryPolicy
from plandag.checks.base import CheckOutcome
from plandag.compiler.compiled import CompiledStep
from plandag.dag.references import (
    ArgsTemplate,
    ReferenceResolutionError,
    compile_template,
    find_references,
    resolve_value,
)
from plandag.errors import (
    BudgetRefusedError,
    CheckFailedError,
    FailureInfo,
    InvalidOutputError,
    StepTimeoutError,
    describe_failure,
    error_message,
)
from plandag.scheduler import events, spans
from plandag.scheduler.breaker import CircuitBreaker, Dependency, DownDependency, step_dependencies
from plandag.scheduler.failures import detail_of, down_error, reason_of
from plandag.scheduler.failures import one_line as one_line
from plandag.scheduler.heartbeat import monitor
from plandag.scheduler.limits import RunLimits as RunLimits
from plandag.scheduler.overrun import await_abandonable
from plandag.scheduler.result import (
    AttemptRecord,
    RunResult,
    RunStatus,
    StepErrorInfo,
    StepRecord,
)
from plandag.scheduler.state import RunState, local_paths
from plandag.surrogates import ESCAPED_NOTE, escape_surrogates, escape_text, holds_surrogates
from plandag.telemetry import LiveSpan, tracer_provider
from plandag.tools.base import Tool, ToolContext

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


@dataclasses.dataclass(slots=True)
class _AttemptOutcome:
    """What one attempt of a step produced: a result (checks all passed), an error (with
    its :class:`FailureInfo`), or a refusal to start it (``refused``: why, in words; or
    ``down``: a dependency it needs is down, and ``error`` says which)."""

    result: Any = None
    error: BaseException | None = None
    checks: list[CheckOutcome] = dataclasses.field(default_factory=list)
    keep_result: bool = False
    failure: FailureInfo | None = None
    refused: str | None = None
    explanation: str = ""
    down: DownDependency | None = None
    escaped: bool = False
    """A lone surrogate in the result or the error message was escaped
    (:mod:`plandag.surrogates`)."""


def _end_step_span(
    span: LiveSpan, args: Mapping[str, Any] | None, outcome: _AttemptOutcome | None
) -> None:
    """End a step attempt's span with what the attempt came to (``cancelled`` when it
    never returned an outcome)."""
    if outcome is None:
        spans.end_step(span, args=args, reason="cancelled", detail="the attempt was cancelled")
    elif outcome.refused is not None:
        spans.end_step(span, args=args, reason="budget", detail=outcome.refused)
    elif outcome.error is not None:
        error = outcome.failure.error if outcome.failure is not None else outcome.error
        spans.end_step(span, args=args, error=error, reason=reason_of(error))
    else:
        spans.end_step(span, args=args, result=outcome.result)


class _Run(RunState):
    """One run: its steps started as they become ready, each to a terminal state, and its
    result (:func:`~plandag.scheduler.run_plan` is its public face)."""

    # -- the run ---------------------------------------------------------------------------

    async def run(self) -> RunResult:
        """Run every step; return the complete result (see :func:`run_plan`), inside a
        live ``plandag run`` span (:mod:`plandag.scheduler.spans`) when tracing is on."""
        span = self.run_span = spans.start_run(self.run_id, len(self.records))
        result: RunResult | None = None
        try:
            result = await self.run_inside_span()
            return result
        finally:
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
            async with anyio.create_task_group() as task_group:
                self.task_group = task_group
                starts = self.seed() if self.completed else self.compiled.roots
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
            self.active -= 1
            if not self.active:
                if self.idle_event is not None:
                    self.idle_event.set()
                if self.waiting_for_person:
                    self.update_pause()

    def seed(self) -> list[int]:
        """Mark the steps of ``completed`` succeeded with their results (a resumed run:
        they never run again) and return the steps ready to start, in plan order."""
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

    async def run_step(self, step_id: int) -> None:
        """Run a step, then go on in this same task with one of the children it made ready.

        The other ready children start in tasks of their own at once; continuing with one
        in the current task saves a task spawn per step along every chain.
        """
        next_step: int | None = step_id
        last_yield = time.perf_counter()
        if self.paused_at is not None:
            self.update_pause()  # a step runs: the clocks go on
        try:
            while next_step is not None:
                next_step = await self.run_one_step(next_step)
                if next_step is not None and time.perf_counter() - last_yield > _YIELD_EVERY_S:
                    # A chain of inline steps never suspends on its own: let other tasks
                    # (siblings, the heartbeat, the deadline) in at least every few ms.
                    await anyio.lowlevel.checkpoint()
                    last_yield = time.perf_counter()
        finally:
            self.active -= 1
            if not self.active:
                if self.idle_event is not None:
                    self.idle_event.set()
                if self.waiting_for_person:
                    self.update_pause()  # nothing runs while a person decides

    async def run_one_step(self, step_id: int) -> int | None:
        """Run one step to a terminal state, then start its ready children or prune.

        Returns:
            A ready child for the caller to run next in the same task, or None.
        """
        record = self.records[step_id]
        breaker = self.breaker
        try:
            # attempt_or_reask, without its coroutine for the attempt that succeeds
            if self.driving_in_order:
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

    def dependencies_of(self, step_id: int) -> tuple[Dependency, ...]:
        """The step's tool, and the host of its ``url`` argument when that is an http(s)
        URL (resolved once its parents succeeded; see :mod:`plandag.scheduler.breaker`)."""
        known = self.dependencies.get(step_id)
        if known is not None:
            return known
        compiled_step = self.steps[step_id]
        args = compiled_step.step.args
        url = args.get("url")
        if isinstance(url, str) and compiled_step.args_have_references:
            try:
                url = resolve_value(url, self.result_of, self.params)
            except ReferenceResolutionError:
                url = None
        found = step_dependencies(compiled_step.tool.name, {"url": url})
        self.dependencies[step_id] = found
        return found

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
        self, step_id: int, record: StepRecord, outcome: _AttemptOutcome, policy: RetryPolicy
    ) -> _AttemptOutcome:
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
                return outcome
            if following.refused is not None:
                last.retry = "budget"
                self.budget_refused = True
                outcome.explanation = f"not retried: {following.refused}"
                return outcome
            if following.error is None:
                return following
            outcome = following

    async def attempt_or_reask(
        self, step_id: int, record: StepRecord, delay_before: float
    ) -> _AttemptOutcome:
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

    async def attempt_within_limits(
        self, step_id: int, record: StepRecord, delay_before: float
    ) -> _AttemptOutcome:
        """Acquire the tool's limiter, then the global one, and run one attempt (steps run
        in order, one at a time, are within every limit without asking)."""
        tool_limiter = self.tool_limiter[step_id]
        global_limiter = self.global_limiter
        if self.driving_in_order:
            return await self.attempt(step_id, record, delay_before)
        if tool_limiter is None:
            if global_limiter is None:
                return await self.attempt(step_id, record, delay_before)
            async with global_limiter:
                return await self.attempt(step_id, record, delay_before)
        async with tool_limiter:
            if global_limiter is None:
                return await self.attempt(step_id, record, delay_before)
            async with global_limiter:
                return await self.attempt(step_id, record, delay_before)

    async def attempt(
        self, step_id: int, record: StepRecord, delay_before: float
    ) -> _AttemptOutcome:
        """One attempt: reserve its cost, resolve args, check write targets, call the tool,
        run the checks, settle the cost.

        Every ``Exception`` (and every exception group with a real leaf) is caught and
        returned in the outcome; only cancellation propagates.
        """
        compiled_step = self.steps[step_id]
        tool = compiled_step.tool
        breaker = self.breaker
        if breaker is not None and breaker.down:
            down = breaker.blocking(self.dependencies_of(step_id))
            if down is not None:
                return _AttemptOutcome(error=down_error(down), down=down)
        reservation: Reservation | None = None
        if self.capped:
            if tool.cost_estimate_usd or tool.tokens_estimate or tool.takes_context:
                reservation = self.budget.reserve(tool.cost_estimate_usd, tool.tokens_estimate)
                refused = reservation is None
            else:
                # A free attempt holds nothing; it is refused only once spend is past a cap
                # (the same answer reserve(0, 0) gives, without a reservation to settle).
                refused = self.budget.exceeded
            if refused:
                return _AttemptOutcome(
                    refused=self.budget.refusal(tool.cost_estimate_usd, tool.tokens_estimate)
                )
        record.attempts += 1
        now = self.now()
        attempt_record = AttemptRecord(record.attempts, now, delay_before_s=delay_before)
        record.attempt_log.append(attempt_record)
        if record.started_at is None:
            record.started_at = now
            self.started_monotonic[step_id] = self.monotonic()
            if self.first_started_at is None:
                self.first_started_at = now
        record.status = "running"
        context: ToolContext | None = None
        held: list[Reservation] = []
        if tool.takes_context:
            context = ToolContext(
                run_id=self.run_id,
                step_id=step_id,
                attempt=record.attempts,
                write_boundary=self.boundary,
                http_allow=self.http_allow,
                models=self.models,
                step_state=self.step_states.setdefault(step_id, {}),
                reserver=self.reserver(step_id, held),
                acquirer=self.acquirer(step_id, held, reservation),
                children=attempt_record.children,
                clock=self.now,
                effects=tool.effects,
                step_args=compiled_step.step.args,
                resolve=functools.partial(
                    resolve_value, step_result=self.result_of, params=self.params
                ),
            )
        span = (
            spans.start_step(self.run_id, step_id, tool.name, record.attempts, parent=self.run_span)
            if tracer_provider() is not None  # what start_step asks first: no span without
            else None
        )
        outcome: _AttemptOutcome | None = None
        args: Mapping[str, Any] | None = None
        try:
            try:
                if self.observers:
                    try:
                        self.emit(
                            events.StepStarted(
                                self.run_id, step_id, tool.name, record.attempts, now
                            )
                        )
                    except events.StartVeto as veto:
                        raise veto.error from None
                args = compiled_step.step.args
                if compiled_step.args_have_references:
                    args = compiled_step.args_template(self.result_of, self.params)
                if self.boundary is not None and tool.writes is not None:
                    for target in tool.write_targets(args):
                        self.boundary.check(target, step_id=step_id)
                tainted = self.taint_of[step_id] = (
                    compiled_step.tainted_output and self.output_tainted(compiled_step, args)
                )
                if not tainted and tool.writes is not None and tool.effects != "none":
                    self.pending_clean[step_id] = local_paths(tool.write_targets(args))
                if tool.inline and not tool.is_async:
                    # runs on the loop and never suspends: no cancel scope could interrupt it
                    # (Tool.invoke_inline discards a result that came past the timeout)
                    result = tool.invoke_inline(args, context)
                else:
                    result = await self.call_tool(step_id, tool, args, context)
            except Exception as error:
                outcome = self.failed_attempt(error, attempt_record)
            except BaseExceptionGroup as group:
                outcome = await self.failed_attempt_group(group, attempt_record)
            else:
                escaped = self.escape_results and holds_surrogates(result)
                if escaped:  # what no UTF-8 writer takes, escaped before anyone sees it
                    result = escape_surrogates(result)
                outcome = self.check_attempt(step_id, compiled_step, result, attempt_record)
                outcome.escaped = outcome.escaped or escaped
        finally:
            attempt_record.ended_at = self.now()
            children = attempt_record.children
            if children and self.escape_results and holds_surrogates(children):
                children[:] = escape_surrogates(children)
                self.escaped_steps.add(step_id)
            if outcome is not None and outcome.escaped:
                self.escaped_steps.add(step_id)
            for item in held:
                self.budget.settle(item, 0.0, 0)  # a hold the tool left: nothing was spent
            if (
                reservation is not None
                or context is not None
                or tool.cost_estimate_usd
                or tool.tokens_estimate
            ):
                self.settle(tool, reservation, context, attempt_record)
            if span is not None:
                _end_step_span(span, args, outcome)
        return outcome

    async def call_tool(
        self, step_id: int, tool: Tool, args: Mapping[str, Any], context: ToolContext | None
    ) -> Any:
        """Call a tool that may suspend (async, or sync in a worker thread) under its
        timeout; an async tool is abandoned past the run's deadline when it swallows its
        cancellation.

        Raises:
            StepTimeoutError: the call did not finish within the tool's timeout.
            Exception: what :meth:`Tool.invoke` raises.
        """
        if tool.is_async and self.deadline is not None:
            # an async tool that swallows its cancellation cannot hold the run
            # past its deadline: it is abandoned after a grace period
            call: Any = await_abandonable(tool.invoke(args, context))
        else:
            call = tool.invoke(args, context)
        if tool.timeout is None:
            return await call
        with anyio.move_on_after(tool.timeout) as scope:
            result = await call
        if scope.cancelled_caught:
            raise StepTimeoutError(
                f"step {step_id}: tool {tool.name} did not finish within its "
                f"timeout of {tool.timeout:g} s; a late result is discarded"
            )
        return result

    def reserver(
        self, step_id: int, held: list[Reservation]
    ) -> Callable[[float, int], Callable[[float, int], None]]:
        """``ToolContext.reserve`` of one attempt: hold the amount on the run's budget and
        return the function that settles it with the real cost (a hold left unsettled is
        released when the attempt ends), or raise
        :class:`~plandag.errors.BudgetRefusedError` and mark the run ``budget_exceeded``."""

        def reserve(usd: float, tokens: int) -> Callable[[float, int], None]:
            return self.hold(step_id, held, usd, tokens, self.budget.reserve(usd, tokens))

        return reserve

    def acquirer(
        self, step_id: int, held: list[Reservation], reservation: Reservation | None
    ) -> Callable[[float, int], Awaitable[Callable[[float, int], None]]]:
        """``ToolContext.acquire`` of one attempt: as :meth:`reserver`, through
        :meth:`Budget.acquire <plandag.brakes.budget.Budget.acquire>` (which may wait);
        the attempt's own holds (``reservation``, ``held``) are not waited for."""

        async def acquire(usd: float, tokens: int) -> Callable[[float, int], None]:
            holding = [*held, reservation] if reservation is not None else held
            granted = await self.budget.acquire(usd, tokens, holding=holding)
            return self.hold(step_id, held, usd, tokens, granted)

        return acquire

    def hold(
        self,
        step_id: int,
        held: list[Reservation],
        usd: float,
        tokens: int,
        reservation: Reservation | None,
    ) -> Callable[[float, int], None]:
        """Keep a granted ``reservation`` in ``held`` and return its settling function; or,
        when it was refused (None), raise :class:`~plandag.errors.BudgetRefusedError` and
        mark the run ``budget_exceeded``."""
        if reservation is None:
            self.budget_refused = True
            refusal = self.budget.refusal(usd, tokens).removeprefix("not started: its ")
            raise BudgetRefusedError(
                f"step {step_id}: call not sent: its {refusal}",
                estimated_usd=usd,
                estimated_tokens=tokens,
            )
        held.append(reservation)

        def settle(real_usd: float, real_tokens: int) -> None:
            self.budget.settle(reservation, real_usd, real_tokens)

        return settle

    def settle(
        self,
        tool: Tool,
        reservation: Reservation | None,
        context: ToolContext | None,
        attempt_record: AttemptRecord,
    ) -> None:
        """Charge one attempt: what the tool reported, else its estimate."""
        if context is not None and context.cost_reported:
            usd, tokens = context.cost_usd, context.tokens
        else:
            usd, tokens = tool.cost_estimate_usd, tool.tokens_estimate
        attempt_record.cost_usd = usd
        attempt_record.tokens = tokens
        charged_usd = context.charged_usd if context is not None else 0.0
        charged_tokens = context.charged_tokens if context is not None else 0
        self.budget.settle(
            reservation or Reservation(0, 0),
            max(usd - charged_usd, 0.0),  # what ToolContext.reserve holds settled already
            max(tokens - charged_tokens, 0),
        )
        self.step_spent_nanodollars += round(usd * 1_000_000_000)
        if self.plan_budget is not None:
            self.check_plan_budget()

    def failed_attempt(
        self, error: BaseException, attempt_record: AttemptRecord
    ) -> _AttemptOutcome:
        """The outcome of an attempt that raised ``error`` (not only cancellation)."""
        failure = describe_failure(error, classify=self.classify, now=self.now())
        assert failure is not None
        leaf = failure.error
        message = error_message(leaf)
        escaped = escape_text(message)
        attempt_record.error = StepErrorInfo(type(leaf).__name__, escaped)
        attempt_record.reason = reason_of(leaf)
        attempt_record.kind = failure.kind
        return _AttemptOutcome(error=leaf, failure=failure, escaped=escaped is not message)

    async def failed_attempt_group(
        self, group: BaseExceptionGroup[Any], attempt_record: AttemptRecord
    ) -> _AttemptOutcome:
        """An exception group holding cancellation (or other BaseExceptions) besides errors.

        When this run is being cancelled, the cancellation wins (the step ends
        ``cancelled``). A group holding a ``KeyboardInterrupt`` or ``SystemExit`` is raised
        again. Otherwise it is a failure like any other, reported by its real leaf; a group
        of nothing but cancellations, raised while nothing cancelled the step, is a
        permanent failure of the tool.
        """
        await anyio.lowlevel.checkpoint_if_cancelled()
        _, rest = group.split(Exception)
        if rest is not None and describe_failure(rest) is not None:
            raise group  # a KeyboardInterrupt or SystemExit leaf: not ours to swallow
        if describe_failure(group) is None:
            leaf = group.exceptions[0]
            while isinstance(leaf, BaseExceptionGroup):
                leaf = leaf.exceptions[0]
            message = error_message(leaf)
            escaped = escape_text(message)
            attempt_record.error = StepErrorInfo(type(leaf).__name__, escaped)
            attempt_record.reason = "tool_error"
            attempt_record.kind = "permanent"
            failure = FailureInfo("permanent", leaf, before_effect=False, retry_after_s=None)
            return _AttemptOutcome(error=leaf, failure=failure, escaped=escaped is not message)
        return self.failed_attempt(group, attempt_record)

    def check_attempt(
        self,
        step_id: int,
        compiled_step: CompiledStep,
        result: Any,
        attempt_record: AttemptRecord,
    ) -> _AttemptOutcome:
        """Evaluate the step's checks on ``result``; a failed check fails the attempt."""
        if not compiled_step.checks:
            return _AttemptOutcome(result=result)
        checks = self.evaluate_checks(step_id, compiled_step, result)
        failing = [outcome for outcome in checks if outcome.failed]
        if not failing:
            return _AttemptOutcome(result=result, checks=checks)
        check_error = CheckFailedError(
            ", ".join(outcome.kind for outcome in failing),
            "; ".join(f"{outcome.kind}: {outcome.detail}" for outcome in failing)
            if len(failing) > 1
            else failing[0].detail,
        )
        outcome = self.failed_attempt(check_error, attempt_record)
        outcome.result = result
        outcome.checks = checks
        outcome.keep_result = True
        return outcome

    def evaluate_checks(
        self, step_id: int, compiled_step: CompiledStep, result: Any
    ) -> list[CheckOutcome]:
        """Evaluate every check of the step on ``result`` (their args resolved first)."""

        def lookup(referenced: int) -> Any:
            return result if referenced == step_id else self.result_of(referenced)

        outcomes: list[CheckOutcome] = []
        for compiled_check in compiled_step.checks:
            definition = compiled_check.definition
            try:
                check_args = compiled_check.args_template(lookup, self.params)
            except ReferenceResolutionError as error:
                outcome = CheckOutcome(
                    definition.name, "fail", f"a check argument did not resolve: {error}"
                )
            else:
                outcome = definition.evaluate(result, check_args)
            detail = escape_text(outcome.detail)
            if detail is not outcome.detail:
                outcome = dataclasses.replace(outcome, detail=detail)
                self.escaped_steps.add(step_id)
            outcomes.append(outcome)
            if self.observers:
                self.emit(events.CheckEvaluated(self.run_id, step_id, outcome, self.now()))
        return outcomes

    # -- terminal states -------------------------------------------------------------------

    def close(self, step_id: int, record: StepRecord) -> None:
        record.ended_at = self.now()
        now = self.last_progress = self.monotonic()
        started = self.started_monotonic.get(step_id)
        if started is not None:
            record.duration_s = now - started
        if self.plan_budget is not None:
            self.check_plan_budget()

    def succeed(self, step_id: int, record: StepRecord, outcome: _AttemptOutcome) -> int | None:
        """Record success, then start every child whose parents have all succeeded.

        Returns:
            The first ready child, which the caller runs next in its own task; every
            other ready child is started in a new task here.
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
        self.close(step_id, record)
        self.results[step_id] = outcome.result
        if self.observers:
            self.emit(
                events.StepSucceeded(
                    self.run_id,
                    step_id,
                    record.duration_s or 0.0,
                    record.ended_at or 0.0,
                    outcome.result,
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
        continue_with: int | None = None
        stopped = self.stopping  # children left pending end skipped
        for child in self.steps[step_id].children:
            remaining[child] -= 1
            if remaining[child] == 0 and records[child].status == "pending" and not stopped:
                if continue_with is None:
                    continue_with = child
                else:
                    self.active += 1
                    task_group.start_soon(self.run_step, child)
        return continue_with

    def fail(self, step_id: int, record: StepRecord, outcome: _AttemptOutcome) -> None:
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
        self.close(step_id, record)
        if self.observers:
            self.emit(
                events.StepFailed(
                    self.run_id, step_id, record.reason, record.error, record.ended_at or 0.0
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
                self.emit(events.StepCancelled(self.run_id, record.id, reason, now))
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
