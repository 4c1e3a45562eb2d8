"""The cost brake: reservations before each attempt, settlement after."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from plandag.brakes.budget import Budget, Reservation
from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.compiler import CompiledPlan, compile_plan
from plandag.scheduler import RunLimits, run_plan_sync
from plandag.tools.base import Tool, ToolContext, tool
from plandag.tools.registry import Registry


def compiled(steps: list[dict[str, Any]], *tools: Tool) -> CompiledPlan:
    return compile_plan({"steps": steps}, Registry(list(tools)))


# -- the budget alone ------------------------------------------------------------------------


def test_reservations_count_against_the_cap() -> None:
    budget = Budget(max_cost_usd=1.0, max_tokens=None)
    first = budget.reserve(0.6, 0)
    assert first == Reservation(600_000_000, 0)
    assert budget.reserve(0.6, 0) is None
    assert budget.refusal(0.6, 0) == (
        "not started: its estimated cost of $0.6 would take the run past its cost cap of $1 "
        "(spent $0, held by running steps $0.6)"
    )
    budget.settle(first, 0.25, 0)
    assert (budget.spent_usd, budget.reserved_usd) == (0.25, 0.0)
    budget.settle(first, 0.25, 0)  # twice: no effect
    assert budget.spent_usd == 0.25
    assert budget.reserve(0.75, 0) is not None
    assert budget.reserve(0.0, 0) is not None  # nothing more to spend, but nothing asked


def test_cents_add_up_exactly() -> None:
    budget = Budget(max_cost_usd=0.3, max_tokens=None)
    assert budget.reserve(0.1, 0) is not None
    assert budget.reserve(0.2, 0) is not None  # 0.1 + 0.2 > 0.3 in floats, not here
    assert budget.reserve(0.000000001, 0) is None


def test_token_cap() -> None:
    budget = Budget(max_cost_usd=None, max_tokens=1000)
    held = budget.reserve(0.0, 800)
    assert held is not None
    assert budget.reserve(5.0, 300) is None
    assert budget.refusal(5.0, 300) == (
        "not started: its estimated 300 tokens would take the run past its cap of 1000 "
        "tokens (spent 0, held by running steps 800)"
    )
    budget.settle(held, 0.0, 650)
    assert budget.reserve(0.0, 350) is not None
    assert budget.spent_tokens == 650


@pytest.mark.parametrize(("usd", "tokens"), [(-1.0, None), (float("nan"), None), (None, -1)])
def test_bad_caps(usd: float | None, tokens: int | None) -> None:
    with pytest.raises(ValueError, match="must be"):
        Budget(usd, tokens)


# -- in a run --------------------------------------------------------------------------------


def test_two_parallel_steps_that_would_overshoot_the_cap_only_one_starts() -> None:
    calls: list[str] = []

    @tool(cost_estimate_usd=0.6)
    async def summarise(text: str, ctx: ToolContext) -> str:
        calls.append(text)
        await anyio.sleep(0.01)
        ctx.report_cost(usd=0.55, tokens=1200)
        return text.upper()

    @tool
    def publish(text: str) -> str:
        return text

    plan = compiled(
        [
            {"id": 1, "tool": "summarise", "args": {"text": "a"}},
            {"id": 2, "tool": "summarise", "args": {"text": "b"}},
            {"id": 3, "tool": "publish", "args": {"text": "<step_2_result>"}},
            # as far from the plan's end as step 2: the two start in plan order
            {"id": 4, "tool": "publish", "args": {"text": "<step_1_result>"}},
        ],
        summarise,
        publish,
    )
    result = run_plan_sync(plan, limits=RunLimits(max_cost_usd=1.0))
    first, second, third = result.steps[1], result.steps[2], result.steps[3]
    assert calls == ["a"]
    assert (result.steps[4].status, result.steps[4].result) == ("succeeded", "A")
    assert result.status == "budget_exceeded"
    assert result.stop_reason == "budget"
    assert (first.status, first.result) == ("succeeded", "A")
    assert (second.status, second.reason, second.attempts) == ("skipped", "budget", 0)
    assert second.detail == (
        "not started: its estimated cost of $0.6 would take the run past its cost cap of $1 "
        "(spent $0, held by running steps $0.6)"
    )
    assert (third.status, third.reason) == ("skipped", "budget")
    assert third.detail == "upstream 2 was not started: the cost cap left no room"
    assert (result.spent_usd, result.spent_tokens) == (0.55, 1200)
    assert first.attempt_log[0].cost_usd == 0.55
    data = result.to_json_dict()
    assert (data["spent_usd"], data["spent_tokens"], data["stop_reason"]) == (0.55, 1200, "budget")


def test_settled_cost_frees_room_for_later_steps() -> None:
    @tool(cost_estimate_usd=0.5)
    def cheap_in_practice(n: int, ctx: ToolContext) -> int:
        ctx.report_cost(usd=0.2)
        return n

    plan = compiled(
        [
            {"id": 1, "tool": "cheap_in_practice", "args": {"n": 1}},
            {"id": 2, "tool": "cheap_in_practice", "args": {"n": 2}, "depends_on": [1]},
            {"id": 3, "tool": "cheap_in_practice", "args": {"n": 3}, "depends_on": [2]},
        ],
        cheap_in_practice,
    )
    result = run_plan_sync(plan, limits=RunLimits(max_cost_usd=0.8))
    # 0.2 + 0.5 held fits 0.8; then 0.4 + 0.5 does not.
    assert [result.steps[i].status for i in (1, 2, 3)] == ["succeeded", "succeeded", "skipped"]
    assert result.steps[3].reason == "budget"
    assert result.spent_usd == 0.4


def test_a_tool_that_reports_nothing_is_charged_its_estimate() -> None:
    @tool(cost_estimate_usd=0.25, tokens_estimate=500)
    def silent(n: int) -> int:
        return n

    plan = compiled([{"id": i, "tool": "silent", "args": {"n": i}} for i in (1, 2)], silent)
    result = run_plan_sync(plan, limits=RunLimits(max_tokens=1000))
    assert result.status == "succeeded"
    assert (result.spent_usd, result.spent_tokens) == (0.5, 1000)
    # without any cap, spend is still counted
    assert run_plan_sync(plan).spent_usd == 0.5


def test_a_retry_the_budget_cannot_cover_is_not_made() -> None:
    @tool(cost_estimate_usd=0.1)
    def overloaded(n: int) -> int:
        raise TimeoutError("overloaded")

    clock = VirtualClock()
    result = run_plan_sync(
        compiled([{"id": 1, "tool": "overloaded", "args": {"n": 1}}], overloaded),
        limits=RunLimits(max_cost_usd=0.25),
        retry=RetryPolicy(retries=5, base_delay=0.5, jitter=False),
        clock=clock,
    )
    record = result.steps[1]
    assert result.status == "budget_exceeded"
    assert (record.status, record.reason, record.attempts) == ("failed", "timeout", 2)
    assert [attempt.retry for attempt in record.attempt_log] == ["retried", "budget"]
    assert record.detail == (
        "TimeoutError: overloaded (not retried: not started: its estimated cost of $0.1 would "
        "take the run past its cost cap of $0.25 (spent $0.2, held by running steps $0))"
    )
    assert result.spent_usd == 0.2


def test_tool_estimates_are_validated() -> None:
    from plandag.errors import ToolDefinitionError

    with pytest.raises(ToolDefinitionError, match="cost_estimate_usd must be"):

        @tool(cost_estimate_usd=-1)
        def negative() -> None: ...

    with pytest.raises(ToolDefinitionError, match="tokens_estimate must be"):

        @tool(tokens_estimate=-5)
        def negative_tokens() -> None: ...


def test_runs_sharing_a_budget_never_overshoot_it_together() -> None:
    """A batch's documents share one budget: the second run's step does not fit."""

    @tool(cost_estimate_usd=0.6)
    def costly(x: int) -> int:
        return x

    compiled = compile_plan(
        {"steps": [{"id": 1, "tool": "costly", "args": {"x": 1}}]}, Registry([costly])
    )
    shared = Budget(max_cost_usd=1.0, max_tokens=None)
    first = run_plan_sync(compiled, budget=shared)
    second = run_plan_sync(compiled, budget=shared)
    assert (first.status, first.steps[1].status) == ("succeeded", "succeeded")
    assert (second.status, second.steps[1].status, second.steps[1].reason) == (
        "budget_exceeded",
        "skipped",
        "budget",
    )
    assert shared.spent_usd == 0.6
    assert (first.spent_usd, second.spent_usd) == (0.6, 0.6)


def test_free_steps_are_refused_once_spend_is_past_the_cap() -> None:
    """A tool may report more than it estimated; after that nothing more starts, free or not."""

    @tool(cost_estimate_usd=0.1)
    def overspends(ctx: ToolContext) -> int:
        ctx.report_cost(usd=2.0)
        return 1

    @tool
    def free(x: int) -> int:
        return x

    plan = {
        "steps": [
            {"id": 1, "tool": "overspends"},
            {"id": 2, "tool": "free", "args": {"x": "<step_1_result>"}},
        ]
    }
    result = run_plan_sync(
        compile_plan(plan, Registry([overspends, free])), limits=RunLimits(max_cost_usd=1.0)
    )
    assert result.steps[1].status == "succeeded"
    assert (result.steps[2].status, result.steps[2].reason) == ("skipped", "budget")
    assert result.status == "budget_exceeded"
    assert result.spent_usd == 2.0
    shared = Budget(max_cost_usd=1.0, max_tokens=None)
    assert shared.exceeded is False
    shared.settle(Reservation(0, 0), 1.5, 0)
    assert shared.exceeded is True
