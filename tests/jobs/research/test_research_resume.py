"""A research run handed to a person goes on with ``plandag resume RUN_ID --instruction``:
its corpus and models are bound again from the run's options, the completed branches are
kept, and the report is written again; a corpus that moved stops the resume with what to
do."""

from __future__ import annotations

import base64
import gc
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from plandag.cli.app import app
from plandag.jobs.research.scripted import QUESTION, ScriptedResearch, replan_patch
from plandag.store import open_store
from plandag.testing import MessagesServer
from plandag.testing.script import ScriptedResponse

REPO = Path(__file__).resolve().parents[3]
CORPUS = REPO / "examples" / "research" / "corpus"


class TwoPhases:
    """First a run whose fourth branch never gets through (it escalates); once ``resumed``
    is set, the replanner writes that branch again (ids after the 21 steps used) and every
    answer quotes its chunks."""

    def __init__(self) -> None:
        self.first = ScriptedResearch(fabricate=[3], fabricate_always=True)
        self.second = ScriptedResearch()
        self.resumed = False
        self.resume_requests: list[str] = []

    def __call__(self, body: dict[str, Any]) -> ScriptedResponse:
        if not self.resumed:
            return self.first(body)
        system = json.dumps(body.get("system", ""))
        if "You are the planner of plandag" in system:
            self.resume_requests.append(json.dumps(body["messages"]))
            return ScriptedResponse.json(replan_patch(3, 3))
        return self.second(body)


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()


