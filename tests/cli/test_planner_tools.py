"""What a planner is given: the built-in tools, the job's and ``--tools`` (a file or an
installed application's name), never every installed application's; a stored plan that
names an installed application's tool still compiles."""

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

LOOKUP_PLAN = {"g": "score a", "s": [{"i": 1, "t": "lookup", "a": {"name": "a"}, "d": []}]}
NFE_PLAN = {"g": "parse", "s": [{"i": 1, "t": "nfe_parse", "a": {"data": "x"}, "d": []}]}


@pytest.fixture(autouse=True)
def project(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "store" / "runs.sqlite3"))
    folder = (tmp_path / "work").resolve()
    folder.mkdir()
    monkeypatch.chdir(folder)
    (folder / "tools.py").write_text(TOOLS_FILE, encoding="utf-8")
    return folder


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


def plandag(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def _system_prompt(server: MessagesServer) -> str:
    return json.dumps(server.message_requests[0].json["system"])


def test_the_planner_is_shown_the_built_ins_and_tools_files_only(
    server: MessagesServer, project: Path
) -> None:
    server.push_json(LOOKUP_PLAN)
    result = plandag(
        "plan", "score a", "-o", "p.json", "--tools", "tools.py", "--base-url", server.url
    )

    assert result.exit_code == 0, result.output
    system = _system_prompt(server)
    assert "lookup" in system
    assert "write_json" in system
    assert "nfe_parse" not in system
    assert "nfe_total_matches" not in system


def test_tools_names_an_installed_application_to_give_its_tools(
    server: MessagesServer, project: Path
) -> None:
    server.push_json(NFE_PLAN)
    result = plandag(
        "plan", "parse", "-o", "p.json", "--tools", "nfe", "--base-url", server.url,
        "--max-repairs", "0",
    )  # fmt: skip

    assert "nfe_parse" in _system_prompt(server)
    assert "unknown_tool" not in result.output


def test_a_plan_naming_a_tool_the_planner_was_not_given_fails_with_the_way_to_give_it(
    server: MessagesServer, project: Path
) -> None:
    server.push_json(NFE_PLAN)
    result = plandag(
        "plan", "parse", "-o", "p.json", "--base-url", server.url, "--max-repairs", "0"
    )

    assert result.exit_code == 2
    assert "error[unknown_tool]: tool 'nfe_parse' is not registered" in result.stderr
    assert "installed application 'nfe', not given to this run: pass --tools nfe" in (result.stderr)
    assert not (project / "p.json").exists()


def test_check_compiles_a_stored_plan_naming_an_installed_applications_tool(
    project: Path,
) -> None:
    plan = {
        "version": 1,
        "goal": "parse one invoice",
        "steps": [
            {"id": 1, "tool": "read_file", "args": {"path": "a.xml"}},
            {"id": 2, "tool": "nfe_parse", "args": {"data": "<step_1_result>"}, "depends_on": [1]},
        ],
    }
    (project / "stored.json").write_text(json.dumps(plan), encoding="utf-8")

    result = plandag("check", "stored.json")

    assert result.exit_code == 0, result.output
    assert "stored.json: ok, 2 steps, 0 warnings" in result.stderr


def test_tools_lists_every_installed_application_and_refuses_an_unknown_entry() -> None:
    listed = plandag("tools", "--json")
    assert listed.exit_code == 0, listed.output
    assert "nfe_parse" in {item["name"] for item in json.loads(listed.stdout)["tools"]}

    unknown = plandag("tools", "--tools", "nope")
    assert unknown.exit_code == 2
    assert "--tools nope: no such file, and no installed application of that name" in (
        unknown.output
    )
