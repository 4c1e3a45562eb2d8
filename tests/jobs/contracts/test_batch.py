"""The contracts batch: one record or error row per input, in input order, the batch going
on past bad files; --resume; JSONL and CSV."""

from __future__ import annotations

import csv
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from plandag.errors import InputError
from plandag.jobs.contracts.batch import (
    ContractsSummary,
    batch_exit_code,
    expand_contract_inputs,
    extract_contracts,
)
from plandag.jobs.contracts.document import BatchStopped
from plandag.jobs.contracts.fields import FieldSpec
from plandag.jobs.contracts.output import csv_columns
from plandag.jobs.contracts.text import ContractText

FIELDS = (
    FieldSpec("Governing Law", "Which law governs", "text", "a"),
    FieldSpec("Audit Rights", "Audits", "clause", "a"),
)


class FakeExtractor:
    """Stands for the model-backed extraction: a record naming the text's first word."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def __call__(self, path: Path, contract: ContractText) -> dict[str, Any]:
        self.calls.append(path.name)
        first = contract.text.split()[0]
        return {
            "file": str(path),
            "status": "ok",
            "text_sha256": contract.sha256,
            "extractor": contract.extractor,
            "chars": len(contract.text),
            "chunks": 1,
            "fields": {
                "Governing Law": {
                    "type": "text",
                    "values": [
                        {
                            "value": first,
                            "quote": first,
                            "start": 0,
                            "end": len(first),
                            "match": "exact",
                        }
                    ],
                    "answer": first,
                    "rejected": [],
                },
                "Audit Rights": {"type": "clause", "values": [], "answer": "No", "rejected": []},
            },
            "checks": {"quote_exists": {"status": "pass", "detail": "1 quote(s) found"}},
            "errors": [],
        }


def run(inputs: list[str], output: Path, **options: Any) -> ContractsSummary:
    files, missing = expand_contract_inputs(inputs)

    async def main() -> ContractsSummary:
        return await extract_contracts(files, output, fields=FIELDS, missing=missing, **options)

    return anyio.run(main)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_bad_files_become_error_rows_and_the_batch_goes_on(
    tmp_path: Path,
    make_encrypted_pdf: Callable[..., Path],
    make_scanned_pdf: Callable[[str], Path],
    make_pdf: Callable[..., Path],
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.txt").write_text("Delaware law governs.", encoding="utf-8")
    shutil.move(make_encrypted_pdf("b.pdf"), folder / "b.pdf")
    (folder / "c.txt").write_bytes(b"")
    shutil.move(make_scanned_pdf("d.pdf"), folder / "d.pdf")
    shutil.move(make_pdf("e.pdf", [["Texas law governs."]]), folder / "e.pdf")
    (folder / "f.xlsx").write_bytes(b"PK")
    (folder / "g.docx").write_bytes(b"not a docx")
    extractor = FakeExtractor()
    out = tmp_path / "out" / "contracts.jsonl"
    out.parent.mkdir()
    summary = run([str(folder), str(tmp_path / "missing*.txt")], out, extractor=extractor, jobs=3)
    records = read_jsonl(out)
    assert [(Path(r["file"]).name, r["status"]) for r in records] == [
        ("a.txt", "ok"),
        ("b.pdf", "error"),
        ("c.txt", "error"),
        ("d.pdf", "error"),
        ("e.pdf", "ok"),
        ("f.xlsx", "error"),
        ("g.docx", "error"),
        ("missing*.txt", "error"),
    ]
    assert [r["errors"][0]["code"] for r in records if r["status"] == "error"] == [
        "encrypted_pdf",
        "empty",
        "no_text",
        "unsupported_type",
        "unreadable",
        "no_such_input",
    ]
    assert records[4]["fields"]["Governing Law"]["answer"] == "Texas"
    assert records[4]["extractor"]["name"] == "pypdf"
    assert sorted(extractor.calls) == ["a.txt", "e.pdf"]
    assert summary.inputs == summary.inputs_with_record == 8
    assert summary.by_status == {"error": 6, "ok": 2}
    assert summary.values == 2
    assert batch_exit_code(summary) == 0


def test_an_exception_becomes_an_internal_error_row(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("One.", encoding="utf-8")
    (tmp_path / "b.txt").write_text("Two.", encoding="utf-8")

    async def flaky(path: Path, contract: ContractText) -> dict[str, Any]:
        if path.name == "a.txt":
            raise RuntimeError("boom")
        return await FakeExtractor()(path, contract)

    out = tmp_path / "o.jsonl"
    run([str(tmp_path / "a.txt"), str(tmp_path / "b.txt")], out, extractor=flaky)
    records = read_jsonl(out)
    assert records[0]["errors"] == [{"code": "internal_error", "message": "RuntimeError: boom"}]
    assert records[1]["status"] == "ok"


def test_resume_skips_recorded_texts_and_retries_error_rows(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.txt").write_text("Alpha.", encoding="utf-8")
    (folder / "b.txt").write_text("", encoding="utf-8")
    (folder / "c.txt").write_text("Gamma.", encoding="utf-8")
    out = tmp_path / "o.jsonl"
    run([str(folder)], out, extractor=FakeExtractor())
    assert [r["status"] for r in read_jsonl(out)] == ["ok", "error", "ok"]
    (folder / "b.txt").write_text("Beta.", encoding="utf-8")  # fixed since
    (folder / "c.txt").write_text("Gamma changed.", encoding="utf-8")  # changed since
    again = FakeExtractor()
    summary = run([str(folder)], out, extractor=again, resume=True)
    assert sorted(again.calls) == ["b.txt", "c.txt"]
    records = read_jsonl(out)
    assert [(Path(r["file"]).name, r["fields"]["Governing Law"]["answer"]) for r in records] == [
        ("a.txt", "Alpha."),
        ("b.txt", "Beta."),
        ("c.txt", "Gamma"),
    ]
    assert summary.skipped_by_resume == 1
    assert summary.kept_from_previous == 1
    assert summary.records == 2


def test_resume_refuses_a_file_plandag_did_not_write(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Alpha.", encoding="utf-8")
    out = tmp_path / "o.jsonl"
    out.write_text("my notes\n", encoding="utf-8")
    with pytest.raises(InputError, match="line 1 is not a contract record"):
        run([str(tmp_path / "a.txt")], out, extractor=FakeExtractor(), resume=True)
    assert out.read_text(encoding="utf-8") == "my notes\n"


def test_csv_flattens_each_record(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Delaware law.", encoding="utf-8")
    (tmp_path / "z.pdf").write_bytes(b"")
    out = tmp_path / "o.csv"
    run([str(tmp_path / "a.txt"), str(tmp_path / "z.pdf")], out, extractor=FakeExtractor())
    with out.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == csv_columns(FIELDS)
    assert rows[0]["Governing Law"] == "Delaware"
    assert rows[0]["Governing Law [evidence]"] == "0-8"
    assert rows[0]["Audit Rights"] == "No"
    assert rows[0]["quote_exists"] == "pass"
    assert rows[1]["status"] == "error"
    assert rows[1]["errors"].startswith("empty: ")


def test_the_output_in_an_input_folder_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Alpha.", encoding="utf-8")
    out = tmp_path / "o.jsonl"
    run([str(tmp_path)], out, extractor=FakeExtractor())
    run([str(tmp_path)], out, extractor=FakeExtractor())
    assert [Path(r["file"]).name for r in read_jsonl(out)] == ["a.txt"]
    mine = tmp_path / "notes.txt"
    mine.write_text("Mine.", encoding="utf-8")
    with pytest.raises(InputError, match="is also an input"):
        run([str(mine)], mine, extractor=FakeExtractor())


def test_a_brake_stops_the_batch_and_resume_goes_on(tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.txt").write_text(name.upper() + ".", encoding="utf-8")

    async def capped(path: Path, contract: ContractText) -> dict[str, Any]:
        if path.name == "b.txt":
            raise BatchStopped("budget", "the cost cap left no room")
        return await FakeExtractor()(path, contract)

    out = tmp_path / "out.jsonl"
    inputs = [str(tmp_path / f"{name}.txt") for name in "abc"]
    summary = run(inputs, out, extractor=capped, jobs=1)
    assert summary.stopped == "budget"
    assert summary.stopped_at == str(tmp_path / "b.txt")
    assert [Path(r["file"]).name for r in read_jsonl(out)] == ["a.txt"]
    assert batch_exit_code(summary) == 3
    summary = run(inputs, out, extractor=FakeExtractor(), resume=True)
    assert [Path(r["file"]).name for r in read_jsonl(out)] == ["a.txt", "b.txt", "c.txt"]
    assert summary.skipped_by_resume == 1
    assert batch_exit_code(summary) == 0


def test_a_pdf_or_docx_without_the_documents_extra_is_an_error_row_naming_it(
    tmp_path: Path, make_pdf: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.txt").write_text("Delaware law governs.", encoding="utf-8")
    shutil.move(make_pdf("b.pdf", [["Texas law governs."]]), folder / "b.pdf")
    (folder / "c.docx").write_bytes(b"PK")
    # as if the documents extra (pypdf, python-docx) were not installed
    monkeypatch.setitem(sys.modules, "pypdf", None)
    monkeypatch.setitem(sys.modules, "docx", None)
    out = tmp_path / "out" / "contracts.jsonl"
    out.parent.mkdir()
    run([str(folder)], out, extractor=FakeExtractor(), jobs=2)
    records = read_jsonl(out)
    assert [(Path(r["file"]).name, r["status"]) for r in records] == [
        ("a.txt", "ok"),
        ("b.pdf", "error"),
        ("c.docx", "error"),
    ]
    errors = [r["errors"][0] for r in records[1:]]
    assert [error["code"] for error in errors] == ["missing_extra", "missing_extra"]
    assert (
        "reading a PDF needs the documents extra: pip install 'plandag[documents]'"
        in (errors[0]["message"])
    )
    assert (
        "reading a DOCX needs the documents extra: pip install 'plandag[documents]'"
        in (errors[1]["message"])
    )
