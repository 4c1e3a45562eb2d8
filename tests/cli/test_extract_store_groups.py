"""``plandag extract nfe`` stores its documents in groups, in the file's order; every row
is there when the command ends, and a group that cannot be stored fails the command, which
records the batch as failed and closes its trace and the store."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from plandag.cli import app
from plandag.extract.nfe.batch import extract_batch
from plandag.store import open_store
from plandag.store.store import Store

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nfe"


def _extract(tmp_path: Path, *extra: str) -> Any:
    inputs = sorted(str(path) for path in EXAMPLES.glob("*.xml"))
    return CliRunner().invoke(
        app,
        [
            "extract",
            "nfe",
            *inputs,
            "-o",
            str(tmp_path / "out.jsonl"),
            "--store",
            str(tmp_path / "runs.sqlite3"),
            "--workers",
            "1",
            *extra,
        ],
    )


def test_every_group_is_stored_by_the_end_in_the_files_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    groups: list[list[int]] = []
    record_document_texts_soon = Store.record_document_texts_soon

    def recording(self: Store, batch_id: str, documents: Any) -> Any:
        documents = list(documents)
        groups.append([document[0] for document in documents])
        return record_document_texts_soon(self, batch_id, documents)

    monkeypatch.setattr(Store, "record_document_texts_soon", recording)
    # several groups
    monkeypatch.setitem(extract_batch.__kwdefaults__, "flush_records", 3)
    result = _extract(tmp_path)
    assert result.exit_code == 0, result.stderr
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [index for group in groups for index in group] == list(range(len(records)))
    assert len(groups) > 1
    store = open_store(tmp_path / "runs.sqlite3")
    try:
        (run,) = store.runs()
        assert run.status == "succeeded"
        assert [row.record for row in store.documents(run.run_id)] == records
    finally:
        store.close()


def _failed_on_a_store_error(tmp_path: Path, result: Any) -> str:
    """Assert the command failed with the store's error (alone, or in the batch's task group
    when a later group saw it) and its batch is stored ``failed``; returns the run id."""
    assert result.exit_code != 0
    error = result.exception
    leaves = error.exceptions if isinstance(error, BaseExceptionGroup) else (error,)
    assert any(isinstance(leaf, sqlite3.OperationalError) for leaf in leaves)
    store = open_store(tmp_path / "runs.sqlite3")
    try:
        (run,) = store.runs()
        assert run.status == "failed"
        return run.run_id
    finally:
        store.close()


def test_a_group_that_cannot_be_stored_fails_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(self: Store, batch_id: str, documents: Any) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(Store, "record_document_texts_soon", failing)
    run_id = _failed_on_a_store_error(tmp_path, _extract(tmp_path))
    store = open_store(tmp_path / "runs.sqlite3")
    try:
        assert store.documents(run_id) == []
    finally:
        store.close()


def test_a_batch_end_that_cannot_be_stored_fails_the_command_and_closes_the_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    update_run = Store.update_run
    closed: list[str] = []
    close = Store.close

    def failing(self: Store, run_id: str, **changes: Any) -> None:
        if changes.get("status") == "succeeded":
            raise sqlite3.OperationalError("disk I/O error")
        update_run(self, run_id, **changes)

    def closing(self: Store) -> None:
        closed.append("store")
        close(self)

    monkeypatch.setattr(Store, "update_run", failing)
    monkeypatch.setattr(Store, "close", closing)
    result = _extract(tmp_path)
    assert result.exit_code != 0
    assert isinstance(result.exception, sqlite3.OperationalError)
    assert closed  # the command's store closed: its writer thread ended, its rows committed
    store = open_store(tmp_path / "runs.sqlite3")
    try:
        (run,) = store.runs()
        assert run.status == "failed"
        trace = [json.loads(line) for line in store.trace_path(run.run_id).read_text().splitlines()]
    finally:
        store.close()
    assert trace[-1]["type"] == "run_finished"
    assert trace[-1]["status"] == "failed"


def test_a_group_commits_while_the_batch_goes_on_and_every_group_before_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the batch does not wait for a group's commit (the disk's sync) when it queues it: it
    # waits for it only when it queues the next group, and for the last one at the end
    events: list[str] = []
    record_document_texts_soon = Store.record_document_texts_soon

    def recording(self: Store, batch_id: str, documents: Any) -> Any:
        number = sum(event.startswith("queued") for event in events)
        events.append(f"queued {number}")
        committed = record_document_texts_soon(self, batch_id, documents)

        def wait() -> None:
            events.append(f"waited {number}")
            committed()

        return wait

    monkeypatch.setattr(Store, "record_document_texts_soon", recording)
    monkeypatch.setitem(extract_batch.__kwdefaults__, "flush_records", 3)
    result = _extract(tmp_path, "--workers", "2")
    assert result.exit_code == 0, result.stderr
    groups = sum(event.startswith("queued") for event in events)
    assert groups > 2
    expected = ["queued 0"]
    for number in range(1, groups):
        expected += [f"waited {number - 1}", f"queued {number}"]
    assert events == [*expected, f"waited {groups - 1}"]
    # extracting in this process, each group's commit is waited for as it is queued
    events.clear()
    result = _extract(tmp_path / "one")
    assert result.exit_code == 0, result.stderr
    groups = sum(event.startswith("queued") for event in events)
    assert events == [
        event for number in range(groups) for event in (f"queued {number}", f"waited {number}")
    ]


def test_a_group_whose_commit_fails_later_fails_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_later(self: Store, batch_id: str, documents: Any) -> Any:
        def wait() -> None:
            raise sqlite3.OperationalError("disk I/O error")

        return wait

    monkeypatch.setattr(Store, "record_document_texts_soon", failing_later)
    _failed_on_a_store_error(tmp_path, _extract(tmp_path))
