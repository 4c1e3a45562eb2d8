"""Graph helpers: critical path, ancestors and descendants, Mermaid text (plandag/dag/graph.py)."""

from __future__ import annotations

import networkx as nx
import pytest

from plandag.dag.graph import ancestors, critical_path, descendants, mermaid, topological_order


def diamond() -> nx.DiGraph:
    """1 → 2 → 4 and 1 → 3 → 4."""
    graph = nx.DiGraph()
    graph.add_edges_from([(1, 2), (1, 3), (2, 4), (3, 4)])
    return graph


def six_nodes() -> nx.DiGraph:
    """Two roots (1, 2); 3 needs 1 and 2; 4 needs 1; 5 needs 3 and 4; 6 needs 2 and 4."""
    graph = nx.DiGraph()
    graph.add_edges_from([(1, 3), (2, 3), (1, 4), (3, 5), (4, 5), (4, 6), (2, 6)])
    return graph


SIX_DURATIONS = {1: 2.0, 2: 5.0, 3: 2.0, 4: 4.0, 5: 2.0, 6: 1.0}


def test_critical_path_of_a_diamond_follows_the_slow_branch() -> None:
    # finish: 1 → 1; 2 → 1+5 = 6; 3 → 1+2 = 3; 4 → max(6, 3)+1 = 7
    assert critical_path(diamond(), {1: 1.0, 2: 5.0, 3: 2.0, 4: 1.0}) == ([1, 2, 4], 7.0)
    assert critical_path(diamond(), {1: 1.0, 2: 2.0, 3: 5.0, 4: 1.0}) == ([1, 3, 4], 7.0)


def test_critical_path_of_six_nodes() -> None:
    # finish: 1 → 2; 2 → 5; 3 → max(2, 5)+2 = 7 (via 2); 4 → 2+4 = 6 (via 1);
    # 5 → max(7, 6)+2 = 9 (via 3); 6 → max(6, 5)+1 = 7 (via 4). Longest ends at 5: 2 → 3 → 5.
    assert critical_path(six_nodes(), SIX_DURATIONS) == ([2, 3, 5], 9.0)


def test_critical_path_accepts_a_function_of_the_id() -> None:
    assert critical_path(six_nodes(), SIX_DURATIONS.__getitem__) == ([2, 3, 5], 9.0)


def test_critical_path_without_durations_counts_steps() -> None:
    # Every step weighs 1: the longest chain has 3 steps; ties go to smaller ids (1 → 3 → 5).
    assert critical_path(six_nodes()) == ([1, 3, 5], 3.0)


def test_critical_path_missing_durations_count_one() -> None:
    assert critical_path(diamond(), {2: 0.5, 3: 0.25}) == ([1, 2, 4], 2.5)


def test_critical_path_ties_do_not_depend_on_edge_order() -> None:
    forward = nx.DiGraph([(1, 3), (2, 3)])
    backward = nx.DiGraph([(2, 3), (1, 3)])
    assert critical_path(forward) == critical_path(backward) == ([1, 3], 2.0)


def test_critical_path_of_a_single_step_and_of_nothing() -> None:
    single = nx.DiGraph()
    single.add_node(7)
    assert critical_path(single, {7: 0.3}) == ([7], 0.3)
    assert critical_path(nx.DiGraph()) == ([], 0.0)


def test_critical_path_refuses_a_cycle() -> None:
    with pytest.raises(nx.NetworkXUnfeasible):
        critical_path(nx.DiGraph([(1, 2), (2, 1)]))


def test_ancestors_and_descendants() -> None:
    graph = six_nodes()
    assert ancestors(graph, 5) == {1, 2, 3, 4}
    assert ancestors(graph, 6) == {1, 2, 4}
    assert ancestors(graph, 1) == set()
    assert descendants(graph, 1) == {3, 4, 5, 6}
    assert descendants(graph, 2) == {3, 5, 6}
    assert descendants(graph, 5) == set()


def test_topological_order_prefers_smaller_ids() -> None:
    assert topological_order(six_nodes()) == [1, 2, 3, 4, 5, 6]
    assert topological_order(nx.DiGraph([(3, 1), (2, 1)])) == [2, 3, 1]


def test_mermaid_with_critical_path_highlighted() -> None:
    graph = nx.DiGraph([(1, 2), (1, 3)])
    path, length = critical_path(graph, {1: 1.0, 2: 3.0, 3: 1.0})
    assert (path, length) == ([1, 2], 4.0)
    text = mermaid(graph, labels={1: "read", 2: 'parse "x"', 3: "save"}, highlight=path)
    assert text == (
        "flowchart TD\n"
        '    s1["read"]\n'
        '    s2["parse #quot;x#quot;"]\n'
        '    s3["save"]\n'
        "    s1 ==> s2\n"
        "    s1 --> s3\n"
        "    classDef critical stroke:#d33,stroke-width:3px\n"
        "    class s1,s2 critical\n"
    )


def test_mermaid_without_labels_or_highlight() -> None:
    assert mermaid(nx.DiGraph([(2, 3)])) == (
        'flowchart TD\n    s2["2"]\n    s3["3"]\n    s2 --> s3\n'
    )
