"""``plandag approve`` and ``reject`` without ``--hash`` are refused once more than one plan
version has been shown to a person since the last decision: the refusal lists each version
with its hash, and the decision then names the one reviewed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from plandag.cli.app import app
from plandag.store import open_store


def plan(path: str) -> dict[str, Any]:
    return {
        "version": 1,
        "goal": "write a note",
        "steps": [{"id": 1, "tool": "write_json", "args": {"path": path, "data": {"x": 1}}}],
    }


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "store" / "runs.sqlite3"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plan.json").write_text(json.dumps(plan("out/a.json")), encoding="utf-8")


def plandag(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def awaiting_with_two_versions_shown(tmp_path: Path) -> tuple[str, str, str]:
    """A run awaiting a decision on version 2, after versions 1 and 2 were both shown."""
    first = plandag("exec", "plan.json", "--approve", "never", "--json")
    assert first.exit_code == 4, first.output
    document = json.loads(first.stdout)
    run_id, first_hash = document["run_id"], document["approval"]["plan_hash"]
    store = open_store(tmp_path / "store" / "runs.sqlite3")
    try:
        [version] = store.plan_versions(run_id)
        assert version.shown_at is not None  # shown when the request was made
        second = plan("out/b.json")
        second_hash = "b" * 64
        store.add_plan_version(run_id, 2, second, second_hash, "replan")
        store.record_decision(run_id, 2, second_hash, "asked")
        assert [v.version for v in store.shown_since_decision(run_id)] == [1, 2]
    finally:
        store.close()
    return run_id, first_hash, second_hash


def test_approve_without_hash_is_refused_after_two_versions_were_shown(tmp_path: Path) -> None:
    run_id, first_hash, second_hash = awaiting_with_two_versions_shown(tmp_path)
    refused = plandag("approve", run_id)
    assert refused.exit_code == 2
    message = " ".join(refused.stderr.split())
    assert "2 plan versions were shown since the last decision" in message
    assert f"version 1: {first_hash}" in message
    assert f"version 2: {second_hash}" in message
    assert f"plandag approve {run_id} --hash HASH" in message
    assert not (tmp_path / "out").exists()

    rejected = plandag("reject", run_id, "--feedback", "not this one")
    assert rejected.exit_code == 2
    assert "2 plan versions were shown" in " ".join(rejected.stderr.split())

    store = open_store(tmp_path / "store" / "runs.sqlite3")
    try:
        assert store.run(run_id).status == "awaiting_approval"  # nothing was decided
        assert [d.decision for d in store.decisions(run_id)] == ["asked", "asked"]
    finally:
        store.close()

    stale = plandag("approve", run_id, "--hash", first_hash)
    assert stale.exit_code == 2
    assert "is not the plan awaiting a decision" in stale.stderr


def test_approve_with_the_hash_of_the_current_version_runs_it(tmp_path: Path) -> None:
    run_id, _, second_hash = awaiting_with_two_versions_shown(tmp_path)
    # the store's hash of version 2 is a stand-in: the approval binds to what is stored
    approved = plandag("approve", run_id, "--hash", second_hash, "--who", "ana")
    assert approved.exit_code == 0, approved.output
    assert json.loads((tmp_path / "out" / "b.json").read_text()) == {"x": 1}
    assert not (tmp_path / "out" / "a.json").exists()
    store = open_store(tmp_path / "store" / "runs.sqlite3")
    try:
        assert store.run(run_id).status == "succeeded"
        assert [(d.version, d.decision, d.who) for d in store.decisions(run_id)] == [
            (1, "asked", None),
            (2, "asked", None),
            (2, "approved", "ana"),
        ]
        assert store.shown_since_decision(run_id) == []
    finally:
        store.close()


def test_one_version_shown_needs_no_hash(tmp_path: Path) -> None:
    first = plandag("exec", "plan.json", "--approve", "never", "--json")
    run_id = json.loads(first.stdout)["run_id"]
    approved = plandag("approve", run_id)
    assert approved.exit_code == 0, approved.output
    assert json.loads((tmp_path / "out" / "a.json").read_text()) == {"x": 1}


def test_the_json_approval_request_carries_the_plan_estimate(tmp_path: Path) -> None:
    first = plandag("exec", "plan.json", "--approve", "never", "--json")
    assert first.exit_code == 4, first.output
    approval = json.loads(first.stdout)["approval"]
    assert approval["estimate_text"] == "estimated cost $0.0000, time 0.02 s (critical path 1)"
    assert approval["estimate"]["unknown"] == []
    assert (approval["estimate"]["cost_usd"], approval["estimate"]["seconds"]) == (0.0, 0.02)
