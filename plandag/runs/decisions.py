"""A person's decisions on a durable run: asked while it runs (:func:`ask_decision`), taken
later from another shell or the console (:func:`decide`: approve, reject, or step by step),
on an escalated run (:func:`approve_escalated`, :func:`abandon`), and the run saved while it
waits for one (:func:`save_awaiting`) or after a refusal (:func:`save_rejected`)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import Any

from plandag.approval import (
    ApprovalMode,
    ApprovalRequest,
    Approver,
    Decision,
    InvalidDecisionError,
    StaleDecisionError,
)
from plandag.approval.steps import Amendment, amend
from plandag.compiler.compiled import CompiledPlan
from plandag.errors import InputError
from plandag.runs.escalations import close_escalation
from plandag.runs.options import DurableOutcome
from plandag.store.store import Store

__all__ = [
    "abandon",
    "approve_escalated",
    "ask_decision",
    "decide",
    "drop_rejected_rows",
    "record_amendment",
    "save_awaiting",
    "save_rejected",
]


async def ask_decision(
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


def save_awaiting(
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


def save_rejected(
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
        drop_rejected_rows(store, run_id, amendment, choice)
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


def drop_rejected_rows(store: Store, run_id: str, amendment: Amendment, decision: Decision) -> None:
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
    from plandag.escalation import APPROVABLE_REASONS, escalation_actions
    from plandag.runs.options import RunOptions

    row = _escalated_row(store, run_id, "approve")
    open_cases = store.escalations(run_id=run_id)
    reasons = {case.reason for case in open_cases}
    if not reasons & APPROVABLE_REASONS:
        shown = ", ".join(sorted(reasons)) or "no open case"
        # the hint names only what this run can do: `resume --instruction` needs a planner
        actions = escalation_actions(
            run_id,
            open_cases[-1].reason if open_cases else "",
            None,
            has_planner=RunOptions.from_json(row.options).planner is not None,
        )
        instead = " or ".join(
            f"`{actions[key]}`" for key in ("resume", "abandon") if actions[key] is not None
        )
        raise InputError(
            f"run {run_id} was escalated for {shown}: `plandag approve` applies only where a "
            f"step's outcome was unknown; use {instead}"
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
