"""Bottom levels (the longest remaining path from a step to the end of the plan, itself
included) and each step's children highest first, in one pass from the end of the order."""

from __future__ import annotations

import math

from plandag.compiler import compile_plan
from plandag.dag.graph import bottom_levels
from plandag.tools.base import tool
from plandag.tools.registry import Registry


class Node:
    def __init__(self, *children: int) -> None:
        self.children = children


# 1 -> 2, 3; 3 -> 4 -> 5; 2 and 5 end the plan
CHILDREN = {1: Node(2, 3), 2: Node(), 3: Node(4), 4: Node(5), 5: Node()}
ORDER = (1, 2, 3, 4, 5)


def test_unit_weights_count_steps_and_children_come_highest_first() -> None:
    found = bottom_levels(ORDER, CHILDREN)
    assert dict(found.levels) == {5: 1, 4: 2, 3: 3, 2: 1, 1: 4}
    assert dict(found.children) == {1: (3, 2)}  # only the step whose order changes
    assert found.highest_first([2, 5, 3, 4]) == [3, 4, 2, 5]  # ties keep their order


def test_weights_are_seconds_and_an_unknown_or_bad_one_weighs_one() -> None:
    weights = {1: 0.5, 2: 10.0, 3: None, 4: -1.0, 5: math.nan}
    found = bottom_levels(ORDER, CHILDREN, weights)
    assert dict(found.levels) == {5: 1, 4: 2, 3: 3, 2: 10.0, 1: 10.5}
    assert dict(found.children) == {}  # 2 (10 s) before 3 (3): already in order


def test_a_child_outside_the_order_counts_nothing() -> None:
    found = bottom_levels((1,), {1: Node(7)})
    assert dict(found.levels) == {1: 1}
    assert found.highest_first([7, 1]) == [1, 7]


@tool
def noop(n: int) -> int:
    """Returns ``n``."""
    return n


def test_a_compiled_plan_keeps_its_levels_and_a_changed_plan_has_its_own() -> None:
    compiled = compile_plan(
        {
            "steps": [
                {"id": 1, "tool": "noop", "args": {"n": 1}},
                {"id": 2, "tool": "noop", "args": {"n": 2}, "depends_on": [1]},
                {"id": 3, "tool": "noop", "args": {"n": 3}, "depends_on": [2]},
            ]
        },
        Registry([noop]),
    )
    assert compiled.bottom_levels is compiled.bottom_levels
    assert dict(compiled.bottom_levels.levels) == {1: 3, 2: 2, 3: 1}
    shorter = compiled.without_steps([3])
    assert dict(shorter.bottom_levels.levels) == {1: 2, 2: 1}
