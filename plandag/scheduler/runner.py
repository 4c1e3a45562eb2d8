"""The event-driven runner (ARCHITECTURE.md, "Execution"; issue 2, "Scheduler").

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
   check fails the step with ``reason="check_failed"``, keeping the result on the record.

A step's exception is caught and recorded on the step; it never reaches the task group, so
siblings are never cancelled and the caller never sees an ``ExceptionGroup``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
from anyio.abc import TaskGroup
from pydantic import ValidationError

from plandag.checks.base import CheckOutcome
from plandag.compiler.compiled import CompiledPlan, CompiledStep
from plandag.dag.references import ReferenceResolutionError, find_references, resolve_value
from plandag.errors import BoundaryError, CheckFailedError, StepError, StepTimeoutError
from plandag.scheduler import events
from plandag.scheduler.result import RunResult, RunStatus, StepErrorInfo, StepRecord
from plandag.tools.base import ToolContext

__all__ = ["run_plan", "run_plan_sync"]

logger = logging.getLogger("plandag.scheduler")

_DETAIL_CHARACTERS = 300


def _holds_reference_text(value: Any) -> bool:
    """True when a string anywhere in ``value`` contains ``<`` (it may hold a reference)."""
    if isinstance(value, str):
        return "<" in value
    if isinstance(value, Mapping):
        return any(_holds_reference_text(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(_holds_reference_text(item) for item in value)
    return False


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    if len(line) > _DETAIL_CHARACTERS:
        return line[: _DETAIL_CHARACTERS - 1] + "…"
    return line


def _reason_of(error: BaseException) -> str:
    """The stable reason code recorded for a step that failed with ``error``."""
    if isinstance(error, StepError):
        return error.reason
    if isinstance(error, BoundaryError):
        return "write_outside_boundary"
    if isinstance(error, ValidationError):
        return "invalid_args"
    if isinstance(error, ReferenceResolutionError):
        return "reference_error"
    if isinstance(error, TimeoutError):
        return "timeout"
    return "tool_error"


def _detail_of(error: BaseException) -> str:
    """A one-line summary of ``error`` for a person."""
    if isinstance(error, ValidationError):
        problems = [
            f"{'.'.join(str(part) for part in item['loc']) or '(args)'}: {item['msg']}"
            for item in error.errors()
        ]
        return _one_line("invalid arguments: " + "; ".join(problems))
    if isinstance(error, CheckFailedError):
        return _one_line(str(error))
    return _one_line(f"{type(error).__name__}: {error}")


@dataclasses.dataclass(slots=True)
class _AttemptOutcome:
    """What one attempt of a step produced: a result (checks all passed) or an error."""

    result: Any = None
    error: Exception | None = None
    checks: list[CheckOutcome] = dataclasses.field(default_factory=list)
    keep_result: bool = False


class _Run:
    """The state of one run; :func:`run_plan` is its public face."""

    def __init__(
        self,
        compiled: CompiledPlan,
        run_id: str,
        max_concurrency: int | None,
        tool_limits: Mapping[str, int] | None,
        observers: Sequence[events.Observer],
    ) -> None:
        if max_concurrency is not None and max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1 or None, not {max_concurrency}")
        limits: dict[str, int | None] = dict(tool_limits or {})
        for name, limit in limits.items():
            if limit is None or limit < 1:
                raise ValueError(f"tool_limits[{name!r}] must be >= 1, not {limit}")
        self.compiled = compiled
        self.run_id = run_id
        self.steps: Mapping[int, CompiledStep] = compiled.steps
        self.params = compiled.params
        self.boundary = compiled.write_boundary
        self.observers = tuple(observers)
        self.broken_observers: set[int] = set()
        self.records: dict[int, StepRecord] = {}
        self.remaining: dict[int, int] = {}
        self.results: dict[int, Any] = {}
        self.started_monotonic: dict[int, float] = {}
        self.failed_upstream: dict[int, list[int]] = {}
        self.args_have_references: dict[int, bool] = {}
        self.global_limiter = (
            anyio.CapacityLimiter(max_concurrency) if max_concurrency is not None else None
        )
        self.tool_limiter: dict[int, anyio.CapacityLimiter | None] = {}
        limiters_by_tool: dict[str, anyio.CapacityLimiter] = {}
        for step_id in compiled.order:
            compiled_step = self.steps[step_id]
            tool = compiled_step.tool
            self.records[step_id] = StepRecord(id=step_id, tool=tool.name)
            self.remaining[step_id] = len(compiled_step.parents)
            self.args_have_references[step_id] = _holds_reference_text(compiled_step.step.args)
            limit = limits.get(tool.name, tool.max_concurrency)
            if limit is not None and tool.name not in limiters_by_tool:
                limiters_by_tool[tool.name] = anyio.CapacityLimiter(limit)
            self.tool_limiter[step_id] = limiters_by_tool.get(tool.name)
        self.task_group: TaskGroup | None = None

    # -- events --------------------------------------------------------------------------

    def emit(self, event: events.Event) -> None:
        """Send ``event`` to every observer; an observer that raises is logged once."""
        for observer in self.observers:
            try:
                observer(event)
            except Exception:
                if id(observer) not in self.broken_observers:
                    self.broken_observers.add(id(observer))
                    logger.warning(
                        "run %s: observer %r raised on %s; the run goes on and later errors "
                        "of this observer are not logged",
                        self.run_id,
                        observer,
                        type(event).__name__,
                        exc_info=True,
                    )

    # -- the run ---------------------------------------------------------------------------

    async def run(self) -> RunResult:
        """Run every step; return the complete result (see :func:`run_plan`)."""
        started_at = time.time()
        started = time.perf_counter()
        if self.observers:
            self.emit(events.RunStarted(self.run_id, len(self.records), started_at))
        cancelled = anyio.get_cancelled_exc_class()
        try:
            async with anyio.create_task_group() as task_group:
                self.task_group = task_group
                for step_id in self.compiled.roots:
                    task_group.start_soon(self.run_step, step_id)
        except cancelled:
            # Cancelled from outside: every step recorded where it got to; return the
            # complete picture rather than lose it (documented in run_plan).
            pass
        return self.finish(started_at, started)

    def finish(self, started_at: float, started: float) -> RunResult:
        """Close every record still open, build the RunResult and emit RunFinished."""
        for record in self.records.values():
            if record.status in ("pending", "running"):
                self.interrupt(record)
        statuses = [record.status for record in self.records.values()]
        status: RunStatus
        if any(record.reason == "interrupted" for record in self.records.values()):
            status = "interrupted"
        elif all(item == "succeeded" for item in statuses):
            status = "succeeded"
        else:
            status = "failed"
        result = RunResult(
            run_id=self.run_id,
            status=status,
            steps=self.records,
            output=self.resolve_output(),
            started_at=started_at,
            ended_at=time.time(),
            duration_s=time.perf_counter() - started,
        )
        if self.observers:
            self.emit(events.RunFinished(self.run_id, result, result.ended_at))
        return result

    def resolve_output(self) -> Any:
        """``plan.output`` resolved, when every step it references succeeded; else None."""
        output = self.compiled.plan.output
        if output is None:
            return None
        for _, reference in find_references(output):
            step_id = reference.step_id
            if step_id is not None and (
                step_id not in self.records or self.records[step_id].status != "succeeded"
            ):
                return None
        try:
            return resolve_value(output, self.result_of, self.params)
        except ReferenceResolutionError as error:
            logger.warning("run %s: the plan's output did not resolve: %s", self.run_id, error)
            return None

    def result_of(self, step_id: int) -> Any:
        """The result of a succeeded step, for reference resolution.

        Raises:
            ReferenceResolutionError: the step has no result (it has not succeeded).
        """
        try:
            return self.results[step_id]
        except KeyError:
            raise ReferenceResolutionError(
                f"<step_{step_id}_result>: step {step_id} has no result (it has not "
                "succeeded); add it to depends_on"
            ) from None

    # -- one step --------------------------------------------------------------------------

    async def run_step(self, step_id: int) -> None:
        """Run one step to a terminal state, then start its ready children or prune."""
        record = self.records[step_id]
        try:
            outcome = await self.attempt_within_limits(step_id, record)
        except anyio.get_cancelled_exc_class():
            self.interrupt(record)
            raise
        # A retry loop belongs here: decide from type(outcome.error), back off, attempt again.
        if outcome.error is None:
            self.succeed(step_id, record, outcome)
        else:
            self.fail(step_id, record, outcome)

    async def attempt_within_limits(self, step_id: int, record: StepRecord) -> _AttemptOutcome:
        """Acquire the tool's limiter, then the global one, and run one attempt."""
        tool_limiter = self.tool_limiter[step_id]
        global_limiter = self.global_limiter
        if tool_limiter is None:
            if global_limiter is None:
                return await self.attempt(step_id, record)
            async with global_limiter:
                return await self.attempt(step_id, record)
        async with tool_limiter:
            if global_limiter is None:
                return await self.attempt(step_id, record)
            async with global_limiter:
                return await self.attempt(step_id, record)

    async def attempt(self, step_id: int, record: StepRecord) -> _AttemptOutcome:
        """One attempt: resolve args, check write targets, call the tool, run the checks.

        Every ``Exception`` is caught and returned in the outcome; only cancellation
        propagates.
        """
        compiled_step = self.steps[step_id]
        tool = compiled_step.tool
        record.attempts += 1
        if record.started_at is None:
            record.started_at = time.time()
            self.started_monotonic[step_id] = time.perf_counter()
        record.status = "running"
        if self.observers:
            self.emit(
                events.StepStarted(self.run_id, step_id, tool.name, record.attempts, time.time())
            )
        try:
            args: Mapping[str, Any] = compiled_step.step.args
            if self.args_have_references[step_id]:
                args = resolve_value(args, self.result_of, self.params)
            if self.boundary is not None and tool.writes is not None:
                for target in tool.write_targets(args):
                    self.boundary.check(target, step_id=step_id)
            context = (
                ToolContext(run_id=self.run_id, step_id=step_id, attempt=record.attempts)
                if tool.takes_context
                else None
            )
            if tool.timeout is None:
                result = await tool.invoke(args, context)
            else:
                with anyio.move_on_after(tool.timeout) as scope:
                    result = await tool.invoke(args, context)
                if scope.cancelled_caught:
                    raise StepTimeoutError(
                        f"step {step_id}: tool {tool.name} did not finish within its timeout "
                        f"of {tool.timeout:g} s; a late result is discarded"
                    )
        except Exception as error:
            return _AttemptOutcome(error=error)
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
        return _AttemptOutcome(result=result, error=check_error, checks=checks, keep_result=True)

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
                check_args = resolve_value(compiled_check.args, lookup, self.params)
            except ReferenceResolutionError as error:
                outcome = CheckOutcome(
                    definition.name, "fail", f"a check argument did not resolve: {error}"
                )
            else:
                outcome = definition.evaluate(result, check_args)
            outcomes.append(outcome)
            if self.observers:
                self.emit(events.CheckEvaluated(self.run_id, step_id, outcome, time.time()))
        return outcomes

    # -- terminal states -------------------------------------------------------------------

    def close(self, step_id: int, record: StepRecord) -> None:
        record.ended_at = time.time()
        started = self.started_monotonic.get(step_id)
        if started is not None:
            record.duration_s = time.perf_counter() - started

    def succeed(self, step_id: int, record: StepRecord, outcome: _AttemptOutcome) -> None:
        """Record success, then start every child whose parents have all succeeded."""
        record.status = "succeeded"
        record.result = outcome.result
        record.checks = outcome.checks
        self.close(step_id, record)
        self.results[step_id] = outcome.result
        if self.observers:
            self.emit(
                events.StepSucceeded(
                    self.run_id, step_id, record.duration_s or 0.0, record.ended_at or 0.0
                )
            )
        task_group = self.task_group
        assert task_group is not None
        remaining = self.remaining
        records = self.records
        for child in self.steps[step_id].children:
            remaining[child] -= 1
            if remaining[child] == 0 and records[child].status == "pending":
                task_group.start_soon(self.run_step, child)

    def fail(self, step_id: int, record: StepRecord, outcome: _AttemptOutcome) -> None:
        """Record the failure, then skip every descendant."""
        error = outcome.error
        assert error is not None
        record.status = "failed"
        record.error = StepErrorInfo(type(error).__name__, str(error))
        record.reason = _reason_of(error)
        record.detail = _detail_of(error)
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

    def skip_descendants(self, failed_id: int) -> None:
        """Mark every pending descendant of ``failed_id`` skipped (``upstream_failed``).

        Failed steps are never ancestors of one another (a step only starts after all its
        ancestors succeeded), so the failed ids listed on a skipped step are exactly the
        nearest failed steps upstream of it: ``"upstream 2 failed"``, ``"upstream 2, 5
        failed"``. A later failure upstream of an already skipped step is added to its detail.
        """
        steps = self.steps
        records = self.records
        seen: set[int] = set()
        stack = list(steps[failed_id].children)
        now = time.time()
        while stack:
            step_id = stack.pop()
            if step_id in seen:
                continue
            seen.add(step_id)
            stack.extend(steps[step_id].children)
            record = records[step_id]
            if record.status == "pending":
                upstream = self.failed_upstream[step_id] = [failed_id]
                record.status = "skipped"
                record.reason = "upstream_failed"
                record.detail = f"upstream {failed_id} failed"
                record.ended_at = now
                if self.observers:
                    self.emit(
                        events.StepSkipped(self.run_id, step_id, record.reason, record.detail, now)
                    )
            elif record.status == "skipped" and step_id in self.failed_upstream:
                upstream = self.failed_upstream[step_id]
                if failed_id not in upstream:
                    upstream.append(failed_id)
                    upstream.sort()
                    record.detail = f"upstream {', '.join(map(str, upstream))} failed"

    def interrupt(self, record: StepRecord) -> None:
        """Close a record the run was interrupted on: running → cancelled, pending → skipped."""
        now = time.time()
        if record.status == "running":
            record.status = "cancelled"
            record.reason = "interrupted"
            record.detail = "the run was interrupted while this step was running"
            self.close(record.id, record)
            if self.observers:
                self.emit(events.StepCancelled(self.run_id, record.id, record.reason, now))
        elif record.status == "pending":
            record.status = "skipped"
            record.reason = "interrupted"
            record.detail = "the run was interrupted before this step started"
            record.ended_at = now
            if self.observers:
                self.emit(
                    events.StepSkipped(self.run_id, record.id, record.reason, record.detail, now)
                )


