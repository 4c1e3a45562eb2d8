"""``plandag extract contracts`` end to end against the local Messages API server: the user's
own fields (the Portuguese template), CSV, bad files as error rows, the store, the key
checked before anything runs, and a bad fields file."""

from __future__ import annotations

import csv
import json
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from plandag.cli import app
from plandag.executors.data import parse_data_blocks
from plandag.jobs.contracts.evidence import locate_quote
from plandag.store import open_store
from plandag.testing import MessagesServer, ScriptedResponse

TEMPLATE = "apsantos_modelo-de-contrato.md"

FIELDS_TOML = """\
[[field]]
name = "Partes"
description = "As partes do contrato, com seus papéis"
type = "parties"

[[field]]
name = "Aviso prévio de rescisão"
description = "Antecedência mínima do aviso para terminar o contrato"
type = "duration"

[[field]]
name = "Multa por atraso"
description = "Multa, em por cento, sobre os valores não pagos"
type = "number"

[[field]]
name = "Foro"
description = "O foro eleito para as disputas"
type = "text"

[[field]]
name = "Rescisão sem justa causa"
description = "Cláusula que permite terminar o contrato sem justificativa"
type = "clause"
"""

# What a model finds in the template: (field, quote, value); the last is invented.
ANSWERS: list[tuple[str, str, Any]] = [
    ("Partes", "MEU NOME COMPLETO", {"name": "MEU NOME COMPLETO", "role": "Contratado"}),
    (
        "Aviso prévio de rescisão",
        "no mínimo, 30 (trinta) dias da data pretendida para finalização",
        {"days": 30},
    ),
    ("Multa por atraso", "multa de 2% (dois por cento)", 2),
    ("Foro", "o foro do domicílio do *Contratado*", "domicílio do Contratado"),
    (
        "Rescisão sem justa causa",
        "O *Contratado* e o *Cliente* têm garantida a faculdade de terminar o *Contrato* "
        "unilateralmente, a qualquer momento e sem necessidade de justificativa.",
        None,
    ),
    ("Foro", "o foro da comarca de São Paulo", "São Paulo"),
]


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


def portuguese_replies(body: dict[str, Any]) -> ScriptedResponse:
    """Reply with the answers whose passage is in this request's excerpt (the invented one
    with the chunk that holds the FORO clause)."""
    text = body["messages"][0]["content"]
    text = text if isinstance(text, str) else "".join(b["text"] for b in text)
    (block,) = [b for b in parse_data_blocks(text) if b.attributes["label"] == "data"]
    excerpt = block.value["excerpt"]
    fields: dict[str, list[dict[str, Any]]] = {}
    for name, quote, value in ANSWERS:
        if locate_quote(excerpt, quote) is not None or ("São Paulo" in quote and "FORO" in excerpt):
            fields.setdefault(name, []).append({"quote": quote, "value": value})
    group = json.loads(text.rsplit("JSON Schema:\n", 1)[1])["properties"]["fields"]["required"]
    return ScriptedResponse.json(
        {"fields": {name: fields.get(name, []) for name in group}},
        usage={"input_tokens": 4000, "output_tokens": 150},
    )


