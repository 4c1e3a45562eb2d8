"""A thin batch parent: workers return each record encoded, the parent appends the lines and
commits the store's rows in groups; the records, error rows and store rows are the same with
one process, two worker processes and a local Dask cluster (whose scheduler runs outside the
command), also when a worker dies mid-batch."""

from __future__ import annotations

import functools
import json
import os
import pickle
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

from plandag.extract import parallel
from plandag.extract.nfe.batch import expand_inputs, extract_batch
from plandag.extract.nfe.encoded import EncodedRecord, encode_first, encode_ready
from plandag.extract.nfe.output import record_json_texts
from plandag.store import open_store
from plandag.testing.workers import kill_once
from plandag.trace.writer import document_summary

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nfe"


def _shared() -> Path:
    folder = os.environ.get("PLANDAG_SHARED_NFE")
    if not folder or not (Path(folder) / "SOURCES.md").is_file():
        pytest.skip("the shared NF-e corpus (PLANDAG_SHARED_NFE) is not available")
    return Path(folder)


def _mixed(tmp_path: Path) -> Path:
    """The shared NF-e files (invoices and broken files: events, SEFAZ answers, TXT,
    truncated), a copy of one invoice under another name (a repeated key), a text file and
    an empty file."""
    folder = tmp_path / "in"
    shutil.copytree(_shared(), folder, ignore=shutil.ignore_patterns("SOURCES.md"))
    shutil.copy(sorted(EXAMPLES.glob("nfelib_*.xml"))[0], folder / "zz-copy-of-an-invoice.xml")
    (folder / "notes.txt").write_text("not an invoice\n", encoding="utf-8")
    (folder / "empty.xml").write_bytes(b"")
    return folder


def _extract(folder: Path, output: Path, store: Path, *options: str) -> None:
    from plandag.cli import app

    result = CliRunner().invoke(
        app,
        ["extract", "nfe", str(folder), "-o", str(output), "--store", str(store), *options],
    )
    assert result.exit_code == 0, result.output


def _stored(path: Path) -> list[tuple[int, str, str, Any, str | None]]:
    store = open_store(path)
    try:
        (run,) = store.runs()
        return [
            (row.idx, row.input, row.status, row.record, row.error)
            for row in store.documents(run.run_id)
        ]
    finally:
        store.close()


def _lines(output: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.read_text("utf-8").splitlines()]


