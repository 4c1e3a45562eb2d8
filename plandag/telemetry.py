"""Spans and metrics made with the OpenTelemetry API, and the switches that say where they
go and whether spans may carry message content: below every part that makes spans (the
model clients' ``chat`` spans and metrics, :mod:`plandag.models.telemetry`; the scheduler's
run and step spans, :mod:`plandag.scheduler.spans`), which use the OpenTelemetry API through
this module and never :mod:`plandag.trace`.

**Conventions.** Names, attributes and values follow the OpenTelemetry semantic conventions
for generative AI as the pinned ``opentelemetry-semantic-conventions`` package carries them
(:data:`SEMCONV_PACKAGE`, the optional extra ``otel``: the GenAI conventions of semantic
conventions 1.41, the last release that held them before they moved to their own
repository); every key and well-known value is that package's constant
(:func:`conventions`), never a string of plandag's own. Without the package, or with a
version that lacks one of them, no span or metric is made (a warning says so once).

**Content** (the conventions' opt-in attributes) only when :func:`capture_content` allows
it, in the conventions' ``parts`` format (:func:`system_instructions`,
:func:`input_messages`), as JSON text; each text is cut past :data:`CONTENT_CHARACTERS`
characters (the JSON stays whole).

The switches (:func:`use_tracer_provider`, :func:`use_meter_provider`, :func:`set_redact`)
are the ones :mod:`plandag.trace.otel` documents and hands on. With no provider configured
no span or metric is made at all (no cost per step), and nothing of OpenTelemetry is
imported.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import types
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.metrics import Histogram, MeterProvider
    from opentelemetry.trace import Span, Tracer, TracerProvider
    from opentelemetry.util.types import AttributeValue

__all__ = [
    "ATTRIBUTE_PREFIX",
    "CAPTURE_CONTENT_VARIABLE",
    "CONTENT_CHARACTERS",
    "DURATION_BUCKETS",
    "SEMCONV_PACKAGE",
    "TOKEN_BUCKETS",
    "LiveSpan",
    "block_part",
    "capture_content",
    "conventions",
    "error_type",
    "histograms",
    "input_messages",
    "meter_provider",
    "otel_attributes",
    "provider_override",
    "redacting",
    "set_redact",
    "start_span",
    "system_instructions",
    "tracer",
    "tracer_provider",
    "use_meter_provider",
    "use_tracer_provider",
]

logger = logging.getLogger("plandag.trace.otel")

ATTRIBUTE_PREFIX = "plandag."
CAPTURE_CONTENT_VARIABLE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The environment switch (``true``) for message content in spans (OpenTelemetry GenAI
instrumentations read the same one)."""

SEMCONV_PACKAGE = "opentelemetry-semantic-conventions==0.66b2"
"""The conventions' package and the one version whose constants plandag uses (the extra
``otel`` pins it)."""

CONTENT_CHARACTERS = 16_000
"""A text in a content attribute is cut past this many characters."""

TOKEN_BUCKETS: tuple[int, ...] = tuple(4**power for power in range(14))
"""``gen_ai.client.token.usage``'s bucket boundaries, as the conventions advise (1, 4, 16...
67,108,864: powers of 4)."""

DURATION_BUCKETS: tuple[float, ...] = tuple(0.01 * 2**power for power in range(14))
"""``gen_ai.client.operation.duration``'s bucket boundaries, seconds, as the conventions
advise (0.01, 0.02, 0.04... 81.92: doubling from 0.01)."""

_INT64 = range(-(2**63), 2**63)

_provider_override: TracerProvider | None = None
_meter_override: MeterProvider | None = None
_redact = False
_cached: tuple[object, Tracer] | None = None
_instruments: tuple[object, Histogram, Histogram] | None = None
_missing_said = False


