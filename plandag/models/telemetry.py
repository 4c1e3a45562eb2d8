"""The spans and metrics of model calls, made with the OpenTelemetry API through
:mod:`plandag.telemetry` (its conventions' constants, switches and span machinery).

**Conventions.** Names, attributes and values follow the OpenTelemetry semantic conventions
for generative AI of the pinned ``opentelemetry-semantic-conventions``, with its constants
(:func:`plandag.telemetry.conventions` says which version and why); without it no span or
metric is made.

**One span per model call.** One attempt of one model call
(:func:`plandag.models.calls.call_with_retries`, a model step's call) is one
``chat MODEL`` span of kind CLIENT (the conventions' inference span). At its start:
``gen_ai.operation.name`` ``chat``, ``gen_ai.provider.name`` (``anthropic``, ``openai``),
``gen_ai.request.model``, ``gen_ai.request.max_tokens``, ``gen_ai.output.type`` (``json``
for a request with an output schema, else ``text``), ``gen_ai.request.stream`` when
streamed, ``gen_ai.request.stop_sequences`` when given, ``gen_ai.request.temperature`` only
when the client sends one (the Anthropic client never does), ``server.address`` and
``server.port`` (the client's base URL). At its end: ``gen_ai.response.model``,
``gen_ai.response.id`` (the provider's id of the answer: Anthropic's message id, the chat
completion's id), ``gen_ai.response.finish_reasons`` (the provider's words),
``gen_ai.response.time_to_first_chunk`` (streams), ``gen_ai.usage.input_tokens`` (every
prompt token, cached ones included), ``gen_ai.usage.output_tokens``,
``gen_ai.usage.cache_read.input_tokens``, ``gen_ai.usage.cache_creation.input_tokens``; a
failure sets ``error.type`` (its reason code, else its class name) and the status ``ERROR``.

The ``anthropic`` SDK (1.14 and later) makes a span of each of its own API calls, with the
same usage under ``gen_ai.operation.name`` ``chat``: a backend that adds up usage would
count every Anthropic call twice. plandag **turns the SDK's spans off**
(``open_telemetry={"traces": False}``, :func:`sdk_options`) rather than keep them without
usage: its clients send one request per attempt (``max_retries=0``), so the SDK's span
would be the same call again, and an SDK span's attributes cannot be taken back once set.
plandag sends the trace context of its ``chat`` span in the request's headers itself
(:func:`trace_headers`, W3C ``traceparent``), on both providers' requests.

**Content** (the conventions' opt-in attributes) only when
:func:`~plandag.telemetry.capture_content` allows it, in the conventions' ``parts`` format,
as JSON text: ``gen_ai.system_instructions``
(``[{"type": "text", "content": ...}]``), ``gen_ai.input.messages`` (``[{"role",
"parts": [...]}]``: text, ``tool_call`` and ``tool_call_response`` parts) and
``gen_ai.output.messages`` (``[{"role": "assistant", "parts": [...], "finish_reason"}]``).
Each text is cut past :data:`~plandag.telemetry.CONTENT_CHARACTERS` characters (the JSON
stays whole).

**Metrics** of each attempt, when a meter provider is configured
(:func:`~plandag.telemetry.use_meter_provider`, else the global one):
``gen_ai.client.token.usage`` (a histogram, ``{token}``, one point per token type:
``input`` with every prompt token, ``output``; only when the provider reported usage) and
``gen_ai.client.operation.duration`` (seconds), with ``gen_ai.operation.name``,
``gen_ai.provider.name``, ``gen_ai.request.model``, ``gen_ai.response.model``,
``server.address``, ``server.port`` and, for a failure, ``error.type``; the bucket
boundaries are the conventions' advice.

The switches (:func:`~plandag.telemetry.use_tracer_provider`,
:func:`~plandag.telemetry.use_meter_provider`, :func:`~plandag.telemetry.set_redact`) live
in :mod:`plandag.telemetry`, below every client and the scheduler, so that the model layer
makes its spans without knowing the trace package. With no provider configured no span or
metric is made at all.
"""

from __future__ import annotations

import logging
import time
import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from plandag.models.chat_completions import content_blocks
from plandag.telemetry import (
    LiveSpan,
    block_part,
    capture_content,
    conventions,
    error_type,
    histograms,
    input_messages,
    otel_attributes,
    start_span,
    system_instructions,
    tracer,
)

