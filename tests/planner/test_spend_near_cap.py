"""Spend near the cap: input tokens are reserved from the provider's token-counting endpoint
(a counting request is not an attempt and costs nothing), else from a conservative estimate
(bytes / 3); the planner's ``max_tokens`` is sized to plans, so a small cap does not refuse
the first planning call."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest

from plandag.brakes.budget import Budget
from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.checks.builtins import BUILTIN_CHECKS
from plandag.errors import TransientStepError
from plandag.models import (
    AnthropicClient,
    BudgetRefusedError,
    CallRecord,
    LLMRequest,
    LLMResponse,
    LLMStream,
    Usage,
    call_with_retries,
)
from plandag.planner.agent import Agent
from plandag.planner.planner import DEFAULT_PLAN_MAX_TOKENS
from plandag.scheduler import RunLimits
from plandag.testing import MessagesServer
from plandag.tools import tool
from plandag.tools.registry import Registry

PROMPT = "é" * 3000  # 3,000 characters, 6,000 UTF-8 bytes


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


def request(max_tokens: int = 10) -> LLMRequest:
    return LLMRequest(
        model="claude-haiku-4-5",
        messages=[{"role": "user", "content": PROMPT}],
        max_tokens=max_tokens,
    )


class Uncounted:
    """A client with no counting endpoint (as an OpenAI-compatible server)."""

    provider = "local"

    def __init__(self, *, fail_count: bool = False) -> None:
        self.sent: list[LLMRequest] = []
        if fail_count:
            self.count_tokens = self._broken_count

    async def _broken_count(self, request: LLMRequest) -> int:
        raise TransientStepError("count_tokens: 503")

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.sent.append(request)
        return LLMResponse("ok", "end_turn", Usage(input_tokens=750, output_tokens=1), "m")

    def stream(self, request: LLMRequest) -> AbstractAsyncContextManager[LLMStream]:
        raise NotImplementedError

    async def aclose(self) -> None:
        pass


@pytest.mark.anyio
async def test_input_tokens_are_reserved_from_the_counting_endpoint(
    server: MessagesServer,
) -> None:
    # The local server counts 3,000 characters at four a token: 750. The byte estimate would
    # say 2,000: a cap of 760 tokens holds the counted call, not the estimated one.
    server.push_text("ok")
    budget = Budget(max_cost_usd=None, max_tokens=760)
    records: list[CallRecord] = []
    async with AnthropicClient(api_key="test", base_url=server.url) as client:
        response = await call_with_retries(
            client, request(), RetryPolicy(retries=0), VirtualClock(), budget, records=records
        )
    assert response.text == "ok"
    assert [item.path for item in server.requests] == [
        "/v1/messages/count_tokens",
        "/v1/messages",
    ]
    count = server.requests[0].json
    assert "max_tokens" not in count
    assert count["messages"] == [{"role": "user", "content": PROMPT}]
    assert len(records) == 1  # the count is not an attempt
    assert records[0].attempt == 1
    assert budget.spent_tokens == 751  # what the message billed: 750 in, 1 out
    assert budget.spent_tokens <= 760


@pytest.mark.anyio
async def test_without_a_counting_endpoint_the_estimate_is_bytes_over_three() -> None:
    client = Uncounted()
    budget = Budget(max_cost_usd=None, max_tokens=760)
    with pytest.raises(BudgetRefusedError) as caught:
        await call_with_retries(client, request(), RetryPolicy(retries=0), VirtualClock(), budget)
    assert caught.value.estimated_tokens == 2010  # 6,000 bytes / 3 + 10 output
    assert client.sent == []
    roomy = Budget(max_cost_usd=None, max_tokens=2010)
    await call_with_retries(client, request(), RetryPolicy(retries=0), VirtualClock(), roomy)
    assert len(client.sent) == 1


@pytest.mark.anyio
async def test_a_failed_count_falls_back_to_the_estimate() -> None:
    client = Uncounted(fail_count=True)
    budget = Budget(max_cost_usd=None, max_tokens=760)
    with pytest.raises(BudgetRefusedError) as caught:
        await call_with_retries(client, request(), RetryPolicy(retries=0), VirtualClock(), budget)
    assert caught.value.estimated_tokens == 2010


@pytest.mark.anyio
async def test_one_call_cannot_take_spend_past_a_dollar_cap(server: MessagesServer) -> None:
    # claude-haiku-4-5: $1 in ($1.25 a cache write), $5 out per million. 750 counted input
    # tokens at the cache-write price + 1,000 output reserve $0.0059375; a cap of $0.005
    # refuses the call before it is sent.
    async with AnthropicClient(api_key="test", base_url=server.url) as client:
        with pytest.raises(BudgetRefusedError) as caught:
            await call_with_retries(
                client,
                request(max_tokens=1000),
                RetryPolicy(retries=0),
                VirtualClock(),
                Budget(max_cost_usd=0.005, max_tokens=None),
            )
    assert caught.value.estimated_usd == pytest.approx(0.0059375)
    assert server.message_requests == []


@tool
def look(name: str) -> str:
    """Read-only."""
    return name.upper()


async def plan_under_a_small_cap(server: MessagesServer, **options: Any) -> Any:
    async with AnthropicClient(api_key="test", base_url=server.url) as client:
        agent = Agent(
            client,
            "claude-sonnet-4-6",
            Registry([look], BUILTIN_CHECKS),
            retry=RetryPolicy(retries=0),
            clock=VirtualClock(),
            limits=RunLimits(max_cost_usd=0.10, heartbeat_every=None),
            **options,
        )
        return await agent.run("Look at a")


@pytest.mark.anyio
async def test_a_ten_cent_cap_does_not_refuse_the_first_planning_call(
    server: MessagesServer,
) -> None:
    assert DEFAULT_PLAN_MAX_TOKENS == 4096
    server.push_json(
        {"g": "look", "s": [{"i": 1, "t": "look", "a": {"name": "a"}}], "o": "<step_1_result>"}
    )
    result = await plan_under_a_small_cap(server)
    assert (result.status, result.answer) == ("succeeded", "A")
    [call] = result.llm_calls
    assert call.cost_usd < 0.10
    # the former default, 8,192 output tokens ($0.123 at $15 per million), is refused unsent
    refused = await plan_under_a_small_cap(server, plan_max_tokens=8192)
    assert refused.status == "budget_exceeded"
    assert refused.llm_calls == ()
    assert len(server.message_requests) == 1
