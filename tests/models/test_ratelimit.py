"""Requests and tokens per minute: the token buckets on a virtual clock, the process's
limiter shared by planner calls and llm steps, the local servers' own rpm limit answering
429 with Retry-After, and waits for a slot that the stall detector does not count."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import anyio.lowlevel
import pytest

from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.compiler import compile_plan
from plandag.dag.plan import Plan
from plandag.executors import EXECUTOR_TOOLS, ModelAccess
from plandag.models import LLMRequest, OpenAICompatibleClient
from plandag.models.calls import call_with_retries
from plandag.models.ratelimit import (
    RateLimit,
    RateLimiter,
    configure_rate_limit,
    limiter_for,
)
from plandag.scheduler import events
from plandag.scheduler.entry import run_plan
from plandag.scheduler.runner import RunLimits
from plandag.testing import ChatCompletionsServer, MessagesServer
from plandag.tools.registry import Registry


@pytest.fixture(autouse=True)
def no_limit() -> Iterator[None]:
    configure_rate_limit(None)
    yield
    configure_rate_limit(None)


# -- the limiter on a virtual clock -------------------------------------------------------


@pytest.mark.anyio
async def test_a_minutes_requests_go_at_once_then_one_every_60_over_rpm_seconds() -> None:
    clock = VirtualClock()
    limiter = RateLimiter(RateLimit(rpm=6), clock=clock)
    starts = []
    for _ in range(9):
        await limiter.acquire(0)
        starts.append(round(clock.monotonic(), 6))
    assert starts == [0, 0, 0, 0, 0, 0, 10, 20, 30]
    assert clock.sleeps == [10.0, 10.0, 10.0]
    assert limiter.waits == 3
    assert limiter.waited_s == pytest.approx(30.0)


@pytest.mark.anyio
async def test_tokens_per_minute_wait_for_the_tokens_and_give_back_what_was_not_used() -> None:
    clock = VirtualClock()
    limiter = RateLimiter(RateLimit(tpm=1000), clock=clock)
    first = await limiter.acquire(800)
    first.settle(200)  # 600 tokens reserved and not used go back
    await limiter.acquire(700)  # 1000 - 200 = 800 left: no wait
    assert clock.sleeps == []
    await limiter.acquire(400)  # 100 left: 300 more at 1000/60 per second = 18 s
    assert clock.sleeps == [pytest.approx(18.0)]


@pytest.mark.anyio
async def test_tokens_used_beyond_the_estimate_are_owed() -> None:
    clock = VirtualClock()
    limiter = RateLimiter(RateLimit(tpm=600), clock=clock)
    permit = await limiter.acquire(100)
    permit.settle(700)  # 600 more than taken: the bucket is at -100
    permit.settle(0)  # settled once only
    await limiter.acquire(50)  # needs 150 at 10 per second
    assert clock.sleeps == [pytest.approx(15.0)]


@pytest.mark.anyio
async def test_a_call_larger_than_a_minutes_tokens_waits_for_a_full_bucket_only() -> None:
    clock = VirtualClock()
    limiter = RateLimiter(RateLimit(tpm=600), clock=clock)
    await limiter.acquire(600)
    await limiter.acquire(5000)  # waits 60 s for a full bucket, then owes the rest
    assert clock.sleeps == [pytest.approx(60.0)]


@pytest.mark.anyio
async def test_waiters_are_served_in_order() -> None:
    limiter = RateLimiter(RateLimit(rpm=60), period_s=0.5)  # one request every 1/120 s
    order: list[int] = []

    async def call(number: int) -> None:
        await limiter.acquire(0)
        order.append(number)

    with anyio.fail_after(10):
        for _ in range(60):
            await limiter.acquire(0)  # empty the bucket
        async with anyio.create_task_group() as group:
            for number in range(5):
                group.start_soon(call, number)
                await anyio.lowlevel.checkpoint()
    assert order == [0, 1, 2, 3, 4]


def test_the_limiter_runs_on_trio_as_on_asyncio() -> None:
    async def main() -> tuple[list[float], list[int]]:
        clock = VirtualClock()
        limiter = RateLimiter(RateLimit(rpm=6), clock=clock)
        starts = []
        for _ in range(8):
            await limiter.acquire(0)
            starts.append(round(clock.monotonic(), 6))
        shared = RateLimiter(RateLimit(rpm=60), period_s=0.5)
        order: list[int] = []

        async def call(number: int) -> None:
            await shared.acquire(0)
            order.append(number)

        with anyio.fail_after(10):
            for _ in range(60):
                await shared.acquire(0)
            async with anyio.create_task_group() as group:
                for number in range(3):
                    group.start_soon(call, number)
                    await anyio.lowlevel.checkpoint()
        return starts, order

    starts, order = anyio.run(main, backend="trio")
    assert starts == [0, 0, 0, 0, 0, 0, 10, 20]
    assert order == [0, 1, 2]


def test_a_limit_splits_evenly_and_refuses_nonsense() -> None:
    assert RateLimit(rpm=50, tpm=40_000).split(4) == RateLimit(rpm=12.5, tpm=10_000)
    assert RateLimit(rpm=50, tpm=40_000).describe() == "50 rpm, 40,000 tpm"
    assert RateLimit().describe() == "none"
    with pytest.raises(ValueError, match="rpm must be a finite number > 0"):
        RateLimit(rpm=0)
    with pytest.raises(ValueError, match="parts must be >= 1"):
        RateLimit(rpm=1).split(0)


def test_one_limiter_per_provider_for_the_process_and_none_by_default() -> None:
    assert limiter_for("openai") is None
    configure_rate_limit(RateLimit(rpm=10))
    openai = limiter_for("openai")
    assert openai is not None
    assert limiter_for("openai") is openai
    assert limiter_for("anthropic") not in (None, openai)
    configure_rate_limit(None)
    assert limiter_for("openai") is None


# -- the local servers' limit --------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["anthropic", "openai"])
async def test_the_local_servers_answer_429_with_retry_after_past_their_rpm(kind: str) -> None:
    import httpx

    server: MessagesServer = (
        ChatCompletionsServer(rpm=2, rate_period_s=60.0)
        if kind == "openai"
        else MessagesServer(rpm=2, rate_period_s=60.0)
    )
    path = "/v1/chat/completions" if kind == "openai" else "/v1/messages"
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    with server:
        for _ in range(3):
            server.push_text("ok")
        async with httpx.AsyncClient(base_url=server.url, trust_env=False) as http:
            answers = [(await http.post(path, json=body)) for _ in range(3)]
        assert [answer.status_code for answer in answers] == [200, 200, 429]
        assert answers[2].headers["retry-after"] == "30"
        assert 29_000 < int(answers[2].headers["retry-after-ms"]) <= 30_000
        assert server.rate_limited == 1
        assert len(server.script) == 1  # the refused request used no scripted reply


# -- shared by planner calls and llm steps --------------------------------------------------


def llm_plan(steps: int) -> Plan:
    return Plan.model_validate(
        {
            "goal": "ask",
            "steps": [
                {"id": number, "tool": "llm", "args": {"prompt": f"Say ok {number}."}}
                for number in range(1, steps + 1)
            ],
        }
    )


SERVER_SLACK = 1.1
"""The servers' limit over plandag's in these tests: a request reaches the server a little
after plandag let it go, and that delay varies from one request to the next, so a server
whose bucket is exactly as full as plandag's can be a fraction of a request short."""