if TYPE_CHECKING:
    from opentelemetry.metrics import Histogram

    from plandag.models.base import LLMRequest, LLMResponse

__all__ = [
    "ModelCall",
    "end_model_call",
    "output_messages",
    "sdk_options",
    "server_of",
    "start_model_call",
    "trace_headers",
]

logger = logging.getLogger("plandag.trace.otel")

_FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "stop": "stop",
    "max_tokens": "length",
    "length": "length",
    "tool_use": "tool_call",
    "tool_calls": "tool_call",
    "refusal": "content_filter",
    "content_filter": "content_filter",
}
"""Provider stop reasons → the conventions' ``finish_reason`` values (output messages)."""


def _response_blocks(response: LLMResponse) -> list[dict[str, Any]]:
    raw = response.raw
    if isinstance(raw, Mapping):
        return content_blocks(raw)
    content = getattr(raw, "content", None)
    if not isinstance(content, list):
        return [{"type": "text", "text": response.text}] if response.text else []
    blocks: list[dict[str, Any]] = []
    for block in content:
        kind = getattr(block, "type", None)
        if kind == "text":
            blocks.append({"type": "text", "text": str(getattr(block, "text", ""))})
        elif kind == "tool_use":
            blocks.append(
                {
                    "type": "tool_use",
                    "id": getattr(block, "id", None),
                    "name": getattr(block, "name", ""),
                    "input": getattr(block, "input", None),
                }
            )
    return blocks


def output_messages(response: LLMResponse) -> list[dict[str, Any]]:
    """``gen_ai.output.messages`` for an answer: one assistant message with its text and
    tool calls as parts and its ``finish_reason`` (``stop``, ``length``, ``tool_call``,
    ``content_filter``, else the provider's own word)."""
    stop = response.stop_reason or ""
    return [
        {
            "role": "assistant",
            "parts": [block_part(block) for block in _response_blocks(response)],
            "finish_reason": _FINISH_REASONS.get(stop, stop or "stop"),
        }
    ]


# -- model calls -------------------------------------------------------------------------------


def server_of(base_url: str | None) -> tuple[str, int] | None:
    """``(server.address, server.port)`` of a base URL (the port the scheme implies when
    the URL names none), or None without one."""
    if not base_url:
        return None
    parts = urllib.parse.urlsplit(base_url)
    if not parts.hostname:
        return None
    try:
        port = parts.port
    except ValueError:
        port = None
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)


class ModelCall:
    """One attempt of one model call being observed: its span (None without a tracer)
    and what its metrics are recorded with (made by :func:`start_model_call`)."""

    def __init__(
        self,
        span: LiveSpan | None,
        attributes: dict[str, Any],
        started: float,
        histograms: tuple[Histogram, Histogram] | None,
    ) -> None:
        self.span = span
        self.attributes = attributes
        self.started = started
        self.histograms = histograms


def start_model_call(
    client: object, request: LLMRequest, attempt: int, *, streamed: bool = False
) -> ModelCall | None:
    """The ``chat MODEL`` span of one attempt of a model call and the start of its metrics
    (module docstring), or None when neither a tracer nor a meter is configured.

    Args:
        client: the client that sends it: its ``provider``, and when it has them its
            ``base_url`` (``server.address``, ``server.port``) and ``sends_temperature``
            (False: the request's temperature is not sent, so not recorded).
        request: the call.
        attempt: 1 for the first attempt, 2 for its first retry...
        streamed: the attempt is a stream.
    """
    made = tracer()
    found_histograms = histograms()
    if made is None and found_histograms is None:
        return None
    names = conventions()
    if names is None:
        return None
    gen_ai = names.gen_ai
    provider = str(getattr(client, "provider", ""))
    server = server_of(getattr(client, "base_url", None))
    common: dict[str, Any] = {
        gen_ai.GEN_AI_OPERATION_NAME: names.CHAT,
        gen_ai.GEN_AI_PROVIDER_NAME: provider,
        gen_ai.GEN_AI_REQUEST_MODEL: request.model,
    }
    if server is not None:
        common[names.SERVER_ADDRESS], common[names.SERVER_PORT] = server
    span: LiveSpan | None = None
    if made is not None:
        sends_temperature = bool(getattr(client, "sends_temperature", True))
        span = start_span(
            f"{names.CHAT} {request.model}",
            {
                **common,
                gen_ai.GEN_AI_REQUEST_MAX_TOKENS: request.max_tokens,
                gen_ai.GEN_AI_OUTPUT_TYPE: (
                    names.OUTPUT_JSON if request.json_schema is not None else names.OUTPUT_TEXT
                ),
                gen_ai.GEN_AI_REQUEST_STREAM: True if streamed else None,
                gen_ai.GEN_AI_REQUEST_STOP_SEQUENCES: list(request.stop_sequences) or None,
                gen_ai.GEN_AI_REQUEST_TEMPERATURE: (
                    request.temperature if sends_temperature else None
                ),
                "plandag.attempt": attempt,
            },
            client=True,
        )
        if span is not None and capture_content():
            if request.system:
                span.content(gen_ai.GEN_AI_SYSTEM_INSTRUCTIONS, system_instructions(request.system))
            span.content(gen_ai.GEN_AI_INPUT_MESSAGES, input_messages(request.messages))
    return ModelCall(span, common, time.perf_counter(), found_histograms)


