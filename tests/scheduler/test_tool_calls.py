"""The async tool calls of a run with a deadline (``plandag.scheduler.overrun.ToolCalls``):
each in a task other than the caller's, in a copy of the caller's context, its value or
error handed back; a cancelled caller cancels its call; a chain of calls reuses one task."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from plandag import RunLimits, compile_plan, run_plan_sync, tool
from plandag.brakes.retry import RetryPolicy
from plandag.scheduler.overrun import ABANDONED, ToolCalls
from plandag.tools.registry import Registry

MARK: contextvars.ContextVar[str] = contextvars.ContextVar("MARK", default="unset")


async def whose(tag: str) -> tuple[str, int, int]:
    """The mark it sees, then sets; its task; after a checkpoint."""
    seen = MARK.get()
    MARK.set(tag)
    await anyio.lowlevel.checkpoint()
    task = asyncio.current_task()
    assert task is not None
    return seen, id(task), id(task) if MARK.get() == tag else -1


def test_each_call_sees_its_callers_context_and_what_it_sets_stays_its_own() -> None:
    async def main() -> list[tuple[str, int, int]]:
        calls = ToolCalls()
        MARK.set("caller")
        try:
            seen = [await calls.call(whose(f"call {n}")) for n in range(3)]
        finally:
            calls.close()
        assert MARK.get() == "caller"  # nothing a call set reached the caller
        return seen

    seen = anyio.run(main)
    assert [mark for mark, _, _ in seen] == ["caller", "caller", "caller"]
    tasks = {task for _, task, _ in seen}
    assert len(tasks) == 1  # one task ran the three calls, one after another
    assert all(task == same for _, task, same in seen)


def test_a_call_runs_in_a_task_other_than_its_callers() -> None:
    async def main() -> None:
        calls = ToolCalls()
        caller = id(asyncio.current_task())
        try:
            _, task, _ = await calls.call(whose("x"))
        finally:
            calls.close()
        assert task != caller

    anyio.run(main)


def test_errors_reach_the_caller_and_the_next_call_still_runs() -> None:
    async def fails() -> None:
        await anyio.lowlevel.checkpoint()
        raise LookupError("missing")

    async def group() -> None:
        await anyio.lowlevel.checkpoint()
        raise BaseExceptionGroup("mixed", [LookupError("a"), KeyboardInterrupt()])

    async def value() -> int:
        await anyio.lowlevel.checkpoint()
        return 7

    async def main() -> None:
        calls = ToolCalls()
        try:
            with pytest.raises(LookupError, match="missing"):
                await calls.call(fails())
            assert await calls.call(value()) == 7
            with pytest.raises(BaseExceptionGroup) as raised:
                await calls.call(group())
            assert raised.value.message == "mixed"
            assert await calls.call(value()) == 7  # in a new task: the last one retired
        finally:
            calls.close()

    anyio.run(main)


def test_a_cancelled_caller_cancels_its_call_and_later_calls_run() -> None:
    ended: list[str] = []

    async def long() -> None:
        try:
            await anyio.sleep(5)
        finally:
            ended.append("long")

    async def value() -> int:
        await anyio.lowlevel.checkpoint()
        return 7

    async def main() -> None:
        calls = ToolCalls()
        try:
            assert await calls.call(value()) == 7
            with anyio.move_on_after(0.05) as scope:
                await calls.call(long())
            assert scope.cancelled_caught
            assert ended == ["long"]  # cancelled, and waited for
            assert await calls.call(value()) == 7
        finally:
            calls.close()

    anyio.run(main)
    assert set() == ABANDONED


def test_closing_ends_the_tasks_waiting_for_a_call() -> None:
    async def value() -> int:
        return 7

    async def main() -> None:
        calls = ToolCalls()
        before = len(asyncio.all_tasks())
        assert await calls.call(value()) == 7
        assert len(asyncio.all_tasks()) == before + 1  # the task waits for the next call
        calls.close()
        for _ in range(3):
            await anyio.lowlevel.checkpoint()
        assert len(asyncio.all_tasks()) == before

    anyio.run(main)


attempts: list[int] = []


@tool(timeout=0.1)
async def slow_once(value: int) -> int:
    """Sleeps past its timeout on its first attempt; returns ``value`` on the next."""
    attempts.append(value)
    if len(attempts) == 1:
        await anyio.sleep(5)
    await anyio.lowlevel.checkpoint()
    return value


@tool
async def double(value: int) -> int:
    """Returns twice ``value`` after a checkpoint."""
    await anyio.lowlevel.checkpoint()
    return 2 * value


def test_a_step_timed_out_is_retried_and_the_chain_goes_on() -> None:
    attempts.clear()
    compiled = compile_plan(
        {
            "steps": [
                {"id": 1, "tool": "slow_once", "args": {"value": 3}},
                {
                    "id": 2,
                    "tool": "double",
                    "args": {"value": "<step_1_result>"},
                    "depends_on": [1],
                },
                {
                    "id": 3,
                    "tool": "double",
                    "args": {"value": "<step_2_result>"},
                    "depends_on": [2],
                },
            ],
            "output": "<step_3_result>",
        },
        Registry([slow_once, double]),
    )
    result = run_plan_sync(
        compiled,
        limits=RunLimits(heartbeat_every=None),
        retry=RetryPolicy(retries=1, base_delay=0.01),
    )
    assert result.status == "succeeded"
    assert result.output == 12
    first = result.steps[1]
    assert [attempt.reason for attempt in first.attempt_log] == ["timeout", None]
    assert attempts == [3, 3]


def test_every_step_of_an_async_chain_and_fan_out_runs_once() -> None:
    ran: list[int] = []

    @tool(name="mark")
    async def mark(step: int) -> int:
        """Records ``step``."""
        ran.append(step)
        await anyio.lowlevel.checkpoint()
        return step

    steps: list[dict[str, Any]] = [{"id": 1, "tool": "mark", "args": {"step": 1}}]
    steps += [
        {"id": n, "tool": "mark", "args": {"step": n}, "depends_on": [n - 1]} for n in range(2, 30)
    ]
    steps += [
        {"id": n, "tool": "mark", "args": {"step": n}, "depends_on": [29]} for n in range(30, 60)
    ]
    steps.append(
        {"id": 60, "tool": "mark", "args": {"step": 60}, "depends_on": list(range(30, 60))}
    )
    compiled = compile_plan({"steps": steps}, Registry([mark]))
    result = run_plan_sync(compiled)
    assert result.status == "succeeded"
    assert sorted(ran) == list(range(1, 61))
