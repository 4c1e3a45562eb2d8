"""CPU per step of a plandag run with its store and trace, as ``plandag exec`` wires them,
against a bare anyio loop and LangGraph, side by side in one process.

Usage (from the repository root)::

    .venv/bin/python benchmarks/cpu_bench.py               # 5 repetitions, about a minute
    .venv/bin/python benchmarks/cpu_bench.py --profile     # also cProfile the durable chain
    .venv/bin/python benchmarks/cpu_bench.py --size 100 --repetitions 2 --makespan-size 50
    .venv/bin/python benchmarks/cpu_bench.py --json figures.json    # also every raw figure

On the graphs of ``benchmarks/dags.py`` (a chain of ``--size`` no-op steps; one root →
``--size`` children → one sink), each repetition runs every contender once, the order
rotating from one repetition to the next so that the machine's noise falls on all of them,
after one warm-up round that is not kept:

* ``bare``: the bare anyio loop of ``benchmarks/bare_anyio.py``, an async no-op per step;
* ``inline`` and ``async``: :func:`plandag.scheduler.run_plan` alone (store and trace
  off), the ``noop_inline`` and ``noop_async`` tools of ``benchmarks/scheduler_bench.py``;
* ``durable``: the ``noop_async`` plan through the run store and the trace, built by the
  functions ``plandag exec`` builds them with (:class:`ExecWiring`: the settings of
  ``command_settings`` without flags, ``run_limits_for``, ``run_options``,
  ``open_cli_store``, ``trace_factory``, ``progress_observers``) and run by
  :func:`plandag.runs.segments.start_run` with ``command="exec"``;
* ``langgraph``: a LangGraph ``StateGraph`` in memory (no checkpointer), one async no-op
  node per step, when the optional ``bench`` group is installed.

Per run: CPU seconds of the whole process, every thread (``time.process_time``) plus any
child it reaped (``getrusage(RUSAGE_CHILDREN)``), and wall seconds. The durable run's
figures hold what ``start_run`` does (the run and its plan version stored, the trace's
first lines, the run, the trace writer closed), not the store's opening nor the compile
(neither of the others has one). Figures: the median over the repetitions in µs per step,
and its ratio to ``bare``'s median.

Apart (:func:`measure_durable_makespan`): makespan ÷ critical path of the seeded random DAG
of sleeping steps (``benchmarks/scheduler_bench.py``'s) run durably, as above, interleaved
with the bare loop, after one warm-up round: the critical path is that of the durations each
runner measured; the makespan is the wall time of ``start_run`` (``whole``) and the run's own
``RunResult.duration_s`` (``run``). The warm-up's durable run, the first on the DAG's store
(in a process that has run nothing before, as :func:`measure_durable_makespan` alone, it
also pays the imports of a process's first run), is printed apart.

Nothing here is asserted in a test: wall-clock and CPU figures are for reading.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import gc
import json
import os
import platform
import pstats
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Literal

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` and ``plandag`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import anyio

from benchmarks.bare_anyio import run_bare
from benchmarks.dags import BenchmarkDag, chain, plan_document, random_dag, wide
from benchmarks.langgraph_bench import LANGGRAPH_MISSING, dag_graph, langgraph_available
from benchmarks.scheduler_bench import Shape, benchmark_registry
from plandag.compiler import CompiledPlan, compile_plan
from plandag.dag.graph import critical_path
from plandag.scheduler import run_plan

__all__ = [
    "CONTENDERS",
    "Contender",
    "CpuFigures",
    "DurableMakespanFigures",
    "ExecWiring",
    "load_average",
    "main",
    "measure_cpu",
    "measure_durable_makespan",
    "profile_durable",
    "render",
]

Contender = Literal["bare", "inline", "async", "durable", "langgraph"]

#: Every contender, in the table's order, with its description.
CONTENDERS: dict[Contender, str] = {
    "bare": "bare anyio loop, async no-op",
    "inline": "run_plan, store+trace off, inline no-op",
    "async": "run_plan, store+trace off, async no-op",
    "durable": "store+trace on, as `plandag exec` wires them, async no-op",
    "langgraph": "LangGraph StateGraph in memory, async no-op",
}


def load_average() -> tuple[float, float, float]:
    """The 1, 5 and 15-minute load averages (``os.getloadavg``)."""
    return os.getloadavg()


def _cpu_seconds() -> float:
    """CPU seconds of this process (every thread) and of the children it reaped."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


