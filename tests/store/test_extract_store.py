"""``plandag extract nfe`` stores one row per document, not per step (issue 6)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from plandag.cli import app
from plandag.store import open_store

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nfe"


def test_extract_records_one_row_per_document(tmp_path: Path) -> None:
    store_path = tmp_path / "runs.sqlite3"
    broken = tmp_path / "broken.xml"
    broken.write_text("<nfeProc><NFe>", encoding="utf-8")
    inputs = [*sorted(str(path) for path in EXAMPLES.glob("*.xml"))[:2], str(broken)]
    result = CliRunner().invoke(
        app,
        ["extract", "nfe", *inputs, "-o", str(tmp_path / "out.jsonl"), "--store", str(store_path)],
    )
    assert result.exit_code == 0, result.stderr
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    store = open_store(store_path)
    try:
        (run,) = store.runs()
        assert (run.command, run.status) == ("extract", "succeeded")
        documents = store.documents(run.run_id)
        assert [(row.idx, row.input, row.status) for row in documents] == [
            (index, record["source"], record["status"]) for index, record in enumerate(records)
        ]
        assert documents[-1].status == "error"
        assert documents[-1].record == records[-1]
        assert documents[-1].error is not None
        assert json.loads(documents[-1].error) == records[-1]["errors"]
        assert [row.record for row in documents] == records
        assert store.steps(run.run_id) == {}  # no per-step rows for a batch
    finally:
        store.close()


def test_extract_writes_a_trace_with_one_bar_per_document(tmp_path: Path) -> None:
    from plandag.trace.model import load_trace

    store_path = tmp_path / "runs.sqlite3"
    inputs = sorted(str(path) for path in EXAMPLES.glob("*.xml"))
    result = CliRunner().invoke(
        app,
        ["extract", "nfe", *inputs, "-o", str(tmp_path / "o.jsonl"), "--store", str(store_path)],
    )
    assert result.exit_code == 0, result.stderr
    store = open_store(store_path)
    try:
        (run,) = store.runs()
        trace_path = store.trace_path(run.run_id)
    finally:
        store.close()
    trace = load_trace(trace_path)
    records = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert trace.status == "succeeded"
    assert trace.notes == []
    assert {step_id: step.status for step_id, step in trace.steps.items()} == {
        index + 1: "failed" if record["status"] == "error" else "succeeded"
        for index, record in enumerate(records)
    }
    shown = CliRunner().invoke(app, ["trace", run.run_id, "--store", str(store_path)])
    assert shown.exit_code == 0, shown.output
    assert "extract" in shown.stdout
