"""Property: whatever the plan and its tools do, every step ends in exactly one terminal
state with a reason when it did not succeed, and spend never passes the cap."""

from __future__ import annotations

import random
from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plandag.brakes import UNLIMITED
from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.compiler import compile_plan
from plandag.errors import PermanentStepError, TransientStepError
from plandag.scheduler import RunLimits, RunResult, run_plan_sync
from plandag.tools.base import ToolContext, tool
from plandag.tools.registry import Registry

TERMINAL = {"succeeded", "failed", "skipped", "cancelled"}
BEHAVIOURS = ("succeed", "fail", "slow", "transient_once", "transient_always")

calls: dict[str, int] = {}


ESTIMATES = {"fake_free": 0.0, "fake_cheap": 0.1, "fake_dear": 0.35}


def fake_tool(name: str, estimate: float) -> Any:
    """A tool estimated at ``estimate`` dollars (and ``1000 * estimate`` tokens)."""

    async def fake(key: str, behaviour: str, share: float, ctx: ToolContext) -> str:
        """Behave as ``behaviour``; report ``share`` of the estimate as the real cost."""
        count = calls[key] = calls.get(key, 0) + 1
        ctx.report_cost(usd=estimate * share, tokens=int(1000 * estimate * share))
        if behaviour == "fail":
            raise PermanentStepError(f"{key}: bad input")
        if behaviour == "slow":
            await anyio.sleep(0.01)
        if behaviour == "transient_once" and count == 1:
            raise TransientStepError(f"{key}: busy")
        if behaviour == "transient_always":
            raise TimeoutError(f"{key}: no answer")
        return key

    return tool(name=name, cost_estimate_usd=estimate, tokens_estimate=int(1000 * estimate))(fake)


TOOLS = [fake_tool(name, estimate) for name, estimate in ESTIMATES.items()]
REGISTRY = Registry(TOOLS)


@st.composite
def plans(draw: st.DrawFn) -> dict[str, Any]:
    size = draw(st.integers(min_value=1, max_value=9))
    steps = []
    for step_id in range(1, size + 1):
        parents = draw(
            st.lists(st.integers(min_value=1, max_value=step_id - 1), max_size=3, unique=True)
            if step_id > 1
            else st.just([])
        )
        steps.append(
            {
                "id": step_id,
                "tool": draw(st.sampled_from(sorted(ESTIMATES))),
                "args": {
                    "key": f"s{step_id}",
                    "behaviour": draw(st.sampled_from(BEHAVIOURS)),
                    "share": draw(st.sampled_from([0.0, 0.5, 1.0])),
                },
                "depends_on": sorted(parents),
            }
        )
    return {"steps": steps}


def check_invariants(result: RunResult, limits: RunLimits, retries: int) -> None:
    for record in result.steps.values():
        assert record.status in TERMINAL
        assert record.attempts == len(record.attempt_log)
        assert record.attempts <= retries + 1
        if record.status == "succeeded":
            assert record.reason is None
            assert record.error is None
        else:
            assert record.reason
            assert record.detail
        if record.status == "skipped":
            assert record.attempts == 0
        if record.status == "failed":
            assert record.error is not None
        if record.status in ("succeeded", "failed", "cancelled"):
            assert record.attempts >= 1
    if limits.cost_cap is not None:
        assert result.spent_usd <= limits.cost_cap
    if limits.token_cap is not None:
        assert result.spent_tokens <= limits.token_cap
    charged = sum(a.cost_usd for r in result.steps.values() for a in r.attempt_log)
    assert abs(charged - result.spent_usd) < 1e-9
    reasons = {record.reason for record in result.steps.values()}
    statuses = {record.status for record in result.steps.values()}
    if result.status == "succeeded":
        assert statuses <= {"succeeded"}
    if "budget" in reasons:
        assert result.status in ("budget_exceeded", "timed_out")
    if "deadline" in reasons:
        assert result.status == "timed_out"
    if result.status == "failed":
        assert "failed" in statuses


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
@given(
    plan=plans(),
    retries=st.integers(min_value=0, max_value=2),
    max_cost=st.sampled_from([None, 0.0, 0.3, 0.5, 1.0]),
    max_tokens=st.sampled_from([None, 400]),
    max_seconds=st.sampled_from([None, 0.003]),
    concurrency=st.sampled_from([None, 1, 2]),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_every_step_ends_in_one_terminal_state(
    plan: dict[str, Any],
    retries: int,
    max_cost: float | None,
    max_tokens: int | None,
    max_seconds: float | None,
    concurrency: int | None,
    seed: int,
) -> None:
    calls.clear()

    def cap(value: Any) -> Any:
        return UNLIMITED if value is None else value

    limits = RunLimits(
        max_seconds=cap(max_seconds), max_cost_usd=cap(max_cost), max_tokens=cap(max_tokens)
    )
    result = run_plan_sync(
        compile_plan(plan, REGISTRY),
        max_concurrency=concurrency,
        limits=limits,
        retry=RetryPolicy(retries=retries, random=random.Random(seed)),
        clock=VirtualClock(),
    )
    assert set(result.steps) == {step["id"] for step in plan["steps"]}
    check_invariants(result, limits, retries)
