"""The case a person gets when a run is escalated (ARCHITECTURE.md, "States": handed to a
person with its full context).

The context is one JSON object, the same whether it is built from the run store
(:func:`escalation_context`) or from a run in memory (:func:`run_context`)::

    {"run_id", "status": "escalated", "reason", "detail", "time", "command", "goal",
     "params", "plan_versions": [{"version", "hash", "source", "plan"}],
     "completed": [{"id", "tool", "result"}],
     "failures": [{"id", "tool", "effects", "status", "reason", "detail", "error",
                   "attempts", "superseded_by"}],
     "not_run": [{"id", "tool", "status", "reason", "detail"}],
     "spend": {"usd", "tokens"},
     "actions": {"resume", "approve", "abandon"} | null}

``completed``: steps that succeeded and were not replaced; ``failures``: steps that
failed, were cancelled, or were running when the process stopped (their outcome is
unknown), replaced ones included (``superseded_by``); ``not_run``: steps that never started.
A result whose JSON is longer than :data:`RESULT_CHARS` characters is shown as its first
and last halves with its length and SHA-256 (the whole result stays in the store).
``actions``: the commands that close the case (``approve`` only when a step's outcome is
unknown; None for a run outside the store). Secrets are masked everywhere
(:func:`plandag.trace.redact.scrub_secrets`): the case leaves the process (hooks).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from plandag.scheduler.result import RunResult, to_jsonable

if TYPE_CHECKING:
    from plandag.dag.plan import Plan
    from plandag.store.store import Store

__all__ = [
    "APPROVABLE_REASONS",
    "RESULT_CHARS",
    "escalation_actions",
    "escalation_context",
    "run_context",
]

RESULT_CHARS = 16_384
"""Characters of a step result's JSON kept whole in the context."""

APPROVABLE_REASONS = frozenset({"unknown_outcome"})
"""Escalation reasons a person may close with ``plandag approve RUN_ID --hash H`` (run
again the steps whose outcome is unknown)."""

_FAILED = ("failed", "cancelled", "running")


def _bounded(value: Any) -> Any:
    text = json.dumps(to_jsonable(value), ensure_ascii=False)
    if len(text) <= RESULT_CHARS:
        return value
    half = RESULT_CHARS // 2
    return {
        "excerpt": text[:half] + " … " + text[-half:],
        "chars": len(text),
        "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
    }


def escalation_actions(
    run_id: str, reason: str, plan_hash: str | None, *, has_planner: bool = True
) -> dict[str, str | None]:
    """The commands that close an escalated run's case.

    Args:
        run_id: the run.
        reason: why it escalated (one of
            :data:`~plandag.scheduler.result.ESCALATION_REASONS`).
        plan_hash: the hash of its current plan version, or None.
        has_planner: the run has a planner (``plandag run``, ``exec --planner``), which can
            follow ``resume --instruction``; without one, ``resume`` continues the run as it
            is, except where a step's outcome is unknown (that would only escalate again).

    Returns:
        ``{"resume", "approve", "abandon"}``, each a command line or None where it does not
        apply (``approve`` only for :data:`APPROVABLE_REASONS`).
    """
    approvable = reason in APPROVABLE_REASONS and plan_hash is not None
    if has_planner:
        resume: str | None = f"plandag resume {run_id} --instruction TEXT"
    else:
        resume = None if approvable else f"plandag resume {run_id}"
    return {
        "resume": resume,
        "approve": f"plandag approve {run_id} --hash {plan_hash}" if approvable else None,
        "abandon": f"plandag abandon {run_id} --reason TEXT",
    }


def _assemble(
    *,
    run_id: str,
    reason: str,
    detail: str | None,
    at: float,
    command: str | None,
    goal: str | None,
    params: Mapping[str, Any],
    versions: Sequence[Mapping[str, Any]],
    steps: Sequence[Mapping[str, Any]],
    spend: tuple[float, int],
    actions: Mapping[str, str | None] | None,
) -> dict[str, Any]:
    from plandag.trace.redact import scrub_secrets

    completed, failures, not_run = [], [], []
    for step in steps:
        status = step["status"]
        superseded = step.get("superseded_by")
        if status == "succeeded" and not superseded:
            completed.append(
                {"id": step["id"], "tool": step["tool"], "result": _bounded(step.get("result"))}
            )
        elif status in _FAILED:
            failures.append(
                {
                    "id": step["id"],
                    "tool": step["tool"],
                    "effects": step.get("effects"),
                    "status": status,
                    "reason": step.get("reason"),
                    "detail": step.get("detail"),
                    "error": step.get("error"),
                    "attempts": step.get("attempts", 0),
                    "superseded_by": superseded,
                }
            )
        elif status in ("skipped", "pending") and not superseded:
            not_run.append(
                {
                    "id": step["id"],
                    "tool": step["tool"],
                    "status": status,
                    "reason": step.get("reason"),
                    "detail": step.get("detail"),
                }
            )
    document = {
        "run_id": run_id,
        "status": "escalated",
        "reason": reason,
        "detail": detail,
        "time": at,
        "command": command,
        "goal": goal,
        "params": dict(params),
        "plan_versions": [dict(version) for version in versions],
        "completed": completed,
        "failures": failures,
        "not_run": not_run,
        "spend": {"usd": spend[0], "tokens": spend[1]},
        "actions": dict(actions) if actions is not None else None,
    }
    scrubbed: dict[str, Any] = scrub_secrets(to_jsonable(document))
    return scrubbed