@functools.cache
def _load_conventions() -> types.SimpleNamespace | None:
    try:
        from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
        from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
        from opentelemetry.semconv.attributes import error_attributes, server_attributes
    except ImportError:
        return None
    try:
        return types.SimpleNamespace(
            gen_ai=gen_ai,
            metrics=gen_ai_metrics,
            ERROR_TYPE=error_attributes.ERROR_TYPE,
            ERROR_TYPE_OTHER=error_attributes.ErrorTypeValues.OTHER.value,
            SERVER_ADDRESS=server_attributes.SERVER_ADDRESS,
            SERVER_PORT=server_attributes.SERVER_PORT,
            CHAT=gen_ai.GenAiOperationNameValues.CHAT.value,
            INVOKE_AGENT=gen_ai.GenAiOperationNameValues.INVOKE_AGENT.value,
            INVOKE_WORKFLOW=gen_ai.GenAiOperationNameValues.INVOKE_WORKFLOW.value,
            EXECUTE_TOOL=gen_ai.GenAiOperationNameValues.EXECUTE_TOOL.value,
            OUTPUT_TEXT=gen_ai.GenAiOutputTypeValues.TEXT.value,
            OUTPUT_JSON=gen_ai.GenAiOutputTypeValues.JSON.value,
            TOKEN_INPUT=gen_ai.GenAiTokenTypeValues.INPUT.value,
            TOKEN_OUTPUT=gen_ai.GenAiTokenTypeValues.OUTPUT.value,
            PROVIDERS={value.value for value in gen_ai.GenAiProviderNameValues},
            TOKEN_USAGE=gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE,
            OPERATION_DURATION=gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION,
        )
    except AttributeError:  # another version, without one of the names
        return None


def conventions() -> types.SimpleNamespace | None:
    """The constants of the pinned conventions (:data:`SEMCONV_PACKAGE`): ``gen_ai`` (its
    ``gen_ai`` attribute module), ``metrics`` (its ``gen_ai`` metric module),
    ``ERROR_TYPE``, ``SERVER_ADDRESS``, ``SERVER_PORT`` and the well-known values used here
    (``CHAT``, ``INVOKE_AGENT``, ``INVOKE_WORKFLOW``, ``EXECUTE_TOOL``, ``OUTPUT_TEXT``,
    ``OUTPUT_JSON``, ``TOKEN_INPUT``, ``TOKEN_OUTPUT``...); None when the package is
    missing or lacks one of them (a warning is logged once, when a span or metric provider
    is configured: without one nothing would be made anyway)."""
    global _missing_said
    found = _load_conventions()
    if found is None and not _missing_said and _configured():
        _missing_said = True
        logger.warning(
            "OpenTelemetry is configured but %s is not installed (or another version is): "
            "plandag makes no spans or metrics; install plandag[otel]",
            SEMCONV_PACKAGE,
        )
    return found


def _configured() -> bool:
    """Whether a span or metric provider is configured (only then is a missing conventions'
    package worth a warning)."""
    return tracer_provider() is not None or meter_provider() is not None


def use_tracer_provider(provider: TracerProvider | None) -> None:
    """Send plandag's spans to ``provider`` instead of the global one (None: the global).

    Tests and applications that keep the global provider for something else use it.
    """
    global _provider_override, _cached
    _provider_override = provider
    _cached = None


def provider_override() -> TracerProvider | None:
    """The provider given to :func:`use_tracer_provider`, or None (the global one is used)."""
    return _provider_override


def use_meter_provider(provider: MeterProvider | None) -> None:
    """Record plandag's metrics with ``provider`` instead of the global one (None: the
    global)."""
    global _meter_override, _instruments
    _meter_override = provider
    _instruments = None


def set_redact(redact: bool) -> None:
    """Keep message content out of every span (``--redact``), or allow it again.

    Args:
        redact: True to keep content out whatever ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_
            MESSAGE_CONTENT`` says.
    """
    global _redact
    _redact = redact


def redacting() -> bool:
    """Whether :func:`set_redact` keeps content out of spans."""
    return _redact


def capture_content() -> bool:
    """Whether spans may carry message content: the environment asks for it
    (:data:`CAPTURE_CONTENT_VARIABLE` is ``true``) and nothing is redacted."""
    if _redact:
        return False
    return os.environ.get(CAPTURE_CONTENT_VARIABLE, "").strip().lower() in ("true", "1")


def tracer_provider() -> TracerProvider | None:
    """The provider plandag's spans go to, or None when none is configured."""
    if _provider_override is not None:
        return _provider_override
    if "opentelemetry.trace" not in sys.modules:  # nobody has set a provider in this process
        return None
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    return provider


def meter_provider() -> MeterProvider | None:
    """The provider plandag's metrics are recorded with, or None when none is configured."""
    if _meter_override is not None:
        return _meter_override
    if "opentelemetry.metrics" not in sys.modules:
        return None
    from opentelemetry import metrics

    provider = metrics.get_meter_provider()
    if isinstance(provider, metrics.NoOpMeterProvider) or type(provider).__name__.startswith(
        "_Proxy"
    ):
        return None
    return provider


