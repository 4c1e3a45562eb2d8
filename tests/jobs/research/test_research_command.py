"""``plandag research`` end to end on the shipped corpus, against the local Messages API
server with scripted replies (planner, replanner and the ``llm`` steps' model): branches
overlap in time, a fabricated citation fails its branch's check and only that branch is
replanned, the methodology matches the plan and the run store, ``--from-run`` rebuilds the
same report."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from plandag.cli.research_command import register
from plandag.jobs.research.scripted import FABRICATED_QUOTE, QUESTION, ScriptedResearch
from plandag.store import open_store
from plandag.testing import ChatCompletionsServer, MessagesServer

REPO = Path(__file__).resolve().parents[3]
CORPUS = REPO / "examples" / "research" / "corpus"
ANSWER_STEPS = (3, 6, 9, 12)


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One corpus index for the module's runs (built by the first, reused by the others)."""
    return tmp_path_factory.mktemp("index") / "index.sqlite3"


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()


def app() -> typer.Typer:
    application = typer.Typer(add_completion=False, rich_markup_mode=None)
    register(application)

    @application.callback()
    def root() -> None:
        """plandag, for this test."""

    return application


def invoke(args: list[str], key: str | None = "test") -> Any:
    env = {"ANTHROPIC_API_KEY": key} if key is not None else {}
    return CliRunner().invoke(app(), ["research", *args], env=env)


def research(server: MessagesServer, tmp_path: Path, index: Path, *more: str) -> Any:
    return invoke(
        [
            QUESTION,
            "--corpus",
            str(CORPUS),
            "--index",
            str(index),
            "--output",
            "out/report.md",
            "--base-url",
            server.url,
            "--store",
            str(tmp_path / "runs.sqlite3"),
            *more,
        ]
    )


def test_subquestion_branches_run_at_the_same_time(tmp_path: Path, index: Path) -> None:
    scripted = ScriptedResearch()
    with MessagesServer(default=scripted, ttft=0.5) as server:
        result = research(server, tmp_path, index)
        models = sorted({request.json["model"] for request in server.message_requests})
    assert result.exit_code == 0, result.output
    assert result.output.startswith(
        "corpus " + str(CORPUS) + ": 10 document(s), 135 chunk(s); index "
    )
    assert "brakes: $2.00, 500,000 tokens, 30 min, stall 120 s, writes out/, prices " in (
        result.output
    )
    assert scripted.answers == {0: 1, 1: 1, 2: 1, 3: 1}
    # the planner's model plans; the llm steps use the smaller executor model
    assert models == ["claude-haiku-4-5", "claude-sonnet-4-6"]
    with open_store(tmp_path / "runs.sqlite3") as store:
        [run] = store.runs()
        steps = store.steps(run.run_id)
    assert run.command == "research"
    assert run.status == "succeeded"
    answers = [steps[step_id] for step_id in ANSWER_STEPS]
    assert all(step.status == "succeeded" for step in answers)
    # every answer step started before any of them ended: the four model calls overlapped
    assert max(step.started_at or 0 for step in answers) < min(
        step.ended_at or 0 for step in answers
    )
    record = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert record["status"] == "succeeded"
    assert record["answer"].startswith("In short: The text says: ")
    assert len(record["references"]) == 4
    markdown = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert "The question was planned as 4 subquestion(s)" in markdown
    assert record["answers_at_once"] == 4
    assert "At most 4 answer step(s) ran at the same time" in markdown
    assert "Nothing failed; no replan." in markdown


def test_a_fabricated_citation_fails_its_branch_which_alone_is_replanned(
    tmp_path: Path, index: Path
) -> None:
    scripted = ScriptedResearch(fabricate=[1])
    with MessagesServer(default=scripted) as server:
        result = research(server, tmp_path, index)
    assert result.exit_code == 0, result.output
    assert scripted.planner_requests == 2  # the plan and one replan
    assert scripted.answers == {0: 1, 1: 2, 2: 1, 3: 1}  # only subquestion 2 was asked again
    with open_store(tmp_path / "runs.sqlite3") as store:
        [run] = store.runs()
        steps = store.steps(run.run_id)
    failed = steps[6]
    assert (failed.status, failed.reason) == ("failed", "check_failed")
    assert f"quote_not_found for quote {FABRICATED_QUOTE!r}" in str(failed.detail)
    assert failed.superseded_by == [14, 15, 16, 17]
    assert steps[13].status == "skipped"  # the first synthesis waited on it
    assert [steps[i].status for i in (14, 15, 16, 17)] == ["succeeded"] * 4
    # the other branches ran once and were kept
    assert [steps[i].attempts for i in (3, 9, 12)] == [1, 1, 1]
    record = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert [(s["answer_step"], s["status"]) for s in record["subquestions"]] == [
        (3, "succeeded"),
        (6, "failed"),
        (9, "succeeded"),
        (12, "succeeded"),
        (16, "succeeded"),
    ]
    assert record["synthesis_step"] == 17
    assert record["replans"][0]["replaced"] == [6, 13]
    assert record["replans"][0]["new_ids"] == [14, 15, 16, 17]
    assert all(
        citation["supported"] for claim in record["claims"] for citation in claim["citations"]
    )
    assert FABRICATED_QUOTE not in json.dumps(record["claims"])
    markdown = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert "replanned as steps 14, 15, 16, 17" in markdown
    assert "- replan 1 (failure, applied): replaced steps 6, 13 with steps 14, 15, 16, 17" in (
        markdown
    )