class ExecWiring:
    """The run store, trace and run options of ``plandag exec`` without flags, built by
    the same functions the command calls (``plandag/cli/exec_command.py``,
    ``plandag/cli/durable.py``, ``plandag/runs/traces.py``), with the store in ``folder``.

    The settings are :func:`plandag.cli.common.command_settings` of no flag: the defaults,
    then the project files of the working folder, as for ``exec``. The trace masks secrets
    (personal data too with ``redact``); OpenTelemetry spans are exported when the
    environment configures it, as for ``exec``.
    """

    def __init__(self, folder: Path, redact: bool = False) -> None:
        from plandag.cli.common import command_settings, run_limits_for
        from plandag.cli.durable import open_cli_store, run_options
        from plandag.runs.traces import trace_factory

        self.settings = command_settings({})
        limits = run_limits_for(self.settings)
        self.options = run_options(
            self.settings,
            limits,
            tools=None,
            read_only=False,
            redact=redact,
            registry=benchmark_registry(),
        )
        self.store = open_cli_store(folder / "runs.sqlite3")
        self.trace = trace_factory(self.store, redact)

    async def run(self, compiled: CompiledPlan) -> Any:
        """Run ``compiled`` as ``exec`` does after compiling it (no approver: the
        benchmark plans have no effects); return the ``DurableOutcome``.

        Raises:
            RuntimeError: the run did not succeed.
        """
        from plandag.cli.common import progress_observers
        from plandag.runs.segments import start_run

        now = time.time()
        progress, observers = progress_observers(compiled, self.settings)
        with progress:
            outcome = await start_run(
                self.store,
                compiled,
                self.options,
                command="exec",
                observers=observers,
                trace=self.trace,
                compile_span=(now, now),
            )
        if outcome.status != "succeeded":
            raise RuntimeError(f"durable benchmark run ended {outcome.status}")
        return outcome

    def close(self) -> None:
        """Close the store."""
        self.store.close()


def _graph(shape: Shape, size: int) -> BenchmarkDag:
    return chain(size) if shape == "chain" else wide(size)


def _compile(dag: BenchmarkDag, tool_name: str, *, with_durations: bool = False) -> CompiledPlan:
    document = plan_document(dag, tool_name, with_durations=with_durations)
    return compile_plan(document, benchmark_registry(), max_steps=dag.size)


def build_noop_langgraph(dag: BenchmarkDag, ran: list[int]) -> Any:
    """``dag`` as a compiled LangGraph ``StateGraph`` (in memory, no checkpointer) of async
    nodes that append their step id to ``ran`` and change no state; edges as
    :func:`benchmarks.langgraph_bench.build_langgraph` draws them (a join edge for a step
    with several parents).

    Raises:
        ImportError: langgraph is not installed.
    """
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    class Empty(TypedDict, total=False):
        """No state: the nodes only run."""

        n: int

    graph: Any = StateGraph(Empty)

    def make_node(step_id: int) -> Callable[[Any], Awaitable[None]]:
        async def node(state: Any) -> None:
            ran.append(step_id)

        return node

    children = dag.children()
    for step_id in dag.parents:
        graph.add_node(f"step_{step_id}", make_node(step_id))
    for step_id, parents in dag.parents.items():
        if not parents:
            graph.add_edge(START, f"step_{step_id}")
        elif len(parents) == 1:
            graph.add_edge(f"step_{parents[0]}", f"step_{step_id}")
        else:
            graph.add_edge([f"step_{parent}" for parent in parents], f"step_{step_id}")
        if not children[step_id]:
            graph.add_edge(f"step_{step_id}", END)
    return graph.compile()


@dataclasses.dataclass
class CpuFigures:
    """CPU and wall seconds per repetition of every contender on one graph.

    Attributes:
        shape: ``chain`` (``steps`` in a row) or ``wide`` (1 root, children, 1 sink).
        steps: steps in the graph.
        cpu_s: CPU seconds of the process (all threads, reaped children) per run.
        wall_s: wall seconds per run.
    """

    shape: Shape
    steps: int
    cpu_s: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    wall_s: dict[str, list[float]] = dataclasses.field(default_factory=dict)

    def cpu_us(self, contender: str) -> float:
        """The median CPU time of ``contender`` in microseconds per step."""
        return statistics.median(self.cpu_s[contender]) / self.steps * 1e6

    def wall_us(self, contender: str) -> float:
        """The median wall time of ``contender`` in microseconds per step."""
        return statistics.median(self.wall_s[contender]) / self.steps * 1e6

    def ratio(self, contender: str) -> float:
        """``contender``'s median CPU over ``bare``'s (1.0: as cheap as the bare loop)."""
        return statistics.median(self.cpu_s[contender]) / statistics.median(self.cpu_s["bare"])


