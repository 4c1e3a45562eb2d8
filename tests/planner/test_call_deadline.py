"""Every model call gets the run's deadline: planner, streaming planner, replanner, joiner.

The local Messages API server answers 429 with ``Retry-After: 120`` while the run has 2 s
left: the call fails at once (no sleep on the injected clock, one request sent) and the
run ends ``timed_out`` with reason ``deadline``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.checks.builtins import BUILTIN_CHECKS
from plandag.errors import PermanentStepError, TransientStepError
from plandag.models import (
    AnthropicClient,
    DeadlineReachedError,
    LLMRequest,
    call_with_retries,
)
from plandag.planner.agent import Agent, AgentResult
from plandag.scheduler import RunLimits
from plandag.testing import MessagesServer
from plandag.tools import tool
from plandag.tools.registry import Registry

MODEL = "claude-sonnet-4-6"
RETRY = RetryPolicy(retries=3, base_delay=0.5, jitter=False)


@tool
def score(name: str) -> int:
    """The length of a name."""
    return len(name)


@tool
def broken(name: str) -> int:
    """Always fails."""
    raise PermanentStepError(f"broken on {name}")


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


def rate_limited(server: MessagesServer) -> None:
    server.push_error(429, "rate_limit_error", retry_after=120)


async def run_agent(
    server: MessagesServer, clock: VirtualClock, *, stream: bool = False
) -> AgentResult:
    async with AnthropicClient(api_key="test", base_url=server.url) as client:
        agent = Agent(
            client,
            MODEL,
            Registry([score, broken], BUILTIN_CHECKS),
            stream=stream,
            retry=RETRY,
            clock=clock,
            limits=RunLimits(max_seconds=2, heartbeat_every=None),
        )
        return await agent.run("Score a")


def assert_failed_at_once(result: AgentResult, server: MessagesServer, clock: VirtualClock) -> None:
    assert clock.sleeps == []  # the 120 s Retry-After was never slept
    assert (result.status, result.run.status, result.run.stop_reason) == (
        "timed_out",
        "timed_out",
        "deadline",
    )
    assert result.llm_calls[-1].error_reason == "http_429"
    assert result.llm_calls[-1].retry_delay_s is None  # not retried


@pytest.mark.anyio
@pytest.mark.parametrize("stream", [False, True], ids=["planner", "streaming planner"])
async def test_a_planning_call_past_the_deadline_fails_at_once(
    server: MessagesServer, stream: bool
) -> None:
    rate_limited(server)
    clock = VirtualClock()
    result = await run_agent(server, clock, stream=stream)
    assert_failed_at_once(result, server, clock)
    assert len(server.message_requests) == 1
    assert result.error is not None
    assert result.error.type == "DeadlineReachedError"
    assert "not retried: the next attempt would start after 120 s, past the run's deadline" in (
        result.error.message
    )


@pytest.mark.anyio
async def test_a_replanning_call_past_the_deadline_fails_at_once(server: MessagesServer) -> None:
    server.push_json(
        {
            "g": "score a",
            "s": [{"i": 1, "t": "broken", "a": {"name": "a"}, "d": []}],
            "o": "<step_1_result>",
        }
    )
    rate_limited(server)
    clock = VirtualClock()
    result = await run_agent(server, clock)
    assert_failed_at_once(result, server, clock)
    assert len(server.message_requests) == 2  # the plan, then one replanning request
    assert (result.run.steps[1].status, result.run.steps[1].reason) == ("failed", "tool_error")


@pytest.mark.anyio
async def test_a_joiner_call_past_the_deadline_fails_at_once(server: MessagesServer) -> None:
    # no output: the joiner's model call decides
    server.push_json({"g": "score a", "s": [{"i": 1, "t": "score", "a": {"name": "a"}, "d": []}]})
    rate_limited(server)
    clock = VirtualClock()
    result = await run_agent(server, clock)
    assert_failed_at_once(result, server, clock)
    assert len(server.message_requests) == 2
    assert (result.run.steps[1].status, result.run.steps[1].result) == ("succeeded", 1)
    assert result.answer is None


@pytest.mark.anyio
async def test_call_with_retries_never_sleeps_past_the_deadline(server: MessagesServer) -> None:
    request = LLMRequest(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=10)
    clock = VirtualClock()
    async with AnthropicClient(api_key="test", base_url=server.url) as client:
        rate_limited(server)
        with pytest.raises(DeadlineReachedError) as caught:
            await call_with_retries(client, request, RETRY, clock, deadline=2.0)
        assert isinstance(caught.value.__cause__, TransientStepError)
        assert caught.value.reason == "deadline"
        assert isinstance(caught.value, TimeoutError)
        # a deadline already passed: nothing is sent
        clock.advance(5.0)
        with pytest.raises(DeadlineReachedError, match="the run's deadline has passed"):
            await call_with_retries(client, request, RETRY, clock, deadline=2.0)
        # a Retry-After shorter than the time left is waited, on the injected clock
        server.push_error(429, "rate_limit_error", retry_after=1)
        server.push_text("ok")
        response = await call_with_retries(client, request, RETRY, clock, deadline=10.0)
    assert response.text == "ok"
    assert clock.sleeps == [1.0]
    assert len(server.message_requests) == 3
