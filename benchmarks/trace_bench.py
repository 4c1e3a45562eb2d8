"""What the trace costs per step, and what compiling costs per step, in CPU time.

Usage (from the repository root)::

    .venv/bin/python benchmarks/trace_bench.py                      # this checkout
    .venv/bin/python benchmarks/trace_bench.py --against /tmp/old   # side by side with another
    .venv/bin/python benchmarks/trace_bench.py --quick --profile    # and where the time goes

Each repetition runs, in a fresh process per checkout (``--against`` gives a second checkout
of plandag, measured interleaved with this one, repetition by repetition), these variants on a
chain of ``--steps`` inline no-op steps (a tool without effects), the order rotating each
repetition:

* ``bare``: a bare anyio loop that starts each step when its parent ended (the anchor);
* ``plain``: :func:`plandag.scheduler.run_plan` alone;
* ``trace``: ``run_plan`` with a :class:`~plandag.trace.writer.TraceWriter` masking secrets
  (the store off);
* ``store``: :func:`plandag.runs.segments.start_run` with the run store and no trace;
* ``store+trace``: ``start_run`` with the store and the trace writer factory the CLI's
  ``exec`` uses (:func:`plandag.runs.traces.trace_factory`).

Figures are CPU time of the whole process (``time.process_time``: every thread), in µs per
step, the median over the repetitions; the trace's own cost is ``trace - plain`` (store off)
and ``store+trace - store`` (store on). Compile: :func:`plandag.compiler.compile_plan` of a
chain of 1,000 and 10,000 steps, CPU µs per step (the median of three compiles in each
repetition, the collector's pending work after a compile included); where ``compile_plan``
pauses the garbage collector, also with it running (``collector on``: the function it wraps).
The load average is printed before and after. Nothing here is asserted: the figures are for reading.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["VARIANTS", "main", "measure_matchers", "measure_once", "profile_once", "render"]

VARIANTS = ("bare", "plain", "trace", "store", "store+trace")


def _chain_plan(size: int) -> dict[str, Any]:
    steps = [
        {"id": step_id, "tool": "noop_inline", "args": {}, "depends_on": [step_id - 1]}
        for step_id in range(2, size + 1)
    ]
    steps.insert(0, {"id": 1, "tool": "noop_inline", "args": {}, "depends_on": []})
    return {"version": 1, "goal": "benchmark", "steps": steps}


def _noop() -> None:
    """Do nothing."""


def _trace_factory() -> Any:
    """``exec``'s trace writer factory, where this checkout of plandag keeps it (an older
    one, measured with ``--against``, has it in the command line's package)."""
    try:
        from plandag.runs.traces import trace_factory
    except ImportError:
        from plandag.cli.store_command import trace_factory  # type: ignore[no-redef]
    return trace_factory


