"""The plan library from the command line beyond the first run: a plain ``plandag run``
saves its plan under a task type named from it, a library run finished later by
``plandag approve`` or ``plandag resume`` counts its use and saves its plan, and bad input
to ``plandag library``, ``plandag run --task-type/--param`` and ``plandag stats`` gives a
clear error and exit 2, never a traceback. Against the local Messages API server."""

from __future__ import annotations

import json
import sqlite3
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

SCORE_PLAN = {
    "g": "Score a name",
    "p": [{"n": "name", "t": "string", "h": "the name to score"}],
    "s": [{"i": 1, "t": "lookup", "a": {"name": "<param.name>"}, "d": []}],
    "o": {"json": '{"score":"<step_1_result.score>"}'},
}

SAVE_PLAN = {
    "g": "Save a name's score",
    "p": [{"n": "name", "t": "string"}],
    "s": [
        {"i": 1, "t": "lookup", "a": {"name": "<param.name>"}, "d": []},
        {
            "i": 2,
            "t": "write_json",
            "a": {"path": "out/score.json", "data": "<step_1_result>"},
            "d": [1],
        },
    ],
    "o": "<step_1_result.score>",
}


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "store" / "runs.sqlite3"))
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


@pytest.fixture
def tools(tmp_path: Path) -> Path:
    path = tmp_path / "scores.py"
    path.write_text(TOOLS_FILE, encoding="utf-8")
    return path


def plandag(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"ANTHROPIC_API_KEY": "test"})


def run(server: MessagesServer, tools: Path, task: str, *args: str) -> Any:
    return plandag(
        "run", task, "--tools", str(tools), "--base-url", server.url, "--retries", "0", *args
    )


def purposes(run_id: str) -> list[str]:
    store = sqlite3.connect(Path("store/runs.sqlite3"))
    try:
        rows = store.execute(
            "SELECT purpose FROM llm_call WHERE run_id = ? ORDER BY rowid", (run_id,)
        ).fetchall()
    finally:
        store.close()
    return [row[0] for row in rows]


def test_a_plain_run_saves_its_plan_and_a_later_one_is_routed_to_it(
    server: MessagesServer, tools: Path
) -> None:
    server.push_json(SCORE_PLAN)
    first = run(server, tools, "Score ab", "--param", "name=ab")
    assert first.exit_code == 0, first.output
    assert len(server.message_requests) == 1  # the planner only: nothing to route to
    assert "library: saved score_name-8215c3db version 1" in first.stderr
    assert "library: task type score_name-8215c3db was named from the plan" in first.stderr
    [entry] = json.loads(plandag("library", "list", "--json").stdout)
    assert (entry["task_type"], entry["latest"], entry["tools"]) == (
        "score_name-8215c3db",
        1,
        ["lookup"],
    )

    server.clear_requests()
    server.push_json({"task_type": "score_name-8215c3db", "new": False, "params": {"name": "abcd"}})
    later = run(server, tools, "What is the score of abcd?", "--json")
    assert later.exit_code == 0, later.output
    assert len(server.message_requests) == 1  # 1 routing call, 0 planner calls
    routed = json.loads(later.stdout)
    assert routed["answer"] == {"score": 4}
    assert routed["llm_calls"] == []
    assert routed["library"]["how"] == "routed"
    assert purposes(routed["run_id"]) == ["routing"]


def test_a_new_task_type_approved_later_is_saved_approved_by_the_person(
    server: MessagesServer, tools: Path
) -> None:
    server.push_json(SAVE_PLAN)
    held = run(
        server,
        tools,
        "Save ab",
        "--task-type",
        "save_score",
        "--param",
        "name=ab",
        "--approve",
        "never",
        "--json",
    )
    assert held.exit_code == 4, held.output
    run_id = json.loads(held.stdout)["run_id"]
    assert json.loads(plandag("library", "list", "--json").stdout) == []

    approved = plandag("approve", run_id, "--who", "ana")
    assert approved.exit_code == 0, approved.output
    assert "library: saved save_score version 1 (approved by ana)" in approved.stderr
    [version] = json.loads(plandag("library", "show", "save_score", "--json").stdout)
    assert (version["status"], version["approved_by"], version["source_run"]) == (
        "admitted",
        "ana",
        run_id,
    )
    [figures] = json.loads(plandag("stats", "--json").stdout)
    assert (figures["task_type"], figures["runs"]) == ("save_score", 1)

    # a reused run awaiting approval, approved later: its use counts as a success
    server.clear_requests()
    reused = run(
        server,
        tools,
        "Save xyz",
        "--task-type",
        "save_score",
        "--param",
        "name=xyz",
        "--approve",
        "never",
        "--json",
    )
    assert reused.exit_code == 4, reused.output
    assert server.requests == []
    reused_id = json.loads(reused.stdout)["run_id"]
    [before] = json.loads(plandag("library", "list", "--json").stdout)
    assert (before["uses"], before["successes"]) == (1, 0)
    again = plandag("approve", reused_id, "--who", "bo")
    assert again.exit_code == 0, again.output
    assert "library: recorded the run of save_score (succeeded)" in again.stderr
    [after] = json.loads(plandag("library", "list", "--json").stdout)
    assert (after["latest"], after["versions"], after["uses"], after["successes"]) == (1, 1, 1, 1)
    assert json.loads(Path("out/score.json").read_text(encoding="utf-8"))["name"] == "xyz"


