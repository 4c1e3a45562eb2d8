"""to_jsonable never raises and never explodes, whatever a tool returns."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from plandag.scheduler.result import to_jsonable


def test_plain_values_and_special_floats() -> None:
    value = {"a": [1, 2.5, Decimal("0.10"), None, True], 3: float("nan")}
    assert to_jsonable(value) == {"a": [1, 2.5, "0.10", None, True], "3": "NaN"}
    assert to_jsonable([float("inf"), float("-inf")]) == ["Infinity", "-Infinity"]
    json.dumps(to_jsonable(value), allow_nan=False)


def test_a_list_that_holds_itself() -> None:
    loop: list[object] = [1]
    loop.append(loop)
    assert to_jsonable(loop) == [1, "<cycle>"]


def test_shared_references_cannot_blow_up() -> None:
    value: object = "x"
    for _ in range(40):  # 2**40 leaves once written out
        value = [value, value]
    out = json.dumps(to_jsonable(value))
    assert "<truncated>" in out
    assert len(out) < 50_000_000


def test_deep_nesting() -> None:
    value: object = 0
    for _ in range(5000):
        value = [value]
    out = to_jsonable(value)
    for _ in range(200):
        assert isinstance(out, list)
        out = out[0]
    assert out == "<too deep>"


def _long_way(value: Any, budget: list[int], path: set[int]) -> Any:
    """Every value through ``isinstance`` tests, as to_jsonable decides a value of a type
    it does not know: the reference its shortcuts for plain types are held to."""
    budget[0] -= 1
    if budget[0] < 0:
        return "<truncated>"
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Mapping | list | tuple | set | frozenset):
        if id(value) in path:
            return "<cycle>"
        if len(path) >= 200:
            return "<too deep>"
        path.add(id(value))
        try:
            if isinstance(value, Mapping):
                return {str(key): _long_way(item, budget, path) for key, item in value.items()}
            if isinstance(value, list | tuple):
                return [_long_way(item, budget, path) for item in value]
            return sorted((_long_way(item, budget, path) for item in value), key=repr)
        finally:
            path.discard(id(value))
    return to_jsonable(value)


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=5),
    st.decimals(allow_nan=False, places=2),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(st.one_of(st.text(max_size=3), st.integers()), children, max_size=4),
        st.frozensets(st.integers(), max_size=3),
    ),
    max_leaves=30,
)


@given(_VALUES)
@settings(max_examples=300, deadline=None)
def test_plain_types_take_a_shortcut_to_the_same_answer(value: Any) -> None:
    expected = _long_way(value, [1_000_000], set())
    converted = to_jsonable(value)
    assert json.dumps(converted, sort_keys=True, default=str) == json.dumps(
        expected, sort_keys=True, default=str
    )


def test_the_budget_counts_the_items_of_plain_containers_too() -> None:
    value = {"items": list(range(10)), "more": [list(range(5))] * 3}
    for budget in range(40):
        assert to_jsonable_with_budget(value, budget) == _long_way(value, [budget], set())


def to_jsonable_with_budget(value: Any, budget: int) -> Any:
    from plandag.scheduler.result import _jsonable

    return _jsonable(value, [budget], set())
