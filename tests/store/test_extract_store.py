"""``plandag extract nfe`` stores one row per document, not per step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
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
    from plandag.trace.reader import load_trace

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


def _extract(tmp_path: Path, inputs: list[str], *options: str) -> tuple[list[Any], Any, Any]:
    """Run ``plandag extract nfe``; return (records of the JSONL, store documents, trace)."""
    from plandag.trace.reader import load_trace

    store_path = tmp_path / "runs.sqlite3"
    output = tmp_path / "out.jsonl"
    result = CliRunner().invoke(
        app, ["extract", "nfe", *inputs, "-o", str(output), "--store", str(store_path), *options]
    )
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in output.read_text("utf-8").splitlines()]
    store = open_store(store_path)
    try:
        (run,) = store.runs()
        documents = store.documents(run.run_id)
        trace_path = store.trace_path(run.run_id)
    finally:
        store.close()
    return records, documents, (load_trace(trace_path), trace_path)


def test_duplicates_are_check_failed_in_the_file_the_store_and_the_trace(tmp_path: Path) -> None:
    original = EXAMPLES / "brnfe_without_proc.xml"
    first, second = tmp_path / "a.xml", tmp_path / "b.xml"
    first.write_bytes(original.read_bytes())
    second.write_bytes(original.read_bytes())
    other = EXAMPLES / "nfelib_35180834128745000152550010000476121675985748-nfe.xml"
    records, documents, (trace, _) = _extract(tmp_path, [str(first), str(other), str(second)])
    assert [record["status"] for record in records] == ["check_failed", "ok", "check_failed"]
    assert [record["checks"]["unique_in_batch"]["status"] for record in records] == [
        "fail",
        "pass",
        "fail",
    ]
    assert records[0]["checks"]["unique_in_batch"]["detail"].endswith(f"also in {second}")
    assert [row.status for row in documents] == ["check_failed", "ok", "check_failed"]
    assert [row.record for row in documents] == records
    assert {step_id: step.reason for step_id, step in trace.steps.items()} == {
        1: "check_failed",
        2: "ok",
        3: "check_failed",
    }


def test_the_trace_holds_a_bounded_summary_per_document(tmp_path: Path) -> None:
    long_name = tmp_path / ("n" * 200 + "é" * 20 + ".xml")
    long_name.write_bytes((EXAMPLES / "brnfe_without_proc.xml").read_bytes())
    broken = tmp_path / "broken.xml"
    broken.write_text("<nfeProc><NFe>", encoding="utf-8")
    inputs = [*sorted(str(path) for path in EXAMPLES.glob("*.xml")), str(long_name), str(broken)]
    records, _, (trace, trace_path) = _extract(tmp_path, inputs)
    lines = [json.loads(line) for line in trace_path.read_text("utf-8").splitlines()]
    spans = [line for line in lines if line.get("kind") == "step"]
    # the long-named copy duplicates an example, whose bar is written again, corrected
    assert len(spans) == len(records) + 1 == 10
    for line in trace_path.read_text("utf-8").splitlines():
        if '"kind":"step"' in line:
            assert len(line.encode("utf-8")) <= 1024
    by_name = {span["attrs"]["step_id"]: span["attrs"]["result"] for span in spans}
    failing = next(i for i, r in enumerate(records) if "reforma" in r["source"])
    assert by_name[failing + 1] == {
        "status": "check_failed",
        "failed_checks": ["key_matches_document", "items_sum_vprod", "vnf_formula"],
        "errors": [],
    }
    assert by_name[9] == {"status": "error", "failed_checks": [], "errors": ["invalid_xml"]}
    assert by_name[2] == {
        "status": "check_failed",
        "failed_checks": ["unique_in_batch"],
        "errors": [],
    }
    assert trace.steps[8].detail is not None
    assert trace.steps[8].detail.endswith("\u2026")
    assert trace.steps[9].status == "failed"


def test_trace_detail_full_keeps_each_record(tmp_path: Path) -> None:
    inputs = [str(EXAMPLES / "brnfe_without_proc.xml")]
    records, _, (_, trace_path) = _extract(tmp_path, inputs, "--trace-detail", "full")
    lines = [json.loads(line) for line in trace_path.read_text("utf-8").splitlines()]
    (span,) = [line for line in lines if line.get("kind") == "step"]
    assert span["attrs"]["result"] == records[0]


def test_trace_detail_other_values_are_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["extract", "nfe", str(EXAMPLES), "-o", str(tmp_path / "o.jsonl"), "--trace-detail", "x"],
    )
    assert result.exit_code == 2
    assert "--trace-detail must be summary or full" in result.output


def test_a_secret_in_a_file_name_stays_out_of_the_summary_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXAMPLE_API_KEY", "s3cr3t-value-0123456789")
    named = tmp_path / "s3cr3t-value-0123456789.xml"
    named.write_bytes((EXAMPLES / "brnfe_without_proc.xml").read_bytes())
    _, _, (trace, trace_path) = _extract(tmp_path, [str(named)])
    text = trace_path.read_text("utf-8")
    assert "s3cr3t-value-0123456789" not in text
    assert trace.steps[1].reason == "ok"
