"""Durable runs: a plan run recorded in the run store, behind the approval gate, resumable
after a crash without doing anything twice (docs/durable-runs.md).

:func:`start_run` records a new run (its plan as version 1, its options), asks for approval
when the plan needs it (:func:`plandag.approval.approval_needed`), then runs it with a
:class:`~plandag.store.recorder.StoreRecorder` and a trace writer as observers.

:func:`continue_run` runs a stored run again (``plandag resume``, and ``plandag approve``
after a decision): steps that succeeded are never run again (their stored results feed
their children); a step that had started and whose outcome is unknown (``running`` when
the process died, ``cancelled`` or ``failed`` after at least one attempt) is run again only
when its tool has no effects, is idempotent, or takes the :class:`~plandag.tools.ToolContext`
idempotency key (``run_id:step_id``, the same across the crash, so the outside system can
drop the duplicate). Otherwise the run is saved as ``awaiting_approval`` and a person
decides (``plandag approve RUN_ID`` runs those steps again; ``plandag reject`` ends the run
``rejected``). A step a replan superseded never runs again (:func:`superseded_steps`); when
its effect is unknown the run escalates (``superseded_unknown``) instead of running its
replacement.

Time spent waiting for a decision is not counted by the wall-clock cap: each segment gets
the cap minus the time earlier segments ran (``options["elapsed_s"]``).

Each plan version is recorded with its estimate (:func:`plan_estimate`: the tools' durations
measured in this store where there are enough runs, declared figures otherwise), shown in the
approval request; each segment is held to the plan-relative limits over the steps it still
has to run (ARCHITECTURE.md, "Brakes")."""

from __future__ import annotations

import dataclasses
import sqlite3
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from plandag.access import model_steps
from plandag.approval import (
    ApprovalMode,
    ApprovalRequest,
    ApprovedElsewhere,
    Approver,
    Decision,
    InvalidDecisionError,
    approval_needed,
    approval_reason,
)
from plandag.approval.steps import Amendment, amend
from plandag.brakes.retry import RetryPolicy
from plandag.compiler.collector import collector_paused
from plandag.compiler.compiled import CompiledPlan
from plandag.errors import InputError
from plandag.escalation.hooks import EscalationCallback, EscalationHooks, as_hooks
from plandag.runs.decisions import (
    ask_decision,
    drop_rejected_rows,
    record_amendment,
    save_awaiting,
    save_rejected,
)
from plandag.runs.escalations import escalate_run
from plandag.runs.options import DurableOutcome, RunOptions, TraceFactory, changed_mcp_tools
from plandag.scheduler import events
from plandag.scheduler.canonical import PLAIN, STANDARD, plain_json_text
from plandag.scheduler.entry import run_plan
from plandag.scheduler.estimate import PlanEstimate, estimate_plan
from plandag.scheduler.events import Observer
from plandag.scheduler.gate import compiled_plan_document
from plandag.scheduler.result import RunResult
from plandag.scheduler.session import open_session
from plandag.store.recorder import StoreRecorder
from plandag.store.sealing import (
    may_need_sealing_by_rules,
    sealed_store_json_text,
    sealed_store_text,
    unseal,
)
from plandag.store.store import StepRow, Store
from plandag.tools.registry import Registry

if TYPE_CHECKING:
    from plandag.executors.access import ModelAccess

__all__ = [
    "continue_run",
    "open_run",
    "plan_estimate",
    "record_run",
    "start_run",
    "superseded_steps",
    "unknown_outcome_steps",
]


def plan_estimate(
    store: Store,
    compiled: CompiledPlan,
    done: Sequence[int] = (),
    executor_model: str | None = None,
) -> PlanEstimate:
    """The estimate of ``compiled`` with the durations measured in ``store``
    (:meth:`Store.tool_durations`: a tool's median over its latest 1,000 succeeded steps,
    once it succeeded in 5 runs) replacing
    the declared ``typical_seconds``; the steps of ``done`` (already succeeded) count
    nothing."""
    tools = {step.tool.name for step in compiled.steps.values()}
    return estimate_plan(
        compiled, measured=store.tool_durations(tools), done=done, executor_model=executor_model
    )


