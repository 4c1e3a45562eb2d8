"""``plandag extract nfe`` against hostile or careless inputs (a tester's findings): an output
that is also an input, outputs plandag did not write given to --resume, thousands of copies
of one key, spreadsheet formulas in CSV cells, argument order, an empty PATH, entries that
are not regular files, a foreign-namespace invoice, a DTD, a dhEmi without its offset."""

from __future__ import annotations

import csv
import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

from plandag.cli import app
from plandag.errors import InputError, PermanentStepError
from plandag.extract.nfe.batch import BatchSummary, expand_inputs, extract_batch
from plandag.extract.nfe.document import extract_document, parse_document
from plandag.extract.nfe.output import (
    flatten_record,
    item_rows,
    load_existing,
    neutralise_cell,
    restore_cell,
)

REPO = Path(__file__).resolve().parents[2]
SAMPLE_310 = REPO / "examples" / "nfe" / "brnfe_without_proc.xml"
SAMPLE_400 = (
    REPO / "examples" / "nfe" / "nfelib_35180834128745000152550010000476121675985748-nfe.xml"
)
NS = "http://www.portalfiscal.inf.br/nfe"


def _key(n: int) -> str:
    return f"{n:044d}"


def _record(source: str, sha: str, key: str | None, **extra: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "source": source,
        "sha256": sha,
        "status": "ok",
        "errors": [],
        "checks": {"key_check_digit": {"status": "pass", "detail": "ok"}},
        "layout": "4.00",
        "invoice_index": 0,
        "ide": {"chNFe": key, "nNF": "1"},
        "emit": {"CNPJ": "11222333000181", "xNome": "Emitente"},
        "dest": None,
        "items": [{"nItem": "1", "cProd": "P1", "vProd": "1.00", "indTot": "1"}],
        "total": {"vProd": "1.00", "vNF": "1.00"},
        "protocol": None,
        "events": [],
    }
    record.update(extra)
    return record


class Fake:
    """An extractor reading ``{"keys": [...], "extra": {...}}`` from a JSON input file."""

    def __init__(self) -> None:
        self.calls: list[Path] = []

    async def __call__(self, path: Path) -> list[dict[str, Any]]:
        self.calls.append(path)
        data = await anyio.Path(path).read_bytes()
        spec = json.loads(data)
        sha = hashlib.sha256(data).hexdigest()
        return [_record(str(path), sha, key, **spec.get("extra", {})) for key in spec["keys"]]


def _spec(path: Path, *keys: str, **extra: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"keys": list(keys), "extra": extra}), encoding="utf-8")
    return path


def _run(inputs: list[Path], output: Path, **options: Any) -> BatchSummary:
    return anyio.run(functools.partial(extract_batch, inputs, output, **options))


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _extract(path: Path) -> list[dict[str, Any]]:
    async def run() -> list[dict[str, Any]]:
        return await extract_document(path)

    return anyio.run(run)


# --- 1. -o naming an input --------------------------------------------------------------


def test_an_output_that_is_an_input_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    a = _spec(tmp_path / "a.xml", _key(1))
    b = _spec(tmp_path / "b.xml", _key(2))
    before = b.read_bytes()
    fake = Fake()
    with pytest.raises(InputError) as caught:
        _run([a, b], b, extractor=fake)
    assert str(caught.value) == (
        f"-o {b} is also an input ({b}); it would be overwritten: choose another output file"
    )
    assert b.read_bytes() == before
    assert fake.calls == []
    # With --resume too: the file is refused before load_existing could touch it.
    with pytest.raises(InputError, match="is also an input"):
        _run([a, b], b, extractor=fake, resume=True)
    assert b.read_bytes() == before


def test_an_output_inside_an_input_folder_and_through_a_symbolic_link(tmp_path: Path) -> None:
    folder = tmp_path / "clob"
    a = _spec(folder / "a.xml", _key(1))
    b = _spec(folder / "b.xml", _key(2))
    link = folder / "link.jsonl"
    link.symlink_to("a.xml")
    files, missing = expand_inputs([str(folder)])
    assert (files, missing) == ([a, b], [])  # link.jsonl is a second spelling of a.xml
    with pytest.raises(InputError, match=r"is also an input \(.*b\.xml\)"):
        _run(files, b, extractor=Fake())
    with pytest.raises(InputError) as caught:
        _run([a], link, extractor=Fake())
    assert str(caught.value) == (
        f"-o {link} is also an input ({a}); it would be overwritten: choose another output file"
    )
    assert json.loads(a.read_text(encoding="utf-8"))["keys"] == [_key(1)]


