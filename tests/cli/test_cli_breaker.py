"""``exec --breaker-after``: the circuit breaker on the command line, on by default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from plandag.cli import app

TOOLS_FILE = '''
from plandag import tool

@tool
def broken(name: str) -> str:
    """Always fails."""
    raise RuntimeError(f"down for {name}")
'''


def exec_plan(tmp_path: Path, *flags: str) -> dict[str, object]:
    tools = tmp_path / "tools.py"
    tools.write_text(TOOLS_FILE, encoding="utf-8")
    plan = {"steps": [{"id": n, "tool": "broken", "args": {"name": str(n)}} for n in (1, 2, 3, 4)]}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan), encoding="utf-8")
    result = CliRunner().invoke(
        app,
        ["exec", str(path), "--tools", str(tools), "--json", "--max-concurrency", "1", *flags],
    )
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    assert isinstance(document, dict)
    return document


def test_the_fourth_step_fails_at_once_by_default(tmp_path: Path) -> None:
    document = exec_plan(tmp_path)
    steps = document["steps"]
    assert isinstance(steps, list)
    assert [(step["reason"], step["attempts"]) for step in steps] == [
        ("tool_error", 1),
        ("tool_error", 1),
        ("tool_error", 1),
        ("dependency_down", 0),
    ]
    assert document["dependencies_down"] == [
        {
            "kind": "tool",
            "name": "broken",
            "steps": [1, 2, 3],
            "detail": "tool_error: RuntimeError: down for 3",
            "time": document["dependencies_down"][0]["time"],  # type: ignore[index]
        }
    ]


def test_breaker_after_sets_k_and_zero_turns_it_off(tmp_path: Path) -> None:
    two = exec_plan(tmp_path, "--breaker-after", "2")
    assert [step["reason"] for step in two["steps"]] == [  # type: ignore[union-attr]
        "tool_error",
        "tool_error",
        "dependency_down",
        "dependency_down",
    ]
    off = exec_plan(tmp_path, "--breaker-after", "0")
    assert [step["reason"] for step in off["steps"]] == ["tool_error"] * 4  # type: ignore[union-attr]
    assert off["dependencies_down"] == []


def test_a_completion_threshold_past_one_is_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plandag.toml").write_text("total_replan_below = 2\n", encoding="utf-8")
    result = CliRunner().invoke(
        app, ["run", "a task", "--base-url", "http://127.0.0.1:9"], env={"ANTHROPIC_API_KEY": "t"}
    )
    assert result.exit_code == 2
    assert "total_replan_below = 2" in result.stderr
    assert "give a fraction from 0 to 1" in " ".join(result.stderr.split())
    flag = CliRunner().invoke(
        app,
        ["run", "a task", "--total-replan-below", "1.5", "--base-url", "http://127.0.0.1:9"],
        env={"ANTHROPIC_API_KEY": "t"},
    )
    assert flag.exit_code == 2
