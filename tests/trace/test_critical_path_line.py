"""The run_finished line's critical path is the one the graph functions give
(:func:`plandag.dag.graph.dependency_order` and :func:`~plandag.dag.graph.longest_path` over
the steps' parents among them): steps numbered in or out of dependency order, parents that
are not steps of the run, cycles, ties and durations that are missing or not numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plandag.dag.graph import dependency_order, longest_path
from plandag.scheduler.result import AttemptRecord, RunResult, StepRecord
from plandag.trace.reader import load_trace
from plandag.trace.writer import TraceWriter, _critical_path

durations = st.one_of(
    st.none(),
    st.sampled_from([0.0, 1.0, 2.0, float("nan"), float("inf")]),
    st.floats(0, 10),
)


def _expected(steps: dict[int, StepRecord], known: dict[int, list[int]]) -> list[int]:
    parents = {
        step_id: [parent for parent in known.get(step_id, ()) if parent in steps]
        for step_id in steps
    }
    order = dependency_order(parents)
    if order is None:
        return []
    weights = {step_id: record.duration_s or 0.0 for step_id, record in steps.items()}
    return longest_path(order, parents.__getitem__, weights)[0]


@st.composite
def runs(draw: st.DrawFn) -> tuple[dict[int, StepRecord], dict[int, list[int]]]:
    ids = draw(st.lists(st.integers(1, 12), unique=True, max_size=10))
    steps = {
        step_id: StepRecord(id=step_id, tool="t", status="succeeded", duration_s=draw(durations))
        for step_id in ids
    }
    in_order = draw(st.booleans())
    known: dict[int, list[int]] = {}
    for step_id in ids:
        pool = list(range(1, step_id)) if in_order else list(range(1, 14))
        if pool and draw(st.booleans()):
            known[step_id] = draw(st.lists(st.sampled_from(pool), max_size=3))
    return steps, known


@settings(max_examples=400, deadline=None)
@given(run=runs())
def test_the_critical_path_is_the_graph_functions_one(
    run: tuple[dict[int, StepRecord], dict[int, list[int]]],
) -> None:
    steps, known = run
    assert _critical_path(sorted(steps), steps, known) == _expected(steps, known)


def test_a_chain_numbered_in_order_and_one_numbered_against_it(tmp_path: Path) -> None:
    for name, known in (
        ("in_order", {2: [1], 3: [2], 4: [2]}),
        ("against", {1: [3], 3: [4], 2: [4]}),
    ):
        steps = {
            step_id: StepRecord(id=step_id, tool="t", status="skipped", duration_s=float(step_id))
            for step_id in (1, 2, 3, 4)
        }
        path = tmp_path / f"{name}.jsonl"
        writer = TraceWriter(path, "r", clock=lambda: 5.0)
        writer.set_dependencies(known)
        writer.run_finished(
            RunResult(run_id="r", status="failed", steps=steps, started_at=1.0, ended_at=2.0)
        )
        writer.close()
        (segment,) = load_trace(path).segments
        assert segment.critical_path == _expected(steps, known)
    assert _expected(steps, {2: [1], 3: [2], 4: [2]}) == [1, 2, 4]
    assert _expected(steps, {1: [3], 3: [4], 2: [4]}) == [4, 3, 1]


@settings(max_examples=400, deadline=None)
@given(
    run=runs(),
    spend=st.lists(st.tuples(st.floats(0, 5), st.integers(0, 10**6)), max_size=24),
)
def test_the_run_finished_line_has_the_graph_functions_path_and_the_attempts_spend(
    tmp_path_factory: pytest.TempPathFactory,
    run: tuple[dict[int, StepRecord], dict[int, list[int]]],
    spend: list[tuple[float, int]],
) -> None:
    steps, known = run
    for index, (cost, tokens) in enumerate(spend):  # attempts spread over the steps
        if steps:
            record = list(steps.values())[index % len(steps)]
            record.attempt_log.append(
                AttemptRecord(number=index + 1, started_at=1.0, cost_usd=cost, tokens=tokens)
            )
    path = tmp_path_factory.mktemp("run") / "t.jsonl"
    writer = TraceWriter(path, "r", clock=lambda: 5.0)
    writer.set_dependencies(known)
    writer.run_finished(
        RunResult(run_id="r", status="failed", steps=steps, started_at=1.0, ended_at=2.0)
    )
    writer.close()
    line = json.loads(path.read_text(encoding="utf-8").splitlines()[-1])
    assert line["type"] == "run_finished"
    assert line["critical_path"] == _expected(steps, known)
    assert line["spent_usd"] == sum(
        attempt.cost_usd for record in steps.values() for attempt in record.attempt_log
    )
    assert line["spent_tokens"] == sum(
        attempt.tokens for record in steps.values() for attempt in record.attempt_log
    )
