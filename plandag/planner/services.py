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

__all__ = ["AgentEscalationHook", "check_hooks"]


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


def check_hooks(on_escalation: object, on_alert: object) -> None:
    """Refuse hooks that are not the protocols the agent calls (a plain function).

    Args:
        on_escalation: the agent's ``on_escalation``, or None.
        on_alert: the agent's ``on_alert``, or None.

    Raises:
        TypeError: either is given and is not an :class:`AgentEscalationHook`
            (``on_escalation``) or a :class:`~plandag.planner.alerts.AlertHooks`
            (``on_alert``).
    """
    from plandag.planner.alerts import AlertHooks

    for name, value, kind in (
        ("on_escalation", on_escalation, AgentEscalationHook),
        ("on_alert", on_alert, AlertHooks),
    ):
        if value is not None and not isinstance(value, kind):
            raise TypeError(
                f"{name}={value!r}: plandag.planner.agent.Agent is handed its hooks (a "
                f"{kind.__module__}.{kind.__name__}); for a plain function use plandag.Agent, "
                "or wrap it: plandag.escalation.EscalationHooks(callback=fn)"
            )
