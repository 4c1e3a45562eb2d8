"""Scheduler benchmarks: per-step dispatch overhead and makespan over the critical path.

Both compare :func:`plandag.scheduler.run_plan` with the bare anyio loop of
``benchmarks/bare_anyio.py`` on the same graph (``benchmarks/dags.py``):

* :func:`measure_dispatch`: chains and wide graphs of no-op steps; the run time divided by
  the number of steps is the cost of dispatching one step (compile time is measured apart);
* :func:`measure_makespan`: a seeded random DAG of sleeping steps; the run's makespan divided
  by the critical path computed from the steps' *measured* durations
  (:func:`plandag.dag.graph.critical_path`). 1.0 means no step ever waited for the scheduler
  once its parents were done.

Every figure is a list with one value per repetition; ``benchmarks/run.py`` reports medians.
"""

from __future__ import annotations

import dataclasses
import gc
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import anyio
import networkx as nx

from benchmarks.bare_anyio import run_bare
from benchmarks.dags import BenchmarkDag, chain, plan_document, random_dag, wide
from plandag.compiler import CompiledPlan, compile_plan
from plandag.dag.graph import critical_path
from plandag.scheduler import RunResult, run_plan
from plandag.tools.base import tool
from plandag.tools.registry import Registry

__all__ = [
    "DispatchFigures",
    "MakespanFigures",
    "Shape",
    "ToolKind",
    "benchmark_registry",
    "measure_dispatch",
    "measure_makespan",
]

Shape = Literal["chain", "wide"]
ToolKind = Literal["inline", "async"]


def _noop_inline() -> None:
    """Do nothing (a sync tool run on the event loop)."""


async def _noop_async() -> None:
    """Do nothing (an async tool; no checkpoint, like the bare loop's step)."""


async def _sleep_for(seconds: float) -> float:
    """Sleep ``seconds`` on the event loop; return them."""
    await anyio.sleep(seconds)
    return seconds


noop_inline = tool(name="noop_inline", inline=True)(_noop_inline)
noop_async = tool(name="noop_async")(_noop_async)
sleep_for = tool(name="sleep_for")(_sleep_for)

_TOOL_NAMES: dict[ToolKind, str] = {"inline": "noop_inline", "async": "noop_async"}


def benchmark_registry() -> Registry:
    """A registry holding only the benchmark tools: noop_inline, noop_async, sleep_for."""
    return Registry([noop_inline, noop_async, sleep_for])


def _compile(dag: BenchmarkDag, tool_name: str, *, with_durations: bool) -> CompiledPlan:
    document = plan_document(dag, tool_name, with_durations=with_durations)
    return compile_plan(document, benchmark_registry(), max_steps=dag.size)


def _bare_step(kind: ToolKind) -> Callable[[int], Awaitable[None]]:
    if kind == "inline":

        async def inline_step(step_id: int) -> None:
            _noop_inline()

        return inline_step

    async def async_step(step_id: int) -> None:
        await _noop_async()

    return async_step


@dataclasses.dataclass
class DispatchFigures:
    """Seconds per repetition for one graph shape and tool kind.

    Attributes:
        shape: ``chain`` (``steps`` in a row) or ``wide`` (1 root, children, 1 sink).
        tool: ``inline`` (sync tool on the event loop) or ``async``.
        steps: steps in the graph.
        compile_s: :func:`compile_plan` time per repetition, seconds.
        plandag_s: :func:`run_plan` time per repetition, seconds (compile excluded).
        bare_s: the bare anyio loop's time per repetition, seconds.
    """

    shape: Shape
    tool: ToolKind
    steps: int
    compile_s: list[float] = dataclasses.field(default_factory=list)
    plandag_s: list[float] = dataclasses.field(default_factory=list)
    bare_s: list[float] = dataclasses.field(default_factory=list)

    def per_step_us(self, values: list[float]) -> float:
        """The median of ``values`` in microseconds per step."""
        return statistics.median(values) / self.steps * 1e6


