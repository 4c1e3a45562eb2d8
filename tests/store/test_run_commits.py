"""How many transactions a durable run commits (each one a sync of the disk) before its
first step and after its last: one each. The run, its plan version and its steps are
committed together; the run's final state is committed with the recorder's last rows.
The rows are the same as when each was committed on its own."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import plandag.store.writer as group_writer
from plandag.compiler import compile_plan
from plandag.runs.options import RunOptions
from plandag.runs.segments import start_run
from plandag.runs.traces import trace_factory
from plandag.scheduler import events
from plandag.store import Store
from plandag.tools import tool
from plandag.tools.registry import Registry


@tool(inline=True)
def relay(label: str) -> str:
    """Return ``label`` (no effect)."""
    return label


@tool(effects="write", idempotent=True)
def store_label(label: str) -> str:
    """Return ``label`` (an effect, idempotent)."""
    return label


def _plan(effects: bool) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    for number in range(1, 7):
        tool_name = "store_label" if effects and number == 3 else "relay"
        label = "s1" if number == 1 else f"<step_{number - 1}_result>+s{number}"
        depends = [number - 1] if number > 1 else []
        steps.append(
            {"id": number, "tool": tool_name, "args": {"label": label}, "depends_on": depends}
        )
    return {"version": 1, "goal": "a chain", "steps": steps, "output": "<step_6_result>"}


class _Commits:
    """Counts the transactions committed on the store's connection and by its writer."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        original = group_writer._commit

        def commit(connection: sqlite3.Connection, group: Any) -> None:
            original(connection, group)
            self.count += 1

        monkeypatch.setattr(group_writer, "_commit", commit)
        store.connection.set_trace_callback(self._statement)

    def _statement(self, sql: str) -> None:
        if sql.strip().upper() == "COMMIT":
            self.count += 1


class _Marks:
    """The commit count when the run starts and when its last step's end is queued."""

    def __init__(self, commits: _Commits, last: int) -> None:
        self.commits = commits
        self.last = last
        self.at_start: int | None = None
        self.at_last_end: int | None = None

    def __call__(self, event: events.Event) -> None:
        if isinstance(event, events.RunStarted):
            self.at_start = self.commits.count
        elif isinstance(event, events.StepSucceeded) and event.step_id == self.last:
            self.at_last_end = self.commits.count


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    # a long interval: the writer commits only when asked, so what the run's end commits
    # is in the queue when the last step ends
    opened = Store(tmp_path / "runs.sqlite3", flush_interval_s=60.0)
    yield opened
    opened.close()


@pytest.mark.parametrize("effects", [False, True])
def test_a_run_commits_once_before_its_first_step_and_once_after_its_last(
    store: Store, monkeypatch: pytest.MonkeyPatch, effects: bool
) -> None:
    compiled = compile_plan(_plan(effects), Registry([relay, store_label]))
    commits = _Commits(store, monkeypatch)
    marks = _Marks(commits, last=6)
    outcome = anyio.run(
        lambda: start_run(
            store,
            compiled,
            RunOptions(approve="auto"),
            command="exec",
            observers=[marks],
            trace=trace_factory(store, False),
        )
    )
    assert outcome.status == "succeeded"
    # the run, its plan version and its steps; with effects, the automatic approval too
    assert marks.at_start == (2 if effects else 1)
    assert marks.at_last_end is not None
    assert commits.count - marks.at_last_end == 1  # the last rows with the run's end

    run = store.run(outcome.run_id)
    assert (run.status, run.version, run.segment, run.pid) == ("succeeded", 1, 0, None)
    assert run.options["elapsed_s"] > 0
    steps = store.steps(outcome.run_id)
    assert sorted(steps) == [1, 2, 3, 4, 5, 6]
    assert {row.status for row in steps.values()} == {"succeeded"}
    assert steps[6].result == "s1+s2+s3+s4+s5+s6"
    expected = [("relay", "none", 0)] * 6
    if effects:
        expected[2] = ("store_label", "write", 0)
    assert [(steps[key].tool, steps[key].effects, steps[key].segment) for key in sorted(steps)] == (
        expected
    )


def test_steps_declared_with_the_run_are_the_rows_declare_steps_makes(tmp_path: Path) -> None:
    steps = [(1, "relay", "none"), (2, "store_label", "write"), (3, "relay", "none")]
    stores = []
    for name, with_run in (("together", True), ("apart", False)):
        store = Store(tmp_path / f"{name}.sqlite3")
        stores.append(store)
        store.create_run_with_plan(
            "r1",
            command="exec",
            goal="g",
            params={},
            options={},
            plan={"version": 1, "steps": []},
            plan_hash="ab" * 32,
            source="stored",
            steps=steps if with_run else (),
        )
        if not with_run:
            store.declare_steps("r1", steps, 0)
    try:
        together, apart = (
            sqlite3.connect(store.path).execute("SELECT * FROM step ORDER BY step_id").fetchall()
            for store in stores
        )
        assert together == apart
        assert len(together) == 3
    finally:
        for store in stores:
            store.close()


def test_a_run_whose_steps_cannot_be_declared_is_not_stored(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs.sqlite3")
    try:
        with pytest.raises(sqlite3.Error):
            store.create_run_with_plan(
                "r1",
                command="exec",
                goal="g",
                params={},
                options={},
                plan={"version": 1, "steps": []},
                plan_hash="ab" * 32,
                source="stored",
                steps=[(1, "relay", "none"), (2, object(), "none")],  # type: ignore[list-item]
            )
        assert store.runs() == []
        assert store.plan_versions("r1") == []
    finally:
        store.close()


class _LockAtLastEnd:
    """Takes the database's write lock (as another process would) when the last step ends."""

    def __init__(self, path: Path, last: int) -> None:
        self.path = path
        self.last = last
        self.holder: sqlite3.Connection | None = None

    def __call__(self, event: events.Event) -> None:
        if isinstance(event, events.StepSucceeded) and event.step_id == self.last:
            self.holder = sqlite3.connect(self.path, isolation_level=None)
            self.holder.execute("BEGIN IMMEDIATE")


def test_a_run_end_the_store_cannot_commit_is_reported_and_kept(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs.sqlite3", busy_timeout_s=0.2, flush_interval_s=60.0)
    compiled = compile_plan(_plan(False), Registry([relay, store_label]))
    lock = _LockAtLastEnd(store.path, last=6)
    try:
        outcome = anyio.run(
            lambda: start_run(store, compiled, RunOptions(), command="exec", observers=[lock])
        )
        assert outcome.status == "succeeded"
        assert outcome.store_error is not None
        assert "could not record it" in outcome.store_error
        assert lock.holder is not None
        lock.holder.execute("ROLLBACK")
        lock.holder.close()
        store.flush()  # the end and the last rows were kept, in order, and commit now
        assert store.run(outcome.run_id).status == "succeeded"
        assert {row.status for row in store.steps(outcome.run_id).values()} == {"succeeded"}
    finally:
        store.close()