def _document_lines(store: Path) -> list[bytes]:
    """The trace's document lines of the store's one batch, each checked to be the text the
    JSON encoder makes of its value, with the run's id and times left out."""
    opened = open_store(store)
    try:
        (run,) = opened.runs()
    finally:
        opened.close()
    trace = store.parent / "traces" / f"{run.run_id}.jsonl"
    lines = []
    for line in trace.read_bytes().splitlines():
        if b'"tool":"extract"' not in line:
            continue
        value = json.loads(line)
        again = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        assert line == again.encode("utf-8")
        assert value["start"] <= value["end"] == value["time"]
        for key in ("run_id", "time", "start", "end"):
            value[key] = None
        lines.append(json.dumps(value, ensure_ascii=False).encode("utf-8"))
    return lines


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_one_process_two_workers_and_a_local_cluster_record_the_same(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    folder = _mixed(tmp_path)
    runs = {
        "one": ("--workers", "1"),
        "two": ("--workers", "2", "--jobs", "3"),
        "cluster": ("--cluster", "local", "--workers", "2"),
    }
    for name, options in runs.items():
        _extract(folder, tmp_path / f"{name}.jsonl", tmp_path / f"{name}.db", *options)
    one = (tmp_path / "one.jsonl").read_bytes()
    records = _lines(tmp_path / "one.jsonl")
    statuses = {record["status"] for record in records}
    assert statuses == {"ok", "check_failed", "error"}  # broken files give error rows
    assert sum(record["status"] == "error" for record in records) >= 5
    for name in ("two", "cluster"):
        assert (tmp_path / f"{name}.jsonl").read_bytes() == one, name
    stored = _stored(tmp_path / "one.db")
    # the store holds every record, in the file's order, with the file's final outcome
    assert [row[3] for row in stored] == records
    assert [row[2] for row in stored] == [record["status"] for record in records]
    assert all((row[4] is not None) == (row[2] == "error") for row in stored)
    for name in ("two", "cluster"):
        assert _stored(tmp_path / f"{name}.db") == stored, name
    # the trace's document bars (a worker makes each summary's text) are the same too
    traced = _document_lines(tmp_path / "one.db")
    assert len(traced) > len(records)  # the corrected bars (a repeated key) written again
    final = {value["attrs"]["step_id"]: value for value in map(json.loads, traced)}
    assert [final[index + 1]["attrs"]["result"] for index in range(len(records))] == [
        document_summary(record) for record in records
    ]
    for name in ("two", "cluster"):
        assert _document_lines(tmp_path / f"{name}.db") == traced, name


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_worker_killed_mid_batch_leaves_every_input_in_the_file_and_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _mixed(tmp_path)
    _extract(folder, tmp_path / "one.jsonl", tmp_path / "one.db", "--workers", "1")
    victim = "spedda_nfe.xml"
    assert (folder / victim).is_file()
    marker = tmp_path / "killed"
    monkeypatch.setattr(
        parallel, "CHUNK_WORK", functools.partial(kill_once, name=victim, marker=str(marker))
    )
    _extract(folder, tmp_path / "two.jsonl", tmp_path / "two.db", "--workers", "2")
    assert marker.exists()  # a worker was SIGKILLed while holding a chunk
    assert (tmp_path / "two.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    assert _stored(tmp_path / "two.db") == _stored(tmp_path / "one.db")


def test_workers_send_encoded_records_and_the_file_is_the_one_of_one_process(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "in"
    shutil.copytree(EXAMPLES, folder)
    shutil.copy(sorted(EXAMPLES.glob("nfelib_*.xml"))[0], folder / "zz-copy.xml")
    config = parallel.WorkerConfig(encode=True)
    files, _ = expand_inputs([str(folder)])
    outcomes = parallel.extract_chunk([(str(path), None) for path in files], config)
    encoded = [record for kind, records in outcomes for record in records if kind == "records"]
    assert len(encoded) == len(files)
    assert all(isinstance(record, EncodedRecord) for record in encoded)
    # a worker writes each record as the first of its key: the copy's repeated key is
    # the parent's to find
    assert {record.record()["checks"]["unique_in_batch"]["status"] for record in encoded} <= {
        "pass",
        "not_applicable",
    }
    one = anyio.run(functools.partial(extract_batch, files, tmp_path / "one.jsonl", workers=1))
    two = anyio.run(functools.partial(extract_batch, files, tmp_path / "two.jsonl", workers=2))
    assert (tmp_path / "two.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    assert two.failing_checks == one.failing_checks
    assert one.failing_checks["unique_in_batch"] == 2


def test_an_encoded_record_holds_the_texts_the_parent_would_make() -> None:
    record = {
        "source": "in/a\udcff.xml",  # a name that is not UTF-8: escaped, as the parent does
        "sha256": "ab" * 32,
        "status": "ok",
        "errors": [],
        "checks": {"key_check_digit": {"status": "fail", "detail": "x"}},
        "ide": {"chNFe": "1" * 44},
        "repair": {"outcome": "repaired", "reused": True, "model_calls": 0},
    }
    encoded = encode_first(record)
    assert encoded is not None
    assert encoded.source == "in/a\\xff.xml"
    assert encoded.status == "check_failed"
    assert encoded.failed_checks == ("key_check_digit",)
    assert encoded.repair == ("reused", 0)
    assert encoded.summary["failed_checks"] == ["key_check_digit"]
    texts = record_json_texts(encoded.record())
    assert texts is not None
    assert encoded.line == texts[0].encode("utf-8")  # written to the file as it is
    assert encoded.compact == texts[1]
    assert encode_first({"source": "x", "value": float("nan")}) is None  # not JSON data


def test_an_encoded_record_travels_whole_and_is_made_again_without_python_code() -> None:
    records = [
        encode_first({"source": "in/a.xml", "status": "ok", "ide": {"chNFe": "1" * 44}}),
        encode_ready({"source": "x", "value": float("nan")}, None, keep=True),  # not JSON
    ]
    for encoded in records:
        assert encoded is not None
        for protocol in (2, pickle.HIGHEST_PROTOCOL):
            data = pickle.dumps([encoded, encoded], protocol=protocol)
            calls: list[str] = []

            def note(frame: Any, event: str, arg: Any, calls: list[str] = calls) -> None:
                if event == "call":
                    calls.append(frame.f_code.co_name)

            sys.setprofile(note)
            try:
                back = pickle.loads(data)
            finally:
                sys.setprofile(None)
            if protocol >= 3:  # (protocol 2 writes bytes through codecs' Python code)
                assert calls == []  # the parent unpickles a chunk's records in C only
            assert [type(item) for item in back] == [EncodedRecord, EncodedRecord]
            assert back[0]._asdict().keys() == encoded._asdict().keys()
            assert repr(back) == repr([encoded, encoded])  # (NaN is not equal to itself)


def test_the_batch_writes_its_groups_and_tells_the_caller(tmp_path: Path) -> None:
    files, _ = expand_inputs([str(EXAMPLES)])
    output = tmp_path / "out.jsonl"
    seen: list[tuple[int, int]] = []
    passed: list[EncodedRecord] = []

    def on_flush() -> None:
        seen.append((len(passed), len(output.read_text("utf-8").splitlines())))

    anyio.run(
        functools.partial(
            extract_batch,
            files,
            output,
            workers=1,
            jobs=1,
            on_encoded=passed.append,
            on_flush=on_flush,
            flush_records=2,
            flush_seconds=3600,  # groups by count only, however slow the machine
        )
    )
    assert len(passed) == len(files) == 7
    # a group once 2 records wait, the rest at the end: each time the file holds every
    # record passed so far
    assert [count for count, _ in seen][:3] == [2, 4, 6]
    assert all(count == lines for count, lines in seen)
    assert seen[-1] == (7, 7)


def test_the_batch_refuses_groups_that_never_flush(tmp_path: Path) -> None:
    from plandag.errors import InputError

    files, _ = expand_inputs([str(EXAMPLES)])
    with pytest.raises(InputError, match="flush_seconds must be above 0"):
        anyio.run(functools.partial(extract_batch, files, tmp_path / "o.jsonl", flush_seconds=0))


def test_store_rows_of_encoded_texts_are_the_rows_of_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INVOICE_API_KEY", "s3cr3t-value-123")
    records = [
        {"source": "a.xml", "status": "ok", "note": "plain"},
        {"source": "b.xml", "status": "ok", "note": "Bearer abcdefghijklmnop"},
        {"source": "c.xml", "status": "ok", "note": "key s3cr3t-value-123 inside"},
        {"source": "d.xml", "status": "error", "note": "x" * 70_000},  # a blob
    ]
    store = open_store(tmp_path / "s.db")
    try:
        store.create_run("one", command="extract", goal=None, params={}, options={})
        store.create_run("two", command="extract", goal=None, params={}, options={})
        for index, record in enumerate(records):
            compact = record_json_texts(record)
            assert compact is not None
            store.record_document(
                "one", index, str(record["source"]), str(record["status"]), record,
                error="e", record_json=compact[1],
            )  # fmt: skip
        rows = []
        for index, record in enumerate(records):
            encoded = encode_first(record)
            assert encoded is not None
            rows.append(
                (index, encoded.source, str(record["status"]), json.dumps(record, ensure_ascii=False, separators=(",", ":")), encoded.sealing_rules, "e")  # noqa: E501
            )  # fmt: skip
        store.record_document_texts("two", rows)
        one = [
            (row.idx, row.input, row.status, row.record, row.error)
            for row in store.documents("one")
        ]
        two = [
            (row.idx, row.input, row.status, row.record, row.error)
            for row in store.documents("two")
        ]
    finally:
        store.close()
    assert two == one
    assert "s3cr3t-value-123" not in json.dumps(two)
    raw = sqlite3.connect(tmp_path / "s.db").execute("SELECT record FROM document").fetchall()
    assert not any("s3cr3t-value-123" in (text or "") for (text,) in raw)


def test_a_chunk_that_fails_in_the_parent_gives_each_of_its_inputs_an_error_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(self: Any, paths: Any) -> list[Any]:
        raise RuntimeError("the mapper broke")

    monkeypatch.setattr(parallel.ChunkMapper, "map_chunk", broken)
    files, _ = expand_inputs([str(EXAMPLES)])
    summary = anyio.run(functools.partial(extract_batch, files, tmp_path / "out.jsonl", workers=2))
    rows = _lines(tmp_path / "out.jsonl")
    assert [row["source"] for row in rows] == [str(path) for path in files]
    assert {row["errors"][0]["message"] for row in rows} == {"RuntimeError: the mapper broke"}
    assert summary.inputs_with_record == summary.inputs == len(files)


def test_a_window_smaller_than_a_chunk_still_sends_every_input(tmp_path: Path) -> None:
    files, _ = expand_inputs([str(EXAMPLES)])
    anyio.run(functools.partial(extract_batch, files, tmp_path / "one.jsonl", workers=1))
    summary = anyio.run(
        functools.partial(extract_batch, files, tmp_path / "two.jsonl", workers=2, window=2)
    )
    assert summary.inputs_with_record == len(files)
    assert (tmp_path / "two.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()
