"""Lone surrogates escaped in one defined way: ``\\xNN`` for an undecodable byte kept by
``surrogateescape``, ``\\uDNNN`` for any other; text without them never changes."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from plandag.surrogates import (
    escape_json_text,
    escape_surrogates,
    escape_text,
    has_surrogates,
    holds_surrogates,
)


def test_each_lone_surrogate_is_written_as_text() -> None:
    assert escape_text("a\ud800b") == "a\\ud800b"
    assert escape_text("\udfff") == "\\udfff"
    assert escape_text("caf\udce9") == "caf\\xe9"  # an undecodable byte (surrogateescape)
    assert escape_text("\udc7f\udd00") == "\\udc7f\\udd00"  # outside U+DC80-U+DCFF
    # a pair held as two code points is no more UTF-8 than either half: both escaped
    assert escape_text("\ud83d\ude00") == "\\ud83d\\ude00"


def test_text_without_lone_surrogates_is_the_same_object() -> None:
    for text in ("", "plain", "café €😀", "\\ud800 written out"):
        assert escape_text(text) is text
        assert not has_surrogates(text)


def test_values_are_copied_only_where_something_changes() -> None:
    clean = {"a": [1, "x", {"b": ("c",)}], "n": None}
    assert escape_surrogates(clean) is clean
    shared = ["kept"]
    value = {"k\ud800": ("v\udcff", 3), "other": shared, "n": 1.5, "o": b"\xff"}
    escaped = escape_surrogates(value)
    assert escaped == {"k\\ud800": ["v\\xff", 3], "other": ["kept"], "n": 1.5, "o": b"\xff"}
    assert escaped["other"] is shared
    assert value["k\ud800"] == ("v\udcff", 3)  # the input is not changed
    assert holds_surrogates(value)
    assert not holds_surrogates(escaped)


def test_json_text_decodes_to_the_escaped_value() -> None:
    value = {"n": "\ud800", "list": ["\udcff", "é"], "k\udfff": 1}
    text = json.dumps(value, ensure_ascii=False)
    escaped = escape_json_text(text)
    escaped.encode("utf-8")  # UTF-8 takes it
    assert json.loads(escaped) == escape_surrogates(value)
    clean = json.dumps({"a": "é"}, ensure_ascii=False)
    assert escape_json_text(clean) is clean


_TEXT = st.text(
    alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()),
    max_size=12,
)
_VALUES = st.recursive(
    st.none() | st.integers() | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(_VALUES)
def test_any_value_becomes_utf8_and_json_agrees(value: Any) -> None:
    escaped = escape_surrogates(value)
    text = json.dumps(escaped, ensure_ascii=False)
    text.encode("utf-8")
    assert not holds_surrogates(escaped)
    assert json.loads(escape_json_text(json.dumps(value, ensure_ascii=False))) == escaped
