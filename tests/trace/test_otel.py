"""plandag.trace.otel: live OpenTelemetry spans of runs, steps and model calls, named by the
GenAI semantic conventions, the anthropic SDK's own spans nested under them, no content
under --redact, and export through the standard OTEL_* variables (optional extra otel)."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any, ClassVar

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from plandag.compiler import compile_plan
from plandag.dag.plan import Plan
from plandag.errors import PermanentStepError
from plandag.models import AnthropicClient
from plandag.planner.agent import Agent
from plandag.scheduler.entry import run_plan
from plandag.scheduler.runner import RunLimits
from plandag.testing import MessagesServer
from plandag.tools import tool
from plandag.tools.registry import Registry
from plandag.trace import otel
from plandag.trace.otel import (
    CAPTURE_CONTENT_VARIABLE,
    OtelExporter,
    exporter_from_env,
    otel_attributes,
    use_tracer_provider,
)

MODEL = "claude-sonnet-4-6"
RUN = "run-0123"


class Watch(SpanProcessor):
    """Sees each span start and end, as a span processor of the SDK does."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.ended: list[str] = []

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        self.started.append(span.name)

    def on_end(self, span: ReadableSpan) -> None:
        self.ended.append(span.name)


@pytest.fixture
def memory() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def watch() -> Watch:
    return Watch()


@pytest.fixture(autouse=True)
def provider(memory: InMemorySpanExporter, watch: Watch) -> Iterator[TracerProvider]:
    made = TracerProvider()
    made.add_span_processor(watch)
    made.add_span_processor(SimpleSpanProcessor(memory))
    use_tracer_provider(made)
    yield made
    use_tracer_provider(None)
    otel.set_redact(False)
    made.shutdown()


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.delenv(CAPTURE_CONTENT_VARIABLE, raising=False)
    monkeypatch.delenv("ANTHROPIC_OPEN_TELEMETRY_TRACES_CONTENT_MODE", raising=False)


def by_name(memory: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {span.name: span for span in memory.get_finished_spans()}


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


# -- steps ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_step_span_is_live_while_its_tool_runs_even_in_a_worker_thread(
    watch: Watch,
) -> None:
    seen: dict[str, Any] = {}

    @tool
    def slow(text: str) -> str:
        """A sync tool: runs in a worker thread."""
        seen["thread"] = threading.current_thread().name
        seen["started"] = list(watch.started)
        seen["ended"] = list(watch.ended)
        current = trace.get_current_span()
        seen["current"] = getattr(current, "name", None)
        return text.upper()

    plan = Plan.model_validate(
        {"goal": "shout", "steps": [{"id": 1, "tool": "slow", "args": {"text": "hi"}}]}
    )
    result = await run_plan(compile_plan(plan, Registry([slow])), run_id=RUN)
    assert result.status == "succeeded"
    assert seen["thread"] == "plandag tool"
    assert seen["started"] == ["invoke_workflow plandag", "execute_tool slow"]
    assert seen["ended"] == []  # on_start seen, on_end not yet: the span is live
    assert seen["current"] == "execute_tool slow"  # the thread kept the step's context
    assert watch.ended == ["execute_tool slow", "invoke_workflow plandag"]


@tool
def lookup(name: str) -> dict[str, str]:
    """Look a record up by its exact name."""
    if name == "missing":
        raise PermanentStepError(f"no entry named {name!r}", reason="not_found")
    return {"name": name}


