"""The approval gate of a run of the agent (ARCHITECTURE.md, "People in the loop"): a plan
version with effects is held until it needs no decision or a person approves it; a
step-by-step decision amends the plan (:class:`~plandag.planner.agent_result.PlanAmendment`).
"""

from __future__ import annotations

import logging

from plandag.compiler.compiled import allowed_hosts
from plandag.dag.plan import Plan
from plandag.dag.references import find_references
from plandag.planner.agent_result import PlanAmendment
from plandag.planner.agent_run import PlanningFailed, RunState
from plandag.planner.agent_settings import AgentSettings
from plandag.scheduler.decisions import step_decisions
from plandag.scheduler.gate import (
    ApprovalRequest,
    ApprovalRequiredError,
    Decision,
    InvalidDecisionError,
    StaleDecisionError,
    approval_needed,
    approval_reason,
    downstream,
    tainted_egress_steps,
)
from plandag.scheduler.session import RunSession

__all__ = ["ApprovingRun", "require_approver"]

logger = logging.getLogger("plandag.planner")


class ApprovingRun(RunState):
    """A run (:class:`~plandag.planner.agent_run.RunState`) with the approval gate."""

    async def approve(self, session: RunSession, *, first: bool) -> None:
        """The approval gate (ARCHITECTURE.md, "People in the loop"): release the held
        steps with effects when the plan needs no decision or a person approves it;
        otherwise end the run ``awaiting_approval`` or ``rejected`` (raising
        :class:`PlanningFailed` for the first plan; a replan's rejection ends the run where
        it is).

        Raises:
            PlanningFailed: the first plan was not approved.
        """
        agent = self.agent
        mode = agent.approve
        steps = session.steps
        tainted = tainted_egress_steps(steps)
        if mode is None and not tainted:
            return
        if mode is not None and not approval_needed(steps, mode):
            session.approve_effects()
            return
        plan = Plan(
            goal=self.goal,
            params=session.plan.params,
            steps=[steps[key].step for key in sorted(steps)],
            output=session.output,
        )
        reason = approval_reason(steps)
        if not first:
            reason = f"replan {len(self.replans)} adds steps: {reason}"
        listed = () if agent.read_only else (host for step in steps.values() for host in step.hosts)
        request = ApprovalRequest.for_steps(
            session.run_id,
            max(len(self.versions), 1),
            plan,
            self.params,
            steps,
            agent.write_boundary,
            reason=reason,
            expiry_s=agent.approval_expiry_s,
            http_allow=allowed_hosts(agent.http_allow, listed),
            estimate=self.estimates[-1] if first and self.estimates else None,
        )
        self.request = request
        if agent.approver is None or mode in ("never", None):
            # A pending approval never holds effect-free branches: they run to their end
            # (their results kept for the run's approval), then the run waits.
            await session.settled()
            self.fail(
                "awaiting_approval",
                "AwaitingApproval",
                f"{reason}; nobody here can approve it (plan hash {request.plan_hash})",
            )
            raise PlanningFailed
        with session.waiting_for_person():
            decision = await agent.approver(request)
        try:
            decision.check(request)
            if decision.approved and decision.amends:
                self.amend(session, request, decision)
        except (StaleDecisionError, InvalidDecisionError) as error:
            self.fail("awaiting_approval", type(error).__name__, str(error))
            raise PlanningFailed from None
        self.decisions.append(decision)
        if decision.approved:
            session.approve_effects()
            return
        self.fail("rejected", "Rejected", decision.feedback or "rejected without feedback")
        raise PlanningFailed

    def amend(self, session: RunSession, request: ApprovalRequest, decision: Decision) -> None:
        """Apply a step-by-step approval to the session: edited steps take their new
        arguments, rejected steps and those downstream of them end ``skipped`` (reason
        ``rejected``; the replanner may replace them, and a replacement with effects asks
        again). The plan this makes is a new version, approved by the same person.

        Raises:
            InvalidDecisionError: a chosen step has already started, or an edit does not
                compile (nothing was changed when a step had started).
        """
        steps = session.steps
        try:
            session.amend(
                decision.reject_steps,
                decision.edit_steps,
                f"rejected by {decision.who} in the approval request"
                + (f": {decision.feedback}" if decision.feedback else ""),
            )
        except ValueError as error:
            raise InvalidDecisionError(f"run {session.run_id}: {error}") from None
        dropped = downstream(request.dependencies, decision.reject_steps)
        kept = {key: steps[key] for key in sorted(steps) if key not in dropped}
        output = session.output
        if output is not None and any(
            reference.step_id in dropped for _, reference in find_references(output)
        ):
            output = None
        plan = Plan(
            goal=self.goal,
            params=session.plan.params,
            steps=[step.step for step in kept.values()],
            output=output,
        )
        agent = self.agent
        listed = () if agent.read_only else (host for step in kept.values() for host in step.hosts)
        amended = ApprovalRequest.for_steps(
            session.run_id,
            request.version + 1,
            plan,
            self.params,
            kept,
            agent.write_boundary,
            reason=request.reason,
            expiry_s=agent.approval_expiry_s,
            http_allow=allowed_hosts(agent.http_allow, listed),
        )
        self.add_version(plan, "amended")
        self.request = amended
        self.amendments.append(
            PlanAmendment(
                version=request.version,
                plan_hash=request.plan_hash,
                new_version=amended.version,
                new_plan_hash=amended.plan_hash,
                who=decision.who,
                feedback=decision.feedback,
                steps=step_decisions(request.plan, decision, dropped),
            )
        )


def require_approver(agent: AgentSettings, plan: Plan | None) -> None:
    """Refuse to start a run of ``agent`` without an approver when a plan could have
    effects.

    Args:
        agent: the agent.
        plan: the stored plan the run runs, or None (a model plans).

    Raises:
        ApprovalRequiredError: no ``approve`` and, unless ``read_only``, a stored plan
            with a step whose tool has effects, or (a model plans) a registry with such
            a tool.
    """
    if agent.approve is not None or agent.read_only:
        return
    tools = agent.registry.tools
    if plan is not None:
        names = [step.tool for step in plan.steps]
        where = "the plan has steps with effects"
    else:
        names = list(tools)
        where = "the model may plan steps with effects (the registry has tools with effects"
    effects = sorted(
        {
            f"{name} [{tools[name].effects}]"
            for name in names
            if name in tools and tools[name].effects != "none"
        }
    )
    if not effects:
        return
    shown = ", ".join(effects[:5]) + (f" and {len(effects) - 5} more" if len(effects) > 5 else "")
    closing = ")" if plan is None else ""
    raise ApprovalRequiredError(
        f"Agent: {where}: {shown}{closing} and no approver; pass approve= an approver (a "
        'callable taking an ApprovalRequest and returning a Decision), "auto" (write '
        'effects approved, irreversible ones need an approver) or "never" (a plan with '
        "effects ends awaiting_approval), or read_only=True. Nothing ran."
    )
