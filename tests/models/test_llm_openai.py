"""The OpenAI-compatible client (the official ``openai`` SDK): chat completions on an
``httpx2.MockTransport`` that speaks the protocol (JSON bodies, server-sent events), and a
closed port on 127.0.0.1."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterable
from typing import Any

import httpx2 as httpx
import pytest

from plandag.brakes.budget import Budget
from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.errors import NotStartedError, PermanentStepError, TransientStepError
from plandag.models import (
    CallRecord,
    LLMRequest,
    ModelRefusalError,
    OpenAICompatibleClient,
    PriceTable,
    TruncatedResponseError,
    Usage,
    call_with_retries,
)
from plandag.models.schemas import prepare_schema

BASE = "http://127.0.0.1:8000/v1"
MODEL = "llama3.1:8b"
SCHEMA = {"type": "object", "properties": {"steps": {"type": "array"}}, "required": ["steps"]}
PLAN_TEXT = '{"steps":[{"id":1,"tool":"add"}]}'

Handler = Callable[[httpx.Request], httpx.Response]


class FakeServer:
    """Plays queued replies and records each request's decoded JSON body."""

    def __init__(self, replies: Iterable[httpx.Response | Handler]) -> None:
        self.replies = list(replies)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        reply = self.replies.pop(0)
        return reply(request) if callable(reply) else reply

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(request.content) for request in self.requests]


def completion(
    text: str, *, finish_reason: str = "stop", usage: dict[str, Any] | None = None
) -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": MODEL,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": finish_reason,
                }
            ],
            "usage": usage
            if usage is not None
            else {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60},
        },
        headers={"x-request-id": "req-1"},
    )


def sse(chunks: Iterable[dict[str, Any] | str]) -> httpx.Response:
    lines = []
    for chunk in chunks:
        payload = chunk if isinstance(chunk, str) else json.dumps(chunk)
        lines.append(f"data: {payload}\n\n")
    return httpx.Response(
        200, content="".join(lines).encode(), headers={"content-type": "text/event-stream"}
    )


def delta(text: str, finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-2",
        "model": MODEL,
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish_reason}],
    }


USAGE_CHUNK = {
    "id": "chatcmpl-2",
    "model": MODEL,
    "choices": [],
    "usage": {
        "prompt_tokens": 40,
        "completion_tokens": 9,
        "prompt_tokens_details": {"cached_tokens": 16},
    },
}


def client(fake: FakeServer, api_key: str | None = None) -> OpenAICompatibleClient:
    return OpenAICompatibleClient(
        BASE, api_key=api_key, http_client=httpx.AsyncClient(transport=httpx.MockTransport(fake))
    )


