"""The live OpenTelemetry spans of runs and steps (:mod:`plandag.trace.otel` documents
them with the others): ``plandag run`` for one run of one plan, ``execute_tool TOOL`` for
one attempt of one step, named and attributed by the OpenTelemetry semantic conventions for
generative AI. Made with the OpenTelemetry API through :mod:`plandag.telemetry`, where the
provider and the content switches are set; with no provider configured no span is made.
"""

from __future__ import annotations

from typing import Any

from plandag.telemetry import LiveSpan, error_type, start_span

__all__ = ["end_run", "end_step", "start_run", "start_step"]


def start_step(
    run_id: str, step_id: int, tool: str, attempt: int, parent: LiveSpan | None = None
) -> LiveSpan | None:
    """The ``execute_tool TOOL`` span of one attempt of one step (module docstring), under
    ``parent`` (the run's span) whichever task started the step."""
    return start_span(
        parent=parent.context if parent is not None else None,
        name=f"execute_tool {tool}",
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.type": "function",
            "gen_ai.tool.call.id": f"{run_id}:{step_id}",
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
    if args is not None:
        span.content("gen_ai.tool.call.arguments", args)
    if error is None and reason is None:
        span.content("gen_ai.tool.call.result", result)
    else:
        kind = reason or (error_type(error) if error is not None else "_OTHER")
        message = detail or (f"{type(error).__name__}: {error}" if error is not None else kind)
        span.fail(kind, message)
    span.end()


def start_run(run_id: str, steps: int) -> LiveSpan | None:
    """The ``plandag run`` span of one run of one plan."""
    return start_span("plandag run", {"plandag.run_id": run_id, "plandag.steps": steps})


_FAILED_RUN_STATUSES = frozenset({"failed", "gave_up", "timed_out", "budget_exceeded"})


def end_run(span: LiveSpan | None, status: str, detail: str = "") -> None:
    """End a ``plandag run`` (or ``invoke_agent``) span with the run's status (``failed``,
    ``gave_up``, ``timed_out`` and ``budget_exceeded`` are errors, ``error.type`` the
    status)."""
    if span is None:
        return
    span.set({"plandag.status": status})
    if status in _FAILED_RUN_STATUSES:
        span.fail(status, detail or status)
    span.end()
