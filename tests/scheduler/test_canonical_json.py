"""The plan hash's canonical JSON: the bytes ``rfc8785.dumps`` gives, whichever encoder
writes them; the form of a value (``json_form``) as its definition gives it."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plandag.scheduler.canonical import (
    NOT_PLAIN,
    PLAIN,
    STANDARD,
    canonical_bytes,
    is_plain_json,
    json_form,
    plain_json_text,
)
from plandag.scheduler.canonical import canonical_json as _canonical_json
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


# The standard library's encoder with the options of RFC 8785 that it has: what a value of
# the standard form is written as, by definition (json_form).
_STANDARD_ENCODER = json.JSONEncoder(
    ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False
)
# awkward leaves, most of them of the standard form: floats at its edges (1e-4, 2**52, just
# below and above), whole and negative-zero floats, integers at ±(2**53 - 1), escapes,
# controls, a line separator, non-BMP characters and a lone surrogate
_EDGE_FLOATS = st.sampled_from(
    [
        1e-4,
        1.0000000000000002e-4,
        9.999999999999999e-05,
        1e-7,
        0.1,
        -0.5,
        1 / 3,
        123456.789,
        2.0**52 - 0.5,
        -(2.0**52) + 0.5,
        1e16,
        1e21,
        -0.0,
        0.0,
        5e-324,
        1.7976931348623157e308,
    ]
)
_STANDARD_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(min_value=1e-4, max_value=2.0**52, exclude_max=True).filter(
        lambda number: not number.is_integer()
    ),
    st.floats(max_value=-1e-4, min_value=-(2.0**52), exclude_min=True).filter(
        lambda number: not number.is_integer()
    ),
    _EDGE_FLOATS,
    st.text(max_size=12),
    st.sampled_from(
        ["\ud800", "a\x1fb\x00", '"\\/', "\u2028\u2029", "\x7f\x80", "\U0001f600é", "\b\f\n\r\t"]
    ),
)
_STANDARD_KEYS = st.one_of(
    st.text(alphabet=st.characters(max_codepoint=127), max_size=6),
    st.sampled_from(["a", "B", "_", "aa", "a0", "Z", "", "\x00", "~", "é", "\U0001f600"]),
)
_STANDARD_VALUES = st.recursive(
    _STANDARD_LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(_STANDARD_KEYS, children, max_size=6)
    ),
    max_leaves=30,
)


@given(_STANDARD_VALUES)
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_value_of_the_standard_form_is_written_as_the_standard_library_writes_it(
    value: Any,
) -> None:
    form = json_form(value)
    written = _outcome(lambda data: canonical_bytes(data, form), value)
    assert written == _outcome(rfc8785.dumps, value)
    if form == STANDARD:
        try:
            expected = _STANDARD_ENCODER.encode(value).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate
            assert written is rfc8785.CanonicalizationError
        else:
            assert written == expected
    if form != NOT_PLAIN:  # the text that stores and traces a plain value
        assert plain_json_text(value, form) == json.dumps(
            value, ensure_ascii=False, separators=(",", ":"), allow_nan=False
        )


@pytest.mark.parametrize(
    "value",
    [
        {"z": {"b": [], "a": {}}, "a": [{"y": 1e-4, "x": -0.5}], "m": ""},
        {"k": 2.0**52 - 0.5, "j": -(2**53) + 1, "i": 0.1},
        {"s": '\U0001f600 é \u2028 \x7f \x1f "\\ /'},
        {"lone": ["\udfff"]},
        {"whole": 1e16, "zero": -0.0},
    ],
)
def test_awkward_examples_are_written_as_rfc8785_writes_them(value: Any) -> None:
    assert _outcome(lambda data: canonical_bytes(data, json_form(data)), value) == _outcome(
        rfc8785.dumps, value
    )


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


def _form_by_definition(value: Any) -> int:
    """json_form's docstring, one value at a time: the least form of the values, keys and
    containers (a container nested 100 levels or more, or more than 500,000 values in
    all, is not plain)."""
    counted = [0]

    def form(item: Any, depth: int) -> int:
        kind = type(item)
        if kind is str or kind is bool or item is None:
            return STANDARD
        if kind is int:
            return STANDARD if abs(item) <= 2**53 - 1 else PLAIN
        if kind is float:
            if not math.isfinite(item):
                return NOT_PLAIN
            return STANDARD if abs(item) >= 1e-4 and not item.is_integer() else PLAIN
        if kind not in (dict, list) or depth >= 100:
            return NOT_PLAIN
        counted[0] += len(item)
        if counted[0] > 500_000:
            return NOT_PLAIN
        forms = [STANDARD]
        if kind is dict:
            if any(type(key) is not str for key in item):
                return NOT_PLAIN
            forms += [STANDARD if key.isascii() else PLAIN for key in item]
        for inner in item.values() if kind is dict else item:
            found = form(inner, depth + 1)
            if found == NOT_PLAIN:
                return NOT_PLAIN
            forms.append(found)
        return min(forms)

    return form(value, 0)


@given(st.one_of(_ANY, _STANDARD_VALUES))
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_form_is_the_one_its_definition_gives(value: Any) -> None:
    assert json_form(value) == _form_by_definition(value)


def _nested(depth: int, innermost: Any, in_dict: bool) -> Any:
    value = innermost
    for _ in range(depth):
        value = {"k": value} if in_dict else [value]
    return value


@pytest.mark.parametrize("in_dict", [False, True])
@pytest.mark.parametrize("innermost", [[], {}, [1], {"k": 1.5}, "x", 2**60])
@pytest.mark.parametrize("depth", [0, 1, 98, 99, 100, 101])
def test_the_form_of_a_value_nested_near_the_limit(
    depth: int, innermost: Any, in_dict: bool
) -> None:
    value = _nested(depth, innermost, in_dict)
    assert json_form(value) == _form_by_definition(value)


@pytest.mark.parametrize("values", [499_999, 500_000, 500_001])
def test_the_form_of_a_value_near_the_count_limit(values: int) -> None:
    flat = [None] * values
    split = [[None] * (values // 2 - 1), [0.5] * (values - values // 2 - 1)]  # 2 more: the lists
    assert json_form(flat) == _form_by_definition(flat)
    assert json_form(split) == _form_by_definition(split)
    assert json_form({"a": flat}) == _form_by_definition({"a": flat})


def test_a_value_that_holds_itself_is_not_plain() -> None:
    loop: list[Any] = []
    loop.append(loop)
    loop.append(loop)
    assert json_form(loop) == NOT_PLAIN
    assert json_form({"a": [loop]}) == NOT_PLAIN