async def run_llm_steps(server: ChatCompletionsServer, steps: int, retries: int = 3) -> str:
    for _ in range(steps):
        server.push_text("ok")
    async with OpenAICompatibleClient(server.url + "/v1", api_key="k") as client:
        result = await run_plan(
            compile_plan(llm_plan(steps), Registry(EXECUTOR_TOOLS)),
            models=ModelAccess(client, "local-model"),
            limits=RunLimits(heartbeat_every=None, max_cost_usd=1.0),
            retry=RetryPolicy(retries=retries, base_delay=0.01, max_delay=2.0, jitter=False),
        )
    return str(result.status)


@pytest.mark.anyio
async def test_llm_steps_meet_a_servers_limit_without_429_under_the_same_limit() -> None:
    rpm = 4 * SERVER_SLACK
    with ChatCompletionsServer(rpm=rpm, rate_period_s=1.0) as server, anyio.fail_after(30):
        await run_llm_steps(server, 8)  # may fail: its retries meet 429 again
        without = server.rate_limited
    configure_rate_limit(RateLimit(rpm=4), period_s=1.0)
    with ChatCompletionsServer(rpm=rpm, rate_period_s=1.0) as server, anyio.fail_after(30):
        assert await run_llm_steps(server, 8, retries=0) == "succeeded"
        with_limit = server.rate_limited
    assert without >= 3  # 8 at once against 4 a second: the last ones meet 429
    assert with_limit == 0
    limiter = limiter_for("openai")
    assert limiter is not None
    assert limiter.waits >= 3


