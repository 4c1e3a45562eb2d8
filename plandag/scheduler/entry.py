"""Running a compiled plan: :func:`run_plan` and :func:`run_plan_sync` (ARCHITECTURE.md,
"Execution", "People in the loop").

A plan that needs no decision runs at once on the engine of :mod:`plandag.scheduler.runner`.
A plan that an approver must decide on runs as ``plandag exec`` and the ``Agent`` run it:
in a :class:`~plandag.scheduler.session.RunSession` opened with its effects held, so that
the steps without effects run while the approver decides; when the decision comes, its
step choices are applied to the run (:meth:`~plandag.scheduler.session.RunSession.amend`:
edited arguments, rejected steps and every step downstream of them dropped), then the
steps with effects are released (:meth:`~plandag.scheduler.session.RunSession.approve_effects`);
a rejection drops every step not started (:meth:`~plandag.scheduler.session.RunSession.reject`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from plandag.brakes import Unlimited
from plandag.brakes.budget import Budget
from plandag.brakes.clock import Clock
from plandag.brakes.retry import RetryPolicy
from plandag.compiler.compiled import CompiledPlan
from plandag.errors import Classifier, classify_error
from plandag.scheduler import events
from plandag.scheduler.estimate import PlanEstimate, estimate_plan
from plandag.scheduler.failures import one_line
from plandag.scheduler.limits import RunLimits
from plandag.scheduler.result import EscalationMode, RunResult, RunStatus, StepRecord
from plandag.scheduler.runner import _Run
from plandag.scheduler.services import EscalationHook
from plandag.scheduler.session import RunSession, open_session
from plandag.tools.boundary import WriteBoundary

if TYPE_CHECKING:
    from plandag.access import ModelAccessProtocol
    from plandag.scheduler.gate import ApprovalRequest, ApproveArgument, Approver

__all__ = ["run_plan", "run_plan_sync"]

logger = logging.getLogger("plandag.scheduler")

_DEFAULT_LIMITS = RunLimits()


def _new_run_id() -> str:
    """A random run id: 16 hex digits, the first half of a random UUID version 4's hex
    (RFC 9562, section 5.4: the version nibble ``4`` at position 12), what
    ``uuid.uuid4().hex[:16]`` gives, without building the UUID."""
    random = bytearray(os.urandom(8))
    random[6] = (random[6] & 0x0F) | 0x40
    return random.hex()


@dataclasses.dataclass(frozen=True, slots=True)
class _Asking:
    """A plan that waits for an approver's decision: the plan as it runs (with its run's
    write boundary), the request, and who answers it."""

    compiled: CompiledPlan
    request: ApprovalRequest
    approver: Approver


async def run_plan(
    compiled: CompiledPlan,
    *,
    approve: ApproveArgument | None = None,
    write_boundary: WriteBoundary | Unlimited | None = None,
    run_id: str | None = None,
    max_concurrency: int | None = None,
    tool_limits: Mapping[str, int] | None = None,
    observers: Sequence[events.Observer] = (),
    limits: RunLimits | None = None,
    retry: RetryPolicy | None = None,
    classify: Classifier = classify_error,
    clock: Clock | None = None,
    budget: Budget | None = None,
    completed: Mapping[int, Any] | None = None,
    escalate: EscalationMode = "person",
    on_escalation: EscalationHook | None = None,
    plan_estimate: PlanEstimate | None = None,
    tool_durations: Mapping[str, float] | None = None,
    models: ModelAccessProtocol | None = None,
    escape_results: bool = True,
) -> RunResult:
    """Run a compiled plan: every step whose parents all succeeded starts at once.

    Args:
        compiled: the plan, from :func:`plandag.compiler.compile_plan`.
        approve: who approves a plan with effects (ARCHITECTURE.md, "People in the loop"):
            an approver (a callable taking an
            :class:`~plandag.approval.ApprovalRequest` and returning a
            :class:`~plandag.approval.Decision`, sync or async), ``"auto"`` (``write``
            effects approved; ``irreversible`` ones need an approver, so the run ends
            ``awaiting_approval``) or ``"never"`` (a plan with effects ends
            ``awaiting_approval``, nothing run). Required for a plan with effects (else
            :class:`~plandag.approval.ApprovalRequiredError`, before anything runs);
            read-only plans need none. While the approver decides, the steps without
            effects run (those that send nothing tainted out); steps with effects start
            once it approves. A :class:`~plandag.approval.Decision` may approve step by
            step: ``edit_steps`` gives steps new argument values (compiled again, under
            the plan's write boundary), ``reject_steps`` drops steps and every step
            downstream of them (each ends ``skipped``, reason ``rejected``, and does not
            fail the run: the approved version has no such step). A rejection ends the
            run ``rejected``: nothing with effects runs, steps not started end
            ``skipped``, reason ``rejected``. Time waiting for the approver counts against
            no brake while no step runs.
        write_boundary: where steps may write when the plan was compiled without a
            boundary: default the working directory (as ``plandag exec``);
            :data:`~plandag.brakes.UNLIMITED` lifts it. A plan compiled with a boundary
            keeps its own (this must then be None). Checked at run time on resolved
            arguments.
        run_id: the run's id (default: a random hex id); tools see it in ``ctx.run_id``.
        max_concurrency: at most this many steps running at once (None: no limit).
        tool_limits: per-tool limits by tool name, overriding ``tool.max_concurrency``.
        observers: callables receiving every :mod:`~plandag.scheduler.events` event in
            order; one that raises is logged once and ignored. Heartbeats and stalls go
            to them too (:class:`~plandag.scheduler.heartbeat.JsonlHeartbeatWriter` is one).
        limits: the run's brakes (:class:`RunLimits`: wall-clock cap, cost and token caps,
            heartbeat, stall); default ``RunLimits()``: every brake on with the values of
            :data:`plandag.brakes.JOB_BRAKES` (``$1.00``, 200,000 tokens, 15 min, stop after
            120 s without a finished step), as on the command line.
        retry: how failed steps are retried (:class:`~plandag.brakes.retry.RetryPolicy`;
            the CLI passes ``RetryPolicy(retries=N)``, N default 2); None: one attempt per
            step, never retried.
        classify: the rule sorting errors into transient and permanent (default
            :func:`plandag.errors.classify_error`).
        clock: where times and retry delays come from (default: the system clock; tests
            pass a :class:`~plandag.brakes.clock.VirtualClock`).
        budget: a :class:`~plandag.brakes.budget.Budget` shared with other runs (a
            batch's documents under one cost cap); its caps replace ``limits``' cost and
            token caps, and ``RunResult.spent_*`` then report the shared budget's totals.
            Default: a budget of this run's own, from ``limits``.
        completed: results of steps that already succeeded, by step id (a resumed run,
            ``plandag resume``): those steps end ``succeeded`` with these results without
            running (no events for them) and their children start when ready.
        escalate: what a run that cannot go on by itself comes to
            (:data:`~plandag.scheduler.result.EscalationMode`): ``person`` (default) ends
            ``escalated``, ``never`` ends ``gave_up``.
        on_escalation: the hook called once the run ended ``escalated``
            (:class:`~plandag.scheduler.services.EscalationHook`, such as
            :class:`plandag.escalation.EscalationHooks`, which calls its callback, command
            and URL with the case as a dict: :func:`plandag.escalation.run_context`);
            :func:`plandag.run_plan` takes a plain function too. Its failure does not
            change the result.
        plan_estimate: the plan's estimate the plan-relative limits
            (``limits.plan_cost_factor``, ``limits.plan_time_factor``) are measured against;
            default: :func:`~plandag.scheduler.estimate.estimate_plan` of ``compiled`` with
            ``tool_durations`` (the steps of ``completed`` count nothing). Its steps'
            seconds also weigh the order ready steps start in (longest remaining path
            first; without an estimate every step weighs 1).
        tool_durations: seconds per tool name measured in the run store
            (:meth:`plandag.store.Store.tool_durations`), replacing declared figures.
        models: what model-backed steps (``llm``, ``agent``) call
            (:class:`plandag.access.ModelAccessProtocol`; those tools take a
            :class:`plandag.executors.ModelAccess`: the client of a provider, the default
            executor model, prices), given to tools as ``ctx.models``; None (default): a
            plan with such steps fails them with a message saying to pass it.
        escape_results: look through each step's result, and what its attempts recorded
            doing inside, for lone surrogates (text UTF-8 cannot encode: a file read with
            ``unicode_escape``, a JSON body holding ``"\\ud800"``, a model's reply) and
            escape them (:mod:`plandag.surrogates`) before a later step, an observer or the
            record sees them; the step's ``detail`` then says so
            (:data:`plandag.surrogates.ESCAPED_NOTE`). Error and check messages are always
            escaped. True by default; a caller that escapes what it keeps itself may turn
            it off to save the walk over every result (``plandag extract nfe`` escapes each
            record once). A run an approver decides on escapes whatever this says.

    Returns:
        A :class:`RunResult` covering every step, each in exactly one terminal state.
        ``status``: ``succeeded`` when every step succeeded; ``failed`` when some failed;
        ``timed_out`` at the wall-clock cap or a stop on a stall; ``budget_exceeded`` when
        the cost cap kept a step or a retry from starting; ``escalated`` (with
        ``escalation="plan_budget"``) when spend or time passed the plan-relative limits;
        ``awaiting_approval`` or ``rejected`` (every step ``skipped`` with that reason) when
        the plan was not approved; ``interrupted`` (below).
        ``RunResult.progress()`` says what finished, what was running, what never started.

        If the surrounding cancel scope is cancelled (Ctrl-C, a caller's deadline),
        running steps end ``cancelled`` and steps not started end ``skipped``, both with
        reason ``interrupted``; ``run_plan`` then *returns* that complete result with
        status ``interrupted`` instead of raising, so the caller always gets the full
        picture. The cancellation is not lost: anyio cancellation is level-triggered, so
        the caller's next checkpoint inside the cancelled scope raises it again. (A
        consequence: ``anyio.fail_after`` around ``run_plan`` returns the interrupted result
        rather than raising ``TimeoutError``; test ``result.status`` instead, or use
        ``RunLimits(max_seconds=...)``.)

    Raises:
        ApprovalRequiredError: the plan has steps with effects and ``approve`` is None.
        StaleDecisionError: the approver's decision names another plan hash.
        InvalidDecisionError: the decision's step choices do not fit the plan (a step it
            does not have, an edit that does not compile or leaves the write boundary),
            or name a step that has already started while the approver decided; nothing
            with effects ran, the steps that were running were cancelled.
        ValueError: ``max_concurrency`` or a ``tool_limits`` value below 1, a bad
            ``approve``, or a ``write_boundary`` for a plan compiled with its own.
        TypeError: ``on_escalation`` is not an
            :class:`~plandag.scheduler.services.EscalationHook` (a plain function: give it
            to :func:`plandag.run_plan`, or wrap it in
            ``plandag.escalation.EscalationHooks(callback=...)``); nothing ran.

    Step failures never raise: they are recorded on the step (see :class:`StepRecord`).
    """
    if on_escalation is not None and not isinstance(on_escalation, EscalationHook):
        raise TypeError(
            f"on_escalation={on_escalation!r}: plandag.scheduler.run_plan is handed an "
            "escalation hook (an object with async run_escalated(result, compiled), such as "
            "plandag.escalation.EscalationHooks(callback=fn)); plandag.run_plan also takes "
            "a plain function called with the case. Nothing ran."
        )
    the_run_id = run_id if run_id is not None else _new_run_id()
    boundary: WriteBoundary | None = None
    if compiled.write_boundary is not None:
        if write_boundary is not None:
            raise ValueError(
                "write_boundary: the plan was compiled with a write boundary of its own; "
                "leave write_boundary out"
            )
    elif write_boundary is None:
        boundary = WriteBoundary.from_specs([Path.cwd()])
    elif not isinstance(write_boundary, Unlimited):
        boundary = write_boundary
    gate = _approval_gate(compiled, approve, the_run_id, boundary)
    if isinstance(gate, tuple):
        return _not_run(compiled, the_run_id, *gate)
    the_limits = limits if limits is not None else _DEFAULT_LIMITS
    given_estimate = plan_estimate
    if the_limits.plan_cost_factor is not None or the_limits.plan_time_factor is not None:
        if plan_estimate is None:
            plan_estimate = estimate_plan(
                compiled,
                measured=tool_durations,
                done=tuple(completed or ()),
                tokens_cost=models.tokens_cost if models is not None else None,
                executor_model=models.model if models is not None else None,
            )
    else:
        plan_estimate = None
    if gate is None:
        run = _Run(
            compiled,
            the_run_id,
            max_concurrency,
            tool_limits,
            observers,
            the_limits,
            retry,
            classify,
            clock,
            budget,
            completed,
            boundary,
            models,
        )
        run.escalate_mode = escalate
        run.escape_results = escape_results
        if plan_estimate is not None:
            run.pending_estimate = (plan_estimate, dict(tool_durations or {}))
        else:  # no plan-relative limit: a given estimate still orders the ready steps
            run.start_estimate = given_estimate
        result = await run.run()
    else:
        async with open_session(
            gate.compiled,
            gate.compiled.registry(),
            run_id=the_run_id,
            limits=the_limits,
            retry=retry,
            observers=observers,
            max_concurrency=max_concurrency,
            tool_limits=tool_limits,
            budget=budget,
            clock=clock,
            classify=classify,
            hold_effects=True,
            escalate=escalate,
            completed=completed,
            plan_estimate=plan_estimate,
            tool_durations=tool_durations,
            models=models,
        ) as session:
            await _decide(session, gate)
            await session.settled()
        result = session.result()
    if on_escalation is not None and result.status == "escalated":
        try:
            await on_escalation.run_escalated(result, compiled)
        except Exception:  # a hook's failure does not change the result
            logger.exception("run %s: the escalation hook failed", the_run_id)
    return result


def _approval_gate(
    compiled: CompiledPlan,
    approve: ApproveArgument | None,
    run_id: str,
    boundary: WriteBoundary | None,
) -> _Asking | tuple[RunStatus, str] | None:
    """What a plan needs before :func:`run_plan` runs it: None when nothing (it runs), an
    :class:`_Asking` when an approver decides, else the status and the reason it ends
    with, nothing run.

    Raises:
        ApprovalRequiredError: effects and no ``approve``.
        ValueError: a bad ``approve``.
    """
    steps = compiled.steps
    for step in steps.values():
        tool = step.tool
        # tainted_egress is asked of egress tools only (it is False for the others)
        if tool.effects != "none" or (tool.egress and step.tainted_egress):
            break
    else:
        return None  # nothing with effects, nothing tainted sent out: nothing to approve
    from plandag.scheduler.gate import (
        ApprovalRequest,
        ApprovalRequiredError,
        approval_needed,
        approval_reason,
        effect_summary,
        resolve_approve,
    )

    if approve is None:
        raise ApprovalRequiredError(
            f"run_plan: the plan has steps with effects ({effect_summary(steps)}) and no "
            "approver; pass approve= an approver (a callable taking an ApprovalRequest and "
            'returning a Decision), "auto" (write effects approved, irreversible ones need '
            'an approver) or "never" (nothing with effects runs: the run ends '
            "awaiting_approval). Nothing ran."
        )
    mode, approver = resolve_approve(approve)
    if not approval_needed(steps, mode):
        return None
    reason = approval_reason(steps)
    if approver is None or mode == "never":
        return "awaiting_approval", f"{reason}; nobody here can approve it (approve={mode!r})"
    plan = compiled if boundary is None else dataclasses.replace(compiled, write_boundary=boundary)
    return _Asking(plan, ApprovalRequest.for_plan(run_id, 1, plan, reason=reason), approver)


async def _decide(session: RunSession, gate: _Asking) -> None:
    """Ask ``gate``'s approver while the steps without effects run in ``session``, then
    apply the decision: step choices first, then the steps with effects released; a
    rejection drops every step not started. A run the brakes stopped meanwhile is left
    as it stands.

    Raises:
        StaleDecisionError: the decision names another plan hash.
        InvalidDecisionError: its step choices do not fit the plan or the run.
    """
    from plandag.scheduler.gate import InvalidDecisionError

    request = gate.request
    session.require_approval()  # only approve_effects() releases the held steps
    with session.waiting_for_person():
        decision = await gate.approver(request)
    decision.check(request)
    if session.stop_reason is not None:
        return  # the brakes stopped the run while the approver decided
    if not decision.approved:
        session.reject(one_line(f"not started: {decision.feedback or 'rejected without feedback'}"))
        return
    if decision.amends:
        try:
            session.amend(
                decision.reject_steps,
                decision.edit_steps,
                f"rejected by {decision.who} in the approval request"
                + (f": {decision.feedback}" if decision.feedback else ""),
            )
        except ValueError as error:
            raise InvalidDecisionError(
                f"run {session.run_id}: {error}; decide again on the plan as it stands"
            ) from None
    session.approve_effects(hold_again=False)


def _not_run(compiled: CompiledPlan, run_id: str, status: RunStatus, reason: str) -> RunResult:
    """The result of a plan that was not approved: every step skipped, nothing run."""
    now = time.time()
    steps = {
        step_id: StepRecord(
            id=step_id,
            tool=compiled.steps[step_id].tool.name,
            status="skipped",
            reason=status,
            detail=one_line(f"not started: {reason}"),
            ended_at=now,
        )
        for step_id in compiled.order
    }
    return RunResult(
        run_id=run_id,
        status=status,
        steps=steps,
        started_at=now,
        ended_at=now,
        stop_reason=status,
    )


def run_plan_sync(
    compiled: CompiledPlan,
    *,
    approve: ApproveArgument | None = None,
    write_boundary: WriteBoundary | Unlimited | None = None,
    run_id: str | None = None,
    max_concurrency: int | None = None,
    tool_limits: Mapping[str, int] | None = None,
    observers: Sequence[events.Observer] = (),
    limits: RunLimits | None = None,
    retry: RetryPolicy | None = None,
    classify: Classifier = classify_error,
    clock: Clock | None = None,
    budget: Budget | None = None,
    models: ModelAccessProtocol | None = None,
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
            approve=approve,
            write_boundary=write_boundary,
            run_id=run_id,
            max_concurrency=max_concurrency,
            tool_limits=tool_limits,
            observers=observers,
            limits=limits,
            retry=retry,
            classify=classify,
            clock=clock,
            budget=budget,
            models=models,
        )

    return anyio.run(main)
