"""Input names that are not valid UTF-8: a row like any other input, and the batch goes on."""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from plandag.cli import app
from plandag.extract.names import display_name, escape_surrogates
from plandag.store import open_store
from plandag.trace.reader import load_trace

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nfe"
FIRST = EXAMPLES / "nfelib_35180834128745000152550010000476121675985748-nfe.xml"
SECOND = EXAMPLES / "uninfe_000040_03682759000190_002_20_10_2014-procNFe.xml"
THIRD = EXAMPLES / "nfelib_42210775277525000178550030000266631762885493-procNFe.xml"


def test_display_name_escapes_undecodable_bytes_only() -> None:
    assert display_name("plain/nota ção.xml") == "plain/nota ção.xml"
    assert display_name(os.fsdecode(b"in/bad\xff\xfe.xml")) == "in/bad\\xff\\xfe.xml"
    assert display_name(Path(os.fsdecode(b"x\x80"))) == "x\\x80"
    assert display_name("lone \ud800 surrogate") == "lone \\ud800 surrogate"
    record = {"source": os.fsdecode(b"b\xff"), "errors": [{"message": "ok"}], "n": 1}
    assert escape_surrogates(record) == {"source": "b\\xff", "errors": [{"message": "ok"}], "n": 1}
    clean = {"source": "a", "items": [1, "x"]}
    assert escape_surrogates(clean) is clean


@pytest.fixture
def batch(tmp_path: Path) -> Path:
    """``in/`` holding ``a.xml``, ``b\\xff.xml`` (a name that is not UTF-8) and ``c.xml``, three
    valid NF-e, in that order; plus ``d\\xfe.txt``, not an invoice, with a non-UTF-8 name."""
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copyfile(FIRST, folder / "a.xml")
    descriptor = os.open(os.fsencode(folder) + b"/b\xff.xml", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(descriptor, SECOND.read_bytes())
    os.close(descriptor)
    shutil.copyfile(THIRD, folder / "c.xml")
    descriptor = os.open(os.fsencode(folder) + b"/d\xfe.txt", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(descriptor, b"not an invoice")
    os.close(descriptor)
    return folder


def extract(*args: str) -> tuple[int, str, str]:
    """Exit code, stdout, and stderr after the brakes line every run starts with."""
    result = CliRunner().invoke(app, ["extract", "nfe", *args])
    brakes, _, rest = result.stderr.partition("\n")
    assert brakes.startswith("brakes per batch: $5.00, 1,000,000 tokens"), result.stderr
    return result.exit_code, result.stdout, rest


def test_every_input_gets_its_row_in_jsonl_the_store_and_the_trace(
    tmp_path: Path, batch: Path
) -> None:
    output = tmp_path / "out.jsonl"
    store_path = tmp_path / "runs.sqlite3"
    code, stdout, stderr = extract(str(batch), "-o", str(output), "--store", str(store_path))
    assert (code, stderr) == (0, "")
    assert "Traceback" not in stdout
    records = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert [(r["source"], r["status"]) for r in records] == [
        (f"{batch}/a.xml", "ok"),
        (f"{batch}/b\\xff.xml", "ok"),
        (f"{batch}/c.xml", "ok"),
        (f"{batch}/d\\xfe.txt", "error"),
    ]
    assert records[1]["ide"]["chNFe"] == "43141003682759000190650020000000401000000405"
    assert records[3]["errors"][0]["code"] == "invalid_xml"
    assert records[3]["errors"][0]["message"].startswith(f"{batch}/d\\xfe.txt: ")
    assert "records written to" in stdout
    store = open_store(store_path)
    try:
        (run,) = store.runs()
        assert [(row.input, row.status) for row in store.documents(run.run_id)] == [
            (r["source"], r["status"]) for r in records
        ]
        trace_path = store.trace_path(run.run_id)
    finally:
        store.close()
    trace = load_trace(trace_path)
    assert [step.status for step in trace.steps.values()] == [
        "succeeded",
        "succeeded",
        "succeeded",
        "failed",
    ]
    # the trace is JSON: the escaped name's backslash is itself escaped there
    assert json.dumps(f"{batch}/b\\xff.xml") in trace_path.read_text(encoding="utf-8")
    shown = CliRunner().invoke(app, ["trace", run.run_id, "--store", str(store_path)])
    assert shown.exit_code == 0, shown.output

    # --resume: every input already has its record (sha256 and name), the non-UTF-8 ones too
    code, stdout, stderr = extract(
        str(batch), "-o", str(output), "--resume", "--json", "--store", str(store_path)
    )
    assert (code, stderr) == (0, "")
    summary = json.loads(stdout)
    assert (summary["records"], summary["skipped_by_resume"], summary["kept_from_previous"]) == (
        0,
        4,
        4,
    )
    again = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert [r["source"] for r in again] == [r["source"] for r in records]


def test_csv_and_the_summary_show_the_escaped_name(tmp_path: Path, batch: Path) -> None:
    output = tmp_path / "out.csv"
    store = str(tmp_path / "runs.sqlite3")
    code, stdout, stderr = extract(str(batch), "-o", str(output), "--json", "--store", store)
    assert (code, stderr) == (0, "")
    summary = json.loads(stdout)
    assert (summary["inputs"], summary["records"], summary["by_status"]) == (
        4,
        4,
        {"ok": 3, "error": 1},
    )
    with output.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["source"] for row in rows] == [
        f"{batch}/a.xml",
        f"{batch}/b\\xff.xml",
        f"{batch}/c.xml",
        f"{batch}/d\\xfe.txt",
    ]
    items = output.with_suffix(".items.csv").read_text(encoding="utf-8")
    assert f"{batch}/b\\xff.xml" in items


def test_resume_after_a_cut_extracts_the_non_utf8_inputs_once(tmp_path: Path, batch: Path) -> None:
    output = tmp_path / "out.jsonl"
    store = str(tmp_path / "runs.sqlite3")
    assert extract(str(batch), "-o", str(output), "--store", store)[0] == 0
    lines = output.read_text(encoding="utf-8").splitlines(keepends=True)
    output.write_text("".join(lines[:2]), encoding="utf-8")  # cut after b\xff.xml's record
    code, stdout, stderr = extract(
        str(batch), "-o", str(output), "--resume", "--json", "--store", store
    )
    assert (code, stderr) == (0, "")
    summary = json.loads(stdout)
    assert (summary["records"], summary["skipped_by_resume"]) == (2, 2)
    records = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert [r["source"] for r in records] == [
        f"{batch}/a.xml",
        f"{batch}/b\\xff.xml",
        f"{batch}/c.xml",
        f"{batch}/d\\xfe.txt",
    ]
    assert records[1]["checks"]["unique_in_batch"]["status"] == "pass"  # not extracted twice