def test_a_plain_run_approved_later_is_saved_under_its_derived_name(
    server: MessagesServer, tools: Path
) -> None:
    server.push_json(SAVE_PLAN)
    held = run(server, tools, "Save ab", "--param", "name=ab", "--approve", "never", "--json")
    assert held.exit_code == 4, held.output
    run_id = json.loads(held.stdout)["run_id"]
    assert json.loads(held.stdout)["library"]["task_type"] == "save_name_score-8c1b805c"
    approved = plandag("approve", run_id, "--who", "ana")
    assert approved.exit_code == 0, approved.output
    [entry] = json.loads(plandag("library", "list", "--json").stdout)
    assert (entry["task_type"], entry["latest"]) == ("save_name_score-8c1b805c", 1)


def test_a_rejected_step_makes_a_new_version_saved_by_the_same_rule(
    server: MessagesServer, tools: Path
) -> None:
    server.push_json(SAVE_PLAN)
    first = run(
        server,
        tools,
        "Save ab",
        "--task-type",
        "save_score",
        "--param",
        "name=ab",
        "--approve",
        "auto",
    )
    assert first.exit_code == 0, first.output
    held = run(
        server,
        tools,
        "Save xy",
        "--task-type",
        "save_score",
        "--param",
        "name=xy",
        "--approve",
        "never",
        "--json",
    )
    run_id = json.loads(held.stdout)["run_id"]
    decided = plandag("approve", run_id, "--who", "ana", "--reject-step", "2")
    assert decided.exit_code == 0, decided.output
    versions = json.loads(plandag("library", "show", "save_score", "--json").stdout)
    assert [(item["version"], item["approved_by"]) for item in versions] == [
        (1, "auto"),
        (2, "read-only"),  # step 2 (the write) rejected: what ran has no effect
    ]
    assert [step["tool"] for step in versions[1]["plan"]["steps"]] == ["lookup"]


BROKEN_TOOLS = '''

@tool
def broken(name: str) -> dict:
    """A service that is always down."""
    raise ValueError(f"service down for {name}")
'''


def test_an_escalated_run_resumed_later_saves_its_plan(server: MessagesServer, tools: Path) -> None:
    tools.write_text(TOOLS_FILE + BROKEN_TOOLS, encoding="utf-8")
    for number in (1, 2, 3):  # the plan and two replans fail: the no-progress cap
        server.push_json(
            {
                "g": "Score x",
                "s": [{"i": number, "t": "broken", "a": {"name": "x"}, "d": []}],
                "o": f'"<step_{number}_result>"',
            }
        )
    escalated = run(server, tools, "Score x", "--task-type", "score_x", "--json")
    assert escalated.exit_code == 5, escalated.output
    run_id = json.loads(escalated.stdout)["run_id"]
    assert json.loads(plandag("library", "list", "--json").stdout) == []
    server.push_json(
        {
            "g": "Score x",
            "s": [{"i": 4, "t": "lookup", "a": {"name": "x"}, "d": []}],
            "o": "<step_4_result>",
        }
    )
    resumed = plandag("resume", run_id, "--instruction", "use lookup", "--who", "maria")
    assert resumed.exit_code == 0, resumed.output
    [version] = json.loads(plandag("library", "show", "score_x", "--json").stdout)
    assert [step["tool"] for step in version["plan"]["steps"]] == ["lookup"]
    assert version["source_run"] == run_id
    assert "library: saved score_x version 1 (approved by read-only)" in resumed.stderr
    [figures] = json.loads(plandag("stats", "--json").stdout)
    # the run was handed to a person once: it stays counted as an escalation
    assert (figures["task_type"], figures["runs"], figures["escalations"]) == ("score_x", 1, 1)