def tracer() -> Tracer | None:
    """plandag's tracer (scope ``plandag``), or None when no provider is configured (or
    the conventions' package is missing: :func:`conventions`)."""
    global _cached
    provider = tracer_provider()
    if provider is None or conventions() is None:
        return None
    if _cached is not None and _cached[0] is provider:
        return _cached[1]
    from plandag import __version__

    made = provider.get_tracer("plandag", __version__)
    _cached = (provider, made)
    return made


def histograms() -> tuple[Histogram, Histogram] | None:
    """``gen_ai.client.token.usage`` and ``gen_ai.client.operation.duration`` of plandag's
    meter, or None when no meter provider is configured (or the conventions' package is
    missing)."""
    global _instruments
    provider = meter_provider()
    if provider is None:
        return None
    names = conventions()
    if names is None:
        return None
    if _instruments is not None and _instruments[0] is provider:
        return _instruments[1], _instruments[2]
    from plandag import __version__

    meter = provider.get_meter("plandag", __version__)
    tokens = meter.create_histogram(
        names.TOKEN_USAGE,
        unit="{token}",
        description="Number of input and output tokens used.",
        explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
    )
    duration = meter.create_histogram(
        names.OPERATION_DURATION,
        unit="s",
        description="GenAI operation duration.",
        explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
    )
    _instruments = (provider, tokens, duration)
    return tokens, duration


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _attribute_value(value: Any) -> AttributeValue | None:
    """One value made legal for an OpenTelemetry attribute, or None to leave it out.

    OpenTelemetry attributes are ``str``, ``bool``, ``int`` (64-bit), ``float`` or a
    homogeneous sequence of one of them (specification, "Common: Attribute").
    """
    if value is None:
        return None
    if isinstance(value, bool | str | float):
        return value
    if isinstance(value, int):
        return value if value in _INT64 else str(value)
    if isinstance(value, list | tuple):
        items = list(value)
        if all(isinstance(item, str) for item in items):
            return [str(item) for item in items]
        if all(isinstance(item, bool) for item in items):
            return [bool(item) for item in items]
        if all(isinstance(item, int) and not isinstance(item, bool) for item in items):
            if all(item in _INT64 for item in items):
                return [int(item) for item in items]
        elif all(isinstance(item, int | float) and not isinstance(item, bool) for item in items):
            return [float(item) for item in items]
    return _json(value)


def otel_attributes(
    attrs: Mapping[str, Any], prefix: str = ATTRIBUTE_PREFIX
) -> dict[str, AttributeValue]:
    """Flatten JSON-like ``attrs`` into OpenTelemetry attributes.

    Args:
        attrs: the attributes (JSON-like).
        prefix: put before every key (default ``"plandag."``).

    Returns:
        ``{prefix + key: value}`` where ``str``, ``bool``, ``int`` (within 64 bits) and
        ``float`` stay as they are; lists of ``str``, of ``bool`` or of ``int`` stay lists;
        lists mixing ``int`` and ``float`` become lists of ``float``; anything else (dicts,
        lists of dicts, mixed lists, larger ints) becomes its compact JSON text. ``None``
        values are left out (OpenTelemetry has no null attribute).
    """
    result: dict[str, AttributeValue] = {}
    for key, value in attrs.items():
        converted = _attribute_value(value)
        if converted is not None:
            result[f"{prefix}{key}"] = converted
    return result


def _content(value: Any) -> str:
    """A content attribute's text: ``value`` as is when text, else its compact JSON."""
    return value if isinstance(value, str) else _json(value)


def _cut(text: str) -> str:
    return text if len(text) <= CONTENT_CHARACTERS else text[: CONTENT_CHARACTERS - 1] + "…"


