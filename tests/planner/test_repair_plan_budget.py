"""A stored plan run with repairs (``exec --planner``) is held to the limits relative to
its estimate, as any run: 2x the estimated cost, 3x the estimated time (virtual clock)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.compiler import CompiledPlan, compile_plan
from plandag.errors import PermanentStepError
from plandag.models import AnthropicClient
from plandag.planner.repair import PlanRepairer, run_with_repairs
from plandag.scheduler import RunLimits
from plandag.scheduler.estimate import estimate_plan
from plandag.testing import MessagesServer
from plandag.tools import ToolContext, tool
from plandag.tools.registry import Registry

CLOCK = VirtualClock()


@pytest.fixture(autouse=True)
def _fresh_clock() -> None:
    global CLOCK
    CLOCK = VirtualClock()


@tool(typical_seconds=2.0)
def slow(seconds: float = 0.0) -> str:
    """Takes ``seconds`` on the virtual clock; declares 2 s."""
    CLOCK.advance(seconds)
    return "done"


@tool(typical_seconds=0.5, cost_estimate_usd=0.01)
def paid(usd: float, ctx: ToolContext) -> str:
    """Costs ``usd`` (reported); estimated at $0.01."""
    ctx.report_cost(usd=usd)
    return "paid"


@tool(typical_seconds=1.0)
def legacy(name: str) -> str:
    """A service that knows no name; declares 1 s."""
    raise PermanentStepError(f"legacy service: unknown name {name}", reason="tool_error")


REGISTRY = Registry([slow, paid, legacy])


def compiled(steps: list[dict[str, Any]]) -> CompiledPlan:
    return compile_plan({"steps": steps}, REGISTRY)


def run(plan: CompiledPlan, limits: RunLimits | None = None, **options: Any) -> Any:
    async def main() -> Any:
        return await run_with_repairs(
            plan,
            REGISTRY,
            repairer=None,
            limits=limits or RunLimits(heartbeat_every=None),
            clock=CLOCK,
            **options,
        )

    return anyio.run(main)


def test_a_stored_plan_past_3x_its_estimated_time_escalates() -> None:
    plan = compiled(
        [
            {"id": 1, "tool": "slow", "args": {"seconds": 7.0}},
            {"id": 2, "tool": "slow", "args": {}, "depends_on": [1]},
        ]
    )
    repaired = run(plan)  # estimated 4 s: the limit is 12 s; 7 s fits
    assert repaired.status == "succeeded"
    plan = compiled(
        [
            {"id": 1, "tool": "slow", "args": {"seconds": 13.0}},
            {"id": 2, "tool": "slow", "args": {}, "depends_on": [1]},
        ]
    )
    repaired = run(plan)
    assert repaired.status == "escalated"
    assert repaired.run.escalation == "plan_budget"
    assert repaired.run.escalation_detail == (
        "elapsed time 13 s passed 3x the plan's estimated time 4 s (limit 12 s)"
    )
    assert (repaired.run.steps[2].status, repaired.run.steps[2].reason) == (
        "skipped",
        "plan_budget",
    )


def test_a_stored_plan_past_2x_its_estimated_cost_escalates() -> None:
    plan = compiled(
        [
            {"id": 1, "tool": "paid", "args": {"usd": 0.015}},
            {"id": 2, "tool": "paid", "args": {"usd": 0.03}, "depends_on": [1]},
            {"id": 3, "tool": "slow", "args": {}, "depends_on": [2]},
        ]
    )
    repaired = run(plan)  # estimated $0.02: the limit is $0.04; $0.045 passes it
    assert repaired.status == "escalated"
    assert repaired.run.escalation_detail == (
        "spend $0.0450 passed 2x the plan's estimated cost $0.0200 (limit $0.0400)"
    )
    assert repaired.run.steps[3].status == "skipped"


def test_factors_lifted_or_measured_durations_given() -> None:
    plan = compiled([{"id": 1, "tool": "slow", "args": {"seconds": 7.0}}])
    lifted = RunLimits(heartbeat_every=None, plan_cost_factor=None, plan_time_factor=None)
    assert run(plan, lifted).status == "succeeded"
    # the store measured 3 s for ``slow``: the limit becomes 9 s and 7 s fits
    assert run(plan, tool_durations={"slow": 3.0}).status == "succeeded"
    # an explicit estimate replaces the computed one (3x 1 s, raised to the 5 s floor)
    estimate = estimate_plan(plan, measured={"slow": 1.0})
    repaired = run(plan, plan_estimate=estimate)
    assert repaired.run.escalation_detail == (
        "elapsed time 7 s passed 3x the plan's estimated time 1 s (limit 5 s)"
    )


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[MessagesServer]:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    with MessagesServer() as running:
        yield running


def test_a_repair_projected_past_3x_the_time_is_not_run(server: MessagesServer) -> None:
    plan = compiled(
        [
            {"id": 1, "tool": "slow", "args": {"seconds": 8.0}},
            {"id": 2, "tool": "legacy", "args": {"name": "x"}, "depends_on": [1]},
        ]
    )
    # estimated 3 s: the limit is 9 s; 8 s are spent when step 2 fails, and the repair's
    # two slow steps (2 s each, one after the other) would take it to 12 s
    server.push_json(
        {
            "g": "repair",
            "s": [
                {"i": 3, "t": "slow", "a": {}, "d": []},
                {"i": 4, "t": "slow", "a": {}, "d": [3]},
            ],
            "o": "<step_4_result>",
        }
    )

    async def main() -> Any:
        client = AnthropicClient(api_key="test", base_url=server.url)
        repairer = PlanRepairer(
            client, "claude-sonnet-4-6", REGISTRY, retry=RetryPolicy(retries=0), clock=CLOCK
        )
        try:
            return await run_with_repairs(
                plan,
                REGISTRY,
                repairer=repairer,
                limits=RunLimits(heartbeat_every=None),
                retry=RetryPolicy(retries=0),
                clock=CLOCK,
            )
        finally:
            await client.aclose()

    repaired = anyio.run(main)
    assert len(server.message_requests) == 1
    assert repaired.status == "escalated"
    assert repaired.run.escalation == "plan_budget"
    assert sorted(repaired.run.steps) == [1, 2]  # the patch's steps were never added
    assert repaired.gave_up is None
    assert repaired.error is None
    assert repaired.run.escalation_detail is not None
    assert "projected" in repaired.run.escalation_detail
