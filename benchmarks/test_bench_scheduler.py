"""pytest-benchmark suite for the scheduler: ``pytest benchmarks/ --benchmark-enable``.

Not part of the default test run (``testpaths = ["tests"]``). Each benchmark runs one graph
of no-op steps through plandag or through the bare anyio loop; pytest-benchmark reports the
statistics per run (divide by the step count for the per-step cost). ``benchmarks/run.py``
prints the side-by-side table.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from benchmarks.bare_anyio import run_bare
from benchmarks.dags import chain, plan_document, wide
from benchmarks.scheduler_bench import benchmark_registry
from plandag.compiler import compile_plan
from plandag.scheduler import run_plan

SIZE = 1000
SHAPES = {"chain": chain(SIZE), "wide": wide(SIZE)}


async def _bare_noop(step_id: int) -> None:
    pass


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("tool_name", ["noop_inline", "noop_async"])
def test_plandag_dispatch(benchmark: Any, shape: str, tool_name: str) -> None:
    dag = SHAPES[shape]
    compiled = compile_plan(plan_document(dag, tool_name), benchmark_registry(), max_steps=dag.size)
    result = benchmark(anyio.run, run_plan, compiled)
    assert result.status == "succeeded"


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_bare_dispatch(benchmark: Any, shape: str) -> None:
    dag = SHAPES[shape]
    bare = benchmark(anyio.run, run_bare, dag, _bare_noop)
    assert len(bare.ended) == dag.size


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_compile(benchmark: Any, shape: str) -> None:
    dag = SHAPES[shape]
    document = plan_document(dag, "noop_inline")
    registry = benchmark_registry()
    compiled = benchmark(compile_plan, document, registry, max_steps=dag.size)
    assert len(compiled.steps) == dag.size
