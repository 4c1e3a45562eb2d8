"""The step limit on the command line: ``--max-steps N`` and config ``max_steps``.

A 1000-step plan is refused by default (500) with a diagnostic naming the limit and how to
raise it, on ``check``, ``graph``, ``exec``, ``plan`` and ``run``; each accepts it with
``--max-steps 1000`` or ``max_steps = 1000`` in plandag.toml. The limit is stored with an
``exec`` run, so ``approve`` compiles the plan again with it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from plandag.cli.app import app
from plandag.testing import MessagesServer

TOOLS_FILE = '''
from plandag import tool


@tool
def lookup(name: str) -> dict:
    """Look a name up; returns its score."""
    return {"name": name, "score": len(name)}
'''

REFUSED = "error[too_many_steps]: the plan has 1000 steps; this run allows at most 500 (max_steps)"
RAISE_IT = "raise the limit with --max-steps N (config key max_steps"


def plan_of(count: int, *, effect: bool = False) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [
        {"id": n, "tool": "json_select", "args": {"data": {"n": n}, "expr": "n"}}
        for n in range(1, count + 1)
    ]
    if effect:
        steps[-1] = {"id": count, "tool": "write_json", "args": {"path": "out.json", "data": 1}}
    return {"version": 1, "goal": "many steps", "steps": steps, "output": "<step_1_result>"}


# A 1000-step plan is longer than the planner's max_tokens (8192) at four characters a token:
# the server lets it through whole, and reports this usage.
USAGE = {"input_tokens": 1000, "output_tokens": 4000}


def wire_plan(count: int) -> dict[str, Any]:
    steps = [{"i": n, "t": "lookup", "a": {"name": f"n{n}"}, "d": []} for n in range(1, count + 1)]
    return {"g": "many steps", "s": steps, "o": "<step_1_result.score>"}


@pytest.fixture(autouse=True)
def project(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "store" / "runs.sqlite3"))
    folder = (tmp_path / "work").resolve()
    folder.mkdir()
    for parent in (folder, *folder.parents):
        assert not (parent / "plandag.toml").exists(), parent
        assert not (parent / "pyproject.toml").exists(), parent
    monkeypatch.chdir(folder)
    (folder / "big.json").write_text(json.dumps(plan_of(1000)), encoding="utf-8")
    (folder / "tools.py").write_text(TOOLS_FILE, encoding="utf-8")
    return folder


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer(enforce_max_tokens=False) as running:
        yield running


def plandag(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def limit_in_config(project: Path) -> None:
    (project / "plandag.toml").write_text("max_steps = 1000\n", encoding="utf-8")


# --- check ----------------------------------------------------------------------------------


def test_check_refuses_1000_steps_by_default_naming_the_limit_and_the_option() -> None:
    result = plandag("check", "big.json")
    assert result.exit_code == 2
    assert f"big.json: plan: {REFUSED}" in result.stderr
    assert RAISE_IT in result.stderr
    assert "big.json: 1 error(s); the plan does not compile" in result.stderr


def test_check_json_refuses_1000_steps_with_one_diagnostic() -> None:
    result = plandag("check", "big.json", "--json")
    assert result.exit_code == 2
    (diagnostic,) = json.loads(result.stdout)
    assert diagnostic["code"] == "too_many_steps"
    assert (
        diagnostic["message"] == "the plan has 1000 steps; this run allows at most 500 (max_steps)"
    )


def test_check_accepts_1000_steps_with_max_steps_1000() -> None:
    result = plandag("check", "big.json", "--max-steps", "1000")
    assert result.exit_code == 0, result.output
    assert "big.json: ok, 1000 steps, 0 warnings" in result.stderr


def test_check_accepts_1000_steps_with_max_steps_in_the_config_file(project: Path) -> None:
    limit_in_config(project)
    result = plandag("check", "big.json")
    assert result.exit_code == 0, result.output
    assert "big.json: ok, 1000 steps" in result.stderr


def test_the_flag_wins_over_the_config_file(project: Path) -> None:
    limit_in_config(project)
    result = plandag("check", "big.json", "--max-steps", "999")
    assert result.exit_code == 2
    assert "this run allows at most 999 (max_steps)" in result.stderr


def test_max_steps_must_be_a_positive_integer() -> None:
    assert plandag("check", "big.json", "--max-steps", "0").exit_code == 2
    assert plandag("check", "big.json", "--max-steps", "none").exit_code == 2


def test_config_shows_max_steps_and_where_it_came_from(project: Path) -> None:
    assert json.loads(plandag("config", "--json").stdout)["max_steps"] == {
        "value": 500,
        "source": "default",
    }
    limit_in_config(project)
    assert json.loads(plandag("config", "--json").stdout)["max_steps"] == {
        "value": 1000,
        "source": str(project / "plandag.toml"),
    }


# --- graph ----------------------------------------------------------------------------------


def test_graph_refuses_1000_steps_by_default() -> None:
    result = plandag("graph", "big.json")
    assert result.exit_code == 2
    assert REFUSED in result.stderr


def test_graph_accepts_1000_steps_with_max_steps_1000() -> None:
    result = plandag("graph", "big.json", "--max-steps", "1000")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("flowchart TD\n")
    assert '1000["1000: json_select"]' in result.stdout


def test_graph_accepts_1000_steps_with_max_steps_in_the_config_file(project: Path) -> None:
    limit_in_config(project)
    assert plandag("graph", "big.json").exit_code == 0


# --- exec -----------------------------------------------------------------------------------


def test_exec_refuses_1000_steps_by_default_before_anything_runs() -> None:
    result = plandag("exec", "big.json", "--json")
    assert result.exit_code == 2
    document = json.loads(result.stdout)
    assert document["status"] == "invalid_plan"
    assert [d["code"] for d in document["diagnostics"]] == ["too_many_steps"]


def test_exec_runs_1000_steps_with_max_steps_1000() -> None:
    result = plandag("exec", "big.json", "--max-steps", "1000", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["status"] == "succeeded"
    assert len(document["steps"]) == 1000
    assert document["output"] == 1


def test_exec_runs_1000_steps_with_max_steps_in_the_config_file(project: Path) -> None:
    limit_in_config(project)
    result = plandag("exec", "big.json", "--json")
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["steps"]) == 1000


def test_approve_compiles_the_stored_run_again_with_its_own_limit(project: Path) -> None:
    (project / "effects.json").write_text(json.dumps(plan_of(1000, effect=True)), "utf-8")
    waiting = plandag("exec", "effects.json", "--max-steps", "1000", "--approve", "never", "--json")
    assert waiting.exit_code == 4, waiting.output
    run_id = json.loads(waiting.stdout)["run_id"]
    approved = plandag("approve", run_id, "--json")
    assert approved.exit_code == 0, approved.output
    assert json.loads((project / "out.json").read_text(encoding="utf-8")) == 1


# --- plan and run (a model writes the plan) -------------------------------------------------


def test_plan_refuses_a_1000_step_plan_by_default(server: MessagesServer, project: Path) -> None:
    server.push_json(wire_plan(1000), usage=USAGE)
    result = plandag(
        "plan", "score", "-o", "p.json", "--tools", "tools.py", "--base-url", server.url,
        "--max-repairs", "0",
    )  # fmt: skip
    assert result.exit_code == 2
    assert "error[too_many_steps]: the plan has 1000 steps; this run allows at most 500" in (
        result.stderr
    )
    assert not (project / "p.json").exists()


@pytest.mark.parametrize("where", ["flag", "config"])
def test_plan_accepts_a_1000_step_plan_with_max_steps_1000(
    server: MessagesServer, project: Path, where: str
) -> None:
    server.push_json(wire_plan(1000), usage=USAGE)
    more = ["--max-steps", "1000"] if where == "flag" else []
    if where == "config":
        limit_in_config(project)
    result = plandag(
        "plan", "score", "-o", "p.json", "--tools", "tools.py", "--base-url", server.url,
        "--max-repairs", "0", *more,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    written = json.loads((project / "p.json").read_text(encoding="utf-8"))
    assert len(written["steps"]) == 1000


def test_run_refuses_a_1000_step_plan_by_default(server: MessagesServer) -> None:
    for _ in range(3):  # the first plan and its two repairs
        server.push_json(wire_plan(1000), usage=USAGE)
    result = plandag("run", "score", "--tools", "tools.py", "--base-url", server.url)
    assert result.exit_code == 2, result.output
    assert "error[too_many_steps]: the plan has 1000 steps; this run allows at most 500" in (
        result.output
    )


@pytest.mark.parametrize("where", ["flag", "config"])
def test_run_accepts_a_1000_step_plan_with_max_steps_1000(
    server: MessagesServer, project: Path, where: str
) -> None:
    server.push_json(wire_plan(1000), usage=USAGE)
    more = ["--max-steps", "1000"] if where == "flag" else []
    if where == "config":
        limit_in_config(project)
    result = plandag(
        "run", "score", "--tools", "tools.py", "--base-url", server.url, "--json", *more
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["status"] == "succeeded"
    assert len(document["steps"]) == 1000
    assert document["answer"] == 2  # len("n1")
