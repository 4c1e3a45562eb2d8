"""The trace's ``plan`` line written from the plan's JSON text, and the ``run_finished``
line's critical path: the same lines as the value's own conversion and networkx give."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plandag.dag.graph import critical_path
from plandag.scheduler.result import RunResult, StepRecord
from plandag.trace.redact import Redactor
from plandag.trace.writer import TraceWriter

T = 1_700_000_000.0
HASH = "ab" * 32

_TEXTS = st.one_of(
    st.text(max_size=10),
    st.sampled_from(
        [
            "Bearer abcdefghijklmnop",
            "sk-ant-abcdefghijkl",
            "https://user:pw@example.com/x",
            "api_key=abcdefgh",
            "cookie: a=b",
            "authorİzation: abcdefghijkl",
            "passſword=abcdefghij",
            "eyJabcdefghij.eyJabcdefghij.abcdefghij",
            "ENVSECRET-VALUE-42",
            'a"quote ENVSECRET-VALUE-42',
            "plain words",
        ]
    ),
)
_KEYS = st.one_of(
    st.text(max_size=6),
    st.sampled_from(["token", "X-Api-Key", "Cookie", "password", "note", "ação", "Authorization"]),
)
_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**53), max_value=2**53),
        st.floats(allow_nan=False, allow_infinity=False),
        _TEXTS,
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(_KEYS, children, max_size=3)
    ),
    max_leaves=12,
)


def _plan(args: list[Any]) -> dict[str, Any]:
    return {
        "version": 1,
        "goal": "g",
        "params": {},
        "steps": [
            {"id": n + 1, "tool": "t", "args": {"value": value}, "depends_on": [], "check": []}
            for n, value in enumerate(args)
        ],
    }


def _plan_line(path: Path, plan: dict[str, Any], redact: Any, *, text: bool) -> str:
    writer = TraceWriter(path, "r", redact=redact, clock=lambda: T)
    compact = json.dumps(plan, ensure_ascii=False, separators=(",", ":")) if text else None
    writer.plan(1, plan, HASH, "stored", text=compact)
    writer.close()
    return path.read_text(encoding="utf-8")


@given(st.lists(_VALUES, min_size=1, max_size=4))
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@pytest.mark.parametrize("redact", [Redactor(), Redactor(personal=True), None])
def test_a_plan_line_from_its_text_is_the_line_of_the_plan_converted(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    redact: Any,
    args: list[Any],
) -> None:
    monkeypatch.setenv("PLANDAG_TEST_SECRET", "ENVSECRET-VALUE-42")
    folder = tmp_path_factory.mktemp("lines")
    plan = _plan(args)
    fast = _plan_line(folder / "fast.jsonl", plan, redact, text=True)
    slow = _plan_line(folder / "slow.jsonl", plan, redact, text=False)
    assert fast == slow
    if redact is not None:
        assert "ENVSECRET-VALUE-42" not in fast


def test_a_secret_in_a_plans_arguments_is_masked_in_the_line_from_its_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLANDAG_TEST_API_KEY", "sk-live-0123456789abcdef")
    plan = _plan([{"Authorization": "Bearer abcdefghijklmnop"}, "key sk-live-0123456789abcdef"])
    line = _plan_line(tmp_path / "t.jsonl", plan, Redactor(), text=True)
    assert "abcdefghijklmnop" not in line
    assert "sk-live-0123456789abcdef" not in line
    assert "[secret]" in line


_DAGS = st.integers(min_value=1, max_value=12).flatmap(
    lambda size: st.tuples(
        st.just(size),
        st.lists(
            st.tuples(st.integers(1, size), st.integers(1, size)).filter(lambda e: e[0] < e[1]),
            max_size=20,
        ),
        st.lists(st.sampled_from([None, 0.0, 0.5, 1.0, 2.0]), min_size=size, max_size=size),
        st.lists(st.integers(1, size + 2), max_size=3),
    )
)


@given(_DAGS)
@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_the_run_finished_critical_path_is_networkxs(
    tmp_path_factory: pytest.TempPathFactory,
    dag: tuple[int, list[tuple[int, int]], list[Any], list[int]],
) -> None:
    size, edges, durations, dropped = dag
    path = tmp_path_factory.mktemp("path") / "t.jsonl"
    writer = TraceWriter(path, "r", clock=lambda: T)
    parents: dict[int, list[int]] = {step_id: [] for step_id in range(1, size + 1)}
    for parent, child in edges:
        parents[child].append(parent)
    parents[1].append(size + 5)  # a parent of an earlier segment, not in the result
    writer.set_dependencies(parents)
    steps = {
        step_id: StepRecord(id=step_id, tool="t", status="succeeded", ended_at=T)
        for step_id in range(1, size + 1)
        if step_id not in dropped
    }
    for step_id, record in steps.items():
        record.duration_s = durations[step_id - 1]
    writer.run_finished(RunResult("r", "succeeded", steps, started_at=T, ended_at=T))
    writer.close()
    graph = nx.DiGraph()
    graph.add_nodes_from(steps)
    graph.add_edges_from(
        (parent, child)
        for child, of in parents.items()
        for parent in of
        if child in steps and parent in steps
    )
    expected = critical_path(graph, {k: r.duration_s or 0.0 for k, r in steps.items()})[0]
    finished = json.loads(path.read_text(encoding="utf-8").splitlines()[-1])
    assert finished["critical_path"] == expected


def test_a_cycle_gives_an_empty_critical_path(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    writer = TraceWriter(path, "r", clock=lambda: T)
    writer.set_dependencies({1: [2], 2: [1]})
    steps = {n: StepRecord(id=n, tool="t", status="succeeded", ended_at=T) for n in (1, 2)}
    writer.run_finished(RunResult("r", "succeeded", steps, started_at=T, ended_at=T))
    writer.close()
    assert json.loads(path.read_text(encoding="utf-8").splitlines()[-1])["critical_path"] == []


def test_a_compiled_plans_parents_are_the_plans_dependencies() -> None:
    from plandag.checks import BUILTIN_CHECKS
    from plandag.compiler import compile_plan
    from plandag.tools.base import tool
    from plandag.tools.registry import Registry
    from plandag.trace.writer import plan_dependencies

    @tool
    def echo(value: Any = None) -> Any:
        """Return ``value``."""
        return value

    plan = {
        "params": {"p": {"type": "string", "default": "x"}},
        "steps": [
            {"id": 1, "tool": "echo", "args": {"value": "<param.p>"}},
            {"id": 2, "tool": "echo", "args": {"value": {"a": ["<step_1_result>", 3]}}},
            {"id": 5, "tool": "echo", "args": {}, "depends_on": [2, 1]},
            {
                "id": 3,
                "tool": "echo",
                "args": {"value": "see <step_2_result.a.0> and <step_1_result>"},
                "depends_on": [1],
                "check": [{"kind": "equals", "value": "<step_5_result>"}],
            },
            {"id": 4, "tool": "echo", "args": {"value": "<param.p>"}},
        ],
        "output": "<step_3_result>",
    }
    compiled = compile_plan(plan, Registry([echo], BUILTIN_CHECKS))
    document = compiled.plan.model_dump(mode="json", exclude_none=True)
    assert {key: list(step.parents) for key, step in compiled.steps.items()} == plan_dependencies(
        document
    )