async def run_plan(
    compiled: CompiledPlan,
    *,
    run_id: str | None = None,
    max_concurrency: int | None = None,
    tool_limits: Mapping[str, int] | None = None,
    observers: Sequence[events.Observer] = (),
) -> RunResult:
    """Run a compiled plan: every step whose parents all succeeded starts at once.

    Args:
        compiled: the plan, from :func:`plandag.compiler.compile_plan`.
        run_id: the run's id (default: a random hex id); tools see it in ``ctx.run_id``.
        max_concurrency: at most this many steps running at once (None: no limit).
        tool_limits: per-tool limits by tool name, overriding ``tool.max_concurrency``.
        observers: callables receiving every :mod:`~plandag.scheduler.events` event in
            order; one that raises is logged once and ignored.

    Returns:
        A :class:`RunResult` covering every step, each in exactly one terminal state.
        ``status`` is ``succeeded`` when every step succeeded, else ``failed``.

        If the surrounding cancel scope is cancelled (Ctrl-C, a caller's deadline),
        running steps end ``cancelled`` and steps not started end ``skipped``, both with
        reason ``interrupted``; ``run_plan`` then *returns* that complete result with
        status ``interrupted`` instead of raising, so the caller always gets the full
        picture. The cancellation is not lost: anyio cancellation is level-triggered, so
        the caller's next checkpoint inside the cancelled scope raises it again. (A
        consequence: ``anyio.fail_after`` around ``run_plan`` returns the interrupted result
        rather than raising ``TimeoutError``; test ``result.status`` instead.)

    Raises:
        ValueError: ``max_concurrency`` or a ``tool_limits`` value below 1.

    Step failures never raise: they are recorded on the step (see :class:`StepRecord`).
    """
    run = _Run(
        compiled,
        run_id if run_id is not None else uuid.uuid4().hex[:16],
        max_concurrency,
        tool_limits,
        observers,
    )
    return await run.run()


def run_plan_sync(
    compiled: CompiledPlan,
    *,
    run_id: str | None = None,
    max_concurrency: int | None = None,
    tool_limits: Mapping[str, int] | None = None,
    observers: Sequence[events.Observer] = (),
) -> RunResult:
    """:func:`run_plan` from synchronous code, on a new event loop (``anyio.run``, asyncio).

    Arguments, return value and errors as :func:`run_plan`. Must not be called from a
    thread that already runs an event loop.
    """

    # A closure, not functools.partial: anyio names the main task after repr(func), and a
    # partial's repr would format the whole compiled plan (O(steps) before anything runs).
    async def main() -> RunResult:
        return await run_plan(
            compiled,
            run_id=run_id,
            max_concurrency=max_concurrency,
            tool_limits=tool_limits,
            observers=observers,
        )

    return anyio.run(main)
