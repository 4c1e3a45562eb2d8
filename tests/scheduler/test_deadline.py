"""The wall-clock cap: absolute from the run's start; where the run got to
(ARCHITECTURE.md, "Brakes")."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from plandag.brakes import UNLIMITED
from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.compiler import CompiledPlan, compile_plan
from plandag.scheduler import RunLimits, events, run_plan_sync
from plandag.tools.base import Tool, tool
from plandag.tools.registry import Registry


@tool
async def nap(seconds: float, value: Any = None) -> Any:
    """Sleep ``seconds``, then return ``value``."""
    await anyio.sleep(seconds)
    return value


def compiled(steps: list[dict[str, Any]], *tools: Tool) -> CompiledPlan:
    return compile_plan({"steps": steps}, Registry([nap, *tools]))


def test_the_cap_fires_mid_run() -> None:
    plan = compiled(
        [
            {"id": 1, "tool": "nap", "args": {"seconds": 0.01, "value": "quick"}},
            {"id": 2, "tool": "nap", "args": {"seconds": 5}, "depends_on": [1]},
            {"id": 3, "tool": "nap", "args": {"seconds": 0}, "depends_on": [2]},
            {"id": 4, "tool": "nap", "args": {"seconds": 5}},
        ]
    )
    seen: list[events.Event] = []
    started = time.perf_counter()
    result = run_plan_sync(plan, limits=RunLimits(max_seconds=0.3), observers=[seen.append])
    elapsed = time.perf_counter() - started
    steps = result.steps
    assert 0.29 < elapsed < 1.5
    assert (result.status, result.stop_reason) == ("timed_out", "deadline")
    assert [steps[i].status for i in (1, 2, 3, 4)] == [
        "succeeded",
        "cancelled",
        "skipped",
        "cancelled",
    ]
    assert steps[1].result == "quick"
    assert [steps[i].reason for i in (2, 3, 4)] == ["deadline", "deadline", "deadline"]
    assert (
        steps[2].detail == "the run reached its wall-clock cap of 0.3 s while this step was running"
    )
    assert steps[3].detail == "the run reached its wall-clock cap of 0.3 s before this step started"
    assert steps[2].attempt_log[0].reason == "deadline"
    assert result.progress() == {"finished": [1], "running": [2, 4], "not_started": [3]}
    cancelled = [event for event in seen if isinstance(event, events.StepCancelled)]
    assert sorted((event.step_id, event.reason) for event in cancelled) == [
        (2, "deadline"),
        (4, "deadline"),
    ]
    assert isinstance(seen[-1], events.RunFinished)


def test_steps_waiting_for_a_limit_are_skipped_at_the_deadline() -> None:
    plan = compiled([{"id": i, "tool": "nap", "args": {"seconds": 5}} for i in (1, 2)])
    result = run_plan_sync(plan, max_concurrency=1, limits=RunLimits(max_seconds=0.1))
    assert result.status == "timed_out"
    assert (result.steps[1].status, result.steps[2].status) == ("cancelled", "skipped")
    assert result.steps[2].reason == "deadline"
    assert result.steps[2].attempts == 0


def test_a_run_inside_its_cap_is_unaffected() -> None:
    plan = compiled([{"id": 1, "tool": "nap", "args": {"seconds": 0.01, "value": 1}}])
    result = run_plan_sync(plan, limits=RunLimits(max_seconds=5))
    assert (result.status, result.stop_reason) == ("succeeded", None)


def test_the_deadline_is_not_reset_by_retries() -> None:
    @tool
    def flaky() -> None:
        raise TimeoutError("slow upstream")

    clock = VirtualClock()
    result = run_plan_sync(
        compiled([{"id": 1, "tool": "flaky", "args": {}}], flaky),
        limits=RunLimits(max_seconds=2),
        retry=RetryPolicy(retries=10, base_delay=0.5, jitter=False),
        clock=clock,
    )
    record = result.steps[1]
    # 0.5 + 1.0 waited; the next backoff (2 s) would end past the 2 s cap (0.5 s left).
    assert clock.sleeps == [0.5, 1.0]
    assert (record.status, record.attempts) == ("failed", 3)
    assert record.attempt_log[-1].retry == "deadline"
    assert record.detail == (
        "TimeoutError: slow upstream (not retried: the next attempt would start after 2 s, "
        "past the run's deadline (0.5 s left))"
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_seconds": 0}, "max_seconds must be > 0"),
        ({"heartbeat_every": -1}, "heartbeat_every must be > 0"),
        ({"stall_after": float("nan")}, "stall_after must be > 0"),
        ({"max_cost_usd": -0.01}, "max_cost_usd must be >= 0"),
        ({"max_tokens": -1}, "max_tokens must be >= 0"),
        ({"max_cost_usd": None}, r"max_cost_usd=None is ambiguous: leave max_cost_usd out"),
        ({"max_seconds": None}, r"or pass max_seconds=UNLIMITED \(from plandag import"),
        ({"max_tokens": "none"}, "max_tokens must be a number or UNLIMITED, not 'none'"),
    ],
)
def test_limits_are_validated(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RunLimits(**options)


def test_stop_on_stall_is_on_by_default_and_allowed_without_a_stall_threshold() -> None:
    # Brakes are on by default: a stop on a stall no longer needs --stall-after; with the
    # stall detector lifted it has nothing to act on.
    assert RunLimits().stop_on_stall is True
    limits = RunLimits(stall_after=UNLIMITED, stop_on_stall=True)
    assert (limits.stall_cap, limits.stop_on_stall) == (None, True)
