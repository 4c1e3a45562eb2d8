"""``plandag runs``, ``reject`` arguments, and how stored runs are listed (issue 6)."""

from __future__ import annotations

import json
from pathlib import Path

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
