"""``plandag runs``, ``reject`` arguments, and how stored runs are listed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from plandag.cli import app
from plandag.store import open_store

SECRET = "sk-ant-api03-" + "Z" * 40


def test_runs_lists_newest_first_masks_secrets_and_flags_dead_processes(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    store = open_store(path)
    try:
        store.create_run("aaa1", command="exec", goal="first", params={}, options={})
        store.update_run("aaa1", status="succeeded")
        store.create_run(
            "bbb2", command="run", goal=f"call with Bearer {SECRET}", params={}, options={}
        )
        store.update_run("bbb2", pid=2**22 + 12345)  # no such process: it died mid-run
    finally:
        store.close()
    result = CliRunner().invoke(app, ["runs", "--store", str(path), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [(row["run_id"], row["status"], row["process_gone"]) for row in rows] == [
        ("bbb2", "running", True),
        ("aaa1", "succeeded", False),
    ]
    assert SECRET not in result.stdout
    assert rows[0]["goal"] == "call with Bearer [secret]"
    table = CliRunner().invoke(app, ["runs", "--store", str(path)], env={"COLUMNS": "80"})
    assert "crashed (resume it)" in table.stdout
    assert SECRET not in table.stdout


def test_reject_needs_feedback_in_words(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["reject", "abc", "--feedback", "  ", "--store", str(tmp_path / "s.sqlite3")]
    )
    assert result.exit_code == 2
    assert "--feedback is empty" in result.stderr


def test_a_goal_with_markup_is_listed_as_written(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    store = open_store(path)
    try:
        store.create_run("m1", command="exec", goal="weird [/] goal [bold]x", params={}, options={})
        store.update_run("m1", status="succeeded")
    finally:
        store.close()
    result = CliRunner().invoke(app, ["runs", "--store", str(path)], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "weird [/] goal [bold]x" in result.stdout


def test_approve_refuses_tools_changed_since_the_plan_and_records_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "store" / "runs.sqlite3"))
    tools = tmp_path / "tools.py"
    tools.write_text(
        'from plandag import tool\n\n\n@tool(effects="write")\ndef note(text: str) -> str:\n'
        '    """Note TEXT."""\n    return text\n',
        encoding="utf-8",
    )
    (tmp_path / "plan.json").write_text(
        json.dumps({"steps": [{"id": 1, "tool": "note", "args": {"text": "hi"}}]}),
        encoding="utf-8",
    )
    first = CliRunner().invoke(
        app, ["exec", "plan.json", "--tools", "tools.py", "--approve", "never", "--json"]
    )
    assert first.exit_code == 4, first.output
    run_id = json.loads(first.stdout)["run_id"]
    tools.write_text(tools.read_text() + "\n# changed after the review\n", encoding="utf-8")
    refused = CliRunner().invoke(app, ["approve", run_id])
    assert refused.exit_code == 2
    assert "changed since the plan was made" in refused.stderr
    store = open_store(tmp_path / "store" / "runs.sqlite3")
    try:
        assert store.run(run_id).status == "awaiting_approval"  # nothing was decided
        assert [d.decision for d in store.decisions(run_id)] == ["asked"]
    finally:
        store.close()


def test_approve_on_a_crashed_run_points_to_resume(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    store = open_store(path)
    try:
        store.create_run("c1", command="exec", goal=None, params={}, options={})
        store.update_run("c1", pid=2**22 + 54321)
    finally:
        store.close()
    result = CliRunner().invoke(app, ["approve", "c1", "--store", str(path)])
    assert result.exit_code == 2
    assert "crashed while running; `plandag resume c1` goes on" in result.stderr
