"""Batch behaviour of ``plandag extract nfe`` (NFE.md "Batch behaviour"): order, isolation,
unique_in_batch, --resume, CSV output, input expansion. A fake extractor stands in for the
per-document extraction, except in the tests over real sample files."""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import itertools
import json
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from rich.console import Console

from plandag.errors import InputError
from plandag.extract.nfe.batch import (
    BatchSummary,
    batch_exit_code,
    expand_inputs,
    extract_batch,
    render_summary,
)
from plandag.extract.nfe.output import INVOICE_COLUMNS, ITEM_COLUMNS, items_path_for


def _shared_nfe() -> Path | None:
    """The shared NF-e corpus (``PLANDAG_SHARED_NFE``, set by tests/conftest.py), or None."""
    folder = os.environ.get("PLANDAG_SHARED_NFE")
    return Path(folder) if folder and Path(folder).is_dir() else None


class FakeExtractor:
    """Reads ``key`` (and optionally ``items``, ``fail``) from a small JSON input file.

    Sleeps a random time first (seeded), counts calls and the most documents at once.
    """

    def __init__(self, *, seed: int = 7, max_delay: float = 0.004) -> None:
        self.random = random.Random(seed)
        self.max_delay = max_delay
        self.calls: list[Path] = []
        self.running = 0
        self.most_at_once = 0

    async def __call__(self, path: Path) -> list[dict[str, Any]]:
        self.calls.append(path)
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            await anyio.sleep(self.random.uniform(0, self.max_delay))
            data = await anyio.Path(path).read_bytes()
            spec = json.loads(data)
            if spec.get("fail"):
                raise RuntimeError(f"boom in {path.name}")
            records = []
            for key in spec["keys"]:
                records.append(
                    {
                        "source": str(path),
                        "sha256": hashlib.sha256(data).hexdigest(),
                        "status": "ok",
                        "errors": [],
                        "checks": {"key_check_digit": {"status": "pass", "detail": "ok"}},
                        "ide": {"chNFe": key, "nNF": "1", "dhEmi": "2024-01-02T10:00:00-03:00"},
                        "emit": {"CNPJ": "11222333000181", "xNome": "Emitente Ltda"},
                        "dest": None,
                        "items": [
                            {"nItem": str(n), "cProd": f"P{n}", "vProd": "1.00", "indTot": "1"}
                            for n in range(1, spec.get("items", 1) + 1)
                        ],
                        "total": {"vProd": "1.00", "vNF": "1.00"},
                        "protocol": None,
                        "events": [],
                    }
                )
            return records
        finally:
            self.running -= 1


def _key(n: int) -> str:
    return f"{n:044d}"