def measure_once(
    steps: int, compile_sizes: tuple[int, ...], folder: Path, repetition: int
) -> dict[str, float]:
    """One repetition of every variant and compile size, in this process's plandag.

    Args:
        steps: the chain's length for the run variants.
        compile_sizes: the chain lengths compiled.
        folder: where the run stores go.
        repetition: rotates the variants' order.

    Returns:
        ``{variant: CPU µs per step}`` and ``{"compile N": CPU µs per step}``.
    """
    import anyio

    from plandag.compiler import compile_plan
    from plandag.runs.options import RunOptions
    from plandag.runs.segments import start_run

    trace_factory = _trace_factory()
    from plandag.scheduler import run_plan
    from plandag.store import Store
    from plandag.tools.base import tool
    from plandag.tools.registry import Registry
    from plandag.trace.redact import Redactor
    from plandag.trace.writer import TraceWriter

    registry = Registry([tool(name="noop_inline", inline=True)(_noop)])
    compiled = compile_plan(_chain_plan(steps), registry, max_steps=steps)
    store = Store(folder / f"runs-{repetition}.sqlite3")
    options = RunOptions(max_steps=steps)

    async def bare() -> None:
        children = {step_id: step_id + 1 for step_id in range(1, steps)}

        async def run_step(step_id: int, group: Any) -> None:
            await anyio.lowlevel.checkpoint()
            child = children.get(step_id)
            if child is not None:
                group.start_soon(run_step, child, group)

        async with anyio.create_task_group() as group:
            group.start_soon(run_step, 1, group)

    async def plain() -> None:
        result = await run_plan(compiled, run_id=f"plain-{repetition}")
        assert result.succeeded

    async def traced() -> None:
        run_id = f"trace-{repetition}"
        writer = TraceWriter(folder / f"{run_id}.jsonl", run_id, redact=Redactor(personal=False))
        writer.set_graph(compiled.graph)
        result = await run_plan(compiled, run_id=run_id, observers=[writer])
        writer.close()
        assert result.succeeded

    async def durable(with_trace: bool) -> None:
        name = "store-trace" if with_trace else "store"
        factory = trace_factory(store, False) if with_trace else None
        outcome = await start_run(
            store,
            compiled,
            options,
            command="exec",
            trace=factory,
            run_id=f"{name}-{repetition}",
        )
        assert outcome.result is not None, outcome
        assert outcome.result.succeeded, outcome

    runs = {
        "bare": bare,
        "plain": plain,
        "trace": traced,
        "store": lambda: durable(False),
        "store+trace": lambda: durable(True),
    }
    order = list(VARIANTS[repetition % len(VARIANTS) :] + VARIANTS[: repetition % len(VARIANTS)])
    figures: dict[str, float] = {}
    for variant in order:
        gc.collect()
        started = time.process_time()
        anyio.run(runs[variant])
        figures[variant] = (time.process_time() - started) / steps * 1e6
    store.close()
    # A checkout whose compile_plan pauses the collector also gives it unpaused (the
    # function it wraps), so the pause is measured apart from everything else that differs.
    unpaused = getattr(compile_plan, "__wrapped__", None)
    for size in compile_sizes:
        plan = _chain_plan(size)
        timings: dict[str, list[float]] = {"": [], ", collector on": []}
        for _ in range(3):
            for label, function in (("", compile_plan), (", collector on", unpaused)):
                if function is None:
                    continue
                gc.collect()
                started = time.process_time()
                function(plan, registry, max_steps=size)
                timings[label].append((time.process_time() - started) / size * 1e6)
        for label, values in timings.items():
            if values:
                figures[f"compile {size}{label}"] = statistics.median(values)
    return figures


