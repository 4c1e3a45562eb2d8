"""A run cancelled while the planner's call is in flight (on the local Messages API server)
ends ``interrupted``, never ``succeeded``: no plan arrived, nothing ran, and no answer was
made up."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.checks.builtins import BUILTIN_CHECKS
from plandag.models import AnthropicClient
from plandag.planner.agent import Agent, AgentResult
from plandag.scheduler import RunLimits
from plandag.testing import MessagesServer
from plandag.tools import tool
from plandag.tools.registry import Registry

MODEL = "claude-sonnet-4-6"
PLAN = {
    "g": "Score a",
    "s": [{"i": 1, "t": "lookup", "a": {"name": "a"}, "d": []}],
    "o": "<step_1_result>",
}
ran: list[str] = []


@tool
def lookup(name: str) -> dict[str, Any]:
    """Look a name up; returns its score."""
    ran.append(name)
    return {"name": name, "score": len(name)}


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    ran.clear()


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer(ttft=30.0) as running:  # the plan never arrives in the test's time
        yield running


async def cancelled_during_planning(server: MessagesServer, *, stream: bool) -> AgentResult:
    server.push_json(PLAN)
    client = AnthropicClient(api_key="test", base_url=server.url)
    agent = Agent(
        client,
        MODEL,
        Registry([lookup], BUILTIN_CHECKS),
        stream=stream,
        retry=RetryPolicy(retries=0),
        clock=VirtualClock(),
        limits=RunLimits(heartbeat_every=None),
    )
    results: list[AgentResult] = []
    try:
        with anyio.CancelScope() as scope:

            async def cancel_once_asked() -> None:
                for _ in range(400):  # bounded: 20 s at most
                    if server.message_requests:
                        scope.cancel()
                        return
                    await anyio.sleep(0.05)

            async with anyio.create_task_group() as group:
                group.start_soon(cancel_once_asked)
                results.append(await agent.run("Score a"))
    finally:
        with anyio.CancelScope(shield=True):
            await client.aclose()
    assert len(server.message_requests) == 1
    [result] = results
    return result


@pytest.mark.anyio
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_run_cancelled_during_planning_is_interrupted(
    server: MessagesServer, stream: bool
) -> None:
    result = await cancelled_during_planning(server, stream=stream)
    assert result.status == "interrupted"
    assert result.run.status == "interrupted"
    assert result.run.stop_reason == "interrupted"
    assert result.answer is None
    assert result.run.steps == {}
    assert ran == []
    assert result.to_json_dict()["status"] == "interrupted"