async def _time_plandag(compiled: CompiledPlan) -> tuple[float, RunResult]:
    started = time.perf_counter()
    result = await run_plan(compiled)
    elapsed = time.perf_counter() - started
    if not result.succeeded:
        failed = result.failed_steps()
        raise RuntimeError(f"benchmark run failed: {failed[:1]}")
    return elapsed, result


def measure_dispatch(
    shape: Shape, kind: ToolKind, size: int = 1000, repetitions: int = 5
) -> DispatchFigures:
    """Time plandag and the bare loop on a graph of no-op steps, ``repetitions`` times each.

    Args:
        shape: ``chain`` (``size`` steps) or ``wide`` (1 root, ``size`` children, 1 sink).
        kind: ``inline`` (``@tool(inline=True)`` sync no-op) or ``async`` (async no-op).
        size: chain length or graph width.
        repetitions: runs of each (after one warm-up run of each); the two runners
            alternate so that noise hits both.

    Returns:
        The :class:`DispatchFigures`.

    Raises:
        RuntimeError: a plandag run did not succeed (the benchmark would be meaningless).
    """
    dag = chain(size) if shape == "chain" else wide(size)
    tool_name = _TOOL_NAMES[kind]
    figures = DispatchFigures(shape, kind, dag.size)
    bare_step = _bare_step(kind)
    for repetition in range(repetitions + 1):  # the first one warms up and is not kept
        gc.collect()
        started = time.perf_counter()
        compiled = _compile(dag, tool_name, with_durations=False)
        compile_s = time.perf_counter() - started

        async def both(compiled: CompiledPlan = compiled) -> tuple[float, float]:
            gc.collect()
            plandag_s, _ = await _time_plandag(compiled)
            gc.collect()
            started = time.perf_counter()
            await run_bare(dag, bare_step)
            return plandag_s, time.perf_counter() - started

        plandag_s, bare_s = anyio.run(both)
        if repetition == 0:
            continue
        figures.compile_s.append(compile_s)
        figures.plandag_s.append(plandag_s)
        figures.bare_s.append(bare_s)
    return figures


@dataclasses.dataclass
class MakespanFigures:
    """Makespans and measured critical paths per repetition, seconds.

    Attributes:
        steps: steps in the random DAG.
        edges: dependency edges in it.
        seed: its seed.
        planned_critical_path_s: the critical path of the drawn durations (before running).
        plandag_makespan_s: wall time of :func:`run_plan`, per repetition.
        plandag_critical_path_s: critical path of the durations plandag measured
            (``StepRecord.duration_s``), per repetition.
        bare_makespan_s: wall time of the bare loop, per repetition.
        bare_critical_path_s: critical path of the durations the bare loop measured.
    """

    steps: int
    edges: int
    seed: int
    planned_critical_path_s: float
    plandag_makespan_s: list[float] = dataclasses.field(default_factory=list)
    plandag_critical_path_s: list[float] = dataclasses.field(default_factory=list)
    bare_makespan_s: list[float] = dataclasses.field(default_factory=list)
    bare_critical_path_s: list[float] = dataclasses.field(default_factory=list)

    @staticmethod
    def ratios(makespans: list[float], paths: list[float]) -> list[float]:
        """Makespan over critical path, per repetition."""
        return [makespan / path for makespan, path in zip(makespans, paths, strict=True)]

    def plandag_ratios(self) -> list[float]:
        """plandag's makespan over its measured critical path, per repetition."""
        return self.ratios(self.plandag_makespan_s, self.plandag_critical_path_s)

    def bare_ratios(self) -> list[float]:
        """The bare loop's makespan over its measured critical path, per repetition."""
        return self.ratios(self.bare_makespan_s, self.bare_critical_path_s)


def _graph_of(dag: BenchmarkDag) -> Any:
    graph = nx.DiGraph()
    graph.add_nodes_from(dag.parents)
    graph.add_edges_from(
        (parent, step_id) for step_id, parents in dag.parents.items() for parent in parents
    )
    return graph


