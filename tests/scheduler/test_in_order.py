"""A plan whose every tool is inline runs its steps one after another in one task, with the
same records, pruning, checks and deadline as the task-per-step path."""

from __future__ import annotations

import functools
import time
from typing import Any

import anyio

from plandag.checks import BUILTIN_CHECKS
from plandag.compiler import compile_plan
from plandag.errors import InvalidOutputError, PermanentStepError
from plandag.scheduler import RunLimits, run_plan
from plandag.scheduler.events import StepRetrying
from plandag.tools.base import tool
from plandag.tools.registry import Registry

STARTS: list[int] = []


@tool(inline=True)
def note(step: int, value: Any = None) -> int:
    """Record that ``step`` started; return it."""
    STARTS.append(step)
    return step


@tool(inline=True)
def refuse(step: int) -> int:
    """Record that ``step`` started, then fail permanently."""
    STARTS.append(step)
    raise PermanentStepError(f"step {step} refuses", reason="invalid_args")


@tool
async def note_async(step: int) -> int:
    """An async tool: the plan then runs a task per ready step."""
    STARTS.append(step)
    await anyio.lowlevel.checkpoint()
    return step


def _registry() -> Registry:
    return Registry([note, refuse, note_async], BUILTIN_CHECKS)


def _fan_plan(failing: int | None) -> dict[str, Any]:
    """1 → (2, 3, 4) → 5 (needs 2 and 3); 6 needs 4 only. ``failing`` refuses."""

    def step(number: int, parents: list[int]) -> dict[str, Any]:
        return {
            "id": number,
            "tool": "refuse" if number == failing else "note",
            "args": {"step": number},
            "depends_on": parents,
        }

    return {
        "steps": [
            step(1, []),
            step(2, [1]),
            step(3, [1]),
            step(4, [1]),
            step(5, [2, 3]),
            step(6, [4]),
        ],
        "output": "<step_6_result>",
    }


def test_steps_run_in_plan_order_in_one_task() -> None:
    STARTS.clear()
    compiled = compile_plan(_fan_plan(None), _registry())
    result = anyio.run(run_plan, compiled)
    assert result.status == "succeeded"
    assert STARTS == [1, 2, 3, 4, 5, 6]
    assert result.output == 6
    assert [result.steps[n].status for n in range(1, 7)] == ["succeeded"] * 6


def test_a_failed_step_skips_its_descendants_only() -> None:
    STARTS.clear()
    compiled = compile_plan(_fan_plan(3), _registry())
    result = anyio.run(run_plan, compiled)
    assert result.status == "failed"
    assert STARTS == [1, 2, 3, 4, 6]
    statuses = {n: result.steps[n].status for n in range(1, 7)}
    assert statuses == {
        1: "succeeded",
        2: "succeeded",
        3: "failed",
        4: "succeeded",
        5: "skipped",
        6: "succeeded",
    }
    assert result.steps[3].reason == "invalid_args"
    assert result.steps[5].reason == "upstream_failed"


def test_a_failed_check_is_recorded_the_same_way() -> None:
    STARTS.clear()
    plan = _fan_plan(None)
    plan["steps"][1]["check"] = [{"kind": "jmespath", "expr": "@ == `7`"}]
    result = anyio.run(run_plan, compile_plan(plan, _registry()))
    assert result.steps[2].status == "failed"
    assert result.steps[2].reason == "check_failed"
    assert [outcome.status for outcome in result.steps[2].checks] == ["fail"]
    assert result.steps[5].status == "skipped"
    assert result.steps[6].status == "succeeded"


def test_a_plan_with_an_async_tool_keeps_a_task_per_step() -> None:
    STARTS.clear()
    plan = _fan_plan(None)
    plan["steps"][1]["tool"] = "note_async"
    result = anyio.run(run_plan, compile_plan(plan, _registry()))
    assert result.status == "succeeded"
    # step 2 suspends: the steps ready beside it run before it ends
    assert sorted(STARTS) == [1, 2, 3, 4, 5, 6]


@tool(inline=True)
def slow(step: int) -> int:
    """Spin 20 ms without suspending."""
    end = time.perf_counter() + 0.02
    while time.perf_counter() < end:
        pass
    return step


def test_the_deadline_stops_a_long_chain_between_steps() -> None:
    steps = [{"id": 1, "tool": "slow", "args": {"step": 1}}]
    steps += [
        {"id": n, "tool": "slow", "args": {"step": n}, "depends_on": [n - 1]} for n in range(2, 151)
    ]
    compiled = compile_plan({"steps": steps}, Registry([slow], BUILTIN_CHECKS))
    # 150 steps of 20 ms against a 0.5 s deadline: room for the first step on a loaded machine
    result = anyio.run(lambda: run_plan(compiled, limits=RunLimits(max_seconds=0.5)))
    assert result.status == "timed_out"
    statuses = [result.steps[n].status for n in range(1, 151)]
    assert statuses[0] == "succeeded"
    assert statuses[-1] == "skipped"
    assert set(statuses) <= {"succeeded", "cancelled", "skipped"}


