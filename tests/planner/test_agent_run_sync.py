"""``Agent.run_sync``: :meth:`Agent.run` for code without an event loop, against the local
Messages API server; refused inside a running loop."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from typing import Any

import pytest

from plandag.checks.builtins import BUILTIN_CHECKS
from plandag.models import AnthropicClient
from plandag.planner.agent import Agent, AgentResult
from plandag.scheduler import RunLimits
from plandag.testing import MessagesServer
from plandag.tools import tool
from plandag.tools.registry import Registry

MODEL = "claude-sonnet-4-6"


@tool
def lookup(name: str) -> dict[str, Any]:
    """Look a name up; returns its score."""
    return {"name": name, "score": len(name)}


@tool
def total(a: float, b: float) -> float:
    """Add two scores."""
    return a + b


def _step(i: int, tool_name: str, args: dict[str, Any], d: list[int]) -> dict[str, Any]:
    return {"i": i, "t": tool_name, "a": args, "d": d}


PLAN = {
    "g": "Score a and bb",
    "s": [
        _step(1, "lookup", {"name": "a"}, []),
        _step(2, "lookup", {"name": "bb"}, []),
        _step(3, "total", {"a": "<step_1_result.score>", "b": "<step_2_result.score>"}, [1, 2]),
    ],
    "o": {"json": '{"sum":"<step_3_result>"}'},
}


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


def _agent(server: MessagesServer) -> Agent:
    client = AnthropicClient(api_key="test", base_url=server.url)
    return Agent(
        client,
        MODEL,
        Registry([lookup, total], BUILTIN_CHECKS),
        limits=RunLimits(heartbeat_every=None),
    )


def test_run_sync_runs_the_agent_without_an_event_loop(server: MessagesServer) -> None:
    server.push_json(PLAN, usage={"input_tokens": 900, "output_tokens": 60})
    with _agent(server) as agent:
        result = agent.run_sync("Score a and bb")
    assert isinstance(result, AgentResult)
    assert result.status == "succeeded"
    assert result.answer == {"sum": 3.0}
    assert len(server.message_requests) == 1


def test_run_sync_takes_the_arguments_of_run(server: MessagesServer) -> None:
    server.push_json(PLAN)
    with _agent(server) as agent:
        result = agent.run_sync("Score a and bb", "trusted context", None, run_id="r-sync")
        with pytest.raises(ValueError, match="task_type needs a plan library"):
            agent.run_sync("Score a and bb", task_type="scores")
    assert result.run.run_id == "r-sync"
    assert "trusted context" in str(server.message_requests[0].body)


def test_run_sync_twice_on_one_agent_reuses_its_client(server: MessagesServer) -> None:
    agent = _agent(server)
    server.push_json(PLAN)
    server.push_json(PLAN)
    server.push_json(PLAN)
    first = agent.run_sync("Score a and bb")
    second = agent.run_sync("Score a and bb")
    assert (first.status, second.status) == ("succeeded", "succeeded")
    assert first.run.run_id != second.run.run_id
    assert len(server.message_requests) == 2
    agent.close()
    assert isinstance(agent.client, AnthropicClient)
    assert agent.client.sdk.is_closed()
    agent.close()  # twice is harmless


def test_run_sync_inside_a_running_loop_is_refused(server: MessagesServer) -> None:
    agent = _agent(server)

    async def inside() -> None:
        agent.run_sync("Score a and bb")

    with pytest.raises(RuntimeError, match=r"await agent\.run\(\.\.\.\)"):
        asyncio.run(inside())
    assert server.message_requests == []  # nothing was sent
    agent.close()


def test_an_agent_dropped_without_close_closes_its_loop(server: MessagesServer) -> None:
    agent = _agent(server)
    server.push_json(PLAN)
    assert agent.run_sync("Score a and bb").status == "succeeded"
    client = agent.client
    assert isinstance(client, AnthropicClient)
    assert not client.sdk.is_closed()
    del agent
    gc.collect()
    assert client.sdk.is_closed()  # its connections closed on their loop, no warning


def test_close_without_run_sync_does_nothing(server: MessagesServer) -> None:
    agent = _agent(server)
    agent.close()
    assert isinstance(agent.client, AnthropicClient)
    assert not agent.client.sdk.is_closed()
    asyncio.run(agent.client.aclose())
