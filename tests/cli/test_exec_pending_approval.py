"""A pending approval never holds effect-free branches: ``exec --approve never`` runs the
steps without effects, saves their results and exits 4; ``plandag approve`` goes on from
them (they never run again) and runs the step with effects."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from plandag.cli.app import app
from plandag.store import open_store

TOOLS_FILE = '''
import os
from pathlib import Path

from plandag import tool

LOG = Path(os.environ["EFFECT_LOG"])


def _log(line: str) -> None:
    with LOG.open("a", encoding="utf-8") as log:
        log.write(line + "\\n")


@tool
def lookup(name: str) -> dict:
    """Look a name up; returns its score."""
    _log(f"lookup {name}")
    return {"name": name, "score": len(name)}


@tool(effects="write")
def archive(score: int) -> str:
    """Archive SCORE in the ledger."""
    _log(f"archive {score}")
    return f"archived {score}"
'''

PLAN = {
    "version": 1,
    "goal": "Score two names, archive one",
    "steps": [
        {"id": 1, "tool": "lookup", "args": {"name": "abc"}},
        {"id": 2, "tool": "archive", "args": {"score": "<step_1_result.score>"}},
        {"id": 3, "tool": "lookup", "args": {"name": "de"}},
    ],
    "output": {"archived": "<step_2_result>", "other": "<step_3_result.score>"},
}


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EFFECT_LOG", str(tmp_path / "effects.log"))
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "store" / "runs.sqlite3"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tools.py").write_text(TOOLS_FILE, encoding="utf-8")
    (tmp_path / "plan.json").write_text(json.dumps(PLAN), encoding="utf-8")


def plandag(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def test_exec_runs_the_effect_free_steps_while_approval_is_pending(tmp_path: Path) -> None:
    first = plandag("exec", "plan.json", "--tools", "tools.py", "--approve", "never", "--json")
    assert first.exit_code == 4, first.output
    document = json.loads(first.stdout)
    assert document["status"] == "awaiting_approval"
    steps = {step["id"]: step["status"] for step in document["steps"]}
    assert steps == {1: "succeeded", 2: "skipped", 3: "succeeded"}
    log = tmp_path / "effects.log"
    assert sorted(log.read_text().splitlines()) == ["lookup abc", "lookup de"]
    run_id = document["run_id"]
    store = open_store(tmp_path / "store" / "runs.sqlite3")
    try:
        saved = store.steps(run_id)
        assert saved[1].result == {"name": "abc", "score": 3}
        assert saved[3].result == {"name": "de", "score": 2}
        assert saved[2].attempts == 0
        assert store.run(run_id).status == "awaiting_approval"
    finally:
        store.close()

    approved = plandag("approve", run_id, "--json")
    assert approved.exit_code == 0, approved.output
    assert json.loads(approved.stdout)["output"] == {"archived": "archived 3", "other": 2}
    # the completed effect-free steps were not run again
    assert sorted(log.read_text().splitlines()) == ["archive 3", "lookup abc", "lookup de"]
