"""What the scheduler is handed and imports none of (ARCHITECTURE.md, "Layout": the
scheduler is handed its services), typed here or below it:

* observers of a run's events: :data:`plandag.scheduler.events.Observer` (the run store's
  recorder, the trace writer, a heartbeat writer);
* an approver: :class:`plandag.scheduler.gate.Approver` (:mod:`plandag.approval`'s
  approvers, the web console's, a Python callable);
* escalation hooks: :class:`EscalationHook` (:class:`plandag.escalation.EscalationHooks`);
* model access for steps: :class:`plandag.access.ModelAccessProtocol`
  (:class:`plandag.executors.ModelAccess`).

Live spans are made with the OpenTelemetry API (:mod:`plandag.telemetry`): the provider
they go to is what the caller hands in (:func:`plandag.telemetry.use_tracer_provider`, or
the global one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from plandag.compiler.compiled import CompiledPlan
    from plandag.scheduler.result import RunResult

__all__ = ["EscalationHook"]


@runtime_checkable
class EscalationHook(Protocol):
    """What :func:`plandag.scheduler.run_plan` calls once a run ended ``escalated``
    (ARCHITECTURE.md, "People in the loop"). :class:`plandag.escalation.EscalationHooks`
    is one: it builds the case (:func:`plandag.escalation.run_context`) and calls its
    command, URL and callback with it.
    """

    async def run_escalated(self, result: RunResult, compiled: CompiledPlan) -> object:
        """Hand the escalated run to a person.

        Args:
            result: the run's result (``status`` ``escalated``).
            compiled: the plan it ran.

        Returns:
            Anything (not read). A failure here does not change the result.
        """
        ...
