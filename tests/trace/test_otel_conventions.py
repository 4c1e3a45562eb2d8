"""The spans and metrics of an Agent run on Anthropic and of a run_plan with llm steps on an
OpenAI-compatible server, both on local servers, held to the GenAI semantic conventions of
the pinned opentelemetry-semantic-conventions (the required and recommended attributes of
each span and metric, written with that package's constants)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

import jsonschema
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
from opentelemetry.semconv.attributes import error_attributes, server_attributes
from opentelemetry.trace import SpanKind

from plandag.compiler import compile_plan
from plandag.dag.plan import Plan
from plandag.executors import EXECUTOR_TOOLS, ModelAccess
from plandag.models import AnthropicClient, OpenAICompatibleClient
from plandag.planner.agent import Agent
from plandag.scheduler.entry import run_plan
from plandag.scheduler.runner import RunLimits
from plandag.testing import ChatCompletionsServer, MessagesServer
from plandag.tools import tool
from plandag.tools.registry import Registry
from plandag.trace import otel

MODEL = "claude-sonnet-4-6"
OPENAI_MODEL = "gpt-4o-mini"
OPERATION = gen_ai.GenAiOperationNameValues
PROVIDER = gen_ai.GenAiProviderNameValues

# Semantic conventions 1.41, "Semantic conventions for generative client AI spans",
# inference span: required, then conditionally required where it applies here, then
# recommended (those plandag can know: it sends no penalties, top_p/top_k or seed).
CHAT_REQUIRED = (gen_ai.GEN_AI_OPERATION_NAME, gen_ai.GEN_AI_PROVIDER_NAME)
CHAT_CONDITIONAL = (
    gen_ai.GEN_AI_REQUEST_MODEL,
    gen_ai.GEN_AI_OUTPUT_TYPE,
    server_attributes.SERVER_PORT,
)
CHAT_RECOMMENDED = (
    gen_ai.GEN_AI_REQUEST_MAX_TOKENS,
    gen_ai.GEN_AI_RESPONSE_FINISH_REASONS,
    gen_ai.GEN_AI_RESPONSE_ID,
    gen_ai.GEN_AI_RESPONSE_MODEL,
    gen_ai.GEN_AI_USAGE_INPUT_TOKENS,
    gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS,
    gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    gen_ai.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
    server_attributes.SERVER_ADDRESS,
)
# "... GenAI agent and framework spans": invoke agent (internal), invoke workflow; and the
# execute tool span.
AGENT_EXPECTED = (
    gen_ai.GEN_AI_OPERATION_NAME,
    gen_ai.GEN_AI_PROVIDER_NAME,
    gen_ai.GEN_AI_AGENT_NAME,
    gen_ai.GEN_AI_AGENT_VERSION,
    gen_ai.GEN_AI_REQUEST_MODEL,
)
WORKFLOW_EXPECTED = (gen_ai.GEN_AI_OPERATION_NAME, gen_ai.GEN_AI_WORKFLOW_NAME)
TOOL_EXPECTED = (
    gen_ai.GEN_AI_OPERATION_NAME,
    gen_ai.GEN_AI_TOOL_NAME,
    gen_ai.GEN_AI_TOOL_CALL_ID,
    gen_ai.GEN_AI_TOOL_DESCRIPTION,
    gen_ai.GEN_AI_TOOL_TYPE,
)
# "Semantic conventions for generative AI metrics": required, conditionally required,
# recommended.
METRIC_EXPECTED = (
    gen_ai.GEN_AI_OPERATION_NAME,
    gen_ai.GEN_AI_PROVIDER_NAME,
    gen_ai.GEN_AI_REQUEST_MODEL,
    server_attributes.SERVER_PORT,
    gen_ai.GEN_AI_RESPONSE_MODEL,
    server_attributes.SERVER_ADDRESS,
)

TEXT_PART = {
    "type": "object",
    "required": ["type", "content"],
    "properties": {"type": {"const": "text"}, "content": {"type": "string"}},
}
PARTS = {"type": "array", "items": {"type": "object", "required": ["type"]}}
INPUT_MESSAGES = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["role", "parts"],
        "properties": {"role": {"type": "string"}, "parts": PARTS},
    },
}
OUTPUT_MESSAGES = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["role", "parts", "finish_reason"],
        "properties": {
            "role": {"const": "assistant"},
            "parts": PARTS,
            "finish_reason": {"type": "string"},
        },
    },
}
SYSTEM_INSTRUCTIONS = {"type": "array", "items": TEXT_PART}
"""The shapes the conventions' JSON schemas require (gen-ai-input-messages.json,
gen-ai-output-messages.json, gen-ai-system-instructions.json), the parts' type field
included."""


@tool
def lookup(name: str) -> dict[str, str]:
    """Look a record up by its exact name."""
    return {"name": name}


@pytest.fixture
def captured() -> Iterator[tuple[InMemorySpanExporter, InMemoryMetricReader]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    otel.use_tracer_provider(provider)
    otel.use_meter_provider(meters)
    yield exporter, reader
    otel.use_tracer_provider(None)
    otel.use_meter_provider(None)
    otel.set_redact(False)
    provider.shutdown()
    meters.shutdown()


@pytest.fixture(autouse=True)
def content_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(otel.CAPTURE_CONTENT_VARIABLE, raising=False)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)


async def anthropic_agent_run(server: MessagesServer) -> str:
    plan = {"g": "look a up", "s": [{"i": 1, "t": "lookup", "a": {"name": "a"}, "d": []}]}
    server.push_json(plan)
    server.push_json({"decision": {"action": "finish", "answer": "a is a"}})
    async with AnthropicClient(api_key="k", base_url=server.url) as client:
        agent = Agent(client, MODEL, Registry([lookup]), limits=RunLimits(heartbeat_every=None))
        result = await agent.run("Look up the record named a.")
    return str(result.status)


async def openai_llm_steps(server: ChatCompletionsServer, steps: int = 2) -> str:
    plan = Plan.model_validate(
        {
            "goal": "ask",
            "steps": [
                {"id": number, "tool": "llm", "args": {"prompt": f"Say ok {number}."}}
                for number in range(1, steps + 1)
            ],
        }
    )
    for _ in range(steps):
        server.push_text("ok", usage={"input_tokens": 20, "output_tokens": 3})
    async with OpenAICompatibleClient(server.url + "/v1", api_key="k") as client:
        result = await run_plan(
            compile_plan(plan, Registry(EXECUTOR_TOOLS)),
            run_id="run-conventions",
            models=ModelAccess(client, OPENAI_MODEL),
        )
    return str(result.status)


def of_operation(spans: Sequence[ReadableSpan], operation: str) -> list[ReadableSpan]:
    return [
        span
        for span in spans
        if (span.attributes or {}).get(gen_ai.GEN_AI_OPERATION_NAME) == operation
    ]


def missing(span: ReadableSpan, keys: Sequence[str]) -> list[str]:
    attributes = span.attributes or {}
    return [key for key in keys if key not in attributes]


def check_chat(span: ReadableSpan, provider: str, model: str, port: int) -> None:
    assert span.name == f"{OPERATION.CHAT.value} {model}"
    assert span.kind == SpanKind.CLIENT
    assert missing(span, CHAT_REQUIRED + CHAT_CONDITIONAL + CHAT_RECOMMENDED) == []
    attributes = span.attributes or {}
    assert attributes[gen_ai.GEN_AI_PROVIDER_NAME] == provider
    assert attributes[gen_ai.GEN_AI_REQUEST_MODEL] == model
    assert attributes[server_attributes.SERVER_ADDRESS] == "127.0.0.1"
    assert attributes[server_attributes.SERVER_PORT] == port
    assert error_attributes.ERROR_TYPE not in attributes
    input_tokens = attributes[gen_ai.GEN_AI_USAGE_INPUT_TOKENS]
    assert isinstance(input_tokens, int)
    assert input_tokens > 0


@pytest.mark.anyio
async def test_an_agent_run_on_anthropic_follows_the_conventions(
    captured: tuple[InMemorySpanExporter, InMemoryMetricReader],
) -> None:
    exporter, reader = captured
    with MessagesServer() as server:
        assert await anthropic_agent_run(server) == "succeeded"
        port = server.port
    spans = exporter.get_finished_spans()
    [agent] = of_operation(spans, OPERATION.INVOKE_AGENT.value)
    [workflow] = of_operation(spans, OPERATION.INVOKE_WORKFLOW.value)
    [step] = of_operation(spans, OPERATION.EXECUTE_TOOL.value)
    chats = of_operation(spans, OPERATION.CHAT.value)
    assert len(chats) == 2  # the planner's and the joiner's: one span each, no SDK span
    assert len(spans) == 5
    assert agent.name == "invoke_agent plandag"
    assert agent.kind == SpanKind.INTERNAL
    assert missing(agent, AGENT_EXPECTED) == []
    assert (agent.attributes or {})[gen_ai.GEN_AI_PROVIDER_NAME] == PROVIDER.ANTHROPIC.value
    assert workflow.name == "invoke_workflow plandag"
    assert missing(workflow, WORKFLOW_EXPECTED) == []
    assert step.name == "execute_tool lookup"
    assert missing(step, TOOL_EXPECTED) == []
    for chat in chats:
        check_chat(chat, PROVIDER.ANTHROPIC.value, MODEL, port)
        attributes = chat.attributes or {}
        # the Anthropic client sends no temperature: none is recorded
        assert gen_ai.GEN_AI_REQUEST_TEMPERATURE not in attributes
        assert attributes[gen_ai.GEN_AI_OUTPUT_TYPE] == gen_ai.GenAiOutputTypeValues.JSON.value
        assert str(attributes[gen_ai.GEN_AI_RESPONSE_ID]).startswith("msg_")
    check_metrics(
        reader,
        PROVIDER.ANTHROPIC.value,
        MODEL,
        port,
        calls=2,
        tokens=(
            sum(int((chat.attributes or {})[gen_ai.GEN_AI_USAGE_INPUT_TOKENS]) for chat in chats),
            sum(int((chat.attributes or {})[gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS]) for chat in chats),
        ),
    )
    # no content without the switch
    assert all(
        gen_ai.GEN_AI_INPUT_MESSAGES not in (span.attributes or {})
        and gen_ai.GEN_AI_OUTPUT_MESSAGES not in (span.attributes or {})
        for span in spans
    )


@pytest.mark.anyio
async def test_llm_steps_on_an_openai_compatible_server_follow_the_conventions(
    captured: tuple[InMemorySpanExporter, InMemoryMetricReader],
) -> None:
    exporter, reader = captured
    with ChatCompletionsServer() as server:
        assert await openai_llm_steps(server) == "succeeded"
        port = server.port
    spans = exporter.get_finished_spans()
    chats = of_operation(spans, OPERATION.CHAT.value)
    steps = of_operation(spans, OPERATION.EXECUTE_TOOL.value)
    [workflow] = of_operation(spans, OPERATION.INVOKE_WORKFLOW.value)
    assert len(chats) == 2
    assert len(steps) == 2
    assert missing(workflow, WORKFLOW_EXPECTED) == []
    ids = set()
    for chat in chats:
        check_chat(chat, PROVIDER.OPENAI.value, OPENAI_MODEL, port)
        attributes = chat.attributes or {}
        ids.add(attributes[gen_ai.GEN_AI_RESPONSE_ID])
        assert str(attributes[gen_ai.GEN_AI_RESPONSE_ID]).startswith("chatcmpl-")
        assert attributes[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] == 20
        assert attributes[gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS] == 3
        assert gen_ai.GEN_AI_REQUEST_TEMPERATURE not in attributes  # the llm step sends none
        assert chat.parent is not None
        assert chat.parent.span_id in {step.context.span_id for step in steps if step.context}
    assert len(ids) == 2
    check_metrics(reader, PROVIDER.OPENAI.value, OPENAI_MODEL, port, calls=2, tokens=(40, 6))


def points(reader: InMemoryMetricReader, name: str) -> list[HistogramDataPoint]:
    data = reader.get_metrics_data()
    assert data is not None
    found: list[HistogramDataPoint] = []
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    found.extend(
                        point
                        for point in metric.data.data_points
                        if isinstance(point, HistogramDataPoint)
                    )
    return found


def check_metrics(
    reader: InMemoryMetricReader,
    provider: str,
    model: str,
    port: int,
    *,
    calls: int,
    tokens: tuple[int, int],
) -> None:
    [duration] = points(reader, gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION)
    assert duration.count == calls
    assert list(duration.explicit_bounds)[:3] == [0.01, 0.02, 0.04]
    usage = points(reader, gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE)
    by_type = {point.attributes[gen_ai.GEN_AI_TOKEN_TYPE]: point for point in usage}
    assert sorted(by_type) == [
        gen_ai.GenAiTokenTypeValues.INPUT.value,
        gen_ai.GenAiTokenTypeValues.OUTPUT.value,
    ]
    assert by_type["input"].sum == tokens[0]
    assert by_type["output"].sum == tokens[1]
    assert by_type["input"].count == calls
    assert list(by_type["input"].explicit_bounds)[:3] == [1, 4, 16]
    for point in [duration, *usage]:
        attributes = dict(point.attributes)
        assert [key for key in METRIC_EXPECTED if key not in attributes] == []
        assert attributes[gen_ai.GEN_AI_OPERATION_NAME] == OPERATION.CHAT.value
        assert attributes[gen_ai.GEN_AI_PROVIDER_NAME] == provider
        assert attributes[gen_ai.GEN_AI_REQUEST_MODEL] == model
        assert attributes[server_attributes.SERVER_PORT] == port


@pytest.mark.anyio
async def test_a_failed_call_has_error_type_on_its_span_and_its_duration(
    captured: tuple[InMemorySpanExporter, InMemoryMetricReader],
) -> None:
    exporter, reader = captured
    plan = Plan.model_validate(
        {"goal": "ask", "steps": [{"id": 1, "tool": "llm", "args": {"prompt": "Say ok."}}]}
    )
    with ChatCompletionsServer() as server:
        server.push_error(400, "invalid_request_error", message="no")
        async with OpenAICompatibleClient(server.url + "/v1", api_key="k") as client:
            result = await run_plan(
                compile_plan(plan, Registry(EXECUTOR_TOOLS)),
                run_id="run-failed",
                models=ModelAccess(client, OPENAI_MODEL),
            )
    assert result.status == "failed"
    [chat] = of_operation(exporter.get_finished_spans(), OPERATION.CHAT.value)
    assert (chat.attributes or {})[error_attributes.ERROR_TYPE] == "http_400"
    [duration] = points(reader, gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION)
    assert duration.attributes[error_attributes.ERROR_TYPE] == "http_400"
    assert points(reader, gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE) == []  # no usage reported


def content_of(span: ReadableSpan, key: str) -> Any:
    value = (span.attributes or {})[key]
    assert isinstance(value, str)
    return json.loads(value)


@pytest.mark.anyio
async def test_content_is_in_the_parts_format_only_under_the_switch(
    captured: tuple[InMemorySpanExporter, InMemoryMetricReader],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exporter, _ = captured
    monkeypatch.setenv(otel.CAPTURE_CONTENT_VARIABLE, "true")
    with MessagesServer() as server:
        assert await anthropic_agent_run(server) == "succeeded"
    spans = exporter.get_finished_spans()
    chat = sorted(of_operation(spans, OPERATION.CHAT.value), key=lambda s: s.start_time or 0)[0]
    system = content_of(chat, gen_ai.GEN_AI_SYSTEM_INSTRUCTIONS)
    jsonschema.validate(system, SYSTEM_INSTRUCTIONS)
    messages = content_of(chat, gen_ai.GEN_AI_INPUT_MESSAGES)
    jsonschema.validate(messages, INPUT_MESSAGES)
    assert messages[0]["role"] == "user"
    assert messages[0]["parts"][0]["type"] == "text"
    assert "Look up the record named a." in messages[0]["parts"][0]["content"]
    output = content_of(chat, gen_ai.GEN_AI_OUTPUT_MESSAGES)
    jsonschema.validate(output, OUTPUT_MESSAGES)
    assert output[0]["finish_reason"] == "stop"  # end_turn, in the conventions' words
    assert json.loads(output[0]["parts"][0]["content"])["s"][0]["t"] == "lookup"
    [agent] = of_operation(spans, OPERATION.INVOKE_AGENT.value)
    jsonschema.validate(content_of(agent, gen_ai.GEN_AI_INPUT_MESSAGES), INPUT_MESSAGES)
    exporter.clear()
    otel.set_redact(True)
    with MessagesServer() as server:
        assert await anthropic_agent_run(server) == "succeeded"
    for span in exporter.get_finished_spans():
        assert gen_ai.GEN_AI_INPUT_MESSAGES not in (span.attributes or {})
        assert gen_ai.GEN_AI_OUTPUT_MESSAGES not in (span.attributes or {})
        assert gen_ai.GEN_AI_SYSTEM_INSTRUCTIONS not in (span.attributes or {})


def test_tool_calls_and_results_become_tool_call_parts() -> None:
    messages = otel.input_messages(
        [
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "P"}}
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "rainy"}],
            },
        ]
    )
    jsonschema.validate(messages, INPUT_MESSAGES)
    assert messages[1]["parts"] == [
        {"type": "tool_call", "id": "t1", "name": "weather", "arguments": {"city": "P"}}
    ]
    assert messages[2]["parts"] == [{"type": "tool_call_response", "id": "t1", "response": "rainy"}]


@pytest.mark.anyio
async def test_the_planners_temperature_is_recorded_where_it_is_sent(
    captured: tuple[InMemorySpanExporter, InMemoryMetricReader],
) -> None:
    exporter, _ = captured
    with ChatCompletionsServer() as server:
        server.push_json(
            {"g": "look a up", "s": [{"i": 1, "t": "lookup", "a": {"name": "a"}, "d": []}]}
        )
        server.push_json({"decision": {"action": "finish", "answer": "a is a"}})
        async with OpenAICompatibleClient(server.url + "/v1", api_key="k") as client:
            agent = Agent(
                client, OPENAI_MODEL, Registry([lookup]), limits=RunLimits(heartbeat_every=None)
            )
            result = await agent.run("Look up the record named a.")
        sent = [request.body.get("temperature") for request in server.message_requests]
    assert result.status == "succeeded"
    chats = sorted(
        of_operation(exporter.get_finished_spans(), OPERATION.CHAT.value),
        key=lambda span: span.start_time or 0,
    )
    recorded = [(chat.attributes or {}).get(gen_ai.GEN_AI_REQUEST_TEMPERATURE) for chat in chats]
    assert recorded == sent


def _warnings_of(script: str) -> str:
    """The standard error of a process that cannot import the conventions' package and then
    runs ``script``."""
    prelude = (
        "import sys, logging\n"
        "sys.modules['opentelemetry.semconv._incubating.attributes.gen_ai_attributes'] = None\n"
        "logging.basicConfig(level=logging.WARNING)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", prelude + script],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_no_warning_about_the_conventions_when_nothing_is_configured() -> None:
    # the base install: no provider set, the conventions' package missing
    stderr = _warnings_of(
        "from plandag import telemetry\n"
        "from plandag.planner import spans\n"
        "assert telemetry.conventions() is None\n"
        "assert spans.start_agent('m', 'g', 'anthropic') is None\n"
    )
    assert "OpenTelemetry is configured" not in stderr


def test_one_warning_about_the_conventions_when_a_provider_is_configured() -> None:
    stderr = _warnings_of(
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from plandag import telemetry\n"
        "telemetry.use_tracer_provider(TracerProvider())\n"
        "assert telemetry.conventions() is None\n"
        "assert telemetry.conventions() is None\n"
    )
    assert stderr.count("OpenTelemetry is configured but") == 1
    assert "install plandag[otel]" in stderr