def unknown_outcome_steps(
    rows: Mapping[int, StepRow], compiled: CompiledPlan
) -> tuple[list[int], list[int]]:
    """The steps whose outcome is unknown after a crash or an interruption, split into
    ``(safe, ask)``: ``safe`` may run again (no effects, idempotent, or taking the
    idempotency key), ``ask`` need a person's decision.

    A step's outcome is unknown when it started (attempts > 0) and did not end
    ``succeeded``: ``running`` (the process died), ``cancelled`` or ``failed``.
    """
    safe: list[int] = []
    ask: list[int] = []
    for step_id, row in sorted(rows.items()):
        if step_id not in compiled.steps or row.superseded_by:
            continue
        if row.status not in ("running", "cancelled", "failed") or row.attempts == 0:
            continue
        tool = compiled.steps[step_id].tool
        if tool.effects == "none" or tool.idempotent or tool.takes_context:
            safe.append(step_id)
        else:
            ask.append(step_id)
    return safe, ask


def superseded_steps(
    rows: Mapping[int, StepRow], compiled: CompiledPlan
) -> tuple[list[int], list[int]]:
    """The steps a replan superseded, and among them those whose effect is unknown.

    A superseded step never runs again (on ``resume`` or ``approve`` alike): a replan
    replaced it, and its replacement is what a person approved. Its effect is unknown when
    its tool has effects, it started (attempts > 0), its tool is neither idempotent nor
    takes the idempotency key, and it did not end in a known way: it was ``running`` or
    ``cancelled`` (stopped mid-call), or it ``failed`` with reason ``timeout`` (a late
    result is discarded, the call may have acted). A run with such a step escalates
    (``superseded_unknown``): a person decides whether its replacement may run.

    Args:
        rows: the run's stored steps by id.
        compiled: the run's current plan version, compiled (tools of steps no longer in
            it are taken as neither idempotent nor keyed).

    Returns:
        ``(superseded, unknown)``, each sorted.
    """
    superseded: list[int] = []
    unknown: list[int] = []
    for step_id, row in sorted(rows.items()):
        if not row.superseded_by:
            continue
        superseded.append(step_id)
        if row.effects == "none" or row.attempts == 0:
            continue
        stopped = row.status in ("running", "cancelled") or (
            row.status == "failed" and row.reason == "timeout"
        )
        if not stopped:
            continue
        step = compiled.steps.get(step_id)
        if step is not None and (step.tool.idempotent or step.tool.takes_context):
            continue
        unknown.append(step_id)
    return superseded, unknown


async def _escalate_superseded(
    store: Store,
    run_id: str,
    rows: Mapping[int, StepRow],
    unknown: Sequence[int],
    writer: Any,
    hooks: EscalationHooks | None = None,
) -> DurableOutcome:
    names = ", ".join(f"{step_id} ({rows[step_id].tool})" for step_id in unknown)
    detail = (
        f"superseded step(s) {names} started and may have acted (their outcome is unknown); "
        "their replacement would repeat the effect: a person decides whether it may run"
    )
    if writer is not None:
        writer.segment_ended("escalated")
    store.update_run(run_id, status="escalated", detail=detail, pid=None, awaiting_reason=None)
    result = RunResult(
        run_id,
        "escalated",
        {},
        escalation="superseded_unknown",
        escalation_detail=detail,
    )
    message = await escalate_run(store, run_id, "superseded_unknown", detail, hooks=hooks)
    return DurableOutcome(
        run_id,
        "escalated",
        result=result,
        message=message,
        escalation="superseded_unknown",
        escalation_detail=detail,
    )


@dataclasses.dataclass(frozen=True)
class _Gate:
    """An approval to ask while the run's effect-free steps go on."""

    request: ApprovalRequest
    approver: Approver | None
    mode: ApprovalMode


