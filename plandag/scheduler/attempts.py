"""One attempt of one step (:class:`StepAttempts`, a layer of the runner:
:mod:`plandag.scheduler.runner` documents the rules): the concurrency limits, the cost
reserved and settled, the arguments resolved and checked against the write boundary, the
tool called under its timeout with its :class:`~plandag.tools.base.ToolContext` and its
live span, a failure described, and the step's checks evaluated on the result.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import anyio
import anyio.lowlevel

from plandag.brakes.budget import Reservation
from plandag.checks.base import CheckOutcome
from plandag.compiler.compiled import CompiledStep
from plandag.dag.references import (
    ReferenceResolutionError,
    resolve_value,
)
from plandag.errors import (
    BudgetRefusedError,
    CheckFailedError,
    FailureInfo,
    StepTimeoutError,
    describe_failure,
    error_message,
)
from plandag.scheduler import events, spans
from plandag.scheduler.breaker import Dependency, DownDependency, step_dependencies
from plandag.scheduler.failures import down_error, reason_of
from plandag.scheduler.overrun import run_in_context
from plandag.scheduler.result import AttemptRecord, StepErrorInfo, StepRecord
from plandag.scheduler.state import RunState, local_paths
from plandag.surrogates import escape_surrogates, escape_text, holds_surrogates
from plandag.telemetry import LiveSpan
from plandag.tools.base import Tool, ToolContext

logger = logging.getLogger("plandag.scheduler")

__all__ = ["ABANDONED_CALL", "AttemptOutcome", "StepAttempts", "end_step_span"]

ABANDONED_CALL = "the step's call was abandoned: it ignored its cancellation"
"""The message of the cancellation an abandoned step's task ends with when its call ends."""


@dataclasses.dataclass(slots=True)
class AttemptOutcome:
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
    ended_at: float | None = None
    """When the attempt that produced this outcome ended (wall clock, seconds since the
    epoch; the same reading as its :class:`AttemptRecord`'s ``ended_at``); None when no
    attempt was made, or when the step ends later than that attempt (a retry not made
    after its backoff)."""


