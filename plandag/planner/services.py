"""What the agent is handed and imports none of (ARCHITECTURE.md, "Layout": the planner is
handed its escalation hooks as the scheduler is), typed here or below it:

* escalation hooks: :class:`AgentEscalationHook`, called once a run of
  :class:`~plandag.planner.agent.Agent` ended ``escalated``
  (:class:`plandag.escalation.EscalationHooks` is one: it builds the case and calls its
  command, URL and callback with it);
* alert hooks: :class:`plandag.planner.alerts.AlertHooks`, called with each out-of-registry
  alert (the same :class:`plandag.escalation.EscalationHooks` is one).

The agent's callers build them: the command line and the runs service from the settings
(:meth:`plandag.escalation.EscalationHooks.from_settings`), :class:`plandag.Agent` (the
Python API's face, :mod:`plandag.api`) from a plain function.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from plandag.dag.plan import Plan
    from plandag.scheduler.result import RunResult

__all__ = ["AgentEscalationHook"]


@runtime_checkable
class AgentEscalationHook(Protocol):
    """What :class:`~plandag.planner.agent.Agent` calls once a run ended ``escalated``
    (ARCHITECTURE.md, "People in the loop").
    """

    async def agent_escalated(
        self,
        result: RunResult,
        *,
        goal: str,
        plans: Sequence[Plan],
        params: Mapping[str, Any] | None,
    ) -> object:
        """Hand the escalated run to a person.

        Args:
            result: the run's result (``status`` ``escalated``).
            goal: the run's goal.
            plans: every plan version of the run, oldest first.
            params: the run's param values, or None.

        Returns:
            Anything (not read). A failure here does not change the result.
        """
        ...
