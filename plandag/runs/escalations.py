"""A durable run handed to a person (ARCHITECTURE.md, "People in the loop"): its case stored
for the inbox and the escalation hooks called (:func:`escalate_run`), the message the person
reads (:func:`escalation_message`), and a person's decision closing the case
(:func:`close_escalation`); the case of a run recorded outside the runs service's own
segments (:func:`escalate_recorded`), and of any escalated outcome whose case is missing
(:func:`with_case_stored`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from plandag.escalation.hooks import EscalationHooks
from plandag.store.store import Store

if TYPE_CHECKING:
    from plandag.runs.options import DurableOutcome
    from plandag.scheduler.result import RunResult

__all__ = [
    "close_escalation",
    "escalate_recorded",
    "escalate_run",
    "escalation_message",
    "with_case_stored",
]


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


def escalate_recorded(
    store: Store,
    run_id: str,
    run: RunResult,
    *,
    hooks: EscalationHooks | None,
) -> DurableOutcome:
    """Persist the case of a run recorded outside the runs service's own segments (a
    planned run: ``plandag run``, ``exec --planner``, research) that ended ``escalated``,
    and call the hooks (:func:`escalate_run`, on an event loop of its own: the run's loop
    has ended). Returns the outcome with the message for the person."""
    import functools

    import anyio

    from plandag.runs.options import DurableOutcome

    reason = run.escalation or "replan_caps"
    message = anyio.run(
        functools.partial(escalate_run, store, run_id, reason, run.escalation_detail, hooks=hooks)
    )
    return DurableOutcome(
        run_id,
        "escalated",
        result=run,
        message=message,
        escalation=reason,
        escalation_detail=run.escalation_detail,
    )


def with_case_stored(
    store: Store,
    outcome: DurableOutcome,
    hooks: Callable[[], EscalationHooks | None],
) -> DurableOutcome:
    """``outcome`` with its case in the store: an escalated outcome whose case is not there
    yet (a code path that ended the run escalated without :func:`escalate_run`) gets it
    stored now, with the hooks ``hooks()`` gives called, so that every escalated run
    reaches the inbox; any other outcome is returned as it is."""
    if outcome.status != "escalated" or store.escalations(run_id=outcome.run_id):
        return outcome
    import dataclasses
    import functools

    import anyio

    result = outcome.result
    reason = outcome.escalation or (result.escalation if result is not None else None)
    detail = outcome.escalation_detail or (result.escalation_detail if result is not None else None)
    reason = reason or "replan_caps"
    message = anyio.run(
        functools.partial(escalate_run, store, outcome.run_id, reason, detail, hooks=hooks())
    )
    return dataclasses.replace(
        outcome,
        message=outcome.message or message,
        escalation=reason,
        escalation_detail=detail,
    )
