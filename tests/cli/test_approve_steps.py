"""``plandag approve RUN_ID --hash H --reject-step N --edit-step 'N={...}'``: a
step-by-step approval from another shell makes a new plan version (new hash) approved by
the same person, drops the rejected step and what needs it, runs the edited step with its
new arguments, and records every per-step decision."""

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


@tool(effects="irreversible")
def notify(channel: str, score: int) -> str:
    """Tell CHANNEL the score (cannot be undone)."""
    _log(f"notify {channel} {score}")
    return f"told {channel}"
'''

PLAN = {
    "version": 1,
    "goal": "Score, write, tell",
    "steps": [
        {"id": 1, "tool": "lookup", "args": {"name": "abc"}},
        {
            "id": 2,
            "tool": "write_json",
            "args": {"path": "out/a.json", "data": {"score": "<step_1_result.score>"}},
        },
        {"id": 3, "tool": "notify", "args": {"channel": "all", "score": "<step_1_result.score>"}},
        {"id": 4, "tool": "notify", "args": {"channel": "boss", "score": 1}, "depends_on": [3]},
    ],
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


def waiting(tmp_path: Path) -> tuple[str, str]:
    first = plandag("exec", "plan.json", "--tools", "tools.py", "--approve", "never", "--json")
    assert first.exit_code == 4, first.output
    document = json.loads(first.stdout)
    return document["run_id"], document["approval"]["plan_hash"]


def test_approve_rejecting_one_step_and_editing_another(tmp_path: Path) -> None:
    run_id, first_hash = waiting(tmp_path)
    log = tmp_path / "effects.log"
    assert log.read_text().splitlines() == ["lookup abc"]

    approved = plandag(
        "approve",
        run_id,
        "--hash",
        first_hash,
        "--reject-step",
        "3",
        "--edit-step",
        '2={"path": "out/b.json"}',
        "--who",
        "ana",
        "--feedback",
        "nobody is told yet",
        "--json",
    )
    assert approved.exit_code == 0, approved.output
    assert json.loads(approved.stdout)["status"] == "succeeded"
    assert json.loads((tmp_path / "out" / "b.json").read_text()) == {"score": 3}
    assert not (tmp_path / "out" / "a.json").exists()
    assert log.read_text().splitlines() == ["lookup abc"]  # no notify; lookup not re-run

    store = open_store(tmp_path / "store" / "runs.sqlite3")
    try:
        versions = store.plan_versions(run_id)
        assert [(v.version, v.source, v.approved_by) for v in versions] == [
            (1, "stored", None),
            (2, "amended", "ana"),
        ]
        assert versions[0].hash == first_hash
        assert versions[1].hash != first_hash
        assert f"plan version 2 (hash {versions[1].hash})" in " ".join(approved.stderr.split())
        assert [step["id"] for step in versions[1].plan["steps"]] == [1, 2]
        assert [(d.version, d.decision, d.who, d.feedback) for d in store.decisions(run_id)] == [
            (1, "asked", None, None),
            (1, "amended", "ana", "nobody is told yet"),
            (2, "approved", "ana", None),
        ]
        assert [(d.step_id, d.decision, d.args) for d in store.step_decisions(run_id)] == [
            (1, "approved", None),
            (2, "edited", {"path": "out/b.json", "data": {"score": "<step_1_result.score>"}}),
            (3, "rejected", None),
            (4, "dropped", None),
        ]
        steps = store.steps(run_id)
        assert {step_id: (row.status, row.reason) for step_id, row in steps.items()} == {
            1: ("succeeded", None),
            2: ("succeeded", None),
            3: ("skipped", "rejected"),
            4: ("skipped", "rejected"),
        }
        assert store.run(run_id).status == "succeeded"
    finally:
        store.close()
    trace = [
        json.loads(line)
        for line in (tmp_path / "store" / "traces" / f"{run_id}.jsonl").read_text().splitlines()
    ]
    approvals = [
        (line["attrs"]["version"], line["attrs"]["decision"])
        for line in trace
        if line["type"] == "span" and line["kind"] == "approval"
    ]
    assert approvals == [(1, "asked"), (1, "amended"), (2, "approved")]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--reject-step", "9"], "no step 9 in the plan"),
        (["--edit-step", "2"], "write STEP=JSON"),
        (["--edit-step", "2={path}"], "is not JSON"),
        (["--edit-step", '2=["out/b.json"]'], "give a JSON object"),
        (["--edit-step", '2={"path": "/etc/b.json"}'], "does not compile"),
        (["--edit-step", '4={"channel": "x"}', "--reject-step", "3"], "dropped with a rejected"),
    ],
)
def test_step_choices_that_do_not_fit_are_refused_with_nothing_recorded(
    tmp_path: Path, options: list[str], message: str
) -> None:
    run_id, first_hash = waiting(tmp_path)
    refused = plandag("approve", run_id, "--hash", first_hash, *options)
    assert refused.exit_code == 2, refused.output
    assert message in " ".join(refused.stderr.split())
    store = open_store(tmp_path / "store" / "runs.sqlite3")
    try:
        assert store.run(run_id).status == "awaiting_approval"
        assert [v.version for v in store.plan_versions(run_id)] == [1]
        assert store.step_decisions(run_id) == []
    finally:
        store.close()
    assert not (tmp_path / "out").exists()
