"""What durability costs per step: the run store and the trace against a bare ``run_plan``.

Usage (from the repository root)::

    .venv/bin/python benchmarks/store_bench.py              # 15 repetitions, about 1 minute
    .venv/bin/python benchmarks/store_bench.py --quick      # 3 repetitions, about 15 s
    .venv/bin/python benchmarks/store_bench.py --profile    # also cProfile variant (c)
    .venv/bin/python benchmarks/store_bench.py --dir PATH   # the stores on another disk
    .venv/bin/python benchmarks/store_bench.py --before /tmp/main-checkout --rounds 5
                                                  # (--before again: a third tree)
                                                  # that tree's plandag beside this one's

On the graphs of ``benchmarks/scheduler_bench.py`` (a chain of 1000 inline no-op steps; one
root → 1000 children → one sink), each repetition runs these variants one after the other in
one process (the order rotates every repetition so that drift hits all of them):

* ``a``: :func:`plandag.scheduler.run_plan` alone;
* ``a/w``: the same with a tool declared ``effects="write"`` (it writes nothing), no
  observer: the control for ``d`` (what the declaration costs the scheduler by itself);
* ``b``: with a :class:`plandag.store.StoreRecorder` (the store in a temporary folder):
  steps without effects, so their transitions are written in batches;
* ``c``: ``b`` plus a :class:`plandag.trace.writer.TraceWriter` masking secrets, as the
  runs service wires them (``plandag/runs/segments.py``, ``plandag/runs/traces.py``);
* ``d``: the ``effects="write"`` tool under a ``StoreRecorder``: every start and every end
  is committed (``synchronous=FULL``: an fsync of the WAL) before the run goes on.

Timed per run, in wall-clock time and in CPU time of the whole process (every thread,
``time.process_time``: the store's writer thread counts): the recorder's construction (it
declares the steps in one transaction), the trace writer's opening, ``run_plan`` (the
recorder commits what is queued at ``RunFinished``), the writer's closing and a last
:meth:`~plandag.store.Store.flush`; not timed: ``create_run`` and the check that
every step was stored as succeeded. Figures: the median over the repetitions, in µs per
step, and its ratio to ``a``'s median. Apart: the latency of one durable
:meth:`plandag.store.Store.step_started` (median and 95th percentile) and of a batched one;
with ``--makespan N``, makespan ÷ critical path of ``benchmarks/run.py``'s random DAG of
``N`` sleeping steps with the store and the trace on (wired as in ``c``; the critical path
from the durations each run measured).

``--before PATH`` runs this script in child processes, alternately with the ``plandag`` (and
``benchmarks``) of the source tree ``PATH`` and with this one, ``--rounds`` times, and
prints both side by side: medians over every repetition of every round, CPU µs per step,
wall µs per step, makespan ÷ critical path, and the load average before and after.

The figures depend on the disk under ``--dir`` (the default temporary folder is
``tempfile.gettempdir()``; on a tmpfs an fsync costs nothing). No figure here is asserted
anywhere: wall-clock numbers are for reading, not for tests.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import gc
import itertools
import json
import os
import platform
import pstats
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` and ``plandag`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    if "--tree" in sys.argv[:-1]:  # a child of --before: that tree's plandag and benchmarks
        sys.path.insert(0, str(Path(sys.argv[sys.argv.index("--tree") + 1]).resolve()))

import anyio

from benchmarks.dags import BenchmarkDag, chain, plan_document, random_dag, wide
from benchmarks.scheduler_bench import Shape, noop_async, noop_inline, sleep_for
from plandag.compiler import CompiledPlan, compile_plan
from plandag.dag.graph import critical_path
from plandag.scheduler import events, run_plan
from plandag.store import Store, StoreRecorder
from plandag.tools.base import tool
from plandag.tools.registry import Registry
from plandag.trace.redact import Redactor
from plandag.trace.writer import TraceWriter

__all__ = [
    "SIDE_BY_SIDE",
    "VARIANTS",
    "CommitFigures",
    "StoreFigures",
    "Variant",
    "main",
    "measure_commit_latency",
    "measure_makespan",
    "measure_store",
    "profile_trace_variant",
    "render",
    "side_by_side",
]

Variant = Literal["a", "a/w", "b", "c", "d"]

#: Every variant, in the table's order, with its description.
VARIANTS: dict[Variant, str] = {
    "a": "run_plan alone",
    "a/w": "run_plan alone, tool declared effects=write (control for d)",
    "b": "+ StoreRecorder (batched writes)",
    "c": "+ StoreRecorder + TraceWriter",
    "d": "effects=write tool + StoreRecorder (every start/end fsynced)",
}


def _noop_write() -> None:
    """Do nothing, though declared as writing (the store treats the step as having effects)."""


noop_write = tool(name="noop_write", inline=True, effects="write")(_noop_write)


def _registry() -> Registry:
    return Registry([noop_inline, noop_async, sleep_for, noop_write])


def _compile(dag: BenchmarkDag, tool_name: str, *, with_durations: bool = False) -> CompiledPlan:
    return compile_plan(
        plan_document(dag, tool_name, with_durations=with_durations),
        _registry(),
        max_steps=dag.size,
    )


def _graph(shape: Shape, size: int) -> BenchmarkDag:
    return chain(size) if shape == "chain" else wide(size)


@dataclasses.dataclass
class StoreFigures:
    """Seconds per repetition of every variant on one graph.

    Attributes:
        shape: ``chain`` (``steps`` in a row) or ``wide`` (1 root, children, 1 sink).
        steps: steps in the graph.
        seconds: the run times of each variant (see the module docstring), one per
            repetition, in seconds.
        cpu: the CPU time of the whole process (every thread) during those runs, seconds.
    """

    shape: Shape
    steps: int
    seconds: dict[Variant, list[float]] = dataclasses.field(
        default_factory=lambda: {variant: [] for variant in VARIANTS}
    )
    cpu: dict[Variant, list[float]] = dataclasses.field(
        default_factory=lambda: {variant: [] for variant in VARIANTS}
    )

    def per_step_us(self, variant: Variant) -> float:
        """The median run time of ``variant`` in microseconds per step."""
        return statistics.median(self.seconds[variant]) / self.steps * 1e6

    def cpu_per_step_us(self, variant: Variant) -> float:
        """The median CPU time of ``variant`` in microseconds per step."""
        return statistics.median(self.cpu[variant]) / self.steps * 1e6

    def ratio(self, variant: Variant) -> float:
        """``variant``'s median over variant ``a``'s median (1.0: costs nothing)."""
        return statistics.median(self.seconds[variant]) / statistics.median(self.seconds["a"])


class _Bench:
    """One store per variant that uses one, a fresh run id per timed run."""

    def __init__(self, folder: Path, shape: Shape, size: int) -> None:
        dag = _graph(shape, size)
        self.steps = dag.size
        self.plain = _compile(dag, "noop_inline")
        self.writing = _compile(dag, "noop_write")
        self.folder = folder / shape
        self.stores: dict[Variant, Store] = {
            variant: Store(self.folder / variant / "runs.sqlite3") for variant in ("b", "c", "d")
        }
        self.runs = itertools.count(1)

    def close(self) -> None:
        for store in self.stores.values():
            store.close()

    def _check(self, store: Store, run_id: str) -> None:
        rows = store.connection.execute(
            "SELECT status, count(*) FROM step WHERE run_id = ? GROUP BY status", (run_id,)
        ).fetchall()
        transitions = store.connection.execute(
            "SELECT count(*) FROM transition WHERE run_id = ?", (run_id,)
        ).fetchone()[0]
        if rows != [("succeeded", self.steps)] or transitions != 2 * self.steps:
            raise RuntimeError(f"run {run_id} was not stored whole: {rows}, {transitions}")

    async def run(self, variant: Variant) -> tuple[float, float]:
        """Run ``variant`` once; return its wall-clock and CPU times in seconds (see the
        module docstring)."""
        compiled = self.writing if variant in ("a/w", "d") else self.plain
        store = self.stores.get(variant)
        run_id = f"{variant.replace('/', '')}-{next(self.runs)}"
        if store is not None:
            store.create_run(run_id, command="bench", goal=None, params={}, options={})
        gc.collect()
        started = time.perf_counter()
        cpu_started = time.process_time()
        observers: list[events.Observer] = []
        writer: TraceWriter | None = None
        if store is not None:
            observers.append(StoreRecorder(store, run_id, compiled.steps, compiled.params))
        if variant == "c" and store is not None:
            writer = TraceWriter(store.trace_path(run_id), run_id, redact=Redactor(personal=False))
            writer.set_graph(compiled.graph)
            observers.append(writer)
        result = await run_plan(
            compiled,
            run_id=run_id,
            observers=observers,
            approve="auto" if compiled is self.writing else None,
        )
        if writer is not None:
            writer.close()
        if store is not None:
            store.flush()
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
        if not result.succeeded:
            raise RuntimeError(f"benchmark run {run_id} failed: {result.failed_steps()[:1]}")
        if store is not None:
            self._check(store, run_id)
        return elapsed, cpu


def measure_store(
    shape: Shape, folder: Path, size: int = 1000, repetitions: int = 15
) -> StoreFigures:
    """Time every variant on one graph, interleaved, ``repetitions`` times each.

    Args:
        shape: ``chain`` (``size`` steps) or ``wide`` (1 root, ``size`` children, 1 sink).
        folder: where the stores and traces are written (a subfolder per shape and variant).
        size: chain length or graph width.
        repetitions: timed runs of each variant, after one warm-up round that is not kept;
            the variants' order rotates every repetition.

    Returns:
        The :class:`StoreFigures`.

    Raises:
        RuntimeError: a run did not succeed, or the store did not hold every step as
            succeeded with two transitions each (the figure would be meaningless).
    """
    bench = _Bench(folder, shape, size)
    figures = StoreFigures(shape, bench.steps)
    order: list[Variant] = list(VARIANTS)
    try:
        for repetition in range(repetitions + 1):  # the first round warms up
            shift = repetition % len(order)
            rotated = order[shift:] + order[:shift]

            async def round_(
                variants: Sequence[Variant] = rotated,
            ) -> dict[Variant, tuple[float, float]]:
                return {variant: await bench.run(variant) for variant in variants}

            times = anyio.run(round_)
            if repetition:
                for variant, (seconds, cpu) in times.items():
                    figures.seconds[variant].append(seconds)
                    figures.cpu[variant].append(cpu)
    finally:
        bench.close()
    return figures


@dataclasses.dataclass
class CommitFigures:
    """Latencies of single :meth:`Store.step_started` calls, seconds.

    Attributes:
        durable: calls with ``durable=True`` (one committed transaction each).
        batched: calls with ``durable=False`` (queued; every 32nd pays for a batch commit).
    """

    durable: list[float]
    batched: list[float]

    @staticmethod
    def p95(values: list[float]) -> float:
        """The 95th percentile of ``values`` (inclusive method)."""
        return statistics.quantiles(values, n=20, method="inclusive")[18]


def measure_commit_latency(folder: Path, calls: int = 300) -> CommitFigures:
    """Time ``calls`` durable and ``calls`` batched :meth:`Store.step_started` calls.

    Each call records a step of tool ``noop_write`` with args ``{}`` in a fresh store under
    ``folder``, after 20 warm-up calls of each kind. The two kinds alternate.

    Returns:
        The :class:`CommitFigures`.
    """
    store = Store(folder / "latency" / "runs.sqlite3")
    try:
        store.create_run("latency", command="bench", goal=None, params={}, options={})
        total = calls + 20
        store.declare_steps("latency", [(n, "noop_write", "write") for n in range(1, total + 1)])
        durable: list[float] = []
        batched: list[float] = []
        for number in range(1, total + 1):
            for attempt, into in ((1, durable), (2, batched)):
                started = time.perf_counter()
                store.step_started(
                    "latency", number, attempt, time.time(), args={}, durable=into is durable
                )
                if number > 20:
                    into.append(time.perf_counter() - started)
    finally:
        store.close()
    return CommitFigures(durable, batched)


def profile_trace_variant(
    folder: Path, shape: Shape = "chain", size: int = 1000, runs: int = 5, top: int = 25
) -> None:
    """Print cProfile's top functions (own time, then cumulative) over ``runs`` runs of
    variant ``c`` on one graph, after one warm-up run."""
    bench = _Bench(folder / "profile", shape, size)
    try:
        anyio.run(bench.run, "c")
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(runs):
            anyio.run(bench.run, "c")
        profile.disable()
    finally:
        bench.close()
    stats = pstats.Stats(profile, stream=sys.stdout)
    print(f"\ncProfile of variant c: {runs} runs of the {shape} of {bench.steps} steps")
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)


def render(figures: Sequence[StoreFigures], commits: CommitFigures) -> str:
    """The figures as Markdown tables (µs/step and ratio to ``a`` per graph; latencies)."""
    header = ["variant"]
    for item in figures:
        header += [f"{item.shape} {item.steps} µs/step", "× a", "CPU µs/step"]
    lines = [header]
    for variant, label in VARIANTS.items():
        cells = [f"({variant}) {label}"]
        for item in figures:
            cells += [
                f"{item.per_step_us(variant):.1f}",
                f"{item.ratio(variant):.2f}",
                f"{item.cpu_per_step_us(variant):.1f}",
            ]
        lines.append(cells)
    for name, (more, less) in {
        "(c)−(b): the trace alone, µs/step": ("c", "b"),
        "(d)−(a/w): two fsynced commits, µs/step": ("d", "a/w"),
    }.items():
        row = [name]
        for item in figures:
            row += [
                f"{item.per_step_us(more) - item.per_step_us(less):.1f}",
                "",
                f"{item.cpu_per_step_us(more) - item.cpu_per_step_us(less):.1f}",
            ]
        lines.append(row)
    table = _markdown(lines)
    latency = _markdown(
        [
            ["Store.step_started", "median µs", "p95 µs", "calls"],
            [
                "durable=True (one commit, fsync)",
                f"{statistics.median(commits.durable) * 1e6:.0f}",
                f"{commits.p95(commits.durable) * 1e6:.0f}",
                str(len(commits.durable)),
            ],
            [
                "durable=False (queued)",
                f"{statistics.median(commits.batched) * 1e6:.1f}",
                f"{commits.p95(commits.batched) * 1e6:.1f}",
                str(len(commits.batched)),
            ],
        ]
    )
    return f"{table}\n\n{latency}"


def _markdown(lines: list[list[str]]) -> str:
    widths = [max(len(line[column]) for line in lines) for column in range(len(lines[0]))]

    def format_line(cells: list[str]) -> str:
        padded = (cell.ljust(width) for cell, width in zip(cells, widths, strict=True))
        return "| " + " | ".join(padded) + " |"

    separator = "|" + "|".join("-" * (width + 2) for width in widths) + "|"
    return "\n".join([format_line(lines[0]), separator, *map(format_line, lines[1:])])


def _filesystem(folder: Path) -> str:
    """The filesystem type of ``folder`` from /proc/mounts (``?`` when unknown)."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "?"
    best, kind = "", "?"
    resolved = str(folder.resolve())
    for line in mounts:
        parts = line.split()
        inside = len(parts) >= 3 and (resolved + "/").startswith(parts[1].rstrip("/") + "/")
        if inside and len(parts[1]) >= len(best):
            best, kind = parts[1], parts[2]
    return kind


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def measure_makespan(
    folder: Path, size: int = 1000, seed: int = 2024, repetitions: int = 3
) -> tuple[list[float], list[float]]:
    """Makespan ÷ critical path of the random DAG of ``benchmarks/run.py``
    (:func:`benchmarks.dags.random_dag`: ``size`` sleeping steps, seeded) with the store
    and the trace on, wired as in variant ``c``, and without them (alternately).

    The critical path is computed from the durations each run measured, so a late timer
    lengthens it too and only the time between a parent's end and a child's start counts.

    Returns:
        (with the store and the trace, without): one ratio per repetition each (1.0: no
        overhead on the critical path).
    """
    dag = random_dag(size, seed)
    compiled = _compile(dag, "sleep_for", with_durations=True)
    store = Store(folder / "makespan" / "runs.sqlite3")
    stored: list[float] = []
    plain: list[float] = []
    try:
        for repetition in range(repetitions):
            run_id = f"makespan-{repetition}"
            store.create_run(run_id, command="bench", goal=None, params={}, options={})

            async def timed(durable: bool, run_id: str = run_id) -> tuple[float, dict[int, float]]:
                gc.collect()
                started = time.perf_counter()
                observers: list[events.Observer] = []
                writer: TraceWriter | None = None
                if durable:
                    writer = TraceWriter(
                        store.trace_path(run_id), run_id, redact=Redactor(personal=False)
                    )
                    writer.set_graph(compiled.graph)
                    observers = [StoreRecorder(store, run_id, compiled.steps, compiled.params)]
                    observers.append(writer)
                result = await run_plan(compiled, run_id=run_id, observers=observers)
                if writer is not None:
                    writer.close()
                    store.flush()
                elapsed = time.perf_counter() - started
                if not result.succeeded:
                    raise RuntimeError(f"makespan run failed: {result.failed_steps()[:1]}")
                return elapsed, {
                    step_id: record.duration_s or 0.0 for step_id, record in result.steps.items()
                }

            order = (True, False) if repetition % 2 == 0 else (False, True)
            for durable in order:
                makespan, durations = anyio.run(timed, durable)
                ratio = makespan / critical_path(compiled.graph, durations)[1]
                (stored if durable else plain).append(ratio)
    finally:
        store.close()
    return stored, plain