def test_a_csv_whose_items_file_would_overwrite_an_input(tmp_path: Path) -> None:
    a = _spec(tmp_path / "a.xml", _key(1))
    items = tmp_path / "o.items.csv"
    items.write_text("my,own,table\n1,2,3\n", encoding="utf-8")
    output = tmp_path / "o.csv"
    with pytest.raises(InputError) as caught:
        _run([a, items], output, extractor=Fake())
    assert str(caught.value) == (
        f"-o {output} writes {items}, which is also an input ({items}); it would be "
        "overwritten: choose another output file"
    )
    assert items.read_text(encoding="utf-8") == "my,own,table\n1,2,3\n"
    assert not output.exists()


def test_a_previous_plandag_output_in_the_input_folder_is_still_skipped(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    _spec(folder / "a.json", _key(1))
    for name in ("out.jsonl", "out.csv"):
        output = folder / name
        for _ in range(2):  # the second run meets the first run's output among the inputs
            files, _missing = expand_inputs([str(folder)])
            summary = _run(files, output, extractor=Fake())
            assert summary.inputs == 1
        if name == "out.jsonl":
            assert [r["source"] for r in _jsonl(output)] == [str(folder / "a.json")]
        output.unlink()
        if name == "out.csv":
            (folder / "out.items.csv").unlink()


def test_the_cli_exits_2_and_leaves_the_input_alone(tmp_path: Path) -> None:
    b = tmp_path / "b.xml"
    b.write_bytes(SAMPLE_310.read_bytes())
    result = CliRunner().invoke(app, ["extract", "nfe", str(SAMPLE_310), str(b), "-o", str(b)])
    assert result.exit_code == 2
    assert "is also an input" in result.stderr
    assert b.read_bytes() == SAMPLE_310.read_bytes()


# --- 2. --resume on files plandag did not write -----------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"my":"precious data"}\n',
            "line 1 of {out}: it is not a record plandag wrote (no 'source', 'sha256', "
            "'status', 'errors', 'checks')",
        ),
        (
            '{"source":"x","sha256":"abc","status":"ok","checks":"zz","errors":5}\n',
            "line 1 of {out}: field 'errors' is a number, not an array",
        ),
        (
            '{"source":"x","sha256":"abc","status":"ok","checks":"zz","errors":[]}\n',
            "line 1 of {out}: field 'checks' is a string, not an object",
        ),
        (
            '{"source":"x","sha256":"abc","status":"fine","checks":{},"errors":[]}\n',
            "line 1 of {out}: field 'status' is 'fine', not ok, check_failed or error",
        ),
        (
            '{"source":"x","sha256":"abc","status":"ok","checks":{},"errors":[],'
            '"ide":{"chNFe":7}}\n',
            "line 1 of {out}: field 'ide.chNFe' is a number, not a string or null",
        ),
    ],
)
def test_resume_refuses_a_jsonl_it_did_not_write(tmp_path: Path, text: str, message: str) -> None:
    output = tmp_path / "mine.jsonl"
    output.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_existing(output, "jsonl")
    expected = message.format(out=output)
    assert str(caught.value) == (
        f"cannot resume: {expected}; remove --resume to start the output afresh"
    )
    assert output.read_text(encoding="utf-8") == text


def test_resume_refuses_a_binary_csv(tmp_path: Path) -> None:
    output = tmp_path / "g.csv"
    garbage = bytes(range(128, 256)) * 8
    output.write_bytes(garbage)
    with pytest.raises(InputError) as caught:
        load_existing(output, "csv")
    assert str(caught.value) == (
        f"cannot resume: {output} is not UTF-8 text (invalid start byte at byte 0), not a "
        "CSV plandag wrote; remove --resume to start the output afresh"
    )
    assert output.read_bytes() == garbage


