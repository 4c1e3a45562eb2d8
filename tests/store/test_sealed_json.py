"""sealed_json: the text of seal(value), with a shortcut that must never change the answer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plandag.store.sealing import _GUARDED, _SEALING_WORDS, seal, sealed_json
from plandag.trace.redact import may_hold_word

ENVIRONMENT = {"s3cr3t-value-123": "SERVICE_TOKEN"}


def _reference(value: Any, environment: dict[str, str]) -> str:
    return json.dumps(
        seal(value, environment), ensure_ascii=False, separators=(",", ":"), allow_nan=False
    )


def test_a_plain_record_is_its_own_json() -> None:
    record = {"source": "a.xml", "items": [{"xProd": "COOKIES DE AVEIA", "vProd": "1.50"}]}
    assert sealed_json(record, ENVIRONMENT) == (
        '{"source":"a.xml","items":[{"xProd":"COOKIES DE AVEIA","vProd":"1.50"}]}'
    )


@pytest.mark.parametrize(
    "value",
    [
        [["cookie", False]],
        [["Cookie", "session=abc123"]],
        {"headers": [["Set-Cookie", "id=a3fWa; Max-Age=2592000"]]},
        [["set_cookie", 7]],
    ],
)
def test_a_cookie_header_pair_is_sealed_as_seal_does(value: Any) -> None:
    # the pair's name is a JSON string followed by "," (no ":" nor "="): still sealed
    text = sealed_json(value, ENVIRONMENT)
    assert text == _reference(value, ENVIRONMENT)
    assert "[secret]" in text


def test_secrets_are_sealed_as_seal_does() -> None:
    cases: list[Any] = [
        {"note": "Authorization: Bearer abcdefghijklmnop1234"},
        {"headers": {"x-api-key": "k-12345678"}},
        {"text": "cookie=abc123; path=/"},
        {"text": "Cookie\t: abc123"},
        {"Set-Cookie": "id=1"},
        {"key": "sk-ant-abcdefgh12345678"},
        {"jwt": "eyJhbGciOiJI.eyJzdWIiOiIx.c2lnbmF0dXJl"},
        {"env": "uses s3cr3t-value-123 inside"},
        {"$env": "HOME"},
        {"xProd": "BASIC  abcdefgh1234"},
        {"text": "p\u0131ssword: x"},  # dotless i: re.IGNORECASE's business, not lower()'s
        {"url": "http://alice:pw-1234@127.0.0.1:8000/v1"},
    ]
    for value in cases:
        assert sealed_json(value, ENVIRONMENT) == _reference(value, ENVIRONMENT), value
    assert "abcdefghijklmnop1234" not in sealed_json(cases[0], ENVIRONMENT)
    assert "abc123" not in sealed_json(cases[2], ENVIRONMENT)
    assert "abc123" not in sealed_json(cases[3], ENVIRONMENT)
    assert '{"$env":"SERVICE_TOKEN"}' in sealed_json(cases[7], ENVIRONMENT)
    assert sealed_json(cases[-1], ENVIRONMENT) == (
        '{"url":"http://alice:[secret]@127.0.0.1:8000/v1"}'
    )


def test_not_json_data_raises() -> None:
    for value in (float("nan"), {"a": object()}):
        try:
            sealed_json(value, ENVIRONMENT)
        except (TypeError, ValueError):
            continue
        raise AssertionError(f"{value!r} gave JSON")


def test_may_hold_word() -> None:
    assert may_hold_word("a BEARER b", ("bearer",))
    assert not may_hold_word("CESTA BASICA", ("bearer",))
    assert may_hold_word("\u017fk-", ("bearer",))  # long s: answered True, never missed


_WORDS = [
    "cookie",
    "Bearer ",
    "basic ",
    "token",
    "sk-",
    "eyJ",
    "s3cr3t-value-123",
    "API-KEY",
    "ApiKey",
    "$env",
    "$literal",
    "x-api_key",
    "://",
    "http://u:",
    "@",
    "/",
]
_PIECES = st.sampled_from([*"abkosStTeE :=,'\"\t\n-_$\u0131", *_WORDS, "abcdefgh1234"])
_TEXT = st.lists(_PIECES, max_size=8).map("".join)
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | _TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(_VALUES)
def test_always_the_text_of_seal(value: Any) -> None:
    assert sealed_json(value, ENVIRONMENT) == _reference(value, ENVIRONMENT)


def test_each_sealing_word_is_looked_for_behind_a_guard_it_holds() -> None:
    guarded = [word for _, words in _GUARDED for word in words]
    assert sorted(guarded) == sorted(_SEALING_WORDS)
    assert all(guard in word for guard, words in _GUARDED for word in words)


def test_words_behind_a_guard_are_sealed() -> None:
    cases: list[Any] = [
        {"headers": {"Api-Key": "k-12345678"}},
        {"apikey": "k-12345678"},
        {"text": "api_key=k-12345678"},
        {"$literal": {"a": 1}},
        {"$env": "SERVICE_TOKEN"},
        {"jwt": "x eyJhbGciOiJI.eyJzdWIiOiIx.c2lnbmF0dXJl"},
    ]
    for value in cases:
        assert sealed_json(value, ENVIRONMENT) == _reference(value, ENVIRONMENT), value
        assert sealed_json(value, ENVIRONMENT) != json.dumps(
            value, ensure_ascii=False, separators=(",", ":")
        ), value
