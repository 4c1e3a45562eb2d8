"""Store migrations: a database written by plandag 0.1.0 opens, migrates and keeps its runs."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from plandag.errors import InputError
from plandag.store import open_store
from plandag.store.migrations import MIGRATIONS, SCHEMA_VERSION, migrate, schema_version

RELEASE_0_1_0 = Path(__file__).parent / "data" / "store_release_0_1_0.sqlite3"


def _columns(connection: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in connection.execute(f"PRAGMA table_info({table})")}


def test_versions_are_consecutive_from_one() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    assert len(MIGRATIONS) == SCHEMA_VERSION


def test_a_release_0_1_0_store_is_migrated_and_keeps_its_runs(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    shutil.copy(RELEASE_0_1_0, path)
    before = sqlite3.connect(path)
    assert schema_version(before) == 0
    runs_before = before.execute(
        "SELECT run_id, status, command FROM run ORDER BY run_id"
    ).fetchall()
    steps_before = before.execute("SELECT count(*) FROM step").fetchone()[0]
    before.close()
    assert len(runs_before) == 2
    assert steps_before == 4

    with open_store(path) as store:
        assert schema_version(store.connection) == SCHEMA_VERSION
        runs = store.connection.execute(
            "SELECT run_id, status, command FROM run ORDER BY run_id"
        ).fetchall()
        assert runs == runs_before
        assert {"estimate", "shown_at"} <= _columns(store.connection, "plan_version")
        assert "context" in _columns(store.connection, "escalation")
        assert "consumed_at" in _columns(store.connection, "instruction")
        listed = {row.run_id for row in store.runs()}
        assert listed == {run_id for run_id, _, _ in runs_before}

    # Opening again applies nothing more.
    with open_store(path) as store:
        assert schema_version(store.connection) == SCHEMA_VERSION


def test_a_new_store_starts_at_the_latest_version(tmp_path: Path) -> None:
    with open_store(tmp_path / "new.sqlite3") as store:
        assert schema_version(store.connection) == SCHEMA_VERSION


def test_a_store_from_a_newer_release_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.sqlite3"
    connection = sqlite3.connect(path)
    connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    connection.close()
    with pytest.raises(InputError, match="newer than this plandag knows") as caught:
        open_store(path)
    assert str(caught.value) == (
        f"run store {path} has schema version {SCHEMA_VERSION + 1}, newer than this plandag "
        f"knows ({SCHEMA_VERSION}); upgrade plandag, or pick another store with --store PATH"
    )


def test_a_failed_migration_is_rolled_back_whole(tmp_path: Path) -> None:
    path = tmp_path / "half.sqlite3"
    shutil.copy(RELEASE_0_1_0, path)
    connection = sqlite3.connect(path, isolation_level=None)
    # A column that migration 2 adds already exists: its ALTER fails, nothing of it stays.
    connection.execute("ALTER TABLE plan_version ADD COLUMN shown_at REAL")
    with pytest.raises(sqlite3.OperationalError):
        migrate(connection)
    assert schema_version(connection) == 1
    tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    assert "escalation" not in tables
    assert "estimate" not in _columns(connection, "plan_version")
    connection.close()


def _without_the_lists_of_runs(connection: sqlite3.Connection) -> None:
    """Take back what migration 11 added (the runs each tool succeeded in)."""
    for trigger in ("tool_run_running", "tool_run_step_deleted"):
        connection.execute(f"DROP TRIGGER {trigger}")
    connection.execute("DROP TABLE tool_run")


_OLDER_DURATION_INDEXES = {
    # version 8: every step's state and duration
    8: "CREATE INDEX step_durations ON step (tool, status, duration_s, run_id)",
    # version 9: succeeded steps only, in the order of their durations
    9: "CREATE INDEX step_durations ON step (tool, duration_s, run_id, status) "
    "WHERE status = 'succeeded' AND duration_s IS NOT NULL",
}


def _made_older(path: Path, version: int) -> None:
    """Give the store at ``path`` the schema of ``version`` (8, 9 or 10) for its durations."""
    connection = sqlite3.connect(path, isolation_level=None)
    _without_the_lists_of_runs(connection)
    if version in _OLDER_DURATION_INDEXES:
        connection.execute("DROP INDEX step_recent_durations")
        connection.execute(_OLDER_DURATION_INDEXES[version])
    connection.execute(f"PRAGMA user_version = {version}")
    connection.close()


@pytest.mark.parametrize("version", sorted(_OLDER_DURATION_INDEXES))
def test_an_older_store_keeps_its_measured_durations_with_the_index_in_the_order_steps_ended(
    tmp_path: Path, version: int
) -> None:
    path = tmp_path / "runs.sqlite3"
    with open_store(path) as store:
        for number in range(6):
            run_id = f"r{number}"
            store.create_run(run_id, command="exec", goal=None, params={}, options={})
            store.declare_steps(run_id, [(step, "fetch", "none") for step in range(4)])
            store.step_ended(run_id, 0, "succeeded", 1.0, duration_s=0.1 * number, durable=False)
            store.step_ended(run_id, 1, "succeeded", 1.0, duration_s=None, durable=False)
            store.step_ended(run_id, 2, "failed", 1.0, duration_s=9.0, durable=False)
            store.step_started(run_id, 3, 1, 1.0, durable=False)
        measured = store.tool_durations()
    assert measured == {"fetch": 0.25}
    # the schema of the older version
    _made_older(path, version)

    with open_store(path) as store:
        assert schema_version(store.connection) == SCHEMA_VERSION
        indexes = dict(
            store.connection.execute(
                "SELECT name, sql FROM sqlite_master WHERE tbl_name = 'step' AND type = 'index'"
            ).fetchall()
        )
        assert "step_durations" not in indexes
        assert "(tool, ended_at, duration_s, run_id, status)" in indexes["step_recent_durations"]
        assert (
            "WHERE status = 'succeeded' AND duration_s IS NOT NULL"
            in (indexes["step_recent_durations"])
        )
        assert store.tool_durations() == measured
        assert store.tool_durations(["fetch"], min_runs=6) == measured
        assert store.tool_durations(["fetch"], min_runs=7) == {}
        # a run recorded after the migration is read with the others
        store.create_run("r6", command="exec", goal=None, params={}, options={})
        store.declare_steps("r6", [(0, "fetch", "none")])
        store.step_ended("r6", 0, "succeeded", 2.0, duration_s=0.6, durable=False)
        assert store.tool_durations(min_runs=7) == {"fetch": pytest.approx(0.3)}
        assert store.tool_durations(latest=2) == {"fetch": pytest.approx(0.55)}


@pytest.mark.parametrize("version", [8, 10])
def test_an_older_store_lists_the_runs_each_tool_succeeded_in_from_its_rows(
    tmp_path: Path, version: int
) -> None:
    path = tmp_path / "runs.sqlite3"
    with open_store(path) as store:
        for number in range(7):
            run_id = f"r{number}"
            store.create_run(run_id, command="exec", goal=None, params={}, options={})
            store.declare_steps(
                run_id, [(0, "fetch", "none"), (1, "parse", "none"), (2, "rare", "none")]
            )
            at = 1.0 + number
            store.step_ended(run_id, 0, "succeeded", at, duration_s=0.1 * number, durable=False)
            store.step_ended(run_id, 1, "failed", at, duration_s=0.5, durable=False)
            if number == 3:
                store.step_ended(run_id, 2, "succeeded", at, duration_s=None, durable=False)
            if number < 6:  # the last one still runs (or crashed)
                store.update_run(run_id, status="succeeded" if number % 2 else "failed")
        store.create_run("awaits", command="exec", goal=None, params={}, options={})
        store.declare_steps("awaits", [(0, "parse", "none")])
        store.step_ended("awaits", 0, "succeeded", 9.0, duration_s=2.0, durable=False)
        store.update_run("awaits", status="awaiting_approval")
        measured = {
            (min_runs, latest): store.tool_durations(min_runs=min_runs, latest=latest)
            for min_runs in (1, 5, 6, 7, 8)
            for latest in (1, 3, 1000)
        }
    assert measured[(7, 1000)] == {"fetch": pytest.approx(0.3)}
    _made_older(path, version)

    with open_store(path) as store:
        assert schema_version(store.connection) == SCHEMA_VERSION
        listed = store.connection.execute(
            "SELECT run_id, tool FROM tool_run ORDER BY run_id, tool"
        ).fetchall()
        # runs not running, with a succeeded step whose duration is known
        assert listed == [("awaits", "parse")] + [(f"r{n}", "fetch") for n in range(6)]
        assert {
            (min_runs, latest): store.tool_durations(min_runs=min_runs, latest=latest)
            for min_runs in (1, 5, 6, 7, 8)
            for latest in (1, 3, 1000)
        } == measured
        # the running one, taken again, is listed once it ends with its tools
        store.update_run("r6", status="running")
        store.write_steps("r6", [], tools=["fetch"])
        store.update_run("r6", status="succeeded")
        assert ("r6", "fetch") in store.connection.execute("SELECT * FROM tool_run").fetchall()
