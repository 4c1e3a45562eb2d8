"""Graphs for the scheduler benchmarks: chains, wide graphs and seeded random DAGs.

A graph here is a :class:`BenchmarkDag`: step ids ``1..n`` in a topological order (every
parent has a smaller id than its child), the parents of each step, and, for the makespan
benchmark, how long each step sleeps. The same object feeds both runners compared in
``benchmarks/run.py``: the plandag scheduler (through :func:`plan_document`) and the bare
anyio loop (``benchmarks/bare_anyio.py``).

The random DAGs: each step's parents are drawn from the previous 12 steps, 0 to 3 of them;
each step's duration from a log-normal with median 50 ms, capped at 0.4 s. The log-normal's
sigma is our choice, 0.5 (so about 95 % of the durations fall between 19 ms and 133 ms,
before the cap), a spread like that of a batch of similar calls to the same service.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Mapping
from typing import Any

__all__ = [
    "DEFAULT_SIGMA",
    "DURATION_CAP_S",
    "MAX_PARENTS",
    "MEDIAN_DURATION_S",
    "PARENT_WINDOW",
    "BenchmarkDag",
    "chain",
    "plan_document",
    "random_dag",
    "wide",
]

#: Median step duration of the random DAGs, in seconds (50 ms).
MEDIAN_DURATION_S = 0.05
#: Longest step duration, in seconds (0.4 s); longer draws are cut to it.
DURATION_CAP_S = 0.4
#: Sigma of the log-normal (of the natural log of the duration); our choice, see above.
DEFAULT_SIGMA = 0.5
#: Parents are drawn from this many previous steps (12).
PARENT_WINDOW = 12
#: At most this many parents per step (0 to 3).
MAX_PARENTS = 3


@dataclasses.dataclass(frozen=True)
class BenchmarkDag:
    """A DAG over step ids ``1..n``, parents before children.

    Attributes:
        parents: the parents of every step by id (ids sorted ascending), for every id.
        durations: seconds each step sleeps (empty for no-op graphs).
    """

    parents: Mapping[int, tuple[int, ...]]
    durations: Mapping[int, float] = dataclasses.field(default_factory=dict)

    @property
    def size(self) -> int:
        """The number of steps."""
        return len(self.parents)

    def children(self) -> dict[int, list[int]]:
        """The children of every step by id (ascending), for every id."""
        result: dict[int, list[int]] = {step_id: [] for step_id in self.parents}
        for step_id, parents in self.parents.items():
            for parent in parents:
                result[parent].append(step_id)
        return result

    def edge_count(self) -> int:
        """The number of dependency edges."""
        return sum(len(parents) for parents in self.parents.values())


def chain(size: int) -> BenchmarkDag:
    """A chain ``1 → 2 → … → size``: each step waits for the one before.

    Raises:
        ValueError: ``size`` below 1.
    """
    if size < 1:
        raise ValueError(f"a chain needs at least 1 step, not {size}")
    return BenchmarkDag({1: (), **{step_id: (step_id - 1,) for step_id in range(2, size + 1)}})


def wide(width: int) -> BenchmarkDag:
    """One root, ``width`` children of it, and one sink depending on all of them.

    Step 1 is the root, steps ``2..width+1`` the children, step ``width+2`` the sink; the
    graph has ``width + 2`` steps.

    Raises:
        ValueError: ``width`` below 1.
    """
    if width < 1:
        raise ValueError(f"a wide graph needs at least 1 child, not {width}")
    children = tuple(range(2, width + 2))
    parents: dict[int, tuple[int, ...]] = {1: ()}
    parents.update(dict.fromkeys(children, (1,)))
    parents[width + 2] = children
    return BenchmarkDag(parents)


def random_dag(
    size: int,
    seed: int,
    *,
    sigma: float = DEFAULT_SIGMA,
    median_s: float = MEDIAN_DURATION_S,
    cap_s: float = DURATION_CAP_S,
    window: int = PARENT_WINDOW,
    max_parents: int = MAX_PARENTS,
) -> BenchmarkDag:
    """A seeded random DAG of sleeping steps, for the makespan benchmark.

    Step ``i`` draws a parent count uniformly from ``0..max_parents`` (fewer when fewer
    steps precede it), then that many distinct parents uniformly among steps
    ``max(1, i - window) .. i - 1``. Its duration is ``min(cap_s, lognormvariate(ln(median_s),
    sigma))`` seconds. The same arguments give the same DAG on every machine (Python's
    ``random.Random`` is specified to be reproducible for a seed).

    Args:
        size: the number of steps (ids ``1..size``).
        seed: the random seed.
        sigma: sigma of the duration's natural log (default 0.5).
        median_s: the durations' median, seconds (default 0.05).
        cap_s: the longest duration, seconds (default 0.4).
        window: parents come from this many previous steps (default 12).
        max_parents: at most this many parents per step (default 3).

    Returns:
        A :class:`BenchmarkDag` with a duration for every step.

    Raises:
        ValueError: ``size`` below 1, or a negative or zero ``median_s``, ``cap_s``,
            ``window``, or a negative ``sigma`` or ``max_parents``.
    """
    if size < 1:
        raise ValueError(f"a DAG needs at least 1 step, not {size}")
    if median_s <= 0 or cap_s <= 0 or window < 1 or sigma < 0 or max_parents < 0:
        raise ValueError("median_s, cap_s and window must be > 0; sigma, max_parents >= 0")
    generator = random.Random(seed)
    mu = math.log(median_s)
    parents: dict[int, tuple[int, ...]] = {}
    durations: dict[int, float] = {}
    for step_id in range(1, size + 1):
        candidates = list(range(max(1, step_id - window), step_id))
        count = min(generator.randint(0, max_parents), len(candidates))
        parents[step_id] = tuple(sorted(generator.sample(candidates, count)))
        durations[step_id] = min(cap_s, generator.lognormvariate(mu, sigma))
    return BenchmarkDag(parents, durations)


def plan_document(
    dag: BenchmarkDag, tool: str, *, with_durations: bool = False, goal: str = "benchmark"
) -> dict[str, Any]:
    """The plan JSON (as a dict) running ``tool`` once per step of ``dag``.

    Args:
        dag: the graph.
        tool: the registered tool every step calls.
        with_durations: pass each step's duration as ``{"seconds": d}``; otherwise the
            steps take no arguments.
        goal: the plan's goal text.

    Returns:
        A plan dict for :func:`plandag.compiler.compile_plan` (``max_steps`` must be at
        least ``dag.size``).
    """
    steps = []
    for step_id, parents in dag.parents.items():
        args: dict[str, Any] = {"seconds": dag.durations[step_id]} if with_durations else {}
        steps.append({"id": step_id, "tool": tool, "args": args, "depends_on": list(parents)})
    return {"version": 1, "goal": goal, "steps": steps}
