"""``extract nfe --resume``: a record kept from the previous run whose ``unique_in_batch``
outcome changes (a new input repeats its key) is corrected in the file, in the store row
of the run that recorded it, and in that run's trace, so all three still agree."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from plandag.cli import app
from plandag.store import open_store
from plandag.trace.reader import load_trace

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nfe"
FIRST = EXAMPLES / "brnfe_without_proc.xml"
OTHER = EXAMPLES / "nfelib_35180834128745000152550010000476121675985748-nfe.xml"


def _extract(folder: Path, output: Path, store: Path, *options: str) -> None:
    result = CliRunner().invoke(
        app, ["extract", "nfe", str(folder), "-o", str(output), "--store", str(store), *options]
    )
    assert result.exit_code == 0, result.output


def _records(output: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.read_text("utf-8").splitlines()]


def _state(store_path: Path) -> dict[tuple[str, str], tuple[Any, ...]]:
    """(run id, source) → (store status, store record, the trace's last reason and result)."""
    found: dict[tuple[str, str], tuple[Any, ...]] = {}
    with open_store(store_path) as store:
        for run in store.runs():
            trace = load_trace(store.trace_path(run.run_id))
            for row in store.documents(run.run_id):
                step = trace.steps[row.idx + 1]
                found[(run.run_id, row.input)] = (row.status, row.record, step.reason, step.result)
    return found


def test_a_kept_record_a_new_input_duplicates_is_corrected_in_its_run(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.xml").write_bytes(FIRST.read_bytes())
    (folder / "b.xml").write_bytes(OTHER.read_bytes())
    output, store = tmp_path / "out.jsonl", tmp_path / "runs.sqlite3"
    _extract(folder, output, store)
    assert [record["status"] for record in _records(output)] == ["ok", "ok"]
    (first_run,) = {run for run, _ in _state(store)}

    # the same invoice again, in other bytes (a trailing newline): a new input, the same key
    (folder / "c.xml").write_bytes(FIRST.read_bytes() + b"\n")
    _extract(folder, output, store, "--resume")

    records = _records(output)
    assert [(Path(r["source"]).name, r["status"]) for r in records] == [
        ("a.xml", "check_failed"),
        ("b.xml", "ok"),
        ("c.xml", "check_failed"),
    ]
    assert records[0]["checks"]["unique_in_batch"]["status"] == "fail"
    assert records[0]["checks"]["unique_in_batch"]["detail"].endswith(f"also in {folder / 'c.xml'}")
    state = _state(store)
    assert len(state) == 3
    by_source = {source: (run, *rest) for (run, source), rest in state.items()}
    for record in records:
        _, status, stored, reason, result = by_source[record["source"]]
        assert (status, reason) == (record["status"], record["status"])
        assert stored == record
        assert result["status"] == record["status"]
    assert by_source[str(folder / "a.xml")][0] == first_run
    assert by_source[str(folder / "a.xml")][4]["failed_checks"] == ["unique_in_batch"]


def test_a_kept_duplicate_whose_detail_grows_is_corrected_too(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.xml").write_bytes(FIRST.read_bytes())
    (folder / "b.xml").write_bytes(FIRST.read_bytes())
    output, store = tmp_path / "out.jsonl", tmp_path / "runs.sqlite3"
    _extract(folder, output, store, "--trace-detail", "full")
    (folder / "c.xml").write_bytes(FIRST.read_bytes() + b"\n")
    _extract(folder, output, store, "--resume", "--trace-detail", "full")

    records = _records(output)
    assert records[0]["checks"]["unique_in_batch"]["detail"].endswith(
        f"also in {folder / 'b.xml'}, {folder / 'c.xml'}"
    )
    state = _state(store)
    by_source = {source: rest for (_, source), rest in state.items()}
    for record in records:
        status, stored, reason, result = by_source[record["source"]]
        assert stored == record
        assert result == record  # the full record in the trace, corrected
        assert (status, reason) == ("check_failed", "check_failed")


def test_the_rows_of_another_output_are_left_alone(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.xml").write_bytes(FIRST.read_bytes())
    store = tmp_path / "runs.sqlite3"
    _extract(folder, tmp_path / "elsewhere.jsonl", store)
    output = tmp_path / "out.jsonl"
    _extract(folder, output, store)
    (folder / "c.xml").write_bytes(FIRST.read_bytes() + b"\n")
    _extract(folder, output, store, "--resume")

    with open_store(store) as opened:
        runs = sorted(opened.runs(), key=lambda run: run.created)
        elsewhere = opened.documents(runs[0].run_id)
        kept = opened.documents(runs[1].run_id)
    assert [row.status for row in elsewhere] == ["ok"]
    assert [row.status for row in kept] == ["check_failed"]
