"""What the writer thread does to a group before it writes it leaves the store as writing
the rows one by one would: a step's start and end merged into one update give the same
step rows and transitions; a text the connection bound before is masked again under a
changed environment."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from plandag.brakes.retry import RetryPolicy
from plandag.compiler import compile_plan
from plandag.scheduler import run_plan
from plandag.store import Store, StoreRecorder
from plandag.store.sealing import SecretMaskingConnection
from plandag.store.store import (
    _STEP_STATE,
    _TRANSITION_PLAIN,
    _event_rows,
    _merged_step_rows,
    _step_rows,
)
from plandag.tools.base import tool
from plandag.tools.registry import Registry

SUPERSEDE = "UPDATE step SET superseded_by = ? WHERE run_id = ? AND step_id = ?"


def _start(step: int, attempt: int, at: float, args: str | None = None) -> Any:
    """A step's start as Store.queue_step_start queues it."""
    return (0, "r1", step, attempt, at, args, 0)


def _end(step: int, status: str, at: float, result: str | None = None, attempt: int = 1) -> Any:
    """A step's end as Store.queue_step_end queues it (no reason, detail or error)."""
    return (1, "r1", step, status, at, attempt, None, None, 0.5, result, None, None, 0)


def _transition(step: int, attempt: int, state: str, at: float) -> Any:
    return (_TRANSITION_PLAIN, ("r1", step, attempt, state, at, 0))


def test_a_start_and_its_end_in_one_group_become_one_update_in_the_ends_place() -> None:
    group = [_start(1, 1, 1.0, '{"n":1}'), _start(2, 1, 1.5), _end(1, "succeeded", 2.0, "1")]
    assert _merged_step_rows(group) == [
        _transition(1, 1, "running", 1.0),
        # its end is in a later group: written as it is
        (_STEP_STATE, ("running", 1, 1.5, None, 0, *(0,) * 7, 0, "r1", 2)),
        _transition(2, 1, "running", 1.5),
        (
            _STEP_STATE,
            (
                *("succeeded", 1, 1.0, '{"n":1}', 1, None, None, 2.0),
                *(0.5, "1", None, None, 0, "r1", 1),
            ),
        ),
        _transition(1, 1, "succeeded", 2.0),
    ]


def test_a_group_without_a_whole_step_is_written_as_it_was_queued() -> None:
    group = [_end(1, "succeeded", 2.0), _start(2, 1, 2.1)]
    assert _merged_step_rows(group) == _step_rows(group)


def test_a_start_never_moves_past_another_write_to_the_step_table() -> None:
    group = [_start(1, 1, 1.0), (SUPERSEDE, ("[2]", "r1", 1)), _end(1, "succeeded", 2.0)]
    assert _merged_step_rows(group) == _step_rows(group)


def test_a_retried_step_keeps_its_first_start_and_merges_the_last_one() -> None:
    group = [_start(1, 1, 1.0), _start(1, 2, 3.0, '{"n":2}'), _end(1, "failed", 4.0, attempt=2)]
    merged = _merged_step_rows(group)
    assert merged[:2] == list(_event_rows(_start(1, 1, 1.0)))
    assert merged[3][1][:5] == ("failed", 2, 3.0, '{"n":2}', 1)


def _tables(path: Path) -> tuple[list[Any], list[Any]]:
    """Every step row and transition of run r1, times left out (two runs differ there)."""
    with sqlite3.connect(path) as connection:
        connection.row_factory = sqlite3.Row
        steps = [
            {
                key: row[key]
                for key in row.keys()  # noqa: SIM118 (sqlite3.Row iterates values)
                if key not in ("started_at", "ended_at", "duration_s")
            }
            | {"timed": (row["started_at"] is not None, row["ended_at"] is not None)}
            for row in connection.execute("SELECT * FROM step WHERE run_id = 'r1' ORDER BY step_id")
        ]
        transitions = [
            tuple(row)
            for row in connection.execute(
                "SELECT step_id, attempt, state, reason, segment FROM transition "
                "WHERE run_id = 'r1' ORDER BY id"
            )
        ]
    return steps, transitions


_TRIES: dict[int, int] = {}


@tool(inline=True)
def _work(n: int, text: str) -> dict[str, Any]:
    """Succeed with a record of n and text; n == 2 fails once (retried), n == 4 always."""
    _TRIES[n] = _TRIES.get(n, 0) + 1
    if n == 4 or (n == 2 and _TRIES[n] == 1):
        raise ConnectionError(f"no {n}")
    return {"n": n, "text": text, "words": text.split()}


PLAN = {
    "version": 1,
    "steps": [
        {
            "id": n,
            "tool": "_work",
            "args": {"n": n, "text": f"step {n} of the plan"},
            "depends_on": [n - 1] if n in (2, 5) else [],
        }
        for n in range(1, 7)
    ]
    + [
        {
            "id": 7,
            "tool": "_work",
            "args": {"n": 7, "text": "<step_4_result.text>"},
            "depends_on": [4],
        }
    ],
}