def measure_makespan(size: int = 1000, seed: int = 2024, repetitions: int = 3) -> MakespanFigures:
    """Run a random DAG of sleeping steps with plandag and with the bare loop.

    Each step of :func:`benchmarks.dags.random_dag` sleeps its duration
    (``await anyio.sleep(d)``). The ratio makespan / critical path uses the durations each
    runner *measured* for its own run, so a slow sleep (a late timer) lengthens the critical
    path too and only time spent between a parent's end and a child's start counts against
    the scheduler.

    Args:
        size: steps in the DAG.
        seed: its seed.
        repetitions: runs of each runner, alternating.

    Returns:
        The :class:`MakespanFigures`.

    Raises:
        RuntimeError: a plandag run did not succeed.
    """
    dag = random_dag(size, seed)
    graph = _graph_of(dag)
    _, planned = critical_path(graph, dag.durations)
    figures = MakespanFigures(size, dag.edge_count(), seed, planned)
    compiled = _compile(dag, "sleep_for", with_durations=True)

    async def bare_step(step_id: int) -> None:
        await anyio.sleep(dag.durations[step_id])

    async def both() -> None:
        gc.collect()
        makespan, result = await _time_plandag(compiled)
        durations = {step_id: record.duration_s or 0.0 for step_id, record in result.steps.items()}
        figures.plandag_makespan_s.append(makespan)
        figures.plandag_critical_path_s.append(critical_path(compiled.graph, durations)[1])
        gc.collect()
        started = time.perf_counter()
        bare = await run_bare(dag, bare_step)
        figures.bare_makespan_s.append(time.perf_counter() - started)
        figures.bare_critical_path_s.append(critical_path(graph, bare.durations())[1])

    for _ in range(repetitions):
        anyio.run(both)
    return figures


@dataclasses.dataclass
class BrakesFigures:
    """Per-repetition run times of the same plan without and with every brake, seconds.

    Attributes:
        shape: ``chain`` or ``wide``.
        steps: steps in the graph.
        core_s: :func:`run_plan` with no limits, no retry policy and no observer.
        brakes_s: :func:`run_plan` with a retry policy, a wall-clock cap, cost and token
            caps, a heartbeat every 10 s, stall detection and one no-op observer (the
            heartbeat only runs for runs with observers).
    """

    shape: Shape
    steps: int
    core_s: list[float] = dataclasses.field(default_factory=list)
    brakes_s: list[float] = dataclasses.field(default_factory=list)

    def per_step_us(self, values: list[float]) -> float:
        """The median of ``values`` in microseconds per step."""
        return statistics.median(values) / self.steps * 1e6


def measure_brakes(shape: Shape, size: int = 1000, repetitions: int = 5) -> BrakesFigures:
    """The scheduler's per-step cost with retries, budgets and heartbeat on, against the
    core scheduler without them, on the same async no-op graph.

    Runs alternate (core, brakes) after one warm-up pair so noise hits both.
    """
    from plandag.brakes.retry import RetryPolicy
    from plandag.scheduler import RunLimits

    dag = chain(size) if shape == "chain" else wide(size)
    compiled = _compile(dag, _TOOL_NAMES["async"], with_durations=False)
    figures = BrakesFigures(shape, dag.size)
    limits = RunLimits(
        max_seconds=3600.0,
        max_cost_usd=1_000_000.0,
        max_tokens=10**12,
        heartbeat_every=10.0,
        stall_after=600.0,
    )

    def observer(event: object) -> None:
        return None

    async def pair() -> tuple[float, float]:
        gc.collect()
        started = time.perf_counter()
        core = await run_plan(compiled)
        core_s = time.perf_counter() - started
        gc.collect()
        started = time.perf_counter()
        braked = await run_plan(compiled, limits=limits, retry=RetryPolicy(), observers=[observer])
        brakes_s = time.perf_counter() - started
        if not (core.succeeded and braked.succeeded):
            raise RuntimeError("benchmark run failed")
        return core_s, brakes_s

    for repetition in range(repetitions + 1):
        core_s, brakes_s = anyio.run(pair)
        if repetition:
            figures.core_s.append(core_s)
            figures.brakes_s.append(brakes_s)
    return figures
