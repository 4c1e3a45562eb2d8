"""Budgets relative to the plan: 2x its estimated cost, 3x its estimated time, on a virtual
clock (ARCHITECTURE.md, "Brakes")."""

from __future__ import annotations

import re
from typing import Any

import anyio
import pytest

from plandag.brakes import budget as budget_module
from plandag.brakes.budget import PlanBudget
from plandag.brakes.clock import VirtualClock
from plandag.compiler import CompiledPlan, compile_plan
from plandag.dag.plan import Plan
from plandag.errors import PlanBudgetError
from plandag.scheduler import RunLimits, run_plan, run_plan_sync
from plandag.scheduler.estimate import ModelCallEstimate, PlanEstimate, estimate_plan
from plandag.scheduler.session import open_session
from plandag.tools.base import Tool, ToolContext, tool
from plandag.tools.registry import Registry

CLOCK = VirtualClock()
"""Tools advance it by the seconds they are said to take (reset by each test)."""


@pytest.fixture(autouse=True)
def _fresh_clock() -> None:
    global CLOCK
    CLOCK = VirtualClock()


@tool(typical_seconds=2.0)
def slow(seconds: float = 0.0) -> str:
    """Takes ``seconds`` on the virtual clock; declares 2 s."""
    CLOCK.advance(seconds)
    return "done"


@tool(typical_seconds=1.0)
def quick(seconds: float = 0.0) -> str:
    """Takes ``seconds`` on the virtual clock; declares 1 s."""
    CLOCK.advance(seconds)
    return "done"


@tool(typical_seconds=0.5, cost_estimate_usd=0.01)
def paid(usd: float, ctx: ToolContext) -> str:
    """Costs ``usd`` (reported); estimated at $0.01."""
    ctx.report_cost(usd=usd)
    return "paid"


@tool
def undeclared(value: int = 0) -> int:
    """A user's tool that declares no typical duration."""
    CLOCK.advance(100.0)
    return value


@tool(effects="write", writes="path")
def send(path: str) -> str:
    """A user's tool with effects and no estimate at all."""
    return path


REGISTRY = Registry([slow, quick, paid, undeclared, send])


def compiled(steps: list[dict[str, Any]], *tools: Tool) -> CompiledPlan:
    return compile_plan({"steps": steps}, REGISTRY if not tools else Registry(list(tools)))


def run(plan: CompiledPlan, limits: RunLimits | None = None, **kwargs: Any) -> Any:
    return run_plan_sync(
        plan, limits=limits or RunLimits(heartbeat_every=None), clock=CLOCK, **kwargs
    )


# -- the estimate ------------------------------------------------------------------------


def test_estimate_is_the_critical_path_and_the_sum_of_costs() -> None:
    plan = compiled(
        [
            {"id": 1, "tool": "slow", "args": {}},
            {"id": 2, "tool": "quick", "args": {}},
            {"id": 3, "tool": "paid", "args": {"usd": 0.01}, "depends_on": [1]},
            {"id": 4, "tool": "quick", "args": {}, "depends_on": [2, 3]},
        ]
    )
    estimate = estimate_plan(plan)
    assert estimate.cost_usd == 0.01
    assert estimate.seconds == 3.5  # 1 (2 s) -> 3 (0.5 s) -> 4 (1 s)
    assert estimate.critical_path == (1, 3, 4)
    assert estimate.unknown == ()
    assert estimate.describe() == "estimated cost $0.0100, time 3.5 s (critical path 1 -> 3 -> 4)"
    assert estimate.as_json()["critical_path"] == [1, 3, 4]
    assert estimate.as_json()["steps"]["3"] == {
        "tool": "paid",
        "cost_usd": 0.01,
        "seconds": 0.5,
        "source": "declared",
    }


def test_a_step_without_any_estimate_makes_the_time_unknown() -> None:
    plan = compiled(
        [
            {"id": 1, "tool": "slow", "args": {}},
            {"id": 3, "tool": "undeclared", "args": {}},
            {"id": 5, "tool": "undeclared", "args": {}, "depends_on": [1]},
        ]
    )
    estimate = estimate_plan(plan)
    assert (estimate.cost_usd, estimate.seconds) == (0.0, None)
    assert estimate.unknown == (3, 5)
    assert estimate.critical_path == ()
    assert estimate.describe() == (
        "estimated cost $0.0000, time unknown: steps 3, 5 have no estimate"
    )


def test_a_tool_with_effects_and_no_estimate_makes_the_cost_unknown_too(tmp_path: Any) -> None:
    plan = compiled([{"id": 1, "tool": "send", "args": {"path": "out.txt"}}])
    estimate = estimate_plan(plan)
    assert (estimate.cost_usd, estimate.seconds) == (None, None)
    assert estimate.unknown_cost == (1,)
    assert estimate.describe() == "estimated cost and time unknown: step 1 has no estimate"


