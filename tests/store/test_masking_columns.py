"""The masking connection binds what masking every row one by one binds, whether it looks at
a statement's parameters a column at a time (texts it bound before, none changed by
masking; texts checked against the environment's secrets) or row by row: a secret, a lone
surrogate, a str subclass, a text checked against other secrets, a mapping of named
parameters or a row of another length anywhere among them is never bound as it is."""

from __future__ import annotations

import dataclasses
import sqlite3
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plandag.store.sealing import (
    ScrubbedText,
    SecretMaskingConnection,
    _masked,
    scrubbed_text,
)
from plandag.trace.redact import environment_secrets

SECRET = "zq81-masking-columns-secret-42"

_TEXTS = st.sampled_from(
    [
        "r1",
        "running",
        "succeeded",
        "{}",
        "null",
        f"key {SECRET}",
        SECRET,
        "Bearer abcdefghijklmnop1234",
        "lone \ud800 surrogate",
        "x" * 600,
        "plain text",
    ]
)


@dataclasses.dataclass(frozen=True)
class _Checked:
    """A text to bind as a ScrubbedText checked against the environment's secrets
    (``current``) or against other secrets (made in the test, once the environment is set)."""

    text: str
    current: bool


_VALUES = st.one_of(
    _TEXTS,
    st.builds(_Checked, _TEXTS, st.booleans()),
    st.integers(-5, 5),
    st.floats(allow_nan=False),
    st.none(),
    st.booleans(),
    st.just(b"bytes"),
)


class _Text(str):
    """A str subclass (bound as text)."""


_CLEAN = st.one_of(
    st.sampled_from(["r1", "running", "succeeded", "{}", "null"]), st.integers(0, 3), st.none()
)


def _rows(width: int) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    """Rows of any values, or of texts no masking changes but for a few rows of any."""
    clean = st.lists(st.tuples(*[_CLEAN] * width), min_size=1, max_size=40)
    some = st.lists(st.tuples(*[_VALUES] * width), max_size=2)
    return st.one_of(
        st.lists(st.tuples(*[_VALUES] * width), min_size=1, max_size=40),
        clean,
        st.tuples(clean, some, st.booleans()).map(lambda x: x[0] + x[1] if x[2] else x[1] + x[0]),
    ).filter(bool)


def _made(value: Any) -> Any:
    """``value``, a :class:`_Checked` made a ScrubbedText."""
    if type(value) is not _Checked:
        return value
    if value.current:
        return scrubbed_text(value.text)
    stale = ScrubbedText(value.text)  # checked against secrets the environment no longer has
    stale.environment = ("an-earlier-secret-value",)
    return stale


def _stored(statements: list[tuple[str, list[Any], bool]], *, masking: bool) -> Any:
    """The table after each ``(sql, parameters, many)`` ran: through the masking connection,
    or through a plain one with every row masked first, one by one (in memory: a database
    file would wait for the disk at every statement)."""
    factory = SecretMaskingConnection if masking else sqlite3.Connection
    connection = sqlite3.connect(":memory:", isolation_level=None, factory=factory)
    try:
        connection.execute("CREATE TABLE t (a, b, c)")
        environment, known = tuple(environment_secrets()), {}
        for sql, parameters, many in statements:
            if many:
                if not masking:
                    parameters = [_masked(row, environment, known) for row in parameters]
                connection.executemany(sql, parameters)
            else:
                if not masking:
                    parameters = _masked(parameters, environment, known)
                connection.execute(sql, parameters)
        return connection.execute("SELECT a, b, c FROM t ORDER BY rowid").fetchall()
    finally:
        connection.close()


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batches=st.lists(_rows(3), min_size=1, max_size=4))
def test_rows_bound_column_by_column_are_those_masked_row_by_row(
    monkeypatch: pytest.MonkeyPatch, batches: list[list[tuple[Any, ...]]]
) -> None:
    monkeypatch.setenv("COLUMNS_PROBE_API_KEY", SECRET)
    insert = "INSERT INTO t VALUES (?, ?, ?)"
    many = "INSERT INTO t VALUES " + ", ".join(["(?, ?, ?)"] * 4)
    statements: list[tuple[str, list[Any], bool]] = []
    for drawn in batches:
        rows = [tuple(_made(value) for value in row) for row in drawn]
        statements.append((insert, rows, True))  # the same texts again: known
        statements.append((insert, rows, True))
        flat = [item for row in (rows * 4)[:4] for item in row]
        statements.append((many, flat, False))
    stored = _stored(statements, masking=True)
    assert stored == _stored(statements, masking=False)
    assert not any(SECRET in str(value) for row in stored for value in row)


def test_a_secret_among_texts_bound_before_is_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS_PROBE_API_KEY", SECRET)
    connection = sqlite3.connect(":memory:", isolation_level=None, factory=SecretMaskingConnection)
    connection.execute("CREATE TABLE t (a, b, c)")
    insert = "INSERT INTO t VALUES (?, ?, ?)"
    clean = [("r1", n, "running") for n in range(20)]
    connection.executemany(insert, clean)
    connection.executemany(insert, clean)  # every text known
    connection.executemany(insert, [*clean, ("r1", 99, f"key {SECRET}")])
    connection.executemany(insert, [*clean, ("r1", 98, _Text(SECRET))])  # a subclass
    connection.executemany(insert, [*clean, ("r1", 97, scrubbed_text(f"x {SECRET}"))])
    flat = [item for row in clean for item in row]
    connection.execute(
        "INSERT INTO t VALUES " + ", ".join(["(?, ?, ?)"] * 21), [*flat, "r1", 96, SECRET]
    )
    with pytest.raises(sqlite3.ProgrammingError):  # a row of another length: as before
        connection.executemany(insert, [*clean, ("r1", 95)])
    rows = connection.execute("SELECT b, c FROM t WHERE b > 90 ORDER BY b").fetchall()
    named = connection.executemany(  # named parameters: their values masked, not their keys
        "INSERT INTO t VALUES (:a, :b, :c)",
        [{"a": "r1", "b": 94, "c": SECRET}, {"a": "r1", "b": 93, "c": SECRET}],
    )
    assert named.rowcount == 2
    stored = connection.execute("SELECT c FROM t WHERE b IN (93, 94)").fetchall()
    connection.close()
    assert rows == [
        (96, "[secret]"),
        (97, "x [secret]"),
        (98, "[secret]"),
        (99, "key [secret]"),
    ]
    assert stored == [("[secret]",), ("[secret]",)]
