"""Graph helpers over a plan's dependency graph (a networkx DiGraph, edges parent → child).

Nodes are step ids (ints). The compiler builds the graph (``CompiledPlan.graph``); these
functions only read it. :func:`dependency_order` and :func:`longest_path` work on the
parents of each step instead, without networkx, so that compiling and estimating a plan
(``plandag check``) does not import it.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import networkx as nx

__all__ = [
    "BottomLevels",
    "HasChildren",
    "ancestors",
    "bottom_levels",
    "critical_path",
    "dependency_order",
    "descendants",
    "longest_path",
    "mermaid",
    "parents_first_among",
    "parents_first_order",
    "topological_order",
]


def topological_order(graph: nx.DiGraph) -> list[int]:
    """Step ids in a topological order, ties broken by the smaller id first."""
    import networkx as nx

    return list(nx.lexicographical_topological_sort(graph))


def ancestors(graph: nx.DiGraph, step_id: int) -> set[int]:
    """Every step that ``step_id`` depends on, directly or not."""
    import networkx as nx

    return set(nx.ancestors(graph, step_id))


def descendants(graph: nx.DiGraph, step_id: int) -> set[int]:
    """Every step that depends on ``step_id``, directly or not (what a failure prunes)."""
    import networkx as nx

    return set(nx.descendants(graph, step_id))


def dependency_order(parents: Mapping[int, Iterable[int]]) -> list[int] | None:
    """The steps in the order :func:`topological_order` gives (Kahn's algorithm, the
    smallest ready id first, as ``networkx.lexicographical_topological_sort``).

    Args:
        parents: each step's parents; a parent that is not a key is a step of its own
            (with no parents).

    Returns:
        Every step (keys and parents), or None when the dependencies form a cycle.
    """
    waiting: dict[int, int] = {}
    children: dict[int, list[int]] = {}
    for child, of in parents.items():
        waiting.setdefault(child, 0)
        for parent in set(of):
            waiting.setdefault(parent, 0)
            waiting[child] += 1
            children.setdefault(parent, []).append(child)
    ready = [node for node, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        node = heapq.heappop(ready)
        order.append(node)
        for child in children.get(node, ()):
            waiting[child] -= 1
            if waiting[child] == 0:
                heapq.heappush(ready, child)
    return order if len(order) == len(waiting) else None


def parents_first_order(parents: Mapping[int, Iterable[int]]) -> list[int] | None:
    """An order of the steps with every step after its parents, for :func:`longest_path`
    (whose answer is the same in any such order): the keys of ``parents`` in their own
    order when it is one (a plan's steps usually come after their parents: one pass over
    the edges), else :func:`dependency_order`'s.

    Args:
        parents: each step's parents; a parent that is not a key is a step of its own
            (with no parents).

    Returns:
        Every step (keys and parents), or None when the dependencies form a cycle.
    """
    seen: set[int] = set()
    for node, of in parents.items():
        for parent in of:
            if parent not in seen:
                return dependency_order(parents)
        seen.add(node)
    return list(parents)


def parents_first_among(
    parents: Mapping[int, Sequence[int]],
) -> tuple[list[int], Mapping[int, Sequence[int]]] | None:
    """The steps that are keys of ``parents``, each after its parents among them
    (:func:`parents_first_order`), and each one's parents among them, for
    :func:`longest_path`: ``parents`` itself when every parent is a key (no list copied),
    else copies without the others.

    Args:
        parents: each step's parents; a parent that is not a key is left out.

    Returns:
        ``(order, parents among the keys)``, or None when the dependencies form a cycle.
    """
    order = parents_first_order(parents)
    if order is not None and len(order) == len(parents):  # every parent is a key
        return order, parents
    if order is None:  # a cycle: of keys only (a parent that is no key has no parents)
        return None
    among = {node: [parent for parent in of if parent in parents] for node, of in parents.items()}
    order = parents_first_order(among)
    return (order, among) if order is not None else None


def _unit_weight(node: int) -> float:
    return 1.0


def critical_path(
    graph: nx.DiGraph,
    durations: Mapping[int, float] | Callable[[int], float] | None = None,
) -> tuple[list[int], float]:
    """The longest path through the DAG, weighting each step by its duration.

    Args:
        graph: an acyclic DiGraph of step ids.
        durations: seconds per step (a mapping or a function of the id); missing steps and
            ``None`` count 1.0 each, which gives the longest chain by step count.

    Returns:
        ``(path, length)``: the step ids on the critical path in order, and its length in
        the durations' unit; ``([], 0.0)`` for an empty graph. The makespan of any schedule
        is at least this length. Ties are broken towards smaller step ids (the path that
        ends at the smallest id, and at each step the smallest parent id).

    Raises:
        networkx.NetworkXUnfeasible: the graph has a cycle.
    """
    return longest_path(topological_order(graph), graph.predecessors, durations)


def longest_path(
    order: Iterable[int],
    parents: Callable[[int], Iterable[int]],
    durations: Mapping[int, float] | Callable[[int], float] | None = None,
) -> tuple[list[int], float]:
    """:func:`critical_path` over steps given in a topological ``order`` (say
    :func:`dependency_order`'s) with their ``parents``, without a graph.

    Args:
        order: every step, each after its parents.
        parents: a step's parents (each in ``order``).
        durations: as for :func:`critical_path`.

    Returns:
        ``(path, length)`` as :func:`critical_path` returns them.
    """
    weight: Callable[[int], float]
    if durations is None:
        weight = _unit_weight
    elif callable(durations):
        weight = durations
    else:
        mapping = durations

        def weight(node: int) -> float:
            return float(mapping.get(node, 1.0))

    finish: dict[int, float] = {}
    previous: dict[int, int | None] = {}
    # Among parents finishing at the same time the smallest id wins, so that the path does
    # not depend on the order edges were added in. Once a step finishes at NaN (a duration
    # that is not a number), which compares with nothing, the parents are taken in sorted
    # order (the first wins unless a later one finishes strictly later), and the end too.
    unordered = False
    for node in order:
        best_parent: int | None = None
        best = 0.0
        for parent in sorted(parents(node)) if unordered else parents(node):
            at = finish[parent]
            if best_parent is None or at > best or (at == best and parent < best_parent):
                best, best_parent = at, parent
        at = best + weight(node)
        if at != at:
            unordered = True
        finish[node] = at
        previous[node] = best_parent
    if not finish:
        return [], 0.0
    if unordered:
        end = max(finish, key=lambda node: (finish[node], -node))
    else:  # the smallest id among the steps that finish last
        last = max(finish.values())
        end = min(node for node, at in finish.items() if at == last)
    path = [end]
    while (before := previous[path[-1]]) is not None:
        path.append(before)
    path.reverse()
    return path, finish[end]


@dataclasses.dataclass(frozen=True, slots=True)
class BottomLevels:
    """Each step's bottom level: the length of the longest path from its start to the end of
    the plan, the step's own weight included (:func:`bottom_levels`).

    Attributes:
        levels: each step's bottom level by id, in the weights' unit (steps for unit
            weights, else seconds).
        children: the children of each step whose children, in the order given, are not
            already highest level first: highest first, equal levels in the order given.
            A step whose children are in that order already is left out.
    """

    levels: Mapping[int, float]
    children: Mapping[int, tuple[int, ...]]

    def highest_first(self, step_ids: Iterable[int]) -> list[int]:
        """``step_ids`` highest level first, equal levels in their given order (a stable
        sort); a step without a level counts 0."""
        get = self.levels.get
        return sorted(step_ids, key=lambda step_id: get(step_id, 0), reverse=True)


class HasChildren(Protocol):
    """A step as :func:`bottom_levels` reads it (a compiled step)."""

    @property
    def children(self) -> Sequence[int]:
        """The ids of the steps that depend on it, in the order ties keep."""
        ...


def bottom_levels(
    order: Sequence[int],
    steps: Mapping[int, HasChildren],
    weights: Mapping[int, float | None] | None = None,
) -> BottomLevels:
    """The bottom level of every step in ``order``: its own weight plus the highest bottom
    level among its children. Starting ready steps highest level first is the list
    scheduling of HLFET, "highest levels first with estimated times" (T. L. Adam, K. M.
    Chandy, J. R. Dickson, "A comparison of list schedules for parallel processing
    systems", Communications of the ACM 17(12), 1974): the steps on the longest remaining
    path go first. One pass over ``order`` from its end: O(steps + edges).

    Args:
        order: step ids, each before its children (a topological order).
        steps: each step (its ``children``) by id; every step of ``order`` is in it.
        weights: each step's weight (estimated seconds) by id; a step missing, None, NaN
            or negative weighs 1. None: every step weighs 1 (levels count steps).

    Returns:
        The :class:`BottomLevels`. A child outside ``order`` counts 0.
    """
    levels: dict[int, float] = {}
    reordered: dict[int, tuple[int, ...]] = {}
    get = levels.get
    own: float = 1
    for node in reversed(order):
        if weights is not None:
            weight = weights.get(node)
            own = weight if weight is not None and weight >= 0 else 1  # NaN is not >= 0
        kids = steps[node].children
        if not kids:
            levels[node] = own
        elif len(kids) == 1:
            levels[node] = own + get(kids[0], 0)
        else:
            kid_levels = [get(kid, 0) for kid in kids]
            ranked = sorted(kid_levels, reverse=True)
            levels[node] = own + ranked[0]
            if kid_levels != ranked:  # not highest first already
                reordered[node] = tuple(sorted(kids, key=lambda kid: get(kid, 0), reverse=True))
    return BottomLevels(levels, reordered)


def mermaid(
    graph: nx.DiGraph,
    labels: Mapping[int, str] | None = None,
    highlight: Iterable[int] = (),
) -> str:
    """Mermaid ``flowchart`` text of the DAG.

    Args:
        graph: the plan graph.
        labels: text per step (defaults to the step id); quotes are escaped.
        highlight: step ids drawn with the ``critical`` class (say, the critical path), and
            the edges between consecutive highlighted steps drawn thick.

    Returns:
        Text for a Mermaid renderer, one node or edge per line.
    """
    marked = list(highlight)
    marked_set = set(marked)
    on_path = set(itertools.pairwise(marked))
    lines = ["flowchart TD"]
    for node in topological_order(graph):
        text = (labels or {}).get(node, str(node)).replace('"', "#quot;")
        lines.append(f'    s{node}["{text}"]')
    for parent, child in sorted(graph.edges):
        arrow = "==>" if (parent, child) in on_path else "-->"
        lines.append(f"    s{parent} {arrow} s{child}")
    if marked_set:
        lines.append("    classDef critical stroke:#d33,stroke-width:3px")
        lines.append("    class " + ",".join(f"s{n}" for n in sorted(marked_set)) + " critical")
    return "\n".join(lines) + "\n"