@pytest.mark.anyio
async def test_step_spans_are_named_and_attributed_by_the_genai_conventions(
    memory: InMemorySpanExporter,
) -> None:
    plan = Plan.model_validate(
        {
            "goal": "two lookups",
            "steps": [
                {"id": 1, "tool": "lookup", "args": {"name": "a"}},
                {"id": 2, "tool": "lookup", "args": {"name": "missing"}},
            ],
        }
    )
    result = await run_plan(compile_plan(plan, Registry([lookup])), run_id=RUN)
    assert result.status == "failed"
    spans = memory.get_finished_spans()
    run = next(span for span in spans if span.name == "invoke_workflow plandag")
    steps = sorted(
        (span for span in spans if span.name == "execute_tool lookup"),
        key=lambda span: (span.attributes or {})["plandag.step.id"],
    )
    assert [parent_of(step) for step in steps] == [span_id(run), span_id(run)]
    assert run.parent is None
    assert dict(run.attributes or {}) == {
        "gen_ai.operation.name": "invoke_workflow",
        "gen_ai.workflow.name": "plandag",
        "plandag.run_id": RUN,
        "plandag.steps": 2,
        "plandag.status": "failed",
        "error.type": "failed",
    }
    assert run.status.status_code == StatusCode.ERROR
    good, bad = steps
    assert good.kind == SpanKind.INTERNAL
    assert dict(good.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup",
        "gen_ai.tool.type": "function",
        "gen_ai.tool.call.id": f"{RUN}:1",
        "gen_ai.tool.description": "Look a record up by its exact name.",
        "plandag.run_id": RUN,
        "plandag.step.id": 1,
        "plandag.attempt": 1,
    }
    assert good.status.status_code == StatusCode.UNSET
    assert (bad.attributes or {})["gen_ai.tool.call.id"] == f"{RUN}:2"
    assert (bad.attributes or {})["error.type"] == "not_found"
    assert bad.status.status_code == StatusCode.ERROR
    assert bad.status.description == "PermanentStepError: no entry named 'missing'"


@pytest.mark.anyio
async def test_an_llm_steps_model_call_is_a_chat_span_under_its_step(
    memory: InMemorySpanExporter,
) -> None:
    from plandag.executors import EXECUTOR_TOOLS, ModelAccess
    from plandag.models import AnthropicClient
    from plandag.testing import MessagesServer

    plan = Plan.model_validate(
        {"goal": "ask", "steps": [{"id": 1, "tool": "llm", "args": {"prompt": "Say ok."}}]}
    )
    with MessagesServer() as server:
        server.push_text("ok", usage={"input_tokens": 11, "output_tokens": 2})
        async with AnthropicClient(api_key="test", base_url=server.url) as client:
            result = await run_plan(
                compile_plan(plan, Registry(EXECUTOR_TOOLS)),
                run_id=RUN,
                models=ModelAccess(client, "claude-haiku-4-5"),
            )
    assert result.status == "succeeded"
    spans = memory.get_finished_spans()
    step = next(span for span in spans if span.name == "execute_tool llm")
    chat = next(span for span in spans if span.name == "chat claude-haiku-4-5")
    assert parent_of(chat) == span_id(step)
    assert chat.kind == SpanKind.CLIENT
    attributes = dict(chat.attributes or {})
    assert attributes["gen_ai.usage.input_tokens"] == 11
    assert attributes["gen_ai.usage.output_tokens"] == 2
    assert attributes["gen_ai.provider.name"] == "anthropic"


@pytest.mark.anyio
async def test_without_a_provider_no_span_is_made(memory: InMemorySpanExporter) -> None:
    use_tracer_provider(None)  # and no global provider is set in the test process
    assert otel.tracer() is None
    plan = Plan.model_validate(
        {"goal": "one", "steps": [{"id": 1, "tool": "lookup", "args": {"name": "a"}}]}
    )
    result = await run_plan(compile_plan(plan, Registry([lookup])), run_id=RUN)
    assert result.status == "succeeded"
    assert memory.get_finished_spans() == ()


# -- model calls ---------------------------------------------------------------------------

PLAN = {"g": "look a up", "s": [{"i": 1, "t": "lookup", "a": {"name": "a"}, "d": []}]}
SECRET_GOAL = "Look up the record named a for account 4111-1111-1111-1111."


@pytest.fixture
async def server() -> AsyncIterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


async def run_agent(server: MessagesServer) -> str:
    server.push_json(PLAN)
    server.push_json({"decision": {"action": "finish", "answer": "a is a"}})
    async with AnthropicClient(api_key="k", base_url=server.url) as client:
        agent = Agent(client, MODEL, Registry([lookup]), limits=RunLimits(heartbeat_every=None))
        result = await agent.run(SECRET_GOAL)
    return result.status