@dataclasses.dataclass(frozen=True)
class _Segment:
    """One segment of a stored run, to run (:func:`_run_segment`).

    Attributes:
        store, run_id: the run store and the run.
        compiled, options: the plan this segment runs and the run's options.
        segment: the segment's number (0 for a run's first).
        completed: the results of the steps that succeeded before, by step id.
        observers: more run event observers (after the store's recorder).
        writer: the segment's trace writer, or None.
        elapsed_s: seconds the run's earlier segments ran (the wall-clock cap's share).
        gate: an approval to ask while the effect-free steps run, or None.
        hooks: called when the segment ends ``escalated``, or None.
    """

    store: Store
    run_id: str
    compiled: CompiledPlan
    options: RunOptions
    segment: int
    completed: Mapping[int, Any]
    observers: Sequence[Observer]
    writer: Any
    elapsed_s: float
    gate: _Gate | None = None
    hooks: EscalationHooks | None = None
    recorded: _Recorded | None = None


@dataclasses.dataclass(frozen=True)
class _Recorded:
    """What :func:`record_run` made as it created the run, for its first segment: the run's
    row says ``running``, segment 0, held by this process (nothing to update), its steps
    are recorded ``pending`` (nothing to declare), and the plan's estimate was made from
    ``measured`` with ``executor_model``."""

    measured: dict[str, float]
    executor_model: str | None
    estimate: PlanEstimate


def record_run(
    store: Store,
    run_id: str,
    compiled: CompiledPlan,
    options: RunOptions,
    *,
    command: str,
    writer: Any,
    source: str,
    compile_span: tuple[float, float] | None,
) -> ApprovalRequest | None:
    """Record a new run of ``compiled`` (the run, its plan as version 1, the trace's first
    lines); return the approval request when the plan needs a person (recording an
    automatic approval otherwise)."""
    return _record_run(
        store,
        run_id,
        compiled,
        options,
        command=command,
        writer=writer,
        source=source,
        compile_span=compile_span,
    )[0]


# The plan's JSON, text, hash and estimate made here are young objects that mostly die
# before it returns: a collection among them would only traverse them again.
@collector_paused
def _record_run(
    store: Store,
    run_id: str,
    compiled: CompiledPlan,
    options: RunOptions,
    *,
    command: str,
    writer: Any,
    source: str,
    compile_span: tuple[float, float] | None,
) -> tuple[ApprovalRequest | None, _Recorded]:
    """:func:`record_run`, and what it made that the first segment needs again."""
    plan = compiled.plan
    steps = compiled.steps
    document = compiled_plan_document(compiled)  # dumped and hashed once for all below
    plan_json, digest = document.json, document.hash
    # a plain plan is JSON already: its text is made once, for the store and the trace
    text = (
        plain_json_text(plan_json, STANDARD if document.standard else PLAIN)
        if document.plain
        else None
    )
    measured = store.tool_durations({step.tool.name for step in compiled.steps.values()})
    estimate = estimate_plan(compiled, measured=measured, executor_model=options.executor_model)
    estimate_json: dict[str, Any] | None = None
    estimate_text: str | None = None
    try:  # as_json's text, made entry by entry
        estimate_text = estimate.json_text()
    except (TypeError, ValueError):  # a figure NaN, infinite or not a number: converted
        estimate_json = estimate.as_json()
    else:  # store_json(as_json()), the text decoded only when sealing may change it
        estimate_text = sealed_store_json_text(
            estimate_text, may_need_sealing_by_rules(estimate_text)
        )
    store.create_run_with_plan(
        run_id,
        command=command,
        goal=plan.goal or None,
        params=compiled.params,
        options=options.as_json(),
        plan=plan_json,
        plan_hash=digest,
        source=source,
        estimate=estimate_json,
        # store_json(as_json()): as_json holds str keys, lists, strings, numbers and None,
        # which to_jsonable returns as they are when every number is finite
        estimate_text=estimate_text,
        # store_json(plan_json): to_jsonable returns a plain plan as it is
        text=sealed_store_text(plan_json, text=text) if text is not None else None,
        # declared with the run: one synced transaction before the first step
        steps=[(step_id, step.tool.name, step.tool.effects) for step_id, step in steps.items()],
    )
    recorded = _Recorded(measured, options.executor_model, estimate)
    if writer is not None:
        writer.run_started(command, plan.goal or None, dict(compiled.params))
        writer.plan(
            1,
            plan_json,
            digest,
            source,
            text=text,
            parents={step_id: step.parents for step_id, step in compiled.steps.items()},
        )
        if compile_span is not None:
            writer.compile(1, compile_span[0], compile_span[1], list(compiled.diagnostics))
    effects = {step.tool.effects for step in compiled.steps.values()}
    if approval_needed(compiled, options.approve):
        reason = approval_reason(compiled.steps)
        request = ApprovalRequest.for_plan(
            run_id, 1, compiled, reason=reason, expiry_s=options.expiry_s, estimate=estimate
        )
        return request, recorded
    if effects - {"none"}:
        store.record_decision(run_id, 1, digest, "approved", who="auto")
        if writer is not None:
            writer.approval(1, digest, "approved", "auto", None)
    return None, recorded


