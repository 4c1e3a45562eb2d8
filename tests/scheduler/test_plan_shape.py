"""What a run's set-up takes from its compiled plan alone is worked out once per compiled
plan (and per copy of it with other params), and a run of a kept plan starts as a run of a
fresh one does."""

from __future__ import annotations

import dataclasses
from typing import Any

import anyio

from plandag.checks import BUILTIN_CHECKS
from plandag.compiler import CompiledPlan, compile_plan
from plandag.scheduler import run_plan, run_plan_sync
from plandag.scheduler.state import plan_shape
from plandag.tools.base import tool
from plandag.tools.registry import Registry


@tool(inline=True)
def add(x: int) -> int:
    """x + 1, on the event loop."""
    return x + 1


@tool(max_concurrency=1)
def one_at_a_time(x: int) -> int:
    """x + 1, one call at a time."""
    return x + 1


@tool(inline=True, reaches="url", egress=True)
def fetch(url: str) -> str:
    """The url, as given."""
    return url


def compiled(steps: list[dict[str, Any]], **options: Any) -> CompiledPlan:
    registry = Registry([add, one_at_a_time, fetch], BUILTIN_CHECKS)
    return compile_plan(
        {"params": {"start": {"type": "integer", "default": 0}}, "steps": steps},
        registry,
        params={"start": 0},
        **options,
    )


CHAIN = [
    {"id": 1, "tool": "add", "args": {"x": "<param.start>"}},
    {"id": 2, "tool": "add", "args": {"x": "<step_1_result>"}, "depends_on": [1]},
    {"id": 3, "tool": "add", "args": {"x": "<step_2_result>"}, "depends_on": [2]},
]


def outcome(result: Any) -> dict[int, tuple[str, Any, int]]:
    return {
        step_id: (record.status, record.result, record.attempts)
        for step_id, record in result.steps.items()
    }


def test_a_plan_run_again_with_other_params_runs_as_a_fresh_plan_does() -> None:
    plan = compiled(CHAIN)
    fresh = run_plan_sync(compiled(CHAIN))
    results = []
    for start in (0, 10, 0):
        copy = dataclasses.replace(plan, params={"start": start})
        assert plan_shape(copy) is plan_shape(plan)  # worked out once, kept
        results.append(run_plan_sync(copy))
    assert [outcome(result) for result in results] == [
        outcome(fresh),
        {1: ("succeeded", 11, 1), 2: ("succeeded", 12, 1), 3: ("succeeded", 13, 1)},
        outcome(fresh),
    ]
    # every run has records of its own
    assert results[0].steps[1] is not results[2].steps[1]
    assert [result.output for result in results] == [None, None, None]


def test_a_kept_shape_is_not_used_for_a_plan_of_other_steps_or_allow_list() -> None:
    plan = compiled(
        [{"id": 1, "tool": "fetch", "args": {"url": "https://example.org/a"}}],
        http_allow=["api.example.com"],
    )
    shape = plan_shape(plan)
    assert shape.http_allow == ("api.example.com", "example.org:443")
    other_allow = dataclasses.replace(plan, http_allow=("other.example.net",))
    assert plan_shape(other_allow).http_allow == ("other.example.net", "example.org:443")
    read_only = dataclasses.replace(plan, read_only=True)
    assert plan_shape(read_only).listed == ()
    assert plan_shape(read_only).http_allow == ("api.example.com",)
    fewer = plan.without_steps([1])
    assert plan_shape(fewer).names == ()
    assert plan_shape(plan) == shape


def test_a_tool_limit_still_holds_in_a_plan_run_again() -> None:
    steps = [{"id": n, "tool": "one_at_a_time", "args": {"x": n}} for n in (1, 2, 3)]
    plan = compiled(steps)

    async def twice() -> list[Any]:
        return [await run_plan(plan), await run_plan(plan, tool_limits={"one_at_a_time": 2})]

    first, second = anyio.run(twice)
    assert plan_shape(plan).limited
    for result in (first, second):
        assert outcome(result) == {n: ("succeeded", n + 1, 1) for n in (1, 2, 3)}


class _TakenFirst(dict[Any, Any]):
    """Kept shapes of which another thread drops the oldest just before this one does."""

    def pop(self, key: Any, *default: Any) -> Any:
        super().pop(key, None)
        return super().pop(key, *default)


def test_dropping_the_oldest_shape_another_thread_dropped_first_is_no_error(
    monkeypatch: Any,
) -> None:
    from plandag.scheduler import state

    monkeypatch.setattr(state, "_shapes", _TakenFirst())
    plans = [compiled(CHAIN) for _ in range(state._SHAPES_KEPT + 2)]
    shapes = [plan_shape(plan) for plan in plans]
    assert plan_shape(plans[-1]) is shapes[-1]
    assert len(state._shapes) <= state._SHAPES_KEPT
