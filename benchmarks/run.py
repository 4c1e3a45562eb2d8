"""Run every plandag benchmark side by side and print one table (``benchmarks/README.md``).

Usage (from the repository root)::

    .venv/bin/python benchmarks/run.py            # full run, about 4 minutes with langgraph
    .venv/bin/python benchmarks/run.py --quick    # smaller sizes, fewer repetitions, about 1 min
    .venv/bin/python benchmarks/run.py --tiny     # a few steps: the harness runs (seconds)
    .venv/bin/python benchmarks/run.py --json figures.json   # also write every raw figure

Columns: ``measurement``, ``measured`` (plandag's figure, or the contender the row names),
``baseline`` (the bare anyio loop, plain lxml code, or a LangGraph ``StateGraph`` when the
optional ``bench`` group is installed), ``ratio`` (measured / baseline), ``target`` and
``met?``. Each figure is the median over the repetitions. The load average is printed
before and after the run. See ``benchmarks/README.md`` for what each row means.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` and ``plandag`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cpu_bench import (
    CONTENDERS,
    CpuFigures,
    load_average,
    measure_cpu,
    measure_durable_makespan,
)
from benchmarks.extract_bench import measure_extract, valid_invoice_files
from benchmarks.langgraph_bench import (
    LANGGRAPH_MISSING,
    langgraph_available,
    measure_side_by_side,
)
from benchmarks.scheduler_bench import (
    Shape,
    ToolKind,
    measure_brakes,
    measure_dispatch,
    measure_makespan,
)

MAKESPAN_TARGET = 1.02
EXTRACT_TARGET = 0.5
BRAKES_TARGET = 1.5
#: store+trace on (as ``exec`` wires them): CPU per step at most this × the bare loop's
DURABLE_CPU_TARGET = 3.0
#: store+trace on: makespan ÷ critical path of the random DAG
DURABLE_MAKESPAN_TARGET = 1.01


@dataclasses.dataclass(frozen=True)
class Settings:
    """Sizes and repetitions of one run."""

    dispatch_size: int
    dispatch_repetitions: int
    makespan_size: int
    makespan_repetitions: int
    extract_repetitions: int
    seed: int = 2024
    #: runs of each system in the plandag-vs-LangGraph comparison (same DAG size and seed
    #: as the makespan rows); about 15 s per repetition at 1000 steps
    langgraph_repetitions: int = 3
    #: chain length and fan-out width of the CPU rows (``benchmarks/cpu_bench.py``)
    cpu_size: int = 1000
    #: interleaved repetitions of the CPU rows and of the durable makespan
    cpu_repetitions: int = 5
    #: NF-e files extracted (None: every valid one)
    extract_files: int | None = None


FULL = Settings(1000, 15, 1000, 5, 15)
QUICK = Settings(1000, 5, 300, 1, 5, langgraph_repetitions=1, cpu_repetitions=2)
#: a few steps and one repetition of everything: proves the harness runs, figures meaningless
TINY = Settings(
    20, 1, 12, 1, 1, langgraph_repetitions=1, cpu_size=20, cpu_repetitions=1, extract_files=2
)


@dataclasses.dataclass
class Row:
    """One line of the table."""

    measurement: str
    plandag: float | None
    baseline: float | None
    unit: str
    target: str = "—"
    met: bool | None = None
    #: printed in the baseline column instead of a figure (e.g. LangGraph not installed)
    note: str | None = None

    @property
    def ratio(self) -> float | None:
        """plandag / baseline."""
        if self.plandag is None or self.baseline is None or self.baseline == 0:
            return None
        return self.plandag / self.baseline


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def run(settings: Settings, progress: bool = True) -> tuple[list[Row], dict[str, Any]]:
    """Run the benchmarks; return the table rows and every raw figure."""
    rows: list[Row] = []
    raw: dict[str, Any] = {"settings": dataclasses.asdict(settings)}

    def say(text: str) -> None:
        if progress:
            print(text, file=sys.stderr, flush=True)

    # 0. CPU per step of the whole process, store+trace on and off, LangGraph, bare anyio.
    with tempfile.TemporaryDirectory(prefix="plandag-run-bench-") as folder:
        rows.extend(_cpu_rows(settings, raw, say, Path(folder)))

    # 1. Per-step dispatch overhead.
    raw["dispatch"] = []
    shapes: tuple[Shape, ...] = ("chain", "wide")
    for shape in shapes:
        kinds: tuple[ToolKind, ...] = ("inline", "async")
        for kind in kinds:
            say(f"dispatch: {shape} of {settings.dispatch_size} {kind} no-op steps...")
            figures = measure_dispatch(
                shape, kind, settings.dispatch_size, settings.dispatch_repetitions
            )
            raw["dispatch"].append(dataclasses.asdict(figures))
            label = (
                f"{settings.dispatch_size}-step chain"
                if shape == "chain"
                else f"wide 1→{settings.dispatch_size}→1"
            )
            rows.append(
                Row(
                    f"dispatch, {label}, {kind} no-op",
                    figures.per_step_us(figures.plandag_s),
                    figures.per_step_us(figures.bare_s),
                    "µs/step",
                )
            )
            if kind == "inline":
                rows.append(
                    Row(
                        f"compile, {label} (not in dispatch)",
                        figures.per_step_us(figures.compile_s),
                        None,
                        "µs/step",
                    )
                )

    # 1b. The same with every brake on: retries, caps, heartbeat, an observer.
    raw["brakes"] = []
    for shape in shapes:
        say(f"brakes: {shape} of {settings.dispatch_size} async no-op steps, core vs brakes...")
        brakes = measure_brakes(shape, settings.dispatch_size, settings.dispatch_repetitions)
        raw["brakes"].append(dataclasses.asdict(brakes))
        core_us, brakes_us = brakes.per_step_us(brakes.core_s), brakes.per_step_us(brakes.brakes_s)
        rows.append(
            Row(
                f"brakes on vs core scheduler, {shape} of {settings.dispatch_size}, async no-op",
                brakes_us,
                core_us,
                "µs/step",
                f"ratio ≤ {BRAKES_TARGET}",
                brakes_us / core_us <= BRAKES_TARGET,
            )
        )

    # 2. Makespan over the measured critical path.
    say(
        f"makespan: {settings.makespan_size}-step random DAG of sleeping steps, "
        f"{settings.makespan_repetitions} run(s) of each runner..."
    )
    makespan = measure_makespan(
        settings.makespan_size, settings.seed, settings.makespan_repetitions
    )
    raw["makespan"] = dataclasses.asdict(makespan) | {
        "plandag_ratios": makespan.plandag_ratios(),
        "bare_ratios": makespan.bare_ratios(),
    }
    plandag_ratio = _median(makespan.plandag_ratios())
    rows.append(
        Row(
            f"makespan / critical path, {makespan.steps}-step random DAG "
            f"(critical path ≈ {_median(makespan.plandag_critical_path_s):.2f} s)",
            plandag_ratio,
            _median(makespan.bare_ratios()),
            "×",
            f"≤ {MAKESPAN_TARGET}",
            plandag_ratio <= MAKESPAN_TARGET,
        )
    )

    # 2b. The same DAG through plandag and a LangGraph StateGraph, alternating.
    rows.extend(_langgraph_rows(settings, raw, say))

    # 3. NF-e documents per second, one core.
    rows.append(_extract_row(settings, raw, say))
    raw["rows"] = [dataclasses.asdict(row) | {"ratio": row.ratio} for row in rows]
    return rows, raw


def _cpu_rows(
    settings: Settings, raw: dict[str, Any], say: Callable[[str], None], folder: Path
) -> list[Row]:
    """CPU µs per step of every contender of ``benchmarks/cpu_bench.py`` on the chain and
    the fan-out, against the bare loop (and store+trace on against LangGraph), then the
    durable makespan ÷ critical path; fills ``raw["cpu"]`` and ``raw["durable_makespan"]``."""
    rows: list[Row] = []
    raw["cpu"] = []
    shapes: tuple[Shape, ...] = ("chain", "wide")
    for shape in shapes:
        say(
            f"cpu: {shape} of {settings.cpu_size} no-op steps, {len(CONTENDERS)} contenders "
            f"× {settings.cpu_repetitions}, interleaved..."
        )
        figures = measure_cpu(shape, folder, settings.cpu_size, settings.cpu_repetitions)
        raw["cpu"].append(dataclasses.asdict(figures))
        rows.extend(_cpu_shape_rows(figures))
    say(
        f"durable makespan: {settings.makespan_size}-step random DAG, store+trace on and "
        f"bare, {settings.cpu_repetitions} run(s) of each..."
    )
    makespan = measure_durable_makespan(
        folder, settings.makespan_size, settings.seed, settings.cpu_repetitions
    )
    raw["durable_makespan"] = dataclasses.asdict(makespan) | {
        "whole_ratios": makespan.whole_ratios(),
        "run_ratios": makespan.run_ratios(),
        "bare_ratios": makespan.bare_ratios(),
    }
    bare = _median(makespan.bare_ratios())
    label = (
        f"makespan / critical path, {makespan.steps}-step random DAG, store+trace on "
        f"(critical path ≈ {_median(makespan.critical_path_s):.2f} s)"
    )
    for ratios, what in (
        (makespan.whole_ratios(), "start_run's wall time"),
        (makespan.run_ratios(), "the run's own duration"),
    ):
        ratio = _median(ratios)
        rows.append(
            Row(
                f"{label}, {what}",
                ratio,
                bare,
                "×",
                f"≤ {DURABLE_MAKESPAN_TARGET}",
                ratio <= DURABLE_MAKESPAN_TARGET,
            )
        )
    return rows


def _cpu_shape_rows(figures: CpuFigures) -> list[Row]:
    size = figures.steps if figures.shape == "chain" else figures.steps - 2
    label = f"{size}-step chain" if figures.shape == "chain" else f"wide 1→{size}→1"
    bare = figures.cpu_us("bare")
    durable = figures.cpu_us("durable")
    rows = [
        Row(
            f"CPU, {label}, store+trace on (as exec)",
            durable,
            bare,
            "µs/step",
            f"ratio ≤ {DURABLE_CPU_TARGET:g}",
            durable / bare <= DURABLE_CPU_TARGET,
        )
    ]
    if "langgraph" in figures.cpu_s:
        langgraph = figures.cpu_us("langgraph")
        rows.append(
            Row(
                f"CPU, {label}, store+trace on (as exec), baseline LangGraph in memory",
                durable,
                langgraph,
                "µs/step",
                "ratio < 1",
                durable < langgraph,
            )
        )
    else:
        rows.append(
            Row(
                f"CPU, {label}, store+trace on (as exec), baseline LangGraph in memory",
                durable,
                None,
                "µs/step",
                "ratio < 1",
                None,
                LANGGRAPH_MISSING,
            )
        )
    for contender, what in (
        ("inline", "store+trace off, inline no-op"),
        ("async", "store+trace off, async no-op"),
        ("langgraph", "LangGraph StateGraph in memory (not plandag)"),
    ):
        if contender in figures.cpu_s:
            rows.append(Row(f"CPU, {label}, {what}", figures.cpu_us(contender), bare, "µs/step"))
    return rows


def _extract_row(settings: Settings, raw: dict[str, Any], say: Callable[[str], None]) -> Row:
    """NF-e documents per second, plandag against the plain lxml loop; fills
    ``raw["extract"]`` (None, and a row saying so, when the shared data is missing)."""
    label = "NF-e extraction"
    try:
        files = valid_invoice_files()
    except FileNotFoundError as error:
        say(f"extract: {error}")
        raw["extract"] = None
        return Row(label, None, None, "docs/s", f"ratio ≥ {EXTRACT_TARGET}", None, "no data")
    if settings.extract_files is not None:
        files = files[: settings.extract_files]
    say(f"extract: {len(files)} NF-e files, {settings.extract_repetitions} passes of each...")
    extract = measure_extract(files, settings.extract_repetitions)
    raw["extract"] = dataclasses.asdict(extract) | {
        "files": [path.name for path in files],
        "plandag_docs_per_s": extract.rate(extract.plandag_s),
        "plain_docs_per_s": extract.rate(extract.plain_s),
    }
    plandag_rate = extract.rate(extract.plandag_s)
    plain_rate = extract.rate(extract.plain_s)
    return Row(
        f"{label}, {len(files)} files, jobs=1",
        plandag_rate,
        plain_rate,
        "docs/s",
        f"ratio ≥ {EXTRACT_TARGET}",
        plandag_rate / plain_rate >= EXTRACT_TARGET,
    )


def _langgraph_rows(
    settings: Settings, raw: dict[str, Any], say: Callable[[str], None]
) -> list[Row]:
    """The plandag-vs-LangGraph rows (makespan / critical path, and makespan in seconds),
    or one row saying LangGraph is not installed; fills ``raw["langgraph"]``."""
    label = "makespan / critical path, baseline LangGraph StateGraph"
    if not langgraph_available():
        say(f"langgraph: {LANGGRAPH_MISSING}")
        raw["langgraph"] = None
        return [Row(label, None, None, "×", f"≤ {MAKESPAN_TARGET}", None, LANGGRAPH_MISSING)]
    say(
        f"langgraph: {settings.makespan_size}-step random DAG through plandag and a LangGraph "
        f"StateGraph, {settings.langgraph_repetitions} run(s) of each, alternating..."
    )
    figures = measure_side_by_side(
        settings.makespan_size, settings.seed, settings.langgraph_repetitions
    )
    plandag_ratio = _median(figures.plandag_ratios())
    raw["langgraph"] = dataclasses.asdict(figures) | {
        "langgraph_version": importlib.metadata.version("langgraph"),
        "plandag_ratios": figures.plandag_ratios(),
        "langgraph_ratios": figures.langgraph_ratios(),
    }
    return [
        Row(
            f"{label}, {figures.steps}-step random DAG, {figures.depth} supersteps "
            f"(critical path ≈ {_median(figures.plandag_critical_path_s):.2f} s)",
            plandag_ratio,
            _median(figures.langgraph_ratios()),
            "×",
            f"≤ {MAKESPAN_TARGET}",
            plandag_ratio <= MAKESPAN_TARGET,
        ),
        Row(
            "makespan, same runs, baseline LangGraph StateGraph "
            f"(its superstep bound ≈ {_median(figures.langgraph_superstep_bound_s):.2f} s)",
            _median(figures.plandag_makespan_s),
            _median(figures.langgraph_makespan_s),
            "s",
        ),
    ]


def _number(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "×":
        return f"{value:.4f}"
    if unit == "s":
        return f"{value:.2f} s"
    if value >= 100:
        return f"{value:,.0f} {unit}"
    return f"{value:.1f} {unit}"


def _loads(loads: tuple[float, float, float]) -> str:
    return " ".join(f"{load:.2f}" for load in loads)


def render(rows: list[Row]) -> str:
    """The rows as a Markdown table."""
    header = ["measurement", "measured", "baseline", "ratio", "target", "met?"]
    lines = [header]
    for row in rows:
        ratio = row.ratio
        lines.append(
            [
                row.measurement,
                _number(row.plandag, row.unit),
                row.note if row.note is not None else _number(row.baseline, row.unit),
                "—" if ratio is None else f"{ratio:.2f}",
                row.target,
                "—" if row.met is None else ("yes" if row.met else "NO"),
            ]
        )
    widths = [max(len(line[column]) for line in lines) for column in range(len(header))]

    def format_line(cells: list[str]) -> str:
        return (
            "| "
            + " | ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True))
            + " |"
        )

    separator = "|" + "|".join("-" * (width + 2) for width in widths) + "|"
    return "\n".join([format_line(lines[0]), separator, *map(format_line, lines[1:])])


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, run, print the table (and the JSON); return 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--quick", action="store_true", help="smaller sizes, fewer repetitions")
    sizes.add_argument("--tiny", action="store_true", help="a few steps: the harness runs")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write every raw figure here")
    options = parser.parse_args(argv)
    kind = "tiny" if options.tiny else "quick" if options.quick else "full"
    settings = {"tiny": TINY, "quick": QUICK, "full": FULL}[kind]
    before = load_average()
    started = time.perf_counter()
    rows, raw = run(settings)
    elapsed = time.perf_counter() - started
    after = load_average()
    environment = (
        f"Python {platform.python_version()} on {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} CPU(s); {kind} run in "
        f"{elapsed:.0f} s; medians of {settings.dispatch_repetitions} (dispatch), "
        f"{settings.cpu_repetitions} (CPU, durable makespan), "
        f"{settings.makespan_repetitions} (makespan), {settings.extract_repetitions} "
        f"(extract), {settings.langgraph_repetitions} (LangGraph) repetitions"
        + (
            f"; langgraph {importlib.metadata.version('langgraph')}"
            if langgraph_available()
            else ""
        )
        + f"; load average before {_loads(before)}, after {_loads(after)}"
    )
    raw["load_average"] = {"before": list(before), "after": list(after)}
    print(render(rows))
    print()
    print(environment)
    if options.json is not None:
        raw["environment"] = environment
        options.json.write_text(json.dumps(raw, indent=2) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
