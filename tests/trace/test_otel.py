"""plandag.trace.otel: trace records become OpenTelemetry spans (optional extra ``otel``)."""

from __future__ import annotations

import http.server
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode

from plandag.trace.otel import OtelExporter, exporter_from_env, otel_attributes

T = 1_700_000_000.0
T_NS = 1_700_000_000_000_000_000
RUN = "run-0123"


def ns(offset_seconds: float) -> int:
    """T + offset in integer nanoseconds (the offsets used are exact binary fractions)."""
    return T_NS + round(offset_seconds * 1_000_000_000)


@pytest.fixture
def memory() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def exporter(memory: InMemorySpanExporter) -> Iterator[OtelExporter]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    otel = OtelExporter(provider)
    yield otel
    otel.close()
    provider.shutdown()


def run_records() -> list[dict[str, Any]]:
    """A run as the trace writer writes it: compile, two steps (one failed), a model call."""
    return [
        {
            "type": "run_started",
            "run_id": RUN,
            "time": T,
            "segment": 0,
            "command": "exec",
            "goal": "sum invoices",
            "params": {"folder": "in/"},
        },
        {
            "type": "plan",
            "run_id": RUN,
            "time": T + 0.25,
            "version": 1,
            "hash": "ab" * 32,
            "plan": {"steps": [{"id": 1}, {"id": 2}]},
            "source": "planner",
        },
        {
            "type": "span",
            "run_id": RUN,
            "time": T + 1,
            "kind": "llm_call",
            "name": "plan call",
            "start": T + 0.5,
            "end": T + 1,
            "attrs": {
                "purpose": "plan",
                "model": "claude-x",
                "provider": "anthropic",
                "attempt": 1,
                "input_tokens": 100,
                "output_tokens": 20,
                "cost_usd": 0.0015,
                "stop_reason": "end_turn",
                "error": None,
            },
        },
        {
            "type": "span",
            "run_id": RUN,
            "time": T + 1.25,
            "kind": "compile",
            "name": "compile v1",
            "start": T + 1,
            "end": T + 1.25,
            "attrs": {"version": 1, "ok": True, "diagnostics": []},
        },
        {
            "type": "span",
            "run_id": RUN,
            "time": T + 3,
            "kind": "step",
            "name": "step 1 read_file",
            "start": T + 1.5,
            "end": T + 3,
            "attrs": {
                "step_id": 1,
                "tool": "read_file",
                "status": "succeeded",
                "reason": None,
                "detail": None,
                "depends_on": [],
                "attempts": [
                    {
                        "attempt": 1,
                        "start": T + 1.5,
                        "end": T + 2,
                        "status": "failed",
                        "reason": "timeout",
                        "error": "timed out",
                    },
                    {
                        "attempt": 2,
                        "start": T + 2.5,
                        "end": T + 3,
                        "status": "succeeded",
                        "reason": None,
                        "error": None,
                    },
                ],
                "checks": [{"kind": "regex", "passed": True, "message": ""}],
                "args": {"path": "in/a.xml"},
                "result": "<xml/>",
                "superseded_by": None,
                "segment": 0,
            },
        },
        {
            "type": "event",
            "run_id": RUN,
            "time": T + 3.5,
            "kind": "heartbeat",
            "attrs": {"running": [2], "elapsed_s": 3.5},
        },
        {
            "type": "span",
            "run_id": RUN,
            "time": T + 4,
            "kind": "step",
            "name": "step 2 sum",
            "start": T + 3,
            "end": T + 4,
            "attrs": {
                "step_id": 2,
                "tool": "sum",
                "status": "failed",
                "reason": "check_failed",
                "detail": "total 10 != 12",
                "depends_on": [1],
                "attempts": [],
                "checks": [],
                "args": None,
                "result": None,
                "superseded_by": None,
                "segment": 0,
            },
        },
        {
            "type": "run_finished",
            "run_id": RUN,
            "time": T + 4.5,
            "segment": 0,
            "status": "failed",
            "spent_usd": 0.25,
            "spent_tokens": 120,
            "critical_path": [1, 2],
        },
    ]


