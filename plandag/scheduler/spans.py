"""The live OpenTelemetry spans of runs and steps (:mod:`plandag.trace.otel` documents
them with the others): ``invoke_workflow plandag`` for one run of one plan,
``execute_tool TOOL`` for one attempt of one step, named and attributed by the GenAI
semantic conventions with the pinned conventions' constants
(:func:`plandag.telemetry.conventions`). Made with the OpenTelemetry API through
:mod:`plandag.telemetry`, where the provider and the content switches are set; with no
provider configured no span is made.
"""

from __future__ import annotations

from typing import Any

from plandag.telemetry import LiveSpan, conventions, error_type, start_span, tracer

__all__ = ["WORKFLOW_NAME", "end_run", "end_step", "start_run", "start_step"]


def _names() -> Any:
    """The conventions' constants (:func:`plandag.telemetry.conventions`)."""
    return conventions()


def start_step(
    run_id: str,
    step_id: int,
    tool: str,
    attempt: int,
    parent: LiveSpan | None = None,
    description: str | None = None,
) -> LiveSpan | None:
    """The ``execute_tool TOOL`` span of one attempt of one step (module docstring), under
    ``parent`` (the run's span) whichever task started the step; ``description`` is the
    tool's (``gen_ai.tool.description``)."""
    if tracer() is None:  # no provider: the conventions are not even imported
        return None
    names = _names()
    if names is None:
        return None
    gen_ai = names.gen_ai
    return start_span(
        parent=parent.context if parent is not None else None,
        name=f"{names.EXECUTE_TOOL} {tool}",
        attributes={
            gen_ai.GEN_AI_OPERATION_NAME: names.EXECUTE_TOOL,
            gen_ai.GEN_AI_TOOL_NAME: tool,
            gen_ai.GEN_AI_TOOL_TYPE: "function",
            gen_ai.GEN_AI_TOOL_CALL_ID: f"{run_id}:{step_id}",
            gen_ai.GEN_AI_TOOL_DESCRIPTION: description or None,
            "plandag.run_id": run_id,
            "plandag.step.id": step_id,
            "plandag.attempt": attempt,
        },
    )


def end_step(
    span: LiveSpan | None,
    *,
    args: Any = None,
    result: Any = None,
    error: BaseException | None = None,
    reason: str | None = None,
    detail: str = "",
) -> None:
    """End an ``execute_tool`` span: its arguments and result as content (when allowed),
    or its failure (``reason``: the step's reason code; ``error``: the exception)."""
    if span is None:
        return
    names = _names()
    if args is not None and names is not None:
        span.content(names.gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS, args)
    if error is None and reason is None:
        if names is not None:
            span.content(names.gen_ai.GEN_AI_TOOL_CALL_RESULT, result)
    else:
        kind = reason or (error_type(error) if error is not None else "_OTHER")
        message = detail or (f"{type(error).__name__}: {error}" if error is not None else kind)
        span.fail(kind, message)
    span.end()


WORKFLOW_NAME = "plandag"
"""``gen_ai.workflow.name`` of a run of a plan, and ``gen_ai.agent.name`` of an agent."""


def start_run(run_id: str, steps: int) -> LiveSpan | None:
    """The ``invoke_workflow plandag`` span of one run of one plan (module docstring)."""
    if tracer() is None:  # no provider: the conventions are not even imported
        return None
    names = _names()
    if names is None:
        return None
    gen_ai = names.gen_ai
    return start_span(
        f"{names.INVOKE_WORKFLOW} {WORKFLOW_NAME}",
        {
            gen_ai.GEN_AI_OPERATION_NAME: names.INVOKE_WORKFLOW,
            gen_ai.GEN_AI_WORKFLOW_NAME: WORKFLOW_NAME,
            "plandag.run_id": run_id,
            "plandag.steps": steps,
        },
    )


_FAILED_RUN_STATUSES = frozenset({"failed", "gave_up", "timed_out", "budget_exceeded"})


def end_run(span: LiveSpan | None, status: str, detail: str = "") -> None:
    """End an ``invoke_workflow`` (or ``invoke_agent``) span with the run's status
    (``failed``, ``gave_up``, ``timed_out`` and ``budget_exceeded`` are errors,
    ``error.type`` the status)."""
    if span is None:
        return
    span.set({"plandag.status": status})
    if status in _FAILED_RUN_STATUSES:
        span.fail(status, detail or status)
    span.end()