def measure_cpu(
    shape: Shape,
    folder: Path,
    size: int = 1000,
    repetitions: int = 5,
    contenders: Sequence[Contender] | None = None,
) -> CpuFigures:
    """CPU and wall time of every contender on one graph, interleaved.

    Args:
        shape: ``chain`` (``size`` steps) or ``wide`` (1 root, ``size`` children, 1 sink).
        folder: where the durable runs' store and traces go.
        size: chain length or graph width.
        repetitions: timed runs of each contender, after one warm-up round; the order
            rotates every repetition.
        contenders: which to run (default: all of :data:`CONTENDERS`, ``langgraph`` only
            when it is installed).

    Returns:
        The :class:`CpuFigures`.

    Raises:
        RuntimeError: a run did not run every step once (the figure would be meaningless).
    """
    dag = _graph(shape, size)
    chosen: list[Contender] = list(contenders or CONTENDERS)
    if not langgraph_available() and "langgraph" in chosen:
        chosen.remove("langgraph")
    compiled = {
        "inline": _compile(dag, "noop_inline"),
        "async": _compile(dag, "noop_async"),
    }
    ran: list[int] = []
    app = build_noop_langgraph(dag, ran) if "langgraph" in chosen else None
    wiring = ExecWiring(folder / shape) if "durable" in chosen else None
    figures = CpuFigures(
        shape, dag.size, {name: [] for name in chosen}, {name: [] for name in chosen}
    )

    async def bare_noop(step_id: int) -> None:
        return None

    async def once(contender: Contender) -> None:
        if contender == "bare":
            bare = await run_bare(dag, bare_noop)
            done = len(bare.ended)
        elif contender in ("inline", "async"):
            result = await run_plan(compiled[contender])
            done = sum(1 for record in result.steps.values() if record.status == "succeeded")
        elif contender == "durable":
            assert wiring is not None
            outcome = await wiring.run(compiled["async"])
            done = len(outcome.result.steps)
        else:
            assert app is not None
            ran.clear()
            await app.ainvoke({}, config={"recursion_limit": size + 10})
            done = len(set(ran)) if len(ran) == dag.size else -1
        if done != dag.size:
            raise RuntimeError(f"{contender}: {done} of {dag.size} steps ran once")

    def timed(contender: Contender) -> tuple[float, float]:
        gc.collect()
        cpu, wall = _cpu_seconds(), time.perf_counter()
        anyio.run(once, contender)
        return _cpu_seconds() - cpu, time.perf_counter() - wall

    try:
        for repetition in range(repetitions + 1):  # the first round warms up
            shift = repetition % len(chosen)
            for contender in chosen[shift:] + chosen[:shift]:
                cpu, wall = timed(contender)
                if repetition:
                    figures.cpu_s[contender].append(cpu)
                    figures.wall_s[contender].append(wall)
    finally:
        if wiring is not None:
            wiring.close()
    return figures


