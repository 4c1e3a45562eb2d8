"""``plandag exec PLAN --planner`` with people in the loop: a repair that adds a
step with effects is a new plan version that passes the same approval as the plan; with
``--approve never`` the run waits (exit 4) and ``plandag approve`` continues it, the steps
that completed before never running again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from plandag.cli.app import app
from plandag.store import open_store
from plandag.testing import MessagesServer

TOOLS_FILE = '''
import os
from pathlib import Path

from plandag import tool
from plandag.errors import PermanentStepError

LOG = Path(os.environ["EFFECT_LOG"])


def _log(line: str) -> None:
    with LOG.open("a", encoding="utf-8") as log:
        log.write(line + "\\n")


@tool
def lookup(name: str) -> dict:
    """Look a name up; returns its score."""
    _log(f"lookup {name}")
    return {"name": name, "score": len(name)}


@tool
def fetch(name: str) -> dict:
    """A legacy service that knows no name with an 'x'."""
    raise PermanentStepError(f"legacy service: unknown name {name}", reason="tool_error")


@tool(effects="write")
def archive(score: int) -> str:
    """Archive SCORE in the ledger."""
    _log(f"archive {score}")
    return f"archived {score}"
'''

PLAN = {
    "version": 1,
    "goal": "Score a name",
    "steps": [
        {"id": 1, "tool": "lookup", "args": {"name": "a"}},
        {"id": 2, "tool": "fetch", "args": {"name": "xyz"}},
    ],
    "output": "<step_2_result.score>",
}

PATCH = {
    "g": "Score a name",
    "s": [
        {"i": 3, "t": "lookup", "a": {"name": "xyz"}},
        {"i": 4, "t": "archive", "a": {"score": "<step_3_result.score>"}, "d": [3]},
    ],
    "o": "<step_4_result>",
}


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    monkeypatch.setenv("EFFECT_LOG", str(tmp_path / "effects.log"))
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "store" / "runs.sqlite3"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tools.py").write_text(TOOLS_FILE, encoding="utf-8")
    (tmp_path / "plan.json").write_text(json.dumps(PLAN), encoding="utf-8")


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


def exec_planner(server: MessagesServer, *more: str) -> Any:
    args = ["exec", "plan.json", "--tools", "tools.py", "--retries", "0"]
    args += ["--planner", "anthropic", "--base-url", server.url, *more]
    return CliRunner().invoke(app, args)


def test_a_repair_with_effects_waits_for_a_decision_then_approve_continues(
    server: MessagesServer, tmp_path: Path
) -> None:
    server.push_json(PATCH)
    first = exec_planner(server, "--approve", "never", "--json")
    assert first.exit_code == 4, first.output
    document = json.loads(first.stdout)
    assert document["status"] == "awaiting_approval"
    run_id = document["run_id"]
    log = tmp_path / "effects.log"
    assert "archive" not in log.read_text()  # the repair's effect did not run
    store = open_store(tmp_path / "store" / "runs.sqlite3")
    try:
        row = store.run(run_id)
        assert row.status == "awaiting_approval"
        assert row.awaiting_reason == "a repair adds steps with effects (3, 4)"
        versions = store.plan_versions(run_id)
        assert [(v.version, v.source) for v in versions] == [(1, "stored"), (2, "replan")]
        assert [step["id"] for step in versions[1].plan["steps"]] == [1, 3, 4]
    finally:
        store.close()

    approved = CliRunner().invoke(app, ["approve", run_id, "--json"])
    assert approved.exit_code == 0, approved.output
    assert json.loads(approved.stdout)["output"] == "archived 3"
    lines = log.read_text().splitlines()
    assert lines.count("lookup a") == 1  # completed before the decision: never again
    assert lines[-1] == "archive 3"
    assert lines.count("archive 3") == 1


def test_auto_approves_a_repair_that_only_writes(server: MessagesServer, tmp_path: Path) -> None:
    server.push_json(PATCH)
    result = exec_planner(server, "--approve", "auto", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["output"] == "archived 3"
    run_id = json.loads(result.stdout)["run_id"]
    store = open_store(tmp_path / "store" / "runs.sqlite3")
    try:
        assert store.run(run_id).status == "succeeded"
        assert {step_id: row.status for step_id, row in store.steps(run_id).items()} == {
            1: "succeeded",
            2: "failed",
            3: "succeeded",
            4: "succeeded",
        }
        assert store.steps(run_id)[2].superseded_by == [3, 4]
    finally:
        store.close()


def test_a_stored_plan_awaiting_approval_still_runs_its_effect_free_steps(
    server: MessagesServer, tmp_path: Path
) -> None:
    plan = {
        "version": 1,
        "goal": "Score and archive",
        "steps": [
            {"id": 1, "tool": "lookup", "args": {"name": "abcd"}},
            {"id": 2, "tool": "archive", "args": {"score": "<step_1_result.score>"}},
        ],
        "output": "<step_2_result>",
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    first = exec_planner(server, "--approve", "never", "--json")
    assert first.exit_code == 4, first.output
    document = json.loads(first.stdout)
    assert document["status"] == "awaiting_approval"
    log = tmp_path / "effects.log"
    assert log.read_text().splitlines() == ["lookup abcd"]  # ran while the decision waits
    run_id = document["run_id"]
    store = open_store(tmp_path / "store" / "runs.sqlite3")
    try:
        assert store.run(run_id).status == "awaiting_approval"
        assert store.steps(run_id)[1].result == {"name": "abcd", "score": 4}
    finally:
        store.close()

    approved = CliRunner().invoke(app, ["approve", run_id, "--json"])
    assert approved.exit_code == 0, approved.output
    assert json.loads(approved.stdout)["output"] == "archived 4"
    assert log.read_text().splitlines() == ["lookup abcd", "archive 4"]
    assert server.message_requests == []  # nothing failed: no model call
