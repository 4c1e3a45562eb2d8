"""plandag against a LangGraph ``StateGraph`` on the same random DAGs, side by
side.

The DAG is :func:`benchmarks.dags.random_dag` (1000 steps, log-normal durations of median
50 ms capped at 0.4 s, 0–3 parents among the previous 12), the same generator and seed as
the makespan benchmark of ``benchmarks/scheduler_bench.py``. It runs

* through plandag: the plan of :func:`benchmarks.dags.plan_document` with the ``sleep_for``
  tool, compiled and run by :func:`plandag.scheduler.run_plan`;
* through LangGraph (:func:`build_langgraph`): one async node per step that sleeps the
  step's duration and returns ``{"ran": [(step_id, start, end)]}`` (``time.perf_counter``
  stamps) into a list channel with an ``operator.add`` reducer, so parallel nodes never
  conflict and a step that ran twice shows up twice; one edge ``parent → step`` for a step
  with one parent, one join edge ``graph.add_edge([p1, p2, p3], step)`` for a step with
  several (LangGraph's way to wait for all of them); roots from ``START``, sinks to ``END``;
  a recursion limit above the DAG's depth.

Figure, for each system: makespan (wall time of the run) ÷ the critical path of the
durations *that system measured* (:func:`plandag.dag.graph.critical_path`), as in
``scheduler_bench.measure_makespan``. The two systems alternate within one process and one
run, the order flipping every repetition, so the noise of the machine falls on both.

LangGraph runs in supersteps (Pregel / bulk-synchronous parallel): every node triggered in
superstep ``k`` starts together and superstep ``k + 1`` begins only when the slowest of them
has ended. A step whose parents sit at different depths therefore waits for the barrier of
its deepest parent's superstep, not for its parents; its makespan is about the sum over the
supersteps of the longest duration in each (:meth:`SideBySideFigures.superstep_bound_s`
gives that figure for the measured durations). This is the difference the comparison shows.

LangGraph is optional (``pip install -e '.[bench]'``); :func:`langgraph_available` says
whether it can be imported, and nothing here imports it before :func:`build_langgraph`.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib.util
import operator
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, TypedDict

import anyio
import networkx as nx

from benchmarks.dags import BenchmarkDag, plan_document, random_dag
from benchmarks.scheduler_bench import benchmark_registry
from plandag.compiler import CompiledPlan, compile_plan
from plandag.dag.graph import critical_path
from plandag.scheduler import RunResult, run_plan

__all__ = [
    "LANGGRAPH_MISSING",
    "LangGraphRun",
    "RanState",
    "ScheduleViolation",
    "SideBySideFigures",
    "build_langgraph",
    "compile_for_plandag",
    "dag_depth",
    "dag_graph",
    "dag_levels",
    "langgraph_available",
    "measure_side_by_side",
    "plandag_times",
    "run_langgraph",
    "run_plandag",
    "superstep_bound_s",
    "verify_schedule",
]

#: What the table and the smoke test say when LangGraph cannot be imported.
LANGGRAPH_MISSING = "not installed (pip install -e '.[bench]')"

#: Supersteps allowed on top of the DAG's depth (one per level) before LangGraph's
#: recursion limit would stop the run; a margin, the run needs exactly the depth.
RECURSION_MARGIN = 10


def langgraph_available() -> bool:
    """Whether ``langgraph`` can be imported (it is in the optional ``bench`` group)."""
    return importlib.util.find_spec("langgraph") is not None


class ScheduleViolation(RuntimeError):
    """A run broke the DAG's semantics: a step ran not exactly once, or before a parent ended."""


def dag_graph(dag: BenchmarkDag) -> Any:
    """The DAG as a ``networkx.DiGraph`` of step ids, an edge ``parent → child`` per parent."""
    graph = nx.DiGraph()
    graph.add_nodes_from(dag.parents)
    graph.add_edges_from(
        (parent, step_id) for step_id, parents in dag.parents.items() for parent in parents
    )
    return graph


