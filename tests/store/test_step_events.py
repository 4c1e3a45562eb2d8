"""A step's start and end wait in the writer's queue as one flat tuple each, which the
writer's thread turns into the rows the store wrote for them before (a step row and a
transition each), merged as those rows are merged."""

from __future__ import annotations

import gc
import random
import sqlite3
from pathlib import Path
from typing import Any

from plandag.store import Store
from plandag.store.store import (
    _STEP_STATE,
    _TRANSITION,
    _TRANSITION_PLAIN,
    _event_rows,
    _merged_step_rows,
    _step_rows,
)

SUPERSEDE = "UPDATE step SET superseded_by = ? WHERE run_id = ? AND step_id = ?"
EVENT = "INSERT INTO event (run_id, time, kind, data) VALUES (?, ?, ?, ?)"


def test_a_queued_start_and_end_are_the_rows_written_for_them() -> None:
    start = (0, "r1", 3, 2, 10.5, '{"n":3}', 1)
    assert _event_rows(start) == (
        (_STEP_STATE, ("running", 2, 10.5, '{"n":3}', 0, 0, 0, 0, 0, 0, 0, 0, 1, "r1", 3)),
        (_TRANSITION_PLAIN, ("r1", 3, 2, "running", 10.5, 1)),
    )
    end = (1, "r1", 3, "failed", 11.0, 2, "timeout", "late", 0.5, None, None, '{"e":1}', 1)
    assert _event_rows(end) == (
        (
            _STEP_STATE,
            (
                "failed",
                None,
                None,
                None,
                1,
                "timeout",
                "late",
                11.0,
                0.5,
                None,
                None,
                '{"e":1}',
                1,
                "r1",
                3,
            ),
        ),
        (_TRANSITION, ("r1", 3, 2, "failed", "timeout", 11.0, 1)),
    )
    plain = (1, "r1", 3, "succeeded", 11.0, 2, None, None, 0.5, "7", None, None, 1)
    assert _event_rows(plain)[1] == (_TRANSITION_PLAIN, ("r1", 3, 2, "succeeded", 11.0, 1))


def _group(chooser: random.Random) -> list[Any]:
    """Step starts and ends of a few steps (retries, ends without their start, starts
    without their end), with other writes of the step table and of others among them."""
    group: list[Any] = []
    for _ in range(chooser.randint(1, 30)):
        step = chooser.randint(1, 6)
        kind = chooser.random()
        at = round(chooser.random() * 100, 3)
        if kind < 0.4:
            args = chooser.choice([None, "{}", f'{{"n":{step}}}'])
            group.append((0, "r1", step, chooser.randint(1, 3), at, args, chooser.randint(0, 1)))
        elif kind < 0.8:
            group.append(
                (
                    1,
                    chooser.choice(["r1", "r2"]),
                    step,
                    chooser.choice(["succeeded", "failed", "cancelled", "skipped"]),
                    at,
                    chooser.randint(0, 3),
                    chooser.choice([None, None, "timeout"]),
                    chooser.choice([None, None, "a detail"]),
                    chooser.choice([None, 0.25, 1.5]),
                    chooser.choice([None, "null", f'{{"n":{step}}}']),
                    chooser.choice([None, None, "ab" * 32]),
                    chooser.choice([None, None, '{"message":"no"}']),
                    chooser.randint(0, 1),
                )
            )
        elif kind < 0.9:
            group.append((SUPERSEDE, ("[9]", "r1", step)))
        else:
            group.append((EVENT, ("r1", at, "heartbeat", "{}")))
    return group


def _tables_after(empty: sqlite3.Connection, rows: list[Any]) -> tuple[list[Any], ...]:
    """The step, transition and event tables after ``rows`` are written, in order, to a
    copy of ``empty`` in memory."""
    connection = sqlite3.connect(":memory:", isolation_level=None)
    try:
        empty.backup(connection)
        for sql, args in rows:
            connection.execute(sql, args)
        return tuple(
            connection.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()
            for table in ("step", "transition", "event")
        )
    finally:
        connection.close()


def test_queued_starts_and_ends_merged_leave_the_rows_they_leave_one_by_one(
    tmp_path: Path,
) -> None:
    Store(tmp_path / "empty.sqlite3").close()
    empty = sqlite3.connect(tmp_path / "empty.sqlite3", isolation_level=None)
    try:
        for run_id in ("r1", "r2"):
            empty.execute(
                "INSERT INTO run (run_id, created, updated, command, status) "
                "VALUES (?, 0, 0, 'test', 'running')",
                (run_id,),
            )
            empty.executemany(
                "INSERT INTO step (run_id, step_id, tool, effects) VALUES (?, ?, 'work', 'none')",
                [(run_id, step) for step in range(1, 7)],
            )
        # odd steps hold what an earlier segment wrote (every column the writes set or keep)
        empty.execute(
            "UPDATE step SET status = 'failed', attempts = 3, started_at = 0.5, args = 'old', "
            "reason = 'old', detail = 'old', ended_at = 0.7, duration_s = 0.2, result = 'old', "
            "result_hash = 'old', error = 'old', segment = 1 WHERE step_id % 2 = 1"
        )
        chooser = random.Random(5)
        merges = 0
        for _ in range(400):
            group = _group(chooser)
            rows = _step_rows(group)
            assert all(type(row[0]) is str for row in rows)
            expected = _tables_after(empty, rows)
            for narrow in (False, True):
                merged = _merged_step_rows(group, narrow=narrow)
                assert all(type(row[0]) is str for row in merged)
                assert _tables_after(empty, merged) == expected
                merges += len(merged) < len(rows)
        assert merges > 100  # the groups do merge starts into ends
    finally:
        empty.close()


def test_a_recorded_step_keeps_two_tracked_objects_in_the_writers_queue(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "runs.sqlite3", flush_interval_s=3600.0)
    try:
        store.create_run("r1", command="test", goal=None, params={}, options={})
        store.declare_steps("r1", [(step, "t", "none") for step in range(50)])
        for step in range(50):
            store.queue_step_start("r1", step, 1, float(step), '{"n":1}', 0, False)
            store.queue_step_end(
                *("r1", step, "succeeded", step + 0.5, 1, None, None, 0.5, "1", None, None),
                *(0, False),
            )
        queued = list(store.writer._queue)
        tracked = [
            item
            for entry in queued
            for item in (entry, *entry)
            if gc.is_tracked(item) and type(item) is not str
        ]
        assert len(tracked) <= 2 * 50
    finally:
        store.close()
    connection = sqlite3.connect(tmp_path / "runs.sqlite3")
    try:
        counted = connection.execute("SELECT count(*) FROM step WHERE status = 'succeeded'")
        assert counted.fetchone() == (50,)
    finally:
        connection.close()