@pytest.mark.anyio
async def test_one_chat_span_per_model_call_and_no_span_of_the_sdk(
    server: MessagesServer, memory: InMemorySpanExporter
) -> None:
    assert await run_agent(server) == "succeeded"
    spans = memory.get_finished_spans()
    names = sorted(span.name for span in spans)
    assert names == [
        "chat claude-sonnet-4-6",
        "chat claude-sonnet-4-6",
        "execute_tool lookup",
        "invoke_agent plandag",
        "invoke_workflow plandag",
    ]
    assert {span.instrumentation_scope.name for span in spans if span.instrumentation_scope} == {
        "plandag"
    }
    with_usage = [span for span in spans if "gen_ai.usage.input_tokens" in (span.attributes or {})]
    assert sorted(span.name for span in with_usage) == ["chat claude-sonnet-4-6"] * 2
    [agent] = [span for span in spans if span.name == "invoke_agent plandag"]
    chats = sorted(
        (span for span in spans if span.name.startswith("chat ")), key=lambda s: s.start_time
    )
    [run] = [span for span in spans if span.name == "invoke_workflow plandag"]
    [step] = [span for span in spans if span.name == "execute_tool lookup"]
    assert agent.parent is None
    assert {span.context.trace_id for span in spans if span.context} == {
        agent.context.trace_id if agent.context else 0
    }
    assert [parent_of(chat) for chat in chats] == [span_id(agent), span_id(agent)]
    assert parent_of(run) == span_id(agent)
    assert parent_of(step) == span_id(run)
    planner = chats[0]
    assert planner.kind == SpanKind.CLIENT
    attributes = dict(planner.attributes or {})
    assert sorted(attributes) == [
        "gen_ai.operation.name",
        "gen_ai.output.type",
        "gen_ai.provider.name",
        "gen_ai.request.max_tokens",
        "gen_ai.request.model",
        "gen_ai.response.finish_reasons",
        "gen_ai.response.id",
        "gen_ai.response.model",
        "gen_ai.usage.cache_creation.input_tokens",
        "gen_ai.usage.cache_read.input_tokens",
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
        "plandag.attempt",
        "server.address",
        "server.port",
    ]
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "anthropic"
    assert attributes["gen_ai.request.model"] == MODEL
    assert attributes["gen_ai.response.model"] == MODEL
    assert attributes["gen_ai.output.type"] == "json"
    assert attributes["gen_ai.response.finish_reasons"] == ("end_turn",)
    assert attributes["plandag.attempt"] == 1
    assert attributes["gen_ai.usage.cache_read.input_tokens"] == 0
    assert attributes["gen_ai.response.id"] == "msg_local_000001"
    assert attributes["gen_ai.usage.input_tokens"] > 100
    assert attributes["server.address"] == "127.0.0.1"
    assert attributes["server.port"] == server.port
    assert dict(agent.attributes or {})["plandag.status"] == "succeeded"
    assert dict(agent.attributes or {})["gen_ai.provider.name"] == "anthropic"


@pytest.mark.anyio
async def test_the_trace_context_of_the_chat_span_goes_in_the_request_headers(
    server: MessagesServer, memory: InMemorySpanExporter
) -> None:
    assert await run_agent(server) == "succeeded"
    chats = sorted(
        (span for span in memory.get_finished_spans() if span.name.startswith("chat ")),
        key=lambda span: span.start_time or 0,
    )
    sent = [request.headers.get("traceparent", "") for request in server.message_requests]
    assert len(sent) == 2
    for header, chat in zip(sent, chats, strict=True):
        assert chat.context is not None
        assert header.startswith(f"00-{chat.context.trace_id:032x}-{chat.context.span_id:016x}-")


@pytest.mark.anyio
async def test_a_failed_model_call_has_error_type(
    server: MessagesServer, memory: InMemorySpanExporter
) -> None:
    server.push_error(400, "invalid_request_error", message="bad request")
    async with AnthropicClient(api_key="k", base_url=server.url) as client:
        agent = Agent(client, MODEL, Registry([lookup]), limits=RunLimits(heartbeat_every=None))
        result = await agent.run("Look a up.")
    assert result.status != "succeeded"
    [chat] = [span for span in memory.get_finished_spans() if span.name.startswith("chat ")]
    assert chat.status.status_code == StatusCode.ERROR
    error_type = (chat.attributes or {})["error.type"]
    assert isinstance(error_type, str)
    assert error_type
    assert "bad request" in (chat.status.description or "")