def dag_levels(dag: BenchmarkDag) -> dict[int, int]:
    """The superstep each step runs in under LangGraph: 1 for a root, else 1 + its deepest
    parent's level (step ids are in topological order, so one pass suffices)."""
    levels: dict[int, int] = {}
    for step_id in sorted(dag.parents):
        parents = dag.parents[step_id]
        levels[step_id] = 1 + max((levels[parent] for parent in parents), default=0)
    return levels


def dag_depth(dag: BenchmarkDag) -> int:
    """The number of steps on the DAG's longest chain (the supersteps LangGraph needs)."""
    return max(dag_levels(dag).values())


def verify_schedule(
    dag: BenchmarkDag, records: Iterable[tuple[int, float, float]]
) -> dict[int, tuple[float, float]]:
    """Check that a run respected the DAG and return each step's ``(start, end)``.

    Args:
        dag: the DAG that ran.
        records: ``(step_id, start, end)`` per execution of a step, times in seconds on one
            clock (any clock, as long as it is the same for all records).

    Returns:
        ``{step_id: (start, end)}`` for every step of ``dag``.

    Raises:
        ScheduleViolation: a step of ``dag`` ran zero or several times, an unknown step ran,
            a step ended before it started, or a step started before one of its parents
            ended.
    """
    records = list(records)
    counts = Counter(step_id for step_id, _, _ in records)
    wrong = {
        step_id: counts.get(step_id, 0)
        for step_id in set(dag.parents) | set(counts)
        if counts.get(step_id, 0) != 1 or step_id not in dag.parents
    }
    if wrong:
        shown = dict(sorted(wrong.items())[:5])
        raise ScheduleViolation(f"{len(wrong)} step(s) did not run exactly once: {shown}")
    times = {step_id: (start, end) for step_id, start, end in records}
    for step_id, (start, end) in times.items():
        if end < start:
            raise ScheduleViolation(f"step {step_id} ended before it started")
        for parent in dag.parents[step_id]:
            if start < times[parent][1]:
                raise ScheduleViolation(
                    f"step {step_id} started {times[parent][1] - start:.6f} s before "
                    f"its parent {parent} ended"
                )
    return times


# -- plandag ----------------------------------------------------------------------------------


def compile_for_plandag(dag: BenchmarkDag) -> CompiledPlan:
    """The DAG as a compiled plan of ``sleep_for`` steps (one per step, its duration as the
    ``seconds`` argument), as ``scheduler_bench.measure_makespan`` runs it."""
    document = plan_document(dag, "sleep_for", with_durations=True)
    return compile_plan(document, benchmark_registry(), max_steps=dag.size)


async def run_plandag(compiled: CompiledPlan) -> tuple[float, RunResult]:
    """Run ``compiled`` with :func:`run_plan`; return ``(wall seconds, result)``.

    Raises:
        RuntimeError: the run did not succeed.
    """
    started = time.perf_counter()
    result = await run_plan(compiled)
    elapsed = time.perf_counter() - started
    if not result.succeeded:
        raise RuntimeError(f"plandag benchmark run failed: {result.failed_steps()[:1]}")
    return elapsed, result


def plandag_times(result: RunResult) -> list[tuple[int, float, float]]:
    """``(step_id, started_at, ended_at)`` per attempt-started step of a plandag run
    (wall-clock seconds), a step appearing once per attempt, for :func:`verify_schedule`."""
    records: list[tuple[int, float, float]] = []
    for step_id, record in result.steps.items():
        if record.started_at is None or record.ended_at is None:
            continue
        records.extend(
            (int(step_id), record.started_at, record.ended_at) for _ in range(record.attempts)
        )
    return records


# -- LangGraph --------------------------------------------------------------------------------


class RanState(TypedDict):
    """LangGraph state: one ``(step_id, start, end)`` per node execution, concatenated."""

    ran: Annotated[list[tuple[int, float, float]], operator.add]


def _node_name(step_id: int) -> str:
    return f"step_{step_id}"