async def open_run(
    store: Store,
    run_id: str,
    compiled: CompiledPlan,
    options: RunOptions,
    *,
    command: str,
    approver: Approver | None,
    writer: Any,
    source: str = "stored",
    compile_span: tuple[float, float] | None = None,
) -> DurableOutcome | None:
    """Record a new run of ``compiled`` (the run, its plan as version 1, the trace's first
    lines) and pass the plan through the approval gate before anything runs.

    Args:
        store, compiled, options, command, approver, source, compile_span: as
            :func:`start_run`.
        run_id: the new run's id.
        writer: the run's trace writer, or None.

    Returns:
        None when the plan may run (read-only, approved automatically — recorded as decided
        by ``auto`` —, or approved by the approver); otherwise the outcome of a run that
        waits for a decision or was rejected.

    Raises:
        StaleDecisionError: the approver answered for another plan version.
    """
    request = record_run(
        store,
        run_id,
        compiled,
        options,
        command=command,
        writer=writer,
        source=source,
        compile_span=compile_span,
    )
    if request is None:
        return None
    decision = await ask_decision(store, request, approver, options.approve, writer)
    if decision is None:
        return save_awaiting(store, request, request.reason, writer)
    if not decision.approved:
        return save_rejected(store, request, decision.feedback, writer)
    return None


async def start_run(
    store: Store,
    compiled: CompiledPlan,
    options: RunOptions,
    *,
    command: str,
    approver: Approver | None = None,
    observers: Sequence[Observer] = (),
    trace: TraceFactory | None = None,
    run_id: str | None = None,
    source: str = "stored",
    compile_span: tuple[float, float] | None = None,
    on_escalation: EscalationHooks | EscalationCallback | None = None,
) -> DurableOutcome:
    """Record a new run of ``compiled``, pass it through the approval gate, and run it.

    Args:
        store: the run store.
        compiled: the plan, compiled with its params, read-only flag and write boundary.
        options: how it runs (stored for resume and approve).
        command: the CLI command or API that started it (``exec``, ``run``...).
        approver: who decides when approval is needed (None: nobody here, the run is saved
            ``awaiting_approval``).
        observers: more observers (progress display...).
        trace: the trace writer factory, or None.
        run_id: the run's id (default: a random 16-hex id).
        source: where the plan came from (``stored``, ``planner``).
        compile_span: when the plan's compile started and ended (seconds since the
            epoch), for the trace's ``compile`` span; None: no span.
        on_escalation: when the run ends ``escalated``, its case is stored (the inbox)
            and these hooks are called (:class:`~plandag.escalation.EscalationHooks`: a
            command, a URL, a callback), or this callback with the case as a dict; None:
            stored only.

    Returns:
        The :class:`DurableOutcome`.

    Raises:
        StaleDecisionError: the approver answered for another plan version.
    """
    run_id = run_id if run_id is not None else uuid.uuid4().hex[:16]
    writer = trace(run_id, 0) if trace is not None else None
    try:
        request, recorded = _record_run(
            store,
            run_id,
            compiled,
            options,
            command=command,
            writer=writer,
            source=source,
            compile_span=compile_span,
        )
        return await _run_segment(
            _Segment(
                store,
                run_id,
                compiled,
                options,
                segment=0,
                completed={},
                observers=observers,
                writer=writer,
                elapsed_s=0.0,
                gate=_Gate(request, approver, options.approve) if request is not None else None,
                hooks=as_hooks(on_escalation),
                recorded=recorded,
            )
        )
    finally:
        if writer is not None:
            writer.close()