def test_csv_resume_refuses_a_missing_or_foreign_items_file(tmp_path: Path) -> None:
    inputs = [_spec(tmp_path / "in" / f"d{n}.json", _key(n)) for n in range(2)]
    output = tmp_path / "o.csv"
    items = tmp_path / "o.items.csv"
    _run(inputs, output, extractor=Fake())
    kept = output.read_bytes()
    items_text = items.read_text(encoding="utf-8")

    items.unlink()
    with pytest.raises(InputError) as caught:
        _run(inputs, output, extractor=Fake(), resume=True)
    assert str(caught.value) == (
        f"cannot resume: the items file {items} is missing, though {output} lists 2 "
        "invoice(s) with items; remove --resume to write both files afresh"
    )
    assert output.read_bytes() == kept

    items.write_text(items_text.splitlines()[0] + "\r\n", encoding="utf-8")  # header only
    with pytest.raises(InputError, match=r"does not hold the items of 2 invoice\(s\)"):
        _run(inputs, output, extractor=Fake(), resume=True)
    items.write_text("a,b\n1,2\n", encoding="utf-8")
    with pytest.raises(InputError, match="does not have the columns plandag writes"):
        _run(inputs, output, extractor=Fake(), resume=True)
    assert output.read_bytes() == kept

    items.write_text(items_text, encoding="utf-8")
    fake = Fake()
    summary = _run(inputs, output, extractor=fake, resume=True)
    assert (fake.calls, summary.skipped_by_resume) == ([], 2)


# --- 3. unique_in_batch detail stays bounded ----------------------------------------------


def test_unique_in_batch_names_three_sources_then_counts(tmp_path: Path) -> None:
    inputs = [_spec(tmp_path / "in" / f"d{n}.json", _key(9)) for n in range(6)]
    output = tmp_path / "out.jsonl"
    _run(inputs, output, extractor=Fake(), jobs=3)
    details = [r["checks"]["unique_in_batch"]["detail"] for r in _jsonl(output)]
    names = [str(p) for p in inputs]
    assert details[0] == f"chNFe {_key(9)} also in {names[1]}, {names[2]}, {names[3]} and 2 more"
    assert details[5] == f"chNFe {_key(9)} also in {names[0]}, {names[1]}, {names[2]} and 2 more"


def test_three_thousand_copies_keep_each_detail_short(tmp_path: Path) -> None:
    path = _spec(tmp_path / "batch.json", *([_key(5)] * 3000))
    output = tmp_path / "out.jsonl"
    _run([path], output, extractor=Fake())
    records = _jsonl(output)
    assert len(records) == 3000
    details = {r["checks"]["unique_in_batch"]["detail"] for r in records}
    same = "another invoice in the same file"
    assert details == {f"chNFe {_key(5)} also in {same}, {same}, {same} and 2996 more"}
    assert output.stat().st_size < 3000 * 1000


# --- 4. CSV formula injection -----------------------------------------------------------


@pytest.mark.parametrize(
    ("cell", "written"),
    [
        (
            '=HYPERLINK("http://x.example/?a=1","click")',
            '\'=HYPERLINK("http://x.example/?a=1","click")',
        ),
        ("+cmd|' /C calc'!A0", "'+cmd|' /C calc'!A0"),
        ("@SUM(A1:A2)", "'@SUM(A1:A2)"),
        ("-2+3", "'-2+3"),
        ("\tTAB", "'\tTAB"),
        ("\rCR", "'\rCR"),
        ("-5.00", "-5.00"),
        ("+1", "+1"),
        ("-.5", "-.5"),
        ("12.30", "12.30"),
        ("Produto = bom", "Produto = bom"),
        ("", ""),
    ],
)
def test_neutralise_cell(cell: str, written: str) -> None:
    assert neutralise_cell(cell) == written
    assert restore_cell(written) == cell


