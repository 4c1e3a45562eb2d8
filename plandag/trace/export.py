"""Span and metric export configured from the ``OTEL_*`` environment
(:func:`exporter_from_env`, documented with the rest in :mod:`plandag.trace.otel`, which
hands it on). Kept apart from the spans' own module so that a run that exports nothing
imports neither the model clients' telemetry nor anything of the OpenTelemetry SDK."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from plandag.telemetry import meter_provider, tracer_provider

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import TracerProvider

__all__ = ["OtelExporter", "exporter_from_env"]

logger = logging.getLogger("plandag.trace.otel")


class OtelExporter:
    """The providers :func:`exporter_from_env` built, and the way to flush them.

    Args:
        tracer_provider: the provider plandag's spans go to.
        owns_provider: whether :meth:`close` shuts the providers down (flushing their
            batch processors and metric readers); True for providers built for this
            process's export.
        meters: the meter provider built for plandag's metrics, or None.

    Attributes:
        provider: the tracer provider.
        meters: the meter provider, or None.
    """

    def __init__(
        self, tracer_provider: TracerProvider, *, owns_provider: bool = False, meters: Any = None
    ) -> None:
        self.provider = tracer_provider
        self.meters = meters
        self._owns_provider = owns_provider

    def flush(self) -> None:
        """Send the spans batched so far, and the metrics (never raises)."""
        for provider in (self.provider, self.meters):
            flush = getattr(provider, "force_flush", None)
            if callable(flush):
                try:
                    flush()
                except Exception as error:
                    logger.warning("OpenTelemetry flush failed: %s", error)

    def close(self) -> None:
        """Flush; and, when the providers are this exporter's own, shut them down."""
        self.flush()
        if self._owns_provider:
            for provider in (self.provider, self.meters):
                shutdown = getattr(provider, "shutdown", None)
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
    meters = _meter_provider_from_env(env, resource, names or ["otlp"])
    return OtelExporter(provider, owns_provider=True, meters=meters)


def _meter_provider_from_env(
    env: Mapping[str, str], resource: Any, trace_exporters: list[str]
) -> Any:
    """A meter provider for plandag's metrics, registered as the global one, or None.

    ``OTEL_METRICS_EXPORTER`` names ``otlp`` or ``console`` (unset: the exporters the
    traces use, otlp and console alike; ``none``: no metrics). The OTLP exporter reads its
    endpoint from the environment, as the span exporter does.
    """
    names = [
        name.strip().lower()
        for name in env.get("OTEL_METRICS_EXPORTER", "").split(",")
        if name.strip()
    ] or [name for name in trace_exporters if name in ("otlp", "console")]
    if "none" in names or not names or meter_provider() is not None:
        return None
    try:
        from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
        from opentelemetry.sdk.metrics.export import (
            ConsoleMetricExporter,
            MetricExporter,
            PeriodicExportingMetricReader,
        )
    except ImportError:
        return None
    exporters: list[MetricExporter] = []
    for name in names:
        if name == "console":
            exporters.append(ConsoleMetricExporter())
        elif name == "otlp":
            try:
                from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
                    OTLPMetricExporter,
                )
            except ImportError:
                logger.warning("no OTLP metric exporter installed; plandag records no metrics")
                continue
            exporters.append(OTLPMetricExporter())
    if not exporters:
        return None
    made = SdkMeterProvider(
        resource=resource,
        metric_readers=[PeriodicExportingMetricReader(exporter) for exporter in exporters],
    )
    from opentelemetry import metrics

    metrics.set_meter_provider(made)
    return made