def measure_matchers(repetitions: int = 200) -> str:
    """How fast the environment's secret values are looked for in a text, three ways: each
    value with ``in`` (C's substring search), one regular expression alternating the
    values (longest first), and an Aho-Corasick automaton (``pyahocorasick``, when
    installed); for 1, 4 and 16 values of 12 to 60 characters and texts of 40, 1,000 and
    100,000 characters holding none of them. Returns a Markdown table of µs per text
    (medians of ``repetitions`` timings, fewer for long texts)."""
    import random
    import re
    import string
    import timeit

    try:
        import ahocorasick  # type: ignore[import-not-found]
    except ImportError:
        ahocorasick = None
    generator = random.Random(23)
    alphabet = string.ascii_letters + string.digits
    lines = [
        "| values | text chars | `in` each | one alternation | Aho-Corasick |",
        "|---|---|---|---|---|",
    ]
    for count in (1, 4, 16):
        values = sorted(
            (
                "".join(generator.choices(alphabet, k=generator.randint(12, 60)))
                for _ in range(count)
            ),
            key=lambda value: (-len(value), value),
        )
        alternation = re.compile("|".join(map(re.escape, values)))
        automaton = None
        if ahocorasick is not None:
            automaton = ahocorasick.Automaton()
            for value in values:
                automaton.add_word(value, value)
            automaton.make_automaton()
        for size in (40, 1000, 100_000):
            text = "".join(generator.choices(string.ascii_letters + " ,.:\n", k=size))
            number = max(1, repetitions * 1000 // max(size, 1000))

            def each(text: str = text, values: list[str] = values) -> bool:
                return any(value in text for value in values)

            def one(text: str = text, alternation: Any = alternation) -> bool:
                return alternation.search(text) is not None

            def aho(text: str = text, automaton: Any = automaton) -> bool:
                return next(automaton.iter(text), None) is not None

            cells = []
            for function in (each, one, aho):
                if function is aho and automaton is None:
                    cells.append("n/a")
                    continue
                timings = timeit.repeat(function, number=number, repeat=5)
                cells.append(f"{statistics.median(timings) / number * 1e6:.2f}")
            lines.append(f"| {count} | {size} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def profile_once(steps: int, folder: Path, top: int = 25) -> str:
    """cProfile of one ``store+trace`` run: the ``top`` functions by own time, as text."""
    import cProfile
    import io
    import pstats

    import anyio

    from plandag.compiler import compile_plan
    from plandag.runs.options import RunOptions
    from plandag.runs.segments import start_run

    trace_factory = _trace_factory()
    from plandag.store import Store
    from plandag.tools.base import tool
    from plandag.tools.registry import Registry

    registry = Registry([tool(name="noop_inline", inline=True)(_noop)])
    compiled = compile_plan(_chain_plan(steps), registry, max_steps=steps)
    store = Store(folder / "profile.sqlite3")

    async def run() -> None:
        await start_run(
            store,
            compiled,
            RunOptions(max_steps=steps),
            command="exec",
            trace=trace_factory(store, False),
            run_id="profile",
        )

    profiler = cProfile.Profile()
    profiler.enable()
    anyio.run(run)
    profiler.disable()
    store.close()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    out.write("\n")
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def _child(arguments: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="trace-bench-") as folder:
        if arguments.profile_child:
            print(profile_once(arguments.steps, Path(folder)))
            return
        figures = measure_once(
            arguments.steps, tuple(arguments.compile_sizes), Path(folder), arguments.repetition
        )
    import plandag

    figures_out = {"plandag": str(Path(plandag.__file__).parent), **figures}
    print(json.dumps(figures_out))


def _run_child(tree: Path, arguments: argparse.Namespace, repetition: int, *extra: str) -> str:
    environment = dict(os.environ, PYTHONPATH=str(tree))
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        "--steps",
        str(arguments.steps),
        "--repetition",
        str(repetition),
        "--compile-sizes",
        *[str(size) for size in arguments.compile_sizes],
        *extra,
    ]
    done = subprocess.run(
        command, env=environment, cwd=tree, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"the measuring process failed in {tree}:\n{done.stderr[-4000:]}")
    return done.stdout


def render(results: dict[str, list[dict[str, float]]]) -> str:
    """A Markdown table: one row per figure, one column per checkout (medians)."""
    names = list(results)
    keys = [*VARIANTS, "trace - plain", "store+trace - store"]
    keys += sorted(
        {key for rows in results.values() for row in rows for key in row if "compile" in key},
        key=lambda key: (int(key.split()[1].rstrip(",")), key),
    )
    lines = ["| CPU µs per step | " + " | ".join(names) + " |"]
    lines.append("|---|" + "---|" * len(names))
    for key in keys:
        cells = []
        for name in names:
            if key == "trace - plain":
                values = [row["trace"] - row["plain"] for row in results[name]]
            elif key == "store+trace - store":
                values = [row["store+trace"] - row["store"] for row in results[name]]
            else:
                values = [row[key] for row in results[name] if key in row]
            cells.append(f"{statistics.median(values):.1f}" if values else "n/a")
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    for name in names:
        row = {key: statistics.median(r[key] for r in results[name]) for key in VARIANTS}
        lines.append(
            f"\n{name}: store+trace ÷ bare = {row['store+trace'] / row['bare']:.1f}×, "
            f"plain ÷ bare = {row['plain'] / row['bare']:.2f}×"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and print the table (or, with ``--child``, one repetition's
    figures as JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--compile-sizes", type=int, nargs="*", default=[1000, 10000])
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="3 repetitions")
    parser.add_argument("--against", type=Path, help="another checkout, measured alongside")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of store+trace")
    parser.add_argument(
        "--matchers", action="store_true", help="also time three ways to find secret values"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--profile-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--repetition", type=int, default=0, help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    if arguments.child:
        _child(arguments)
        return
    repetitions = 3 if arguments.quick else arguments.repetitions
    here = Path(__file__).resolve().parents[1]
    trees = {"this": here}
    if arguments.against is not None:
        trees = {"against": arguments.against.resolve(), "this": here}
    print(f"load average before: {os.getloadavg()}")
    results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for repetition in range(repetitions):
        for name, tree in trees.items():
            figures = json.loads(_run_child(tree, arguments, repetition).splitlines()[-1])
            where = figures.pop("plandag")
            if repetition == 0:
                print(f"{name}: plandag from {where}")
            results[name].append(figures)
    print(f"load average after: {os.getloadavg()}")
    print(f"chain of {arguments.steps} steps, {repetitions} repetitions, medians\n")
    print(render(results))
    if arguments.matchers:
        print("\n## Secret values looked for in a text, µs per text (medians)\n")
        print(measure_matchers())
    if arguments.profile:
        for name, tree in trees.items():
            print(f"\n## cProfile of store+trace ({name})\n")
            print(_run_child(tree, arguments, 0, "--profile-child"))


if __name__ == "__main__":
    main()
