"""The scheduler's own CPU per NF-e document: the stored plan's 9 steps through ``run_plan``
with the batch's run options, each tool replaced by one returning the result it gave on a
real invoice, so that what is measured is the run (args resolved and validated against the
real args models, records, checks, budget, the result) and not the XML work.

Usage (from the repository root)::

    .venv/bin/python benchmarks/nfe_scheduler_overhead.py [--documents 1000]
        [--repetitions 15] [--without-checks] [--input examples/nfe/FILE.xml]

Prints the smallest CPU time (``time.process_time``) of the repetitions, in microseconds per
document and per step; the smallest is the least disturbed by other work on the machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` and ``plandag`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import anyio

DEFAULT_INPUT = (
    Path(__file__).resolve().parents[1]
    / "examples/nfe/nfelib_35180834128745000152550010000476121675985748-nfe.xml"
)


def _returning(value: Any) -> Any:
    def canned(**arguments: Any) -> Any:
        return value

    return canned


async def measure(
    path: Path, documents: int, repetitions: int, *, checks: bool = True
) -> tuple[list[float], int]:
    """CPU seconds per document of ``documents`` runs of the stored plan with canned tool
    results, once per repetition (after one real run of ``path`` that gives the results),
    and the plan's number of steps.

    Raises:
        RuntimeError: the real run of ``path`` did not succeed.
    """
    from plandag.brakes.budget import Budget
    from plandag.brakes.retry import RetryPolicy
    from plandag.compiler import compile_plan
    from plandag.extract.nfe import load_plan_text
    from plandag.scheduler import RunLimits, run_plan
    from plandag.tools.boundary import WriteBoundary
    from plandag.tools.registry import default_registry

    params = {"input": str(path), "index": 0}
    compiled = compile_plan(
        json.loads(load_plan_text()),
        default_registry(),
        params=params,
        write_boundary=WriteBoundary.from_specs([Path.cwd()]),
    )

    def options() -> dict[str, Any]:  # what extract nfe gives each document's run
        return {
            "retry": RetryPolicy(retries=2),
            "limits": RunLimits.lifted(),
            "budget": Budget(1.0, 200_000),
            "escape_results": False,  # the batch escapes each record itself, once
        }

    real = await run_plan(dataclasses.replace(compiled, params=params), **options())
    if real.status != "succeeded":
        raise RuntimeError(f"{path}: the stored plan ended {real.status}; give a valid invoice")
    steps = {}
    for step_id, compiled_step in compiled.steps.items():
        tool = dataclasses.replace(
            compiled_step.tool, function=_returning(real.steps[step_id].result)
        )
        steps[step_id] = dataclasses.replace(
            compiled_step, tool=tool, checks=compiled_step.checks if checks else ()
        )
    canned = dataclasses.replace(compiled, steps=steps)
    run_options = options()
    per_document: list[float] = []
    for _ in range(repetitions):
        started = time.process_time()
        for _ in range(documents):
            result = await run_plan(dataclasses.replace(canned, params=params), **run_options)
        per_document.append((time.process_time() - started) / documents)
        if result.status != "succeeded":
            raise RuntimeError(f"a canned run ended {result.status}")
    return per_document, len(steps)


def main(argv: list[str] | None = None) -> int:
    """Print the scheduler's CPU per document and per step of the NF-e plan."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=1000, help="runs per repetition")
    parser.add_argument("--repetitions", type=int, default=15, help="repetitions")
    parser.add_argument("--without-checks", action="store_true", help="drop the record's checks")
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT, help="a valid invoice")
    options = parser.parse_args(argv)
    figures, steps = anyio.run(
        lambda: measure(
            options.input,
            options.documents,
            options.repetitions,
            checks=not options.without_checks,
        )
    )
    best = min(figures)
    print(
        f"run_plan, NF-e plan with canned results: {best * 1e6:.1f} us CPU per document, "
        f"{best * 1e6 / steps:.2f} us per step of {steps} (min of {len(figures)})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