def build_langgraph(dag: BenchmarkDag) -> Any:
    """The DAG as a compiled LangGraph ``StateGraph`` of :class:`RanState`.

    One async node per step: it sleeps the step's duration (``asyncio.sleep`` through
    ``anyio.sleep``) and returns ``{"ran": [(step_id, start, end)]}`` with
    ``time.perf_counter()`` stamps. Edges: ``START → root``; ``parent → step`` for one
    parent; ``[p1, p2, …] → step`` (a join: the step runs once all have run) for several;
    ``sink → END``.

    Returns:
        The compiled graph (``langgraph.graph.state.CompiledStateGraph``).

    Raises:
        ImportError: langgraph is not installed.
    """
    from langgraph.graph import END, START, StateGraph

    graph: Any = StateGraph(RanState)
    durations = dag.durations

    def make_node(step_id: int) -> Any:
        seconds = durations[step_id]

        async def node(state: RanState) -> dict[str, list[tuple[int, float, float]]]:
            start = time.perf_counter()
            await anyio.sleep(seconds)
            return {"ran": [(step_id, start, time.perf_counter())]}

        return node

    for step_id in dag.parents:
        graph.add_node(_node_name(step_id), make_node(step_id))
    children = dag.children()
    for step_id, parents in dag.parents.items():
        if not parents:
            graph.add_edge(START, _node_name(step_id))
        elif len(parents) == 1:
            graph.add_edge(_node_name(parents[0]), _node_name(step_id))
        else:
            graph.add_edge([_node_name(parent) for parent in parents], _node_name(step_id))
        if not children[step_id]:
            graph.add_edge(_node_name(step_id), END)
    return graph.compile()


@dataclasses.dataclass(frozen=True)
class LangGraphRun:
    """One LangGraph run.

    Attributes:
        makespan_s: wall time of ``await app.ainvoke(...)``, seconds.
        times: ``{step_id: (start, end)}`` from the nodes' ``perf_counter`` stamps, checked
            by :func:`verify_schedule`.
    """

    makespan_s: float
    times: Mapping[int, tuple[float, float]]

    def durations(self) -> dict[int, float]:
        """Seconds each step's node measured (end - start)."""
        return {step_id: end - start for step_id, (start, end) in self.times.items()}


async def run_langgraph(dag: BenchmarkDag, app: Any | None = None) -> LangGraphRun:
    """Run ``dag`` through LangGraph with ``await app.ainvoke(...)`` and check the schedule.

    Args:
        dag: the DAG.
        app: the graph of :func:`build_langgraph` for ``dag`` (built here when None; pass
            it to keep the build out of the timing).

    Returns:
        The :class:`LangGraphRun`.

    Raises:
        ScheduleViolation: a step did not run exactly once after all its parents.
        ImportError: langgraph is not installed.
    """
    if app is None:
        app = build_langgraph(dag)
    config = {"recursion_limit": dag_depth(dag) + RECURSION_MARGIN}
    started = time.perf_counter()
    state = await app.ainvoke({"ran": []}, config=config)
    makespan = time.perf_counter() - started
    return LangGraphRun(makespan, verify_schedule(dag, state["ran"]))


# -- side by side -----------------------------------------------------------------------------


