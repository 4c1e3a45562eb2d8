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
``plandag run`` (INTERNAL)             :func:`plandag.scheduler.run_plan`: the run of
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

The switches below and the span machinery live in :mod:`plandag.telemetry`, the
``chat`` spans in :mod:`plandag.models.telemetry` and the run and step spans in
:mod:`plandag.scheduler.spans` (the model layer and the scheduler make their spans with the
OpenTelemetry API, without knowing this package); they are handed on here under the same
names.

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

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from plandag.models.telemetry import end_model_call, sdk_options, start_model_call
from plandag.planner.spans import start_agent
from plandag.scheduler.spans import end_run, end_step, start_run, start_step
from plandag.telemetry import (
    CAPTURE_CONTENT_VARIABLE,
    LiveSpan,
    capture_content,
    error_type,
    otel_attributes,
    redacting,
    set_redact,
    start_span,
    tracer,
    tracer_provider,
    use_tracer_provider,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import TracerProvider

__all__ = [
    "CAPTURE_CONTENT_VARIABLE",
    "LiveSpan",
    "OtelExporter",
    "capture_content",
    "end_model_call",
    "end_run",
    "end_step",
    "error_type",
    "exporter_from_env",
    "otel_attributes",
    "redacting",
    "sdk_options",
    "set_redact",
    "start_agent",
    "start_model_call",
    "start_run",
    "start_span",
    "start_step",
    "tracer",
    "tracer_provider",
    "use_tracer_provider",
]

logger = logging.getLogger(__name__)

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