def test_measured_durations_replace_declared_ones() -> None:
    plan = compiled([{"id": 1, "tool": "slow", "args": {}}, {"id": 2, "tool": "quick", "args": {}}])
    estimate = estimate_plan(plan, measured={"slow": 0.25})
    assert estimate.seconds == 1.0  # quick (declared 1 s) is now the longer one
    assert estimate.critical_path == (2,)
    assert estimate.steps[1].source == "measured"
    assert estimate.steps[2].source == "declared"


def test_inline_steps_take_the_event_loop_one_at_a_time() -> None:
    @tool(inline=True, typical_seconds=0.5)
    def parse(n: int) -> int:
        return n

    plan = compiled(
        [{"id": n, "tool": "parse", "args": {"n": n}} for n in range(1, 5)]
        + [{"id": 5, "tool": "parse", "args": {"n": 5}, "depends_on": [1]}],
        parse,
    )
    estimate = estimate_plan(plan)
    assert (estimate.critical_path, estimate.critical_path_seconds) == ((1, 5), 1.0)
    assert estimate.seconds == 2.5  # five inline steps of 0.5 s, one after another
    assert estimate.describe() == (
        "estimated cost $0.0000, time 2.5 s (5 inline steps, one at a time; critical path 1 -> 5)"
    )


def test_model_calls_add_to_cost_and_time() -> None:
    plan = compiled([{"id": 1, "tool": "slow", "args": {}}])
    estimate = estimate_plan(
        plan,
        calls=[ModelCallEstimate("planner", 3.0, 0.004), ModelCallEstimate("joiner", 1.0)],
    )
    assert estimate.cost_usd == 0.004  # the joiner's cost is not counted
    assert estimate.seconds == 6.0
    assert estimate.describe() == (
        "estimated cost $0.0040, time 6 s (critical path 1 -> planner -> joiner)"
    )


def test_model_backed_tools_are_priced_from_their_token_estimate() -> None:
    @tool(typical_seconds=1.0, tokens_estimate=2000)
    def summarize(text: str) -> str:
        return text

    plan = compiled([{"id": 1, "tool": "summarize", "args": {"text": "x"}}], summarize)
    assert estimate_plan(plan, tokens_cost=lambda tokens: tokens * 3e-6).cost_usd == 0.006
    unpriced = estimate_plan(plan, tokens_cost=lambda tokens: None)
    assert (unpriced.cost_usd, unpriced.unknown_cost) == (None, (1,))


# -- enforced during the run ---------------------------------------------------------------


def test_a_step_past_3x_the_estimated_time_escalates() -> None:
    plan = compiled(
        [
            {"id": 1, "tool": "slow", "args": {"seconds": 7.0}},
            {"id": 2, "tool": "quick", "args": {}, "depends_on": [1]},
        ]
    )
    # estimated 2 s + 1 s = 3 s: the limit is 9 s; step 1 alone takes 7 s, step 2 then 0 s
    assert run(plan).status == "succeeded"
    two_seconds = compiled([{"id": 1, "tool": "slow", "args": {"seconds": 7.0}}])
    result = run(two_seconds)
    assert result.status == "escalated"
    assert result.escalation == "plan_budget"
    assert result.stop_reason == "plan_budget"
    assert result.escalation_detail == (
        "elapsed time 7 s passed 3x the plan's estimated time 2 s (limit 6 s)"
    )


def test_the_steps_after_the_time_limit_never_start() -> None:
    plan = compiled(
        [
            {"id": 1, "tool": "slow", "args": {"seconds": 7.0}},
            {"id": 2, "tool": "quick", "args": {}, "depends_on": [1]},
            {"id": 3, "tool": "quick", "args": {"seconds": 12.0}, "depends_on": [2]},
        ]
    )
    result = run(plan)  # estimate 4 s, limit 12 s: 1 and 2 fit, 3 takes it to 19 s
    assert result.status == "escalated"
    assert result.steps[3].status == "succeeded"  # it ended; the stop came as it ended
    plan = compiled(
        [
            {"id": 1, "tool": "slow", "args": {"seconds": 13.0}},
            {"id": 2, "tool": "quick", "args": {}, "depends_on": [1]},
        ]
    )
    result = run(plan)
    assert result.status == "escalated"
    assert (result.steps[2].status, result.steps[2].reason) == ("skipped", "plan_budget")
    assert result.steps[2].detail == (
        "the run passed its plan-relative budget (elapsed time 13 s passed 3x the plan's "
        "estimated time 3 s (limit 9 s)) before this step started"
    )


