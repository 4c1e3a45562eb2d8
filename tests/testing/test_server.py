"""The local Messages API server, driven through the official SDK and through plain httpx."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import anyio
import httpx
import pytest
from anthropic.types import MessageParam

from plandag.errors import InputError
from plandag.testing import (
    MessagesServer,
    Script,
    ScriptedResponse,
    estimate_tokens,
    schema_text,
)

MODEL = "claude-test-model"
HELLO: list[MessageParam] = [{"role": "user", "content": "hi"}]


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests to 127.0.0.1 must not go through a proxy from the environment."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


def sdk(server: MessagesServer) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(api_key="test", base_url=server.url, max_retries=0)


# -- plain replies ---------------------------------------------------------------------------


PLAN_SCHEMA = {
    "type": "object",
    "properties": {
        "steps": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"id": {"type": "integer"}, "tool": {"type": "string"}},
                "required": ["id", "tool"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["steps"],
    "additionalProperties": False,
}


@pytest.mark.anyio
async def test_json_reply_through_the_sdk(server: MessagesServer) -> None:
    server.push_json({"steps": [{"id": 1, "tool": "add"}]})
    async with sdk(server) as client:
        message = await client.messages.create(
            model=MODEL,
            max_tokens=200,
            system="You plan.",
            messages=[{"role": "user", "content": "Plan: add 2 and 3"}],
            output_config={"format": {"type": "json_schema", "schema": PLAN_SCHEMA}},
        )
    assert message.id == "msg_local_000001"
    assert message.model == MODEL
    assert message.role == "assistant"
    assert message.stop_reason == "end_turn"
    assert message.stop_sequence is None
    assert len(message.content) == 1
    block = message.content[0]
    assert block.type == "text"
    assert block.text == '{"steps":[{"id":1,"tool":"add"}]}'
    assert json.loads(block.text) == {"steps": [{"id": 1, "tool": "add"}]}
    # input: "You plan." (9) + "Plan: add 2 and 3" (17) + the schema's canonical JSON;
    # output 33 chars → 9
    assert message.usage.input_tokens == estimate_tokens(
        "You plan.Plan: add 2 and 3" + schema_text(PLAN_SCHEMA)
    )
    assert message.usage.output_tokens == 9
    assert message.usage.cache_read_input_tokens == 0


def test_schema_text_is_the_canonical_compact_json() -> None:
    assert schema_text({"type": "object", "properties": {}}) == (
        '{"properties":{},"type":"object"}'
    )
    assert schema_text({"enum": ["ü"]}) == '{"enum":["ü"]}'


@pytest.mark.anyio
async def test_the_structured_output_schema_is_billed_and_counted_as_input(
    server: MessagesServer,
) -> None:
    server.push_json({"steps": []})
    server.push_json({"steps": []})
    schema_format: Any = {"format": {"type": "json_schema", "schema": PLAN_SCHEMA}}
    async with sdk(server) as client:
        counted = await client.messages.count_tokens(
            model=MODEL, system="You plan.", messages=HELLO, output_config=schema_format
        )
        with_schema = await client.messages.create(
            model=MODEL,
            max_tokens=100,
            system="You plan.",
            messages=HELLO,
            output_config=schema_format,
        )
        without = await client.messages.create(
            model=MODEL, max_tokens=100, system="You plan.", messages=HELLO
        )
    schema_tokens = estimate_tokens("You plan.hi" + schema_text(PLAN_SCHEMA))
    assert with_schema.usage.input_tokens == schema_tokens
    assert counted.input_tokens == schema_tokens
    assert without.usage.input_tokens == estimate_tokens("You plan.hi")
    assert schema_tokens > without.usage.input_tokens + 40


@pytest.mark.anyio
async def test_a_cached_prefix_holds_the_schema_before_the_system_prompt() -> None:
    system: Any = [{"type": "text", "text": "s" * 4000, "cache_control": {"type": "ephemeral"}}]
    schema_format: Any = {"format": {"type": "json_schema", "schema": PLAN_SCHEMA}}
    other = {**PLAN_SCHEMA, "required": []}
    with MessagesServer() as server:
        for _ in range(3):
            server.push_json({"steps": []})
        async with sdk(server) as client:
            first, second, changed = [
                await client.messages.create(
                    model=MODEL,
                    max_tokens=100,
                    system=system,
                    messages=HELLO,
                    output_config=output_config,
                )
                for output_config in (
                    schema_format,
                    schema_format,
                    {"format": {"type": "json_schema", "schema": other}},
                )
            ]
    prefix = estimate_tokens(schema_text(PLAN_SCHEMA) + "s" * 4000)
    assert first.usage.cache_creation_input_tokens == prefix
    assert second.usage.cache_read_input_tokens == prefix
    assert second.usage.input_tokens == 1  # "hi"
    # another schema is another prefix: nothing read
    assert changed.usage.cache_read_input_tokens == 0


@pytest.mark.anyio
async def test_a_schema_the_api_refuses_is_refused(server: MessagesServer) -> None:
    bounded = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 1}},
        "additionalProperties": False,
    }
    for schema, words in (
        ({"type": "object"}, "additionalProperties must be false"),
        (bounded, "'minimum' is not supported"),
    ):
        async with sdk(server) as client:
            with pytest.raises(anthropic.BadRequestError, match=words):
                await client.messages.create(
                    model=MODEL,
                    max_tokens=20,
                    messages=[{"role": "user", "content": "x"}],
                    output_config={"format": {"type": "json_schema", "schema": schema}},
                )
    assert len(server.message_requests) == 2


@pytest.mark.anyio
async def test_requests_are_recorded_with_what_the_sdk_sent(server: MessagesServer) -> None:
    schema: dict[str, object] = {
        "type": "object",
        "properties": {"steps": {"type": "array", "items": {"type": "string"}}},
        "additionalProperties": False,
    }
    server.push_text("ok")
    key = "sk-local-0123456789"
    async with anthropic.AsyncAnthropic(api_key=key, base_url=server.url, max_retries=0) as client:
        await client.messages.create(
            model=MODEL,
            max_tokens=50,
            system="SYSTEM PROMPT",
            messages=[{"role": "user", "content": "the goal"}],
            output_config={"format": {"type": "json_schema", "schema": schema}},
        )
    [request] = server.requests
    assert request.method == "POST"
    assert request.path == "/v1/messages"
    assert request.json == {
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "the goal"}],
        "model": MODEL,
        "output_config": {"format": {"type": "json_schema", "schema": schema}},
        "system": "SYSTEM PROMPT",
    }
    # the SDK 2.x sends api_key as a bearer token, and nowhere else
    assert request.headers["authorization"] == f"Bearer {key}"
    assert request.api_key == key
    assert "x-api-key" not in request.headers
    assert key.encode() not in request.raw_body
    assert [name for name, value in request.headers.items() if key in value] == ["authorization"]
    assert request.headers["content-type"] == "application/json"
    assert "anthropic-version" in request.headers
    assert server.message_requests == [request]


@pytest.mark.anyio
async def test_exact_usage_from_the_script(server: MessagesServer) -> None:
    server.push_text("hello", usage={"input_tokens": 1234, "output_tokens": 56})
    async with sdk(server) as client:
        message = await client.messages.create(model=MODEL, max_tokens=100, messages=HELLO)
    assert (message.usage.input_tokens, message.usage.output_tokens) == (1234, 56)


@pytest.mark.anyio
async def test_tool_use_block(server: MessagesServer) -> None:
    server.push_tool_use("get_weather", {"city": "Recife", "days": 3}, text="Checking.")
    async with sdk(server) as client:
        message = await client.messages.create(model=MODEL, max_tokens=100, messages=HELLO)
    assert message.stop_reason == "tool_use"
    assert [block.type for block in message.content] == ["text", "tool_use"]
    tool_block = message.content[1]
    assert tool_block.type == "tool_use"
    assert tool_block.id == "toolu_local_000001_1"
    assert tool_block.name == "get_weather"
    assert tool_block.input == {"city": "Recife", "days": 3}


@pytest.mark.anyio
async def test_max_tokens_stop_reason(server: MessagesServer) -> None:
    server.push_max_tokens('{"steps": [{"id": 1, "to')
    async with sdk(server) as client:
        message = await client.messages.create(model=MODEL, max_tokens=64, messages=HELLO)
    assert message.stop_reason == "max_tokens"
    assert message.content[0].type == "text"
    assert message.content[0].text == '{"steps": [{"id": 1, "to'
    assert message.usage.output_tokens == 64


@pytest.mark.anyio
async def test_output_past_max_tokens_is_cut(server: MessagesServer) -> None:
    server.push_text("abcdefghij" * 10)  # 100 chars = 25 tokens
    async with sdk(server) as client:
        message = await client.messages.create(model=MODEL, max_tokens=5, messages=HELLO)
    assert message.stop_reason == "max_tokens"
    assert message.content[0].type == "text"
    assert message.content[0].text == "abcdefghijabcdefghij"  # 5 tokens * 4 chars
    assert message.usage.output_tokens == 5


@pytest.mark.anyio
async def test_responder_answers_from_the_request(server: MessagesServer) -> None:
    def count_messages(body: dict[str, Any]) -> str:
        return f"{len(body['messages'])} message(s), model {body['model']}"

    server.push_responder(count_messages)
    server.push(ScriptedResponse.text("second"))
    async with sdk(server) as client:
        first = await client.messages.create(model=MODEL, max_tokens=100, messages=HELLO)
        second = await client.messages.create(model=MODEL, max_tokens=100, messages=HELLO)
    assert first.content[0].type == "text"
    assert first.content[0].text == f"1 message(s), model {MODEL}"
    assert second.content[0].type == "text"
    assert second.content[0].text == "second"


@pytest.mark.anyio
async def test_count_tokens_takes_no_scripted_reply(server: MessagesServer) -> None:
    server.push_text("kept")
    async with sdk(server) as client:
        counted = await client.messages.count_tokens(
            model=MODEL, system="12345678", messages=[{"role": "user", "content": "abcd"}]
        )
        message = await client.messages.create(model=MODEL, max_tokens=10, messages=HELLO)
    assert counted.input_tokens == 3  # 12 chars
    assert message.content[0].type == "text"
    assert message.content[0].text == "kept"
    assert [r.path for r in server.requests] == ["/v1/messages/count_tokens", "/v1/messages"]


def test_sync_client_works_too(server: MessagesServer) -> None:
    server.push_text("sync hello")
    with anthropic.Anthropic(api_key="test", base_url=server.url, max_retries=0) as client:
        message = client.messages.create(model=MODEL, max_tokens=100, messages=HELLO)
    assert message.content[0].type == "text"
    assert message.content[0].text == "sync hello"


# -- streaming -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_stream_reassembled_by_the_sdk() -> None:
    text = "The plan has three steps and one check."  # 39 chars
    with MessagesServer(chunk_chars=16) as server:
        server.push_text(text)
        server.push_text(text)
        async with sdk(server) as client:
            async with client.messages.stream(model=MODEL, max_tokens=100, messages=HELLO) as s:
                pieces = [piece async for piece in s.text_stream]
                final = await s.get_final_message()
            async with client.messages.stream(model=MODEL, max_tokens=100, messages=HELLO) as s:
                only_final = await s.get_final_message()
    assert pieces == ["The plan has thr", "ee steps and one", " check."]
    for message in (final, only_final):
        assert message.content[0].type == "text"
        assert message.content[0].text == text
        assert message.stop_reason == "end_turn"
        assert message.usage.input_tokens == 1
        assert message.usage.output_tokens == 10
    assert final.id == "msg_local_000001"
    assert only_final.id == "msg_local_000002"


@pytest.mark.anyio
async def test_streamed_tool_use_input_is_reassembled(server: MessagesServer) -> None:
    server.push_tool_use("search", {"query": "nota fiscal eletrônica", "limit": 10})
    async with (
        sdk(server) as client,
        client.messages.stream(model=MODEL, max_tokens=100, messages=HELLO) as s,
    ):
        message = await s.get_final_message()
    assert message.stop_reason == "tool_use"
    [block] = message.content
    assert block.type == "tool_use"
    assert block.name == "search"
    assert block.input == {"query": "nota fiscal eletrônica", "limit": 10}


@pytest.mark.anyio
async def test_mid_stream_overloaded_error(server: MessagesServer) -> None:
    server.push_stream_error_after(20, text="x" * 100)
    received: list[str] = []

    async def consume(client: anthropic.AsyncAnthropic) -> None:
        async with client.messages.stream(model=MODEL, max_tokens=100, messages=HELLO) as s:
            async for piece in s.text_stream:
                received.append(piece)

    async with sdk(server) as client:
        with pytest.raises(anthropic.APIStatusError) as caught:
            await consume(client)
    # the SDK makes the error from the 200 response: the base class, status 200
    assert type(caught.value) is anthropic.APIStatusError
    assert caught.value.status_code == 200
    assert caught.value.type == "overloaded_error"
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
        "request_id": "req_local_000001",
    }
    assert "".join(received) == "x" * 20


@pytest.mark.anyio
async def test_stream_error_on_a_request_not_streamed_is_an_http_error(
    server: MessagesServer,
) -> None:
    server.push_stream_error_after(5)
    async with sdk(server) as client:
        with pytest.raises(anthropic.OverloadedError):
            await client.messages.create(model=MODEL, max_tokens=100, messages=HELLO)


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_429_with_retry_after(server: MessagesServer) -> None:
    server.push_error(429, retry_after=7)
    async with sdk(server) as client:
        with pytest.raises(anthropic.RateLimitError) as caught:
            await client.messages.create(model=MODEL, max_tokens=100, messages=HELLO)
    error = caught.value
    assert error.status_code == 429
    assert error.response.headers["retry-after"] == "7"
    assert error.response.headers["x-should-retry"] == "true"
    assert error.type == "rate_limit_error"
    assert error.request_id == "req_local_000001"


@pytest.mark.anyio
async def test_529_is_the_sdk_overloaded_error(server: MessagesServer) -> None:
    server.push_error(529)
    async with sdk(server) as client:
        with pytest.raises(anthropic.OverloadedError) as caught:
            await client.messages.create(model=MODEL, max_tokens=100, messages=HELLO)
    assert isinstance(caught.value, anthropic.InternalServerError)
    assert caught.value.status_code == 529
    assert caught.value.type == "overloaded_error"
    assert caught.value.api_message == "Overloaded"


@pytest.mark.anyio
async def test_400_and_500_errors(server: MessagesServer) -> None:
    server.push_error(400, message="messages: bad")
    server.push_error(500)
    async with sdk(server) as client:
        with pytest.raises(anthropic.BadRequestError) as bad:
            await client.messages.create(model=MODEL, max_tokens=100, messages=HELLO)
        with pytest.raises(anthropic.InternalServerError) as internal:
            await client.messages.create(model=MODEL, max_tokens=100, messages=HELLO)
    assert bad.value.type == "invalid_request_error"
    assert bad.value.api_message == "messages: bad"
    assert internal.value.status_code == 500
    assert internal.value.type == "api_error"


@pytest.mark.anyio
async def test_empty_script_is_a_500_that_says_so(server: MessagesServer) -> None:
    async with sdk(server) as client:
        with pytest.raises(anthropic.InternalServerError) as caught:
            await client.messages.create(model=MODEL, max_tokens=100, messages=HELLO)
    assert caught.value.status_code == 500
    assert caught.value.api_message is not None
    assert caught.value.api_message.startswith("no scripted response left")


@pytest.mark.anyio
async def test_a_responder_that_raises_is_a_500(server: MessagesServer) -> None:
    def broken(body: dict[str, Any]) -> str:
        raise KeyError("goal")

    server.push_responder(broken)
    async with sdk(server) as client:
        with pytest.raises(anthropic.InternalServerError) as caught:
            await client.messages.create(model=MODEL, max_tokens=100, messages=HELLO)
    assert caught.value.api_message == "the scripted responder raised KeyError: 'goal'"


@pytest.mark.anyio
async def test_wrong_api_key_is_refused_when_one_is_required() -> None:
    with MessagesServer(api_key="right") as server:
        server.push_text("for the right key")
        async with anthropic.AsyncAnthropic(
            api_key="wrong", base_url=server.url, max_retries=0
        ) as client:
            with pytest.raises(anthropic.AuthenticationError):
                await client.messages.create(model=MODEL, max_tokens=100, messages=HELLO)
        async with anthropic.AsyncAnthropic(
            api_key="right", base_url=server.url, max_retries=0
        ) as client:
            message = await client.messages.create(model=MODEL, max_tokens=100, messages=HELLO)
    assert message.content[0].type == "text"
    assert message.content[0].text == "for the right key"


# -- latency ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_time_to_first_token() -> None:
    with MessagesServer(ttft=0.2) as server:
        server.push_text("first token late")
        async with sdk(server) as client:
            started = time.monotonic()
            async with client.messages.stream(model=MODEL, max_tokens=100, messages=HELLO) as s:
                async for _piece in s.text_stream:
                    first = time.monotonic() - started
                    break
                await s.get_final_message()
    assert 0.2 <= first < 1.5


@pytest.mark.anyio
async def test_tokens_per_second_paces_stream_and_plain_replies() -> None:
    with MessagesServer(tokens_per_second=100, chunk_chars=8) as server:
        server.push_text("a" * 80)  # 20 tokens: 0.2 s at 100 tokens/s
        server.push_text("b" * 80)
        async with sdk(server) as client:
            started = time.monotonic()
            await client.messages.create(model=MODEL, max_tokens=100, messages=HELLO)
            plain = time.monotonic() - started
            started = time.monotonic()
            arrivals: list[float] = []
            async with client.messages.stream(model=MODEL, max_tokens=100, messages=HELLO) as s:
                async for _piece in s.text_stream:
                    arrivals.append(time.monotonic() - started)
    assert 0.2 <= plain < 1.5
    assert len(arrivals) == 10  # 80 chars in deltas of 8
    assert arrivals[-1] >= 0.18  # the tenth delta leaves after 18 tokens: 0.18 s


@pytest.mark.anyio
async def test_requests_are_served_in_parallel() -> None:
    with MessagesServer(ttft=0.3) as server:
        for n in range(3):
            server.push_text(f"reply {n}")
        texts: list[str] = []

        async def ask(client: anthropic.AsyncAnthropic) -> None:
            message = await client.messages.create(model=MODEL, max_tokens=10, messages=HELLO)
            assert message.content[0].type == "text"
            texts.append(message.content[0].text)

        async with sdk(server) as client:
            started = time.monotonic()
            async with anyio.create_task_group() as group:
                for _ in range(3):
                    group.start_soon(ask, client)
            elapsed = time.monotonic() - started
    assert sorted(texts) == ["reply 0", "reply 1", "reply 2"]
    assert 0.3 <= elapsed < 0.85  # one after another would take 0.9 s


@pytest.mark.anyio
async def test_stop_ends_a_wait_at_once() -> None:
    server = MessagesServer(ttft=30).start()
    server.push_text("never sent")
    async with sdk(server) as client:
        outcome: list[BaseException] = []

        async def ask() -> None:
            try:
                await client.messages.create(model=MODEL, max_tokens=100, messages=HELLO)
            except anthropic.APIConnectionError as error:
                outcome.append(error)

        async with anyio.create_task_group() as group:
            group.start_soon(ask)
            await anyio.sleep(0.2)
            started = time.monotonic()
            await anyio.to_thread.run_sync(server.stop)
            stopping = time.monotonic() - started
    assert stopping < 1.0
    assert len(outcome) == 1


# -- the wire format, without the SDK ---------------------------------------------------------


def test_raw_sse_stream_with_httpx() -> None:
    with MessagesServer(chunk_chars=4) as server:
        server.push_text("Hi there")
        with httpx.Client(base_url=server.url, trust_env=False) as client:
            response = client.post(
                "/v1/messages",
                json={"model": MODEL, "max_tokens": 10, "messages": HELLO, "stream": True},
            )
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert response.headers["request-id"] == "req_local_000001"
    assert response.headers["transfer-encoding"] == "chunked"
    usage = (
        '"usage":{"input_tokens":1,"cache_creation_input_tokens":0,'
        '"cache_read_input_tokens":0,"output_tokens":1,"service_tier":"standard"}'
    )
    assert response.text == (
        "event: message_start\n"
        'data: {"type":"message_start","message":{"id":"msg_local_000001","type":"message",'
        f'"role":"assistant","model":"{MODEL}","content":[],"stop_reason":null,'
        f'"stop_sequence":null,{usage}}}}}\n\n'
        "event: content_block_start\n"
        'data: {"type":"content_block_start","index":0,'
        '"content_block":{"type":"text","text":""}}\n\n'
        "event: ping\n"
        'data: {"type":"ping"}\n\n'
        "event: content_block_delta\n"
        'data: {"type":"content_block_delta","index":0,'
        '"delta":{"type":"text_delta","text":"Hi t"}}\n\n'
        "event: content_block_delta\n"
        'data: {"type":"content_block_delta","index":0,'
        '"delta":{"type":"text_delta","text":"here"}}\n\n'
        "event: content_block_stop\n"
        'data: {"type":"content_block_stop","index":0}\n\n'
        "event: message_delta\n"
        'data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},'
        '"usage":{"input_tokens":1,"cache_creation_input_tokens":0,'
        '"cache_read_input_tokens":0,"output_tokens":2}}\n\n'
        "event: message_stop\n"
        'data: {"type":"message_stop"}\n\n'
    )


def test_raw_mid_stream_error_and_tool_deltas_with_httpx() -> None:
    with MessagesServer(chunk_chars=5) as server:
        server.push_tool_use("f", {"a": 1}, id="toolu_1")
        server.push_stream_error_after(3, text="abcdef")
        with httpx.Client(base_url=server.url, trust_env=False) as client:
            body = {"model": MODEL, "max_tokens": 10, "messages": HELLO, "stream": True}
            tool = client.post("/v1/messages", json=body)
            broken = client.post("/v1/messages", json=body)
    events = [block for block in tool.text.split("\n\n") if block]
    assert events[1] == (
        "event: content_block_start\n"
        'data: {"type":"content_block_start","index":0,"content_block":'
        '{"type":"tool_use","id":"toolu_1","name":"f","input":{}}}'
    )
    deltas = [json.loads(e.split("data: ", 1)[1])["delta"] for e in events if "block_delta\n" in e]
    assert deltas == [
        {"type": "input_json_delta", "partial_json": ""},
        {"type": "input_json_delta", "partial_json": '{"a":'},
        {"type": "input_json_delta", "partial_json": "1}"},
    ]
    assert '"stop_reason":"tool_use"' in events[-2]
    assert broken.status_code == 200
    assert broken.text.endswith(
        "event: content_block_delta\n"
        'data: {"type":"content_block_delta","index":0,'
        '"delta":{"type":"text_delta","text":"abc"}}\n\n'
        "event: error\n"
        'data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},'
        '"request_id":"req_local_000002"}\n\n'
    )


def test_raw_error_bodies_with_httpx(server: MessagesServer) -> None:
    server.push_error(529)
    with httpx.Client(base_url=server.url, trust_env=False) as client:
        overloaded = client.post(
            "/v1/messages", json={"model": MODEL, "max_tokens": 10, "messages": HELLO}
        )
        missing = client.post("/v1/messages", json={"model": MODEL, "messages": HELLO})
        unknown = client.get("/v1/models")
    assert overloaded.status_code == 529
    assert overloaded.headers["content-type"] == "application/json"
    assert overloaded.json() == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
        "request_id": "req_local_000001",
    }
    assert missing.status_code == 400
    assert missing.json()["error"] == {
        "type": "invalid_request_error",
        "message": "max_tokens: Field required",
    }
    assert unknown.status_code == 404
    assert unknown.json()["error"]["type"] == "not_found_error"
    assert len(server.requests) == 3


# -- scripts and the command line ------------------------------------------------------------


def test_estimate_tokens() -> None:
    assert [estimate_tokens(text) for text in ("", "abc", "abcd", "abcde")] == [1, 1, 1, 2]


def test_script_from_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "replies.jsonl"
    lines = [
        {"text": "hello"},
        {"json": {"steps": []}, "usage": {"input_tokens": 9}},
        {"tool_use": {"name": "f", "input": {"x": 1}}},
        {"error": {"status": 429, "retry_after": 2}},
        {"max_tokens": "cut"},
        {"stream_error_after": 3, "text": "abcdef"},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n", encoding="utf-8")
    script = Script.from_jsonl(path)
    assert len(script) == 6
    replies = [script.next_reply({}) for _ in range(6)]
    assert replies[0] == ScriptedResponse.text("hello")
    assert replies[1] == ScriptedResponse.json({"steps": []}, usage={"input_tokens": 9})
    assert replies[2] == ScriptedResponse.tool_use("f", {"x": 1})
    assert replies[3] == ScriptedResponse.error(429, "rate_limit_error", retry_after=2)
    assert replies[4] == ScriptedResponse.max_tokens("cut")
    assert replies[5] == ScriptedResponse.stream_error(3, text="abcdef")
    assert script.next_reply({}) is None


def test_script_file_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "ok"}\n{"speak": "no"}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"bad\.jsonl:2: not a scripted reply: unknown reply"):
        Script.from_jsonl(path)


def test_constructor_refuses_bad_latency() -> None:
    with pytest.raises(ValueError, match="ttft"):
        MessagesServer(ttft=-1)
    with pytest.raises(ValueError, match="tokens_per_second"):
        MessagesServer(tokens_per_second=0)


def test_command_line_serves_a_script(tmp_path: Path) -> None:
    path = tmp_path / "replies.jsonl"
    path.write_text(json.dumps({"text": "from the file"}) + "\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "plandag.testing",
            "--port",
            "0",
            "--script",
            str(path),
            "--exit-after",
            "30",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        with httpx.Client(base_url=url, trust_env=False) as client:
            body = {"model": MODEL, "max_tokens": 10, "messages": HELLO}
            first = client.post("/v1/messages", json=body)
            second = client.post("/v1/messages", json=body)
        assert first.json()["content"] == [{"type": "text", "text": "from the file"}]
        assert second.status_code == 500
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0, stderr


def test_package_exports_exactly_its_all() -> None:
    import plandag.testing

    assert plandag.testing.__all__ == sorted(plandag.testing.__all__)
    import pkgutil

    # submodules become attributes once any test imported them: found, whatever was imported
    submodules = {info.name for info in pkgutil.iter_modules(plandag.testing.__path__)}
    assert {"script", "server", "workers"} <= submodules
    public = {name for name in vars(plandag.testing) if not name.startswith("_")}
    assert public - submodules == set(plandag.testing.__all__)


def test_command_line_on_a_busy_port_exits_2(server: MessagesServer) -> None:
    from plandag.testing.__main__ import main

    assert main(["--port", str(server.port), "--exit-after", "0.1"]) == 2
