"""The run store's group writer: writes that may wait are committed in groups by a thread of
their own; the writes that must not wait flush the queue first, so order is kept; a reader
in the same process sees every write made before it; a failed commit is raised, never lost;
close waits for the last group."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import anyio
import pytest

from plandag.compiler import compile_plan
from plandag.scheduler import run_plan
from plandag.store import Store, StoreRecorder
from plandag.store.writer import FLUSH_INTERVAL_S, GroupWriter
from plandag.tools.base import tool
from plandag.tools.registry import Registry


def _raw(path: Path) -> sqlite3.Connection:
    """Another connection, as another process (the console, `plandag runs`) reads."""
    return sqlite3.connect(path, isolation_level=None)


def _events(path: Path, run_id: str) -> list[str]:
    with _raw(path) as connection:
        return [
            row[0]
            for row in connection.execute(
                "SELECT kind FROM event WHERE run_id = ? ORDER BY id", (run_id,)
            )
        ]


def _new_store(tmp_path: Path, **options: float) -> Store:
    store = Store(tmp_path / "runs.sqlite3", **options)
    store.create_run("r1", command="test", goal=None, params={}, options={})
    return store


def _wait_for(condition: object, seconds: float = 10.0) -> bool:
    """Poll ``condition`` (a callable) until true or ``seconds`` pass; never asserts time."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


def test_the_store_commits_queued_writes_within_a_fifth_of_a_second_by_default(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "runs.sqlite3")
    try:
        assert FLUSH_INTERVAL_S == 0.2
        assert store.writer.interval_s == FLUSH_INTERVAL_S
    finally:
        store.close()


def test_queued_writes_are_committed_in_the_order_they_were_made(tmp_path: Path) -> None:
    store = _new_store(tmp_path, flush_interval_s=60.0)
    try:
        kinds = []
        for number in range(300):
            kind = f"k{number}"
            kinds.append(kind)
            store.record_event("r1", kind, {"n": number}, float(number))
            if number % 7 == 0:  # another statement in between: groups split by statement
                store.write(
                    "UPDATE run SET detail = ? WHERE run_id = ?", (kind, "r1"), durable=False
                )
        store.flush()
        assert _events(tmp_path / "runs.sqlite3", "r1") == kinds
        assert store.run("r1").detail == "k294"
    finally:
        store.close()


