"""The spans of model calls, made with the OpenTelemetry API (:mod:`plandag.telemetry`).

One attempt of one model call (:func:`plandag.models.calls.call_with_retries`, a model
step's call) is a ``chat MODEL`` span of kind CLIENT, named and attributed by the
OpenTelemetry semantic conventions for generative AI: ``gen_ai.operation.name`` ``chat``,
``gen_ai.provider.name``, ``gen_ai.request.model``, ``gen_ai.request.max_tokens``, then
``gen_ai.response.model``, ``gen_ai.response.id``, ``gen_ai.response.finish_reasons``,
``gen_ai.usage.input_tokens`` (every prompt token), ``gen_ai.usage.output_tokens``,
``gen_ai.usage.cache_read.input_tokens``, ``gen_ai.usage.cache_creation.input_tokens``; a
failure sets ``error.type`` and the status ``ERROR``. The span is current while the
client calls, so the ``anthropic`` SDK's own span of the request nests under it.

The switches (:func:`~plandag.telemetry.use_tracer_provider`,
:func:`~plandag.telemetry.set_redact`) live in :mod:`plandag.telemetry`, below every client
and the scheduler, so that the model layer makes its spans without knowing the trace
package. With no provider configured no span is made at all.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from plandag.telemetry import (
    LiveSpan,
    capture_content,
    error_type,
    provider_override,
    redacting,
    start_span,
)

if TYPE_CHECKING:
    from plandag.models.base import LLMRequest, LLMResponse

__all__ = ["end_model_call", "sdk_options", "start_model_call"]


def start_model_call(provider: str, request: LLMRequest, attempt: int) -> LiveSpan | None:
    """The ``chat MODEL`` span of one attempt of a model call (module docstring)."""
    span = start_span(
        f"chat {request.model}",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": request.model,
            "gen_ai.request.max_tokens": request.max_tokens,
            "gen_ai.request.temperature": request.temperature,
            "plandag.attempt": attempt,
        },
        client=True,
    )
    if span is not None and capture_content():
        if request.system:
            span.content("gen_ai.system_instructions", request.system)
        span.content("gen_ai.input.messages", list(request.messages))
    return span


def end_model_call(
    span: LiveSpan | None, response: LLMResponse | None, error: BaseException | None
) -> None:
    """End a ``chat`` span with the response's usage, or with the failure."""
    if span is None:
        return
    if response is not None:
        usage = response.usage
        raw_id = getattr(response.raw, "id", None)
        span.set(
            {
                "gen_ai.response.model": response.model,
                "gen_ai.response.id": raw_id if isinstance(raw_id, str) else None,
                "gen_ai.response.finish_reasons": (
                    [response.stop_reason] if response.stop_reason else None
                ),
                "gen_ai.usage.input_tokens": usage.input_tokens
                + usage.cache_creation_input_tokens
                + usage.cache_read_input_tokens,
                "gen_ai.usage.output_tokens": usage.output_tokens,
                "gen_ai.usage.cache_read.input_tokens": usage.cache_read_input_tokens,
                "gen_ai.usage.cache_creation.input_tokens": usage.cache_creation_input_tokens,
            }
        )
        span.content("gen_ai.output.messages", response.text)
    if error is not None:
        span.fail(error_type(error), f"{type(error).__name__}: {error}")
    span.end()


def sdk_options() -> dict[str, Any] | None:
    """The ``open_telemetry`` option for an ``anthropic`` SDK client: None (the SDK reads
    its own ``ANTHROPIC_OPEN_TELEMETRY*`` variables) unless plandag has its own provider
    (:func:`use_tracer_provider`) or redacts (content mode held at ``metadata_only``)."""
    override = provider_override()
    redact = redacting()
    if override is None and not redact:
        return None
    enabled = os.environ.get("ANTHROPIC_OPEN_TELEMETRY", "").strip().lower() != "false"
    content = not redact and (
        capture_content()
        or os.environ.get("ANTHROPIC_OPEN_TELEMETRY_TRACES_CONTENT_MODE", "").lower() == "content"
    )
    options: dict[str, Any] = {
        "traces": {
            "enabled": enabled,
            "content_mode": "content" if content else "metadata_only",
        }
    }
    if override is not None:
        options["tracer_provider"] = override
    return options