@dataclasses.dataclass
class DurableMakespanFigures:
    """Makespans and measured critical paths per repetition, seconds.

    Attributes:
        steps: steps in the random DAG.
        seed: its seed.
        planned_critical_path_s: the critical path of the drawn durations.
        whole_s: wall time of ``start_run`` (run and plan stored, run, trace closed).
        first_whole_s, first_critical_path_s: the same two figures of the warm-up round's
            durable run, the first on its store (not in the lists).
        run_s: the run's own duration (``RunResult.duration_s``).
        critical_path_s: critical path of the durations the durable run measured.
        bare_makespan_s: wall time of the bare loop.
        bare_critical_path_s: critical path of the durations the bare loop measured.
    """

    steps: int
    seed: int
    planned_critical_path_s: float
    whole_s: list[float] = dataclasses.field(default_factory=list)
    run_s: list[float] = dataclasses.field(default_factory=list)
    critical_path_s: list[float] = dataclasses.field(default_factory=list)
    bare_makespan_s: list[float] = dataclasses.field(default_factory=list)
    bare_critical_path_s: list[float] = dataclasses.field(default_factory=list)
    first_whole_s: float = 0.0
    first_critical_path_s: float = 0.0

    def first_whole_ratio(self) -> float:
        """``start_run``'s wall time over the critical path in the first durable run on the
        DAG's store (the warm-up, not among the repetitions: in a fresh process it also pays
        the imports of a first run, as a ``plandag exec`` command does)."""
        return self.first_whole_s / self.first_critical_path_s

    @staticmethod
    def _ratios(makespans: list[float], paths: list[float]) -> list[float]:
        return [makespan / path for makespan, path in zip(makespans, paths, strict=True)]

    def whole_ratios(self) -> list[float]:
        """``start_run``'s wall time over the durable run's measured critical path."""
        return self._ratios(self.whole_s, self.critical_path_s)

    def run_ratios(self) -> list[float]:
        """The durable run's own duration over its measured critical path."""
        return self._ratios(self.run_s, self.critical_path_s)

    def bare_ratios(self) -> list[float]:
        """The bare loop's makespan over its measured critical path."""
        return self._ratios(self.bare_makespan_s, self.bare_critical_path_s)


def measure_durable_makespan(
    folder: Path, size: int = 1000, seed: int = 2024, repetitions: int = 5
) -> DurableMakespanFigures:
    """Run the seeded random DAG of sleeping steps durably (:class:`ExecWiring`) and with
    the bare loop, alternating (the order flips every repetition), after one warm-up round
    that is not kept among the repetitions (its durable run, the first on its store, is kept
    apart: :meth:`DurableMakespanFigures.first_whole_ratio`), as :func:`measure_cpu` does.

    Returns:
        The :class:`DurableMakespanFigures`.

    Raises:
        RuntimeError: a durable run did not succeed.
    """
    dag = random_dag(size, seed)
    graph = dag_graph(dag)
    _, planned = critical_path(graph, dag.durations)
    figures = DurableMakespanFigures(size, seed, planned)
    compiled = _compile(dag, "sleep_for", with_durations=True)
    wiring = ExecWiring(folder / "makespan")

    async def bare_step(step_id: int) -> None:
        await anyio.sleep(dag.durations[step_id])

    async def durable_once() -> None:
        gc.collect()
        started = time.perf_counter()
        outcome = await wiring.run(compiled)
        figures.whole_s.append(time.perf_counter() - started)
        result = outcome.result
        durations = {step_id: record.duration_s or 0.0 for step_id, record in result.steps.items()}
        figures.run_s.append(result.duration_s)
        figures.critical_path_s.append(critical_path(compiled.graph, durations)[1])

    async def bare_once() -> None:
        gc.collect()
        started = time.perf_counter()
        bare = await run_bare(dag, bare_step)
        figures.bare_makespan_s.append(time.perf_counter() - started)
        figures.bare_critical_path_s.append(critical_path(graph, bare.durations())[1])

    try:
        for repetition in range(repetitions + 1):  # the first round warms up
            order = (durable_once, bare_once) if repetition % 2 else (bare_once, durable_once)
            for once in order:
                anyio.run(once)
            if not repetition:
                figures.first_whole_s = figures.whole_s.pop()
                figures.first_critical_path_s = figures.critical_path_s.pop()
                del figures.run_s[-1], figures.bare_makespan_s[-1]
                del figures.bare_critical_path_s[-1]
    finally:
        wiring.close()
    return figures


def profile_durable(folder: Path, size: int = 1000, runs: int = 3, top: int = 15) -> str:
    """cProfile's top ``top`` functions by cumulative time, then by own time, over ``runs``
    durable runs of the chain of ``size`` async no-op steps (after one warm-up run).

    Returns:
        The two tables as ``pstats`` prints them.
    """
    import io

    dag = chain(size)
    compiled = _compile(dag, "noop_async")
    wiring = ExecWiring(folder / "profile")
    try:
        anyio.run(wiring.run, compiled)
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(runs):
            anyio.run(wiring.run, compiled)
        profile.disable()
    finally:
        wiring.close()
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    out.write(f"cProfile: {runs} durable runs of the chain of {size} async no-op steps\n")
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


