"""Prompt caching: the planner's fixed prefix is sent with ``cache_control``, the local
server simulates the cache as the API bills it, and cached tokens are counted and priced."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.models import (
    DEFAULT_PRICES,
    AnthropicClient,
    CallRecord,
    LLMRequest,
    Usage,
    call_with_retries,
)
from plandag.models.schemas import prepare_schema
from plandag.planner.planner import Planner
from plandag.planner.prompt import system_prompt
from plandag.planner.schema import plan_json_schema
from plandag.testing import MessagesServer, estimate_tokens, schema_text
from plandag.tools import tool
from plandag.tools.registry import Registry

MODEL = "claude-sonnet-4-6"
EPHEMERAL = {"type": "ephemeral"}
SYSTEM = "s" * 4000  # 1000 tokens at four characters a token


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)


class Ticks:
    """A monotonic clock a test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def ticks() -> Ticks:
    return Ticks()


@pytest.fixture
def server(ticks: Ticks) -> Iterator[MessagesServer]:
    with MessagesServer(cache_min_tokens=500, clock=ticks) as running:
        yield running


def ask(content: str = "hello", **fields: object) -> LLMRequest:
    return LLMRequest(
        model=MODEL,
        messages=[{"role": "user", "content": content}],
        max_tokens=100,
        system=SYSTEM,
        **fields,  # type: ignore[arg-type]
    )


# -- what the client sends -------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_prefix_breakpoint_ends_the_system_prompt(server: MessagesServer) -> None:
    server.push_text("ok")
    async with AnthropicClient(api_key="k", base_url=server.url) as client:
        await client.complete(ask())
    body = server.message_requests[0].json
    assert body["system"] == [{"type": "text", "text": SYSTEM, "cache_control": EPHEMERAL}]
    assert body["messages"] == [{"role": "user", "content": "hello"}]


@pytest.mark.anyio
async def test_without_a_system_prompt_the_last_tool_carries_the_breakpoint(
    server: MessagesServer,
) -> None:
    server.push_text("ok")
    tools = [
        {"name": "a", "description": "A.", "input_schema": {"type": "object"}},
        {"name": "b", "description": "B.", "input_schema": {"type": "object"}},
    ]
    request = LLMRequest(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=10, tools=tools
    )
    async with AnthropicClient(api_key="k", base_url=server.url) as client:
        await client.complete(request)
    sent = server.message_requests[0].json["tools"]
    assert sent[0] == tools[0]
    assert sent[1] == {**tools[1], "cache_control": EPHEMERAL}


@pytest.mark.anyio
async def test_conversation_caching_also_marks_the_last_message(server: MessagesServer) -> None:
    server.push_text("ok")
    request = LLMRequest(
        model=MODEL,
        system=SYSTEM,
        messages=[
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": [{"type": "text", "text": "thinking"}]},
            {"role": "user", "content": "second"},
        ],
        max_tokens=10,
        cache="conversation",
    )
    async with AnthropicClient(api_key="k", base_url=server.url) as client:
        await client.complete(request)
    messages = server.message_requests[0].json["messages"]
    assert messages[:2] == [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": [{"type": "text", "text": "thinking"}]},
    ]
    assert messages[2] == {
        "role": "user",
        "content": [{"type": "text", "text": "second", "cache_control": EPHEMERAL}],
    }


@pytest.mark.anyio
@pytest.mark.parametrize(("cache", "switch"), [("none", True), ("prefix", False)])
async def test_no_breakpoint_when_the_request_or_the_client_says_none(
    server: MessagesServer, cache: str, switch: bool
) -> None:
    server.push_text("ok")
    async with AnthropicClient(api_key="k", base_url=server.url, prompt_cache=switch) as client:
        response = await client.complete(ask(cache=cache))
    assert server.message_requests[0].json["system"] == SYSTEM
    assert response.usage.cache_creation_input_tokens == 0
    assert response.usage.cache_read_input_tokens == 0


# -- what the server bills -------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_first_call_writes_the_prefix_and_the_next_reads_it(
    server: MessagesServer, ticks: Ticks
) -> None:
    server.push_text("one")
    server.push_text("two")
    async with AnthropicClient(api_key="k", base_url=server.url) as client:
        first = await client.complete(ask("hello"))  # 1000 + 2 tokens
        ticks.now = 299.0
        second = await client.complete(ask("hello again"))  # 1000 + 3 tokens
    assert first.usage == Usage(input_tokens=2, output_tokens=1, cache_creation_input_tokens=1000)
    assert second.usage == Usage(input_tokens=3, output_tokens=1, cache_read_input_tokens=1000)
    assert (server.cache_writes, server.cache_reads) == (1000, 1000)


@pytest.mark.anyio
async def test_an_entry_expires_five_minutes_after_its_last_use(
    server: MessagesServer, ticks: Ticks
) -> None:
    for _ in range(3):
        server.push_text("ok")
    async with AnthropicClient(api_key="k", base_url=server.url) as client:
        await client.complete(ask())
        ticks.now = 250.0
        read = await client.complete(ask())  # renews the entry until 550
        ticks.now = 551.0
        written = await client.complete(ask())
    assert read.usage.cache_read_input_tokens == 1000
    assert written.usage.cache_read_input_tokens == 0
    assert written.usage.cache_creation_input_tokens == 1000


