"""Rows of values written in one statement are checked for secrets a column at a time
(SecretMaskingConnection.execute_values) and leave the rows the statement bound to the
flattened parameters leaves (every text masked alike)."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from plandag.store.sealing import SecretMaskingConnection, scrubbed_text
from plandag.store.writer import _many_rows, execute_rows

SECRET = "zq81-values-probe-4242"
INSERT = "INSERT INTO t (a, b, c) VALUES (?, ?, ?)"


def _values(chooser: random.Random) -> list[Any]:
    checked = scrubbed_text("checked before")
    stale = scrubbed_text(f"checked under other secrets {SECRET}", secrets=())
    return [
        chooser.choice(["run-1", "succeeded", "", f"key {SECRET}", "lone \ud800 here"]),
        chooser.choice([1.5, 2, -7, None, 1e300, float(chooser.randint(0, 9))]),
        chooser.choice([None, 3, "plain", checked, stale, '{"k":"\ud800"}']),
    ]


def test_rows_checked_by_column_are_those_the_flattened_statement_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROBE_API_KEY", SECRET)
    many = _many_rows(INSERT)
    assert many is not None
    statement, size = many
    chooser = random.Random(11)
    tables = []
    for name in ("by_column", "flattened"):
        connection = sqlite3.connect(
            tmp_path / f"{name}.sqlite3", isolation_level=None, factory=SecretMaskingConnection
        )
        connection.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, a, b, c)")
        chooser.seed(11)
        for _ in range(60):
            # a column of numbers only, of texts only, mixed; with and without a secret
            plain = chooser.random() < 0.5
            rows = [tuple(("run-1", 1.5, 2) if plain else _values(chooser)) for _ in range(size)]
            if name == "by_column":
                connection.execute_values(statement, rows)
            else:
                connection.execute(statement, [item for row in rows for item in row])
        tables.append(connection.execute("SELECT * FROM t ORDER BY id").fetchall())
        connection.close()
    assert tables[0] == tables[1]
    texts = " ".join(str(value) for row in tables[0] for value in row)
    assert SECRET not in texts
    assert "[secret]" in texts


def test_the_writer_writes_rows_of_values_through_the_column_check(tmp_path: Path) -> None:
    calls: list[int] = []

    class Counting(SecretMaskingConnection):
        def execute_values(self, sql: str, rows: Any, /) -> sqlite3.Cursor:
            calls.append(len(rows))
            return super().execute_values(sql, rows)

    connection = sqlite3.connect(tmp_path / "t.sqlite3", isolation_level=None, factory=Counting)
    connection.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, a, b, c)")
    many = _many_rows(INSERT)
    assert many is not None
    rows = [("r", n, n * 0.5) for n in range(many[1] * 2 + 3)]
    execute_rows(connection, INSERT, rows)
    assert calls == [many[1], many[1]]
    assert connection.execute("SELECT a, b, c FROM t ORDER BY id").fetchall() == rows
    connection.close()
