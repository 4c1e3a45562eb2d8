"""Ready steps that may suspend (async tools) made ready together wait in a queue the run's
tasks take from, with a standby task to take the next whenever the running ones are all
suspended: steps that never suspend run without a task each, steps that suspend still all
run at once, and steps still waiting when the run stops are skipped, never started."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import anyio

from plandag import RunLimits, compile_plan, run_plan, tool
from plandag.tools.registry import Registry
from tests.scheduler.test_ready_here import observed

tasks_of: dict[int, object] = {}
"""The task that ran each step (the task itself: a freed task's id may be reused)."""
started: list[int] = []
everyone_in = anyio.Event()
WIDTH = 40


@tool(inline=True)
def root() -> int:
    """Starts the fan-out; inline."""
    return 0


@tool
async def instant(step: int) -> int:
    """Records the task it runs in, without suspending."""
    tasks_of[step] = asyncio.current_task()
    return step


@tool
async def rendezvous(step: int) -> int:
    """Waits (at most 5 s) until all ``WIDTH`` steps of its kind have started."""
    tasks_of[step] = anyio.get_current_task().id  # all alive at once: ids are distinct
    started.append(step)
    if len(started) == WIDTH:
        everyone_in.set()
    with anyio.fail_after(5):
        await everyone_in.wait()
    return step


@tool
async def hog(step: int, seconds: float) -> int:
    """Blocks the event loop ``seconds`` without suspending (as a careless async tool does)."""
    time.sleep(seconds)  # noqa: ASYNC251 (the point of this tool)
    tasks_of[step] = asyncio.current_task()
    return step


REGISTRY = Registry([root, instant, rendezvous, hog])


def fan_out(children: list[dict[str, Any]]) -> Any:
    steps: list[dict[str, Any]] = [{"id": 1, "tool": "root", "args": {}}]
    steps += [{**child, "depends_on": [1]} for child in children]
    return compile_plan({"steps": steps}, REGISTRY)


def setup_function() -> None:
    global everyone_in
    tasks_of.clear()
    started.clear()
    everyone_in = anyio.Event()


def test_a_fan_out_of_steps_that_never_suspend_runs_them_without_a_task_each() -> None:
    children = [{"id": n, "tool": "instant", "args": {"step": n}} for n in range(2, 52)]
    result = observed(fan_out(children))
    assert result.status == "succeeded"
    assert sorted(tasks_of) == list(range(2, 52))
    assert len({id(task) for task in tasks_of.values()}) <= 2  # not 50


def test_a_fan_out_of_steps_that_suspend_runs_them_all_at_once() -> None:
    children = [{"id": n, "tool": "rendezvous", "args": {"step": n}} for n in range(2, WIDTH + 2)]
    result = observed(fan_out(children), limits=RunLimits(max_seconds=30))
    assert result.status == "succeeded", {
        n: record.detail for n, record in result.steps.items() if record.status != "succeeded"
    }
    assert sorted(started) == list(range(2, WIDTH + 2))
    assert len(set(tasks_of.values())) == WIDTH  # each held a task of its own


def test_a_fan_out_of_steps_that_suspend_runs_them_all_at_once_on_trio() -> None:
    children = [{"id": n, "tool": "rendezvous", "args": {"step": n}} for n in range(2, WIDTH + 2)]
    compiled = fan_out(children)

    async def main() -> str:
        result = await run_plan(compiled, observers=[lambda event: None])
        return result.status

    assert anyio.run(main, backend="trio") == "succeeded"
    assert sorted(started) == list(range(2, WIDTH + 2))


def test_steps_still_waiting_when_the_run_stops_are_skipped_never_started() -> None:
    children = [{"id": 2, "tool": "hog", "args": {"step": 2, "seconds": 0.4}}]
    children += [{"id": n, "tool": "instant", "args": {"step": n}} for n in range(3, 8)]
    result = observed(fan_out(children), limits=RunLimits(max_seconds=0.2, heartbeat_every=None))
    assert (result.status, result.stop_reason) == ("timed_out", "deadline")
    assert (result.steps[2].status, result.steps[2].reason) == ("cancelled", "deadline")
    for n in range(3, 8):
        assert (result.steps[n].status, result.steps[n].reason) == ("skipped", "deadline")
        assert result.steps[n].attempts == 0
    assert sorted(tasks_of) == [2]  # the hog returned late; nothing else started