def spans_by_name(memory: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {span.name: span for span in memory.get_finished_spans()}


def test_a_run_becomes_a_root_span_with_children(
    exporter: OtelExporter, memory: InMemorySpanExporter
) -> None:
    for record in run_records():
        exporter(record)
    spans = spans_by_name(memory)
    assert [span.name for span in memory.get_finished_spans()] == [
        "plan call",
        "compile v1",
        "step 1 read_file",
        "step 2 sum",
        "plandag exec",
    ]
    run = spans["plandag exec"]
    assert run.parent is None
    assert run.context is not None
    for name in ("plan call", "compile v1", "step 1 read_file", "step 2 sum"):
        child = spans[name]
        assert child.parent is not None
        assert child.parent.span_id == run.context.span_id
        assert child.context is not None
        assert child.context.trace_id == run.context.trace_id
    assert (run.start_time, run.end_time) == (ns(0), ns(4.5))
    assert (spans["step 1 read_file"].start_time, spans["step 1 read_file"].end_time) == (
        ns(1.5),
        ns(3),
    )
    assert (spans["plan call"].start_time, spans["plan call"].end_time) == (ns(0.5), ns(1))


def test_run_span_attributes_events_and_status(
    exporter: OtelExporter, memory: InMemorySpanExporter
) -> None:
    for record in run_records():
        exporter(record)
    run = spans_by_name(memory)["plandag exec"]
    assert dict(run.attributes or {}) == {
        "plandag.run_id": RUN,
        "plandag.segment": 0,
        "plandag.command": "exec",
        "plandag.goal": "sum invoices",
        "plandag.params": '{"folder":"in/"}',
        "plandag.status": "failed",
        "plandag.spent_usd": 0.25,
        "plandag.spent_tokens": 120,
        "plandag.critical_path": (1, 2),
    }
    assert run.status.status_code is StatusCode.ERROR
    assert run.status.description == "failed"
    assert [
        (event.name, event.timestamp, dict(event.attributes or {})) for event in run.events
    ] == [
        ("plan", ns(0.25), {"version": 1, "hash": "ab" * 32, "source": "planner", "steps": 2}),
        ("heartbeat", ns(3.5), {"running": (2,), "elapsed_s": 3.5}),
    ]


def test_step_span_attributes_and_attempt_events(
    exporter: OtelExporter, memory: InMemorySpanExporter
) -> None:
    for record in run_records():
        exporter(record)
    step = spans_by_name(memory)["step 1 read_file"]
    assert step.kind is SpanKind.INTERNAL
    assert dict(step.attributes or {}) == {
        "plandag.run_id": RUN,
        "plandag.kind": "step",
        "plandag.step_id": 1,
        "plandag.tool": "read_file",
        "plandag.status": "succeeded",
        "plandag.depends_on": (),
        "plandag.attempts": (
            '[{"attempt":1,"start":1700000001.5,"end":1700000002.0,"status":"failed",'
            '"reason":"timeout","error":"timed out"},{"attempt":2,"start":1700000002.5,'
            '"end":1700000003.0,"status":"succeeded","reason":null,"error":null}]'
        ),
        "plandag.checks": '[{"kind":"regex","passed":true,"message":""}]',
        "plandag.args": '{"path":"in/a.xml"}',
        "plandag.result": "<xml/>",
        "plandag.segment": 0,
    }
    assert step.status.status_code is StatusCode.UNSET
    assert [
        (event.name, event.timestamp, dict(event.attributes or {})) for event in step.events
    ] == [
        (
            "attempt",
            ns(1.5),
            {
                "attempt": 1,
                "start": T + 1.5,
                "end": T + 2,
                "status": "failed",
                "reason": "timeout",
                "error": "timed out",
            },
        ),
        ("attempt", ns(2.5), {"attempt": 2, "start": T + 2.5, "end": T + 3, "status": "succeeded"}),
    ]


def test_failed_step_has_error_status(exporter: OtelExporter, memory: InMemorySpanExporter) -> None:
    for record in run_records():
        exporter(record)
    failed = spans_by_name(memory)["step 2 sum"]
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "check_failed: total 10 != 12"
    assert dict(failed.attributes or {})["plandag.depends_on"] == (1,)


def test_llm_call_is_a_client_span_with_gen_ai_attributes(
    exporter: OtelExporter, memory: InMemorySpanExporter
) -> None:
    for record in run_records():
        exporter(record)
    call = spans_by_name(memory)["plan call"]
    assert call.kind is SpanKind.CLIENT
    assert call.status.status_code is StatusCode.UNSET
    attributes = dict(call.attributes or {})
    assert {key: value for key, value in attributes.items() if key.startswith("gen_ai.")} == {
        "gen_ai.request.model": "claude-x",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.usage.input_tokens": 100,
        "gen_ai.usage.output_tokens": 20,
        "gen_ai.response.finish_reasons": ("end_turn",),
    }
    assert attributes["plandag.cost_usd"] == 0.0015
    assert "plandag.error" not in attributes


def test_failed_llm_call_and_compile_have_error_status(
    exporter: OtelExporter, memory: InMemorySpanExporter
) -> None:
    exporter(
        {
            "type": "span",
            "run_id": RUN,
            "kind": "llm_call",
            "name": "replan call",
            "start": T,
            "end": T + 1,
            "attrs": {"error": "overloaded_error: 529"},
        }
    )
    exporter(
        {
            "type": "span",
            "run_id": RUN,
            "kind": "compile",
            "name": "compile v2",
            "start": T + 1,
            "end": T + 2,
            "attrs": {"version": 2, "ok": False, "diagnostics": [{"code": "E1"}]},
        }
    )
    exporter.close()
    spans = spans_by_name(memory)
    assert spans["replan call"].status.status_code is StatusCode.ERROR
    assert spans["replan call"].status.description == "overloaded_error: 529"
    assert spans["compile v2"].status.status_code is StatusCode.ERROR
    assert spans["compile v2"].status.description == "the plan does not compile"


def test_root_span_opened_lazily_and_ended_by_close(
    exporter: OtelExporter, memory: InMemorySpanExporter
) -> None:
    record = {
        "type": "span",
        "run_id": "late",
        "kind": "replan",
        "name": "replan 1",
        "start": T + 2,
        "end": T + 3,
        "attrs": {"number": 1, "failed": [2], "pruned": [], "new_steps": [5, 6], "version": 2},
    }
    exporter(record)
    assert [span.name for span in memory.get_finished_spans()] == ["replan 1"]
    exporter.close()
    spans = spans_by_name(memory)
    root = spans["plandag run"]
    assert (root.start_time, root.end_time) == (ns(2), ns(3))
    assert dict(root.attributes or {}) == {"plandag.run_id": "late"}
    assert spans["replan 1"].parent is not None
    assert root.context is not None
    assert spans["replan 1"].parent.span_id == root.context.span_id
    assert dict(spans["replan 1"].attributes or {})["plandag.new_steps"] == (5, 6)


def test_each_run_id_has_its_own_root(exporter: OtelExporter, memory: InMemorySpanExporter) -> None:
    for run_id in ("a", "b"):
        exporter({"type": "run_started", "run_id": run_id, "time": T, "command": "run"})
        exporter(
            {
                "type": "span",
                "run_id": run_id,
                "kind": "step",
                "name": f"step of {run_id}",
                "start": T,
                "end": T + 1,
                "attrs": {"status": "succeeded"},
            }
        )
    for run_id in ("a", "b"):
        exporter({"type": "run_finished", "run_id": run_id, "time": T + 2, "status": "succeeded"})
    finished = memory.get_finished_spans()
    roots = {
        str(span.attributes["plandag.run_id"]): span
        for span in finished
        if span.parent is None and span.attributes
    }
    assert sorted(roots) == ["a", "b"]
    for run_id, root in roots.items():
        child = next(span for span in finished if span.name == f"step of {run_id}")
        assert child.parent is not None
        assert root.context is not None
        assert child.parent.span_id == root.context.span_id
        assert root.status.status_code is StatusCode.UNSET


def test_unknown_records_are_ignored(exporter: OtelExporter, memory: InMemorySpanExporter) -> None:
    exporter({"type": "something_new", "run_id": RUN, "time": T})
    exporter.close()
    assert memory.get_finished_spans() == ()


def test_attribute_flattening() -> None:
    assert otel_attributes(
        {
            "s": "x",
            "i": 3,
            "f": 0.5,
            "b": False,
            "none": None,
            "ints": [1, 2],
            "mixed_numbers": [1, 2.5],
            "strings": ("a", "b"),
            "bools": [True, False],
            "empty": [],
            "dict": {"k": [1, {"z": None}]},
            "mixed": [1, "a"],
            "huge": 2**70,
            "text": "çã",
        }
    ) == {
        "plandag.s": "x",
        "plandag.i": 3,
        "plandag.f": 0.5,
        "plandag.b": False,
        "plandag.ints": [1, 2],
        "plandag.mixed_numbers": [1.0, 2.5],
        "plandag.strings": ["a", "b"],
        "plandag.bools": [True, False],
        "plandag.empty": [],
        "plandag.dict": '{"k":[1,{"z":null}]}',
        "plandag.mixed": '[1,"a"]',
        "plandag.huge": "1180591620717411303424",
        "plandag.text": "çã",
    }


# -- configuration from the environment ------------------------------------------------------


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
        {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
        {"OTEL_SERVICE_NAME": "x"},
    ],
    ids=["unset", "none", "disabled", "no-exporter"],
)
def test_exporter_from_env_unconfigured(environ: dict[str, str]) -> None:
    assert exporter_from_env(environ) is None


