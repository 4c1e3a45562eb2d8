"""The Anthropic client and call_with_retries, through the real SDK against the local
Messages API server (plandag.testing) on 127.0.0.1; delays on a VirtualClock."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from plandag.brakes.budget import Budget
from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.errors import NotStartedError, PermanentStepError, TransientStepError
from plandag.models import (
    AnthropicClient,
    BudgetRefusedError,
    CallRecord,
    DeadlineReachedError,
    LLMRequest,
    MissingAPIKeyError,
    PriceTable,
    TruncatedResponseError,
    Usage,
    call_with_retries,
)
from plandag.models.schemas import prepare_schema, strict_problems
from plandag.testing import MessagesServer, ScriptedResponse, estimate_tokens, schema_text

MODEL = "claude-opus-4-6"  # priced at $5 / $25 per million input / output tokens
SCHEMA = {
    "type": "object",
    "properties": {"steps": {"type": "array"}},
    "required": ["steps"],
}
PLAN = {"steps": [{"id": 1, "tool": "add", "args": {"a": 2, "b": 3}}]}
PLAN_TEXT = '{"steps":[{"id":1,"tool":"add","args":{"a":2,"b":3}}]}'


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


def request(
    max_tokens: int = 1000, *, schema: bool = True, content: str = "Plan: 2+3"
) -> LLMRequest:
    return LLMRequest(
        model=MODEL,
        system="You write plans.",
        messages=[{"role": "user", "content": content}],
        max_tokens=max_tokens,
        json_schema=SCHEMA if schema else None,
    )


def policy(retries: int = 2) -> RetryPolicy:
    return RetryPolicy(retries=retries, base_delay=0.5, jitter=False)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# -- complete and stream ---------------------------------------------------------------------


@pytest.mark.anyio
async def test_json_completion_sends_the_schema_as_output_config(server: MessagesServer) -> None:
    server.push_json(PLAN, usage={"input_tokens": 120, "output_tokens": 30})
    async with AnthropicClient(api_key="test", base_url=server.url) as client:
        response = await client.complete(request())
    assert response.text == PLAN_TEXT
    assert response.stop_reason == "end_turn"
    assert response.usage == Usage(input_tokens=120, output_tokens=30)
    assert response.model == MODEL
    assert response.request_id == "req_local_000001"
    [sent] = server.message_requests
    assert sent.json == {
        "model": MODEL,
        "max_tokens": 1000,
        "system": [
            {"type": "text", "text": "You write plans.", "cache_control": {"type": "ephemeral"}}
        ],
        "messages": [{"role": "user", "content": "Plan: 2+3"}],
        "output_config": {
            "format": {"type": "json_schema", "schema": prepare_schema(SCHEMA, "anthropic").schema}
        },
    }
    assert strict_problems(sent.json["output_config"]["format"]["schema"], "anthropic") == []
    assert (response.schema_mode, response.schema_errors) == ("strict", ())
    assert sent.api_key == "test"
    assert sent.headers["x-stainless-retry-count"] == "0"


@pytest.mark.anyio
async def test_free_text_request_has_no_output_config_and_keeps_stop_sequences(
    server: MessagesServer,
) -> None:
    server.push_text("Hello")
    plain = LLMRequest(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=10,
        stop_sequences=("END",),
        temperature=0.0,
    )
    async with AnthropicClient(api_key="test", base_url=server.url) as client:
        response = await client.complete(plain)
    assert response.text == "Hello"
    assert server.message_requests[0].json == {
        "model": MODEL,
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}],
        "stop_sequences": ["END"],
    }


@pytest.mark.anyio
async def test_stream_hands_on_deltas_and_reassembles_the_text() -> None:
    text = '{"steps":[{"id":1,"tool":"fetch"},{"id":2,"tool":"parse","after":[1]}]}'
    with MessagesServer(chunk_chars=16) as server:
        server.push_text(text, usage={"input_tokens": 40, "output_tokens": 18})
        async with AnthropicClient(api_key="test", base_url=server.url) as client:
            deltas: list[str] = []
            async with client.stream(request()) as stream:
                async for delta in stream:
                    deltas.append(delta)
                response = await stream.final_response()
    assert deltas == [text[i : i + 16] for i in range(0, len(text), 16)]
    assert response.text == text
    assert response.stop_reason == "end_turn"
    assert response.usage == Usage(input_tokens=40, output_tokens=18)
    assert server.message_requests[0].json["stream"] is True
    assert server.message_requests[0].json["output_config"] == {
        "format": {"type": "json_schema", "schema": prepare_schema(SCHEMA, "anthropic").schema}
    }


@pytest.mark.anyio
async def test_final_response_without_iterating_reads_the_whole_stream(
    server: MessagesServer,
) -> None:
    server.push_text("abcdefghijklmnopqrstuvwxyz", usage={"input_tokens": 5, "output_tokens": 7})
    async with (
        AnthropicClient(api_key="test", base_url=server.url) as client,
        client.stream(request(schema=False)) as stream,
    ):
        response = await stream.final_response()
        assert stream.text == "abcdefghijklmnopqrstuvwxyz"
    assert response.text == "abcdefghijklmnopqrstuvwxyz"


# -- error mapping ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_429_maps_to_transient_with_retry_after(server: MessagesServer) -> None:
    server.push_error(429, retry_after=7)
    async with AnthropicClient(api_key="test", base_url=server.url) as client:
        with pytest.raises(TransientStepError) as caught:
            await client.complete(request())
    assert caught.value.reason == "http_429"
    assert caught.value.retry_after == 7.0
    assert caught.value.before_effect is True


@pytest.mark.anyio
async def test_529_maps_to_transient(server: MessagesServer) -> None:
    server.push_error(529)
    async with AnthropicClient(api_key="test", base_url=server.url) as client:
        with pytest.raises(TransientStepError) as caught:
            await client.complete(request())
    assert caught.value.reason == "http_529"
    assert caught.value.retry_after is None
    assert "overloaded_error" in str(caught.value)


@pytest.mark.anyio
async def test_400_maps_to_permanent(server: MessagesServer) -> None:
    server.push_error(400, message="max_tokens: too large")
    async with AnthropicClient(api_key="test", base_url=server.url) as client:
        with pytest.raises(PermanentStepError) as caught:
            await client.complete(request())
    assert caught.value.reason == "http_400"
    assert "max_tokens: too large" in str(caught.value)


@pytest.mark.anyio
async def test_mid_stream_overloaded_event_is_transient(server: MessagesServer) -> None:
    server.push_stream_error_after(10, text="0123456789abcdefghij")
    deltas: list[str] = []

    async def read(client: AnthropicClient) -> None:
        async with client.stream(request(schema=False)) as stream:
            async for delta in stream:
                deltas.append(delta)

    async with AnthropicClient(api_key="test", base_url=server.url) as client:
        with pytest.raises(TransientStepError) as caught:
            await read(client)
    assert caught.value.reason == "overloaded_error"
    assert "".join(deltas) == "0123456789"


@pytest.mark.anyio
async def test_mid_stream_invalid_request_event_is_permanent(server: MessagesServer) -> None:
    server.push_stream_error_after(4, "invalid_request_error", text="abcdefgh")
    async with AnthropicClient(api_key="test", base_url=server.url) as client:
        with pytest.raises(PermanentStepError) as caught:
            async with client.stream(request(schema=False)) as stream:
                await stream.final_response()
    assert caught.value.reason == "invalid_request_error"


@pytest.mark.anyio
async def test_connection_refused_is_not_started() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    async with AnthropicClient(api_key="test", base_url=url, timeout_s=5) as client:
        with pytest.raises(NotStartedError) as caught:
            await client.complete(request())
        assert caught.value.reason == "connect_error"
        with pytest.raises(NotStartedError):
            async with client.stream(request()) as stream:
                await stream.final_response()


@pytest.mark.anyio
async def test_max_tokens_raises_truncated_with_the_cut_response(server: MessagesServer) -> None:
    server.push_max_tokens('{"steps":[{"id":1,', usage={"input_tokens": 50, "output_tokens": 64})
    async with AnthropicClient(api_key="test", base_url=server.url) as client:
        with pytest.raises(TruncatedResponseError) as caught:
            await client.complete(request(max_tokens=64))
    error = caught.value
    assert isinstance(error, PermanentStepError)
    assert error.reason == "max_tokens"
    assert error.max_tokens == 64
    assert error.response.text == '{"steps":[{"id":1,'
    assert error.response.usage == Usage(input_tokens=50, output_tokens=64)
    assert "max_tokens=64" in str(error)


@pytest.mark.anyio
async def test_max_tokens_in_a_stream_raises_truncated_from_final_response(
    server: MessagesServer,
) -> None:
    server.push_max_tokens('{"steps":[{"id":1,', usage={"input_tokens": 50, "output_tokens": 64})
    async with AnthropicClient(api_key="test", base_url=server.url) as client:
        with pytest.raises(TruncatedResponseError) as caught:
            async with client.stream(request(max_tokens=64)) as stream:
                await stream.final_response()
    assert caught.value.response.text == '{"steps":[{"id":1,'
    assert caught.value.response.usage == Usage(input_tokens=50, output_tokens=64)


def test_missing_api_key_is_a_clear_error_before_any_request(
    monkeypatch: pytest.MonkeyPatch, server: MessagesServer
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(MissingAPIKeyError) as caught:
        AnthropicClient(base_url=server.url)
    assert caught.value.variable == "ANTHROPIC_API_KEY"
    assert "set ANTHROPIC_API_KEY" in str(caught.value)
    assert server.requests == []


@pytest.mark.anyio
async def test_api_key_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, server: MessagesServer
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "from-env")
    server.push_text("ok")
    async with AnthropicClient(base_url=server.url) as client:
        await client.complete(request(schema=False))
    assert server.message_requests[0].api_key == "from-env"


# -- retries ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_429_is_retried_after_exactly_its_retry_after(server: MessagesServer) -> None:
    server.push_error(429, retry_after=7)
    server.push_json(PLAN, usage={"input_tokens": 100, "output_tokens": 20})
    clock = VirtualClock()
    records: list[CallRecord] = []
    async with AnthropicClient(api_key="test", base_url=server.url) as client:
        response = await call_with_retries(client, request(), policy(), clock, records=records)
    assert response.text == PLAN_TEXT
    assert clock.sleeps == [7.0]
    assert len(server.message_requests) == 2
    assert [(r.attempt, r.error_reason, r.retry_delay_s) for r in records] == [
        (1, "http_429", 7.0),
        (2, None, None),
    ]
    assert records[0].usage == Usage()
    assert records[0].cost_usd == 0.0
    assert records[1].usage == Usage(input_tokens=100, output_tokens=20)
    assert records[1].cost_usd == pytest.approx(100 * 5e-6 + 20 * 25e-6)


@pytest.mark.anyio
async def test_529_is_retried_with_the_policy_backoff(server: MessagesServer) -> None:
    server.push_error(529)
    server.push_error(529)
    server.push_json(PLAN)
    clock = VirtualClock()
    async with AnthropicClient(api_key="test", base_url=server.url) as client:
        response = await call_with_retries(client, request(), policy(), clock)
    assert response.text == PLAN_TEXT
    assert clock.sleeps == [0.5, 1.0]


@pytest.mark.anyio
async def test_retries_exhausted_raises_the_last_error_with_a_note(
    server: MessagesServer,
) -> None:
    for _ in range(3):
        server.push_error(529)
    clock = VirtualClock()
    async with AnthropicClient(api_key="test", base_url=server.url) as client:
        with pytest.raises(TransientStepError) as caught:
            await call_with_retries(client, request(), policy(retries=2), clock)
    assert clock.sleeps == [0.5, 1.0]
    assert len(server.message_requests) == 3
    assert caught.value.__notes__ == [f"anthropic {MODEL}: gave up after 3 attempt(s) (2 retries)"]


@pytest.mark.anyio
async def test_mid_stream_overload_is_retried_and_the_consumer_restarts(
    server: MessagesServer,
) -> None:
    server.push_stream_error_after(10, text="0123456789abcdefghij")
    server.push_text(PLAN_TEXT, usage={"input_tokens": 30, "output_tokens": 12})
    clock = VirtualClock()
    received: list[str] = []
    restarts: list[str] = []
    records: list[CallRecord] = []

    async def on_text(delta: str) -> None:
        received.append(delta)

    async def on_restart() -> None:
        restarts.append("".join(received))
        received.clear()

    async with AnthropicClient(api_key="test", base_url=server.url) as client:
        response = await call_with_retries(
            client,
            request(),
            policy(),
            clock,
            records=records,
            on_text=on_text,
            on_restart=on_restart,
        )
    assert response.text == PLAN_TEXT
    assert "".join(received) == PLAN_TEXT
    assert restarts == ["0123456789"]
    assert clock.sleeps == [0.5]
    first, second = records
    assert (first.streamed, first.error_reason, first.retry_delay_s) == (
        True,
        "overloaded_error",
        0.5,
    )
    # message_start reported the input tokens and 1 output token before the break
    assert first.usage.output_tokens == 1
    assert first.usage.input_tokens > 0
    assert first.ttft_s == 0.0  # the virtual clock does not move while streaming
    assert second.usage == Usage(input_tokens=30, output_tokens=12)
    assert second.error is None


@pytest.mark.anyio
async def test_400_is_not_retried(server: MessagesServer) -> None:
    server.push_error(400)
    server.push_json(PLAN)
    clock = VirtualClock()
    records: list[CallRecord] = []
    async with AnthropicClient(api_key="test", base_url=server.url) as client:
        with pytest.raises(PermanentStepError) as caught:
            await call_with_retries(client, request(), policy(), clock, records=records)
    assert caught.value.reason == "http_400"
    assert clock.sleeps == []
    assert len(server.message_requests) == 1
    assert [r.error_reason for r in records] == ["http_400"]


@pytest.mark.anyio
async def test_max_tokens_is_not_retried_and_its_usage_is_counted(
    server: MessagesServer,
) -> None:
    server.push_max_tokens('{"steps":[', usage={"input_tokens": 200, "output_tokens": 64})
    server.push_json(PLAN)
    clock = VirtualClock()
    budget = Budget(max_cost_usd=1.0, max_tokens=None)
    records: list[CallRecord] = []
    async with AnthropicClient(api_key="test", base_url=server.url) as client:
        with pytest.raises(TruncatedResponseError):
            await call_with_retries(
                client, request(max_tokens=64), policy(), clock, budget, records=records
            )
    assert len(server.message_requests) == 1
    assert clock.sleeps == []
    [record] = records
    assert record.usage == Usage(input_tokens=200, output_tokens=64)
    assert record.stop_reason == "max_tokens"
    assert record.cost_usd == pytest.approx(200 * 5e-6 + 64 * 25e-6)
    assert budget.spent_usd == pytest.approx(200 * 5e-6 + 64 * 25e-6)
    assert budget.spent_tokens == 264
    assert budget.reserved_nanodollars == 0


@pytest.mark.anyio
async def test_connection_refused_is_retried_then_raised() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    clock = VirtualClock()
    records: list[CallRecord] = []
    async with AnthropicClient(api_key="test", base_url=url, timeout_s=5) as client:
        with pytest.raises(NotStartedError):
            await call_with_retries(client, request(), policy(retries=1), clock, records=records)
    assert clock.sleeps == [0.5]
    assert [r.error_reason for r in records] == ["connect_error", "connect_error"]


@pytest.mark.anyio
async def test_retry_after_past_the_deadline_is_not_waited(server: MessagesServer) -> None:
    server.push_error(429, retry_after=30)
    clock = VirtualClock()
    async with AnthropicClient(api_key="test", base_url=server.url) as client:
        with pytest.raises(DeadlineReachedError) as caught:
            await call_with_retries(
                client, request(), policy(), clock, deadline=clock.monotonic() + 10
            )
    assert clock.sleeps == []
    assert "past the run's deadline" in str(caught.value)
    assert isinstance(caught.value.__cause__, TransientStepError)


# -- budget ----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_budget_refuses_a_call_that_does_not_fit_and_sends_nothing(
    server: MessagesServer,
) -> None:
    budget = Budget(max_cost_usd=0.01, max_tokens=None)
    records: list[CallRecord] = []
    async with AnthropicClient(api_key="test", base_url=server.url) as client:
        with pytest.raises(BudgetRefusedError) as caught:
            # 1000 output tokens at $25 per million = $0.025 > $0.01
            await call_with_retries(
                client, request(max_tokens=1000), policy(), VirtualClock(), budget, records=records
            )
    assert caught.value.reason == "budget"
    # the input tokens come from the counting endpoint (the local server counts system 16
    # + message 9 characters + the schema sent, at four characters a token), + 1000 output
    sent = prepare_schema(SCHEMA, "anthropic").schema
    counted = estimate_tokens("You write plans.Plan: 2+3" + schema_text(sent))
    assert caught.value.estimated_tokens == counted + 1000
    # the input at the cache-write price (1.25 x $5 per million), the output at $25
    assert caught.value.estimated_usd == pytest.approx(counted * 6.25e-6 + 1000 * 25e-6)
    # one counting request, which is not an attempt: no message sent, nothing recorded
    assert [item.path for item in server.requests] == ["/v1/messages/count_tokens"]
    assert server.message_requests == []
    assert records == []
    assert (budget.spent_nanodollars, budget.reserved_nanodollars) == (0, 0)
    assert "cost cap of $0.01" in str(caught.value)


@pytest.mark.anyio
async def test_budget_reserves_the_estimate_during_the_call_and_settles_real_usage(
    server: MessagesServer,
) -> None:
    budget = Budget(max_cost_usd=1.0, max_tokens=10_000)
    held: list[tuple[int, int]] = []

    def reply(body: dict[str, Any]) -> ScriptedResponse:
        held.append((budget.reserved_nanodollars, budget.reserved_tokens))
        return ScriptedResponse.json(PLAN, usage={"input_tokens": 1000, "output_tokens": 200})

    server.push_responder(reply)
    # 400 characters of prompt = 100 tokens; + 100 output tokens
    call = LLMRequest(
        model=MODEL, messages=[{"role": "user", "content": "x" * 400}], max_tokens=100
    )
    async with AnthropicClient(api_key="test", base_url=server.url) as client:
        await call_with_retries(client, call, policy(), VirtualClock(), budget)
    # estimate: 100 * $6.25/M (the input at the cache-write price) + 100 * $25/M = $0.003125
    assert held == [(3_125_000, 200)]
    assert budget.reserved_nanodollars == 0
    assert budget.spent_nanodollars == 10_000_000  # 1000 * $5/M + 200 * $25/M = $0.01
    assert budget.spent_tokens == 1200


@pytest.mark.anyio
async def test_parallel_calls_cannot_overshoot_the_cap(server: MessagesServer) -> None:
    # each call reserves 100 * $5/M + 100 * $25/M = $0.003; the cap holds one
    budget = Budget(max_cost_usd=0.005, max_tokens=None)
    server.push_json(PLAN, usage={"input_tokens": 100, "output_tokens": 100})
    server.push_json(PLAN, usage={"input_tokens": 100, "output_tokens": 100})
    call = LLMRequest(
        model=MODEL, messages=[{"role": "user", "content": "x" * 400}], max_tokens=100
    )
    outcomes: list[str] = []

    async def one(client: AnthropicClient) -> None:
        try:
            await call_with_retries(client, call, policy(), VirtualClock(), budget)
        except BudgetRefusedError:
            outcomes.append("refused")
        else:
            outcomes.append("done")

    async with (
        AnthropicClient(api_key="test", base_url=server.url) as client,
        anyio.create_task_group() as group,
    ):
        group.start_soon(one, client)
        group.start_soon(one, client)
    assert sorted(outcomes) == ["done", "refused"]
    assert len(server.message_requests) == 1
    assert budget.spent_nanodollars == 3_000_000


@pytest.mark.anyio
async def test_unpriced_model_under_a_dollar_cap_is_capped_by_tokens_alone(
    server: MessagesServer,
) -> None:
    # Brakes are on by default: a model without a price is sent, costs $0 against the
    # dollar cap, and the token cap stops it; it is never refused for having no price.
    server.push_text("ok", usage={"input_tokens": 10, "output_tokens": 2})
    call = LLMRequest(
        model="claude-unknown-9", messages=[{"role": "user", "content": "hi"}], max_tokens=10
    )
    budget = Budget(max_cost_usd=1.0, max_tokens=20)
    records: list[CallRecord] = []
    async with AnthropicClient(api_key="test", base_url=server.url) as client:
        await call_with_retries(client, call, policy(), VirtualClock(), budget, records=records)
        with pytest.raises(BudgetRefusedError) as caught:
            await call_with_retries(client, call, policy(), VirtualClock(), budget)
    [record] = records
    assert (record.cost_usd, record.priced) == (0.0, False)
    assert (budget.spent_usd, budget.spent_tokens) == (0.0, 12)
    assert "past its cap of 20 tokens (spent 12" in str(caught.value)
    assert len(server.message_requests) == 1


@pytest.mark.anyio
async def test_unpriced_model_without_a_dollar_cap_costs_zero(server: MessagesServer) -> None:
    server.push_text("ok", usage={"input_tokens": 10, "output_tokens": 2})
    call = LLMRequest(
        model="claude-unknown-9", messages=[{"role": "user", "content": "hi"}], max_tokens=10
    )
    budget = Budget(max_cost_usd=None, max_tokens=100)
    records: list[CallRecord] = []
    async with AnthropicClient(api_key="test", base_url=server.url) as client:
        await call_with_retries(
            client, call, policy(), VirtualClock(), budget, records=records, prices=PriceTable({})
        )
    [record] = records
    assert (record.cost_usd, record.priced) == (0.0, False)
    assert budget.spent_tokens == 12
