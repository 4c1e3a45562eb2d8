"""The deadline ends the run even when a step ignores cancellation: an inline tool that
blocks the event loop, an async tool that swallows its cancellation, a sync tool in a
worker thread. The step ends ``cancelled`` (never ``succeeded``) and the run ``timed_out``."""

from __future__ import annotations

import contextlib
import contextvars
import time

import anyio
import anyio.lowlevel
import pytest

from plandag import RunLimits, compile_plan, run_plan, run_plan_sync, tool
from plandag.scheduler.overrun import ABANDONED, GRACE_S, await_abandonable
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


@tool
async def shielded(seconds: float) -> float:
    """Holds an anyio shield for ``seconds``: no cancellation reaches it meanwhile."""
    with anyio.CancelScope(shield=True):
        await anyio.sleep(seconds)
    return seconds


def test_an_async_tool_holding_a_shield_is_abandoned_after_the_grace() -> None:
    compiled = compile_plan(
        {"steps": [{"id": 1, "tool": "shielded", "args": {"seconds": 4.0}}]},
        Registry([shielded]),
    )
    result = run_plan_sync(compiled, limits=RunLimits(max_seconds=0.3, heartbeat_every=None))
    assert (result.status, result.stop_reason) == ("timed_out", "deadline")
    assert (result.steps[1].status, result.steps[1].reason) == ("cancelled", "deadline")
    assert result.duration_s < 3.0  # the 0.3 s cap plus the 1 s grace, on a shared machine


def test_a_timeout_waits_for_the_shield_a_tool_holds_then_cancels_it() -> None:
    reached: list[str] = []

    @tool(name="careful", timeout=0.05)
    async def careful() -> str:
        """Finishes a shielded part, then sleeps long."""
        with anyio.CancelScope(shield=True):
            await anyio.sleep(0.2)
            reached.append("shielded part done")
        await anyio.sleep(5)
        reached.append("never")
        return "late"

    compiled = compile_plan(
        {"steps": [{"id": 1, "tool": "careful", "args": {}}]}, Registry([careful])
    )
    result = run_plan_sync(compiled)  # the default limits: a deadline, so the call is abandonable
    record = result.steps[1]
    assert (record.status, record.reason) == ("failed", "timeout")
    assert reached == ["shielded part done"]  # the shield was not pierced, nor the rest run


def test_an_abandonable_call_returns_its_value_and_raises_its_error() -> None:
    async def value() -> int:
        await anyio.lowlevel.checkpoint()
        return 7

    async def error() -> None:
        await anyio.lowlevel.checkpoint()
        raise LookupError("missing")

    async def main() -> None:
        assert await await_abandonable(value()) == 7
        with pytest.raises(LookupError, match="missing"):
            await await_abandonable(error())
        # cancelled from outside: the call is cancelled with it, and the cancellation goes on
        with anyio.move_on_after(0.05) as scope:
            await await_abandonable(anyio.sleep(5))
        assert scope.cancelled_caught

    anyio.run(main)
    assert set() == ABANDONED


@tool(cost_estimate_usd=0.25)
async def stubborn_paid(seconds: float) -> float:
    """Swallows every cancellation for ``seconds``, then returns; costs its estimate."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with contextlib.suppress(BaseException):
            await anyio.sleep(0.02)
    return seconds


@tool
async def nap(seconds: float) -> float:
    """Sleeps ``seconds``."""
    await anyio.sleep(seconds)
    return seconds


def test_stubborn_steps_of_a_fan_out_are_abandoned_closed_and_their_late_results_dropped() -> None:
    steps: list[dict[str, object]] = [{"id": 1, "tool": "quick", "args": {"value": 1}}]
    steps += [
        {"id": n, "tool": "stubborn_paid", "args": {"seconds": 3.0}, "depends_on": [1]}
        for n in (2, 3)
    ]
    steps += [{"id": 4, "tool": "nap", "args": {"seconds": 5}, "depends_on": [1]}]
    steps += [{"id": 5, "tool": "quick", "args": {"value": 5}, "depends_on": [2, 3, 4]}]
    compiled = compile_plan({"steps": steps}, Registry([quick, stubborn_paid, nap]))
    seen: list[object] = []

    async def main() -> object:
        result = await run_plan(
            compiled,
            observers=[seen.append],
            limits=RunLimits(max_seconds=0.3, heartbeat_every=None),
        )
        assert len(ABANDONED) == 2
        finished = len(seen)
        await anyio.sleep(2.2)  # the stubborn calls end meanwhile, their steps long closed
        assert len(seen) == finished  # nothing sent after RunFinished
        return result

    result = anyio.run(main)
    assert set() == ABANDONED
    assert (result.status, result.stop_reason) == ("timed_out", "deadline")  # type: ignore[attr-defined]
    # the 0.3 s cap plus the 1 s grace, not the 3 s calls (generous: the machine is shared)
    assert result.duration_s < 2.5  # type: ignore[attr-defined]
    for n in (2, 3, 4):
        record = result.steps[n]  # type: ignore[attr-defined]
        assert (record.status, record.reason, record.result) == ("cancelled", "deadline", None)
        assert record.attempts == 1
        assert record.attempt_log[0].ended_at is not None  # the attempt was closed
    assert (result.steps[5].status, result.steps[5].reason) == ("skipped", "deadline")  # type: ignore[attr-defined]
    assert result.spent_usd == 0.5  # type: ignore[attr-defined]  # each abandoned call charged its estimate
    assert [type(event).__name__ for event in seen].count("StepCancelled") == 3


counter: contextvars.ContextVar[int] = contextvars.ContextVar("counter", default=0)


@tool
async def bump() -> int:
    """Sets ``counter`` one higher than it sees it; returns what it set."""
    counter.set(counter.get() + 1)
    return counter.get()


def test_what_an_async_tool_sets_in_its_context_stays_its_own() -> None:
    compiled = compile_plan(
        {
            "steps": [
                {"id": n, "tool": "bump", "args": {}, **({"depends_on": [n - 1]} if n > 1 else {})}
                for n in range(1, 6)
            ]
        },
        Registry([bump]),
    )
    result = run_plan_sync(compiled)  # the default limits: a deadline
    assert [result.steps[n].result for n in range(1, 6)] == [1] * 5