async def continue_run(
    store: Store,
    run_id: str,
    compiled: CompiledPlan,
    options: RunOptions,
    *,
    command: str = "resume",
    approver: Approver | None = None,
    approved_unknown: bool = False,
    observers: Sequence[Observer] = (),
    trace: TraceFactory | None = None,
    on_escalation: EscalationHooks | EscalationCallback | None = None,
) -> DurableOutcome:
    """Run stored run ``run_id`` again from where it got to (module docstring).

    Args:
        store: the run store.
        run_id: the run (exact id).
        compiled: its current plan version, compiled again (the caller rebuilt the
            registry from ``options.tools``).
        options: its stored options (``approve`` may be overridden by the caller).
        command: ``resume`` or ``approve``.
        approver: who decides when a decision is needed, or None.
        approved_unknown: a person already approved running again the steps whose outcome
            is unknown (``plandag approve``).
        observers, trace, on_escalation: as :func:`start_run`.

    A step with ``irreversible`` effects whose outcome is unknown (and that cannot be
    repeated safely) escalates the run (reason ``unknown_outcome``: a person checks what
    happened, then ``plandag approve RUN_ID --hash H`` runs it again); with
    ``options.escalate`` ``never``, and for steps with ``write`` effects, the run awaits
    approval instead.

    Returns:
        The :class:`DurableOutcome`.

    Raises:
        InputError: the run cannot be continued (it ended, or waits for a decision and this
            is not one), or an MCP tool of its plan changed since it started
            (:func:`~plandag.runs.options.changed_mcp_tools`).
    """
    changed = changed_mcp_tools(compiled, options)
    if changed is not None:
        raise InputError(f"run {run_id}: {changed}")
    row = store.run(run_id)
    segment = row.segment + 1
    rows = store.steps(run_id)
    superseded, unknown_superseded = superseded_steps(rows, compiled)
    compiled = compiled.without_steps(superseded)  # never run again
    completed = {  # results as they were: secrets put back from the environment
        step_id: unseal(step.result, run_id=run_id)
        for step_id, step in rows.items()
        if step.status == "succeeded" and step_id in compiled.steps
    }
    versions = store.plan_versions(run_id)
    current = versions[-1]
    writer = trace(run_id, segment) if trace is not None else None
    try:
        if writer is not None:
            writer.run_started(command, row.goal, row.params)
            writer.set_dependencies(
                {step_id: list(step.parents) for step_id, step in compiled.steps.items()}
            )
        if unknown_superseded:
            return await _escalate_superseded(
                store, run_id, rows, unknown_superseded, writer, as_hooks(on_escalation)
            )
        store.update_run(
            run_id, status="running", segment=segment, pid=_pid(), awaiting_reason=None
        )
        approved = current.approved_by is not None
        gate: _Gate | None = None
        estimate = plan_estimate(store, compiled, executor_model=options.executor_model)
        if not approved and approval_needed(compiled, options.approve):
            reason = approval_reason(compiled.steps)
            request = ApprovalRequest.for_plan(
                run_id,
                current.version,
                compiled,
                reason=reason,
                expiry_s=options.expiry_s,
                estimate=estimate,
            )
            gate = _Gate(request, approver, options.approve)
        _, ask = unknown_outcome_steps(rows, compiled)
        if ask and not approved_unknown:
            names = ", ".join(f"{step_id} ({compiled.steps[step_id].tool.name})" for step_id in ask)
            reason = (
                f"unknown outcome: step(s) {names} started before the run stopped and may have "
                "acted; their tools are not idempotent and take no idempotency key"
            )
            irreversible = [
                step_id for step_id in ask if compiled.steps[step_id].tool.effects == "irreversible"
            ]
            if irreversible and options.escalate == "person":
                return await _escalate_unknown(
                    store, run_id, compiled, irreversible, writer, as_hooks(on_escalation)
                )
            request = ApprovalRequest.for_plan(
                run_id,
                current.version,
                compiled,
                reason=reason,
                expiry_s=options.expiry_s,
                estimate=estimate,
            )
            decision = await ask_decision(store, request, approver, "ask", writer)
            if decision is None:
                return save_awaiting(store, request, reason, writer)
            if not decision.approved:
                return save_rejected(store, request, decision.feedback, writer)
        elapsed = float(row.options.get("elapsed_s", 0.0))
        return await _run_segment(
            _Segment(
                store,
                run_id,
                compiled,
                options,
                segment=segment,
                completed=completed,
                observers=observers,
                writer=writer,
                elapsed_s=elapsed,
                gate=gate,
                hooks=as_hooks(on_escalation),
            )
        )
    finally:
        if writer is not None:
            writer.close()