@pytest.mark.anyio
async def test_a_prefix_below_the_minimum_is_not_cached(server: MessagesServer) -> None:
    server.push_text("ok")
    server.push_text("ok")
    short = LLMRequest(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=10, system="x" * 400
    )
    async with AnthropicClient(api_key="k", base_url=server.url) as client:
        first = await client.complete(short)
        second = await client.complete(short)
    assert first.usage == second.usage == Usage(input_tokens=101, output_tokens=1)


@pytest.mark.anyio
async def test_another_model_does_not_read_the_cache(server: MessagesServer) -> None:
    server.push_text("ok")
    server.push_text("ok")
    async with AnthropicClient(api_key="k", base_url=server.url) as client:
        await client.complete(ask())
        other = await client.complete(
            LLMRequest(
                model="claude-haiku-4-5",
                messages=[{"role": "user", "content": "hello"}],
                max_tokens=10,
                system=SYSTEM,
            )
        )
    assert other.usage.cache_read_input_tokens == 0
    assert other.usage.cache_creation_input_tokens == 1000


@pytest.mark.anyio
async def test_a_growing_conversation_reads_its_last_turn_and_writes_the_new_part(
    server: MessagesServer,
) -> None:
    server.push_text("ok")
    server.push_text("ok")
    turn = "t" * 400  # 100 tokens
    first = ask(turn, cache="conversation")
    second = LLMRequest(
        model=MODEL,
        system=SYSTEM,
        messages=[
            {"role": "user", "content": turn},
            {"role": "assistant", "content": "a" * 400},
            {"role": "user", "content": "u" * 400},
        ],
        max_tokens=10,
        cache="conversation",
    )
    async with AnthropicClient(api_key="k", base_url=server.url) as client:
        one = await client.complete(first)
        two = await client.complete(second)
    assert one.usage == Usage(input_tokens=0, output_tokens=1, cache_creation_input_tokens=1100)
    assert two.usage == Usage(
        input_tokens=0,
        output_tokens=1,
        cache_creation_input_tokens=200,
        cache_read_input_tokens=1100,
    )


# -- priced as billed ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_cached_tokens_are_priced_as_anthropic_bills_them(server: MessagesServer) -> None:
    server.push_text("one")
    server.push_text("two")
    records: list[CallRecord] = []
    async with AnthropicClient(api_key="k", base_url=server.url) as client:
        for content in ("hello", "hello again"):
            await call_with_retries(
                client, ask(content), policy=RetryPolicy(), clock=VirtualClock(), records=records
            )
    write, read = records
    # claude-sonnet-4-6: $3 input, $15 output per million; writes 1.25x, reads 0.1x input
    assert write.usage.cache_creation_input_tokens == 1000
    assert write.cost_usd == pytest.approx((2 * 3.0 + 1 * 15.0 + 1000 * 3.75) / 1e6)
    assert read.usage.cache_read_input_tokens == 1000
    assert read.cost_usd == pytest.approx((3 * 3.0 + 1 * 15.0 + 1000 * 0.3) / 1e6)
    price = DEFAULT_PRICES.lookup(MODEL)
    assert price is not None
    written = price.cost(Usage(cache_creation_input_tokens=1_000_000))
    read_back = price.cost(Usage(cache_read_input_tokens=1_000_000))
    assert (written, read_back) == (pytest.approx(3.75), pytest.approx(0.3))


# -- the planner -----------------------------------------------------------------------------


@tool
def lookup(name: str) -> dict[str, str]:
    """Look a record up by its exact name."""
    return {"name": name}


@pytest.mark.anyio
async def test_the_planners_fixed_prefix_is_read_from_the_cache_on_the_next_plan(
    server: MessagesServer,
) -> None:
    registry = Registry([lookup])
    server.cache_min_tokens = 100
    plan = {"g": "look a up", "s": [{"i": 1, "t": "lookup", "a": {"name": "a"}, "d": []}]}
    server.push_json(plan)
    server.push_json(plan)
    async with AnthropicClient(api_key="k", base_url=server.url) as client:
        planner = Planner(client, MODEL, registry, clock=VirtualClock())
        first = await planner.plan("Look a up.")
        second = await planner.plan("Look b up.")
    # the fixed prefix: the plan schema as sent, then the system prompt
    sent = prepare_schema(plan_json_schema(registry), "anthropic").schema
    prefix = estimate_tokens(schema_text(sent) + system_prompt(registry))
    [write] = first.records
    [read] = second.records
    assert write.usage.cache_creation_input_tokens == prefix
    assert read.usage.cache_read_input_tokens == prefix
    assert read.usage.cache_creation_input_tokens == 0
    assert read.cost_usd < write.cost_usd


@pytest.mark.anyio
async def test_a_scripted_usage_is_reported_as_scripted(server: MessagesServer) -> None:
    server.push_text("ok")
    server.push_text("ok", usage={"input_tokens": 6000, "output_tokens": 300})
    async with AnthropicClient(api_key="k", base_url=server.url) as client:
        await client.complete(ask())
        scripted = await client.complete(ask())
    assert scripted.usage == Usage(input_tokens=6000, output_tokens=300)
    assert server.cache_reads == 1000  # the cache itself was read
