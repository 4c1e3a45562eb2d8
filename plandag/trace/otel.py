"""OpenTelemetry spans, live while the run goes (export: the optional extra ``otel``).

Spans start when the work starts and end when it ends, so a tracing backend sees a step
that is still running (and a crashed process leaves the spans it had already sent). Names
and attributes follow the OpenTelemetry semantic conventions for generative AI ("Semantic
conventions for generative AI systems": spans of model calls, of tools, of agents):

=====================================  ==================================================
``invoke_agent plandag`` (INTERNAL)    :meth:`plandag.planner.agent.Agent.run`: planning,
                                       the run, replans and the joiner, in one trace;
                                       ``gen_ai.operation.name`` ``invoke_agent``,
                                       ``gen_ai.agent.name`` ``plandag``.
``plandag run`` (INTERNAL)             :func:`plandag.scheduler.runner.run_plan`: the run of
                                       one plan; ``plandag.run_id``, ``plandag.steps``,
                                       ``plandag.status`` at the end.
``execute_tool TOOL`` (INTERNAL)       one attempt of one step: ``gen_ai.operation.name``
                                       ``execute_tool``, ``gen_ai.tool.name``,
                                       ``gen_ai.tool.type`` ``function``,
                                       ``gen_ai.tool.call.id`` (``RUN:STEP``, the step's
                                       idempotency key), ``plandag.step.id``,
                                       ``plandag.attempt``.
``chat MODEL`` (CLIENT)                one attempt of one model call
                                       (:func:`plandag.models.calls.call_with_retries`):
                                       ``gen_ai.operation.name`` ``chat``,
                                       ``gen_ai.provider.name``, ``gen_ai.request.model``,
                                       ``gen_ai.request.max_tokens``, then
                                       ``gen_ai.response.model``, ``gen_ai.response.id``,
                                       ``gen_ai.response.finish_reasons``,
                                       ``gen_ai.usage.input_tokens`` (every prompt token),
                                       ``gen_ai.usage.output_tokens``,
                                       ``gen_ai.usage.cache_read.input_tokens``,
                                       ``gen_ai.usage.cache_creation.input_tokens``.
=====================================  ==================================================

A failure sets ``error.type`` (the failure's reason code, else the exception's class name)
and the span's status ``ERROR`` with the message.

**Nesting.** Each span is the current span (a context variable) while its work runs, so
what runs inside it is its child: the steps of a run, the model calls of a step or of the
planner, and the spans the ``anthropic`` SDK (1.14 and later) makes of its own requests
(``anthropic.messages.create``, with the trace context sent in the request's headers).
Sync tools run in worker threads with a copy of the step's context
(:func:`plandag.tools.base.run_in_daemon_thread`), so a sync tool's own spans, and those
of the SDK it calls, nest under its step too.

**Content.** Spans carry no message content unless the standard switch
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` asks for it: then
``gen_ai.input.messages`` / ``gen_ai.system_instructions`` / ``gen_ai.output.messages`` on
model calls and ``gen_ai.tool.call.arguments`` / ``gen_ai.tool.call.result`` on steps.
With ``--redact`` (:func:`set_redact`) no content reaches any span, whatever the
environment says, the SDK's spans included (their content mode is held at
``metadata_only``).

**Where spans go.** plandag's tracer comes from the provider given to
:func:`use_tracer_provider`, else from the global one when an application or
:func:`exporter_from_env` has set it; with neither, no span is made at all (no cost per
step). :func:`exporter_from_env` builds a provider from the standard ``OTEL_*``
environment variables (OpenTelemetry specification, "Environment Variable Specification"
and "OTLP Exporter Configuration") and registers it as the global provider, so the SDK's
spans go to the same place; it imports nothing of the OpenTelemetry SDK unless an exporter
is configured.
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
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer, TracerProvider
    from opentelemetry.util.types import AttributeValue

    from plandag.models.base import LLMRequest, LLMResponse

__all__ = [
    "CAPTURE_CONTENT_VARIABLE",
    "LiveSpan",
    "OtelExporter",
    "capture_content",
    "exporter_from_env",
    "otel_attributes",
    "redacting",
    "set_redact",
    "start_span",
    "tracer",
    "use_tracer_provider",
]

logger = logging.getLogger(__name__)

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


# -- the spans plandag makes ---------------------------------------------------------------


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


def start_agent(model: str, goal: str) -> LiveSpan | None:
    """The ``invoke_agent plandag`` span of one :meth:`Agent.run
    <plandag.planner.agent.Agent.run>` (the goal is content)."""
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


def sdk_options() -> dict[str, Any] | None:
    """The ``open_telemetry`` option for an ``anthropic`` SDK client: None (the SDK reads
    its own ``ANTHROPIC_OPEN_TELEMETRY*`` variables) unless plandag has its own provider
    (:func:`use_tracer_provider`) or redacts (content mode held at ``metadata_only``)."""
    if _provider_override is None and not _redact:
        return None
    enabled = os.environ.get("ANTHROPIC_OPEN_TELEMETRY", "").strip().lower() != "false"
    content = not _redact and (
        capture_content()
        or os.environ.get("ANTHROPIC_OPEN_TELEMETRY_TRACES_CONTENT_MODE", "").lower() == "content"
    )
    options: dict[str, Any] = {
        "traces": {
            "enabled": enabled,
            "content_mode": "content" if content else "metadata_only",
        }
    }
    if _provider_override is not None:
        options["tracer_provider"] = _provider_override
    return options


# -- export ------------------------------------------------------------------------------


class OtelExporter:
    """The provider :func:`exporter_from_env` built, and the way to flush it.

    Args:
        tracer_provider: the provider plandag's spans (and the SDK's) go to.
        owns_provider: whether :meth:`close` shuts the provider down (flushing its batch
            processors); True for a provider built for this process's export.

    Attributes:
        provider: the provider.
    """

    def __init__(self, tracer_provider: TracerProvider, *, owns_provider: bool = False) -> None:
        self.provider = tracer_provider
        self._owns_provider = owns_provider

    def flush(self) -> None:
        """Send the spans batched so far (never raises)."""
        flush = getattr(self.provider, "force_flush", None)
        if callable(flush):
            try:
                flush()
            except Exception as error:
                logger.warning("OpenTelemetry flush failed: %s", error)

    def close(self) -> None:
        """Flush; and, when the provider is this exporter's own, shut it down."""
        self.flush()
        if self._owns_provider:
            shutdown = getattr(self.provider, "shutdown", None)
            if callable(shutdown):
                shutdown()


