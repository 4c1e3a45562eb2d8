"""The plan's text a new run stores and traces is ``json.dumps`` of the plan's JSON
(compact, UTF-8 kept), whoever writes it: orjson from the plan's JSON when it is of the
standard form (no float that is whole or below 1e-4, ASCII keys), the standard library
otherwise."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plandag.compiler import compile_plan
from plandag.scheduler.canonical import PLAIN, STANDARD, plain_json_text
from plandag.scheduler.gate import compiled_plan_document
from plandag.tools import tool
from plandag.tools.registry import Registry


@tool
def note(text: Any = None, seconds: float = 0.0) -> Any:
    """Return ``text``."""
    return text


_STRINGS = st.one_of(
    st.text(max_size=10),
    st.sampled_from(
        ["ctl \x00\x1f\x7f\x08\x0c\t\n\r", "\u2028\u2029", '"q" \\', "é 😀 ação", "</script>"]
    ),
)
_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1),
    st.floats(min_value=1e-4, max_value=4e15),
    st.floats(min_value=-4e15, max_value=-1e-4),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.05, 0.1, 1 / 3, 1e-4, 1.0, -0.0, 1e-05, 1e16, 1e21, 123456.789]),
    _STRINGS,
)
_KEYS = st.one_of(st.text(max_size=6), st.sampled_from(["a", "B", "ação", "\U0001f600"]))
_VALUES = st.recursive(
    _LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(_KEYS, children, max_size=3)
    ),
    max_leaves=12,
)


@given(st.lists(_VALUES, min_size=1, max_size=4), _STRINGS)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_plan_text_is_json_dumps_of_the_plan_json(values: list[Any], goal: str) -> None:
    plan = {
        "goal": goal,
        "steps": [
            {"id": number, "tool": "note", "args": {"text": value, "seconds": 0.5}}
            for number, value in enumerate(values, start=1)
        ],
    }
    try:
        compiled = compile_plan(plan, Registry([note]))
    except Exception:  # a value the compiler refuses (a lone surrogate): nothing to store
        return
    document = compiled_plan_document(compiled)
    if not document.plain:
        return
    expected = json.dumps(document.json, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    form = STANDARD if document.standard else PLAIN
    assert plain_json_text(document.json, form) == expected
    assert plain_json_text(document.json, PLAIN) == expected


def test_a_plan_with_a_whole_float_is_not_of_the_standard_form() -> None:
    compiled = compile_plan(
        {"steps": [{"id": 1, "tool": "note", "args": {"text": "a", "seconds": 0.25}}]},
        Registry([note]),
    )
    document = compiled_plan_document(compiled)
    assert document.standard
    whole = compile_plan(
        {"steps": [{"id": 1, "tool": "note", "args": {"text": "a", "seconds": 1.0}}]},
        Registry([note]),
    )
    assert not compiled_plan_document(whole).standard  # 1.0: the standard library's text