def end_step_span(
    span: LiveSpan, args: Mapping[str, Any] | None, outcome: AttemptOutcome | None
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


class StepAttempts(RunState):
    """One attempt of a step, its cost and its checks (module docstring)."""

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

    async def attempt_within_limits(
        self, step_id: int, record: StepRecord, delay_before: float
    ) -> AttemptOutcome:
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
    ) -> AttemptOutcome:
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
                return AttemptOutcome(error=down_error(down), down=down)
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
                return AttemptOutcome(
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
        held: Sequence[Reservation] = ()  # what a tool given a context holds (none without)
        if tool.takes_context:
            holds: list[Reservation] = []
            held = holds
            context = ToolContext(
                run_id=self.run_id,
                step_id=step_id,
                attempt=record.attempts,
                write_boundary=self.boundary,
                http_allow=self.http_allow,
                models=self.models,
                step_state=self.step_states.setdefault(step_id, {}),
                reserver=self.reserver(step_id, holds),
                acquirer=self.acquirer(step_id, holds, reservation),
                children=attempt_record.children,
                clock=self.now,
                effects=tool.effects,
                step_args=compiled_step.step.args,
                resolve=functools.partial(
                    resolve_value, step_result=self.result_of, params=self.params
                ),
            )
        span = (
            spans.start_step(
                self.run_id,
                step_id,
                tool.name,
                record.attempts,
                parent=self.run_span,
                description=tool.description,
            )
            if self.tracing  # a tracer provider was configured when the run started
            else None
        )
        outcome: AttemptOutcome | None = None
        args: Mapping[str, Any] | None = None
        abandoned = False
        try:
            try:
                if self.observers:
                    try:
                        self.emit(
                            events.StepStarted(
                                self.run_id, step_id, tool.name, record.attempts, now, tool.effects
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
                elif tool.timeout is not None:
                    result = await self.call_tool(step_id, tool, args, context)
                elif tool.is_async and self.deadline is not None:
                    calling = self.calling
                    if calling is not None:
                        # The run's task group abandons this task itself if the call ignores
                        # its cancellation (plandag.scheduler.tasks): the call runs here, in
                        # a copy of the context, as in a task of its own.
                        calling[step_id] = (
                            tool,
                            attempt_record,
                            held,
                            reservation,
                            context,
                            span,
                            args,
                        )
                        try:
                            result = await run_in_context(
                                tool.invoke(args, context), contextvars.copy_context()
                            )
                        finally:
                            if calling.pop(step_id, None) is None:
                                # abandoned: the attempt was ended for it, its outcome dropped
                                abandoned = True
                                raise asyncio.CancelledError(ABANDONED_CALL)
                    else:  # call_tool without a timeout, one coroutine fewer per attempt
                        result = await self.tool_calls.call(tool.invoke(args, context))
                else:
                    result = await tool.invoke(args, context)
            except Exception as error:
                outcome = self.failed_attempt(error, attempt_record)
            except BaseExceptionGroup as group:
                outcome = await self.failed_attempt_group(group, attempt_record)
            else:
                escaped = result is not None and self.escape_results and holds_surrogates(result)
                if escaped:  # what no UTF-8 writer takes, escaped before anyone sees it
                    result = escape_surrogates(result)
                if compiled_step.checks:
                    outcome = self.check_attempt(step_id, compiled_step, result, attempt_record)
                    outcome.escaped = outcome.escaped or escaped
                else:  # check_attempt's answer for a step without checks
                    outcome = AttemptOutcome(result=result, escaped=escaped)
        finally:
            if not abandoned:
                self.end_attempt(
                    step_id, tool, attempt_record, held, reservation, context, span, args, outcome
                )
        return outcome

    def end_attempt(
        self,
        step_id: int,
        tool: Tool,
        attempt_record: AttemptRecord,
        held: Sequence[Reservation],
        reservation: Reservation | None,
        context: ToolContext | None,
        span: LiveSpan | None,
        args: Mapping[str, Any] | None,
        outcome: AttemptOutcome | None,
    ) -> None:
        """Close an attempt: its end time, what it left to escape, its cost settled, its
        span ended (``outcome`` None: it never returned one, it was cancelled). The end's
        reading is kept on ``outcome`` too: the step ends when its last attempt ends."""
        ended_at = attempt_record.ended_at = self.now()
        if outcome is not None:
            outcome.ended_at = ended_at
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
            end_step_span(span, args, outcome)

    def abandon_attempts(self, calls: dict[Any, Any]) -> None:
        """Close the attempts whose calls the run's task group abandoned (their tasks keep
        running; each drops its outcome when its call ends): ``calls`` maps a step id to
        what :meth:`end_attempt` takes besides it, the outcome left out."""
        for step_id, call in calls.items():
            tool, attempt_record, held, reservation, context, span, args = call
            self.end_attempt(
                step_id, tool, attempt_record, held, reservation, context, span, args, None
            )

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
            call: Any = self.tool_calls.call(tool.invoke(args, context))
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

    def failed_attempt(self, error: BaseException, attempt_record: AttemptRecord) -> AttemptOutcome:
        """The outcome of an attempt that raised ``error`` (not only cancellation)."""
        failure = describe_failure(error, classify=self.classify, now=self.now())
        assert failure is not None
        leaf = failure.error
        message = error_message(leaf)
        escaped = escape_text(message)
        attempt_record.error = StepErrorInfo(type(leaf).__name__, escaped)
        attempt_record.reason = reason_of(leaf)
        attempt_record.kind = failure.kind
        return AttemptOutcome(error=leaf, failure=failure, escaped=escaped is not message)

    async def failed_attempt_group(
        self, group: BaseExceptionGroup[Any], attempt_record: AttemptRecord
    ) -> AttemptOutcome:
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
            return AttemptOutcome(error=leaf, failure=failure, escaped=escaped is not message)
        return self.failed_attempt(group, attempt_record)

    def check_attempt(
        self,
        step_id: int,
        compiled_step: CompiledStep,
        result: Any,
        attempt_record: AttemptRecord,
    ) -> AttemptOutcome:
        """Evaluate the step's checks on ``result``; a failed check fails the attempt."""
        if not compiled_step.checks:
            return AttemptOutcome(result=result)
        checks = self.evaluate_checks(step_id, compiled_step, result)
        failing = [outcome for outcome in checks if outcome.failed]
        if not failing:
            return AttemptOutcome(result=result, checks=checks)
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