def test_spend_past_2x_the_estimate_escalates() -> None:
    plan = compiled(
        [
            {"id": 1, "tool": "paid", "args": {"usd": 0.015}},
            {"id": 2, "tool": "paid", "args": {"usd": 0.03}, "depends_on": [1]},
            {"id": 3, "tool": "quick", "args": {}, "depends_on": [2]},
        ]
    )
    result = run(plan)  # estimated $0.02: the limit is $0.04; $0.045 passes it at step 2
    assert result.status == "escalated"
    assert result.escalation == "plan_budget"
    assert result.escalation_detail == (
        "spend $0.0450 passed 2x the plan's estimated cost $0.0200 (limit $0.0400)"
    )
    assert (result.steps[3].status, result.steps[3].reason) == ("skipped", "plan_budget")


def test_under_the_multiples_the_run_succeeds() -> None:
    plan = compiled(
        [
            {"id": 1, "tool": "paid", "args": {"usd": 0.02}},
            {"id": 2, "tool": "paid", "args": {"usd": 0.02}, "depends_on": [1]},
            {"id": 3, "tool": "slow", "args": {"seconds": 5.9}, "depends_on": [2]},
        ]
    )
    result = run(plan)  # $0.04 of a $0.04 limit; 5.9 s of a 9 s limit
    assert result.status == "succeeded"
    assert (result.escalation, result.escalation_detail) == (None, None)


def test_factors_are_configurable_and_none_lifts_them() -> None:
    plan = compiled([{"id": 1, "tool": "slow", "args": {"seconds": 7.0}}])
    assert run(plan, RunLimits(heartbeat_every=None, plan_time_factor=4.0)).status == "succeeded"
    assert run(plan, RunLimits(heartbeat_every=None, plan_time_factor=None)).status == "succeeded"
    paid_plan = compiled([{"id": 1, "tool": "paid", "args": {"usd": 1.0}}])
    assert run(paid_plan, RunLimits(heartbeat_every=None, plan_cost_factor=None)).status == (
        "succeeded"
    )
    with pytest.raises(
        ValueError, match=r"RunLimits\(plan_cost_factor=0.0\): give a finite number > 0"
    ):
        RunLimits(plan_cost_factor=0.0)


def test_an_unknown_estimate_is_not_enforced() -> None:
    plan = compiled([{"id": 1, "tool": "undeclared", "args": {}}])  # takes 100 s virtual
    result = run(plan)
    assert result.status == "succeeded"


def test_time_waiting_for_a_person_does_not_count() -> None:
    async def main() -> Any:
        plan = compiled([{"id": 1, "tool": "slow", "args": {"seconds": 5.0}}])
        async with open_session(
            plan, REGISTRY, limits=RunLimits(heartbeat_every=None), clock=CLOCK
        ) as session:
            session.arm_plan_budget(estimate_plan(plan))  # 2 s: the limit is 6 s
            await session.settled()  # step 1 took 5 s
            with session.waiting_for_person():  # nothing runs: the clocks stop
                CLOCK.advance(100.0)  # a person takes 100 s to decide
            CLOCK.advance(0.5)
            session.check_plan_budget()  # 5.5 s of 6 s
            assert session.stop_reason is None
            CLOCK.advance(1.0)
            session.check_plan_budget()  # 6.5 s: past the limit
            assert session.stop_reason == "plan_budget"
        return session.result()

    result = anyio.run(main)
    assert result.status == "escalated"
    assert result.escalation_detail == (
        "elapsed time 6.5 s passed 3x the plan's estimated time 2 s (limit 6 s)"
    )


def test_a_hanging_step_is_stopped_by_the_plan_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(budget_module, "MIN_PLAN_TIME_LIMIT_S", 0.5)  # a short real wait

    @tool(typical_seconds=0.1)
    async def hang() -> str:
        await anyio.sleep(30)
        return "late"

    plan = compiled([{"id": 1, "tool": "hang", "args": {}}], hang)
    budget_limits = RunLimits(heartbeat_every=None, plan_time_factor=3.0)

    async def main() -> Any:
        # the limit is max(3 x 0.1 s, 0.5 s) = 0.5 s on the event loop's own clock
        with anyio.fail_after(10):
            return await run_plan(plan, limits=budget_limits)

    result = anyio.run(main)
    assert result.status == "escalated"
    assert (result.steps[1].status, result.steps[1].reason) == ("cancelled", "plan_budget")
    assert re.fullmatch(
        r"elapsed time 0\.5\d* s passed 3x the plan's estimated time 0\.1 s \(limit 0\.5 s\)",
        result.escalation_detail or "",
    )


