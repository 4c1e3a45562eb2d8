"""``--offline`` on the commands that call a model: no key, no server, every output says it
was made offline, and what the offline model quotes passes the same checks as a model's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from plandag.cli.app import app

REPO = Path(__file__).resolve().parents[2]
TEXT_TOOLS = REPO / "examples" / "tools" / "text_tools.py"
NOTES = "The hive holds many frames. Bees make honey in summer. The queen lays eggs in spring.\n"
LEASE = """EQUIPMENT LEASE AGREEMENT

This Equipment Lease Agreement is entered into as of January 15, 2024 by and between \
Northwind Rentals Ltd. ("Lessor") and Harbor Bakery LLC ("Lessee").

1. Term. The initial term of this Agreement is 36 months from the Effective Date. The \
Agreement renews automatically for successive periods of 12 months unless either party gives \
notice of non-renewal at least 60 days before the end of the then-current term.

2. Governing Law. This Agreement shall be governed by and construed in accordance with the \
laws of the State of Oregon.

3. Assignment. Lessee may not assign or transfer this Agreement or any rights under it \
without the prior written consent of Lessor.
"""


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "runs.sqlite3"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text(NOTES)


def invoke(*args: str) -> object:
    return CliRunner().invoke(app, list(args), env={})


def test_run_offline_plans_and_runs_on_the_users_file(tmp_path: Path) -> None:
    result = invoke(
        "run", "Count the words of notes.txt", "--offline", "--tools", str(TEXT_TOOLS), "--json"
    )
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    document = json.loads(result.stdout)  # type: ignore[attr-defined]
    assert document["offline"] is True
    assert document["status"] == "succeeded"
    tools = {step["tool"]: step for step in document["steps"]}
    assert tools["word_count"]["result"] == len(NOTES.split())
    assert document["answer"].startswith("Extracts (offline, no model): ")
    assert {call["model"] for call in document["llm_calls"]} == {"offline-extractive"}
    assert "offline: no model is called" in result.stderr  # type: ignore[attr-defined]


def test_run_offline_without_json_says_so_in_its_summary() -> None:
    result = invoke("run", "Count the words of notes.txt", "--offline", "--tools", str(TEXT_TOOLS))
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    assert "offline (offline-extractive): the answers are extracts" in result.stderr  # type: ignore[attr-defined]


def test_plan_offline_writes_a_plan_that_compiles(tmp_path: Path) -> None:
    result = invoke(
        "plan",
        "Count the words of notes.txt",
        "--provider",
        "offline",
        "--tools",
        str(TEXT_TOOLS),
        "-o",
        "plan.json",
        "--json",
    )
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    assert json.loads(result.stdout)["offline"] is True  # type: ignore[attr-defined]
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert [step["tool"] for step in plan["steps"]] == ["read_file", "word_count", "llm"]
    checked = invoke("check", "plan.json", "--tools", str(TEXT_TOOLS))
    assert checked.exit_code == 0, checked.output  # type: ignore[attr-defined]


def test_extract_contracts_offline_quotes_the_document(tmp_path: Path) -> None:
    (tmp_path / "lease.txt").write_text(LEASE)
    result = invoke("extract", "contracts", "lease.txt", "--offline", "-o", "out.jsonl")
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    (record,) = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert record["status"] == "ok"
    assert record["offline"] is True
    assert record["model"] == "offline-extractive"
    assert not record["errors"]
    found = {name: field for name, field in record["fields"].items() if field["values"]}
    assert found, "some fields are found"
    for field in record["fields"].values():
        assert not field["rejected"], field
        for value in field["values"]:
            assert value["quote"] in LEASE
            assert value["match"] == "exact"
    assert found["Agreement Date"]["answer"] == "2024-01-15"
    assert found["Renewal Term"]["answer"] == {"months": 12}
    assert "assign" in found["Anti-Assignment"]["values"][0]["quote"]
    assert "Insurance" not in found  # not in the document: not found, never made up


def test_exec_offline_answers_the_plans_model_steps_from_their_data(tmp_path: Path) -> None:
    result = invoke(
        "exec",
        str(REPO / "examples" / "plans" / "model_steps.json"),
        "--param",
        "page=notes.txt",
        "--offline",
        "--json",
    )
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    document = json.loads(result.stdout)  # type: ignore[attr-defined]
    assert document["status"] == "succeeded"
    output = document["output"]
    assert output["summary"].startswith("Extracts (offline, no model): ")
    assert "Bees make honey in summer." in output["summary"]
    assert output["amounts"] == []  # no amount in the page: none made up
    assert output["largest"] == (
        "Extracts (offline, no model): no document was given to extract an answer from."
    )
    assert "offline: no model is called" in result.stderr  # type: ignore[attr-defined]


def test_the_brakes_hold_the_offline_model_too() -> None:
    result = invoke(
        "run",
        "Count the words of notes.txt",
        "--offline",
        "--tools",
        str(TEXT_TOOLS),
        "--max-tokens",
        "2000",
    )
    assert result.exit_code != 0
    assert "would take the run past its cap of 2000 tokens" in result.stderr  # type: ignore[attr-defined]


def test_an_offline_run_is_never_routed_to_another_offline_runs_plan() -> None:
    first = invoke("run", "Count the words of notes.txt", "--offline", "--tools", str(TEXT_TOOLS))
    assert first.exit_code == 0, first.output  # type: ignore[attr-defined]
    other = invoke(
        "run", "Make the words of notes.txt upper case", "--offline", "--tools", str(TEXT_TOOLS)
    )
    assert other.exit_code == 0, other.output  # type: ignore[attr-defined]
    assert "library: not used offline" in other.stderr  # type: ignore[attr-defined]
    assert "library: routed to" not in other.stderr  # type: ignore[attr-defined]
    assert "library: saved" not in other.stderr  # type: ignore[attr-defined]