def plandag(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def escalated_run(
    server: MessagesServer, tmp_path: Path, corpus: Path, base_url: str | None = None
) -> str:
    result = plandag(
        "research",
        QUESTION,
        "--corpus",
        str(corpus),
        "--index",
        str(tmp_path / "index.sqlite3"),
        "--output",
        "out/report.md",
        "--base-url",
        base_url or server.url,
        "--store",
        str(tmp_path / "runs.sqlite3"),
    )
    assert result.exit_code == 5, result.output
    with open_store(tmp_path / "runs.sqlite3") as store:
        [run] = store.runs()
    assert run.status == "escalated"
    return str(run.run_id)


def test_an_escalated_research_run_resumes_with_its_corpus_and_models(tmp_path: Path) -> None:
    responder = TwoPhases()
    with MessagesServer(default=responder) as server:
        run_id = escalated_run(server, tmp_path, CORPUS)
        first = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
        responder.resumed = True
        result = plandag(
            "resume",
            run_id,
            "--instruction",
            "Search the Hamilton paper with other words",
            "--store",
            str(tmp_path / "runs.sqlite3"),
        )
        models = [request.json["model"] for request in server.message_requests]
    assert result.exit_code == 0, result.output
    assert first["answer"] is None
    assert len(responder.resume_requests) == 1
    assert "Search the Hamilton paper with other words" in responder.resume_requests[0]
    assert responder.second.answers == {3: 1}  # only the failed branch ran again
    assert responder.second.syntheses == 1
    assert models[-2:] == ["claude-haiku-4-5", "claude-haiku-4-5"]  # the llm steps' model
    with open_store(tmp_path / "runs.sqlite3") as store:
        row = store.run(run_id)
        steps = store.steps(run_id)
    assert row.status == "succeeded"
    assert [steps[i].attempts for i in (3, 6, 9)] == [1, 1, 1]  # kept, not run again
    assert [steps[i].status for i in (22, 23, 24, 25)] == ["succeeded"] * 4
    record = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert record["status"] == "succeeded"
    assert record["answer"] is not None
    assert record["answer"].startswith("In short: The text says: ")
    assert record["synthesis_step"] == 25
    assert f"report: {tmp_path / 'out' / 'report.md'}" in result.output
    # --from-run builds the same report from the store
    rebuilt = plandag(
        "research",
        "--from-run",
        run_id,
        "--output",
        "out/again.md",
        "--store",
        str(tmp_path / "runs.sqlite3"),
    )
    assert rebuilt.exit_code == 0, rebuilt.output
    again = json.loads((tmp_path / "out" / "again.json").read_text(encoding="utf-8"))
    assert again == record


def test_a_moved_corpus_stops_the_resume_before_anything_runs(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(CORPUS, corpus)
    responder = TwoPhases()
    with MessagesServer(default=responder) as server:
        run_id = escalated_run(server, tmp_path, corpus)
        requests = len(server.message_requests)
        corpus.rename(tmp_path / "elsewhere")
        responder.resumed = True
        result = plandag("resume", run_id, "--store", str(tmp_path / "runs.sqlite3"))
        assert len(server.message_requests) == requests
    assert result.exit_code == 2, result.output
    assert f"run {run_id}: its corpus folder {corpus} does not exist any more; put it back " in (
        " ".join(result.output.split())
    )
    assert "Traceback" not in result.output
    with open_store(tmp_path / "runs.sqlite3") as store:
        assert store.run(run_id).status == "escalated"


def test_an_interrupted_research_run_resumes_its_remaining_steps(tmp_path: Path) -> None:
    scripted = ScriptedResearch()
    with MessagesServer(default=scripted) as server:
        result = plandag(
            "research",
            QUESTION,
            "--corpus",
            str(CORPUS),
            "--index",
            str(tmp_path / "index.sqlite3"),
            "--output",
            "out/report.md",
            "--base-url",
            server.url,
            "--store",
            str(tmp_path / "runs.sqlite3"),
        )
        assert result.exit_code == 0, result.output
        with open_store(tmp_path / "runs.sqlite3") as store:
            [run] = store.runs()
            # as a run interrupted before its synthesis (step 13) ran
            store.connection.execute(
                "UPDATE step SET status = 'pending', result = NULL, attempts = 0, "
                "started_at = NULL, ended_at = NULL WHERE run_id = ? AND step_id = 13",
                (run.run_id,),
            )
            store.connection.execute(
                "UPDATE run SET status = 'interrupted', pid = NULL WHERE run_id = ?",
                (run.run_id,),
            )
            store.connection.commit()
        (tmp_path / "out" / "report.json").unlink()
        resumed = plandag("resume", run.run_id, "--store", str(tmp_path / "runs.sqlite3"))
    assert resumed.exit_code == 0, resumed.output
    assert scripted.syntheses == 2  # the synthesis ran again, with the corpus and its model
    assert scripted.answers == {0: 1, 1: 1, 2: 1, 3: 1}  # the branches did not
    with open_store(tmp_path / "runs.sqlite3") as store:
        assert store.run(run.run_id).status == "succeeded"
        assert store.steps(run.run_id)[13].status == "succeeded"
    record = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert record["status"] == "succeeded"
    assert record["answer"] is not None


def test_a_password_in_the_base_url_is_never_stored_and_is_given_again_to_resume(
    tmp_path: Path,
) -> None:
    password = "research-PW-424242"
    basic = "Basic " + base64.b64encode(f"alice:{password}".encode()).decode()
    responder = TwoPhases()
    store = str(tmp_path / "runs.sqlite3")
    outputs: list[str] = []
    with MessagesServer(default=responder) as server:
        url = server.url.replace("http://", f"http://alice:{password}@")
        run_id = escalated_run(server, tmp_path, CORPUS, base_url=url)
        assert {request.headers["authorization"] for request in server.message_requests} == {basic}
        responder.resumed = True
        sent = len(server.message_requests)
        refused = plandag("resume", run_id, "--instruction", "Try again", "--store", store)
        assert refused.exit_code == 2, refused.output
        assert "give them again: --base-url http://<user>:<password>@127.0.0.1:" in " ".join(
            refused.output.split()
        )
        assert len(server.message_requests) == sent
        resumed = plandag(
            "resume", run_id, "--instruction", "Try again", "--base-url", url, "--store", store
        )
        assert resumed.exit_code == 0, resumed.output
        later = server.message_requests[sent:]
        assert later
        assert {request.headers["authorization"] for request in later} == {basic}
        rebuilt = plandag(
            "research", "--from-run", run_id, "--output", "out/again.md", "--store", store
        )
        assert rebuilt.exit_code == 0, rebuilt.output
        outputs += [refused.output, resumed.output, rebuilt.output]
    gc.collect()
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert password.encode() not in path.read_bytes(), path
    for text in outputs:
        assert password not in text