def _run(path: Path, *, merged: bool) -> tuple[list[Any], list[Any]]:
    _TRIES.clear()
    compiled = compile_plan(PLAN, Registry([_work]))
    store = Store(path, flush_interval_s=60.0)  # the whole run in one group
    if not merged:
        store.writer.coalesce = None  # the rows written one by one, as they were queued
    store.create_run("r1", command="test", goal=None, params={}, options={})
    recorder = StoreRecorder(store, "r1", compiled.steps, compiled.params)
    policy = RetryPolicy(retries=1, base_delay=0.0, jitter=False)
    result = anyio.run(
        lambda: run_plan(
            compiled, run_id="r1", observers=[recorder], retry=policy, max_concurrency=1
        )
    )
    store.close()
    assert not result.succeeded
    return _tables(path)


def test_a_run_leaves_the_same_rows_whether_its_steps_are_merged_or_not(
    tmp_path: Path,
) -> None:
    merged = _run(tmp_path / "merged.sqlite3", merged=True)
    assert merged == _run(tmp_path / "one_by_one.sqlite3", merged=False)
    steps, transitions = merged
    assert [(row["step_id"], row["status"], row["attempts"], row["timed"]) for row in steps] == [
        (1, "succeeded", 1, (True, True)),
        (2, "succeeded", 2, (True, True)),
        (3, "succeeded", 1, (True, True)),
        (4, "failed", 2, (True, True)),
        (5, "skipped", 0, (False, True)),
        (6, "succeeded", 1, (True, True)),
        (7, "skipped", 0, (False, True)),
    ]
    assert steps[1]["args"] == '{"n":2,"text":"step 2 of the plan"}'
    assert steps[1]["result"] == (
        '{"n":2,"text":"step 2 of the plan","words":["step","2","of","the","plan"]}'
    )
    assert [row[:3] for row in transitions if row[0] in (2, 5)] == [
        (2, 1, "running"),
        (5, 0, "skipped"),  # its parent 4 failed meanwhile
        (2, 2, "running"),  # a retry writes a start again, no end for the first attempt
        (2, 2, "succeeded"),
    ]


def test_a_text_bound_before_is_masked_again_once_the_environment_holds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PROBE_API_KEY", raising=False)
    connection = sqlite3.connect(
        tmp_path / "t.sqlite3", isolation_level=None, factory=SecretMaskingConnection
    )
    connection.execute("CREATE TABLE t (a TEXT, b INTEGER)")
    text = "calls made with zq81-probe-value-42"
    connection.executemany("INSERT INTO t VALUES (?, ?)", [(text, 1), (text, 2)])
    monkeypatch.setenv("PROBE_API_KEY", "zq81-probe-value-42")
    connection.execute("INSERT INTO t VALUES (?, ?)", (text, 3))
    connection.executemany("INSERT INTO t VALUES (?, ?)", [(text, 4)])
    rows = connection.execute("SELECT a, b FROM t ORDER BY b").fetchall()
    connection.close()
    assert rows == [
        (text, 1),
        (text, 2),
        ("calls made with [secret]", 3),
        ("calls made with [secret]", 4),
    ]


def test_rows_of_an_insert_written_many_to_a_statement_are_those_written_one_by_one(
    tmp_path: Path,
) -> None:
    from plandag.store.writer import VALUES_ROWS, _commit, _many_rows

    insert = "INSERT INTO t (k, v) VALUES (?, ?)"
    replace = "INSERT OR REPLACE INTO u (k, v) VALUES (?, ?)"
    assert _many_rows(insert) is not None
    assert _many_rows(_STEP_STATE) is None  # an update: row by row
    # more rows than a statement takes, keys repeated within one statement, a secret
    group = [(insert, (n, f"v{n}")) for n in range(VALUES_ROWS * 2 + 5)]
    group += [(replace, (n % 7, f"w{n}")) for n in range(VALUES_ROWS + 3)]
    group.append((insert, (-1, "key sk-ant-abcdefgh12345678")))
    tables = []
    for name, commit in (("many", _commit), ("one_by_one", None)):
        connection = sqlite3.connect(
            tmp_path / f"{name}.sqlite3", isolation_level=None, factory=SecretMaskingConnection
        )
        connection.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k INTEGER, v TEXT)")
        connection.execute("CREATE TABLE u (k INTEGER PRIMARY KEY, v TEXT)")
        if commit is not None:
            commit(connection, group)
        else:
            for sql, args in group:
                connection.execute(sql, args)
        tables.append(
            (
                connection.execute("SELECT * FROM t ORDER BY id").fetchall(),
                connection.execute("SELECT * FROM u ORDER BY k").fetchall(),
            )
        )
        connection.close()
    assert tables[0] == tables[1]
    assert tables[0][0][-1] == (VALUES_ROWS * 2 + 6, -1, "key [secret]")
    assert len(tables[0][1]) == 7
