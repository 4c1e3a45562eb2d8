"""A chain of inline steps runs in one task but still lets other tasks in every few ms."""

from __future__ import annotations

import itertools
import time

import anyio
import anyio.lowlevel

from plandag.checks import BUILTIN_CHECKS
from plandag.compiler import compile_plan
from plandag.scheduler import run_plan
from plandag.tools.base import tool
from plandag.tools.registry import Registry


@tool(inline=True)
def busy(x: int) -> int:
    """Spin for 1 ms without suspending, then return x + 1."""
    end = time.perf_counter() + 0.001
    while time.perf_counter() < end:
        pass
    return x + 1


TICKS: list[float] = []


@tool
async def ticker(count: int) -> int:
    """Record a timestamp every event-loop turn, `count` times."""
    for _ in range(count):
        TICKS.append(time.time())
        await anyio.lowlevel.checkpoint()
    return count


def test_inline_chain_yields_to_siblings_and_keeps_order() -> None:
    TICKS.clear()
    steps = [{"id": 1, "tool": "busy", "args": {"x": 0}}]
    steps += [
        {"id": n, "tool": "busy", "args": {"x": f"<step_{n - 1}_result>"}, "depends_on": [n - 1]}
        for n in range(2, 101)
    ]
    steps.append({"id": 101, "tool": "ticker", "args": {"count": 10_000}})
    compiled = compile_plan(
        {"steps": steps, "output": "<step_100_result>"}, Registry([busy, ticker], BUILTIN_CHECKS)
    )
    result = anyio.run(run_plan, compiled)
    assert result.status == "succeeded"
    assert result.output == 100
    chain = [result.steps[n] for n in range(1, 101)]
    assert all(a.ended_at <= b.started_at for a, b in itertools.pairwise(chain))
    chain_start, chain_end = chain[0].started_at, chain[-1].ended_at
    assert chain_start is not None
    assert chain_end is not None
    # The chain holds >= 100 ms of busy work in one task. Yielding every 5 ms lets the
    # ticker in about 20 times meanwhile; a chain that never yielded would let it in once.
    during = [t for t in TICKS if chain_start < t < chain_end]
    # (a count, not a gap in wall-clock time: a loaded machine may pause the whole process)
    assert len(during) >= 8