def test_csv_output_neutralises_formulas_and_keeps_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "=evil.json"
    record = _record(
        str(source),
        "ab" * 32,
        _key(1),
        emit={"CNPJ": "11222333000181", "xNome": '=HYPERLINK("http://x.example","x")'},
        items=[{"nItem": "1", "xProd": "@SUM(1+1)", "vProd": "-5.00", "indTot": "1"}],
        total={"vProd": "-5.00", "vNF": "+1"},
    )
    row = flatten_record(record)
    assert row["emit.xNome"] == '\'=HYPERLINK("http://x.example","x")'
    assert (row["total.vProd"], row["total.vNF"]) == ("-5.00", "+1")
    assert row["source"] == f"{source}"  # an absolute path starts with "/"
    (item,) = item_rows(record)
    assert (item["xProd"], item["vProd"]) == ("'@SUM(1+1)", "-5.00")

    # Through a batch, and back through --resume (the quote is read off again).
    _spec(tmp_path / "in" / "a.json", _key(1), emit={"xNome": "+cmd", "CNPJ": "1"})
    _spec(tmp_path / "in" / "-b.json", _key(1))
    monkeypatch.chdir(tmp_path / "in")
    relative = [Path("a.json"), Path("-b.json")]
    output = tmp_path / "o.csv"
    _run(relative, output, extractor=Fake())
    with output.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["source"] for r in rows] == ["a.json", "'-b.json"]
    assert rows[0]["emit.xNome"] == "'+cmd"
    assert rows[0]["checks.unique_in_batch.detail"] == f"chNFe {_key(1)} also in -b.json"
    with (tmp_path / "o.items.csv").open(encoding="utf-8", newline="") as handle:
        assert [r["source"] for r in csv.DictReader(handle)] == ["a.json", "'-b.json"]
    written = load_existing(output, "csv")
    assert [w.source for w in written] == ["a.json", "-b.json"]


def test_jsonl_keeps_values_exactly(tmp_path: Path) -> None:
    path = _spec(tmp_path / "a.json", _key(1), emit={"xNome": "=1+1"})
    _run([path], tmp_path / "o.jsonl", extractor=Fake())
    assert _jsonl(tmp_path / "o.jsonl")[0]["emit"]["xNome"] == "=1+1"


# --- 5. and 6. argument order, empty PATH -------------------------------------------------


def test_a_pattern_that_matched_nothing_keeps_its_place(tmp_path: Path) -> None:
    a = _spec(tmp_path / "a.json", _key(1))
    c = _spec(tmp_path / "c.json", _key(3))
    nope = tmp_path / "nope.json"
    files, missing = expand_inputs([str(a), str(nope), str(tmp_path / "*.none"), str(c)])
    assert files == [a, nope, tmp_path / "*.none", c]
    summary = _run(files, tmp_path / "o.jsonl", missing=missing, extractor=Fake(), jobs=4)
    records = _jsonl(tmp_path / "o.jsonl")
    assert [r["source"] for r in records] == [str(a), str(nope), str(tmp_path / "*.none"), str(c)]
    assert [r["errors"][0]["code"] if r["errors"] else None for r in records] == [
        None,
        "no_such_input",
        "no_such_input",
        None,
    ]
    assert (summary.inputs, summary.inputs_with_record, summary.records) == (4, 4, 4)


@pytest.mark.parametrize("pattern", ["", " ", "\t"])
def test_an_empty_path_is_refused(tmp_path: Path, pattern: str) -> None:
    a = _spec(tmp_path / "a.json", _key(1))
    with pytest.raises(InputError) as caught:
        expand_inputs([str(a), pattern])
    assert str(caught.value) == (
        f"an empty PATH ({pattern!r}); did a shell variable expand to nothing?"
    )


# --- 7. entries that are not regular files; foreign-namespace invoices --------------------


def test_entries_that_are_not_files_get_a_row_and_are_never_opened(tmp_path: Path) -> None:
    folder = tmp_path / "odd"
    good = _spec(folder / "good.json", _key(1))
    (folder / "dangling.xml").symlink_to(tmp_path / "nowhere")
    (folder / "loopA").symlink_to("loopB")
    (folder / "loopB").symlink_to("loopA")
    os.mkfifo(folder / "pipe.xml")
    (folder / "sub").mkdir()
    (folder / "sub" / "up").symlink_to("..")
    fifo = tmp_path / "top.fifo"
    os.mkfifo(fifo)

    files, missing = expand_inputs([str(folder), str(fifo)])
    assert missing == []
    assert files == [
        folder / "dangling.xml",
        good,
        folder / "loopA",
        folder / "loopB",
        folder / "pipe.xml",
        folder / "sub" / "up",
        fifo,
    ]
    fake = Fake()
    summary = _run(files, tmp_path / "o.jsonl", extractor=fake, resume=True)
    assert fake.calls == [good]
    rows = [(r["source"], r["sha256"], r["errors"]) for r in _jsonl(tmp_path / "o.jsonl")]

    def row(path: Path, text: str) -> tuple[str, str, list[dict[str, str]]]:
        return str(path), "", [{"code": "not_a_file", "message": f"{path}: {text}"}]

    assert rows[1][0] == str(good)
    assert [rows[0], *rows[2:]] == [
        row(
            folder / "dangling.xml",
            f"a symbolic link to {tmp_path / 'nowhere'}, which does not exist",
        ),
        row(folder / "loopA", "a symbolic link loop, not a file"),
        row(folder / "loopB", "a symbolic link loop, not a file"),
        row(folder / "pipe.xml", "a named pipe (FIFO), not a file; not read"),
        row(
            folder / "sub" / "up",
            "a symbolic link to a folder, not followed (name the folder to include it)",
        ),
        row(fifo, "a named pipe (FIFO), not a file; not read"),
    ]
    assert (summary.inputs, summary.inputs_with_record) == (7, 7)
    assert summary.error_codes == {"not_a_file": 6}