def test_the_portuguese_template_with_the_users_fields_to_csv_beside_bad_files(
    server: MessagesServer,
    contracts_dir: Path,
    tmp_path: Path,
    make_encrypted_pdf: Callable[..., Path],
    make_scanned_pdf: Callable[[str], Path],
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(contracts_dir / TEMPLATE, folder / TEMPLATE)
    shutil.move(make_encrypted_pdf("locked.pdf"), folder / "locked.pdf")
    shutil.move(make_scanned_pdf("scan.pdf"), folder / "scan.pdf")
    (folder / "blank.txt").write_text("", encoding="utf-8")
    fields = tmp_path / "campos.toml"
    fields.write_text(FIELDS_TOML, encoding="utf-8")
    for _ in range(2):  # the template is two chunks, one field group
        server.push_responder(portuguese_replies)
    out = tmp_path / "out" / "contratos.csv"
    store = tmp_path / "runs.sqlite3"
    result = CliRunner().invoke(
        app,
        [
            "extract", "contracts", str(folder), "--fields", str(fields), "-o", str(out),
            "--base-url", server.url, "--store", str(store),
        ],
        env={"ANTHROPIC_API_KEY": "test"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "Contract extraction" in result.output
    assert re.search(r"tokens \(input \+ output\) +│ +8,300 │", result.output)
    assert re.search(r"cost \(priced models\) +│ +\$0\.0095 │", result.output)
    assert len(server.message_requests) == 2
    assert {r.body["model"] for r in server.message_requests} == {"claude-haiku-4-5"}
    with out.open(encoding="utf-8", newline="") as handle:
        rows = {Path(row["file"]).name: row for row in csv.DictReader(handle)}
    assert {name: row["status"] for name, row in rows.items()} == {
        TEMPLATE: "check_failed",
        "blank.txt": "error",
        "locked.pdf": "error",
        "scan.pdf": "error",
    }
    assert rows["locked.pdf"]["errors"].startswith("encrypted_pdf: ")
    assert rows["scan.pdf"]["errors"].startswith("no_text: ")
    assert rows["blank.txt"]["errors"].startswith("empty: ")
    row = rows[TEMPLATE]
    assert row["chunks"] == "2"
    assert row["extractor"] == "plandag-text"
    assert row["Partes"] == "MEU NOME COMPLETO (Contratado)"
    assert row["Aviso prévio de rescisão"] == "30 days"
    assert row["Multa por atraso"] == "2"
    assert row["Foro"] == "domicílio do Contratado"
    assert row["Foro [rejected]"] == "1"
    assert row["Rescisão sem justa causa"] == "Yes"
    assert row["quote_exists"] == "fail"
    text = (contracts_dir / TEMPLATE).read_text(encoding="utf-8")
    for name, quote, _ in ANSWERS[:-1]:
        start = text.find(quote)
        assert row[f"{name} [evidence]"] == f"{start}-{start + len(quote)}"
    with open_store(store) as runs:
        (run,) = runs.runs()
        documents = runs.documents(run.run_id)
    assert run.status == "succeeded"
    assert [(Path(d.input).name, d.status) for d in documents] == [
        (TEMPLATE, "check_failed"),
        ("blank.txt", "error"),
        ("locked.pdf", "error"),
        ("scan.pdf", "error"),
    ]


def test_the_key_is_checked_before_anything_runs(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Terms.", encoding="utf-8")
    out = tmp_path / "o.jsonl"
    result = CliRunner().invoke(
        app, ["extract", "contracts", str(tmp_path / "a.txt"), "-o", str(out)],
        env={"ANTHROPIC_API_KEY": ""},
    )  # fmt: skip
    assert result.exit_code == 2
    assert "no Anthropic API key: set ANTHROPIC_API_KEY" in result.output
    assert "or --offline to try it with no key" in result.output
    assert not out.exists()
    result = CliRunner().invoke(
        app,
        ["extract", "contracts", str(tmp_path / "a.txt"), "-o", str(out), "--provider", "openai"],
        env={"OPENAI_API_KEY": ""},
    )
    assert result.exit_code == 2
    assert "--model (or --executor-model) is required with --provider openai" in result.output


def test_a_bad_fields_file_stops_before_anything_runs(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Terms.", encoding="utf-8")
    fields = tmp_path / "fields.toml"
    fields.write_text('[[field]]\nname = "Term"\ntype = "years"\ndescription = "d"\n')
    result = CliRunner().invoke(
        app,
        ["extract", "contracts", str(tmp_path / "a.txt"), "-o", str(tmp_path / "o.jsonl"),
         "--fields", str(fields)],
        env={"ANTHROPIC_API_KEY": "test"},
    )  # fmt: skip
    assert result.exit_code == 2
    assert f"{fields}: field 1 ('Term'): type 'years' is not one of text, date" in result.output


def test_a_fields_file_that_is_not_toml_is_told_to_write_field_tables(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Terms.", encoding="utf-8")
    for name, content in [("broken.toml", "[[field]\nname="), ("empty.toml", "")]:
        fields = tmp_path / name
        fields.write_text(content, encoding="utf-8")
        result = CliRunner().invoke(
            app,
            ["extract", "contracts", str(tmp_path / "a.txt"), "-o", str(tmp_path / "o.jsonl"),
             "--fields", str(fields)],
            env={"ANTHROPIC_API_KEY": "test"},
        )  # fmt: skip
        assert result.exit_code == 2
        assert "[[field]]" in result.output  # the error's TOML is not taken for console markup


def test_the_token_cap_stops_the_batch_with_exit_3_and_resume_goes_on(
    server: MessagesServer, contracts_dir: Path, tmp_path: Path
) -> None:
    names = [
        "cuad_GRIDIRONBIONUTRIENTS_INC_02_05_2020-EX-10.3-SUPPLY_AGREEMENT.txt",
        "cuad_TRANSMONTAIGNEPARTNERSLLC_03_13_2020-EX-10.9-SERVICES_AGREEMENT.txt",
    ]
    for name in names:
        shutil.copy(contracts_dir / name, tmp_path / name)
    server.default = lambda body: ScriptedResponse.json(
        {"fields": {name: [] for name in json.loads(
            body["messages"][0]["content"].rsplit("JSON Schema:\n", 1)[1]
        )["properties"]["fields"]["required"]}}
    )  # fmt: skip
    out = tmp_path / "out.jsonl"
    command = [
        "extract", "contracts", *(str(tmp_path / name) for name in names), "-o", str(out),
        "--base-url", server.url, "--store", str(tmp_path / "runs.sqlite3"), "--jobs", "1",
    ]  # fmt: skip
    # one call reserves its prompt (about 2,800 tokens) and its max_tokens (3,584 or more)
    stopped = CliRunner().invoke(
        app, [*command, "--max-tokens", "5000"], env={"ANTHROPIC_API_KEY": "test"}
    )
    assert stopped.exit_code == 3, stopped.output
    assert "stopped by the cost or token cap (--max-cost, --max-tokens)" in stopped.output
    assert "--resume" in stopped.output
    assert out.read_text(encoding="utf-8") == ""
    resumed = CliRunner().invoke(app, [*command, "--resume"], env={"ANTHROPIC_API_KEY": "test"})
    assert resumed.exit_code == 0, resumed.output
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [(Path(r["file"]).name, r["status"]) for r in records] == [(n, "ok") for n in names]