def test_the_methodology_matches_the_plan_and_the_store(tmp_path: Path, index: Path) -> None:
    scripted = ScriptedResearch(fabricate=[2])
    with MessagesServer(default=scripted) as server:
        result = research(server, tmp_path, index)
    assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    with open_store(tmp_path / "runs.sqlite3") as store:
        [run] = store.runs()
        steps = store.steps(run.run_id)
        versions = store.plan_versions(run.run_id)
    plan = {step["id"]: step for step in versions[-1].plan["steps"]}
    assert [item["version"] for item in record["plan_versions"]] == [v.version for v in versions]
    for subquestion in record["subquestions"]:
        answer = plan[subquestion["answer_step"]]
        assert answer["tool"] == "llm"
        assert answer["description"] == f"subquestion: {subquestion['text']}"
        assert subquestion["status"] == steps[subquestion["answer_step"]].status
        assert subquestion["detail"] == steps[subquestion["answer_step"]].detail
        [search] = subquestion["searches"]
        assert plan[search["step"]]["tool"] == "search"
        assert search["query"] == steps[search["step"]].args["query"]
        assert search["chunk_ids"] == steps[search["step"]].result["chunk_ids"]
        assert [plan[i]["tool"] for i in subquestion["steps"]] == ["search", "read", "llm"]
    assert record["spend"]["total_tokens"] == run.spent_tokens
    assert record["spend"]["total_usd"] == pytest.approx(
        run.spent_usd, abs=1e-6
    )  # rounded to 6 places
    # the report rebuilt from the store is the same report
    first = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    again = invoke(
        [
            "--from-run",
            run.run_id,
            "--output",
            "again.md",
            "--store",
            str(tmp_path / "runs.sqlite3"),
        ]
    )
    assert again.exit_code == 0, again.output
    assert (tmp_path / "again.md").read_text(encoding="utf-8") == first
    assert json.loads((tmp_path / "again.json").read_text(encoding="utf-8")) == record


def test_a_missing_key_or_corpus_stops_before_any_request(tmp_path: Path) -> None:
    index = str(tmp_path / "never.sqlite3")
    with MessagesServer(default=ScriptedResearch()) as server:
        no_key = invoke(
            [QUESTION, "--corpus", str(CORPUS), "--index", index, "--base-url", server.url],
            key=None,
        )
        no_corpus = invoke([QUESTION, "--base-url", server.url])
        empty = invoke([QUESTION, "--corpus", str(tmp_path / "out"), "--base-url", server.url])
        assert server.message_requests == []
    assert no_key.exit_code == 2
    assert "no Anthropic API key" in no_key.output
    assert "or --offline to try it with no key" in no_key.output
    assert not (tmp_path / "never.sqlite3").exists()  # the key is checked before indexing
    assert no_corpus.exit_code == 2
    assert "--corpus DIR is required" in no_corpus.output
    assert empty.exit_code == 2
    assert "holds no .md, .txt, .html or .pdf file" in empty.output


def test_the_readme_offline_example_runs(tmp_path: Path, index: Path) -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    [line] = [
        line
        for line in readme.splitlines()
        if line.startswith("ANTHROPIC_API_KEY=local plandag research ")
    ]
    words = shlex.split(line)[3:]  # after the variable, the program and the command
    with MessagesServer(default=ScriptedResearch()) as server:
        words[words.index("--base-url") + 1] = server.url
        words[words.index("--corpus") + 1] = str(CORPUS)
        store = str(tmp_path / "runs.sqlite3")
        result = invoke([*words, "--index", str(index), "--store", store], key="local")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "research.md").is_file()
    record = json.loads((tmp_path / "out" / "research.json").read_text(encoding="utf-8"))
    assert record["question"] == words[0]
    # the guide's tokens per question, within 15 % (the planner's prompt grows with tools)
    guide = (REPO / "docs" / "guides" / "research.md").read_text(encoding="utf-8")
    [figure] = re.findall(r"\*\*([0-9,]+) in all\*\*", guide)
    assert record["spend"]["total_tokens"] == pytest.approx(int(figure.replace(",", "")), rel=0.15)


