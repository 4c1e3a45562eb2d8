"""A durable run handed to a person (ARCHITECTURE.md, "People in the loop"): its case stored
for the inbox and the escalation hooks called (:func:`escalate_run`), the message the person
reads (:func:`escalation_message`), and a person's decision closing the case
(:func:`close_escalation`)."""

from __future__ import annotations

import time
from collections.abc import Mapping

from plandag.escalation.hooks import EscalationHooks
from plandag.store.store import Store

__all__ = [
    "close_escalation",
    "escalate_run",
    "escalation_message",
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