def _inputs(folder: Path, specs: list[dict[str, Any]]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for n, spec in enumerate(specs):
        path = folder / f"doc{n:03d}.json"
        path.write_text(json.dumps(spec), encoding="utf-8")
        paths.append(path)
    return paths


def _run(inputs: list[Path], output: Path, **options: Any) -> BatchSummary:
    return anyio.run(functools.partial(extract_batch, inputs, output, **options))


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


@pytest.mark.parametrize("jobs", [1, 8])
def test_records_come_out_in_input_order_whatever_jobs(tmp_path: Path, jobs: int) -> None:
    paths = _inputs(tmp_path / "in", [{"keys": [_key(n)]} for n in range(40)])
    fake = FakeExtractor()
    seen: list[str] = []
    progress: list[tuple[int, int]] = []
    summary = _run(
        paths,
        tmp_path / "out.jsonl",
        jobs=jobs,
        extractor=fake,
        on_record=lambda record: seen.append(record["source"]),
        on_progress=lambda done, total: progress.append((done, total)),
    )
    records = _jsonl(tmp_path / "out.jsonl")
    assert [r["source"] for r in records] == [str(p) for p in paths]
    assert seen == [str(p) for p in paths]
    # inputs ready in order together are told at once; one at a time with one job
    assert progress[0] == (0, 40)
    assert progress[-1] == (40, 40)
    assert all(total == 40 for _, total in progress)
    assert all(a[0] < b[0] for a, b in itertools.pairwise(progress))
    if jobs == 1:
        assert progress == [(n, 40) for n in range(41)]
    assert fake.most_at_once == jobs
    assert summary.records == 40
    assert summary.by_status == {"ok": 40}
    assert batch_exit_code(summary) == 0
    assert all(r["checks"]["unique_in_batch"]["status"] == "pass" for r in records)


def test_window_bounds_the_documents_in_flight(tmp_path: Path) -> None:
    paths = _inputs(tmp_path / "in", [{"keys": [_key(n)]} for n in range(20)])
    fake = FakeExtractor()
    _run(paths, tmp_path / "out.jsonl", jobs=8, window=3, extractor=fake)
    assert fake.most_at_once == 3
    assert [r["source"] for r in _jsonl(tmp_path / "out.jsonl")] == [str(p) for p in paths]


def test_a_broken_input_never_stops_the_batch(tmp_path: Path) -> None:
    specs: list[dict[str, Any]] = [{"keys": [_key(n)]} for n in range(6)]
    specs[2] = {"fail": True}
    paths = _inputs(tmp_path / "in", specs)
    summary = _run(paths, tmp_path / "out.jsonl", jobs=3, extractor=FakeExtractor())
    records = _jsonl(tmp_path / "out.jsonl")
    assert [r["source"] for r in records] == [str(p) for p in paths]
    broken = records[2]
    assert broken["status"] == "error"
    assert broken["errors"] == [
        {"code": "internal_error", "message": "RuntimeError: boom in doc002.json"}
    ]
    assert broken["sha256"] == hashlib.sha256(paths[2].read_bytes()).hexdigest()
    assert broken["checks"]["unique_in_batch"]["status"] == "not_applicable"
    assert summary.by_status == {"ok": 5, "error": 1}
    assert summary.error_codes == {"internal_error": 1}
    assert batch_exit_code(summary) == 0


def test_an_extractor_returning_nothing_gives_an_internal_error(tmp_path: Path) -> None:
    paths = _inputs(tmp_path / "in", [{"keys": []}, {"keys": [_key(1)]}])
    _run(paths, tmp_path / "out.jsonl", extractor=FakeExtractor())
    records = _jsonl(tmp_path / "out.jsonl")
    assert records[0]["errors"][0]["code"] == "internal_error"
    assert records[0]["errors"][0]["message"] == (
        "TypeError: the extractor returned [] instead of a list of records"
    )
    assert records[1]["status"] == "ok"


def test_duplicate_keys_fail_unique_in_batch_for_both(tmp_path: Path) -> None:
    paths = _inputs(
        tmp_path / "in",
        [{"keys": [_key(1)]}, {"keys": [_key(2)]}, {"keys": [_key(1)], "items": 2}],
    )
    summary = _run(paths, tmp_path / "out.jsonl", jobs=2, extractor=FakeExtractor())
    records = _jsonl(tmp_path / "out.jsonl")
    assert [r["status"] for r in records] == ["check_failed", "ok", "check_failed"]
    assert records[0]["checks"]["unique_in_batch"] == {
        "status": "fail",
        "detail": f"chNFe {_key(1)} also in {paths[2]}",
    }
    assert records[2]["checks"]["unique_in_batch"] == {
        "status": "fail",
        "detail": f"chNFe {_key(1)} also in {paths[0]}",
    }
    assert records[1]["checks"]["unique_in_batch"] == {
        "status": "pass",
        "detail": "no other record in the batch has this chNFe",
    }
    # the other checks are untouched
    assert records[0]["checks"]["key_check_digit"] == {"status": "pass", "detail": "ok"}
    assert summary.by_status == {"check_failed": 2, "ok": 1}
    assert summary.failing_checks == {"unique_in_batch": 2}
    assert not list(tmp_path.glob(".out.jsonl.*"))  # the rewrite left no temporary file


def test_three_copies_name_each_other_and_error_status_stays(tmp_path: Path) -> None:
    paths = _inputs(tmp_path / "in", [{"keys": [_key(5)]}] * 3)
    _run(paths, tmp_path / "out.jsonl", jobs=1, extractor=FakeExtractor())
    records = _jsonl(tmp_path / "out.jsonl")
    assert [r["checks"]["unique_in_batch"]["detail"] for r in records] == [
        f"chNFe {_key(5)} also in {paths[1]}, {paths[2]}",
        f"chNFe {_key(5)} also in {paths[0]}, {paths[2]}",
        f"chNFe {_key(5)} also in {paths[0]}, {paths[1]}",
    ]


def test_two_invoices_with_one_key_in_one_file(tmp_path: Path) -> None:
    paths = _inputs(tmp_path / "in", [{"keys": [_key(9), _key(9)]}])
    _run(paths, tmp_path / "out.jsonl", extractor=FakeExtractor())
    details = [r["checks"]["unique_in_batch"]["detail"] for r in _jsonl(tmp_path / "out.jsonl")]
    assert details == [f"chNFe {_key(9)} also in another invoice in the same file"] * 2


def test_resume_skips_recorded_inputs_and_keeps_old_records_first(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    first = _inputs(folder, [{"keys": [_key(n)]} for n in range(3)])
    output = tmp_path / "out.jsonl"
    _run(first, output, extractor=FakeExtractor())
    extra = [folder / "new1.json", folder / "new0.json"]
    extra[0].write_text(json.dumps({"keys": [_key(11)]}), encoding="utf-8")
    # same key as doc001, other bytes (same bytes would be skipped: same sha256)
    extra[1].write_text(json.dumps({"keys": [_key(1)], "items": 2}), encoding="utf-8")
    fake = FakeExtractor()
    summary = _run([*first, *extra], output, resume=True, extractor=fake, jobs=4)
    assert sorted(fake.calls) == sorted(extra)
    assert summary.skipped_by_resume == 3
    assert summary.kept_from_previous == 3
    assert summary.records == 2
    assert batch_exit_code(summary) == 0
    records = _jsonl(output)
    assert [r["source"] for r in records] == [*map(str, first), *map(str, extra)]
    # the old record of doc001 is patched: the new input repeats its key
    assert records[1]["checks"]["unique_in_batch"]["status"] == "fail"
    assert records[1]["status"] == "check_failed"
    assert (
        records[4]["checks"]["unique_in_batch"]["detail"] == f"chNFe {_key(1)} also in {first[1]}"
    )
    assert summary.by_status == {"ok": 1, "check_failed": 1}

    # a third run has nothing left to do
    again = FakeExtractor()
    summary = _run([*first, *extra], output, resume=True, extractor=again)
    assert again.calls == []
    assert summary.skipped_by_resume == 5
    assert len(_jsonl(output)) == 5


def test_resume_drops_a_torn_last_line_and_internal_errors(tmp_path: Path) -> None:
    paths = _inputs(tmp_path / "in", [{"keys": [_key(n)]} for n in range(3)])
    output = tmp_path / "out.jsonl"
    _run(paths[:2], output, extractor=FakeExtractor())
    lines = output.read_text(encoding="utf-8").splitlines(keepends=True)
    internal = json.loads(lines[0])
    internal["status"] = "error"
    internal["errors"] = [{"code": "internal_error", "message": "RuntimeError: x"}]
    output.write_text(json.dumps(internal) + "\n" + lines[1][:40], encoding="utf-8")
    fake = FakeExtractor()
    summary = _run(paths, output, resume=True, extractor=fake)
    assert fake.calls == paths  # doc000 (internal error), doc001 (torn), doc002 (new)
    assert summary.kept_from_previous == 0
    assert [r["source"] for r in _jsonl(output)] == [str(p) for p in paths]


def test_resume_refuses_a_file_it_did_not_write(tmp_path: Path) -> None:
    paths = _inputs(tmp_path / "in", [{"keys": [_key(1)]}])
    output = tmp_path / "out.jsonl"
    output.write_text("hello\nworld\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"line 1 of .* is not a JSON record"):
        _run(paths, output, resume=True, extractor=FakeExtractor())


def test_without_resume_the_output_is_overwritten(tmp_path: Path) -> None:
    paths = _inputs(tmp_path / "in", [{"keys": [_key(1)]}])
    output = tmp_path / "out.jsonl"
    output.write_text("old\n", encoding="utf-8")
    _run(paths, output, extractor=FakeExtractor())
    assert [r["source"] for r in _jsonl(output)] == [str(paths[0])]


def test_csv_output_and_items_file(tmp_path: Path) -> None:
    specs: list[dict[str, Any]] = [
        {"keys": [_key(1)], "items": 3},
        {"fail": True},
        {"keys": [_key(2), _key(3)], "items": 2},
        {"keys": [_key(1)], "items": 1},
    ]
    paths = _inputs(tmp_path / "in", specs)
    output = tmp_path / "out" / "records.csv"
    summary = _run(paths, output, jobs=4, extractor=FakeExtractor())
    assert summary.format == "csv"
    assert summary.items_output == tmp_path / "out" / "records.items.csv"
    header, rows = _csv(output)
    assert tuple(header) == INVOICE_COLUMNS
    assert header[:3] == ["source", "sha256", "status"]
    assert [row["source"] for row in rows] == [str(paths[n]) for n in (0, 1, 2, 2, 3)]
    assert [row["ide.chNFe"] for row in rows] == [_key(1), "", _key(2), _key(3), _key(1)]
    assert [row["status"] for row in rows] == ["check_failed", "error", "ok", "ok", "check_failed"]
    assert [row["checks.unique_in_batch"] for row in rows] == [
        "fail",
        "not_applicable",
        "pass",
        "pass",
        "fail",
    ]
    assert rows[0]["checks.unique_in_batch.detail"] == f"chNFe {_key(1)} also in {paths[3]}"
    assert rows[1]["errors"] == "internal_error: RuntimeError: boom in doc001.json"
    assert rows[0]["items.count"] == "3"
    assert rows[0]["emit.CNPJ"] == "11222333000181"
    assert rows[0]["total.vNF"] == "1.00"
    assert rows[0]["dest.CNPJ"] == ""
    assert rows[0]["checks.key_check_digit"] == "pass"
    item_header, items = _csv(items_path_for(output))
    assert tuple(item_header) == ITEM_COLUMNS
    assert [(row["chNFe"], row["nItem"]) for row in items] == [
        (_key(1), "1"),
        (_key(1), "2"),
        (_key(1), "3"),
        (_key(2), "1"),
        (_key(2), "2"),
        (_key(3), "1"),
        (_key(3), "2"),
        (_key(1), "1"),
    ]
    assert items[0]["source"] == str(paths[0])
    assert items[0]["cProd"] == "P1"


def test_csv_resume_reads_the_sha256_column(tmp_path: Path) -> None:
    paths = _inputs(tmp_path / "in", [{"keys": [_key(n)], "items": 2} for n in range(4)])
    output = tmp_path / "out.csv"
    _run(paths[:2], output, extractor=FakeExtractor())
    fake = FakeExtractor()
    summary = _run(paths, output, resume=True, extractor=fake)
    assert fake.calls == paths[2:]
    assert summary.skipped_by_resume == 2
    header, rows = _csv(output)
    assert tuple(header) == INVOICE_COLUMNS
    assert [row["source"] for row in rows] == [str(p) for p in paths]
    _, items = _csv(items_path_for(output))
    assert len(items) == 8


def test_format_option_overrides_the_suffix(tmp_path: Path) -> None:
    paths = _inputs(tmp_path / "in", [{"keys": [_key(1)]}])
    _run(paths, tmp_path / "out.txt", format="csv", extractor=FakeExtractor())
    assert (tmp_path / "out.items.csv").exists()
    header, _ = _csv(tmp_path / "out.txt")
    assert tuple(header) == INVOICE_COLUMNS
    with pytest.raises(InputError, match="unknown output format 'xml'"):
        _run(paths, tmp_path / "o", format="xml", extractor=FakeExtractor())
    with pytest.raises(InputError, match="--jobs must be at least 1"):
        _run(paths, tmp_path / "o", jobs=0, extractor=FakeExtractor())


def test_expand_folders_globs_and_missing_patterns(tmp_path: Path) -> None:
    root = tmp_path / "data"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / ".hidden").mkdir()
    for name in ("b.xml", "a.xml", "notes.txt", "sub/c.xml", "sub/deeper/d.XML", ".x.xml"):
        (root / name).write_text("x", encoding="utf-8")
    (root / ".hidden" / "e.xml").write_text("x", encoding="utf-8")
    single = tmp_path / "single.xml"
    single.write_text("x", encoding="utf-8")

    files, missing = expand_inputs([str(single), str(root)])
    assert files == [
        single,
        root / "a.xml",
        root / "b.xml",
        root / "notes.txt",
        root / "sub" / "c.xml",
        root / "sub" / "deeper" / "d.XML",
    ]
    assert missing == []

    files, missing = expand_inputs(
        [str(root / "**" / "*.xml"), str(root / "a.xml"), str(tmp_path / "nope*.xml")]
    )
    # A pattern that matched nothing keeps its place, as Path(pattern), for its record.
    assert files == [root / "a.xml", root / "b.xml", root / "sub" / "c.xml", tmp_path / "nope*.xml"]
    assert [m["source"] for m in missing] == [str(tmp_path / "nope*.xml")]
    assert missing[0]["status"] == "error"
    assert missing[0]["errors"] == [
        {
            "code": "no_such_input",
            "message": f"{tmp_path / 'nope*.xml'}: no file matches this pattern",
        }
    ]

    files, missing = expand_inputs([str(root / "sub"), str(tmp_path / "gone.xml")])
    assert files == [
        root / "sub" / "c.xml",
        root / "sub" / "deeper" / "d.XML",
        tmp_path / "gone.xml",
    ]
    assert missing[0]["errors"][0]["message"] == f"{tmp_path / 'gone.xml'}: no such file or folder"

    with pytest.raises(InputError, match="no input file found"):
        expand_inputs([str(tmp_path / "gone.xml"), str(tmp_path / "*.none")])
    with pytest.raises(InputError, match="no input given"):
        expand_inputs([])


def test_missing_patterns_count_as_records(tmp_path: Path) -> None:
    paths = _inputs(tmp_path / "in", [{"keys": [_key(1)]}])
    files, missing = expand_inputs([str(tmp_path / "typo.json"), str(paths[0])])
    summary = _run(files, tmp_path / "out.jsonl", missing=missing, extractor=FakeExtractor())
    records = _jsonl(tmp_path / "out.jsonl")
    assert [r["source"] for r in records] == [str(tmp_path / "typo.json"), str(paths[0])]
    assert records[0]["sha256"] == ""
    assert summary.inputs == 2
    assert summary.error_codes == {"no_such_input": 1}
    assert batch_exit_code(summary) == 0


def test_the_output_inside_an_input_folder_is_not_an_input(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    _inputs(folder, [{"keys": [_key(1)]}, {"keys": [_key(2)]}])
    output = folder / "out.csv"
    for _ in range(2):
        files, _missing = expand_inputs([str(folder)])
        fake = FakeExtractor()
        _run(files, output, resume=True, extractor=fake)
    assert fake.calls == []
    assert len(_csv(output)[1]) == 2


def test_exit_code_and_summary_table() -> None:
    summary = BatchSummary(
        inputs=3,
        records=4,
        inputs_with_record=3,
        by_status={"ok": 2, "check_failed": 1, "error": 1},
        failing_checks={"vnf_formula": 1},
        error_codes={"not_an_invoice": 1},
        duration=1.5,
        output=Path("out.jsonl"),
    )
    assert batch_exit_code(summary) == 0
    summary.inputs_with_record = 2
    assert batch_exit_code(summary) == 1
    console = Console(file=io.StringIO(), width=100, color_system=None)
    console.print(render_summary(summary))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    for expected in (
        "inputs",
        "status: ok",
        "status: check_failed",
        "failing check: vnf_formula",
        "error: not_an_invoice",
        "out.jsonl",
        "1.50",
    ):
        assert expected in text


# --- real sample files (needs the domain extractor and the shared data) ------------------

SHARED = _shared_nfe()


def _real_extractor() -> Callable[..., Any]:
    document = pytest.importorskip("plandag.extract.nfe.document")
    if not hasattr(document, "extract_document"):
        pytest.skip("plandag.extract.nfe.document.extract_document is not written yet")
    return document.extract_document  # type: ignore[no-any-return]


@pytest.mark.skipif(SHARED is None, reason="shared NF-e samples not found (PLANDAG_SHARED_NFE)")
def test_real_files_duplicate_and_broken_input(tmp_path: Path) -> None:
    _real_extractor()
    assert SHARED is not None
    folder = tmp_path / "in"
    folder.mkdir()
    names = [
        "spednfe_nfe_layout4_com_prot.xml",
        "spednfe_nfe_errado.txt",
        "spedda_nfce112_2.xml",
    ]
    for name in names:
        shutil.copy(SHARED / name, folder / name)
    shutil.copy(SHARED / names[0], folder / "zz_copy.xml")
    files, missing = expand_inputs([str(folder)])
    assert missing == []
    output = tmp_path / "out.jsonl"
    summary = anyio.run(functools.partial(extract_batch, files, output, jobs=3))
    records = _jsonl(output)
    assert [Path(r["source"]).name for r in records] == sorted([*names, "zz_copy.xml"])
    by_name = {Path(r["source"]).name: r for r in records}
    original, copy = by_name[names[0]], by_name["zz_copy.xml"]
    assert original["sha256"] == copy["sha256"]
    for record, other in ((original, "zz_copy.xml"), (copy, names[0])):
        assert record["checks"]["unique_in_batch"]["status"] == "fail"
        assert record["checks"]["unique_in_batch"]["detail"].endswith(str(folder / other))
        assert record["status"] == "check_failed"
    assert by_name["spedda_nfce112_2.xml"]["checks"]["unique_in_batch"]["status"] == "pass"
    assert by_name["spednfe_nfe_errado.txt"]["status"] == "error"
    assert summary.records == 4
    assert batch_exit_code(summary) == 0

    # resume with one new file: only it is extracted
    shutil.copy(SHARED / "spedda_mod55-nfe_5.xml", folder / "new.xml")
    calls: list[Path] = []
    real = _real_extractor()

    async def counting(path: Path) -> list[dict[str, Any]]:
        calls.append(path)
        return await real(path)  # type: ignore[no-any-return]

    files, _ = expand_inputs([str(folder)])
    summary = anyio.run(
        functools.partial(extract_batch, files, output, resume=True, extractor=counting)
    )
    assert calls == [folder / "new.xml"]
    assert summary.skipped_by_resume == 4
    assert [Path(r["source"]).name for r in _jsonl(output)][-1] == "new.xml"


def test_default_extractor_writes_only_inside_the_output_folder(tmp_path: Path) -> None:
    """ARCHITECTURE.md: the write boundary of `extract` is the output file's folder."""
    from plandag.extract.nfe.batch import _default_extractor

    extractor = _default_extractor(tmp_path / "out" / "records.jsonl")
    assert isinstance(extractor, functools.partial)
    boundary = extractor.keywords["write_boundary"]
    assert boundary.contains(tmp_path / "out" / "x.json")
    assert not boundary.contains(tmp_path / "x.json")


def test_resume_gives_a_record_to_a_copy_under_another_name(tmp_path: Path) -> None:
    """Two files with the same bytes: resuming after the first must still record the second."""
    source = Path(__file__).resolve().parents[2] / "examples" / "nfe" / "brnfe_without_proc.xml"
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.xml").write_bytes(source.read_bytes())
    (folder / "b.xml").write_bytes(source.read_bytes())
    output = tmp_path / "out.jsonl"
    anyio.run(functools.partial(extract_batch, [folder / "a.xml"], output))
    summary = anyio.run(
        functools.partial(extract_batch, [folder / "a.xml", folder / "b.xml"], output, resume=True)
    )
    records = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert [Path(r["source"]).name for r in records] == ["a.xml", "b.xml"]
    assert summary.skipped_by_resume == 1
    assert [r["checks"]["unique_in_batch"]["status"] for r in records] == ["fail", "fail"]


def test_records_of_the_shipped_examples_are_byte_identical_to_the_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reference file holds the records ``plandag extract nfe examples/nfe`` wrote
    before the per-document path was made faster; they must not change by a byte."""
    from typer.testing import CliRunner

    from plandag.cli import app

    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)
    output = tmp_path / "out.jsonl"
    result = CliRunner().invoke(
        app,
        ["extract", "nfe", "examples/nfe", "-o", str(output), "--store", str(tmp_path / "s.db")],
    )
    assert result.exit_code == 0, result.output
    reference = Path(__file__).parent / "data" / "examples_nfe_records.jsonl"
    assert output.read_bytes() == reference.read_bytes()


class _Immediate(FakeExtractor):
    """:class:`FakeExtractor` that never suspends: the batch's own tasks must still let the
    event loop's other tasks run."""

    async def __call__(self, path: Path) -> list[dict[str, Any]]:
        self.calls.append(path)
        data = path.read_bytes()  # noqa: ASYNC240 - never suspending is the point
        spec = json.loads(data)
        return [
            {
                "source": str(path),
                "sha256": hashlib.sha256(data).hexdigest(),
                "status": "ok",
                "errors": [],
                "checks": {},
                "ide": {"chNFe": key},
                "items": [],
            }
            for key in spec["keys"]
        ]


def _with_gaps(tmp_path: Path) -> tuple[list[Path], list[dict[str, Any]]]:
    """30 inputs, one key repeated, and three patterns that matched nothing placed among
    them (the placeholders :func:`expand_inputs` leaves)."""
    specs = [{"keys": [_key(n % 25)]} for n in range(30)]
    paths = _inputs(tmp_path / "in", specs)
    patterns = [str(paths[0])]
    for number, path in enumerate(paths[1:], start=1):
        if number in (4, 17, 29):
            patterns.append(str(tmp_path / "in" / f"gone{number}.json"))
        patterns.append(str(path))
    return expand_inputs(patterns)


@pytest.mark.parametrize(
    ("jobs", "window", "extractor"),
    [(1, 1, _Immediate), (3, 2, _Immediate), (4, None, _Immediate), (5, 3, FakeExtractor)],
)
def test_inputs_taken_by_several_tasks_give_the_file_of_one(
    tmp_path: Path, jobs: int, window: int | None, extractor: type[FakeExtractor]
) -> None:
    files, missing = _with_gaps(tmp_path)
    reference = tmp_path / "one.jsonl"
    _run(files, reference, jobs=1, missing=missing, extractor=extractor())
    output = tmp_path / "many.jsonl"
    fake = extractor()
    progress: list[int] = []
    summary = _run(
        files,
        output,
        jobs=jobs,
        window=window,
        missing=missing,
        extractor=fake,
        on_progress=lambda done, total: progress.append(done),
    )
    assert output.read_bytes() == reference.read_bytes()
    assert len(_jsonl(output)) == 33
    assert sorted(fake.calls) == sorted(path for path in files if path.exists())
    assert progress[0] == 0
    assert progress[-1] == 33
    assert all(a < b for a, b in itertools.pairwise(progress))
    assert summary.records == 33
    assert summary.error_codes == {"no_such_input": 3}


def test_an_extractor_that_never_suspends_leaves_the_loop_to_other_tasks(tmp_path: Path) -> None:
    paths = _inputs(tmp_path / "in", [{"keys": [_key(n)]} for n in range(640)])
    turns: list[int] = []

    async def main() -> None:
        done = anyio.Event()

        async def count_turns() -> None:
            while not done.is_set():
                turns.append(len(turns))
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as group:
            group.start_soon(count_turns)
            await extract_batch(
                paths, tmp_path / "out.jsonl", jobs=1, window=1000, extractor=_Immediate()
            )
            done.set()

    anyio.run(main)
    # the batch's task takes a free place without a loop trip, but yields at least once per
    # 64 inputs: another task gets the loop at least ten times during 640 inputs
    assert len(turns) >= 640 // 64
    assert [r["source"] for r in _jsonl(tmp_path / "out.jsonl")] == [str(p) for p in paths]


def test_on_settled_comes_after_the_last_group_and_before_the_end_rewrites_the_file(
    tmp_path: Path,
) -> None:
    paths = _inputs(tmp_path / "in", [{"keys": [_key(n % 4)]} for n in range(6)])
    output = tmp_path / "out.jsonl"
    calls: list[str] = []

    def on_flush() -> None:
        calls.append("flush")

    def on_settled() -> None:
        # the file still holds every record as first written: nothing rewritten yet
        first = _jsonl(output)[0]["checks"]["unique_in_batch"]["status"]
        calls.append(f"settled ({first})")

    _run(
        paths,
        output,
        jobs=2,
        extractor=FakeExtractor(),
        on_flush=on_flush,
        on_settled=on_settled,
        on_correction=lambda index, change: calls.append("correction"),
        flush_records=2,
    )
    assert calls.count("settled (pass)") == 1
    settled = calls.index("settled (pass)")
    assert calls[:settled] == ["flush"] * settled
    assert settled >= 3  # several groups, the last one before it
    assert calls[settled + 1 :] == ["correction"] * 2  # keys 0 and 1 repeat
    assert _jsonl(output)[0]["checks"]["unique_in_batch"]["status"] == "fail"