def _envelope(*invoices: str) -> str:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><enviNFe xmlns="{NS}" versao="3.10">'
        f"<idLote>1</idLote>{''.join(invoices)}</enviNFe>"
    )


def _sample_invoice(namespace: str | None = None) -> str:
    text = SAMPLE_310.read_text(encoding="utf-8").split("?>", 1)[1].strip()
    if namespace is not None:
        text = text.replace(f'<NFe xmlns="{NS}">', f'<NFe xmlns="{namespace}">', 1)
    return text


def test_a_foreign_namespace_invoice_gets_its_own_error_record(tmp_path: Path) -> None:
    foreign = "http://www.portalfiscal.inf.br/nfe/v2"
    path = tmp_path / "lote.xml"
    path.write_text(
        _envelope(_sample_invoice(foreign), _sample_invoice(), _sample_invoice(foreign)),
        encoding="utf-8",
    )
    records = _extract(path)
    assert [(r["status"], r["invoice_index"]) for r in records] == [
        ("error", 0),
        ("ok", 1),
        ("error", 2),
    ]
    key = "35170410864846000204550050000609731202489540"
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert [r["sha256"] for r in records] == [sha, sha, sha]
    assert records[0]["errors"] == [
        {
            "code": "wrong_namespace",
            "message": f"{path}: invoice 0: infNFe {key} is in the namespace {foreign}, not "
            "NF-e's; it is not read",
        }
    ]
    assert records[2]["errors"][0]["message"].startswith(f"{path}: invoice 2: ")

    only_foreign = tmp_path / "foreign.xml"
    only_foreign.write_text(_sample_invoice(foreign), encoding="utf-8")
    with pytest.raises(PermanentStepError) as caught:
        parse_document(only_foreign.read_bytes(), "f.xml")
    assert caught.value.reason == "wrong_namespace"
    assert str(caught.value) == (
        f"f.xml: infNFe {key} is in the namespace {foreign}, not NF-e's; no invoice in the "
        f"NF-e namespace {NS}"
    )


# --- 8. DTD / entities ------------------------------------------------------------------


@pytest.mark.parametrize(
    "doctype",
    [
        '<!DOCTYPE NFe [<!ENTITY name "Emitente">]>',
        '<!DOCTYPE NFe SYSTEM "file:///etc/passwd">',
        "<!DOCTYPE NFe>",
    ],
)
def test_a_document_with_a_dtd_is_refused(tmp_path: Path, doctype: str) -> None:
    text = _sample_invoice()
    if "ENTITY" in doctype:
        text = text.replace("<xNome>", "<xNome>&name;", 1)
    path = tmp_path / "dtd.xml"
    path.write_text(f'<?xml version="1.0" encoding="UTF-8"?>\n{doctype}\n{text}', "utf-8")
    (record,) = _extract(path)
    assert record["status"] == "error"
    assert record["errors"] == [
        {
            "code": "invalid_xml",
            "message": f"{path}: a DTD or entity declaration (<!DOCTYPE NFe>); NF-e documents "
            "have none",
        }
    ]


# --- 9. dhEmi without its UTC offset ------------------------------------------------------