def _markdown(lines: list[list[str]]) -> str:
    widths = [max(len(line[column]) for line in lines) for column in range(len(lines[0]))]

    def format_line(cells: list[str]) -> str:
        padded = (cell.ljust(width) for cell, width in zip(cells, widths, strict=True))
        return "| " + " | ".join(padded) + " |"

    separator = "|" + "|".join("-" * (width + 2) for width in widths) + "|"
    return "\n".join([format_line(lines[0]), separator, *map(format_line, lines[1:])])


def render(figures: Sequence[CpuFigures], makespan: DurableMakespanFigures | None = None) -> str:
    """The figures as Markdown tables: CPU µs/step (× bare) and wall µs/step per graph;
    then the durable makespan ÷ critical path beside the bare loop's."""
    header = ["contender"]
    for item in figures:
        header += [f"{item.shape} {item.steps}: CPU µs/step", "× bare", "wall µs/step"]
    lines = [header]
    for contender, label in CONTENDERS.items():
        cells = [label]
        for item in figures:
            if contender in item.cpu_s:
                cells += [
                    f"{item.cpu_us(contender):.1f}",
                    f"{item.ratio(contender):.2f}",
                    f"{item.wall_us(contender):.1f}",
                ]
            else:
                cells += [LANGGRAPH_MISSING, "—", "—"]
        lines.append(cells)
    text = _markdown(lines)
    if makespan is not None:
        text += "\n\n" + _markdown(
            [
                [
                    f"{makespan.steps}-step random DAG (seed {makespan.seed})",
                    "makespan ÷ critical path",
                ],
                [
                    "store+trace on, start_run's wall time",
                    f"{statistics.median(makespan.whole_ratios()):.4f}",
                ],
                [
                    "store+trace on, start_run's wall time, the first run (warm-up)",
                    f"{makespan.first_whole_ratio():.4f}",
                ],
                [
                    "store+trace on, the run's own duration",
                    f"{statistics.median(makespan.run_ratios()):.4f}",
                ],
                ["bare anyio loop", f"{statistics.median(makespan.bare_ratios()):.4f}"],
            ]
        )
    return text


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, run, print the tables (and the profile); return 0."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1000, help="chain length, graph width")
    parser.add_argument("--repetitions", type=int, default=5, help="timed runs of each")
    parser.add_argument(
        "--makespan-size", type=int, default=1000, help="steps of the random DAG (0: skip)"
    )
    parser.add_argument("--dir", type=Path, help="folder for the stores (default: a temp one)")
    parser.add_argument("--profile", action="store_true", help="also cProfile the durable chain")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write every raw figure")
    options = parser.parse_args(argv)
    parent = options.dir if options.dir is not None else Path(tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="plandag-cpu-bench-", dir=parent))
    before = load_average()
    started = time.perf_counter()
    try:
        figures = []
        shapes: tuple[Shape, ...] = ("chain", "wide")
        for shape in shapes:
            _say(f"{shape} of {options.size}: contenders × {options.repetitions}, interleaved...")
            figures.append(measure_cpu(shape, folder, options.size, options.repetitions))
        makespan = None
        if options.makespan_size:
            _say(f"makespan: {options.makespan_size}-step random DAG, durable and bare...")
            makespan = measure_durable_makespan(
                folder, options.makespan_size, repetitions=options.repetitions
            )
        elapsed = time.perf_counter() - started
        after = load_average()
        print(render(figures, makespan))
        print()
        print(
            f"Python {platform.python_version()} on {platform.system()} {platform.machine()}, "
            f"{os.cpu_count()} CPU(s); medians of {options.repetitions} repetitions; "
            f"{elapsed:.0f} s; load average before {before[0]:.2f} {before[1]:.2f} "
            f"{before[2]:.2f}, after {after[0]:.2f} {after[1]:.2f} {after[2]:.2f}"
        )
        if options.json is not None:
            raw: dict[str, Any] = {
                "cpu": [dataclasses.asdict(item) for item in figures],
                "load_average": {"before": list(before), "after": list(after)},
            }
            if makespan is not None:
                raw["durable_makespan"] = dataclasses.asdict(makespan) | {
                    "whole_ratios": makespan.whole_ratios(),
                    "run_ratios": makespan.run_ratios(),
                    "bare_ratios": makespan.bare_ratios(),
                }
            options.json.write_text(json.dumps(raw, indent=2) + "\n", "utf-8")
        if options.profile:
            print()
            print(profile_durable(folder, options.size))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
