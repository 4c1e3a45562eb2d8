"""The baseline scheduler: a bare anyio loop that just starts ready tasks.

It does the least an event-driven DAG runner can do and still be one: a count of unfinished
parents per step; when a step ends, each child's count drops by one and every child at zero
is started in the task group at once. No argument validation, no references, no records,
no checks, no limits, no error handling. The difference between it and
:func:`plandag.scheduler.run_plan` on the same graph is plandag's per-step cost.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from anyio.abc import TaskGroup

from benchmarks.dags import BenchmarkDag

__all__ = ["BareRun", "run_bare"]

StepFunction = Callable[[int], Awaitable[Any]]


class BareRun:
    """One run of a :class:`BenchmarkDag` with the bare loop.

    Attributes:
        started: ``time.perf_counter()`` at each step's start, by id.
        ended: ``time.perf_counter()`` at each step's end, by id.
    """

    def __init__(self, dag: BenchmarkDag, step: StepFunction) -> None:
        self.step = step
        self.children = dag.children()
        self.remaining = {step_id: len(parents) for step_id, parents in dag.parents.items()}
        self.roots = [step_id for step_id, parents in dag.parents.items() if not parents]
        self.started: dict[int, float] = {}
        self.ended: dict[int, float] = {}
        self.task_group: TaskGroup | None = None

    async def run(self) -> None:
        """Run every step, parents before children, as soon as they are ready."""
        async with anyio.create_task_group() as task_group:
            self.task_group = task_group
            for step_id in self.roots:
                task_group.start_soon(self.run_step, step_id)

    async def run_step(self, step_id: int) -> None:
        """Run one step, then start each child whose parents have all ended."""
        self.started[step_id] = time.perf_counter()
        await self.step(step_id)
        self.ended[step_id] = time.perf_counter()
        task_group = self.task_group
        assert task_group is not None
        remaining = self.remaining
        for child in self.children[step_id]:
            remaining[child] -= 1
            if remaining[child] == 0:
                task_group.start_soon(self.run_step, child)

    def durations(self) -> dict[int, float]:
        """Each step's measured duration in seconds, by id."""
        return {step_id: self.ended[step_id] - start for step_id, start in self.started.items()}


async def run_bare(dag: BenchmarkDag, step: StepFunction) -> BareRun:
    """Run ``dag`` with the bare loop, calling ``await step(step_id)`` for every step.

    Returns:
        The finished :class:`BareRun` (its start and end times per step).
    """
    bare = BareRun(dag, step)
    await bare.run()
    return bare