@dataclasses.dataclass
class SideBySideFigures:
    """Makespans and measured critical paths of both systems per repetition, seconds.

    Attributes:
        steps: steps in the random DAG.
        edges: dependency edges in it.
        seed: its seed.
        depth: steps on its longest chain (LangGraph's supersteps).
        planned_critical_path_s: the critical path of the drawn durations (before running).
        plandag_makespan_s: wall time of :func:`run_plan`, per repetition.
        plandag_critical_path_s: critical path of ``StepRecord.duration_s``, per repetition.
        langgraph_makespan_s: wall time of ``ainvoke``, per repetition.
        langgraph_critical_path_s: critical path of the durations LangGraph's nodes measured.
        langgraph_superstep_bound_s: per repetition, the sum over supersteps of the longest
            measured duration in each: what a barrier between supersteps costs at least.
    """

    steps: int
    edges: int
    seed: int
    depth: int
    planned_critical_path_s: float
    plandag_makespan_s: list[float] = dataclasses.field(default_factory=list)
    plandag_critical_path_s: list[float] = dataclasses.field(default_factory=list)
    langgraph_makespan_s: list[float] = dataclasses.field(default_factory=list)
    langgraph_critical_path_s: list[float] = dataclasses.field(default_factory=list)
    langgraph_superstep_bound_s: list[float] = dataclasses.field(default_factory=list)

    @staticmethod
    def _ratios(makespans: list[float], paths: list[float]) -> list[float]:
        return [makespan / path for makespan, path in zip(makespans, paths, strict=True)]

    def plandag_ratios(self) -> list[float]:
        """plandag's makespan / measured critical path, per repetition (≥ 1)."""
        return self._ratios(self.plandag_makespan_s, self.plandag_critical_path_s)

    def langgraph_ratios(self) -> list[float]:
        """LangGraph's makespan / measured critical path, per repetition (≥ 1)."""
        return self._ratios(self.langgraph_makespan_s, self.langgraph_critical_path_s)


def superstep_bound_s(dag: BenchmarkDag, durations: Mapping[int, float]) -> float:
    """The sum over LangGraph's supersteps of the longest duration in each, seconds: the
    least time a run with a barrier after every superstep can take with these durations."""
    longest: dict[int, float] = {}
    for step_id, level in dag_levels(dag).items():
        longest[level] = max(longest.get(level, 0.0), durations[step_id])
    return sum(longest.values())


def measure_side_by_side(
    size: int = 1000, seed: int = 2024, repetitions: int = 3
) -> SideBySideFigures:
    """Run the seeded random DAG through plandag and through LangGraph, alternating.

    Each repetition runs both systems once in one event loop (``anyio.run``, asyncio),
    plandag first in even repetitions and LangGraph first in odd ones, a garbage collection
    before each. Both runs are checked: every step exactly once, after all its parents
    (:func:`verify_schedule`). The compile of the plan and the build of the graph happen
    once, outside the timing.

    Args:
        size: steps in the DAG (``benchmarks/run.py``: 1000).
        seed: its seed (``benchmarks/run.py``: 2024).
        repetitions: runs of each system.

    Returns:
        The :class:`SideBySideFigures`.

    Raises:
        ImportError: langgraph is not installed.
        RuntimeError: a plandag run failed; :class:`ScheduleViolation` when either run broke
            the DAG's order.
    """
    dag = random_dag(size, seed)
    graph = dag_graph(dag)
    _, planned = critical_path(graph, dag.durations)
    figures = SideBySideFigures(size, dag.edge_count(), seed, dag_depth(dag), planned)
    compiled = compile_for_plandag(dag)
    app = build_langgraph(dag)

    async def plandag_once() -> None:
        gc.collect()
        makespan, result = await run_plandag(compiled)
        verify_schedule(dag, plandag_times(result))
        durations = {int(key): record.duration_s or 0.0 for key, record in result.steps.items()}
        figures.plandag_makespan_s.append(makespan)
        figures.plandag_critical_path_s.append(critical_path(graph, durations)[1])

    async def langgraph_once() -> None:
        gc.collect()
        run = await run_langgraph(dag, app)
        durations = run.durations()
        figures.langgraph_makespan_s.append(run.makespan_s)
        figures.langgraph_critical_path_s.append(critical_path(graph, durations)[1])
        figures.langgraph_superstep_bound_s.append(superstep_bound_s(dag, durations))

    for repetition in range(repetitions):
        order = (plandag_once, langgraph_once)
        if repetition % 2:
            order = (langgraph_once, plandag_once)

        async def both(order: tuple[Any, Any] = order) -> None:
            for once in order:
                await once()

        anyio.run(both)
    return figures