class LiveSpan:
    """A span that has started and is the current span until :meth:`end` (made by
    :func:`start_span`; every method is safe to call and never raises)."""

    def __init__(self, span: Span, token: object) -> None:
        self.span = span
        self._token = token
        self._ended = False

    @property
    def context(self) -> Context:
        """A context with this span current: the parent to give spans started elsewhere
        (another task) that belong under it."""
        from opentelemetry import trace

        return trace.set_span_in_context(self.span)

    def set(self, attributes: Mapping[str, Any]) -> None:
        """Add attributes (values made legal as :func:`otel_attributes` does; None left
        out)."""
        for key, value in attributes.items():
            converted = _attribute_value(value)
            if converted is not None:
                self.span.set_attribute(key, converted)

    def content(self, key: str, value: Any) -> None:
        """Add a content attribute (messages, tool arguments or results; JSON text unless
        already text) only when :func:`capture_content` allows it."""
        if capture_content():
            self.span.set_attribute(key, _content(value))

    def fail(self, error_type: str, message: str) -> None:
        """Mark the span failed: ``error.type`` and status ``ERROR`` with ``message``."""
        from opentelemetry.trace import Status, StatusCode

        names = conventions()
        key = names.ERROR_TYPE if names is not None else "error.type"
        other = names.ERROR_TYPE_OTHER if names is not None else "_OTHER"
        self.span.set_attribute(key, error_type or other)
        self.span.set_status(Status(StatusCode.ERROR, message))

    def end(self) -> None:
        """End the span and make the previous span current again (once)."""
        if self._ended:
            return
        self._ended = True
        from opentelemetry import context

        try:
            context.detach(self._token)  # type: ignore[arg-type]
        except Exception:  # a detach from another context: the span still ends
            logger.debug("span %s ended outside its context", self.span)
        self.span.end()


def start_span(
    name: str,
    attributes: Mapping[str, Any],
    *,
    client: bool = False,
    parent: Context | None = None,
) -> LiveSpan | None:
    """Start a span, current from now on in this task or thread, or None when no tracer
    provider is configured.

    Args:
        name: the span's name (``execute_tool search``, ``chat claude-sonnet-4-6``...).
        attributes: its first attributes (made legal; None values left out).
        client: kind ``CLIENT`` (a call to another service), else ``INTERNAL``.
        parent: the parent context, default the current one.

    Returns:
        A :class:`LiveSpan`; call :meth:`LiveSpan.end` in the same task or thread.
    """
    made = tracer()
    if made is None:
        return None
    from opentelemetry import context, trace

    kind = trace.SpanKind.CLIENT if client else trace.SpanKind.INTERNAL
    clean = {key: value for key, value in attributes.items() if value is not None}
    span = made.start_span(
        name, context=parent, kind=kind, attributes=otel_attributes(clean, prefix="")
    )
    token = context.attach(trace.set_span_in_context(span, parent))
    return LiveSpan(span, token)


def error_type(error: BaseException) -> str:
    """``error.type`` for a failure: its reason code when it carries one (``timeout``,
    ``rate_limited``...), else its class name."""
    reason = getattr(error, "reason", None)
    return reason if isinstance(reason, str) and reason else type(error).__name__


# -- content in the conventions' parts format -------------------------------------------------


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "content": _cut(text)}


def block_part(block: Mapping[str, Any]) -> dict[str, Any]:
    """One Messages API content block (``text``, ``tool_use``, ``tool_result``...) as a part
    of the conventions' ``parts`` format."""
    kind = block.get("type")
    if kind == "text":
        return _text_part(str(block.get("text", "")))
    if kind == "tool_use":
        return {
            "type": "tool_call",
            "id": block.get("id"),
            "name": str(block.get("name", "")),
            "arguments": block.get("input"),
        }
    if kind == "tool_result":
        inner = block.get("content")
        if isinstance(inner, list):
            inner = "".join(
                str(item.get("text", "")) for item in inner if isinstance(item, Mapping)
            )
        return {
            "type": "tool_call_response",
            "id": block.get("tool_use_id"),
            "response": _cut(inner) if isinstance(inner, str) else inner,
        }
    return {key: value for key, value in block.items() if key != "cache_control"}


def system_instructions(system: str) -> list[dict[str, Any]]:
    """``gen_ai.system_instructions`` for a system prompt: one text part."""
    return [_text_part(system)]


def input_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``gen_ai.input.messages`` for a conversation (:class:`~plandag.models.base.
    ChatMessage`\\ s): each message ``{"role", "parts"}``, text as a ``text`` part,
    ``tool_use`` blocks as ``tool_call`` parts, ``tool_result`` blocks as
    ``tool_call_response`` parts (other blocks as they are, the conventions' generic
    part)."""
    made: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            parts = [_text_part(content)]
        elif isinstance(content, list):
            parts = [block_part(block) for block in content if isinstance(block, Mapping)]
        else:
            parts = []
        made.append({"role": str(message.get("role", "user")), "parts": parts})
    return made