async def _escalate_unknown(
    store: Store,
    run_id: str,
    compiled: CompiledPlan,
    step_ids: Sequence[int],
    writer: Any,
    hooks: EscalationHooks | None,
) -> DurableOutcome:
    """Steps with irreversible effects may have acted before the run stopped: hand the
    run to a person (reason ``unknown_outcome``)."""
    names = ", ".join(f"{step_id} ({compiled.steps[step_id].tool.name})" for step_id in step_ids)
    detail = (
        f"step(s) {names} have irreversible effects and started before the run stopped: "
        "they may have acted, and running them again could repeat the effect; check what "
        "happened outside, then approve running them again, or abandon the run"
    )
    if writer is not None:
        writer.segment_ended("escalated")
    store.update_run(run_id, status="escalated", detail=detail, pid=None)
    message = await escalate_run(store, run_id, "unknown_outcome", detail, hooks=hooks)
    return DurableOutcome(
        run_id,
        "escalated",
        message=message,
        escalation="unknown_outcome",
        escalation_detail=detail,
    )


def _pid() -> int:
    import os

    return os.getpid()


def _record_end(
    store: Store, run_id: str, result: RunResult, elapsed_s: float, *, soon: bool = False
) -> Callable[[], None] | None:
    """Record the run's final state (its status, every segment's spend, the seconds its
    segments ran, no process), committed with every write queued before it (the
    recorder's last rows). ``soon``: handed to the store's writer thread
    (:meth:`Store.update_run_soon`); the function returned waits for that commit."""
    # the row as committed: only writes committed at once change it (no wait for the
    # queue, which the update commits with it)
    before = store.run(run_id, flush=False)
    stored_options = before.options
    stored_options["elapsed_s"] = elapsed_s
    fields: dict[str, Any] = {
        "status": result.status,
        "spent_usd": before.spent_usd + result.spent_usd,  # every segment's spend
        "spent_tokens": before.spent_tokens + result.spent_tokens,
        "options": stored_options,
        "pid": None,
    }
    if result.status == "escalated":
        fields["detail"] = result.escalation_detail
    if soon:
        return store.update_run_soon(run_id, **fields)
    store.update_run(run_id, **fields)
    return None