@pytest.mark.anyio
async def test_planner_calls_share_the_limit_with_the_steps() -> None:
    configure_rate_limit(RateLimit(rpm=2), period_s=1.0)
    request = LLMRequest(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=5)
    with (
        ChatCompletionsServer(rpm=2 * SERVER_SLACK, rate_period_s=1.0) as server,
        anyio.fail_after(30),
    ):
        for _ in range(4):
            server.push_text("ok")
        async with OpenAICompatibleClient(server.url + "/v1", api_key="k") as client:
            for _ in range(2):
                await call_with_retries(client, request, RetryPolicy(retries=0), VirtualClock())
        assert await run_llm_steps(server, 2, retries=0) == "succeeded"
        assert server.rate_limited == 0
    limiter = limiter_for("openai")
    assert limiter is not None
    assert limiter.waits >= 1


# -- a wait for a slot is not a stall --------------------------------------------------------


class Events:
    def __init__(self) -> None:
        self.stalls: list[events.Stall] = []

    def __call__(self, event: events.Event) -> None:
        if isinstance(event, events.Stall):
            self.stalls.append(event)


@pytest.mark.anyio
async def test_waiting_for_a_slot_is_not_a_stall() -> None:
    seen = Events()
    configure_rate_limit(RateLimit(rpm=1), period_s=1.5)  # one call every 1.5 s
    with ChatCompletionsServer() as server, anyio.fail_after(30):
        for _ in range(3):
            server.push_text("ok")
        async with OpenAICompatibleClient(server.url + "/v1", api_key="k") as client:
            result = await run_plan(
                compile_plan(llm_plan(3), Registry(EXECUTOR_TOOLS)),
                models=ModelAccess(client, "local-model"),
                observers=[seen],
                limits=RunLimits(heartbeat_every=None, stall_after=1.0, stop_on_stall=True),
            )
    assert result.status == "succeeded"  # 3 s of waits for slots, a stall after 1 s
    assert seen.stalls == []


@pytest.mark.anyio
async def test_waiting_behind_another_runs_call_for_a_slot_is_not_a_stall() -> None:
    """A call queued behind a call of another run (or of a planner) that waits for its own
    slot is waiting for a slot too, from the moment it queues."""
    seen = Events()
    configure_rate_limit(RateLimit(rpm=1), period_s=3.0)  # one call every 3 s
    limiter = limiter_for("openai")
    assert limiter is not None
    await limiter.acquire(0)  # the bucket is empty: the next call waits 3 s
    with ChatCompletionsServer() as server, anyio.fail_after(30):
        server.push_text("ok")
        async with (
            OpenAICompatibleClient(server.url + "/v1", api_key="k") as client,
            anyio.create_task_group() as group,
        ):
            group.start_soon(limiter.acquire, 0)  # someone else's call: first in the queue
            await anyio.sleep(0.1)
            result = await run_plan(
                compile_plan(llm_plan(1), Registry(EXECUTOR_TOOLS)),
                models=ModelAccess(client, "local-model"),
                observers=[seen],
                limits=RunLimits(heartbeat_every=None, stall_after=1.0, stop_on_stall=True),
            )
    assert result.status == "succeeded"  # ~3 s queued behind the other call, then ~3 s own wait
    assert seen.stalls == []
    assert limiter.waits == 2


@pytest.mark.anyio
async def test_waiting_for_slots_does_not_count_against_the_plan_relative_time_limit() -> None:
    """Three llm steps held to a tenth of their estimated time: the plan-relative limit is
    its floor of 5 s; 7 s of waits for slots on top of the calls do not stop the run."""
    configure_rate_limit(RateLimit(rpm=1), period_s=3.5)  # one call every 3.5 s
    with ChatCompletionsServer() as server, anyio.fail_after(40):
        for _ in range(3):
            server.push_text("ok")
        async with OpenAICompatibleClient(server.url + "/v1", api_key="k") as client:
            result = await run_plan(
                compile_plan(llm_plan(3), Registry(EXECUTOR_TOOLS)),
                models=ModelAccess(client, "local-model"),
                limits=RunLimits(heartbeat_every=None, plan_time_factor=0.1),
            )
    assert result.status == "succeeded", result.escalation
    assert [record.status for record in result.steps.values()] == ["succeeded"] * 3
