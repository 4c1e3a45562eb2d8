"""The agent and the plan-relative budget: the estimate in its approval request and with
each plan version, a replan patch projected past 2x the estimated cost refused (escalated,
``plan_budget``), one within it run. Against the local Messages API server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from plandag.approval import ApprovalRequest, CallbackApprover, Decision
from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.checks.builtins import BUILTIN_CHECKS
from plandag.models import AnthropicClient
from plandag.planner.agent import Agent, AgentResult
from plandag.scheduler import RunLimits
from plandag.testing import MessagesServer
from plandag.tools import ToolContext, tool
from plandag.tools.registry import Registry

MODEL = "claude-sonnet-4-6"


@tool(typical_seconds=0.25, cost_estimate_usd=0.01)
def pay(name: str, ctx: ToolContext) -> str:
    """Pay for NAME: $0.01, typically 0.25 s."""
    ctx.report_cost(usd=0.01)
    return name


@tool(typical_seconds=0.25)
def broken(name: str) -> str:
    """A service that is always down."""
    raise ValueError(f"service down for {name}")


@tool(effects="write", typical_seconds=0.5)
def post(text: str) -> str:
    """Post TEXT (an effect)."""
    return text


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


async def run_agent(server: MessagesServer, **options: Any) -> AgentResult:
    client = AnthropicClient(api_key="test", base_url=server.url)
    agent = Agent(
        client,
        MODEL,
        Registry([pay, broken, post], BUILTIN_CHECKS),
        retry=RetryPolicy(retries=0),
        clock=VirtualClock(),  # model calls take 0 s on it
        # these tests are about cost: the steps run on the system clock while the model
        # calls take 0 s on the virtual one, so the time limit is lifted
        limits=RunLimits(heartbeat_every=None, plan_time_factor=None),
        **{"approve": "auto", **options},  # the registry has a tool that writes
    )
    try:
        return await agent.run("Pay for a and b")
    finally:
        await client.aclose()


def step(i: int, tool_name: str, args: dict[str, Any], d: list[int]) -> dict[str, Any]:
    return {"i": i, "t": tool_name, "a": args, "d": d}


PLAN = {
    "g": "Pay for a and b",
    "s": [step(1, "pay", {"name": "a"}, []), step(2, "broken", {"name": "b"}, [])],
    "o": {"json": '{"a":"<step_1_result>","b":"<step_2_result>"}'},
}


@pytest.mark.anyio
async def test_a_patch_projected_past_2x_the_estimated_cost_is_not_run(
    server: MessagesServer,
) -> None:
    server.push_json(PLAN)  # estimated $0.01 (pay) + $0 (broken): the limit is $0.02
    server.push_json(
        {
            "s": [step(3, "pay", {"name": "b"}, []), step(4, "pay", {"name": "c"}, [3])],
            "o": {"json": '{"a":"<step_1_result>","b":"<step_4_result>"}'},
        }
    )
    result = await run_agent(server)
    assert result.status == "escalated"
    assert result.run.escalation == "plan_budget"
    assert result.run.escalation_detail == (
        "replan patch (steps 3, 4) not run: projected spend $0.0300 passed 2x the plan's "
        "estimated cost $0.0100 (limit $0.0200)"
    )
    assert sorted(result.run.steps) == [1, 2]
    assert result.answer is None
    [estimate] = result.plan_estimates
    assert estimate is not None
    assert (estimate.cost_usd, estimate.seconds) == (0.01, 0.25)
    assert estimate.describe() == (
        "estimated cost $0.0100, time 0.25 s (critical path 1 -> planner)"
    )


@pytest.mark.anyio
async def test_a_patch_within_2x_the_estimated_cost_runs(server: MessagesServer) -> None:
    server.push_json(PLAN)
    server.push_json(
        {
            "s": [step(3, "pay", {"name": "b"}, [])],
            "o": {"json": '{"a":"<step_1_result>","b":"<step_3_result>"}'},
        }
    )
    result = await run_agent(server)
    assert result.status == "succeeded"
    assert result.answer == {"a": "a", "b": "b"}
    assert result.run.escalation is None  # steps spent $0.02, at the limit, not past it
    assert len(result.plan_estimates) == 2  # the plan, then the plan after the replan


@pytest.mark.anyio
async def test_the_approval_request_shows_the_estimate(server: MessagesServer) -> None:
    server.push_json(
        {
            "g": "Pay for a and post it",
            "s": [
                step(1, "pay", {"name": "a"}, []),
                step(2, "post", {"text": "<step_1_result>"}, [1]),
            ],
        }
    )
    server.push_json({"action": "finish", "text": "posted"})
    seen: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> Decision:
        seen.append(request)
        return Decision(True, request.plan_hash, who="ana")

    await run_agent(server, approve="ask", approver=CallbackApprover(approve))
    [request] = seen
    assert request.estimated_cost_usd == 0.01
    assert (
        "Estimate: estimated cost $0.0100, time 0.75 s (critical path 1 -> 2 -> planner -> joiner)"
    ) in request.summary_lines()