class _RunEnd:
    """Called by the store's recorder at ``RunFinished`` (its ``at_end``, after its last
    rows are queued), :meth:`finished` hands the run's final state to the store's writer
    thread (:func:`_record_end` with ``soon``): it is committed, with those rows, in one
    transaction and one sync of the disk, while the trace writes the run's end. The
    segment then waits for it (:attr:`wait`); when it could not be handed over
    (:attr:`wait` None), the segment records the end itself.

    Args:
        store, run_id: the run store and the run.
        elapsed_s: seconds the run's earlier segments ran.
        started: when this segment started (``time.monotonic()``).
    """

    def __init__(self, store: Store, run_id: str, elapsed_s: float, started: float) -> None:
        self.store = store
        self.run_id = run_id
        self.elapsed_s = elapsed_s
        self.started = started
        self.result: RunResult | None = None
        self.wait: Callable[[], None] | None = None

    def finished(self, result: RunResult) -> None:
        """Hand the final state of the run that ended with ``result`` to the writer."""
        self.result = result
        try:
            self.wait = _record_end(
                self.store,
                self.run_id,
                result,
                self.elapsed_s + (time.monotonic() - self.started),
                soon=True,
            )
        except Exception:  # the segment records the end itself, and reports what fails
            self.wait = None


class _ForwardAllButEnd:
    """An observer passing every event but ``RunFinished`` to the trace writer (a gated
    segment writes its own end, with the status the decision gave it)."""

    def __init__(self, writer: Any) -> None:
        self.writer = writer

    def __call__(self, event: events.Event) -> None:
        if not isinstance(event, events.RunFinished):
            self.writer(event)


async def _run_segment(part: _Segment) -> DurableOutcome:
    """Run one segment (:func:`_run_segment_with`) with the model client of
    ``options.executor`` when the plan has model steps, closed after it."""
    models = part.options.models() if model_steps(part.compiled.steps) else None
    try:
        return await _run_segment_with(part, models)
    finally:
        if models is not None:
            with anyio.CancelScope(shield=True):
                await models.client.aclose()


