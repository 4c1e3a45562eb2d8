"""The benchmark corpus generator: distinct, valid copies of the shipped invoices.

Keys follow the NF-e layout manual (MOC 7.0 Anexo I, "Chave de Acesso"): 44 digits, the
last the mod-11 check digit of the other 43.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from benchmarks.generate_nfe import check_digit, default_sources, generate, new_key, rekey
from plandag.cli import app
from plandag.extract.nfe import extract_document

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nfe"
NFELIB = EXAMPLES / "nfelib_35180834128745000152550010000476121675985748-nfe.xml"


def test_check_digit_of_shipped_keys() -> None:
    assert check_digit("3518083412874500015255001000047612167598574") == 8
    assert check_digit("4221077527752500017855003000026663176288549") == 3
    # remainder 0 or 1 gives 0
    assert check_digit("0" * 43) == 0
    with pytest.raises(ValueError, match="43 characters"):
        check_digit("123")


def test_new_key_keeps_the_issuer_fields_and_recomputes_the_check_digit() -> None:
    key = new_key(
        "35180834128745000152550010000476121675985748", year=2019, month=2, nnf=123, cnf=4567
    )
    assert (
        key[:43] == "35" + "1902" + "34128745000152" + "55" + "001" + "000000123" + "1" + "00004567"
    )
    assert key[43] == str(check_digit(key[:43]))


def test_rekey_changes_key_numbers_and_dates_consistently() -> None:
    data, key = rekey(NFELIB.read_bytes(), nnf=987654321, cnf=12345678, days_back=40)
    text = data.decode("utf-8")
    assert f'Id="NFe{key}"' in text
    assert "35180834128745000152550010000476121675985748" not in text
    assert "<nNF>987654321</nNF>" in text
    assert "<cNF>12345678</cNF>" in text
    assert f"<cDV>{key[-1]}</cDV>" in text
    # the source was issued 2018-08-..., forty days earlier is June or July 2018
    assert key[2:6] in ("1806", "1807")
    assert key[25:34] == "987654321"
    assert key[35:43] == "12345678"


def _statuses(paths: list[Path]) -> list[str]:
    async def run() -> list[str]:
        return [(await extract_document(path))[0]["status"] for path in paths]

    return anyio.run(run)


def test_generate_50_gives_distinct_keys_with_their_sources_statuses(tmp_path: Path) -> None:
    made = generate(50, tmp_path / "corpus", seed=7)
    assert len(made) == 50
    sources = {invoice.source for invoice in made}
    assert len(sources) >= 5  # the shipped examples at least
    source_status = dict(zip(sorted(sources), _statuses(sorted(sources)), strict=True))
    assert set(source_status.values()) == {"ok"}
    output = tmp_path / "out.jsonl"
    result = CliRunner().invoke(
        app,
        [
            "extract",
            "nfe",
            str(tmp_path / "corpus"),
            "-o",
            str(output),
            "--store",
            str(tmp_path / "runs.sqlite3"),
        ],
    )
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in output.read_text("utf-8").splitlines()]
    assert len(records) == 50
    keys = [record["ide"]["chNFe"] for record in records]
    assert len(set(keys)) == 50
    assert keys == [invoice.key for invoice in made]
    assert len({record["sha256"] for record in records}) == 50
    by_path = {str(invoice.path): invoice for invoice in made}
    for record in records:
        source = by_path[record["source"]].source
        assert record["status"] == source_status[source], record["source"]
        assert record["checks"]["unique_in_batch"]["status"] == "pass"
        assert record["checks"]["key_matches_document"]["status"] == "pass"
        assert record["checks"]["key_check_digit"]["status"] == "pass"


def test_the_same_seed_gives_the_same_bytes(tmp_path: Path) -> None:
    sources = [NFELIB]
    first = generate(3, tmp_path / "a", seed=1, sources=sources)
    second = generate(3, tmp_path / "b", seed=1, sources=sources)
    other = generate(3, tmp_path / "c", seed=2, sources=sources)
    digest = [hashlib.sha256(item.path.read_bytes()).hexdigest() for item in first]
    assert digest == [hashlib.sha256(item.path.read_bytes()).hexdigest() for item in second]
    assert [item.key for item in first] != [item.key for item in other]
    assert len(set(digest)) == 3


def test_default_sources_are_single_invoices_extracted_ok() -> None:
    sources = default_sources()
    assert NFELIB in sources
    assert EXAMPLES / "brnfe_event_cancel.xml" not in sources  # an error record
    assert EXAMPLES / "nfelib_nfe_reforma_tributaria.xml" not in sources  # check_failed


def test_throughput_table_gives_medians_ratios_and_n_a_rows() -> None:
    from benchmarks.nfe_throughput import Row, render

    rows = [
        Row("lxml", [1.0, 2.0, 4.0]),
        Row("plandag --workers 1", [4.0, 8.0, 16.0], target=0.5, target_of="lxml"),
        Row("plandag --workers 2", [2.0, 5.0], target=1.7, target_of="plandag --workers 1"),
        Row("--cluster", [], "n/a: the command has no --cluster option"),
        Row("cluster", [2.0], start=[3.0], target=0.85, target_of="plandag --workers 2"),
    ]
    rows[1].cpu = [0.4, 0.3, 0.5]
    assert render(rows, 100).splitlines()[2:] == [
        "| lxml | 50 | 1.00 |  |  |  | 25-100 |  |  |",
        "| plandag --workers 1 | 12 | 0.25 | ≥ 0.5× lxml | 0.25× | no | 6-25 | 4.00 |  |",
        "| plandag --workers 2 | 29 | 0.57 | ≥ 1.7× --workers 1 | 2.29× | yes | 20-50 |  |  |",
        "| --cluster | n/a | n/a | | | | | | n/a: the command has no --cluster option |",
        "| cluster | 50 | 1.00 | ≥ 0.85× --workers 2 | 1.75× | yes | 50-50 |  "
        "| start of workers/cluster 3.0 s left out |",
    ]