# -- replan patches ----------------------------------------------------------------------------


def test_a_replan_patch_projected_past_the_limits_is_not_run() -> None:
    async def main() -> tuple[Any, list[str]]:
        plan = compiled([{"id": 1, "tool": "slow", "args": {"seconds": 1.0}}])
        errors: list[str] = []
        async with open_session(
            Plan(steps=[]), REGISTRY, limits=RunLimits(heartbeat_every=None), clock=CLOCK
        ) as session:
            session.add([step.step for step in plan.steps.values()])
            session.arm_plan_budget(estimate_plan(plan))  # 2 s: the limit is 6 s
            await session.settled()
            session.add([{"id": 2, "tool": "quick", "args": {}}])  # 1 s + 1 s: fits
            await session.settled()
            try:  # elapsed 1 s + patch 2 s + 2 s + 2 s = 7 s > 6 s
                session.add(
                    [
                        {"id": 3, "tool": "slow", "args": {}},
                        {"id": 4, "tool": "slow", "args": {}, "depends_on": [3]},
                        {"id": 5, "tool": "slow", "args": {}, "depends_on": [4]},
                    ]
                )
            except PlanBudgetError as error:
                errors.append(str(error))
            assert 3 not in session.steps
        return session.result(), errors

    result, errors = anyio.run(main)
    assert errors == [
        "replan patch (steps 3, 4, 5) not run: projected time 7 s passed 3x the plan's "
        "estimated time 2 s (limit 6 s)"
    ]
    assert result.status == "escalated"
    assert result.escalation == "plan_budget"
    assert result.escalation_detail == errors[0]
    assert sorted(result.steps) == [1, 2]


def test_a_replan_patch_projected_past_2x_the_cost_is_not_run() -> None:
    async def main() -> Any:
        plan = compiled([{"id": 1, "tool": "paid", "args": {"usd": 0.01}}])
        async with open_session(
            plan, REGISTRY, limits=RunLimits(heartbeat_every=None), clock=CLOCK
        ) as session:
            session.arm_plan_budget(estimate_plan(plan))  # $0.01: the limit is $0.02
            await session.settled()
            session.add([{"id": 2, "tool": "paid", "args": {"usd": 0.01}}])  # $0.02: fits
            await session.settled()
            with pytest.raises(PlanBudgetError, match=r"projected spend \$0.0300 passed 2x"):
                session.add([{"id": 3, "tool": "paid", "args": {"usd": 0.0}}])
        return session.result()

    result = anyio.run(main)
    assert result.status == "escalated"
    assert result.escalation_detail == (
        "replan patch (steps 3) not run: projected spend $0.0300 passed 2x the plan's "
        "estimated cost $0.0100 (limit $0.0200)"
    )


def test_plan_budget_limits_alone() -> None:
    estimate = PlanEstimate(cost_usd=0.5, seconds=10.0)
    budget = PlanBudget(estimate, 2.0, 3.0)
    assert (budget.cost_limit_usd, budget.time_limit_s) == (1.0, 30.0)
    assert budget.passed(1.0, 30.0) is None
    assert budget.passed(1.01, 0.0) == (
        "spend $1.0100 passed 2x the plan's estimated cost $0.5000 (limit $1.0000)"
    )
    tiny = PlanBudget(PlanEstimate(cost_usd=0.0, seconds=0.004), 2.0, 3.0)
    assert tiny.time_limit_s == 5.0  # never below 5 s
    unknown = PlanBudget(PlanEstimate(cost_usd=None, seconds=None), 2.0, 3.0)
    assert not unknown.enforced


@pytest.mark.parametrize("value", [-1, 0, float("nan"), float("inf"), "abc", "2", True])
def test_a_bad_factor_is_refused_with_what_to_give(value: Any) -> None:
    for name in ("plan_cost_factor", "plan_time_factor"):
        with pytest.raises(ValueError, match="give a finite number > 0") as raised:
            RunLimits(**{name: value})
        assert str(raised.value) == (
            f"RunLimits({name}={value!r}): give a finite number > 0 (times the plan's "
            f"estimate), or None to lift the limit"
        )


def test_a_run_under_an_outer_runs_brakes_has_no_plan_relative_limits() -> None:
    # One document of a batch: the batch's brakes govern it, so a document slowed down by a
    # busy machine past 3x its plan's estimate is not escalated on its own.
    lifted = RunLimits.lifted()
    assert (lifted.plan_cost_factor, lifted.plan_time_factor) == (None, None)
    two_seconds = compiled([{"id": 1, "tool": "slow", "args": {"seconds": 7.0}}])
    assert run(two_seconds, RunLimits.lifted()).status == "succeeded"
