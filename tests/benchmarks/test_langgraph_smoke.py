"""The plandag-vs-LangGraph benchmark still works.

A 30-step random DAG through both systems: every step ran exactly once, each step started
after all its parents ended (from the recorded times), and makespan / critical path ≥ 1 for
both. The tests that run LangGraph skip when it is not installed (CI installs only
``.[dev]``; LangGraph is in the optional ``bench`` group); the schedule checker, the
superstep arithmetic and the table's "not installed" row are tested without it.
"""

from __future__ import annotations

import anyio
import pytest

from benchmarks.dags import BenchmarkDag, random_dag
from benchmarks.langgraph_bench import (
    LANGGRAPH_MISSING,
    ScheduleViolation,
    build_langgraph,
    compile_for_plandag,
    dag_depth,
    dag_levels,
    langgraph_available,
    measure_side_by_side,
    plandag_times,
    run_langgraph,
    run_plandag,
    superstep_bound_s,
    verify_schedule,
)
from benchmarks.run import QUICK, Row, _langgraph_rows, render

needs_langgraph = pytest.mark.skipif(not langgraph_available(), reason=LANGGRAPH_MISSING)

#: 1 and 2 are roots; 3 depends on 1 only; 4 joins 2 and 3 (parents at depths 1 and 2).
SKEWED = BenchmarkDag(
    {1: (), 2: (), 3: (1,), 4: (2, 3)},
    {1: 0.01, 2: 0.15, 3: 0.01, 4: 0.01},
)


# -- without LangGraph ------------------------------------------------------------------------


def test_levels_depth_and_superstep_bound() -> None:
    assert dag_levels(SKEWED) == {1: 1, 2: 1, 3: 2, 4: 3}
    assert dag_depth(SKEWED) == 3
    # Superstep 1 lasts as long as step 2 (0.15 s), then 3 (0.01 s), then 4 (0.01 s).
    assert superstep_bound_s(SKEWED, SKEWED.durations) == pytest.approx(0.17)


def test_verify_schedule_accepts_a_valid_run() -> None:
    records = [(1, 0.0, 1.0), (2, 0.0, 2.0), (3, 1.0, 1.5), (4, 2.0, 3.0)]
    assert verify_schedule(SKEWED, records) == {
        1: (0.0, 1.0),
        2: (0.0, 2.0),
        3: (1.0, 1.5),
        4: (2.0, 3.0),
    }


def test_verify_schedule_refuses_a_step_run_twice_or_never() -> None:
    twice = [(1, 0.0, 1.0), (1, 0.0, 1.0), (2, 0.0, 2.0), (4, 2.0, 3.0)]
    with pytest.raises(ScheduleViolation, match=r"2 step\(s\) did not run exactly once: "):
        verify_schedule(SKEWED, twice)


def test_verify_schedule_refuses_a_step_started_before_its_parent_ended() -> None:
    early = [(1, 0.0, 1.0), (2, 0.0, 2.0), (3, 1.0, 1.5), (4, 1.75, 3.0)]
    with pytest.raises(ScheduleViolation, match=r"step 4 started 0\.250000 s before its parent 2"):
        verify_schedule(SKEWED, early)


def test_the_table_says_langgraph_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("benchmarks.run.langgraph_available", lambda: False)
    raw: dict[str, object] = {}
    rows = _langgraph_rows(QUICK, raw, lambda text: None)
    assert raw == {"langgraph": None}
    assert rows == [
        Row(
            "makespan / critical path, baseline LangGraph StateGraph",
            None,
            None,
            "×",
            "≤ 1.02",
            None,
            "not installed (pip install -e '.[bench]')",
        )
    ]
    assert render(rows).splitlines()[2] == (
        "| makespan / critical path, baseline LangGraph StateGraph | —        "
        "| not installed (pip install -e '.[bench]') | —     | ≤ 1.02 | —    |"
    )


# -- with LangGraph ---------------------------------------------------------------------------


@needs_langgraph
def test_a_30_step_dag_runs_exactly_once_in_order_through_both() -> None:
    dag = random_dag(30, seed=2024)
    compiled = compile_for_plandag(dag)
    app = build_langgraph(dag)

    async def both() -> None:
        _, result = await run_plandag(compiled)
        records = plandag_times(result)
        assert sorted(step_id for step_id, _, _ in records) == list(range(1, 31))
        plandag = verify_schedule(dag, records)
        langgraph = (await run_langgraph(dag, app)).times
        assert sorted(langgraph) == list(range(1, 31))
        for times in (plandag, langgraph):
            for step_id, parents in dag.parents.items():
                for parent in parents:
                    assert times[step_id][0] >= times[parent][1]

    anyio.run(both)


@needs_langgraph
def test_langgraph_waits_for_the_superstep_barrier_and_plandag_does_not() -> None:
    compiled = compile_for_plandag(SKEWED)

    async def both() -> None:
        _, result = await run_plandag(compiled)
        plandag = verify_schedule(SKEWED, plandag_times(result))
        langgraph = (await run_langgraph(SKEWED)).times
        # Step 3 depends on step 1 only: plandag starts it while step 2 (0.15 s) still
        # sleeps; LangGraph starts it in superstep 2, after step 2 has ended.
        assert plandag[3][0] < plandag[2][1]
        assert langgraph[3][0] >= langgraph[2][1]

    anyio.run(both)


@needs_langgraph
def test_measure_side_by_side_never_beats_the_critical_path() -> None:
    figures = measure_side_by_side(size=30, seed=2024, repetitions=2)
    assert (figures.steps, figures.edges, figures.seed) == (30, 37, 2024)
    assert len(figures.plandag_ratios()) == 2
    assert len(figures.langgraph_ratios()) == 2
    assert all(ratio >= 1.0 for ratio in figures.plandag_ratios())
    assert all(ratio >= 1.0 for ratio in figures.langgraph_ratios())
    # A barrier per superstep: LangGraph cannot beat the sum of each superstep's longest step.
    for makespan, bound in zip(
        figures.langgraph_makespan_s, figures.langgraph_superstep_bound_s, strict=True
    ):
        assert makespan >= bound
