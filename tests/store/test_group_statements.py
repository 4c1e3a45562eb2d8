"""The statements the writer's thread runs for a group leave the rows the queued writes
leave one by one: a plain success merged into its start is written by a narrower update, a
transition without a reason by an insert with its NULL in the statement (many rows to a
statement too), a start's unread parameters bound as numbers; and None is bound as NULL."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plandag.store import Store
from plandag.store.sealing import ScrubbedText, SecretMaskingConnection, scrubbed_text
from plandag.store.store import (
    _STEP_RAN,
    _STEP_STATE,
    _TRANSITION,
    _TRANSITION_PLAIN,
    _merged_step_rows,
    _step_rows,
)
from plandag.store.writer import VALUES_ROWS, _commit, _many_rows

Row = tuple[str, tuple[Any, ...]]

_TEXTS = st.one_of(st.none(), st.sampled_from(["timeout", "", "a detail", '{"x":1}']))


@st.composite
def _groups(draw: st.DrawFn) -> list[Row]:
    """A group as a run's recorder queues it: each step's start(s) and end, in some
    order, as Store.queue_step_start / queue_step_end queue them."""
    rows: list[Any] = []
    for step in range(1, draw(st.integers(1, 12)) + 1):
        attempts = draw(st.integers(1, 2))
        for attempt in range(1, attempts + 1):
            at = float(step * 10 + attempt)
            args = draw(st.one_of(st.none(), st.just("{}"), st.just(f'{{"n":{step}}}')))
            rows.append((0, "r1", step, attempt, at, args, 0))
        if draw(st.booleans()):  # its end is in a later group
            continue
        status = draw(st.sampled_from(["succeeded", "failed", "cancelled", "skipped"]))
        reason, detail, digest, error = (draw(_TEXTS) for _ in range(4))
        at = float(step * 10 + 5)
        duration = draw(st.one_of(st.none(), st.floats(0, 5)))
        result = draw(st.one_of(st.none(), st.just("null"), st.just(f'{{"n":{step}}}')))
        rows.append(
            (
                1,
                "r1",
                step,
                status,
                at,
                attempts,
                reason,
                detail,
                duration,
                result,
                digest,
                error,
                0,
            )
        )
    return rows


def _tables(connection: sqlite3.Connection) -> tuple[list[Any], list[Any]]:
    return (
        connection.execute("SELECT * FROM step ORDER BY step_id").fetchall(),
        connection.execute("SELECT * FROM transition ORDER BY id").fetchall(),
    )


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store made once (its schema migrated, no rows), copied for every example."""
    path = tmp_path_factory.mktemp("group-statements") / "empty.sqlite3"
    Store(path).close()
    return path


def _written(
    empty: Path, path: Path, group: list[Any], *, one_by_one: bool
) -> tuple[list[Any], list[Any]]:
    """The tables after ``group`` is written to a fresh store: as the writer's thread
    writes it (merged, narrow, many rows to a statement), or each row as queued."""
    shutil.copyfile(empty, path)
    connection = sqlite3.connect(path, isolation_level=None, factory=SecretMaskingConnection)
    try:
        connection.execute("PRAGMA synchronous = OFF")  # the rows, not their durability
        connection.execute(
            "INSERT INTO run (run_id, created, updated, command, status) "
            "VALUES ('r1', 0, 0, 'test', 'running')"
        )
        steps = {item[2] for item in group if type(item[0]) is int}
        connection.executemany(
            "INSERT INTO step (run_id, step_id, tool, effects) VALUES ('r1', ?, 'work', 'none')",
            [(step,) for step in sorted(steps)],
        )
        # odd steps hold what an earlier segment wrote (every column the writes set or keep)
        connection.execute(
            "UPDATE step SET status = 'failed', attempts = 3, started_at = 0.5, args = 'old', "
            "reason = 'old', detail = 'old', ended_at = 0.7, duration_s = 0.2, result = 'old', "
            "result_hash = 'old', error = 'old', segment = 1 WHERE step_id % 2 = 1"
        )
        if one_by_one:
            for sql, args in _step_rows(group):
                connection.execute(sql, args)
        else:
            _commit(connection, _merged_step_rows(group, narrow=True))
        return _tables(connection)
    finally:
        connection.close()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(group=_groups())
