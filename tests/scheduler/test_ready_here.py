"""Ready steps of inline tools (sync code run on the event loop, which never suspends)
run one after another in a task already running steps, not in a task each: every step
still runs once, a step that may suspend still gets a task of its own, and neither a
retry's backoff nor a stop holds them up or lets them start."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import anyio

from plandag import RunLimits, compile_plan, run_plan_sync, tool
from plandag.brakes.retry import RetryPolicy
from plandag.errors import TransientStepError
from plandag.scheduler import events
from plandag.tools.registry import Registry

ran: list[tuple[int, object, float]] = []
"""(step, the task that ran it, time.monotonic() when it ended); the task itself, not its
id: a task that ended may be freed and its id given to a later one."""
failures: dict[int, int] = {}


def _mark(step: int) -> int:
    task = asyncio.current_task()
    ran.append((step, task, time.monotonic()))
    return step


@tool(inline=True)
def quick(step: int) -> int:
    """Records ``step``; inline."""
    return _mark(step)


@tool(inline=True)
def flaky(step: int) -> int:
    """Fails once with a transient error, then records ``step``; inline."""
    failures[step] = failures.get(step, 0) + 1
    if failures[step] == 1:
        raise TransientStepError("busy")
    return _mark(step)


@tool(inline=True)
def block(step: int, seconds: float) -> int:
    """Blocks the event loop ``seconds`` (declared inline, which it should not be)."""
    time.sleep(seconds)
    return _mark(step)


@tool
async def nap(step: int, seconds: float) -> int:
    """Sleeps ``seconds``, then records ``step``."""
    await anyio.sleep(seconds)
    return _mark(step)


REGISTRY = Registry([quick, flaky, block, nap])


def fan_out(children: list[dict[str, Any]]) -> Any:
    steps = [{"id": 1, "tool": "quick", "args": {"step": 1}}]
    steps += [{**child, "depends_on": [1]} for child in children]
    return compile_plan({"steps": steps}, REGISTRY)


def observed(compiled: Any, **options: Any) -> Any:
    seen: list[events.Event] = []  # an observer: the run is not a plain in-order one
    return run_plan_sync(compiled, observers=[seen.append], **options)


def setup_function() -> None:
    ran.clear()
    failures.clear()


def test_a_fan_out_of_inline_steps_runs_each_once_in_the_task_that_made_them_ready() -> None:
    children = [{"id": n, "tool": "quick", "args": {"step": n}} for n in range(2, 52)]
    result = observed(fan_out(children))
    assert result.status == "succeeded"
    assert sorted(step for step, _, _ in ran) == list(range(1, 52))
    assert len({task for _, task, _ in ran}) == 1  # no task spawned for them


def test_a_step_that_may_suspend_still_runs_beside_them() -> None:
    children = [{"id": 2, "tool": "nap", "args": {"step": 2, "seconds": 0.3}}]
    children += [{"id": n, "tool": "quick", "args": {"step": n}} for n in range(3, 8)]
    result = observed(fan_out(children))
    assert result.status == "succeeded"
    ended = {step: at for step, _, at in ran}
    assert max(ended[n] for n in range(3, 8)) < ended[2]  # not queued behind the nap
    tasks = {step: task for step, task, _ in ran}
    assert tasks[2] != tasks[3]


def test_a_retry_backoff_does_not_hold_up_the_steps_queued_behind_it() -> None:
    children = [{"id": 2, "tool": "flaky", "args": {"step": 2}}]
    children += [{"id": n, "tool": "quick", "args": {"step": n}} for n in range(3, 8)]
    retry = RetryPolicy(retries=1, base_delay=0.3, jitter=False)
    result = observed(fan_out(children), retry=retry)
    assert result.status == "succeeded"
    assert [attempt.retry for attempt in result.steps[2].attempt_log] == ["retried", None]
    ended = {step: at for step, _, at in ran}
    assert max(ended[n] for n in range(3, 8)) < ended[2]
    assert sorted(ended) == list(range(1, 8))


def test_steps_still_queued_when_the_run_stops_are_skipped_never_started() -> None:
    children = [{"id": 2, "tool": "block", "args": {"step": 2, "seconds": 0.4}}]
    children += [{"id": n, "tool": "quick", "args": {"step": n}} for n in range(3, 8)]
    result = observed(fan_out(children), limits=RunLimits(max_seconds=0.2, heartbeat_every=None))
    assert (result.status, result.stop_reason) == ("timed_out", "deadline")
    assert (result.steps[2].status, result.steps[2].reason) == ("cancelled", "deadline")
    for n in range(3, 8):
        assert (result.steps[n].status, result.steps[n].reason) == ("skipped", "deadline")
    assert sorted(step for step, _, _ in ran) == [1, 2]  # the blocked step returned late


def test_a_chain_after_the_fan_out_runs_each_step_once() -> None:
    steps: list[dict[str, Any]] = [{"id": 1, "tool": "quick", "args": {"step": 1}}]
    steps += [
        {"id": n, "tool": "quick", "args": {"step": n}, "depends_on": [1]} for n in range(2, 12)
    ]
    steps += [
        {
            "id": 12,
            "tool": "nap",
            "args": {"step": 12, "seconds": 0.01},
            "depends_on": list(range(2, 12)),
        },
        {"id": 13, "tool": "quick", "args": {"step": 13}, "depends_on": [12]},
    ]
    result = observed(compile_plan({"steps": steps, "output": "<step_13_result>"}, REGISTRY))
    assert result.status == "succeeded"
    assert result.output == 13
    assert sorted(step for step, _, _ in ran) == list(range(1, 14))
