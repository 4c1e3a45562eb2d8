"""The plan hash's canonical JSON: the bytes ``rfc8785.dumps`` gives, whichever encoder
writes them."""

from __future__ import annotations

import json
from typing import Any

import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plandag.scheduler.canonical import canonical_json as _canonical_json
from plandag.scheduler.canonical import is_plain_json
from plandag.scheduler.result import to_jsonable

_KEYS = st.one_of(
    st.text(max_size=6),
    st.sampled_from(["a", "B", "_", "ação", "\ue000", "\U0001f600", "é", "ab\x00"]),
)
_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**54), max_value=2**54),
    st.floats(),
    st.text(max_size=12),
    st.sampled_from(["\ud800", "a\x1fb", '"\\', "\u2028", "\x7f", "\U0001f600"]),
)
_VALUES = st.recursive(
    _LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(_KEYS, children, max_size=5)
    ),
    max_leaves=30,
)


def _outcome(write: Any, value: Any) -> Any:
    try:
        return write(value)
    except rfc8785.CanonicalizationError as error:
        return type(error)


@given(_VALUES)
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_canonical_json_is_rfc8785s(value: Any) -> None:
    assert _outcome(_canonical_json, value) == _outcome(rfc8785.dumps, value)


@pytest.mark.parametrize(
    "value",
    [
        {"b": 1, "a": [True, None, "x\ny"], "c": {"z": 2**53 - 1, "y": -(2**53) + 1}},
        {"\U0001f600": 1, "\ue000": 2},
        {"n": 1.5, "m": 1e21, "k": 0.000001},
        [2**53, "sk"],
        {"text": "lone \ud800"},
        {"nan": float("nan")},
    ],
)
def test_examples_are_written_as_rfc8785_writes_them(value: Any) -> None:
    assert _outcome(_canonical_json, value) == _outcome(rfc8785.dumps, value)


class _Text(str):
    """A str subclass (to_jsonable keeps it; it is not plain)."""


_ANY = st.recursive(
    st.one_of(
        _LEAVES,
        st.sampled_from([_Text("x"), float("inf"), 2**60, (1, 2), b"b", {1: 2}, {"k": {3}}]),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(_KEYS, children, max_size=5),
        st.tuples(children),
    ),
    max_leaves=30,
)


@given(_ANY)
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_plain_value_is_what_to_jsonable_makes_of_it(value: Any) -> None:
    if is_plain_json(value):
        assert to_jsonable(value) == value
        assert json.loads(json.dumps(value)) == value


def test_a_value_too_deep_is_not_plain() -> None:
    deep: Any = []
    for _ in range(120):
        deep = [deep]
    assert not is_plain_json(deep)
    assert is_plain_json([[[]]])
