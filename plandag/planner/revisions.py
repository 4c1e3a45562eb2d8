"""A rejected plan goes back to the planner (ARCHITECTURE.md, "People in the loop"): the
person's feedback, verbatim, is the instruction for the revision, with the rejected plan;
each revision is a fresh run of the new plan under the same run id.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from plandag.dag.plan import Plan
    from plandag.planner.agent_result import AgentResult
    from plandag.scheduler.gate import Decision

__all__ = ["RunOnce", "revision_context", "run_with_revisions"]


class RunOnce(Protocol):
    """One run of a plan (:meth:`Agent.run_once <plandag.planner.agent.Agent.run_once>`)."""

    async def __call__(
        self,
        goal: str,
        context: str = "",
        params: Mapping[str, Any] | None = None,
        *,
        plan: Plan | None = None,
        run_id: str | None = None,
    ) -> AgentResult:
        """Plan ``goal`` (or run ``plan``), run it, replan, join."""
        ...


async def run_with_revisions(
    run_once: RunOnce,
    goal: str,
    context: str,
    params: Mapping[str, Any] | None,
    *,
    plan: Plan | None,
    run_id: str | None,
    max_revisions: int,
) -> AgentResult:
    """Run ``goal`` with ``run_once``; while a person rejects the plan with feedback, run
    again with the feedback as the instruction for a revised plan, at most
    ``max_revisions`` times.

    Args:
        run_once: one run.
        goal: the task.
        context: the user's trusted context, or "".
        params: the run's param values, or None.
        plan: a stored plan for the first run, or None (the planner writes it); revisions
            are always planned.
        run_id: the run's id, the same for every revision.
        max_revisions: rejections whose feedback sends the plan back (>= 0).

    Returns:
        The last run's result, with every run's ``decisions`` and the feedback texts as
        ``revisions``.
    """
    revisions: list[str] = []
    decisions: list[Decision] = []
    rejected: Plan | None = None
    while True:
        this_context = context
        if revisions:
            this_context = revision_context(context, rejected, revisions)
        result = await run_once(
            goal,
            this_context,
            params,
            plan=plan if not revisions else None,
            run_id=run_id,
        )
        decisions.extend(result.decisions)
        result = dataclasses.replace(result, decisions=tuple(decisions), revisions=tuple(revisions))
        last = result.decisions[-1] if result.decisions else None
        if (
            result.status != "rejected"
            or last is None
            or last.approved
            or len(revisions) >= max_revisions
        ):
            return result
        revisions.append(last.feedback)
        rejected = result.plan_versions[-1] if result.plan_versions else None


def revision_context(context: str, rejected: Plan | None, feedback: Sequence[str]) -> str:
    """Trusted context for a revision: the user's context, the rejected plan, and the
    person's feedback in full (the last is the instruction for this revision).

    Args:
        context: the user's trusted context, or "".
        rejected: the plan the person rejected last, or None.
        feedback: every rejection's text so far, oldest first.

    Returns:
        The context text for the planner's revision call.
    """
    parts = [context] if context else []
    if rejected is not None:
        parts.append(
            "A person rejected the previous plan:\n"
            + json.dumps(rejected.model_dump(mode="json", exclude_none=True), ensure_ascii=False)
        )
    for number, text in enumerate(feedback, start=1):
        latest = number == len(feedback)
        parts.append(
            f"The person's feedback on plan {number}"
            + (" (the instruction for this revision, in full)" if latest else "")
            + ":\n"
            + text
        )
    parts.append("Write a revised plan that follows the feedback.")
    return "\n\n".join(parts)
