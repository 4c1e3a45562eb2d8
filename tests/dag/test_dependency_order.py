"""Ordering and the longest path over each step's parents, without networkx: the same
answers as networkx's lexicographical topological sort and :func:`critical_path`, and
compiling and estimating a plan import no networkx."""

from __future__ import annotations

import json
import subprocess
import sys

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st

from plandag.dag.graph import critical_path, dependency_order, longest_path


def test_the_smallest_ready_step_comes_first() -> None:
    # 5 and 2 are roots; 3 needs 5; 1 needs 2 and 3
    assert dependency_order({1: [2, 3], 2: [], 3: [5], 5: []}) == [2, 5, 3, 1]
    assert dependency_order({4: [9]}) == [9, 4]  # a parent that is not a key is a step
    assert dependency_order({}) == []


def test_a_cycle_gives_none() -> None:
    assert dependency_order({1: [3], 2: [1], 3: [2], 4: []}) is None
    assert dependency_order({1: [1]}) is None


def test_longest_path_over_parents_matches_the_critical_path() -> None:
    parents = {1: [], 2: [1], 3: [1], 4: [2, 3]}
    durations = {1: 1.0, 2: 5.0, 3: 2.0, 4: 1.0}
    order = dependency_order(parents)
    assert order == [1, 2, 3, 4]
    assert longest_path(order, parents.__getitem__, durations) == ([1, 2, 4], 7.0)
    assert longest_path([], parents.__getitem__) == ([], 0.0)


@st.composite
def dags(draw: st.DrawFn) -> dict[int, list[int]]:
    """Step ids 1..n in a shuffled order, each depending on some steps drawn before it."""
    count = draw(st.integers(min_value=0, max_value=12))
    ids = draw(st.permutations(list(range(1, count + 1))))
    parents: dict[int, list[int]] = {}
    for index, step in enumerate(ids):
        earlier = ids[:index]
        parents[step] = draw(st.lists(st.sampled_from(earlier), unique=True)) if earlier else []
    return parents


@settings(max_examples=150, deadline=None)
@given(dags(), st.lists(st.floats(min_value=0, max_value=10), min_size=12, max_size=12))
def test_the_same_answers_as_networkx(parents: dict[int, list[int]], weights: list[float]) -> None:
    graph = nx.DiGraph()
    graph.add_nodes_from(parents)
    graph.add_edges_from((parent, child) for child, of in parents.items() for parent in of)
    durations = {step: weights[step - 1] for step in parents}

    order = dependency_order(parents)

    assert order == list(nx.lexicographical_topological_sort(graph))
    assert longest_path(order, parents.__getitem__, durations) == critical_path(graph, durations)


PROBE = """
import json, sys
from plandag.compiler import compile_plan
from plandag.scheduler.estimate import estimate_plan
from plandag.tools.registry import default_registry
plan = {"version": 1, "goal": "g", "steps": [
    {"id": 1, "tool": "json_select", "args": {"data": {"a": 1}, "expr": "a"}},
    {"id": 2, "tool": "json_select", "args": {"data": "<step_1_result>", "expr": "@"}}]}
compiled = compile_plan(plan, default_registry())
print(json.dumps([list(compiled.order), estimate_plan(compiled).critical_path,
                  "networkx" in sys.modules]))
print(json.dumps(sorted(compiled.graph.edges)))
"""


def test_compiling_and_estimating_import_no_networkx_until_the_graph_is_asked_for() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    first, second = done.stdout.splitlines()
    assert json.loads(first) == [[1, 2], [1, 2], False]
    assert json.loads(second) == [[1, 2]]
