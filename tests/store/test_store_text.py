"""A record's text is scanned for secrets once: sealed_store_text marks a text the masking
connection would leave as it is, and the connection binds it unscanned only while the
environment's secrets are the ones it was checked against."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from plandag.store import open_store
from plandag.store.sealing import (
    _SEALING_WORDS,
    ScrubbedText,
    sealed_json,
    sealed_store_text,
)
from plandag.trace.redact import environment_secrets, scrub_secret_values


def _stored(tmp_path: Path, record: Any, record_json: str | None = None) -> str | None:
    store = open_store(tmp_path / "runs.sqlite3")
    try:
        store.create_run("b1", command="extract", goal="g", params={}, options={})
        store.record_document("b1", 0, "a.xml", "ok", record, record_json=record_json)
    finally:
        store.close()
    connection = sqlite3.connect(tmp_path / "runs.sqlite3")
    try:
        (text,) = connection.execute("SELECT record FROM document").fetchone()
    finally:
        connection.close()
    return str(text) if text is not None else None


def test_the_words_the_masking_needs_are_sealing_words() -> None:
    assert {"sk-", "eyj", "bearer", "basic"} <= set(_SEALING_WORDS)


def test_a_plain_record_is_marked_and_stored_as_it_is(tmp_path: Path) -> None:
    record = {"source": "a.xml", "xProd": "COOKIES, CESTA", "n": 1}
    text = sealed_store_text(record)
    assert text == '{"source":"a.xml","xProd":"COOKIES, CESTA","n":1}'
    assert type(text) is ScrubbedText
    assert text.environment == tuple(environment_secrets())
    assert scrub_secret_values(text) == text
    assert _stored(tmp_path, record, text) == text


@pytest.mark.parametrize(
    "record",
    [
        {"note": "Authorization: Bearer abcdefghijklmnop1234"},
        {"key": "sk-ant-abcdefgh12345678"},
        {"jwt": "eyJhbGciOiJI.eyJzdWIiOiIx.c2lnbmF0dXJl"},
        {"xProd": "BASIC  abcdefgh1234"},
        {"text": "p\u0131ssword: x"},
    ],
)
def test_what_sealing_changes_is_never_marked(record: dict[str, Any]) -> None:
    text = sealed_store_text(record)
    assert type(text) is str
    assert text == sealed_json(record)


def test_a_secret_written_as_it_is_only_outside_json_strings_is_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A secret value holding quotes is not sealed (its JSON form is not in the text), but
    its raw form spans two strings of the text: the connection masks it, as ever."""
    record = {"x": "ab", "y": "cdefghij"}
    monkeypatch.setenv("PLANDAG_TEST_ODD_TOKEN", 'ab","y":"cdefghij')
    text = sealed_store_text(record)
    assert text == '{"x":"ab","y":"cdefghij"}'
    assert type(text) is str
    assert _stored(tmp_path, record, text) == '{"x":"[secret]"}'


def test_a_secret_set_after_the_text_was_made_is_masked_by_the_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = {"note": "pay with key-abcdef-123 today"}
    store = open_store(tmp_path / "runs.sqlite3")
    try:
        store.create_run("b1", command="extract", goal="g", params={}, options={})
        store.record_document("b1", 0, "a.xml", "ok", record)  # queued, not yet written
        monkeypatch.setenv("PLANDAG_TEST_PAY_API_KEY", "key-abcdef-123")
        (row,) = store.documents("b1")  # the queue is written now
    finally:
        store.close()
    assert row.record == {"note": "pay with [secret] today"}


def test_the_stored_text_is_the_same_with_and_without_the_callers_text(
    tmp_path: Path,
) -> None:
    record = {"source": "a.xml", "items": [{"xProd": "ÁGUA", "vProd": "1.50"}], "dest": None}
    compact = json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    assert _stored(tmp_path / "one", record) == compact
    assert _stored(tmp_path / "two", record, compact) == compact


@pytest.mark.parametrize("value", [None, {}, [], {"a": 1}, ["token=abcdefgh"]])
def test_store_json_of_an_empty_value_is_its_json_under_any_environment(
    value: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from plandag.store.store import store_json

    monkeypatch.setenv("PLANDAG_TEST_TOKEN", "abcdefgh12")
    expected = json.dumps(value, separators=(",", ":"))
    text = store_json(value)
    if value == ["token=abcdefgh"]:
        assert "abcdefgh" not in text
    else:
        assert text == expected
        assert scrub_secret_values(text) == text
