"""Spans made with the OpenTelemetry API, and the switches that say where spans go and
whether they may carry message content: below every part that makes spans (the model
clients' ``chat`` spans, :mod:`plandag.models.telemetry`; the scheduler's run and step
spans, :mod:`plandag.scheduler.spans`), which use the OpenTelemetry API through this module
and never :mod:`plandag.trace`.

The switches (:func:`use_tracer_provider`, :func:`set_redact`) are the ones
:mod:`plandag.trace.otel` documents and hands on. With no provider configured no span is
made at all (no cost per step), and nothing of OpenTelemetry is imported.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer, TracerProvider
    from opentelemetry.util.types import AttributeValue

__all__ = [
    "ATTRIBUTE_PREFIX",
    "CAPTURE_CONTENT_VARIABLE",
    "LiveSpan",
    "capture_content",
    "error_type",
    "otel_attributes",
    "provider_override",
    "redacting",
    "set_redact",
    "start_span",
    "tracer",
    "tracer_provider",
    "use_tracer_provider",
]

logger = logging.getLogger("plandag.trace.otel")

ATTRIBUTE_PREFIX = "plandag."
CAPTURE_CONTENT_VARIABLE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The environment switch (``true``) for message content in spans (OpenTelemetry GenAI
instrumentations read the same one)."""

_INT64 = range(-(2**63), 2**63)
_CONTENT_CHARACTERS = 16_000  # an attribute of content is cut past this many characters

_provider_override: TracerProvider | None = None
_redact = False
_cached: tuple[object, Tracer] | None = None


def use_tracer_provider(provider: TracerProvider | None) -> None:
    """Send plandag's spans to ``provider`` instead of the global one (None: the global).

    Anthropic clients built afterwards send the SDK's spans there too. Tests and
    applications that keep the global provider for something else use it.
    """
    global _provider_override, _cached
    _provider_override = provider
    _cached = None


def provider_override() -> TracerProvider | None:
    """The provider given to :func:`use_tracer_provider`, or None (the global one is used)."""
    return _provider_override


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


def tracer() -> Tracer | None:
    """plandag's tracer (scope ``plandag``), or None when no provider is configured."""
    global _cached
    provider = tracer_provider()
    if provider is None:
        return None
    if _cached is not None and _cached[0] is provider:
        return _cached[1]
    from plandag import __version__

    made = provider.get_tracer("plandag", __version__)
    _cached = (provider, made)
    return made


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
    text = value if isinstance(value, str) else _json(value)
    return text if len(text) <= _CONTENT_CHARACTERS else text[: _CONTENT_CHARACTERS - 1] + "…"


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
        """Add a content attribute (messages, tool arguments or results) only when
        :func:`capture_content` allows it."""
        if capture_content():
            self.span.set_attribute(key, _content(value))

    def fail(self, error_type: str, message: str) -> None:
        """Mark the span failed: ``error.type`` and status ``ERROR`` with ``message``."""
        from opentelemetry.trace import Status, StatusCode

        self.span.set_attribute("error.type", error_type or "_OTHER")
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