def test_a_group_written_through_narrow_statements_leaves_the_rows_written_one_by_one(
    tmp_path: Path, empty_store: Path, group: list[Any]
) -> None:
    written = _written(empty_store, tmp_path / "group.sqlite3", group, one_by_one=False)
    assert written == _written(empty_store, tmp_path / "one_by_one.sqlite3", group, one_by_one=True)


def test_a_plain_success_merged_into_its_start_is_a_narrow_update() -> None:
    start = (0, "r1", 1, 1, 1.0, "{}", 0)
    plain = (1, "r1", 1, "succeeded", 2.0, 1, None, None, 1.0, "1", None, None, 0)
    assert _merged_step_rows([start, plain], narrow=True) == [
        (_TRANSITION_PLAIN, ("r1", 1, 1, "running", 1.0, 0)),
        (_STEP_RAN, ("succeeded", 1, 1.0, "{}", 2.0, 1.0, "1", 0, "r1", 1)),
        (_TRANSITION_PLAIN, ("r1", 1, 1, "succeeded", 2.0, 0)),
    ]
    failed = (1, "r1", 1, "failed", 2.0, 1, "tool_error", None, None, None, None, "{}", 0)
    merged = _merged_step_rows([start, failed], narrow=True)
    assert [sql for sql, _ in merged] == [_TRANSITION_PLAIN, _STEP_STATE, _TRANSITION]
    assert merged[1][1][:5] == ("failed", 1, 1.0, "{}", 1)


def test_transitions_without_a_reason_are_written_many_to_a_statement(
    tmp_path: Path, empty_store: Path
) -> None:
    many = _many_rows(_TRANSITION_PLAIN)
    assert many is not None
    statement, size = many
    assert size == VALUES_ROWS
    assert statement.count("NULL") == VALUES_ROWS
    rows = [(_TRANSITION_PLAIN, ("r1", n, 1, "running", float(n), 0)) for n in range(150)]
    rows.append((_TRANSITION, ("r1", 150, 1, "failed", "tool_error", 150.0, 0)))
    written = _written(empty_store, tmp_path / "many.sqlite3", rows, one_by_one=False)
    assert written == _written(empty_store, tmp_path / "one.sqlite3", rows, one_by_one=True)
    assert [row[5] for row in written[1]] == [None] * 150 + ["tool_error"]


def test_none_is_bound_as_null_through_the_adapter_the_store_registers(tmp_path: Path) -> None:
    adapter = sqlite3.adapters[(type(None), sqlite3.PrepareProtocol)]
    assert adapter(None) is None
    connection = sqlite3.connect(tmp_path / "t.sqlite3", factory=SecretMaskingConnection)
    connection.execute("CREATE TABLE t (a, b TEXT, c REAL)")
    connection.executemany("INSERT INTO t VALUES (?, ?, ?)", [(None, None, None), (1, "x", None)])
    rows = connection.execute("SELECT a IS NULL, b IS NULL, c IS NULL FROM t").fetchall()
    connection.close()
    assert rows == [(1, 1, 1), (0, 0, 1)]


def test_a_checked_text_is_bound_as_its_text_through_the_adapter_the_store_registers(
    tmp_path: Path,
) -> None:
    checked = scrubbed_text('{"name":"ünï","n":1}')
    assert type(checked) is ScrubbedText
    adapter = sqlite3.adapters[(ScrubbedText, sqlite3.PrepareProtocol)]
    assert adapter(checked) is checked
    connection = sqlite3.connect(tmp_path / "t.sqlite3", factory=SecretMaskingConnection)
    connection.execute("CREATE TABLE t (a, b TEXT)")
    connection.executemany("INSERT INTO t VALUES (?, ?)", [(checked, 1), ("x", checked)])
    rows = connection.execute("SELECT a, typeof(a), b, typeof(b) FROM t").fetchall()
    connection.close()
    assert rows == [
        ('{"name":"ünï","n":1}', "text", "1", "text"),
        ("x", "text", '{"name":"ünï","n":1}', "text"),
    ]
