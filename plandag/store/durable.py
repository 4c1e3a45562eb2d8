"""Durable runs: a plan run recorded in the run store, behind the approval gate, resumable
after a crash without doing anything twice (README, "Durable runs: store, resume, traces,
approval").

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
has to run (ARCHITECTURE.md, "Brakes").
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from plandag.approval import (
    DEFAULT_EXPIRY_S,
    ApprovalMode,
    ApprovalRequest,
    ApprovedElsewhere,
    Approver,
    Decision,
    InvalidDecisionError,
    StaleDecisionError,
    approval_needed,
    approval_reason,
    compiled_plan_hash,
)
from plandag.approval.steps import Amendment, amend
from plandag.brakes.retry import RetryPolicy
from plandag.compiler.compiled import CompiledPlan
from plandag.compiler.limits import DEFAULT_MAX_STEPS
from plandag.errors import InputError
from plandag.escalation.hooks import EscalationCallback, EscalationHooks, as_hooks
from plandag.scheduler import events
from plandag.scheduler.entry import run_plan
from plandag.scheduler.estimate import PlanEstimate, estimate_plan
from plandag.scheduler.events import Observer
from plandag.scheduler.result import EscalationMode, RunResult, RunStatus
from plandag.scheduler.runner import RunLimits
from plandag.scheduler.session import open_session
from plandag.store.base_urls import stored_model_options
from plandag.store.recorder import StoreRecorder
from plandag.store.sealing import unseal
from plandag.store.store import StepRow, Store
from plandag.tools.registry import Registry

if TYPE_CHECKING:
    from plandag.executors.access import ModelAccess

__all__ = [
    "RESUMABLE",
    "DurableOutcome",
    "RunOptions",
    "abandon",
    "approve_escalated",
    "close_escalation",
    "continue_run",
    "decide",
    "escalate_run",
    "escalation_message",
    "open_run",
    "plan_estimate",
    "record_amendment",
    "record_run",
    "start_run",
    "superseded_steps",
    "unknown_outcome_steps",
]

RESUMABLE = frozenset({"running", "interrupted", "timed_out", "budget_exceeded"})
"""Run states ``plandag resume`` continues (``running``: the process died)."""


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How a run runs, stored with it so that resume and approve can run it again.

    Attributes:
        tools: ``--tools`` files or modules (absolute paths for files).
        tools_sha256: each tools file's SHA-256 when the run started: resume and approve
            refuse to run the plan with code changed since (a person approved it with that).
        write_boundary: ``--write-boundary`` specs, or None for the default (the working
            folder); ``base``: the folder relative specs are taken against.
        read_only: only tools without effects.
        limits: the :class:`RunLimits` fields (``max_seconds`` is the whole run's cap).
        retries: retries per step (:class:`RetryPolicy`).
        max_concurrency: the global step limit, or None.
        max_steps: the most steps the run's plan may have, replans included (runs stored
            before this option existed get the default, 500).
        approve: the approval mode.
        expiry_s: seconds a pending approval stays valid (24 h by default).
        redact: mask personal data in the trace (``--redact``).
        http_allow: the configured HTTP allow-list (``--http-allow`` host globs), or None.
        planner: ``{"planner", "model", "base_url"}`` for runs that have a planner (revisions
            after a rejection), else None. A ``base_url`` with a user and password is
            stored without them (:mod:`plandag.store.base_urls`).
        escalate: what a run that cannot go on by itself comes to: ``person`` (escalated,
            handed to a person) or ``never`` (gave_up); see
            :data:`~plandag.scheduler.result.EscalationMode`.
        executor: ``{"provider", "model", "base_url", "executor_model"}`` of the model the
            plan's ``llm`` and ``agent`` steps call (``exec --provider``), or None; each
            segment (a resume, an approval) builds its client again from it, the key read
            from the environment (:func:`plandag.executors.connect`).
    """

    tools: tuple[str, ...] = ()
    tools_sha256: Mapping[str, str] = dataclasses.field(default_factory=dict)
    write_boundary: tuple[str, ...] | None = None
    base: str = "."
    read_only: bool = False
    limits: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    retries: int = 2
    max_concurrency: int | None = None
    max_steps: int = DEFAULT_MAX_STEPS
    approve: ApprovalMode = "ask"
    expiry_s: float = DEFAULT_EXPIRY_S
    redact: bool = False
    planner: Mapping[str, Any] | None = None
    escalate: EscalationMode = "person"
    http_allow: tuple[str, ...] | None = None
    executor: Mapping[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        """The options as stored (``run.options``): a ``base_url`` of ``planner`` or
        ``executor`` without its user and password
        (:func:`plandag.store.base_urls.stored_model_options`)."""
        document = dataclasses.asdict(self)
        document["limits"] = dict(self.limits)
        document["tools_sha256"] = dict(self.tools_sha256)
        document["planner"] = dict(self.planner) if self.planner is not None else None
        document["executor"] = dict(self.executor) if self.executor is not None else None
        return stored_model_options(document)

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> RunOptions:
        """Options from ``run.options`` (unknown keys ignored)."""
        fields = {field.name for field in dataclasses.fields(cls)}
        values = {key: value for key, value in document.items() if key in fields}
        if values.get("tools") is not None:
            values["tools"] = tuple(values["tools"])
        if values.get("write_boundary") is not None:
            values["write_boundary"] = tuple(values["write_boundary"])
        if values.get("http_allow") is not None:
            values["http_allow"] = tuple(values["http_allow"])
        return cls(**values)

    @property
    def executor_model(self) -> str | None:
        """The model of the plan's model steps that name none, or None without
        ``executor``."""
        if self.executor is None:
            return None
        from plandag.executors.access import executor_model_for

        try:
            return executor_model_for(
                str(self.executor.get("provider")),
                self.executor.get("model"),
                self.executor.get("executor_model"),
            )
        except InputError:
            return None

    def models(self) -> ModelAccess | None:
        """The :class:`~plandag.executors.ModelAccess` of ``executor`` (a new client, with
        the registry of ``tools``), or None without it.

        Raises:
            InputError: the key is missing (:class:`~plandag.models.MissingAPIKeyError`)
                or the options name no usable model.
        """
        if self.executor is None:
            return None
        from plandag.executors.access import connect
        from plandag.tools.registry import default_registry

        registry = default_registry()
        for file in self.tools:
            registry.load_file(file)
        return connect(
            str(self.executor.get("provider")),
            model=self.executor.get("model"),
            base_url=self.executor.get("base_url"),
            executor_model=self.executor.get("executor_model"),
            registry=registry,
        )

    def run_limits(self, elapsed_s: float = 0.0) -> RunLimits:
        """The :class:`RunLimits` of a segment that starts after ``elapsed_s`` seconds of
        earlier segments (the wall-clock cap is the run's, not each segment's)."""
        limits = RunLimits.from_json(self.limits)
        if limits.seconds_cap is not None:
            limits = dataclasses.replace(
                limits, max_seconds=max(limits.seconds_cap - elapsed_s, 0.001)
            )
        return limits


@dataclasses.dataclass(frozen=True)
class DurableOutcome:
    """What a durable run came to.

    Attributes:
        run_id: the run's id in the store.
        status: the run's state (a :data:`RunStatus`).
        result: the segment's :class:`RunResult` when steps ran, else None.
        request: the approval request when the run waits for (or was refused) a decision.
        message: a sentence for the person (why it waits, what to do next), or None.
        store_error: the run ran but the store could not record its end (a locked or full
            database), with what to do; None when everything was recorded.
        escalation: when ``status`` is ``escalated``, why (one of
            :data:`~plandag.scheduler.result.ESCALATION_REASONS`); else None.
        escalation_detail: the sentence for the person who gets the case; else None.
    """

    run_id: str
    status: RunStatus
    result: RunResult | None = None
    request: ApprovalRequest | None = None
    message: str | None = None
    store_error: str | None = None
    escalation: str | None = None
    escalation_detail: str | None = None


TraceFactory = Callable[[str, int], Any]
"""``factory(run_id, segment)`` returning a trace writer (an observer with ``run_started``,
``plan``, ``approval`` and ``close`` methods), or None for no trace."""


def plan_estimate(
    store: Store,
    compiled: CompiledPlan,
    done: Sequence[int] = (),
    executor_model: str | None = None,
) -> PlanEstimate:
    """The estimate of ``compiled`` with the durations measured in ``store``
    (:meth:`Store.tool_durations`: a tool's median once it succeeded in 5 runs) replacing
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


async def _decide(
    store: Store,
    request: ApprovalRequest,
    approver: Approver | None,
    mode: ApprovalMode,
    trace: Any,
    *,
    allow_steps: bool = False,
) -> Decision | None:
    """Ask ``approver`` (None, or mode ``never``: nobody here; returns None).

    An approval with step choices (``reject_steps``, ``edit_steps``) is returned without
    being recorded when ``allow_steps`` (the caller records the new version it makes with
    :func:`record_amendment`); otherwise it is refused.

    Raises:
        StaleDecisionError: the decision is for another plan version.
        InvalidDecisionError: step choices that do not fit the plan, or step choices where
            ``allow_steps`` is False.
    """
    store.record_decision(request.run_id, request.version, request.plan_hash, "asked")
    if trace is not None:
        trace.approval(request.version, request.plan_hash, "asked", None, None)
    if approver is None or mode == "never":
        return None
    decision = await approver(request)
    decision.check(request)
    if decision.approved and decision.amends:
        if allow_steps:
            return decision
        raise InvalidDecisionError(
            f"run {request.run_id}: this request takes the whole plan or nothing; to reject "
            f"or edit single steps, let it wait (--approve never) and decide with `plandag "
            f"approve {request.run_id} --reject-step N --edit-step 'N={{...}}'`"
        )
    store.record_decision(
        request.run_id,
        request.version,
        request.plan_hash,
        "approved" if decision.approved else "rejected",
        who=decision.who,
        feedback=decision.feedback or None,
    )
    if trace is not None:
        trace.approval(
            request.version,
            request.plan_hash,
            "approved" if decision.approved else "rejected",
            decision.who,
            decision.feedback or None,
        )
    return decision


def record_amendment(
    store: Store,
    run_id: str,
    version: int,
    plan_hash: str,
    decision: Decision,
    amendment: Amendment,
    writer: Any = None,
) -> int:
    """Record a step-by-step approval of plan version ``version``: the decision
    ``amended`` on it (who, feedback), the decision on each of its steps, the new version
    it made (source ``amended``), and the new version ``approved`` by the same person.

    Returns:
        The new version's number.
    """
    new_version = max(row.version for row in store.plan_versions(run_id)) + 1
    plan_json = amendment.compiled.plan.model_dump(mode="json", exclude_none=True)
    store.record_decision(
        run_id, version, plan_hash, "amended", who=decision.who, feedback=decision.feedback or None
    )
    store.record_step_decisions(
        run_id,
        version,
        [(step.step_id, step.decision, step.args) for step in amendment.steps],
        who=decision.who,
    )
    store.add_plan_version(run_id, new_version, plan_json, amendment.plan_hash, "amended")
    store.record_decision(run_id, new_version, amendment.plan_hash, "approved", who=decision.who)
    if writer is not None:
        writer.approval(version, plan_hash, "amended", decision.who, decision.feedback or None)
        writer.plan(new_version, plan_json, amendment.plan_hash, "amended")
        writer.approval(new_version, amendment.plan_hash, "approved", decision.who, None)
    return new_version


def _await(
    store: Store, request: ApprovalRequest, reason: str, writer: Any = None
) -> DurableOutcome:
    if writer is not None:
        writer.segment_ended("awaiting_approval")
    store.update_run(
        request.run_id,
        status="awaiting_approval",
        awaiting_since=time.time(),
        expires_at=request.expires_at,
        awaiting_reason=reason,
        pid=None,
    )
    return DurableOutcome(
        request.run_id,
        "awaiting_approval",
        request=request,
        message=(
            f"run {request.run_id} awaits a decision ({reason}); "
            f"`plandag approve {request.run_id}` runs it (--reject-step N and "
            "--edit-step 'N={...}' decide step by step), "
            f"`plandag reject {request.run_id} --feedback TEXT` refuses it "
            f"(plan hash {request.plan_hash})"
        ),
    )


def _reject(
    store: Store, request: ApprovalRequest, feedback: str, writer: Any = None
) -> DurableOutcome:
    if writer is not None:
        writer.segment_ended("rejected")
    store.update_run(request.run_id, status="rejected", detail=feedback or None, pid=None)
    return DurableOutcome(
        request.run_id,
        "rejected",
        request=request,
        message=f"run {request.run_id} was rejected" + (f": {feedback}" if feedback else ""),
    )


def escalation_message(
    run_id: str, reason: str, detail: str | None, actions: Mapping[str, str | None]
) -> str:
    """What a person reads when run ``run_id`` escalates: why, and the commands that
    close the case (``actions``: :func:`plandag.escalation.escalation_actions`, the
    context's ``actions``)."""
    what = {
        "resume": "goes on with your instruction"
        if "--instruction" in (actions.get("resume") or "")
        else "continues it as it is",
        "approve": "runs the step(s) again",
        "abandon": "closes it",
    }
    commands = [
        f"`{command}` {what[key]}"
        for key in ("resume", "approve", "abandon")
        if (command := actions.get(key))
    ]
    return (
        f"run {run_id} escalated to a person ({reason})"
        + (f": {detail}" if detail else "")
        + "; `plandag inbox` lists it: "
        + ", ".join(commands)
    )


async def escalate_run(
    store: Store,
    run_id: str,
    reason: str,
    detail: str | None,
    *,
    hooks: EscalationHooks | None = None,
) -> str:
    """Persist the case of run ``run_id``, which ended ``escalated``, and call the hooks.

    The case (:func:`plandag.escalation.escalation_context`: goal, plan versions,
    completed results, failures, spend, reason) goes to the ``escalation`` table as an open
    escalation, which ``plandag inbox`` lists until a person resumes, approves or abandons
    the run; an ``escalated`` event and one ``escalation_hook`` event per hook called
    (:class:`plandag.escalation.HookOutcome`: a refused URL, a failed command...) are
    recorded. A hook's failure never changes the run's state.

    Args:
        store: the run store (the run's state is already ``escalated``).
        run_id: the run.
        reason: one of :data:`~plandag.scheduler.result.ESCALATION_REASONS`.
        detail: the sentence for the person, or None.
        hooks: the command, URL and callback to call, or None.

    Returns:
        The message for the person (:func:`escalation_message`), followed by what went
        wrong with each hook that failed (so that a misconfigured hook is seen at once).
    """
    from plandag.escalation import escalation_context

    now = time.time()
    context = escalation_context(store, run_id, reason, detail, at=now)
    store.add_escalation(run_id, reason, context, at=now)
    store.record_event(run_id, "escalated", {"reason": reason, "detail": detail}, now)
    failed: list[str] = []
    if hooks is not None and not hooks.empty:
        for outcome in await hooks.notify(context):
            store.record_event(run_id, "escalation_hook", outcome.as_dict(), time.time())
            if not outcome.ok:
                failed.append(outcome.detail)
    store.flush()
    message = escalation_message(run_id, reason, detail, context["actions"])
    if failed:
        message += "".join(f". An escalation hook failed: {text}" for text in failed)
    return message


def close_escalation(
    store: Store,
    run_id: str,
    decision: str,
    *,
    who: str,
    note: str | None = None,
) -> None:
    """Record a person's decision on escalated run ``run_id``: its open escalations are
    closed (``decision``, ``who``, when, ``note``) and the decision joins the ``decision``
    table, bound to the run's current plan version."""
    store.close_escalations(run_id, decision, who=who, note=note)
    versions = store.plan_versions(run_id)
    if versions:
        current = versions[-1]
        store.record_decision(
            run_id, current.version, current.hash, decision, who=who, feedback=note
        )


def _escalated_row(store: Store, run_id: str, command: str) -> Any:
    row = store.run(run_id)
    if row.status != "escalated":
        raise InputError(
            f"run {run_id} is {row.status}, not escalated: `plandag {command}` applies only "
            "to an escalated run (`plandag inbox` lists them)"
        )
    return row


def approve_escalated(store: Store, run_id: str, *, who: str, expected_hash: str | None) -> str:
    """A person approves running again the steps whose outcome was unknown in escalated
    run ``run_id`` (``plandag approve RUN_ID --hash H``); the run is taken for this process.

    Args:
        store: the run store.
        run_id: the run (exact id).
        who: the decider's name.
        expected_hash: the plan hash the person reviewed (required: the inbox shows it).

    Returns:
        The plan hash approved.

    Raises:
        InputError: the run is not escalated, was escalated for another reason than an
            unknown outcome, no hash was given, or another process took it first.
        StaleDecisionError: ``expected_hash`` is not the current plan version's hash.
    """
    from plandag.escalation import APPROVABLE_REASONS

    row = _escalated_row(store, run_id, "approve")
    open_cases = store.escalations(run_id=run_id)
    reasons = {case.reason for case in open_cases}
    if not reasons & APPROVABLE_REASONS:
        shown = ", ".join(sorted(reasons)) or "no open case"
        raise InputError(
            f"run {run_id} was escalated for {shown}: `plandag approve` applies only where a "
            f"step's outcome was unknown; use `plandag resume {run_id} --instruction TEXT` or "
            f"`plandag abandon {run_id} --reason TEXT`"
        )
    current = store.plan_versions(run_id)[-1]
    if expected_hash is None:
        raise InputError(
            f"run {run_id} is escalated: give the hash of the plan you reviewed, "
            f"`plandag approve {run_id} --hash {current.hash}` (`plandag inbox` shows it)"
        )
    if expected_hash != current.hash:
        raise StaleDecisionError(
            f"run {run_id}: --hash {expected_hash} is not its current plan (version "
            f"{current.version}, hash {current.hash}); review the case in `plandag inbox` "
            "and decide again"
        )
    if not store.claim_run(run_id, ["escalated"], row.pid):
        raise InputError(
            f"run {run_id}: another process decided on it first; `plandag runs` shows its state"
        )
    close_escalation(store, run_id, "approved", who=who)
    return current.hash


def abandon(store: Store, run_id: str, *, who: str, reason: str) -> None:
    """A person closes escalated run ``run_id`` for good (``plandag abandon``): its state
    becomes ``abandoned`` (exit 1), its case leaves the inbox, and the decision is recorded
    with ``who``, when and ``reason``.

    Raises:
        InputError: the run is not escalated, ``reason`` is empty, or another process took
            the run first.
    """
    if not reason.strip():
        raise InputError("--reason is empty: say why the run is abandoned")
    row = _escalated_row(store, run_id, "abandon")
    if not store.claim_run(run_id, ["escalated"], row.pid):
        raise InputError(
            f"run {run_id}: another process decided on it first; `plandag runs` shows its state"
        )
    store.update_run(run_id, status="abandoned", detail=reason, pid=None)
    close_escalation(store, run_id, "abandoned", who=who, note=reason)


@dataclasses.dataclass(frozen=True)
class _Gate:
    """An approval to ask while the run's effect-free steps go on."""

    request: ApprovalRequest
    approver: Approver | None
    mode: ApprovalMode


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
    plan = compiled.plan
    plan_json = plan.model_dump(mode="json", exclude_none=True)
    digest = compiled_plan_hash(compiled)
    store.create_run(
        run_id,
        command=command,
        goal=plan.goal or None,
        params=compiled.params,
        options=options.as_json(),
    )
    estimate = plan_estimate(store, compiled, executor_model=options.executor_model)
    store.add_plan_version(run_id, 1, plan_json, digest, source, estimate=estimate.as_json())
    if writer is not None:
        writer.run_started(command, plan.goal or None, dict(compiled.params))
        writer.plan(1, plan_json, digest, source)
        if compile_span is not None:
            writer.compile(1, compile_span[0], compile_span[1], list(compiled.diagnostics))
    effects = {step.tool.effects for step in compiled.steps.values()}
    if approval_needed(compiled, options.approve):
        reason = approval_reason(compiled.steps)
        return ApprovalRequest.for_plan(
            run_id, 1, compiled, reason=reason, expiry_s=options.expiry_s, estimate=estimate
        )
    if effects - {"none"}:
        store.record_decision(run_id, 1, digest, "approved", who="auto")
        if writer is not None:
            writer.approval(1, digest, "approved", "auto", None)
    return None


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
    decision = await _decide(store, request, approver, options.approve, writer)
    if decision is None:
        return _await(store, request, request.reason, writer)
    if not decision.approved:
        return _reject(store, request, decision.feedback, writer)
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
        return await _run_segment(
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
            is not one).
    """
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
            decision = await _decide(store, request, approver, "ask", writer)
            if decision is None:
                return _await(store, request, reason, writer)
            if not decision.approved:
                return _reject(store, request, decision.feedback, writer)
        elapsed = float(row.options.get("elapsed_s", 0.0))
        return await _run_segment(
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


def decide(
    store: Store,
    run_id: str,
    *,
    approved: bool,
    who: str,
    feedback: str = "",
    expected_hash: str | None = None,
    now: float | None = None,
    reject_steps: Sequence[int] = (),
    edit_steps: Mapping[int, Mapping[str, Any]] | None = None,
    compiled: CompiledPlan | None = None,
) -> str:
    """Record a decision taken from another shell (``plandag approve`` / ``reject``) on a
    run that awaits one, bound to its current plan version.

    Args:
        store: the run store.
        run_id: the run (exact id).
        approved: approve (True) or reject (False).
        who: the decider's name.
        feedback: the rejection's text (reaches the planner in full).
        expected_hash: the plan hash the person decided on (``--hash``); None: the current
            version's, refused when more than one version was shown to a person since the
            last decision (the person must say which one they reviewed).
        now: the time (seconds since the epoch; default: now).
        reject_steps: with an approval, steps to drop (with every step downstream of
            them).
        edit_steps: with an approval, new argument values by step id (each object's keys
            replace those arguments of the step).
        compiled: the version awaiting the decision, compiled again (needed with
            ``reject_steps`` or ``edit_steps``).

    Returns:
        The plan hash approved or rejected: with step choices, the hash of the new plan
        version they made (recorded ``amended`` on the version decided on, with a
        decision per step, and ``approved`` by the same person on the new one).

    Raises:
        InputError: the run does not await a decision, its request expired (it is then
            recorded ``rejected``, reason expired), or no hash was given while several plan
            versions were shown since the last decision (each is listed with its hash).
        StaleDecisionError: ``expected_hash`` is not the current version's hash.
        InvalidDecisionError: step choices that do not fit the plan (nothing is recorded).

    The decision takes the run atomically (:meth:`Store.claim_run`): of two people who
    approve at once, one gets it and the other is told so; the effects never run twice.
    """
    row = store.run(run_id)
    if row.status != "awaiting_approval":
        raise InputError(
            f"run {run_id} is {row.status}, not awaiting_approval: there is nothing to decide"
        )
    current = store.plan_versions(run_id)[-1]
    if expected_hash is None:
        shown = store.shown_since_decision(run_id)
        if len(shown) > 1:
            listed = "; ".join(f"version {version.version}: {version.hash}" for version in shown)
            verb = "approve" if approved else "reject"
            raise InputError(
                f"run {run_id}: {len(shown)} plan versions were shown since the last decision "
                f"({listed}); say which one you reviewed: `plandag {verb} {run_id} --hash "
                "HASH` (only the current one, the last listed, can be decided on)"
            )
    if expected_hash is not None and expected_hash != current.hash:
        raise StaleDecisionError(
            f"run {run_id}: --hash {expected_hash} is not the plan awaiting a decision "
            f"(version {current.version}, hash {current.hash}); give the whole hash of the "
            "plan you reviewed, or review the current plan and decide again"
        )
    moment = time.time() if now is None else now
    if row.expires_at is not None and moment > row.expires_at:
        store.record_decision(run_id, current.version, current.hash, "expired")
        store.update_run(run_id, status="rejected", detail="the approval request expired")
        raise InputError(
            f"run {run_id}: its approval request expired at "
            f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(row.expires_at))}; "
            "the run is now rejected — start it again to get a new request"
        )
    amendment: Amendment | None = None
    choice = Decision(
        approved,
        current.hash,
        feedback=feedback,
        who=who,
        reject_steps=tuple(reject_steps),
        edit_steps=dict(edit_steps or {}),
    )
    if choice.amends:
        if compiled is None:
            raise ValueError("decide: step choices need the compiled plan (compiled=...)")
        request = dataclasses.replace(
            ApprovalRequest.for_plan(run_id, current.version, compiled, reason=""),
            plan_hash=current.hash,  # the version as stored (its hash as it was made)
        )
        choice.check(request)
        amendment = amend(compiled, choice)
    if not store.claim_run(run_id, ["awaiting_approval"], row.pid):
        raise InputError(
            f"run {run_id}: another process decided on it first; `plandag runs` shows its state"
        )
    if amendment is not None:
        record_amendment(store, run_id, current.version, current.hash, choice, amendment)
        _drop_rows(store, run_id, amendment, choice)
        return amendment.plan_hash
    store.record_decision(
        run_id,
        current.version,
        current.hash,
        "approved" if approved else "rejected",
        who=who,
        feedback=feedback or None,
    )
    if not approved:
        store.update_run(run_id, status="rejected", detail=feedback or None, pid=None)
    return current.hash


def _drop_rows(store: Store, run_id: str, amendment: Amendment, decision: Decision) -> None:
    """Bring the stored steps in line with an amended plan: rows of edited steps (and those
    downstream) are forgotten, so they run again with the new arguments; steps dropped with
    a rejected one that have not succeeded end ``skipped``, reason ``rejected``."""
    rows = store.steps(run_id)
    store.discard_steps(run_id, [step_id for step_id in amendment.stale if step_id in rows])
    rejected = set(decision.reject_steps)
    now = time.time()
    for step_id in amendment.dropped:
        row = rows.get(step_id)
        if row is None or row.status == "succeeded":
            continue
        store.step_ended(
            run_id,
            step_id,
            "skipped",
            now,
            reason="rejected",
            detail=(
                f"rejected by {decision.who} in the approval request"
                + (f": {decision.feedback}" if decision.feedback else "")
                if step_id in rejected
                else "dropped: a step upstream of it was rejected"
            ),
            segment=row.segment,
            durable=False,
        )
    store.flush()


def _pid() -> int:
    import os

    return os.getpid()


class _ForwardAllButEnd:
    """An observer passing every event but ``RunFinished`` to the trace writer (a gated
    segment writes its own end, with the status the decision gave it)."""

    def __init__(self, writer: Any) -> None:
        self.writer = writer

    def __call__(self, event: events.Event) -> None:
        if not isinstance(event, events.RunFinished):
            self.writer(event)


async def _run_segment(
    store: Store,
    run_id: str,
    compiled: CompiledPlan,
    options: RunOptions,
    *,
    segment: int,
    completed: Mapping[int, Any],
    observers: Sequence[Observer],
    writer: Any,
    elapsed_s: float,
    gate: _Gate | None = None,
    hooks: EscalationHooks | None = None,
) -> DurableOutcome:
    """Run one segment (:func:`_run_segment_with`) with the model client of
    ``options.executor`` when the plan has model steps, closed after it."""
    from plandag.executors.access import model_steps

    models = options.models() if model_steps(compiled.steps) else None
    try:
        return await _run_segment_with(
            store,
            run_id,
            compiled,
            options,
            segment=segment,
            completed=completed,
            observers=observers,
            writer=writer,
            elapsed_s=elapsed_s,
            gate=gate,
            hooks=hooks,
            models=models,
        )
    finally:
        if models is not None:
            with anyio.CancelScope(shield=True):
                await models.client.aclose()


async def _run_segment_with(
    store: Store,
    run_id: str,
    compiled: CompiledPlan,
    options: RunOptions,
    *,
    segment: int,
    completed: Mapping[int, Any],
    observers: Sequence[Observer],
    writer: Any,
    elapsed_s: float,
    gate: _Gate | None = None,
    hooks: EscalationHooks | None = None,
    models: ModelAccess | None = None,
) -> DurableOutcome:
    """Run one segment; with ``gate``, ask for the approval while the steps without effects
    run (a pending approval never holds them): steps with effects start once a person
    approves; with nobody to decide, the segment ends ``awaiting_approval`` once the
    effect-free steps have all ended (their results saved: ``plandag approve`` goes on
    from them)."""
    recorder = StoreRecorder(
        store, run_id, compiled.steps, compiled.params, segment=segment, completed=completed
    )
    store.update_run(run_id, status="running", segment=segment, pid=_pid())
    all_observers: list[Observer] = [recorder, *observers]
    if writer is not None:
        all_observers.append(writer if gate is None else _ForwardAllButEnd(writer))
    started = time.monotonic()
    paused = 0.0
    decision: Decision | None = None
    amendment: Amendment | None = None
    invalid: str | None = None
    tools = {step.tool.name for step in compiled.steps.values()}
    measured = store.tool_durations(tools)
    estimate = estimate_plan(
        compiled,
        measured=measured,
        done=tuple(completed),
        executor_model=models.model if models is not None else None,
    )
    if gate is None:
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
                    decision = await _decide(
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
            _drop_rows(store, run_id, amendment, decision)
            spent = store.run(run_id)
            store.update_run(
                run_id,
                spent_usd=spent.spent_usd + result.spent_usd,
                spent_tokens=spent.spent_tokens + result.spent_tokens,
            )
            return await _run_segment(
                store,
                run_id,
                amendment.compiled,
                options,
                segment=segment,
                completed=carried,
                observers=observers,
                writer=writer,
                elapsed_s=elapsed_s + (time.monotonic() - started) - paused,
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
        before = store.run(run_id)
        stored_options = before.options
        stored_options["elapsed_s"] = elapsed_s + (time.monotonic() - started) - paused
        store.update_run(
            run_id,
            status=result.status,
            spent_usd=before.spent_usd + result.spent_usd,  # every segment's spend
            spent_tokens=before.spent_tokens + result.spent_tokens,
            options=stored_options,
            pid=None,
            **({"detail": result.escalation_detail} if result.status == "escalated" else {}),
        )
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
        waiting = _await(store, gate.request, gate.request.reason)
        if invalid is not None:
            waiting = dataclasses.replace(
                waiting, message=f"{invalid}\n{waiting.message}" if waiting.message else invalid
            )
        return dataclasses.replace(waiting, result=result, store_error=store_error)
    if gate is not None and decision is not None and not decision.approved:
        refused = _reject(store, gate.request, decision.feedback)
        return dataclasses.replace(refused, result=result, store_error=store_error)
    return DurableOutcome(run_id, result.status, result=result, store_error=store_error)