def _otlp_exporter(environ: Mapping[str, str]) -> SpanExporter | None:
    """An OTLP span exporter for the configured protocol, or None when none is installed.

    ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` / ``OTEL_EXPORTER_OTLP_PROTOCOL``: ``grpc``,
    ``http/protobuf`` (the specification's default) or ``http/json``; unset tries HTTP then
    gRPC. The exporter reads its endpoint, headers and timeout from the environment itself.
    """
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or ""
    ).strip()
    modules = {
        "grpc": ["opentelemetry.exporter.otlp.proto.grpc.trace_exporter"],
        "http/protobuf": ["opentelemetry.exporter.otlp.proto.http.trace_exporter"],
        "": [
            "opentelemetry.exporter.otlp.proto.http.trace_exporter",
            "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
        ],
    }.get(protocol)
    if modules is None:
        logger.warning("OTEL_EXPORTER_OTLP_PROTOCOL=%s is not supported; no OTLP export", protocol)
        return None
    import importlib

    for module_name in modules:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        exporter: SpanExporter = module.OTLPSpanExporter()
        return exporter
    logger.warning(
        "OpenTelemetry export is configured but no OTLP exporter is installed; "
        "install plandag[otel] (opentelemetry-exporter-otlp-proto-http)"
    )
    return None


def exporter_from_env(environ: Mapping[str, str] | None = None) -> OtelExporter | None:
    """Configure span export from the ``OTEL_*`` environment; None when nothing is.

    Configured when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) is set or
    ``OTEL_TRACES_EXPORTER`` names exporters other than ``none``, unless
    ``OTEL_SDK_DISABLED=true``. ``OTEL_TRACES_EXPORTER`` is a comma-separated list of
    ``otlp`` (the default) and ``console``; other names are warned about and skipped. The
    spans go through a provider with a batch processor per exporter; its resource comes
    from ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES``, with ``service.name``
    ``plandag`` when neither names one. The provider becomes the global one when no
    application has set one (so the ``anthropic`` SDK's spans go there too); when one is
    set already, that one is used and nothing is built. Call :meth:`OtelExporter.close`
    when the command ends, to flush.

    Args:
        environ: the variables that decide whether and which exporters are built; None
            reads ``os.environ``. The OTLP exporter and the resource read their own settings
            (endpoint, headers, service name) from ``os.environ`` in any case.

    Returns:
        The exporter; None when nothing is configured (the SDK is then never imported),
        when the SDK (``opentelemetry-sdk``) or an exporter package is missing (a warning
        is logged), or when ``OTEL_TRACES_EXPORTER=none``.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    names = [
        name.strip().lower()
        for name in env.get("OTEL_TRACES_EXPORTER", "").split(",")
        if name.strip()
    ]
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if "none" in names or (not names and not endpoint):
        return None
    existing = tracer_provider()
    if existing is not None:  # the application's own provider: spans already go there
        return OtelExporter(existing)
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        logger.warning(
            "OpenTelemetry export is configured (OTEL_*) but opentelemetry-sdk is not "
            "installed; install plandag[otel]"
        )
        return None
    span_exporters: list[SpanExporter] = []
    for name in names or ["otlp"]:
        if name == "otlp":
            otlp = _otlp_exporter(env)
            if otlp is not None:
                span_exporters.append(otlp)
        elif name == "console":
            span_exporters.append(ConsoleSpanExporter())
        else:
            logger.warning("OTEL_TRACES_EXPORTER=%s is not supported by plandag; skipped", name)
    if not span_exporters:
        return None
    named = "OTEL_SERVICE_NAME" in env or "service.name=" in env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    resource = Resource.create({} if named else {"service.name": "plandag"})
    provider = SdkTracerProvider(resource=resource)
    for span_exporter in span_exporters:
        provider.add_span_processor(BatchSpanProcessor(span_exporter))
    from opentelemetry import trace

    trace.set_tracer_provider(provider)
    return OtelExporter(provider, owns_provider=True)