def escalation_context(
    store: Store, run_id: str, reason: str, detail: str | None, *, at: float | None = None
) -> dict[str, Any]:
    """The case of stored run ``run_id`` (module docstring), read from the run store.

    Args:
        store: the run store.
        run_id: the run (exact id).
        reason: why it escalated (one of
            :data:`~plandag.scheduler.result.ESCALATION_REASONS`).
        detail: the sentence for the person, or None.
        at: when it escalated (seconds since the epoch; default now).

    Returns:
        The context, JSON-safe, secrets masked.

    Raises:
        InputError: no such run, or a result blob is missing.
    """
    row = store.run(run_id)
    versions = store.plan_versions(run_id)
    steps = [
        {
            "id": step.step_id,
            "tool": step.tool,
            "effects": step.effects,
            "status": step.status,
            "reason": step.reason,
            "detail": step.detail,
            "error": step.error,
            "attempts": step.attempts,
            "result": step.result,
            "superseded_by": step.superseded_by,
        }
        for step in store.steps(run_id).values()
    ]
    return _assemble(
        run_id=run_id,
        reason=reason,
        detail=detail,
        at=time.time() if at is None else at,
        command=row.command,
        goal=row.goal,
        params=row.params,
        versions=[
            {
                "version": version.version,
                "hash": version.hash,
                "source": version.source,
                "plan": version.plan,
            }
            for version in versions
        ],
        steps=steps,
        spend=(row.spent_usd, row.spent_tokens),
        actions=escalation_actions(
            run_id,
            reason,
            versions[-1].hash if versions else None,
            has_planner=row.command == "run" or bool(row.options.get("planner")),
        ),
    )


def run_context(
    result: RunResult,
    *,
    goal: str | None,
    plans: Sequence[Plan],
    params: Mapping[str, Any] | None = None,
    command: str | None = None,
    at: float | None = None,
) -> dict[str, Any]:
    """The case of an escalated run held in memory (a Python caller's
    :class:`~plandag.planner.agent.Agent` or :func:`~plandag.scheduler.run_plan`, with no
    run store): the same shape as :func:`escalation_context`, ``actions`` None and each
    plan version's ``hash`` None.

    Args:
        result: the run's result (``status`` ``escalated``: its ``escalation`` and
            ``escalation_detail`` give the reason and detail).
        goal: the task, or None.
        plans: every plan version, oldest first.
        params: the run's param values, or None.
        command: what started it (``run_plan``, ``Agent``), or None.
        at: when it escalated (seconds since the epoch; default ``result.ended_at``).

    Returns:
        The context, JSON-safe, secrets masked.
    """
    steps = [
        {
            "id": record.id,
            "tool": record.tool,
            "effects": None,
            "status": record.status,
            "reason": record.reason,
            "detail": record.detail,
            "error": record.error.as_dict() if record.error is not None else None,
            "attempts": record.attempts,
            "result": record.result,
            "superseded_by": record.superseded_by,
        }
        for _, record in sorted(result.steps.items())
    ]
    return _assemble(
        run_id=result.run_id,
        reason=result.escalation or "replan_caps",
        detail=result.escalation_detail,
        at=result.ended_at if at is None else at,
        command=command,
        goal=goal,
        params=params or {},
        versions=[
            {
                "version": number,
                "hash": None,
                "source": "planner" if number == 1 else "replan",
                "plan": plan.model_dump(mode="json", exclude_none=True),
            }
            for number, plan in enumerate(plans, start=1)
        ],
        steps=steps,
        spend=(result.spent_usd, result.spent_tokens),
        actions=None,
    )
