"""``plandag.research``: the Python form of ``plandag research``, with the command's safe
defaults, against the local Messages API server with scripted replies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import plandag
from plandag.brakes import UNLIMITED
from plandag.errors import InputError
from plandag.jobs.research.scripted import FABRICATED_QUOTE, QUESTION, ScriptedResearch
from plandag.models.base import MissingAPIKeyError
from plandag.scheduler import RunLimits
from plandag.store import open_store
from plandag.testing import MessagesServer

REPO = Path(__file__).resolve().parents[3]
CORPUS = REPO / "examples" / "research" / "corpus"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("index") / "index.sqlite3"


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "runs.sqlite3"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()


def test_research_from_python_writes_the_report_under_the_research_brakes(
    tmp_path: Path, index: Path
) -> None:
    scripted = ScriptedResearch(fabricate=[1])
    with MessagesServer(default=scripted) as server:
        outcome = plandag.research(
            QUESTION,
            corpus=CORPUS,
            index=index,
            base_url=server.url,
            output="out/report.md",
        )
        models = sorted({request.json["model"] for request in server.message_requests})
    assert outcome.status == "succeeded"
    assert outcome.answer is not None
    assert outcome.answer.startswith("In short: The text says: ")
    assert outcome.report_path == Path("out/report.md")
    assert outcome.record_path == Path("out/report.json")
    record = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert record == outcome.report.record
    assert record["replans"][0]["replaced"] == [6, 13]
    assert FABRICATED_QUOTE not in json.dumps(record["claims"])
    assert models == ["claude-haiku-4-5", "claude-sonnet-4-6"]
    # recorded in the default store ($PLANDAG_STORE), with what a later segment needs
    with open_store(tmp_path / "runs.sqlite3") as store:
        row = store.run(outcome.run_id)
    assert row.command == "research"
    assert row.options["read_only"] is True
    assert row.options["write_boundary"] == [str(tmp_path / "out")]
    assert row.options["limits"]["max_cost_usd"] == 2.0
    assert row.options["limits"]["max_tokens"] == 500_000
    assert row.options["limits"]["max_seconds"] == 1800.0
    assert row.options["executor"] == {
        "provider": "anthropic",
        "model": "claude-sonnet-4-6",
        "base_url": server.url,
        "executor_model": "claude-haiku-4-5",
    }
    assert row.options["research"] == {
        "corpus": str(CORPUS),
        "index": str(index),
        "output": str(tmp_path / "out" / "report.md"),
    }


def test_a_lifted_brake_is_explicit_and_stored(tmp_path: Path, index: Path) -> None:
    with MessagesServer(default=ScriptedResearch()) as server:
        outcome = plandag.research(
            QUESTION,
            corpus=CORPUS,
            index=index,
            base_url=server.url,
            output="out/report.md",
            limits=RunLimits.for_job("research", max_cost_usd=UNLIMITED),
        )
    with open_store(tmp_path / "runs.sqlite3") as store:
        row = store.run(outcome.run_id)
    assert outcome.status == "succeeded"
    assert row.options["limits"]["max_cost_usd"] == "none"
    assert row.options["limits"]["max_tokens"] == 500_000


def test_bad_arguments_stop_before_any_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with MessagesServer() as server:
        with pytest.raises(ValueError, match="the question is empty"):
            plandag.research("  ", corpus=CORPUS, base_url=server.url)
        (tmp_path / "a-file").write_text("in the way", encoding="utf-8")
        with pytest.raises(InputError, match="cannot be created"):
            plandag.research(QUESTION, corpus=CORPUS, base_url=server.url, output="a-file/r.md")
        with pytest.raises(InputError, match="is a folder; give the report's file name"):
            plandag.research(QUESTION, corpus=CORPUS, base_url=server.url, output="out")
        with pytest.raises(InputError, match=r"missing\) does not exist; give a folder"):
            plandag.research(QUESTION, corpus=tmp_path / "missing", base_url=server.url)
        monkeypatch.delenv("ANTHROPIC_API_KEY")
        with pytest.raises(MissingAPIKeyError):
            plandag.research(QUESTION, corpus=CORPUS, base_url=server.url)
        assert server.message_requests == []
    assert not (tmp_path / "runs.sqlite3").exists()


def test_each_plan_version_is_in_the_store_before_its_steps_start(
    tmp_path: Path, index: Path
) -> None:
    from plandag.scheduler import events

    seen: list[tuple[int, int]] = []  # (step id, plan versions stored when it started)

    def probe(event: object) -> None:
        if isinstance(event, events.StepStarted):
            with open_store(tmp_path / "runs.sqlite3") as store:  # another connection
                seen.append((event.step_id, len(store.plan_versions(event.run_id))))

    scripted = ScriptedResearch(fabricate=[1])
    with MessagesServer(default=scripted) as server:
        outcome = plandag.research(
            QUESTION,
            corpus=CORPUS,
            index=index,
            base_url=server.url,
            output="out/report.md",
            observers=[probe],
        )
    assert outcome.status == "succeeded"
    with open_store(tmp_path / "runs.sqlite3") as store:
        versions = store.plan_versions(outcome.run_id)
    assert len(versions) >= 2  # the plan and the replan
    made_in = {}  # step id -> the plan version that brought it
    for version in versions:
        for step in version.plan["steps"]:
            made_in.setdefault(step["id"], version.version)
    late = [(step_id, stored) for step_id, stored in seen if stored < made_in[step_id]]
    assert seen
    assert late == []  # (step, versions stored) for steps started before theirs


def test_the_scripted_answer_quotes_whole_sentences_or_cuts_them_at_a_word(
    tmp_path: Path, index: Path
) -> None:
    with MessagesServer(default=ScriptedResearch()) as server:
        outcome = plandag.research(
            QUESTION, corpus=CORPUS, index=index, base_url=server.url, output="out/report.md"
        )
    assert outcome.status == "succeeded"
    claims = outcome.report.record["claims"]
    assert claims
    for claim in claims:
        text = claim["claim"].removeprefix("The text says: ")
        quote = claim["citations"][0]["quote"]
        assert claim["citations"][0]["match"] == "exact"
        if text.endswith("…"):
            kept = text.removesuffix("…")
            assert quote.startswith(kept)
            assert not quote[len(kept)].isalnum()
        else:
            assert text == quote
            assert text[-1] in ".;:?!"
        assert claim["claim"] in (outcome.answer or "")


def test_a_long_scripted_sentence_is_cut_after_a_whole_word() -> None:
    from plandag.jobs.research.scripted import _shortened

    sentence = "word " * 60 + "end."
    short = _shortened(sentence)
    assert short.endswith("word…")
    assert len(short) <= 201
    assert sentence.startswith(short.removesuffix("…") + " ")
    assert _shortened("A short one.") == "A short one."