def test_a_routed_run_approved_later_runs_with_the_routed_params(
    server: MessagesServer, tools: Path
) -> None:
    server.push_json(SAVE_PLAN)
    first = run(
        server,
        tools,
        "Save ab",
        "--task-type",
        "save_score",
        "--param",
        "name=ab",
        "--approve",
        "auto",
    )
    assert first.exit_code == 0, first.output
    server.push_json({"task_type": "save_score", "new": False, "params": {"name": "xyz"}})
    held = run(server, tools, "Save the score of xyz", "--approve", "never", "--json")
    assert held.exit_code == 4, held.output
    run_id = json.loads(held.stdout)["run_id"]
    approved = plandag("approve", run_id, "--who", "ana")
    assert approved.exit_code == 0, approved.output
    assert json.loads(Path("out/score.json").read_text(encoding="utf-8"))["name"] == "xyz"
    [entry] = json.loads(plandag("library", "list", "--json").stdout)
    assert (entry["versions"], entry["uses"], entry["successes"]) == (1, 1, 1)


def test_rm_of_a_version_an_unfinished_run_reuses_is_refused_unless_force(
    server: MessagesServer, tools: Path
) -> None:
    server.push_json(SAVE_PLAN)
    saved = run(
        server,
        tools,
        "Save ab",
        "--task-type",
        "save_score",
        "--param",
        "name=ab",
        "--approve",
        "auto",
    )
    assert saved.exit_code == 0, saved.output
    held = run(
        server,
        tools,
        "Save xy",
        "--task-type",
        "save_score",
        "--param",
        "name=xy",
        "--approve",
        "never",
        "--json",
    )
    run_id = json.loads(held.stdout)["run_id"]
    for args in (("save_score",), ("save_score", "--version", "1")):
        refused = plandag("library", "rm", *args)
        assert refused.exit_code == 2, refused.output
        assert f"is in use: run {run_id} (awaiting_approval) reuses version 1" in refused.stderr
        assert f"`plandag approve {run_id}`" in refused.stderr
        assert "give --force to remove it anyway" in refused.stderr
    assert json.loads(plandag("library", "list", "--json").stdout)[0]["versions"] == 1
    removed = plandag("library", "rm", "save_score", "--force")
    assert removed.exit_code == 0, removed.output
    approved = plandag("approve", run_id, "--who", "ana")
    assert approved.exit_code == 0, approved.output
    assert (
        "library: nothing saved for save_score: version 1 it reused was removed from the library"
    ) in approved.stderr
    assert json.loads(plandag("library", "list", "--json").stdout) == []


def test_export_writes_only_inside_the_write_boundary(
    server: MessagesServer, tools: Path, tmp_path: Path
) -> None:
    server.push_json(SCORE_PLAN)
    assert (
        run(server, tools, "Score ab", "--task-type", "score", "--param", "name=ab").exit_code == 0
    )
    outside = tmp_path.parent / f"{tmp_path.name}-outside.json"
    refused = plandag("library", "export", "score", "--output", str(outside))
    assert refused.exit_code == 2, refused.output
    assert f"resolves to {outside}, outside the write boundary ({tmp_path})" in refused.stderr
    assert "widen it with --write-boundary" in refused.stderr
    assert not outside.exists()
    folder = plandag("library", "export", "score", "--output", ".")
    assert folder.exit_code == 2
    assert "error: --output . is a folder: name a file in it (e.g. ./plan.json)" in folder.stderr
    missing = plandag("library", "export", "score", "--output", "nodir/plan.json")
    assert missing.exit_code == 2
    assert "--output nodir/plan.json: cannot write it (No such file or directory)" in missing.stderr
    (tmp_path / "plans").mkdir()
    inside = plandag("library", "export", "score", "-o", "plans/score.json")
    assert inside.exit_code == 0, inside.output
    assert (
        json.loads((tmp_path / "plans/score.json").read_text(encoding="utf-8"))["steps"][0]["tool"]
        == "lookup"
    )
    widened = plandag(
        "library", "export", "score", "-o", str(outside), "--write-boundary", str(tmp_path.parent)
    )
    assert widened.exit_code == 0, widened.output
    outside.unlink()


