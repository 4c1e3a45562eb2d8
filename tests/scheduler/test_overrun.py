"""The deadline ends the run even when a step ignores cancellation: an inline tool that
blocks the event loop, an async tool that swallows its cancellation, a sync tool in a
worker thread. The step ends ``cancelled`` (never ``succeeded``) and the run ``timed_out``."""

from __future__ import annotations

import contextlib
import time

import anyio
import pytest

from plandag import RunLimits, compile_plan, run_plan_sync, tool
from plandag.scheduler.overrun import ABANDONED, GRACE_S
from plandag.tools.registry import Registry


@tool(inline=True)
def block(seconds: float) -> float:
    """Blocks the event loop (declared inline, which it should not be)."""
    time.sleep(seconds)
    return seconds


@tool
async def stubborn(seconds: float) -> float:
    """Swallows every cancellation for ``seconds``, then returns."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with contextlib.suppress(BaseException):
            await anyio.sleep(0.02)
    return seconds


@tool
def threaded(seconds: float) -> float:
    """Blocks its worker thread."""
    time.sleep(seconds)
    return seconds


@tool
def quick(value: int) -> int:
    """Returns at once."""
    return value


REGISTRY = Registry([block, stubborn, threaded, quick])


def run(tool_name: str, seconds: float) -> tuple[object, float]:
    compiled = compile_plan(
        {
            "steps": [
                {"id": 1, "tool": tool_name, "args": {"seconds": seconds}},
                {"id": 2, "tool": "quick", "args": {"value": 1}, "depends_on": [1]},
            ]
        },
        REGISTRY,
    )
    started = time.monotonic()
    result = run_plan_sync(compiled, limits=RunLimits(max_seconds=0.3, heartbeat_every=None))
    return result, time.monotonic() - started


@pytest.mark.parametrize("tool_name", ["block", "stubborn", "threaded"])
def test_a_step_that_ignores_cancellation_ends_cancelled_and_the_run_timed_out(
    tool_name: str,
) -> None:
    result, _ = run(tool_name, 1.0)
    assert (result.status, result.stop_reason) == ("timed_out", "deadline")  # type: ignore[attr-defined]
    first, second = result.steps[1], result.steps[2]  # type: ignore[attr-defined]
    assert (first.status, first.reason) == ("cancelled", "deadline")
    assert first.result is None  # a late result is never kept
    assert (second.status, second.reason) == ("skipped", "deadline")


def test_an_async_tool_that_swallows_cancellation_is_abandoned_after_the_grace() -> None:
    # It would hold the run 4 s; the run ends at its 0.3 s cap plus the 1 s grace period
    # (the bound is generous: the machine is shared). The event loop's own shutdown then
    # waits for the abandoned task, which is why a command line ends the process instead.
    result, _ = run("stubborn", 4.0)
    assert result.status == "timed_out"  # type: ignore[attr-defined]
    assert GRACE_S == 1.0
    assert result.duration_s < 3.0  # type: ignore[attr-defined]
    assert set() == ABANDONED  # it ended when the loop shut down
