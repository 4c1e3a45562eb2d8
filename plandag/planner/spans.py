"""The planner's OpenTelemetry span: the ``invoke_agent plandag`` span of one
:meth:`Agent.run <plandag.planner.agent.Agent.run>`, made with the OpenTelemetry API through
:mod:`plandag.telemetry` (OpenTelemetry GenAI semantic conventions; ended with
:func:`plandag.scheduler.spans.end_run`). :mod:`plandag.trace.otel` hands it on.
"""

from __future__ import annotations

from plandag.telemetry import LiveSpan, start_span

__all__ = ["start_agent"]


def start_agent(model: str, goal: str) -> LiveSpan | None:
    """The ``invoke_agent plandag`` span of one :meth:`Agent.run
    <plandag.planner.agent.Agent.run>` (the goal is content), or None when no tracer
    provider is set."""
    span = start_span(
        "invoke_agent plandag",
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "plandag",
            "gen_ai.request.model": model,
        },
    )
    if span is not None:
        span.content("gen_ai.input.messages", [{"role": "user", "content": goal}])
    return span
