"""``Agent(on_plan_version=...)`` hands over each plan version as soon as it compiles, before
any of its steps starts (a run store keeps it there, so that a run whose process dies can be
resumed): the first plan, a streamed plan as it grows, and every replan."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.checks.builtins import BUILTIN_CHECKS
from plandag.dag.plan import Plan
from plandag.models import AnthropicClient
from plandag.planner.agent import Agent
from plandag.scheduler import RunLimits, events
from plandag.testing import MessagesServer
from plandag.tools import tool
from plandag.tools.registry import Registry

MODEL = "claude-sonnet-4-6"


@tool
def lookup(name: str) -> dict[str, Any]:
    """Look a name up; returns its score."""
    return {"name": name, "score": len(name)}


@tool
def broken(name: str) -> dict[str, Any]:
    """A service that is down."""
    raise ValueError(f"service down for {name}")


def step(i: int, tool_name: str, args: dict[str, Any], d: list[int]) -> dict[str, Any]:
    return {"i": i, "t": tool_name, "a": args, "d": d}


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


async def run(server: MessagesServer, *, stream: bool) -> list[tuple[str, Any]]:
    """Run the agent; every version handed over and every step start, in order."""
    seen: list[tuple[str, Any]] = []

    def observe(event: events.Event) -> None:
        if isinstance(event, events.StepStarted) and event.attempt == 1:
            seen.append(("started", event.step_id))

    def keep(number: int, plan: Plan, source: str) -> None:
        seen.append(("version", (number, source, tuple(item.id for item in plan.steps))))

    client = AnthropicClient(api_key="test", base_url=server.url)
    agent = Agent(
        client,
        MODEL,
        Registry([lookup, broken], BUILTIN_CHECKS),
        stream=stream,
        retry=RetryPolicy(retries=0),
        clock=VirtualClock(),
        limits=RunLimits(heartbeat_every=None),
        observers=[observe],
        on_plan_version=keep,
    )
    try:
        result = await agent.run("Score a and bb")
    finally:
        await client.aclose()
    assert result.status == "succeeded"
    return seen


def first_start_after_version(seen: list[tuple[str, Any]], step_ids: set[int]) -> None:
    """Every step in ``step_ids`` started after a version holding it was handed over."""
    held: set[int] = set()
    for kind, value in seen:
        if kind == "version":
            held.update(value[2])
        elif value in step_ids:
            assert value in held, (value, seen)


@pytest.mark.anyio
async def test_each_version_is_handed_over_before_its_steps_start(
    server: MessagesServer,
) -> None:
    server.push_json(
        {
            "g": "Score a and bb",
            "s": [step(1, "lookup", {"name": "a"}, []), step(2, "broken", {"name": "bb"}, [])],
            "o": {"json": '{"a":"<step_1_result.score>","b":"<step_2_result.score>"}'},
        }
    )
    server.push_json(
        {
            "g": "Score a and bb",
            "s": [step(3, "lookup", {"name": "bb"}, [])],
            "o": {"json": '{"a":"<step_1_result.score>","b":"<step_3_result.score>"}'},
        }
    )
    seen = await run(server, stream=False)
    versions = [value for kind, value in seen if kind == "version"]
    assert versions == [(1, "planner", (1, 2)), (2, "replan", (1, 2, 3))]
    first_start_after_version(seen, {1, 2, 3})


@pytest.mark.anyio
async def test_a_streamed_plan_is_handed_over_as_it_grows(server: MessagesServer) -> None:
    server.push_json(
        {
            "g": "Score a and bb",
            "s": [step(1, "lookup", {"name": "a"}, []), step(2, "lookup", {"name": "bb"}, [])],
            "o": {"json": '{"a":"<step_1_result.score>","b":"<step_2_result.score>"}'},
        }
    )
    seen = await run(server, stream=True)
    versions = [value for kind, value in seen if kind == "version"]
    assert versions[-1] == (1, "planner", (1, 2))
    assert {number for number, _, _ in versions} == {1}
    first_start_after_version(seen, {1, 2})