async def _run_segment_with(part: _Segment, models: ModelAccess | None) -> DurableOutcome:
    """Run one segment, its model steps calling ``models``; with ``part.gate``, ask for the
    approval while the steps without effects run (a pending approval never holds them):
    steps with effects start once a person approves; with nobody to decide, the segment
    ends ``awaiting_approval`` once the effect-free steps have all ended (their results
    saved: ``plandag approve`` goes on from them)."""
    store, run_id, compiled, options = part.store, part.run_id, part.compiled, part.options
    segment, completed, writer = part.segment, part.completed, part.writer
    observers, elapsed_s, gate, hooks = part.observers, part.elapsed_s, part.gate, part.hooks
    recorded = part.recorded
    recorder = StoreRecorder(
        store,
        run_id,
        compiled.steps,
        compiled.params,
        segment=segment,
        completed=completed,
        declared=recorded is not None,  # with the run (_record_run)
        # the run's final state below commits the recorder's last rows with it
        commit_at_end=False,
    )
    if recorded is None:  # else the run was created so just now (_Recorded)
        store.update_run(run_id, status="running", segment=segment, pid=_pid())
    all_observers: list[Observer] = [recorder, *observers]
    if writer is not None:
        all_observers.append(writer if gate is None else _ForwardAllButEnd(writer))
    started = time.monotonic()
    paused = 0.0
    decision: Decision | None = None
    amendment: Amendment | None = None
    invalid: str | None = None
    executor_model = models.model if models is not None else None
    if recorded is not None:  # measured as the run began (no step of it has run since)
        measured = recorded.measured
    else:
        measured = store.tool_durations({step.tool.name for step in compiled.steps.values()})
    if recorded is not None and (
        recorded.executor_model == executor_model
        # the executor's model only prices steps whose tool estimates its own cost
        or all(step.tool.estimate is None for step in compiled.steps.values())
    ):
        estimate = recorded.estimate
    else:
        estimate = estimate_plan(
            compiled, measured=measured, done=tuple(completed), executor_model=executor_model
        )
    end: _RunEnd | None = None
    if gate is None:
        end = _RunEnd(store, run_id, elapsed_s, started)
        recorder.at_end = end.finished  # after the recorder's last rows, before the trace
        result = await run_plan(
            compiled,
            approve=ApprovedElsewhere("the run store's approval gate"),
            run_id=run_id,
            max_concurrency=options.max_concurrency,
            observers=all_observers,
            limits=options.run_limits(elapsed_s),
            retry=RetryPolicy(retries=options.retries),
            completed=completed,
            escalate=options.escalate,
            plan_estimate=estimate,
            tool_durations=measured,
            models=models,
        )
    else:
        async with open_session(
            compiled,
            Registry(),
            run_id=run_id,
            limits=options.run_limits(elapsed_s),
            retry=RetryPolicy(retries=options.retries),
            observers=all_observers,
            max_concurrency=options.max_concurrency,
            hold_effects=True,
            completed=completed,
            escalate=options.escalate,
            plan_estimate=estimate,
            tool_durations=measured,
            models=models,
        ) as session:
            with session.waiting_for_person():
                try:
                    decision = await ask_decision(
                        store, gate.request, gate.approver, gate.mode, writer, allow_steps=True
                    )
                    if decision is not None and decision.approved and decision.amends:
                        amendment = amend(compiled, decision)
                except InvalidDecisionError as error:  # the run waits for a valid one
                    invalid, decision, amendment = str(error), None, None
            if amendment is not None:
                await session.settled()  # effect-free steps end; the effects wait for the new plan
            elif decision is not None and decision.approved:
                session.approve_effects(hold_again=False)
            else:
                await session.settled()
        result = session.result()
        paused = session.paused_s
        if amendment is not None and decision is not None:
            record_amendment(
                store,
                run_id,
                gate.request.version,
                gate.request.plan_hash,
                decision,
                amendment,
                writer,
            )
            carried = {
                step_id: record.result
                for step_id, record in result.steps.items()
                if record.status == "succeeded"
                and step_id in amendment.compiled.steps
                and step_id not in amendment.stale
            }
            drop_rejected_rows(store, run_id, amendment, decision)
            spent = store.run(run_id)
            store.update_run(
                run_id,
                spent_usd=spent.spent_usd + result.spent_usd,
                spent_tokens=spent.spent_tokens + result.spent_tokens,
            )
            return await _run_segment(
                dataclasses.replace(
                    part,
                    compiled=amendment.compiled,
                    completed=carried,
                    elapsed_s=elapsed_s + (time.monotonic() - started) - paused,
                    gate=None,  # decided: the amended plan runs without asking again
                    recorded=None,
                )
            )
        if decision is None or not decision.approved:
            result = dataclasses.replace(
                result, status="awaiting_approval" if decision is None else "rejected"
            )
        if writer is not None:
            writer.run_finished(result)
    store_error: str | None = None
    try:
        if recorder.failure is not None:
            raise recorder.failure
        if end is not None and end.result is result and end.wait is not None:
            end.wait()  # committed while the trace wrote the run's end
        else:
            _record_end(store, run_id, result, elapsed_s + (time.monotonic() - started) - paused)
        if result.status == "escalated":
            reason = result.escalation or "replan_caps"
            message = await escalate_run(
                store, run_id, reason, result.escalation_detail, hooks=hooks
            )
            return DurableOutcome(
                run_id,
                "escalated",
                result=result,
                message=message,
                escalation=reason,
                escalation_detail=result.escalation_detail,
            )
    except sqlite3.Error as error:
        store_error = (
            f"the run ended {result.status}, but the run store {store.path} could not record "
            f"it ({error}); until it does, `plandag resume {run_id}` may run again the steps "
            "it did not record (only idempotent or keyed ones without asking)"
        )
    if gate is not None and decision is None:
        waiting = save_awaiting(store, gate.request, gate.request.reason)
        if invalid is not None:
            waiting = dataclasses.replace(
                waiting, message=f"{invalid}\n{waiting.message}" if waiting.message else invalid
            )
        return dataclasses.replace(waiting, result=result, store_error=store_error)
    if gate is not None and decision is not None and not decision.approved:
        refused = save_rejected(store, gate.request, decision.feedback)
        return dataclasses.replace(refused, result=result, store_error=store_error)
    return DurableOutcome(run_id, result.status, result=result, store_error=store_error)