def test_exporter_from_env_without_an_otlp_package(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for module in (
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
        "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
    ):
        monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    with caplog.at_level(logging.WARNING, logger="plandag.trace.otel"):
        assert exporter_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}) is None
    assert "no OTLP exporter is installed" in caplog.text


def test_exporter_from_env_console() -> None:
    exporter = exporter_from_env({"OTEL_TRACES_EXPORTER": "console"})
    assert isinstance(exporter, OtelExporter)
    exporter.close()


def test_sdk_not_imported_when_unconfigured() -> None:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    code = (
        "import sys\n"
        "from plandag.trace.otel import exporter_from_env\n"
        "assert exporter_from_env() is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk')))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code],
        env=environment,
        capture_output=True,
        text=True,
        timeout=50,
        check=True,
    )
    assert completed.stdout.strip() == "[]"


class _Collector(http.server.BaseHTTPRequestHandler):
    received: ClassVar[list[tuple[str, str, bytes]]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        self.received.append((self.path, self.headers.get("Content-Type", ""), body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_otlp_http_export_to_a_local_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    trace_service = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
    _Collector.received = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        for name in [key for key in os.environ if key.startswith("OTEL_")]:
            monkeypatch.delenv(name)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        exporter = exporter_from_env()
        assert exporter is not None
        for record in run_records():
            exporter(record)
        exporter.close()  # shuts the provider down: the batch is sent now
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    assert [(path, kind) for path, kind, _ in _Collector.received] == [
        ("/v1/traces", "application/x-protobuf")
    ]
    request = trace_service.ExportTraceServiceRequest()
    request.ParseFromString(_Collector.received[0][2])
    [resource_spans] = request.resource_spans
    service = {
        attribute.key: attribute.value.string_value
        for attribute in resource_spans.resource.attributes
    }
    assert service["service.name"] == "plandag"
    names = sorted(span.name for scope in resource_spans.scope_spans for span in scope.spans)
    assert names == ["compile v1", "plan call", "plandag exec", "step 1 read_file", "step 2 sum"]