def end_model_call(
    call: ModelCall | None,
    response: LLMResponse | None,
    error: BaseException | None,
    *,
    ttft_s: float | None = None,
) -> None:
    """End a ``chat`` span with the response's usage, or with the failure, and record the
    attempt's metrics.

    Args:
        call: what :func:`start_model_call` returned (None: nothing to do).
        response: the answer, or None for a failure.
        error: the failure, or None.
        ttft_s: seconds to the first chunk of a stream, when one arrived.
    """
    if call is None:
        return
    names = conventions()
    if names is None:
        return
    gen_ai = names.gen_ai
    duration_s = max(time.perf_counter() - call.started, 0.0)
    metric_attributes = dict(call.attributes)
    if response is not None:
        metric_attributes[gen_ai.GEN_AI_RESPONSE_MODEL] = response.model
    if error is not None:
        metric_attributes[names.ERROR_TYPE] = error_type(error)
    span = call.span
    usage = response.usage if response is not None else None
    input_tokens = (
        usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens
        if usage is not None
        else 0
    )
    if span is not None:
        if response is not None and usage is not None:
            span.set(
                {
                    gen_ai.GEN_AI_RESPONSE_MODEL: response.model,
                    gen_ai.GEN_AI_RESPONSE_ID: response.response_id,
                    gen_ai.GEN_AI_RESPONSE_FINISH_REASONS: (
                        [response.stop_reason] if response.stop_reason else None
                    ),
                    gen_ai.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: ttft_s,
                    gen_ai.GEN_AI_USAGE_INPUT_TOKENS: input_tokens,
                    gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS: usage.output_tokens,
                    gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: usage.cache_read_input_tokens,
                    gen_ai.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: (
                        usage.cache_creation_input_tokens
                    ),
                }
            )
            span.content(gen_ai.GEN_AI_OUTPUT_MESSAGES, output_messages(response))
        if error is not None:
            span.fail(error_type(error), f"{type(error).__name__}: {error}")
        span.end()
    if call.histograms is not None:
        tokens, duration = call.histograms
        clean = otel_attributes(metric_attributes, prefix="")
        duration.record(duration_s, clean)
        if usage is not None and (input_tokens or usage.output_tokens):
            tokens.record(input_tokens, {**clean, gen_ai.GEN_AI_TOKEN_TYPE: names.TOKEN_INPUT})
            tokens.record(
                usage.output_tokens, {**clean, gen_ai.GEN_AI_TOKEN_TYPE: names.TOKEN_OUTPUT}
            )


def trace_headers() -> dict[str, str]:
    """The headers that carry the current span's trace context (W3C ``traceparent``, or
    what the configured propagators write), for a model request; empty without a tracer,
    without a current span, or when the propagators cannot be loaded. Never raises."""
    if tracer() is None:
        return {}
    try:
        from opentelemetry import trace
        from opentelemetry.propagate import inject

        if not trace.get_current_span().get_span_context().is_valid:
            return {}
        carrier: dict[str, str] = {}
        inject(carrier)
    except Exception as error:  # propagators are configuration: never fail a call for them
        logger.debug("no trace context sent: %s", error)
        return {}
    return carrier


def sdk_options() -> dict[str, Any]:
    """The ``open_telemetry`` option of every ``anthropic`` SDK client plandag builds: the
    SDK's own spans off (module docstring: plandag's ``chat`` span is the one span of each
    call, and plandag sends the trace context itself)."""
    return {"traces": False}
