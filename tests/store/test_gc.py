"""Store upkeep: old runs, their rows, traces and unreferenced blobs go; the rest stays."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from plandag.store import Store, open_store
from plandag.store.gc import (
    Keep,
    collect_garbage,
    parse_duration,
    register_keeper,
    registered_keepers,
    store_size,
    unregister_keeper,
)
from plandag.store.store import BLOB_THRESHOLD_BYTES

RELEASE_0_1_0 = Path(__file__).parent / "data" / "store_release_0_1_0.sqlite3"
# Blob files carry the file system's (real) times, so the test's "now" is the real one.
NOW = float(int(time.time()))
DAY = 86400.0
OLD = NOW - 40 * DAY  # older than 30 days
RECENT = NOW - 2 * DAY
RUN_TABLES = (
    "run",
    "plan_version",
    "step",
    "transition",
    "decision",
    "llm_call",
    "event",
    "escalation",
    "instruction",
    "tool_run",
)


def _big(tag: str) -> dict[str, str]:
    """A result large enough to be a blob file."""
    return {"tag": tag, "text": "x" * (BLOB_THRESHOLD_BYTES + 10)}


def _add_run(
    store: Store, run_id: str, *, status: str, updated: float, result: object = None
) -> None:
    """A run with a row in every run table, a trace file, and (``result``) a blob."""
    store.create_run(run_id, command="exec", goal="g", params={}, options={})
    store.add_plan_version(run_id, 1, {"steps": []}, "hash-" + run_id, "file")
    store.record_decision(run_id, 1, "hash-" + run_id, "approved", who="ana")
    store.declare_steps(run_id, [(1, "echo", "none")])
    store.step_started(run_id, 1, 1, updated, durable=True)
    store.step_ended(
        run_id,
        1,
        "succeeded",
        updated,
        duration_s=0.5,
        result=result or {"ok": 1},
        durable=True,
    )
    store.write_steps(run_id, [], tools=["echo"])
    store.record_event(run_id, "note", {"a": 1}, updated)
    store.add_escalation(run_id, "plan_budget", {"why": "test"}, at=updated)
    store.add_instruction(run_id, "do it")
    store.flush()
    store.connection.execute(
        "INSERT INTO llm_call (run_id, purpose, time) VALUES (?, 'plan', ?)", (run_id, updated)
    )
    store.connection.execute(
        "UPDATE run SET status = ?, updated = ?, created = ? WHERE run_id = ?",
        (status, updated, updated, run_id),
    )
    trace = store.trace_path(run_id)
    trace.parent.mkdir(parents=True, exist_ok=True)
    trace.write_text('{"kind": "run_started"}\n', encoding="utf-8")


def _age_blobs(store: Store, when: float = OLD) -> None:
    for path in (store.root / "blobs").glob("??/*.json"):
        os.utime(path, (when, when))


def _count(store: Store, table: str, run_id: str) -> int:
    column = "batch_id" if table == "document" else "run_id"
    row = store.connection.execute(
        f"SELECT count(*) FROM {table} WHERE {column} = ?", (run_id,)
    ).fetchone()
    return int(row[0])


def _blob_path(store: Store, digest: str) -> Path:
    return store.root / "blobs" / digest[:2] / f"{digest}.json"


def _result_hash(store: Store, run_id: str) -> str:
    row = store.connection.execute(
        "SELECT result_hash FROM step WHERE run_id = ?", (run_id,)
    ).fetchone()
    return str(row[0])


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(tmp_path / "runs.sqlite3") as opened:
        yield opened


def test_durations_in_seconds_minutes_hours_days() -> None:
    assert parse_duration("30d") == 2_592_000.0
    assert parse_duration("12h") == 43_200.0
    assert parse_duration("90m") == 5_400.0
    assert parse_duration("3600s") == 3_600.0
    assert parse_duration("2w") == 1_209_600.0
    for text in ("30", "d", "30 days", "-1d", "0d", ""):
        with pytest.raises(ValueError, match=r"duration|more than zero"):
            parse_duration(text)


def test_old_runs_go_with_every_row_and_trace_recent_ones_stay(store: Store) -> None:
    _add_run(store, "old-run", status="succeeded", updated=OLD, result=_big("old"))
    _add_run(store, "new-run", status="succeeded", updated=RECENT, result=_big("new"))
    old_blob = _result_hash(store, "old-run")
    new_blob = _result_hash(store, "new-run")
    _age_blobs(store)

    report = collect_garbage(store, older_than_s=30 * DAY, now=NOW)

    assert report.run_ids == ("old-run",)
    for table in RUN_TABLES:
        assert _count(store, table, "old-run") == 0, table
        assert _count(store, table, "new-run") >= 1, table
    assert report.rows["run"] == 1
    assert report.rows["transition"] == 2
    assert not store.trace_path("old-run").exists()
    assert store.trace_path("new-run").exists()
    assert report.traces == (store.trace_path("old-run"),)
    assert report.blobs == (old_blob,)
    assert not _blob_path(store, old_blob).exists()
    assert _blob_path(store, new_blob).exists()
    assert report.bytes_freed > BLOB_THRESHOLD_BYTES
    # The kept run still reads back whole.
    assert store.steps("new-run")[1].result["tag"] == "new"


def test_running_awaiting_approval_and_escalated_runs_are_never_deleted(store: Store) -> None:
    for status in ("running", "awaiting_approval", "escalated", "failed", "abandoned"):
        _add_run(store, f"run-{status}", status=status, updated=OLD - 365 * DAY)

    report = collect_garbage(store, older_than_s=30 * DAY, now=NOW)

    assert sorted(report.run_ids) == ["run-abandoned", "run-failed"]
    assert sorted(report.kept_protected) == [
        "run-awaiting_approval",
        "run-escalated",
        "run-running",
    ]
    remaining = {row.run_id for row in store.runs()}
    assert remaining == {"run-running", "run-awaiting_approval", "run-escalated"}
    for run_id in remaining:
        assert store.trace_path(run_id).exists()
        assert _count(store, "step", run_id) == 1


def test_a_blob_shared_by_a_deleted_and_a_kept_run_survives(store: Store) -> None:
    shared = _big("shared")
    _add_run(store, "old-run", status="succeeded", updated=OLD, result=shared)
    _add_run(store, "new-run", status="succeeded", updated=RECENT, result=shared)
    digest = _result_hash(store, "old-run")
    assert _result_hash(store, "new-run") == digest
    _age_blobs(store)

    report = collect_garbage(store, older_than_s=30 * DAY, now=NOW)

    assert report.run_ids == ("old-run",)
    assert report.blobs == ()
    assert _blob_path(store, digest).exists()
    assert store.steps("new-run")[1].result["tag"] == "shared"


def test_blobs_of_step_arguments_and_batch_documents_are_counted(store: Store) -> None:
    _add_run(store, "old-run", status="succeeded", updated=OLD)
    store.create_run("new-run", command="exec", goal="g", params={}, options={})
    store.declare_steps("new-run", [(1, "echo", "none")])
    store.step_started("new-run", 1, 1, RECENT, args=_big("args"), durable=True)
    store.create_run("new-batch", command="extract", goal="g", params={}, options={})
    store.record_document("new-batch", 0, "a.xml", "ok", record=_big("doc"))
    store.record_document("old-run", 0, "b.xml", "ok", record=_big("old-doc"))
    store.flush()
    args_blob = json.loads(
        store.connection.execute("SELECT args FROM step WHERE run_id = 'new-run'").fetchone()[0]
    )["blob"]
    document_blobs = dict(
        store.connection.execute("SELECT batch_id, result_hash FROM document").fetchall()
    )
    _age_blobs(store)

    report = collect_garbage(store, older_than_s=30 * DAY, now=NOW)

    assert report.run_ids == ("old-run",)
    assert report.rows["document"] == 1
    assert report.blobs == (document_blobs["old-run"],)
    assert _blob_path(store, args_blob).exists()
    assert _blob_path(store, document_blobs["new-batch"]).exists()
    assert [row.record["tag"] for row in store.documents("new-batch")] == ["doc"]


def test_a_recent_blob_file_is_kept_even_without_a_committed_reference(store: Store) -> None:
    # A run in progress may have written (or reused) a blob whose row is still queued.
    digest = store.put_blob(json.dumps(_big("in-flight")))

    report = collect_garbage(store, older_than_s=30 * DAY, now=NOW)

    assert report.blobs == ()
    assert _blob_path(store, digest).exists()
    _age_blobs(store)
    assert collect_garbage(store, older_than_s=30 * DAY, now=NOW).blobs == (digest,)


def test_reusing_a_blob_refreshes_its_time(store: Store) -> None:
    text = json.dumps(_big("again"))
    digest = store.put_blob(text)
    _age_blobs(store)
    assert store.put_blob(text) == digest
    assert _blob_path(store, digest).stat().st_mtime > OLD + DAY


def test_dry_run_deletes_nothing_and_says_what_would_go(store: Store) -> None:
    _add_run(store, "old-run", status="failed", updated=OLD, result=_big("old"))
    digest = _result_hash(store, "old-run")
    _age_blobs(store)

    report = collect_garbage(store, older_than_s=30 * DAY, now=NOW, dry_run=True)

    assert report.dry_run is True
    assert report.run_ids == ("old-run",)
    assert report.blobs == (digest,)
    assert report.traces == (store.trace_path("old-run"),)
    assert report.rows["run"] == 1
    assert report.rows["step"] == 1
    for table in RUN_TABLES:
        assert _count(store, table, "old-run") >= 1, table
    assert store.trace_path("old-run").exists()
    assert _blob_path(store, digest).exists()


def test_a_registered_keeper_keeps_its_runs_and_blobs(store: Store) -> None:
    _add_run(store, "library-plan", status="succeeded", updated=OLD)
    _add_run(store, "old-run", status="succeeded", updated=OLD)
    kept_blob = store.put_blob(json.dumps(_big("kept by a keeper")))
    _age_blobs(store)
    seen: list[Store] = []

    def keeper(opened: Store) -> Keep:
        seen.append(opened)
        return Keep(run_ids=frozenset({"library-plan"}), blob_hashes=frozenset({kept_blob}))

    assert register_keeper(keeper) is keeper
    register_keeper(keeper)
    try:
        assert registered_keepers().count(keeper) == 1
        report = collect_garbage(store, older_than_s=30 * DAY, now=NOW)
    finally:
        unregister_keeper(keeper)
    assert keeper not in registered_keepers()

    assert seen == [store]
    assert report.run_ids == ("old-run",)
    assert report.kept_by_keepers == ("library-plan",)
    assert _count(store, "step", "library-plan") == 1
    assert store.trace_path("library-plan").exists()
    assert _blob_path(store, kept_blob).exists()


def test_a_keeper_that_fails_stops_gc_before_anything_is_deleted(store: Store) -> None:
    _add_run(store, "old-run", status="succeeded", updated=OLD)

    def broken(opened: Store) -> Keep:
        raise RuntimeError("plan library unavailable")

    with pytest.raises(RuntimeError, match="plan library unavailable"):
        collect_garbage(store, older_than_s=30 * DAY, now=NOW, keepers=[broken])
    assert _count(store, "run", "old-run") == 1


def test_conversations_are_never_touched(store: Store) -> None:
    from plandag.conversation.store import ConversationStore

    conversations = ConversationStore(store.connection)
    conversation = conversations.create(origin="person", now=OLD - 365 * DAY)
    _add_run(store, "old-run", status="succeeded", updated=OLD)

    collect_garbage(store, older_than_s=30 * DAY, now=NOW)

    assert [summary.id for summary in conversations.list()] == [conversation.id]


def test_runs_are_deleted_in_batches(store: Store) -> None:
    for index in range(5):
        _add_run(store, f"old-{index}", status="succeeded", updated=OLD + index)

    report = collect_garbage(store, older_than_s=30 * DAY, now=NOW, batch_runs=2, vacuum=True)

    assert report.run_ids == tuple(f"old-{index}" for index in range(5))
    assert report.rows["run"] == 5
    assert store.runs() == []


def test_a_store_of_the_first_release_is_collected(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    shutil.copy(RELEASE_0_1_0, path)
    before = sqlite3.connect(path)
    runs = [row[0] for row in before.execute("SELECT run_id FROM run ORDER BY updated")]
    latest = max(row[0] for row in before.execute("SELECT updated FROM run"))
    before.close()
    assert len(runs) == 2

    with open_store(path) as store:
        dry = collect_garbage(store, older_than_s=1.0, now=latest + 10.0, dry_run=True)
        assert sorted(dry.run_ids) == sorted(runs)
        report = collect_garbage(store, older_than_s=1.0, now=latest + 10.0)
        assert sorted(report.run_ids) == sorted(runs)
        assert report.rows["step"] == 4
        assert store.runs() == []


def test_bytes_per_document(store: Store) -> None:
    assert store_size(store).bytes_per_document is None
    store.create_run("batch", command="extract", goal="g", params={}, options={})
    store.record_document("batch", 0, "a.xml", "ok", record={"small": 1})
    store.record_document("batch", 1, "b.xml", "ok", record=_big("doc"))

    size = store_size(store)

    assert size.documents == 2
    assert size.blob_bytes > BLOB_THRESHOLD_BYTES
    assert size.database_bytes > 0
    assert size.bytes_per_document == (size.database_bytes + size.blob_bytes) / 2


def test_gc_command(tmp_path: Path) -> None:
    from plandag.cli.app import app

    path = tmp_path / "runs.sqlite3"
    with open_store(path) as store:
        _add_run(store, "old-run", status="succeeded", updated=100.0)
        _add_run(store, "waiting", status="awaiting_approval", updated=100.0)
    runner = CliRunner()

    dry = runner.invoke(
        app, ["gc", "--older-than", "30d", "--dry-run", "--json", "--store", str(path)]
    )
    assert dry.exit_code == 0, dry.output
    document = json.loads(dry.stdout)
    assert document["dry_run"] is True
    assert document["runs"] == ["old-run"]
    assert document["kept_protected"] == ["waiting"]
    with open_store(path) as store:
        assert _count(store, "run", "old-run") == 1

    done = runner.invoke(app, ["gc", "--older-than", "30d", "--store", str(path)])
    assert done.exit_code == 0, done.output
    assert "deleted 1 run" in done.stdout
    with open_store(path) as store:
        assert [row.run_id for row in store.runs()] == ["waiting"]

    bad = runner.invoke(app, ["gc", "--older-than", "30 days", "--store", str(path)])
    assert bad.exit_code == 2
    assert "not a duration" in bad.output