def every_value(memory: InMemorySpanExporter) -> str:
    return "\n".join(
        str(value)
        for span in memory.get_finished_spans()
        for value in (span.attributes or {}).values()
    )


@pytest.mark.anyio
async def test_content_is_in_spans_only_when_asked_and_never_under_redact(
    server: MessagesServer, memory: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert await run_agent(server) == "succeeded"
    assert "4111-1111" not in every_value(memory)  # not asked for: no content
    memory.clear()
    monkeypatch.setenv(CAPTURE_CONTENT_VARIABLE, "true")
    assert await run_agent(server) == "succeeded"
    spans = by_name(memory)
    assert "4111-1111" in str(
        (spans["chat claude-sonnet-4-6"].attributes or {}).get("gen_ai.input.messages")
    )
    assert (spans["execute_tool lookup"].attributes or {})["gen_ai.tool.call.result"] == (
        '{"name":"a"}'
    )
    memory.clear()
    otel.set_redact(True)
    assert await run_agent(server) == "succeeded"
    assert len(memory.get_finished_spans()) == 5
    values = every_value(memory)
    assert "4111-1111" not in values
    assert "gen_ai.tool.call.result" not in str(
        [dict(span.attributes or {}) for span in memory.get_finished_spans()]
    )


# -- attributes and export -----------------------------------------------------------------


def test_attribute_values_are_made_legal() -> None:
    assert otel_attributes(
        {
            "text": "x",
            "flag": True,
            "count": 3,
            "big": 2**70,
            "ratio": 0.5,
            "names": ["a", "b"],
            "mixed": [1, 2.5],
            "nested": {"a": [1]},
            "none": None,
        }
    ) == {
        "plandag.text": "x",
        "plandag.flag": True,
        "plandag.count": 3,
        "plandag.big": str(2**70),
        "plandag.ratio": 0.5,
        "plandag.names": ["a", "b"],
        "plandag.mixed": [1.0, 2.5],
        "plandag.nested": '{"a":[1]}',
    }


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


def test_exporter_from_env_keeps_a_provider_already_set(provider: TracerProvider) -> None:
    exporter = exporter_from_env({"OTEL_TRACES_EXPORTER": "console"})
    assert isinstance(exporter, OtelExporter)
    assert exporter.provider is provider
    exporter.close()  # not its own: flushed, not shut down
    assert otel.tracer() is not None


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


RUN_ONE_STEP = """
from plandag.compiler import compile_plan
from plandag.dag.plan import Plan
from plandag.scheduler.entry import run_plan_sync
from plandag.tools import tool
from plandag.tools.registry import Registry
from plandag.trace.otel import exporter_from_env

@tool
def echo(text: str) -> str:
    '''Echo.'''
    return text

exporter = exporter_from_env()
assert exporter is not None
step = {"id": 1, "tool": "echo", "args": {"text": "x"}}
plan = Plan.model_validate({"goal": "echo", "steps": [step]})
assert run_plan_sync(compile_plan(plan, Registry([echo])), run_id="run-otlp").status == "succeeded"
exporter.close()
"""


def test_otlp_http_export_to_a_local_collector() -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    trace_service = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
    _Collector.received = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    environment = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    environment["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{server.server_port}"
    environment["OTEL_EXPORTER_OTLP_PROTOCOL"] = "http/protobuf"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        environment.pop(name, None)
    try:
        subprocess.run(
            [sys.executable, "-c", RUN_ONE_STEP],
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
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
    assert names == ["execute_tool echo", "invoke_workflow plandag"]


@pytest.mark.anyio
async def test_the_sdk_is_built_with_its_own_spans_off(server: MessagesServer) -> None:
    async with AnthropicClient(api_key="k", base_url=server.url) as client:
        assert client.sdk.open_telemetry["traces"]["enabled"] is False
