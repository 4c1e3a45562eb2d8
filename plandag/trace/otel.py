"""OpenTelemetry export of a run's trace (the optional extra ``otel``).

The JSON Lines trace is always written; when an exporter is configured, the same records
also become OpenTelemetry spans. :class:`OtelExporter` is one of the trace writer's
exporters: it receives every record written (``run_started``, ``plan``, ``span``, ``event``,
``run_finished``; see the trace format in ``plandag.trace.writer``), already redacted.

* Each run segment becomes a root span, ``plandag <command>`` (from ``run_started`` to
  ``run_finished``; opened lazily, ``plandag run``, when a span arrives first).
* Each ``span`` record becomes a child of it with the record's own name, start and end
  (wall-clock seconds → nanoseconds since the epoch), kind ``CLIENT`` for ``llm_call`` and
  ``INTERNAL`` otherwise, attributes ``plandag.<key>`` for each ``attrs`` key, and status
  ``ERROR`` for a failed step, a failed compile or an LLM call that ended in an error. A
  step's attempts become span events named ``attempt`` at their start times.
* ``plan`` and ``event`` records (heartbeats, stalls, step starts and ends) become events on
  the run span.

:func:`exporter_from_env` builds one from the standard ``OTEL_*`` environment variables
(OpenTelemetry specification, "Environment Variable Specification" and "OTLP Exporter
Configuration"); it imports nothing of the SDK unless an exporter is configured, so plandag
runs without the extra.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer, TracerProvider
    from opentelemetry.util.types import AttributeValue

__all__ = ["OtelExporter", "exporter_from_env", "otel_attributes"]

logger = logging.getLogger(__name__)

ATTRIBUTE_PREFIX = "plandag."

# Run statuses (ARCHITECTURE.md "States and exit codes") that are errors for a tracing backend.
_FAILED_RUN_STATUSES = frozenset({"failed", "gave_up", "timed_out", "budget_exceeded"})
_INT64 = range(-(2**63), 2**63)


def _nanoseconds(seconds: Any) -> int | None:
    """Wall-clock seconds since the epoch (float) → integer nanoseconds; None if not a time."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        return None
    if not math.isfinite(seconds):
        return None
    whole = int(seconds)  # split first: seconds * 1e9 would lose ~256 ns at today's epoch
    return whole * 1_000_000_000 + round((seconds - whole) * 1_000_000_000)


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
    """Flatten a trace record's ``attrs`` into OpenTelemetry attributes.

    Args:
        attrs: the record's attributes (JSON-like).
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


def _text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else _json(value)


def _error_description(kind: str, attrs: Mapping[str, Any]) -> str | None:
    """The error description when a span record is a failure, else None."""
    if kind == "step" and attrs.get("status") == "failed":
        reason = _text(attrs.get("reason")) or "failed"
        detail = _text(attrs.get("detail"))
        return f"{reason}: {detail}" if detail else reason
    if kind == "compile" and attrs.get("ok") is False:
        return "the plan does not compile"
    if kind == "llm_call" and attrs.get("error") not in (None, ""):
        return _text(attrs.get("error"))
    return None


def _gen_ai_attributes(attrs: Mapping[str, Any]) -> dict[str, AttributeValue]:
    """OpenTelemetry semantic conventions for generative AI client spans (``gen_ai.*``)."""
    names = {
        "model": "gen_ai.request.model",
        "provider": "gen_ai.provider.name",
        "input_tokens": "gen_ai.usage.input_tokens",
        "output_tokens": "gen_ai.usage.output_tokens",
    }
    result: dict[str, AttributeValue] = {}
    for key, name in names.items():
        converted = _attribute_value(attrs.get(key))
        if converted is not None:
            result[name] = converted
    if isinstance(attrs.get("stop_reason"), str):
        result["gen_ai.response.finish_reasons"] = [attrs["stop_reason"]]
    return result


@dataclass
class _RunSpan:
    span: Span
    last_time: int


class OtelExporter:
    """Turns trace records into OpenTelemetry spans (an exporter of the trace writer).

    Args:
        tracer_provider: where spans go; None uses the global provider
            (``opentelemetry.trace.get_tracer_provider()``), which a host application may
            have configured. :func:`exporter_from_env` passes one it built from ``OTEL_*``.
        owns_provider: whether :meth:`close` also shuts the provider down (flushing its
            batch processors); True for a provider built for this exporter only.

    Call it with each record dict the trace writer writes (see the module docstring for
    the mapping). Records of one ``run_id`` share a root span; records of unknown types are
    ignored. Safe to call from several threads. Call :meth:`close` when the run ends: it
    ends root spans left open (a crashed or stopped segment) at the last time seen.

    Raises:
        ImportError: the OpenTelemetry API is not installed (``pip install plandag[otel]``).
    """

    def __init__(
        self, tracer_provider: TracerProvider | None = None, *, owns_provider: bool = False
    ) -> None:
        from opentelemetry import trace

        from plandag import __version__

        self._provider = (
            tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
        )
        self._owns_provider = owns_provider
        self._tracer: Tracer = self._provider.get_tracer("plandag", __version__)
        self._runs: dict[str, _RunSpan] = {}
        self._lock = threading.Lock()

    def __call__(self, record: Mapping[str, Any]) -> None:
        """Export one trace record (a dict of the trace format); others are ignored."""
        record_type = record.get("type")
        run_id = str(record.get("run_id") or "")
        with self._lock:
            if record_type == "run_started":
                self._start_run(run_id, record)
            elif record_type == "span":
                self._span(run_id, record)
            elif record_type == "event":
                self._event(run_id, record)
            elif record_type == "plan":
                self._plan(run_id, record)
            elif record_type == "run_finished":
                self._finish_run(run_id, record)

    # -- run spans ---------------------------------------------------------------------------

    def _start_run(self, run_id: str, record: Mapping[str, Any]) -> None:
        previous = self._runs.pop(run_id, None)
        if previous is not None:
            previous.span.end(end_time=previous.last_time)
        start = _nanoseconds(record.get("time"))
        command = record.get("command")
        attributes: dict[str, AttributeValue] = {"plandag.run_id": run_id}
        attributes.update(
            otel_attributes(
                {key: record.get(key) for key in ("segment", "command", "goal", "params")}
            )
        )
        name = f"plandag {command}" if isinstance(command, str) and command else "plandag run"
        self._open_run(run_id, name, start, attributes)

    def _open_run(
        self,
        run_id: str,
        name: str,
        start: int | None,
        attributes: dict[str, AttributeValue],
    ) -> _RunSpan:
        from opentelemetry import trace

        span = self._tracer.start_span(
            name, kind=trace.SpanKind.INTERNAL, attributes=attributes, start_time=start
        )
        run = _RunSpan(span, start if start is not None else 0)
        self._runs[run_id] = run
        return run

    def _run(self, run_id: str, start: int | None) -> _RunSpan:
        run = self._runs.get(run_id)
        if run is None:  # no run_started seen (exporter attached late): open one now
            run = self._open_run(run_id, "plandag run", start, {"plandag.run_id": run_id})
        return run

    def _finish_run(self, run_id: str, record: Mapping[str, Any]) -> None:
        from opentelemetry.trace import Status, StatusCode

        end = _nanoseconds(record.get("time"))
        run = self._run(run_id, end)
        status = record.get("status")
        run.span.set_attributes(
            otel_attributes(
                {
                    key: record.get(key)
                    for key in ("status", "spent_usd", "spent_tokens", "critical_path")
                }
            )
        )
        if status in _FAILED_RUN_STATUSES:
            run.span.set_status(Status(StatusCode.ERROR, str(status)))
        run.span.end(end_time=end if end is not None else run.last_time)
        del self._runs[run_id]

    # -- child spans and events --------------------------------------------------------------

    def _span(self, run_id: str, record: Mapping[str, Any]) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import Status, StatusCode

        kind = str(record.get("kind") or "span")
        name = str(record.get("name") or kind)
        start = _nanoseconds(record.get("start"))
        end = _nanoseconds(record.get("end"))
        if start is None:
            start = _nanoseconds(record.get("time"))
        if end is None or (start is not None and end < start):
            end = start
        raw_attrs = record.get("attrs")
        attrs: Mapping[str, Any] = raw_attrs if isinstance(raw_attrs, Mapping) else {}
        run = self._run(run_id, start)
        attributes: dict[str, AttributeValue] = {
            "plandag.run_id": run_id,
            "plandag.kind": kind,
        }
        attributes.update(otel_attributes(attrs))
        span_kind = trace.SpanKind.INTERNAL
        if kind == "llm_call":
            span_kind = trace.SpanKind.CLIENT
            attributes.update(_gen_ai_attributes(attrs))
        span = self._tracer.start_span(
            name,
            context=trace.set_span_in_context(run.span),
            kind=span_kind,
            attributes=attributes,
            start_time=start,
        )
        attempts = attrs.get("attempts")
        if kind == "step" and isinstance(attempts, Sequence) and not isinstance(attempts, str):
            for attempt in attempts:
                if isinstance(attempt, Mapping):
                    span.add_event(
                        "attempt",
                        attributes=otel_attributes(attempt, prefix=""),
                        timestamp=_nanoseconds(attempt.get("start")),
                    )
        error = _error_description(kind, attrs)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=end)
        if end is not None:
            run.last_time = max(run.last_time, end)

    def _event(self, run_id: str, record: Mapping[str, Any]) -> None:
        time = _nanoseconds(record.get("time"))
        run = self._run(run_id, time)
        raw_attrs = record.get("attrs")
        attrs: Mapping[str, Any] = raw_attrs if isinstance(raw_attrs, Mapping) else {}
        run.span.add_event(
            str(record.get("kind") or "event"),
            attributes=otel_attributes(attrs, prefix=""),
            timestamp=time,
        )
        if time is not None:
            run.last_time = max(run.last_time, time)

    def _plan(self, run_id: str, record: Mapping[str, Any]) -> None:
        time = _nanoseconds(record.get("time"))
        run = self._run(run_id, time)
        plan = record.get("plan")
        steps = plan.get("steps") if isinstance(plan, Mapping) else None
        attrs = {key: record.get(key) for key in ("version", "hash", "source")}
        if isinstance(steps, Sequence):
            attrs["steps"] = len(steps)
        run.span.add_event("plan", attributes=otel_attributes(attrs, prefix=""), timestamp=time)
        if time is not None:
            run.last_time = max(run.last_time, time)

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """End the run spans still open (at the last time seen) and, when the provider is
        this exporter's own, shut it down so batched spans are sent."""
        with self._lock:
            runs, self._runs = self._runs, {}
        for run in runs.values():
            run.span.end(end_time=run.last_time or None)
        if self._owns_provider:
            shutdown = getattr(self._provider, "shutdown", None)
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
    """An :class:`OtelExporter` configured from the ``OTEL_*`` environment, or None.

    Configured when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) is set or
    ``OTEL_TRACES_EXPORTER`` names exporters other than ``none``, unless
    ``OTEL_SDK_DISABLED=true``. ``OTEL_TRACES_EXPORTER`` is a comma-separated list of
    ``otlp`` (the default) and ``console``; other names are warned about and skipped. The
    spans go through a provider of its own (not the global one) with a batch processor; its
    resource comes from ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES``, with
    ``service.name`` ``plandag`` when neither names one. Call :meth:`OtelExporter.close` at
    the end of the run to flush.

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
    return OtelExporter(provider, owns_provider=True)