def request(max_tokens: int = 500, *, schema: bool = True) -> LLMRequest:
    return LLMRequest(
        model=MODEL,
        system="You write plans.",
        messages=[{"role": "user", "content": "Plan: 2+3"}],
        max_tokens=max_tokens,
        json_schema=SCHEMA if schema else None,
        schema_name="plan",
        temperature=0.0,
    )


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No key from the environment; requests to 127.0.0.1 never go through a proxy."""
    for name in ("OPENAI_API_KEY", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.mark.anyio
async def test_completion_sends_the_json_schema_response_format() -> None:
    fake = FakeServer([completion(PLAN_TEXT)])
    async with client(fake, api_key="sk-local") as llm:
        response = await llm.complete(request())
    assert response.text == PLAN_TEXT
    assert response.stop_reason == "stop"
    assert response.usage == Usage(input_tokens=50, output_tokens=10)
    assert (response.model, response.request_id) == (MODEL, "req-1")
    [sent] = fake.requests
    assert str(sent.url) == "http://127.0.0.1:8000/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-local"
    assert fake.bodies == [
        {
            "model": MODEL,
            "messages": [
                {"role": "system", "content": "You write plans."},
                {"role": "user", "content": "Plan: 2+3"},
            ],
            "max_tokens": 500,
            "temperature": 0.0,
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": "plan",
                    "schema": prepare_schema(SCHEMA, "openai").schema,
                    "strict": True,
                },
            },
        }
    ]


@pytest.mark.anyio
async def test_no_key_sends_no_authorization_and_a_key_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeServer([completion("a"), completion("b")])
    async with client(fake) as llm:
        await llm.complete(request(schema=False))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    async with client(fake) as llm:
        await llm.complete(request(schema=False))
    assert "authorization" not in fake.requests[0].headers
    assert fake.requests[1].headers["authorization"] == "Bearer sk-env"
    assert "response_format" not in fake.bodies[0]


@pytest.mark.anyio
async def test_stream_yields_deltas_and_reads_usage_from_the_last_chunk() -> None:
    fake = FakeServer(
        [
            sse(
                [
                    delta('{"steps":'),
                    delta('[{"id":1,'),
                    delta('"tool":"add"}]}', finish_reason="stop"),
                    USAGE_CHUNK,
                    "[DONE]",
                ]
            )
        ]
    )
    deltas: list[str] = []
    async with client(fake) as llm, llm.stream(request()) as stream:
        async for piece in stream:
            deltas.append(piece)
        response = await stream.final_response()
    assert deltas == ['{"steps":', '[{"id":1,', '"tool":"add"}]}']
    assert response.text == PLAN_TEXT
    assert response.stop_reason == "stop"
    assert response.usage == Usage(input_tokens=24, output_tokens=9, cache_read_input_tokens=16)
    assert response.request_id == "chatcmpl-2"
    body = fake.bodies[0]
    assert (body["stream"], body["stream_options"]) == (True, {"include_usage": True})


@pytest.mark.anyio
async def test_streamed_call_through_call_with_retries_records_usage_and_ttft() -> None:
    fake = FakeServer([sse([delta("ok", "stop"), USAGE_CHUNK, "[DONE]"])])
    prices = PriceTable.from_mapping({MODEL: {"input": 1.0, "output": 2.0, "cache_read": 0.5}})
    received: list[str] = []
    records: list[CallRecord] = []

    async def on_text(piece: str) -> None:
        received.append(piece)

    async with client(fake) as llm:
        await call_with_retries(
            llm,
            request(),
            RetryPolicy(retries=0),
            VirtualClock(),
            prices=prices,
            records=records,
            on_text=on_text,
        )
    assert received == ["ok"]
    [record] = records
    assert (record.provider, record.streamed, record.ttft_s, record.priced) == (
        "openai",
        True,
        0.0,
        True,
    )
    assert record.cost_usd == pytest.approx((24 * 1.0 + 9 * 2.0 + 16 * 0.5) / 1e6)


@pytest.mark.anyio
async def test_length_finish_reason_is_truncation() -> None:
    fake = FakeServer(
        [
            completion('{"steps":[', finish_reason="length", usage={"completion_tokens": 64}),
            sse([delta('{"steps":[', "length"), "[DONE]"]),
        ]
    )
    async with client(fake) as llm:
        with pytest.raises(TruncatedResponseError) as caught:
            await llm.complete(request(max_tokens=64))
        assert caught.value.reason == "max_tokens"
        assert caught.value.response.usage == Usage(output_tokens=64)
        with pytest.raises(TruncatedResponseError):
            async with llm.stream(request(max_tokens=64)) as stream:
                await stream.final_response()


@pytest.mark.anyio
async def test_content_filter_is_a_refusal() -> None:
    fake = FakeServer([completion("", finish_reason="content_filter")])
    async with client(fake) as llm:
        with pytest.raises(ModelRefusalError) as caught:
            await llm.complete(request())
    assert caught.value.reason == "refusal"


@pytest.mark.anyio
async def test_status_errors_map_to_step_errors() -> None:
    fake = FakeServer(
        [
            httpx.Response(429, headers={"retry-after-ms": "1500"}, json={"error": {}}),
            httpx.Response(503, text="upstream down"),
            httpx.Response(400, json={"error": {"message": "bad request: unknown field"}}),
            httpx.Response(404, text="no such model"),
        ]
    )
    async with client(fake) as llm:
        with pytest.raises(TransientStepError) as rate_limited:
            await llm.complete(request())
        with pytest.raises(TransientStepError) as unavailable:
            async with llm.stream(request()) as stream:
                await stream.final_response()
        with pytest.raises(PermanentStepError) as bad:
            await llm.complete(request())
        with pytest.raises(PermanentStepError) as missing:
            await llm.complete(request())
    assert (rate_limited.value.reason, rate_limited.value.retry_after) == ("http_429", 1.5)
    assert unavailable.value.reason == "http_503"
    assert "upstream down" in str(unavailable.value)
    assert bad.value.reason == "http_400"
    assert "unknown field" in str(bad.value)
    assert missing.value.reason == "http_404"


@pytest.mark.anyio
async def test_error_chunk_mid_stream_is_transient_for_server_errors() -> None:
    fake = FakeServer(
        [
            sse([delta("{"), {"error": {"message": "overloaded", "type": "server_error"}}]),
            sse([delta("{"), {"error": {"message": "engine died", "code": 500}}]),
            sse([delta("{"), {"error": {"message": "bad", "type": "invalid_request_error"}}]),
        ]
    )
    async with client(fake) as llm:
        for expected in (TransientStepError, TransientStepError, PermanentStepError):
            with pytest.raises(expected):
                async with llm.stream(request()) as stream:
                    await stream.final_response()


@pytest.mark.anyio
async def test_retries_a_503_then_succeeds() -> None:
    fake = FakeServer([httpx.Response(503, headers={"retry-after": "3"}), completion(PLAN_TEXT)])
    clock = VirtualClock()
    async with client(fake) as llm:
        response = await call_with_retries(
            llm,
            request(),
            RetryPolicy(retries=2, base_delay=0.5, jitter=False),
            clock,
            Budget(max_cost_usd=None, max_tokens=10_000),
        )
    assert response.text == PLAN_TEXT
    assert clock.sleeps == [3.0]


@pytest.mark.anyio
async def test_not_a_chat_completion_is_permanent() -> None:
    fake = FakeServer([httpx.Response(200, text="<html>proxy login</html>")])
    async with client(fake) as llm:
        with pytest.raises(PermanentStepError) as caught:
            await llm.complete(request())
    assert caught.value.reason == "invalid_response"


@pytest.mark.anyio
async def test_connection_refused_is_not_started() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with OpenAICompatibleClient(f"http://127.0.0.1:{port}/v1", timeout_s=5) as llm:
        with pytest.raises(NotStartedError) as caught:
            await llm.complete(request())
        with pytest.raises(NotStartedError):
            async with llm.stream(request()) as stream:
                await stream.final_response()
    assert caught.value.reason == "connect_error"


@pytest.mark.anyio
async def test_transport_failures_map_by_whether_anything_was_sent() -> None:
    def raises(error: Exception) -> Handler:
        def handler(request: httpx.Request) -> httpx.Response:
            raise error

        return handler

    fake = FakeServer(
        [
            raises(httpx.ConnectTimeout("no connection")),
            raises(httpx.ReadTimeout("no answer")),
            raises(httpx.RemoteProtocolError("peer closed")),
        ]
    )
    async with client(fake) as llm:
        with pytest.raises(NotStartedError) as connect:
            await llm.complete(request())
        with pytest.raises(TransientStepError) as read:
            await llm.complete(request())
        with pytest.raises(TransientStepError) as broken:
            await llm.complete(request())
    assert connect.value.reason == "connect_timeout"
    assert (read.value.reason, read.value.before_effect) == ("timeout", False)
    assert (broken.value.reason, broken.value.before_effect) == ("network_error", False)
