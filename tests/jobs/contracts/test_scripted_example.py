"""The README's offline example: the shipped contracts extracted against the scripted server
(replies quoting the CUAD-labelled clauses, one invented governing-law quote per contract),
then scored by ``plandag eval contracts``: the records are in the shape the evaluation reads."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from plandag.cli import app
from plandag.jobs.contracts.evaluate import evaluate_contract_files
from plandag.jobs.contracts.scripted import FABRICATED_QUOTE, ScriptedContracts
from plandag.testing import MessagesServer

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "contracts"


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def scripted() -> Iterator[tuple[MessagesServer, ScriptedContracts]]:
    replies = ScriptedContracts(EXAMPLES / "cuad_labels.jsonl", fabricate=True)
    with MessagesServer(default=replies) as server:
        yield server, replies


def test_the_offline_example_extracts_and_scores(
    scripted: tuple[MessagesServer, ScriptedContracts], tmp_path: Path
) -> None:
    server, replies = scripted
    out = tmp_path / "contracts.jsonl"
    result = CliRunner().invoke(
        app,
        ["extract", "contracts", *map(str, sorted(EXAMPLES.glob("cuad_*.txt"))), "-o", str(out),
         "--base-url", server.url, "--store", str(tmp_path / "runs.sqlite3")],
        env={"ANTHROPIC_API_KEY": "local"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["status"] for r in records] == ["check_failed"] * 3
    for record in records:
        law = record["fields"]["Governing Law"]
        assert law["rejected"] == [{"quote": FABRICATED_QUOTE, "reason": "quote_not_found"}]
    assert sum(usage["calls"] for usage in replies.usage.values()) == 15
    evaluation = evaluate_contract_files(out, EXAMPLES / "cuad_labels.jsonl")
    clauses = evaluation.clauses
    assert (clauses.tp, clauses.fp, clauses.fn) == (19, 0, 13)
    parties = evaluation.categories["Parties"].answers
    assert (parties.tp, parties.fp, parties.fn) == (4, 0, 2)
    assert evaluation.categories["Governing Law"].answers.tp == 2
    assert (evaluation.accepted_quotes, evaluation.rejected_quotes) == (19, 3)
    result = CliRunner().invoke(
        app, ["eval", "contracts", str(out), "--labels", str(EXAMPLES / "cuad_labels.jsonl")]
    )
    assert result.exit_code == 0, result.output


def test_a_local_openai_compatible_server_works_the_same(tmp_path: Path) -> None:
    from plandag.testing.openai_server import ChatCompletionsServer

    replies = ScriptedContracts(EXAMPLES / "cuad_labels.jsonl")
    contract = sorted(EXAMPLES.glob("cuad_*.txt"))[0]
    out = tmp_path / "contracts.csv"
    with ChatCompletionsServer(default=replies) as server:
        result = CliRunner().invoke(
            app,
            ["extract", "contracts", str(contract), "-o", str(out), "--provider", "openai",
             "--base-url", server.url + "/v1", "--model", "qwen2.5:14b",
             "--store", str(tmp_path / "runs.sqlite3")],
            env={"OPENAI_API_KEY": ""},
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert {r.body["model"] for r in server.requests} == {"qwen2.5:14b"}
    assert replies.usage[contract.name]["calls"] == 5
    rows = out.read_text(encoding="utf-8").splitlines()
    assert len(rows) == 2
    assert ",ok," in rows[1]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot be read"),
        ("{not json\n", "line 1: not a JSON object"),
        ('["a list"]\n', "line 1: not a JSON object"),
        ('{"file": "a.txt"}\n', 'line 1: needs "file" (a contract in the same folder)'),
        ('{"file": "absent.txt", "labels": {}}\n', "line 1: contract absent.txt"),
    ],
)
def test_the_scripted_server_refuses_a_bad_labels_file_in_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: str | None,
    expected: str,
) -> None:
    from plandag.jobs.contracts.scripted import main

    labels = tmp_path / "labels.jsonl"
    if content is not None:
        labels.write_text(content, encoding="utf-8")
    with pytest.raises(SystemExit) as stopped:
        main(["--labels", str(labels), "--port", "0"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"error: --labels {labels}")
    assert expected in err
    assert "Traceback" not in err
