"""``plandag run --task-type``, the routing call, ``plandag library`` and ``plandag stats``
against the local Messages API server (real SDK), counting the requests it receives."""

from __future__ import annotations

import json
import logging
import sqlite3
import sys
import time
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


@tool(taint_source=True)
def fetch_score(name: str) -> dict:
    """Fetch a name's score from outside."""
    return {"name": name, "score": len(name)}
'''


def step(
    i: int, tool_name: str, args: dict[str, Any], d: list[int], checks: tuple[str, ...] = ()
) -> dict[str, Any]:
    found: dict[str, Any] = {"i": i, "t": tool_name, "a": args, "d": d}
    if checks:
        found["c"] = [{"k": "jmespath", "a": {"expr": f"{expr}"}} for expr in checks]
    return found


def score_plan(tool_name: str = "lookup") -> dict[str, Any]:
    return {
        "g": "Score a name",
        "p": [{"n": "name", "t": "string", "h": "the name to score"}],
        "s": [step(1, tool_name, {"name": "<param.name>"}, [], ("score < `5`",))],
        "o": {"json": '{"score":"<step_1_result.score>"}'},
    }


REPAIR = {
    "g": "Score a name",
    "s": [step(2, "lookup", {"name": "<param.name>"}, [], ("score < `10`",))],
    "o": {"json": '{"score":"<step_2_result.score>"}'},
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


def test_with_a_task_type_the_second_and_later_runs_make_no_request(
    server: MessagesServer, tools: Path
) -> None:
    server.push_json(score_plan(), usage={"input_tokens": 2000, "output_tokens": 120})
    first = run(server, tools, "Score ab", "--task-type", "score_name", "--param", "name=ab")
    assert first.exit_code == 0, first.output
    assert len(server.message_requests) == 1
    assert "library: saved score_name version 1" in first.stderr
    for name, score in (("xyz", 3), ("abcd", 4)):
        server.clear_requests()
        later = run(
            server, tools, f"Score {name}", "--task-type", "score_name", "--param", f"name={name}"
        )
        assert later.exit_code == 0, later.output
        assert server.requests == []  # no message, no token count
        assert f'"score": {score}' in later.stdout
        assert "library: reused score_name version 1 (no model call)" in later.stderr
        assert "0 model call(s), 0 replan(s), $0.0000 on models" in later.stderr

    listed = plandag("library", "list", "--json")
    assert listed.exit_code == 0, listed.output
    [entry] = json.loads(listed.stdout)
    assert entry == {
        "task_type": "score_name",
        "latest": 1,
        "versions": 1,
        "pending": 0,
        "params": {"name": {"type": "string", "description": "the name to score"}},
        "tools": ["lookup"],
        "uses": 2,
        "successes": 2,
        "success_rate": 1.0,
    }
    text = plandag("library", "list")
    assert "score_name  v1  1 version(s)  uses 2/2 (100%)" in text.stdout


def test_without_a_task_type_one_routing_call_and_no_planner_call(
    server: MessagesServer, tools: Path
) -> None:
    server.push_json(score_plan())
    assert (
        run(server, tools, "Score ab", "--task-type", "score_name", "--param", "name=ab").exit_code
        == 0
    )
    server.clear_requests()
    server.push_json(
        {"task_type": "score_name", "new": False, "params": {"name": "abcd"}},
        usage={"input_tokens": 500, "output_tokens": 30},
    )
    routed = run(server, tools, "What is the score of abcd?", "--json")
    assert routed.exit_code == 0, routed.output
    [request] = server.message_requests
    assert request.json["model"] == "claude-haiku-4-5"
    document = json.loads(routed.stdout)
    assert document["answer"] == {"score": 4}
    assert document["llm_calls"] == []
    [call] = document["routing_calls"]
    assert (call["model"], call["input_tokens"], call["output_tokens"]) == (
        "claude-haiku-4-5",
        500,
        30,
    )
    assert document["routing_cost_usd"] == pytest.approx(500e-6 + 30 * 5e-6)
    assert document["planner_cost_usd"] == 0.0
    assert document["library"]["how"] == "routed"
    assert document["library"]["routing"] == {
        "task_type": "score_name",
        "new": False,
        "params": {"name": "abcd"},
    }
    store = sqlite3.connect(Path("store/runs.sqlite3"))
    rows = store.execute(
        "SELECT purpose, model, cost_usd FROM llm_call WHERE run_id = ?", (document["run_id"],)
    ).fetchall()
    assert rows == [("routing", "claude-haiku-4-5", pytest.approx(650e-6))]
    [spent] = store.execute(
        "SELECT spent_usd FROM run WHERE run_id = ?", (document["run_id"],)
    ).fetchone()
    assert spent == pytest.approx(650e-6)
    store.close()


def test_the_executor_model_is_a_setting_and_an_option(server: MessagesServer, tools: Path) -> None:
    server.push_json(score_plan())
    run(server, tools, "Score ab", "--task-type", "score_name", "--param", "name=ab")
    server.clear_requests()
    server.push_json({"task_type": "score_name", "new": False, "params": {"name": "a"}})
    result = run(server, tools, "Score a", "--executor-model", "claude-3-5-haiku")
    assert result.exit_code == 0, result.output
    assert [r.json["model"] for r in server.message_requests] == ["claude-3-5-haiku"]


def test_a_reused_plan_failing_its_check_calls_the_planner_and_stores_a_new_version(
    server: MessagesServer, tools: Path
) -> None:
    server.push_json(score_plan())
    run(server, tools, "Score ab", "--task-type", "score_name", "--param", "name=ab")
    server.clear_requests()
    server.push_json(REPAIR)
    repaired = run(
        server, tools, "Score abcdefg", "--task-type", "score_name", "--param", "name=abcdefg"
    )
    assert repaired.exit_code == 0, repaired.output
    assert len(server.message_requests) == 1  # the replanner
    assert '"score": 7' in repaired.stdout
    assert "library: saved score_name version 2" in repaired.stderr
    shown = json.loads(plandag("library", "show", "score_name", "--json").stdout)
    assert [(item["version"], item["status"], item["uses"]) for item in shown] == [
        (1, "admitted", 1),
        (2, "admitted", 0),
    ]
    assert shown[1]["plan"]["steps"][0]["id"] == 2
    server.clear_requests()
    again = run(
        server, tools, "Score abcdefgh", "--task-type", "score_name", "--param", "name=abcdefgh"
    )
    assert again.exit_code == 0, again.output
    assert server.requests == []
    assert "library: reused score_name version 2 (no model call)" in again.stderr


def test_a_tainted_repair_waits_for_library_approve(server: MessagesServer, tools: Path) -> None:
    server.push_json(score_plan("fetch_score"))
    run(server, tools, "Score ab", "--task-type", "score_name", "--param", "name=ab")
    server.push_json(REPAIR)
    repaired = run(
        server, tools, "Score abcdefg", "--task-type", "score_name", "--param", "name=abcdefg"
    )
    assert repaired.exit_code == 0, repaired.output
    assert "library: saved score_name version 2, pending: step 2 was written by a model" in (
        " ".join(repaired.stderr.split())
    )
    assert "`plandag library approve score_name --version 2` lets runs reuse it" in (
        " ".join(repaired.stderr.split())
    )
    listed = plandag("library", "list")
    assert "score_name  v1  2 version(s), 1 pending" in listed.stdout
    server.clear_requests()
    still = run(server, tools, "Score abc", "--task-type", "score_name", "--param", "name=abc")
    assert "reused score_name version 1" in still.stderr

    approved = plandag("library", "approve", "score_name", "--who", "ana")
    assert approved.exit_code == 0, approved.output
    assert "approved score_name version 2 (by ana)" in approved.stderr
    again = plandag("library", "approve", "score_name")
    assert again.exit_code == 2
    assert "has no version waiting for approval" in again.stderr
    now = run(
        server, tools, "Score abcdefgh", "--task-type", "score_name", "--param", "name=abcdefgh"
    )
    assert now.exit_code == 0, now.output
    assert server.requests == []
    assert "reused score_name version 2" in now.stderr


def test_a_reused_plan_with_effects_still_passes_approval(
    server: MessagesServer, tools: Path
) -> None:
    plan = {
        "g": "Save a name's score",
        "p": [{"n": "name", "t": "string"}],
        "s": [
            step(1, "lookup", {"name": "<param.name>"}, []),
            step(2, "write_json", {"path": "out/score.json", "data": "<step_1_result>"}, [1]),
        ],
        "o": "<step_1_result.score>",
    }
    server.push_json(plan)
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
    assert "library: saved save_score version 1" in first.stderr
    shown = json.loads(plandag("library", "show", "save_score", "--json").stdout)
    assert shown[0]["approved_by"] == "auto"
    server.clear_requests()
    held = run(
        server,
        tools,
        "Save xyz",
        "--task-type",
        "save_score",
        "--param",
        "name=xyz",
        "--approve",
        "never",
    )
    assert held.exit_code == 4, held.output  # awaiting_approval, as any plan with effects
    assert server.requests == []
    assert not Path("out/score.json").read_text(encoding="utf-8").count("xyz")


def test_params_that_do_not_fit_exit_2_before_anything_runs(
    server: MessagesServer, tools: Path
) -> None:
    server.push_json(score_plan())
    run(server, tools, "Score ab", "--task-type", "score_name", "--param", "name=ab")
    server.clear_requests()
    result = run(server, tools, "Score", "--task-type", "score_name", "--param", "nom=ab")
    assert result.exit_code == 2, result.output
    assert "--task-type score_name:" in result.stderr
    assert "nothing ran" in result.stderr
    assert server.requests == []
    bad = run(server, tools, "Score", "--task-type", "no spaces please")
    assert bad.exit_code == 2
    assert "--task-type: task type 'no spaces please'" in bad.stderr


def test_library_show_export_and_rm(server: MessagesServer, tools: Path, tmp_path: Path) -> None:
    server.push_json(score_plan())
    run(server, tools, "Score ab", "--task-type", "score_name", "--param", "name=ab")
    shown = plandag("library", "show", "score_name")
    assert shown.exit_code == 0, shown.output
    assert "score_name version 1: admitted by read-only; uses -" in shown.stdout
    exported = plandag("library", "export", "score_name", "--output", "plan.json")
    assert exported.exit_code == 0, exported.output
    plan = json.loads((tmp_path / "plan.json").read_text(encoding="utf-8"))
    assert plan["params"] == {"name": {"type": "string", "description": "the name to score"}}
    assert [item["tool"] for item in plan["steps"]] == ["lookup"]
    executed = plandag("exec", "plan.json", "--tools", str(tools), "--param", "name=abc")
    assert executed.exit_code == 0, executed.output
    missing = plandag("library", "show", "nope")
    assert missing.exit_code == 2
    assert "task type 'nope' is not in the plan library" in missing.stderr
    removed = plandag("library", "rm", "score_name")
    assert removed.exit_code == 0, removed.output
    assert json.loads(plandag("library", "list", "--json").stdout) == []


def test_gc_keeps_the_runs_of_library_plans(server: MessagesServer, tools: Path) -> None:
    # a run that left no plan in the library (exec of a plan file); a plain `plandag run`
    # would have saved its plan under a derived task type, and gc would keep it
    Path("plan.json").write_text(
        json.dumps({"steps": [{"id": 1, "tool": "lookup", "args": {"name": "ab"}}]}),
        encoding="utf-8",
    )
    other = plandag("exec", "plan.json", "--tools", str(tools), "--json")
    assert other.exit_code == 0, other.output
    other_id = json.loads(other.stdout)["run_id"]
    server.push_json(score_plan())
    kept = run(
        server, tools, "Score ab", "--task-type", "score_name", "--param", "name=ab", "--json"
    )
    kept_id = json.loads(kept.stdout)["run_id"]
    store = sqlite3.connect(Path("store/runs.sqlite3"))
    with store:
        store.execute("UPDATE run SET updated = ?", (time.time() - 90 * 86400,))
    store.close()
    collected = plandag("gc", "--older-than", "30d", "--json")
    assert collected.exit_code == 0, collected.output
    report = json.loads(collected.stdout)
    assert report["runs"] == [other_id]
    assert report["kept_by_keepers"] == [kept_id]
    [entry] = json.loads(plandag("library", "list", "--json").stdout)
    assert entry["latest"] == 1
    server.clear_requests()
    again = run(server, tools, "Score x", "--task-type", "score_name", "--param", "name=x")
    assert again.exit_code == 0, again.output
    assert server.requests == []


def test_stats_per_task_type_and_out_of_registry_alerts(
    server: MessagesServer, tools: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hook_file = tmp_path / "alerts.jsonl"
    (tmp_path / "plandag.toml").write_text(
        "escalation_command = "
        + json.dumps(
            f"{sys.executable} -c \"import sys; open({str(hook_file)!r}, 'a')"
            ".write(sys.stdin.read() + '\\n')\""
        )
        + "\n",
        encoding="utf-8",
    )
    wrong = score_plan()
    wrong["s"] = [step(1, "lookup_fast", {"name": "<param.name>"}, [], ("score < `5`",))]
    server.push_json(wrong, usage={"input_tokens": 1000, "output_tokens": 100})
    server.push_json(score_plan(), usage={"input_tokens": 1000, "output_tokens": 100})
    with caplog.at_level(logging.WARNING, logger="plandag.planner"):
        first = run(server, tools, "Score ab", "--task-type", "score_name", "--param", "name=ab")
    assert first.exit_code == 0, first.output  # the repair fixed it; the alert still counts
    assert "out-of-registry alert" in caplog.text
    assert "'lookup_fast'" in caplog.text
    [alert] = [json.loads(line) for line in hook_file.read_text(encoding="utf-8").splitlines()]
    assert (alert["event"], alert["code"], alert["name"], alert["task_type"]) == (
        "out_of_registry",
        "unknown_tool",
        "lookup_fast",
        "score_name",
    )
    store = sqlite3.connect(Path("store/runs.sqlite3"))
    events = store.execute("SELECT kind, data FROM event WHERE kind = 'out_of_registry'").fetchall()
    store.close()
    assert [json.loads(data)["name"] for _, data in events] == ["lookup_fast"]

    server.push_json(REPAIR)
    run(server, tools, "Score abcdefg", "--task-type", "score_name", "--param", "name=abcdefg")
    run(server, tools, "Score abc", "--task-type", "score_name", "--param", "name=abc")
    stats = plandag("stats", "--json")
    assert stats.exit_code == 0, stats.output
    [figures] = json.loads(stats.stdout)
    assert {
        key: figures[key]
        for key in ("task_type", "runs", "no_replan", "replans", "escalations", "out_of_registry")
    } == {
        "task_type": "score_name",
        "runs": 3,
        "no_replan": 2,
        "replans": 1,
        "escalations": 0,
        "out_of_registry": 1,
    }
    assert figures["replans_per_run"] == pytest.approx(1 / 3)
    assert figures["spend_usd"] == pytest.approx(figures["planner_usd"] + figures["routing_usd"])
    assert figures["planner_usd"] > 0
    table = plandag("stats")
    lines = table.stdout.splitlines()
    assert lines[0].split() == [
        "task",
        "type",
        "runs",
        "no",
        "replan",
        "replans/run",
        "escalations",
        "spend",
        "$",
        "out-of-registry",
    ]
    assert lines[1].split()[:5] == ["score_name", "3", "2", "0.33", "0"]
    assert lines[1].split()[-1] == "1"