def _measure_here(options: argparse.Namespace, folder: Path) -> dict[str, object]:
    """Every figure of this process's ``plandag``, as JSON-ready data."""
    figures = [
        measure_store(shape, folder, options.size, options.repetitions)
        for shape in ("chain", "wide")
    ]
    stored, plain = (
        measure_makespan(folder, options.makespan, repetitions=options.repetitions)
        if options.makespan
        else ([], [])
    )
    return {
        "figures": [dataclasses.asdict(item) for item in figures],
        "makespan": stored,
        "makespan_plain": plain,
    }


#: The rows of the side-by-side table: (label, shape, variant).
SIDE_BY_SIDE: tuple[tuple[str, Shape, Variant], ...] = (
    ("chain, store (b)", "chain", "b"),
    ("chain, store + trace (c)", "chain", "c"),
    ("chain, effects: every start/end synced (d)", "chain", "d"),
    ("chain, no store (a)", "chain", "a"),
    ("wide, store (b)", "wide", "b"),
    ("wide, store + trace (c)", "wide", "c"),
    ("wide, effects: every start/end synced (d)", "wide", "d"),
    ("wide, no store (a)", "wide", "a"),
)


def side_by_side(columns: Sequence[tuple[str, Sequence[dict[str, object]]]]) -> str:
    """The figures of several trees as one Markdown table: per row of
    :data:`SIDE_BY_SIDE`, CPU then wall µs per step, the median over every repetition of
    every round; then makespan ÷ critical path (median, min–max).

    Args:
        columns: (tree's name, its rounds: each :func:`_measure_here`'s data).
    """
    header = ["µs per step (median)"]
    for name, _ in columns:
        header += [f"{name}: CPU", f"{name}: wall"]
    if len(columns) >= 2:
        header.append(f"CPU {columns[-1][0]} ÷ {columns[0][0]}")
    lines = [header]
    for label, shape, variant in SIDE_BY_SIDE:
        row = [label]
        cpus = []
        for _, rounds in columns:
            cpu: list[float] = []
            wall: list[float] = []
            for data in rounds:
                for item in data["figures"]:  # type: ignore[attr-defined]
                    if item["shape"] == shape:
                        cpu += [value / item["steps"] * 1e6 for value in item["cpu"][variant]]
                        wall += [value / item["steps"] * 1e6 for value in item["seconds"][variant]]
            cpus.append(statistics.median(cpu))
            row += [f"{cpus[-1]:.1f}", f"{statistics.median(wall):.1f}"]
        if len(columns) >= 2:
            row.append(f"{cpus[-1] / cpus[0]:.2f}")
        lines.append(row)
    for key, label in (
        ("makespan", "makespan ÷ critical path, store + trace"),
        ("makespan_plain", "makespan ÷ critical path, no store"),
    ):
        ratios = [
            [value for data in rounds for value in data.get(key, [])]  # type: ignore[attr-defined]
            for _, rounds in columns
        ]
        if all(ratios):
            row = [label]
            for values in ratios:
                row += [f"{statistics.median(values):.4f}", f"{min(values):.3f}–{max(values):.3f}"]
            if len(columns) >= 2:
                row.append("")
            lines.append(row)
    return _markdown(lines)


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def _compare(options: argparse.Namespace) -> int:
    """Run the children of ``--before`` alternately, print the side-by-side table."""
    trees: list[tuple[str, Path | None]] = [(f"before ({tree})", tree) for tree in options.before]
    trees.append(("this checkout", None))
    columns: list[tuple[str, list[dict[str, object]]]] = [(name, []) for name, _ in trees]
    script = Path(__file__).resolve()
    passed = [
        f"--size={options.size}",
        f"--repetitions={options.repetitions}",
        f"--makespan={options.makespan}",
        *([f"--dir={options.dir}"] if options.dir is not None else []),
    ]
    load_before = _load()
    started = time.perf_counter()
    for number in range(options.rounds):
        order = list(zip(trees, columns, strict=True))
        if number % 2:
            order.reverse()  # drift hits both sides alike
        for (name, tree), (_, rounds) in order:
            _say(f"round {number + 1}/{options.rounds}: {name}...")
            command = [sys.executable, str(script), "--measure", *passed]
            if tree is not None:
                command += ["--tree", str(tree)]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"{name}: the measuring child failed: {done.stderr[-2000:]}")
            rounds.append(json.loads(done.stdout))
    print(side_by_side(columns))
    print()
    print(
        f"load average (1, 5, 15 min) before: {load_before}; after: {_load()}; "
        f"{options.rounds} round(s) × {options.repetitions} repetition(s) per tree, "
        f"size {options.size}, makespan DAG {options.makespan or 'not run'}; "
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"{os.cpu_count()} CPU(s); {time.perf_counter() - started:.0f} s"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, run, print the tables (and the profile); return 0."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 repetitions instead of 15")
    parser.add_argument("--repetitions", type=int, help="timed runs of each variant")
    parser.add_argument("--size", type=int, default=1000, help="chain length, graph width")
    parser.add_argument("--dir", type=Path, help="folder for the stores (default: a temp one)")
    parser.add_argument("--profile", action="store_true", help="also cProfile variant c")
    parser.add_argument(
        "--makespan", type=int, default=0, help="also makespan ÷ critical path on N steps"
    )
    parser.add_argument(
        "--before",
        type=Path,
        action="append",
        help="a source tree to measure beside this one (repeatable)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="alternating runs of each tree")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tree", type=Path, help=argparse.SUPPRESS)
    arguments = list(sys.argv[1:] if argv is None else argv)
    options = parser.parse_args(arguments)
    options.repetitions = options.repetitions or (3 if options.quick else 15)
    if options.before is not None:
        return _compare(options)
    parent = options.dir if options.dir is not None else Path(tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="plandag-store-bench-", dir=parent))
    started = time.perf_counter()
    try:
        if options.measure:
            print(json.dumps(_measure_here(options, folder)))
            return 0
        figures = []
        shapes: tuple[Shape, ...] = ("chain", "wide")
        for shape in shapes:
            _say(
                f"{shape}: {len(VARIANTS)} variants × {options.repetitions} repetitions, "
                "interleaved..."
            )
            figures.append(measure_store(shape, folder, options.size, options.repetitions))
        _say("Store.step_started latency...")
        commits = measure_commit_latency(folder, 300 if not options.quick else 100)
        ratios, plain = (
            measure_makespan(folder, options.makespan, repetitions=options.repetitions)
            if options.makespan
            else ([], [])
        )
        elapsed = time.perf_counter() - started
        print(render(figures, commits))
        if ratios:
            print(
                f"\nmakespan ÷ critical path, {options.makespan}-step random DAG, store + "
                f"trace: median {statistics.median(ratios):.4f} "
                f"({min(ratios):.3f}–{max(ratios):.3f}); without the store and the trace: "
                f"median {statistics.median(plain):.4f}"
            )
        print()
        print(
            f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version} on "
            f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPU(s); stores on "
            f"{_filesystem(folder)} ({parent}); medians of {options.repetitions} "
            f"repetitions; {elapsed:.0f} s"
        )
        if options.profile:
            profile_trace_variant(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