CALLER: list[anyio.CancelScope] = []


@tool(inline=True)
def interrupt_caller(step: int) -> int:
    """Cancel the caller's scope (as Ctrl-C does), then spin past the loop's yield period."""
    STARTS.append(step)
    CALLER[0].cancel()
    end = time.perf_counter() + 0.01
    while time.perf_counter() < end:
        pass
    return step


def test_a_caller_cancelling_a_run_without_brakes_interrupts_it_between_steps() -> None:
    STARTS.clear()
    CALLER.clear()
    steps: list[dict[str, Any]] = [{"id": 1, "tool": "note", "args": {"step": 1}}]
    steps.append({"id": 2, "tool": "interrupt_caller", "args": {"step": 2}, "depends_on": [1]})
    steps += [{"id": n, "tool": "note", "args": {"step": n}, "depends_on": [n - 1]} for n in (3, 4)]
    compiled = compile_plan({"steps": steps}, Registry([note, interrupt_caller], BUILTIN_CHECKS))

    async def main() -> Any:
        with anyio.CancelScope() as scope:
            CALLER.append(scope)
            return await run_plan(compiled, limits=RunLimits.lifted())

    result = anyio.run(main)
    assert result.status == "interrupted"
    assert STARTS == [1, 2]
    assert [(result.steps[n].status, result.steps[n].reason) for n in (1, 2, 3, 4)] == [
        ("succeeded", None),
        ("succeeded", None),
        ("skipped", "interrupted"),
        ("skipped", "interrupted"),
    ]


def test_a_run_id_is_sixteen_hex_digits_of_a_random_uuid4() -> None:
    compiled = compile_plan(_fan_plan(None), _registry())
    ids = {anyio.run(run_plan, compiled).run_id for _ in range(20)}
    assert len(ids) == 20
    for run_id in ids:
        assert len(run_id) == 16
        assert set(run_id) <= set("0123456789abcdef")
        assert run_id[12] == "4"  # the UUID version nibble, as uuid4().hex[:16] has it


@tool(inline=True)
def echo(value: Any) -> Any:
    """Return ``value``."""
    return value


def test_plans_with_the_same_output_text_resolve_their_own_results() -> None:
    registry = Registry([echo, refuse], BUILTIN_CHECKS)
    outputs = []
    for value in ("first", {"second": [2]}):
        plan = {
            "steps": [{"id": 1, "tool": "echo", "args": {"value": value}}],
            "output": "<step_1_result>",
        }
        outputs.append(anyio.run(run_plan, compile_plan(plan, registry)).output)
    assert outputs == ["first", {"second": [2]}]
    failed = compile_plan(
        {"steps": [{"id": 1, "tool": "refuse", "args": {"step": 1}}], "output": "<step_1_result>"},
        registry,
    )
    assert anyio.run(run_plan, failed).output is None


ASKED: list[int] = []


@tool(inline=True)
def asks_again(step: int, times: int) -> int:
    """Fail with a re-ask the first ``times`` attempts, then return ``step``."""
    ASKED.append(step)
    if ASKED.count(step) <= times:
        raise InvalidOutputError(f"step {step}: reply did not fit", reask=True)
    return step


def test_an_in_order_step_is_asked_again_once_then_fails() -> None:
    ASKED.clear()
    steps = [
        {"id": 1, "tool": "asks_again", "args": {"step": 1, "times": 1}},
        {"id": 2, "tool": "asks_again", "args": {"step": 2, "times": 2}, "depends_on": [1]},
    ]
    compiled = compile_plan({"steps": steps}, Registry([asks_again], BUILTIN_CHECKS))
    seen: list[Any] = []
    for observers in ((), (seen.append,)):
        ASKED.clear()
        result = anyio.run(functools.partial(run_plan, compiled, observers=observers))
        assert ASKED == [1, 1, 2, 2]
        assert result.status == "failed"
        first, second = result.steps[1], result.steps[2]
        assert (first.status, [a.retry for a in first.attempt_log]) == (
            "succeeded",
            ["reask", None],
        )
        assert (second.status, second.reason) == ("failed", "invalid_output")
        assert [a.retry for a in second.attempt_log] == ["reask", None]
    retrying = [event for event in seen if isinstance(event, StepRetrying)]
    assert [(event.step_id, event.attempt, event.delay_s) for event in retrying] == [
        (1, 1, 0.0),
        (2, 1, 0.0),
    ]
