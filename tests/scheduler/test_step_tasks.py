"""The task group of a run's steps (plandag.scheduler.tasks): leaving it waits for every
task; a cancelled host cancels its tasks the anyio way (shields respected) and waits for
them; a task started after a cancellation is cancelled; an error cancels the others and
reaches the host in a group; on trio the run still works (anyio's own task group)."""

from __future__ import annotations

import time

import anyio
import pytest

from plandag import RunLimits, compile_plan, run_plan, run_plan_sync, tool
from plandag.scheduler.tasks import StepTasks, step_tasks
from plandag.tools.registry import Registry


def test_leaving_waits_for_every_task_and_the_tasks_they_start() -> None:
    ended: list[int] = []

    async def main() -> None:
        async def nap(n: int) -> None:
            await anyio.sleep(0.001 * (n % 5))
            if n < 10:
                group.start_soon(nap, n + 10)
            ended.append(n)

        async with step_tasks() as group:
            assert isinstance(group, StepTasks)
            for n in range(10):
                group.start_soon(nap, n)
        assert sorted(ended) == list(range(20))

    anyio.run(main)


def test_a_cancelled_host_cancels_its_tasks_the_anyio_way_and_waits_for_them() -> None:
    seen: list[str] = []

    async def main() -> None:
        async def sleeper() -> None:
            try:
                await anyio.sleep(5)
            except anyio.get_cancelled_exc_class():
                seen.append("cancelled")
                raise

        async def shielded() -> None:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.2)
                seen.append("shielded part done")
            await anyio.sleep(5)
            seen.append("never")

        with anyio.move_on_after(0.05) as scope:
            async with step_tasks() as group:
                for _ in range(3):
                    group.start_soon(sleeper)
                group.start_soon(shielded)
        assert scope.cancelled_caught
        assert sorted(seen) == ["cancelled"] * 3 + ["shielded part done"]
        assert group.cancelled

    anyio.run(main)


def test_a_task_started_after_a_cancellation_is_cancelled_at_its_first_checkpoint() -> None:
    seen: list[str] = []

    async def main() -> None:
        async def late() -> None:
            seen.append("started")
            await anyio.sleep(5)
            seen.append("never")

        async with step_tasks() as group:
            assert isinstance(group, StepTasks)
            group.cancel()
            group.start_soon(late)
        assert seen == ["started"]

    anyio.run(main)


def test_an_error_cancels_the_other_tasks_and_reaches_the_host_in_a_group() -> None:
    seen: list[str] = []

    async def main() -> None:
        async def fails() -> None:
            await anyio.sleep(0.01)
            raise LookupError("missing")

        async def sleeper() -> None:
            try:
                await anyio.sleep(5)
            except anyio.get_cancelled_exc_class():
                seen.append("cancelled")
                raise

        async def both() -> None:
            async with step_tasks() as group:
                group.start_soon(sleeper)
                group.start_soon(fails)

        with pytest.raises(BaseExceptionGroup) as raised:
            await both()
        assert raised.group_contains(LookupError, match="missing")
        assert seen == ["cancelled"]

    anyio.run(main)


@tool
async def nap(seconds: float) -> float:
    """Sleeps ``seconds``."""
    await anyio.sleep(seconds)
    return seconds


@tool
def root() -> int:
    """Returns at once."""
    return 1


REGISTRY = Registry([nap, root])


def fan_out(width: int, seconds: float) -> object:
    steps = [{"id": 1, "tool": "root", "args": {}}]
    steps += [
        {"id": n, "tool": "nap", "args": {"seconds": seconds}, "depends_on": [1]}
        for n in range(2, width + 2)
    ]
    steps.append(
        {"id": width + 2, "tool": "root", "args": {}, "depends_on": list(range(2, width + 2))}
    )
    return compile_plan({"steps": steps}, REGISTRY)


def test_a_fan_out_cancelled_from_outside_ends_its_running_steps_interrupted() -> None:
    compiled = fan_out(20, 5.0)

    async def main() -> object:
        with anyio.move_on_after(0.2):
            return await run_plan(compiled)  # type: ignore[arg-type]
        return None

    result = anyio.run(main)
    assert result is not None
    assert result.status == "interrupted"  # type: ignore[attr-defined]
    steps = result.steps  # type: ignore[attr-defined]
    for n in range(2, 22):
        assert (steps[n].status, steps[n].reason) == ("cancelled", "interrupted")
    assert (steps[22].status, steps[22].reason) == ("skipped", "interrupted")


def test_a_fan_out_at_its_deadline_cancels_running_steps_and_skips_the_rest() -> None:
    result = run_plan_sync(fan_out(20, 5.0), limits=RunLimits(max_seconds=0.2))  # type: ignore[arg-type]
    assert (result.status, result.stop_reason) == ("timed_out", "deadline")
    for n in range(2, 22):
        assert (result.steps[n].status, result.steps[n].reason) == ("cancelled", "deadline")
    assert (result.steps[22].status, result.steps[22].reason) == ("skipped", "deadline")


def test_a_fan_out_runs_on_trio_with_anyio_task_groups() -> None:
    compiled = fan_out(10, 0.01)

    async def main() -> str:
        result = await run_plan(compiled)  # type: ignore[arg-type]
        return result.status

    assert anyio.run(main, backend="trio") == "succeeded"


def test_a_keyboard_interrupt_in_a_task_goes_on_to_the_event_loop() -> None:
    async def main() -> None:
        async def interrupted() -> None:
            await anyio.sleep(0.01)
            raise KeyboardInterrupt

        async with step_tasks() as group:
            group.start_soon(interrupted)
            group.start_soon(anyio.sleep, 5)

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        anyio.run(main)
    assert time.monotonic() - started < 4  # the sleeping task did not hold it up