def test_a_local_openai_compatible_server_plans_and_answers(tmp_path: Path, index: Path) -> None:
    scripted = ScriptedResearch(fabricate=[0])
    with ChatCompletionsServer(default=scripted) as server:
        result = invoke(
            [
                QUESTION,
                "--corpus",
                str(CORPUS),
                "--index",
                str(index),
                "--output",
                "out/report.md",
                "--provider",
                "openai",
                "--base-url",
                server.url + "/v1",
                "--model",
                "local-model",
                "--store",
                str(tmp_path / "runs.sqlite3"),
            ],
            key=None,  # a local server needs no key
        )
        models = {request.json["model"] for request in server.message_requests}
    assert result.exit_code == 0, result.output
    assert models == {"local-model"}  # the planner's model does the llm steps too
    assert scripted.answers == {0: 2, 1: 1, 2: 1, 3: 1}  # the fabricated answer was replanned
    record = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert record["status"] == "succeeded"
    assert record["subquestions"][0]["status"] == "failed"
    assert len(record["references"]) == 4


def test_a_synthesis_citing_a_quote_no_answer_passed_is_replanned_alone(
    tmp_path: Path, index: Path
) -> None:
    scripted = ScriptedResearch(stray_synthesis=True)
    with MessagesServer(default=scripted) as server:
        result = research(server, tmp_path, index)
    assert result.exit_code == 0, result.output
    assert scripted.answers == {0: 1, 1: 1, 2: 1, 3: 1}  # no answer asked again
    assert scripted.syntheses == 2
    with open_store(tmp_path / "runs.sqlite3") as store:
        [run] = store.runs()
        steps = store.steps(run.run_id)
    first = steps[13]
    assert (first.status, first.reason, first.superseded_by) == ("failed", "check_failed", [14])
    assert "check synthesis_citations failed" in str(first.detail)
    assert "not_cited_in_answers" in str(first.detail)
    assert steps[14].status == "succeeded"
    record = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert record["synthesis_step"] == 14
    assert record["replans"][0]["replaced"] == [13]
    assert len(record["references"]) == 4


def test_a_branch_that_never_gets_through_escalates_with_no_answer_made_up(
    tmp_path: Path, index: Path
) -> None:
    scripted = ScriptedResearch(fabricate=[3], fabricate_always=True)
    with MessagesServer(default=scripted) as server:
        # the branch's own limit is tested, not the cost relative to the plan's estimate
        # (each replan's planning call, its schema billed, may pass that one first)
        result = research(server, tmp_path, index, "--plan-cost-factor", "none")
    assert result.exit_code == 5, result.output  # escalated to a person
    assert scripted.answers[3] == 3  # the same subquestion failed three times
    record = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert (record["status"], record["answer"], record["references"]) == ("escalated", None, [])
    assert [s["status"] for s in record["subquestions"] if s["text"].startswith("What did")] == [
        "failed",
        "failed",
        "failed",
    ]
    markdown = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert "No answer: the run ended escalated" in markdown
    assert "Nothing was made up" in markdown


def test_a_plan_without_the_citation_checks_gets_them_and_still_catches_a_fabrication(
    tmp_path: Path, index: Path
) -> None:
    scripted = ScriptedResearch(fabricate=[1], without_checks=True)
    with MessagesServer(default=scripted) as server:
        result = research(server, tmp_path, index)
    assert result.exit_code == 0, result.output
    assert scripted.planner_requests == 2  # the plan and one replan: no repair call
    assert scripted.answers == {0: 1, 1: 2, 2: 1, 3: 1}
    with open_store(tmp_path / "runs.sqlite3") as store:
        [run] = store.runs()
        steps = store.steps(run.run_id)
        plan = store.plan_versions(run.run_id)[-1].plan
    failed = steps[6]
    assert (failed.status, failed.reason) == ("failed", "check_failed")
    assert f"quote_not_found for quote {FABRICATED_QUOTE!r}" in str(failed.detail)
    assert failed.superseded_by == [14, 15, 16, 17]
    checks = {step["id"]: step.get("check") for step in plan["steps"]}
    assert checks[3] == [{"kind": "citations_supported", "attached": True}]
    assert checks[16] == [{"kind": "citations_supported", "attached": True}]
    assert checks[17] == [
        {
            "kind": "synthesis_citations",
            "answers": [
                "<step_3_result>",
                "<step_9_result>",
                "<step_12_result>",
                "<step_16_result>",
            ],
            "attached": True,
        }
    ]
    record = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert [s["check_attached"] for s in record["subquestions"]] == [True] * 5
    assert record["synthesis_check_attached"] is True
    markdown = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert (
        markdown.count(
            "warning: the plan gave this answer no citations_supported check; plandag attached "
            "it before the step ran"
        )
        == 5
    )
    assert "Warning: the plan gave the synthesis no synthesis_citations check" in markdown


def test_one_scripted_server_answers_run_after_run(tmp_path: Path, index: Path) -> None:
    scripted = ScriptedResearch(fabricate=[1])
    with MessagesServer(default=scripted) as server:
        first = research(server, tmp_path, index)
        second = research(server, tmp_path, index)
    assert (first.exit_code, second.exit_code) == (0, 0), second.output
    assert scripted.planner_requests == 2  # the second run's plan and its one replan
    assert scripted.answers == {0: 1, 1: 2, 2: 1, 3: 1}
    with open_store(tmp_path / "runs.sqlite3") as store:
        assert [run.status for run in store.runs()] == ["succeeded", "succeeded"]