def test_a_synchronous_write_commits_what_was_queued_before_it(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    store = _new_store(tmp_path, flush_interval_s=60.0)  # the interval never comes
    try:
        store.record_event("r1", "before", {}, 1.0)
        assert _events(path, "r1") == []  # queued, not committed
        store.add_plan_version("r1", 1, {"steps": []}, "hash1", "stored")
        assert _events(path, "r1") == ["before"]
        store.record_event("r1", "between", {}, 2.0)
        store.record_decision("r1", 1, "hash1", "approved", who="ana")
        assert _events(path, "r1") == ["before", "between"]
        store.record_event("r1", "then", {}, 3.0)
        store.add_escalation("r1", "replan_caps", {"why": "test"})
        assert _events(path, "r1") == ["before", "between", "then"]
        store.record_event("r1", "last", {}, 4.0)
        store.update_run("r1", status="succeeded")  # a durable write through the writer
        assert _events(path, "r1") == ["before", "between", "then", "last"]
        with _raw(path) as connection:
            assert connection.execute("SELECT status FROM run").fetchone() == ("succeeded",)
    finally:
        store.close()


def test_a_step_with_effects_is_committed_as_started_before_the_call_returns(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.sqlite3"
    store = _new_store(tmp_path, flush_interval_s=60.0)
    try:
        store.declare_steps("r1", [(1, "free", "none"), (2, "send", "write")])
        store.step_started("r1", 1, 1, 1.0, durable=False)
        store.step_ended("r1", 1, "succeeded", 2.0, attempt=1, result={"a": 1}, durable=False)
        store.step_started("r1", 2, 1, 3.0, durable=True)
        with _raw(path) as connection:
            rows = connection.execute(
                "SELECT step_id, state FROM transition ORDER BY id"
            ).fetchall()
            assert rows == [(1, "running"), (1, "succeeded"), (2, "running")]
            assert connection.execute("SELECT status FROM step WHERE step_id = 2").fetchone() == (
                "running",
            )
    finally:
        store.close()


def test_a_read_sees_every_write_made_before_it_in_this_process(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    store = _new_store(tmp_path, flush_interval_s=60.0)
    other = Store(path, flush_interval_s=60.0)  # as the web console opens its own
    try:
        store.record_event("r1", "seen", {}, 1.0)
        store.write("UPDATE run SET detail = ? WHERE run_id = ?", ("d", "r1"), durable=False)
        assert [kind for _, kind, _ in store.events("r1")] == ["seen"]
        store.write("UPDATE run SET detail = ? WHERE run_id = ?", ("e", "r1"), durable=False)
        assert other.run("r1").detail == "e"  # another store of this process flushes it
        assert [row.run_id for row in other.runs()] == ["r1"]
    finally:
        other.close()
        store.close()


def test_close_waits_for_the_last_group(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    store = _new_store(tmp_path, flush_interval_s=60.0)
    for number in range(1000):
        store.record_event("r1", f"k{number}", {}, float(number))
    store.close()
    assert _events(path, "r1") == [f"k{number}" for number in range(1000)]
    with pytest.raises(RuntimeError, match="closed"):
        store.writer.submit("SELECT 1", ())


def test_a_group_is_committed_once_its_interval_passes_on_the_writers_clock(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.sqlite3"
    _new_store(tmp_path).close()
    now = [100.0]
    writer = GroupWriter(path, interval_s=0.2, clock=lambda: now[0])
    try:
        writer.submit(
            "INSERT INTO event (run_id, time, kind, data) VALUES ('r1', 1, 'a', '{}')", ()
        )
        assert writer.due() == pytest.approx(100.2)
        now[0] = 100.1
        writer.wake()
        writer.submit(
            "INSERT INTO event (run_id, time, kind, data) VALUES ('r1', 2, 'b', '{}')", ()
        )
        assert writer.due() == pytest.approx(100.2)  # the oldest write sets the bound
        assert writer.groups == 0
        now[0] = 100.2
        writer.wake()
        assert _wait_for(lambda: writer.groups == 1)
        assert writer.pending == 0
        assert writer.due() is None
        assert _events(path, "r1") == ["a", "b"]
    finally:
        writer.close()


def test_without_a_flush_a_queued_write_becomes_visible_to_other_processes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.sqlite3"
    store = _new_store(tmp_path, flush_interval_s=0.05)
    try:
        store.record_event("r1", "heartbeat", {}, 1.0)
        assert _wait_for(lambda: _events(path, "r1") == ["heartbeat"])
    finally:
        store.close()


def test_a_group_of_max_rows_is_committed_at_once(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    _new_store(tmp_path).close()
    writer = GroupWriter(path, interval_s=3600.0, max_rows=10, clock=lambda: 0.0)
    try:
        for number in range(10):
            writer.submit(
                "INSERT INTO event (run_id, time, kind, data) VALUES ('r1', ?, 'k', '{}')",
                (float(number),),
            )
        assert _wait_for(lambda: writer.groups >= 1)
        assert len(_events(path, "r1")) == 10
    finally:
        writer.close()


def _hold_write_lock(path: Path) -> sqlite3.Connection:
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    return holder


def test_a_failed_commit_is_raised_and_its_writes_are_kept_in_order(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    store = _new_store(tmp_path, busy_timeout_s=0.05, flush_interval_s=60.0)
    try:
        store.record_event("r1", "one", {}, 1.0)
        holder = _hold_write_lock(path)  # another process holds the lock too long
        store.record_event("r1", "two", {}, 2.0)
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            store.flush()
        assert isinstance(store.writer.error, sqlite3.OperationalError)
        store.record_event("r1", "three", {}, 3.0)
        holder.execute("ROLLBACK")
        holder.close()
        store.flush()
        assert store.writer.error is None
        assert _events(path, "r1") == ["one", "two", "three"]
    finally:
        store.close()


def test_a_durable_write_that_cannot_be_committed_raises(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    store = _new_store(tmp_path, busy_timeout_s=0.05, flush_interval_s=60.0)
    holder = _hold_write_lock(path)
    try:
        with pytest.raises(sqlite3.OperationalError):
            store.step_started("r1", 1, 1, 1.0, durable=True)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        store.close()


def test_close_raises_when_the_last_group_cannot_be_committed(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    store = _new_store(tmp_path, busy_timeout_s=0.05, flush_interval_s=60.0)
    holder = _hold_write_lock(path)
    try:
        store.record_event("r1", "lost", {}, 1.0)
        with pytest.raises(sqlite3.OperationalError):
            store.close()
    finally:
        holder.execute("ROLLBACK")
        holder.close()


@tool(inline=True)
def _free(n: int) -> int:
    """Return n (no effect)."""
    return n


def test_a_writer_failure_during_a_run_is_an_error_of_the_run(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    store = _new_store(tmp_path, busy_timeout_s=0.05, flush_interval_s=60.0)
    plan = {
        "version": 1,
        "steps": [{"id": n, "tool": "_free", "args": {"n": n}, "depends_on": []} for n in (1, 2)],
    }
    compiled = compile_plan(plan, Registry([_free]))
    recorder = StoreRecorder(store, "r1", compiled.steps, compiled.params)
    holder = _hold_write_lock(path)
    released = threading.Event()
    try:
        original = recorder.reconcile

        def reconcile_fast(result: object, **_: object) -> None:
            original(result, attempts=1, pause_s=0.0)  # type: ignore[arg-type]

        recorder.reconcile = reconcile_fast  # type: ignore[method-assign]
        result = anyio.run(lambda: run_plan(compiled, run_id="r1", observers=[recorder]))
        assert result.succeeded
        assert isinstance(recorder.failure, sqlite3.OperationalError)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        released.set()
    store.flush()  # the lock released: the writes kept are committed now
    assert {row.status for row in store.steps("r1").values()} == {"succeeded"}
    store.close()


def test_rows_of_one_statement_are_gathered_only_past_writes_to_other_tables() -> None:
    from plandag.store.writer import _batches

    step = "UPDATE step SET status = ? WHERE step_id = ?"
    transition = "INSERT INTO transition (step_id, state) VALUES (?, ?)"
    declare = "INSERT OR IGNORE INTO step (step_id) VALUES (?)"
    group = [
        (step, ("running", 1)),
        (transition, (1, "running")),
        (step, ("succeeded", 1)),
        (transition, (1, "succeeded")),
        (declare, (2,)),  # the step table again: the next update may not move before it
        (step, ("running", 2)),
        (transition, (2, "running")),
        ("PRAGMA user_version = 1", ()),  # unknown: nothing moves past it
        (transition, (3, "running")),
    ]
    assert _batches(group) == [
        (step, [("running", 1), ("succeeded", 1)]),
        (transition, [(1, "running"), (1, "succeeded"), (2, "running")]),
        (declare, [(2,)]),
        (step, [("running", 2)]),
        ("PRAGMA user_version = 1", [()]),
        (transition, [(3, "running")]),
    ]


def test_an_idle_writer_ends_its_thread_and_the_next_write_starts_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import plandag.store.writer as writer_module

    monkeypatch.setattr(writer_module, "IDLE_SECONDS", 0.05)
    path = tmp_path / "runs.sqlite3"
    store = _new_store(tmp_path, flush_interval_s=60.0)  # left open, as a caller may
    try:
        first = store.writer._thread
        assert first is not None
        assert _wait_for(lambda: not first.is_alive())
        assert store.writer._thread is None
        store.record_event("r1", "later", {}, 1.0)
        assert store.writer._thread is not None
        store.flush()
        assert _events(path, "r1") == ["later"]
    finally:
        store.close()


def test_a_cancelled_run_s_writes_are_committed_when_its_store_closes(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    store = _new_store(tmp_path, flush_interval_s=60.0)

    @tool
    async def _slow(n: int) -> int:
        """Wait, then return n."""
        if n == 3:
            await anyio.sleep(60)
        return n

    plan = {
        "version": 1,
        "steps": [
            {"id": n, "tool": "_slow", "args": {"n": n}, "depends_on": [n - 1] if n > 1 else []}
            for n in (1, 2, 3)
        ],
    }
    compiled = compile_plan(plan, Registry([_slow]))

    async def cancelled() -> None:
        recorder = StoreRecorder(store, "r1", compiled.steps, compiled.params)
        with anyio.move_on_after(0.5):
            await run_plan(compiled, run_id="r1", observers=[recorder])

    anyio.run(cancelled)
    store.close()
    with _raw(path) as connection:
        rows = connection.execute("SELECT step_id, state FROM transition ORDER BY id").fetchall()
    assert rows[:5] == [
        (1, "running"),
        (1, "succeeded"),
        (2, "running"),
        (2, "succeeded"),
        (3, "running"),
    ]


def test_a_group_of_documents_is_committed_before_record_document_texts_returns(
    tmp_path: Path,
) -> None:
    # the batch's end rewrites the output file with its corrections: every group's rows
    # must be committed by then, or a crash leaves rows the file already contradicts
    path = tmp_path / "runs.sqlite3"
    store = _new_store(tmp_path, flush_interval_s=60.0)
    try:
        store.record_document_texts(
            "r1",
            [(0, "a.xml", "ok", '{"n":1}', False, None), (1, "b.xml", "error", None, False, "e")],
        )
        with _raw(path) as connection:
            assert connection.execute("SELECT count(*) FROM document").fetchone() == (2,)
        assert store.writer.pending == 0
        assert [(row.idx, row.status, row.record) for row in store.documents("r1")] == [
            (0, "ok", {"n": 1}),
            (1, "error", None),
        ]
    finally:
        store.close()


def test_an_update_handed_to_the_writer_is_committed_with_what_was_queued_before_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.sqlite3"
    store = _new_store(tmp_path, flush_interval_s=60.0)
    try:
        store.record_event("r1", "before", {}, 1.0)
        wait = store.update_run_soon("r1", status="succeeded", pid=None)
        wait()
        with _raw(path) as connection:
            (status,) = connection.execute("SELECT status FROM run WHERE run_id = 'r1'").fetchone()
        assert status == "succeeded"
        assert _events(path, "r1") == ["before"]
        assert store.writer.pending == 0
        wait()  # waiting again returns at once
    finally:
        store.close()


def test_an_update_handed_to_the_writer_returns_before_it_is_committed_and_raises_on_waiting(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.sqlite3"
    store = _new_store(tmp_path, busy_timeout_s=0.2, flush_interval_s=60.0)
    holder = _hold_write_lock(path)
    try:
        wait = store.update_run_soon("r1", status="succeeded", pid=None)
        assert store.writer.pending == 1  # handed over, not committed: the lock holds it
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            wait()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    try:
        store.flush()  # kept and committed once the lock is gone
        assert store.run("r1").status == "succeeded"
    finally:
        store.close()