def test_bad_versions_names_and_params_are_exit_2_with_what_to_do(
    server: MessagesServer, tools: Path
) -> None:
    server.push_json(SCORE_PLAN)
    assert (
        run(server, tools, "Score ab", "--task-type", "score", "--param", "name=ab").exit_code == 0
    )
    server.clear_requests()
    expected = {
        ("library", "show", "score", "--version", "9"): "task type 'score' has no version 9 "
        "(versions: 1)",
        ("library", "rm", "score", "--version", "9"): "task type 'score' has no version 9",
        ("library", "export", "score", "--version", "9"): "task type 'score' has no version 9",
        ("library", "approve", "score"): "task type 'score' has no version waiting for "
        "approval; `plandag library show` shows its versions",
        ("library", "approve", "score", "--version", "1"): "task type 'score' version 1 is "
        "admitted, not waiting for approval",
        ("library", "show", "nope"): "task type 'nope' is not in the plan library; `plandag "
        "library list` shows the task types",
        ("library", "export", "nope"): "task type 'nope' is not in the plan library",
        ("library", "rm", "nope"): "task type 'nope' is not in the plan library",
        ("library", "approve", "nope"): "task type 'nope' is not in the plan library",
    }
    for args, message in expected.items():
        result = plandag(*args)
        assert result.exit_code == 2, (args, result.output)
        assert f"error: {message}" in result.stderr, (args, result.stderr)
        assert result.exception is None or isinstance(result.exception, SystemExit)
    bad_version = plandag("library", "show", "score", "--version", "zero")
    assert bad_version.exit_code == 2
    assert "Invalid value for '--version'" in bad_version.stderr
    runs = {
        ("--param", "name"): "--param 'name' must look like NAME=VALUE",
        ("--param", "=ab"): "--param '=ab' must look like NAME=VALUE",
        ("--param", "name=a", "--param", "name=b"): "--param name is given twice",
        ("--param", "nom=ab"): "--task-type score:",
        (): "--task-type score:",
    }
    for args, message in runs.items():
        result = run(server, tools, "Score", "--task-type", "score", *args)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.stderr, (args, result.stderr)
        assert result.exception is None or isinstance(result.exception, SystemExit)
    for name in ("", "no spaces", "x" * 65, "-lead", "naïve"):
        result = run(server, tools, "Score", "--task-type", name)
        assert result.exit_code == 2, (name, result.output)
        assert f"--task-type: task type {name!r}: give 1 to 64 letters" in result.stderr
    assert server.requests == []  # nothing above reached the model


def test_reading_commands_on_a_store_that_does_not_exist_create_nothing(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "nowhere" / "runs.sqlite3"
    for args in (("library", "list"), ("stats",)):
        result = plandag(*args, "--store", str(missing))
        assert result.exit_code == 0, result.output
        assert f"no run store at {missing} yet: nothing is recorded there" in result.stderr
        as_json = plandag(*args, "--json", "--store", str(missing))
        assert (as_json.exit_code, json.loads(as_json.stdout)) == (0, [])
    for args in (
        ("library", "show", "score"),
        ("library", "export", "score"),
        ("library", "rm", "score"),
        ("library", "approve", "score"),
    ):
        result = plandag(*args, "--store", str(missing))
        assert result.exit_code == 2, (args, result.output)
        assert (
            f"error: task type 'score' is not in the plan library: no run store at {missing} yet"
        ) in result.stderr
    assert not (tmp_path / "nowhere").exists()
    # an existing, empty store
    empty = plandag("library", "list")
    assert empty.exit_code == 0
    assert not Path("store/runs.sqlite3").exists()
    Path("store").mkdir()
    from plandag.store import open_store

    open_store(Path("store/runs.sqlite3")).close()
    listed = plandag("library", "list")
    assert listed.exit_code == 0
    assert "the plan library is empty: `plandag run TASK` saves a plan" in listed.stderr
    stats = plandag("stats")
    assert (stats.exit_code, stats.stdout) == (0, "")
    assert "no run recorded yet" in stats.stderr


def test_a_task_type_whose_tools_are_not_registered_is_exit_2_before_anything_runs(
    server: MessagesServer, tools: Path
) -> None:
    server.push_json(SCORE_PLAN)
    assert (
        run(server, tools, "Score ab", "--task-type", "score", "--param", "name=ab").exit_code == 0
    )
    server.clear_requests()
    bare = plandag(
        "run", "Score xy", "--base-url", server.url, "--task-type", "score", "--param", "name=xy"
    )
    assert bare.exit_code == 2, bare.output
    assert (
        "error: --task-type score: version 1 uses tool(s) lookup, not registered in this run; "
        "pass --tools with the file or application that defines them"
    ) in bare.stderr
    assert "nothing ran" in bare.stderr
    assert server.requests == []
    # without --task-type, an entry whose tools are not registered is not offered to routing:
    # nothing to route to, the planner plans
    server.push_json(
        {
            "g": "Read",
            "s": [{"i": 1, "t": "read_file", "a": {"path": "scores.py"}, "d": []}],
            "o": "<step_1_result>",
        }
    )
    planned = plandag("run", "Read scores.py", "--base-url", server.url, "--json")
    assert planned.exit_code == 0, planned.output
    assert len(server.message_requests) == 1
    assert json.loads(planned.stdout)["routing_calls"] == []
