"""``plandag research --offline``: a report whose every citation is checked and accepted, on
the shipped corpus and on a corpus the test writes, with no key and no server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from plandag.cli.research_command import register
from plandag.jobs.research.scripted import QUESTION, SUBQUESTIONS

REPO = Path(__file__).resolve().parents[3]
CORPUS = REPO / "examples" / "research" / "corpus"

BEES = {
    "hives.md": (
        "# Keeping bees\n\nA colony of honey bees lives in a hive made of wooden frames. "
        "The queen lays up to two thousand eggs a day during the spring build-up.\n\n"
        "Worker bees forage for nectar and pollen within three kilometres of the hive. "
        "Beekeepers inspect the frames every week to look for signs of swarming.\n"
    ),
    "winter.txt": (
        "In winter the bees form a tight cluster around the queen to keep her warm. "
        "The cluster eats the honey stored in autumn, so a beekeeper leaves enough honey "
        "in the hive for the cold months. A colony that runs out of honey starves before "
        "spring.\n"
    ),
}
BEE_QUESTION = "How do honey bees survive the winter, and why should a beekeeper leave honey?"


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)


def app() -> typer.Typer:
    application = typer.Typer(add_completion=False, rich_markup_mode=None)
    register(application)

    @application.callback()
    def root() -> None:
        """plandag, for this test."""

    return application


def research(tmp_path: Path, question: str, corpus: Path, *more: str) -> tuple[Any, dict[str, Any]]:
    result = CliRunner().invoke(
        app(),
        [
            "research",
            question,
            "--corpus",
            str(corpus),
            "--index",
            str(tmp_path / "index.sqlite3"),
            "--output",
            "out/report.md",
            "--store",
            str(tmp_path / "runs.sqlite3"),
            *more,
        ],
        env={},
    )
    record_path = tmp_path / "out" / "report.json"
    record = json.loads(record_path.read_text()) if record_path.exists() else {}
    return result, record


def assert_every_citation_accepted(record: dict[str, Any]) -> None:
    assert record["status"] == "succeeded", record
    assert record["claims"], "the synthesis has claims"
    for claim in record["claims"]:
        assert claim["supported"], claim
        assert claim["citations"]
        assert all(citation["supported"] for citation in claim["citations"]), claim
    for subquestion in record["subquestions"]:
        assert subquestion["status"] == "succeeded", subquestion
        assert subquestion["checked_in_run"]
        assert subquestion["claims"]
        for claim in subquestion["claims"]:
            assert claim["citations"]
            assert all(citation["supported"] for citation in claim["citations"]), claim
    assert record["references"]
    assert all(reference["match"] == "exact" for reference in record["references"])


def test_offline_research_on_the_shipped_corpus_checks_and_accepts_every_citation(
    tmp_path: Path,
) -> None:
    result, record = research(tmp_path, QUESTION, CORPUS, "--offline")
    assert result.exit_code == 0, result.output
    assert_every_citation_accepted(record)
    assert record["offline"] is True
    assert record["models"] == ["offline-extractive"]
    assert record["answer"].startswith("Extracts (offline, no model): ")
    report = (tmp_path / "out" / "report.md").read_text()
    assert "Made offline (offline-extractive): no model wrote this report" in report
    assert record["spend"]["total_tokens"] > 0  # the brakes count the offline calls too
    assert record["spend"]["total_usd"] == 0.0


def test_offline_research_on_a_corpus_of_ones_own_answers_from_it(tmp_path: Path) -> None:
    corpus = tmp_path / "bees"
    corpus.mkdir()
    for name, text in BEES.items():
        (corpus / name).write_text(text)
    assert all(item.text != BEE_QUESTION for item in SUBQUESTIONS)
    result, record = research(tmp_path, BEE_QUESTION, corpus, "--provider", "offline")
    assert result.exit_code == 0, result.output
    assert_every_citation_accepted(record)
    texts = [subquestion["text"] for subquestion in record["subquestions"]]
    assert texts == ["How do honey bees survive the winter?", "Why should a beekeeper leave honey?"]
    quotes = " ".join(reference["quote"] for reference in record["references"])
    assert "winter" in quotes or "honey" in quotes
    for reference in record["references"]:
        assert reference["quote"] in BEES[reference["document"]]


def test_offline_takes_no_base_url_and_no_other_model(tmp_path: Path) -> None:
    with_url, _ = research(
        tmp_path, QUESTION, CORPUS, "--offline", "--base-url", "http://127.0.0.1:9"
    )
    assert with_url.exit_code == 2
    assert "--offline needs no --base-url" in with_url.output
    other, _ = research(tmp_path, QUESTION, CORPUS, "--offline", "--provider", "openai")
    assert other.exit_code == 2
    assert "--offline is --provider offline" in other.output
    model, _ = research(tmp_path, QUESTION, CORPUS, "--offline", "--model", "claude-sonnet-4-6")
    assert model.exit_code == 2
    assert "the offline model is offline-extractive" in model.output


def test_research_in_python_offline_as_on_the_command_line(tmp_path: Path) -> None:
    from plandag.jobs.research.run import research as research_in_python

    result = research_in_python(
        QUESTION,
        corpus=CORPUS,
        provider="offline",
        output=tmp_path / "out" / "python.md",
        index=tmp_path / "index.sqlite3",
        store=tmp_path / "runs.sqlite3",
    )
    assert result.status == "succeeded"
    assert_every_citation_accepted(result.report.record)
    assert result.report.record["offline"] is True
    with pytest.raises(ValueError, match="runs in the process"):
        research_in_python(QUESTION, corpus=CORPUS, provider="offline", base_url="http://x")