@pytest.mark.parametrize(
    ("sample", "written", "errors"),
    [
        (SAMPLE_400, "2018-08-16T11:55:31", ["2018-08-16T11:55:31"]),
        (SAMPLE_400, "2018-08-16", ["2018-08-16"]),
        (SAMPLE_310, "2017-04-04T00:00:00", ["2017-04-04T00:00:00"]),
        (SAMPLE_400, "2018-08-16T11:55:31Z", []),
        (SAMPLE_400, "2018-08-16T11:55:31-03:00", []),
    ],
)
def test_dhemi_must_carry_its_offset(
    tmp_path: Path, sample: Path, written: str, errors: list[str]
) -> None:
    text = sample.read_text(encoding="utf-8")
    start = text.index("<dhEmi>") + len("<dhEmi>")
    text = text[:start] + written + text[text.index("</dhEmi>") :]
    path = tmp_path / "d.xml"
    path.write_text(text, encoding="utf-8")
    (record,) = _extract(path)
    assert record["ide"]["dhEmi"] == written
    assert record["errors"] == [
        {
            "code": "invalid_field",
            "message": f"ide/dhEmi (issue date) {value!r} is not an ISO 8601 date-time with "
            "its UTC offset",
        }
        for value in errors
    ]
    assert (record["status"] == "error") == bool(errors)


def test_an_older_demi_date_needs_no_offset(tmp_path: Path) -> None:
    text = SAMPLE_310.read_text(encoding="utf-8").replace(
        "<dhEmi>2017-04-04T00:00:00-03:00</dhEmi>", "<dEmi>2017-04-04</dEmi>"
    )
    path = tmp_path / "d.xml"
    path.write_text(text, encoding="utf-8")
    (record,) = _extract(path)
    assert (record["ide"]["dhEmi"], record["errors"]) == ("2017-04-04", [])


def test_an_empty_output_left_by_an_interrupted_run_is_not_an_input(tmp_path: Path) -> None:
    """A 0-byte output inside the input folder holds nothing to lose: it is dropped."""
    from plandag.extract.nfe.output import is_plandag_output

    empty = tmp_path / "out.jsonl"
    empty.write_bytes(b"")
    assert is_plandag_output(empty) is True
    (tmp_path / "notes.txt").write_text("mine", encoding="utf-8")
    assert is_plandag_output(tmp_path / "notes.txt") is False


def test_a_hard_link_to_the_output_is_another_input_and_a_link_to_it_is_the_output(
    tmp_path: Path,
) -> None:
    """The output is recognised among the inputs by its real path, as ever: a hard link to
    it (the same file, another path) is an input like any other, a dangling symbolic link to
    where the output will be written is the output itself."""
    a = _spec(tmp_path / "a.xml", _key(1))
    output = tmp_path / "out.jsonl"
    output.write_text("my notes\n", encoding="utf-8")
    twin = tmp_path / "twin.txt"
    os.link(output, twin)
    summary = _run([a, twin], output, extractor=Fake())
    assert summary.inputs == 2
    assert [r["source"] for r in _jsonl(output)] == [str(a), str(twin)]

    later = tmp_path / "later.jsonl"
    ahead = tmp_path / "ahead.xml"
    ahead.symlink_to(later)
    with pytest.raises(InputError) as caught:
        _run([a, ahead], later, extractor=Fake())
    assert str(caught.value) == (
        f"-o {later} is also an input ({ahead}); it would be overwritten: choose another "
        "output file"
    )
    assert not later.exists()


def test_each_file_is_taken_once_by_its_real_path(tmp_path: Path, monkeypatch: Any) -> None:
    """Second spellings (symbolic links, repeated arguments, ``./``) are dropped, before and
    after a path that leads to no file; a hard link (the same file under another real path)
    is an input of its own, as the real path says."""
    folder = tmp_path / "in"
    a = _spec(folder / "a.xml", _key(1))
    b = _spec(folder / "b.xml", _key(2))
    (folder / "c_link.xml").symlink_to("a.xml")
    os.link(a, folder / "d_hard.xml")
    (folder / "e_dangling.xml").symlink_to(tmp_path / "nowhere")
    (folder / "f_link.xml").symlink_to("b.xml")
    (folder / "g_link.xml").symlink_to("d_hard.xml")
    monkeypatch.chdir(tmp_path)
    files, missing = expand_inputs(
        [str(folder), "in/a.xml", "./in/b.xml", "in/e_dangling.xml", "in/d_hard.xml"]
    )
    assert missing == []
    assert files == [a, b, folder / "d_hard.xml", folder / "e_dangling.xml"]

    # without a dangling link: the same answer
    (folder / "e_dangling.xml").unlink()
    files, _ = expand_inputs([str(folder), "in/a.xml", "./in/b.xml", "in/d_hard.xml"])
    assert files == [a, b, folder / "d_hard.xml"]
