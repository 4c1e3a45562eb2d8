"""The runs and the open cases as ``plandag runs`` and ``plandag inbox`` list them (also
their ``--json``): each run's state as a person reads it (a run whose process died is
``crashed``), the escalated runs waiting for a person and the crashed runs, with the
commands that close each one. Goals are shown with secrets masked (personal data is the
trace's to mask, with ``--redact``)."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from plandag.errors import InputError
from plandag.runs.options import ran_offline

if TYPE_CHECKING:
    from plandag.store import Store

__all__ = [
    "inbox_items",
    "process_gone",
    "run_document",
    "shown_goal",
    "shown_status",
    "still_stored",
]


def process_gone(row: Any) -> bool:
    """A run ``running`` that no live process holds: it crashed
    (:attr:`~plandag.store.RunRow.crashed`: its recorded process died, or the id now
    belongs to another process), or this very process is recorded (a command reading a run
    runs none: what an earlier call in this process left)."""
    return bool(row.status == "running" and (row.pid == os.getpid() or row.crashed))


def still_stored(store: Store, run_id: str) -> bool:
    """Whether run ``run_id`` is still in ``store`` (``plandag gc`` may have deleted it)."""
    try:
        store.run(run_id)
    except InputError:
        return False
    return True


def shown_goal(goal: str | None) -> str:
    """A goal as listed: secrets masked always, personal data not (the trace masks it with
    --redact; the store keeps what the run needs)."""
    from plandag.trace.redact import scrub_secrets

    return str(scrub_secrets(goal or ""))


def shown_status(row: Any, escalation: str | None = None) -> str:
    """The state as listed: a run ``running`` whose process is gone crashed or was killed
    (``crashed (resume it)``); an escalated run with its reason (``escalated
    (replan_caps)``); a pending approval past its expiry (``awaiting_approval
    (expired)``)."""
    if process_gone(row):
        return "crashed (resume it)"
    if row.status == "escalated" and escalation is not None:
        return f"escalated ({escalation})"
    expired = row.expires_at is not None and time.time() > row.expires_at
    if row.status == "awaiting_approval" and expired:
        return "awaiting_approval (expired)"
    return str(row.status)


def run_document(row: Any, escalation: str | None) -> dict[str, Any]:
    """One run as ``plandag runs --json`` lists it (``escalation``: the reason of its open
    case, or None; ``offline``: its model answers are the offline model's extracts)."""
    return {
        "run_id": row.run_id,
        "status": row.status,
        "state": "crashed" if process_gone(row) else row.status,
        "process_gone": process_gone(row),
        "command": row.command,
        "goal": shown_goal(row.goal),
        "created": row.created,
        "updated": row.updated,
        "version": row.version,
        "segment": row.segment,
        "spent_usd": row.spent_usd,
        "spent_tokens": row.spent_tokens,
        "awaiting_reason": row.awaiting_reason,
        "expires_at": row.expires_at,
        "escalation": escalation if row.status == "escalated" else None,
        "detail": row.detail if row.status in ("escalated", "abandoned") else None,
        "offline": ran_offline(row.options),
    }


def inbox_items(store: Store) -> list[dict[str, Any]]:
    """The open escalations and the crashed runs of ``store``, oldest first, as ``plandag
    inbox --json`` lists them: ``run_id``, ``reason`` (``crashed`` for a crashed run),
    ``detail``, ``time``, ``goal``, ``command``, ``spend`` (``usd``, ``tokens``),
    ``plan_hash``, ``actions`` (the commands that close it: ``resume``, ``approve``,
    ``abandon``, each None where it does not apply) and ``offline`` (its model answers
    are the offline model's extracts: :func:`plandag.runs.options.ran_offline`)."""
    items = [_escalated_item(case) for case in store.escalations()]
    items += [_crashed_item(store, row) for row in store.crashed_runs()]
    items.sort(key=lambda item: item["time"])
    for item in items:
        try:
            item["offline"] = ran_offline(store.run(item["run_id"]).options)
        except InputError:  # deleted since (plandag gc)
            item["offline"] = False
    return items


def _crashed_item(store: Store, row: Any) -> dict[str, Any]:
    """A crashed run as ``plandag inbox --json`` lists it (reason ``crashed``): its process
    died while running it, and ``plandag resume`` goes on with it."""
    versions = store.plan_versions(row.run_id)
    return {
        "run_id": row.run_id,
        "reason": "crashed",
        "detail": (
            f"its process {row.pid} died while running it; steps it completed are kept, "
            "and resume runs the rest (a step whose outcome is unknown runs again only if "
            "it is idempotent or keyed, else a person decides)"
        ),
        "time": row.updated,
        "goal": shown_goal(row.goal),
        "command": row.command,
        "spend": {"usd": row.spent_usd, "tokens": row.spent_tokens},
        "plan_hash": versions[-1].hash if versions else None,
        "actions": {
            "resume": f"plandag resume {row.run_id}",
            "approve": None,
            "abandon": None,
        },
    }


def _escalated_item(case: Any) -> dict[str, Any]:
    """One open escalation as ``plandag inbox --json`` lists it."""
    context = case.context
    return {
        "run_id": case.run_id,
        "reason": case.reason,
        "detail": context.get("detail"),
        "time": case.time,
        "goal": shown_goal(context.get("goal")),
        "command": context.get("command"),
        "spend": context.get("spend") or {"usd": 0.0, "tokens": 0},
        "plan_hash": (context.get("plan_versions") or [{}])[-1].get("hash"),
        "actions": context.get("actions")
        or {
            "resume": f"plandag resume {case.run_id} --instruction TEXT",
            "approve": None,
            "abandon": f"plandag abandon {case.run_id} --reason TEXT",
        },
    }
