"""The planner's OpenTelemetry span: the ``invoke_agent plandag`` span of one
:meth:`Agent.run <plandag.planner.agent.Agent.run>`, made with the OpenTelemetry API through
:mod:`plandag.telemetry` with the pinned GenAI conventions' constants (ended with
:func:`plandag.scheduler.spans.end_run`). :mod:`plandag.trace.otel` hands it on.
"""

from __future__ import annotations

from plandag.scheduler.spans import WORKFLOW_NAME
from plandag.telemetry import LiveSpan, conventions, input_messages, start_span, tracer

__all__ = ["start_agent"]


def start_agent(model: str, goal: str, provider: str = "") -> LiveSpan | None:
    """The ``invoke_agent plandag`` span of one :meth:`Agent.run
    <plandag.planner.agent.Agent.run>` (module docstring; the goal is content).

    Args:
        model: the planner's model (``gen_ai.request.model``).
        goal: the task, recorded as the input message when content is allowed.
        provider: the planner's provider (``gen_ai.provider.name``).
    """
    names = conventions()
    if names is None or tracer() is None:
        return None
    from plandag import __version__

    gen_ai = names.gen_ai
    span = start_span(
        f"{names.INVOKE_AGENT} {WORKFLOW_NAME}",
        {
            gen_ai.GEN_AI_OPERATION_NAME: names.INVOKE_AGENT,
            gen_ai.GEN_AI_PROVIDER_NAME: provider or None,
            gen_ai.GEN_AI_AGENT_NAME: WORKFLOW_NAME,
            gen_ai.GEN_AI_AGENT_VERSION: __version__,
            gen_ai.GEN_AI_REQUEST_MODEL: model,
        },
    )
    if span is not None:
        span.content(
            gen_ai.GEN_AI_INPUT_MESSAGES, input_messages([{"role": "user", "content": goal}])
        )
    return span
