"""``--json`` on the commands that print a result: ``graph``, ``plan``, ``tell``, ``reject``,
``abandon``, ``library approve``, ``library rm`` and ``bench`` print one JSON document on
stdout (log records and messages stay on stderr, even with ``-vv``), in the shape each
command's help documents. Model calls go to the local Messages API server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from plandag.cli.app import app
from plandag.store import open_store
from plandag.testing import MessagesServer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

TOOLS_FILE = '''
import logging

from plandag import tool

logging.getLogger("plandag.tool").info("tools loaded")


@tool
def lookup(name: str) -> dict:
    """Look a name up; returns its score."""
    return {"name": name, "score": len(name)}


@tool(taint_source=True)
def fetch_score(name: str) -> dict:
    """Fetch a name's score from outside."""
    return {"name": name, "score": len(name)}


@tool
def broken(name: str) -> dict:
    """A service that is always down."""
    raise ValueError(f"service down for {name}")


@tool(effects="write")
def publish(channel: str, text: str) -> str:
    """Publish TEXT on CHANNEL."""
    return f"published on {channel}"
'''


def step(i: int, tool_name: str, args: dict[str, Any], d: list[int]) -> dict[str, Any]:
    return {"i": i, "t": tool_name, "a": args, "d": d}


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.delenv("PLANDAG_LOG", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "store" / "runs.sqlite3"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tools.py").write_text(TOOLS_FILE, encoding="utf-8")


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


def plandag(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def document_of(result: Any, code: int = 0) -> Any:
    """The one JSON document on stdout (``json.loads`` refuses anything around it)."""
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


def test_every_command_that_prints_a_result_takes_json() -> None:
    group = typer.main.get_group(app)
    no_result = {"serve", "schema", "library export"}  # a server; documents already JSON
    missing = []
    for name in group.list_commands(None):  # type: ignore[arg-type]
        command = group.get_command(None, name)  # type: ignore[arg-type]
        subs = getattr(command, "commands", None)
        leaves = [(f"{name} {sub}", cmd) for sub, cmd in subs.items()] if subs else []
        for full, leaf in leaves or [(name, command)]:
            if full in no_result:
                continue
            if not any("--json" in param.opts for param in leaf.params):
                missing.append(full)
    assert missing == []


def test_graph_json() -> None:
    result = plandag(
        "graph",
        str(EXAMPLES / "plans" / "words.json"),
        "--tools",
        str(EXAMPLES / "tools" / "text_tools.py"),
        "--json",
        "-vv",
    )
    document = document_of(result)
    assert set(document) == {"plan", "steps", "critical_path", "estimate", "mermaid"}
    assert [item["id"] for item in document["steps"]] == [1, 2, 3, 4]
    assert document["steps"][2] == {
        "id": 3,
        "tool": "word_count",
        "description": None,
        "parents": [2],
    }
    assert document["critical_path"] == {"steps": [2, 3, 4], "length": 3}
    assert document["mermaid"].startswith("flowchart")
    assert "cost_usd" in document["estimate"]


def test_graph_json_of_a_plan_that_does_not_compile(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps({"version": 1, "goal": "x", "steps": [{"id": 1, "tool": "nope", "args": {}}]}),
        encoding="utf-8",
    )
    document = document_of(plandag("graph", str(bad), "--json"), code=2)
    assert document["status"] == "invalid_plan"
    assert [item["code"] for item in document["diagnostics"]] == ["unknown_tool"]


def test_plan_json(server: MessagesServer, tmp_path: Path) -> None:
    server.push_json(
        {
            "g": "Score a and bb",
            "s": [step(1, "lookup", {"name": "a"}, []), step(2, "lookup", {"name": "bb"}, [1])],
            "o": "<step_2_result>",
        }
    )
    result = plandag(
        "plan",
        "Score a and bb",
        "-o",
        "plan.json",
        "--tools",
        "tools.py",
        "--base-url",
        server.url,
        "--json",
        "-v",
    )
    document = document_of(result)
    assert "HTTP Request: POST" in result.stderr  # the SDK's httpx at -v, on stderr only
    assert document["status"] == "planned"
    assert document["output"] == "plan.json"
    assert document["plan"] == json.loads((tmp_path / "plan.json").read_text(encoding="utf-8"))
    assert (document["steps"], document["plans_asked"], document["calls"]) == (2, 1, 1)
    assert document["critical_path"] == {"steps": [1, 2], "length": 2}
    assert document["mermaid"].startswith("flowchart")
    assert document["cost_usd"] > 0
    assert document["investigation"] is None


def test_plan_json_of_a_plan_that_never_compiles(server: MessagesServer) -> None:
    wrong = {"g": "x", "s": [step(1, "nope", {}, [])], "o": "<step_1_result>"}
    for _ in range(3):
        server.push_json(wrong)
    result = plandag(
        "plan", "x", "-o", "plan.json", "--tools", "tools.py", "--base-url", server.url, "--json"
    )
    document = document_of(result, code=2)
    assert document["status"] == "invalid_plan"
    assert "unknown_tool" in {item["code"] for item in document["diagnostics"]}


def test_tell_json(monkeypatch: pytest.MonkeyPatch) -> None:
    from plandag.cli import tell_command

    monkeypatch.setattr(tell_command, "WAIT_S", 0.2)
    with open_store(None) as store:
        store.create_run("running1", command="run", goal="g", params={}, options={})
    document = document_of(plandag("tell", "running1", "use 7", "--json", "-vv"))
    assert document == {"run_id": "running1", "instruction": 1, "new_goal": False, "taken": False}


def test_reject_json(server: MessagesServer) -> None:
    def plan(channel: str) -> dict[str, Any]:
        return {
            "g": "Score abc and publish it",
            "s": [
                step(1, "lookup", {"name": "abc"}, []),
                step(2, "publish", {"channel": channel, "text": "<step_1_result.score>"}, [1]),
            ],
            "o": "<step_2_result>",
        }

    server.push_json(plan("blog"))
    first = plandag(
        "run", "Score and publish", "--tools", "tools.py", "--base-url", server.url,
        "--approve", "never", "--json",
    )  # fmt: skip
    started = document_of(first, code=4)
    run_id, first_hash = started["run_id"], started["approval"]["plan_hash"]
    server.push_json(plan("finance"))
    result = plandag("reject", run_id, "--feedback", "not the blog", "--who", "bob", "--json")
    document = document_of(result, code=4)
    with open_store(None) as store:
        revised = store.plan_versions(run_id)[-1]
    assert document == {
        "run_id": run_id,
        "decision": "rejected",
        "plan_hash": first_hash,
        "who": "bob",
        "feedback": "not the blog",
        "status": "awaiting_approval",
        "revision": {"version": revised.version, "plan_hash": revised.hash},
    }
    assert revised.source == "revision"
    assert f"revised plan version {revised.version} awaits a decision" in result.stderr


def test_abandon_json(server: MessagesServer) -> None:
    for name in ("x", "y", "z"):
        server.push_json(
            {"g": "x", "s": [step(1, "broken", {"name": name}, [])], "o": "<step_1_result>"}
        )
    escalated = plandag(
        "run", "Score x", "--tools", "tools.py", "--base-url", server.url, "--retries", "0",
        "--json",
    )  # fmt: skip
    run_id = document_of(escalated, code=5)["run_id"]
    result = plandag("abandon", run_id, "--reason", "not worth it", "--who", "ana", "--json")
    assert document_of(result, code=1) == {
        "run_id": run_id,
        "status": "abandoned",
        "who": "ana",
        "reason": "not worth it",
    }


def test_library_approve_and_rm_json(server: MessagesServer) -> None:
    def checked(i: int, tool_name: str, limit: int) -> dict[str, Any]:
        found = step(i, tool_name, {"name": "<param.name>"}, [])
        found["c"] = [{"k": "jmespath", "a": {"expr": f"score < `{limit}`"}}]
        return found

    server.push_json(
        {
            "g": "Score a name",
            "p": [{"n": "name", "t": "string", "h": "the name"}],
            "s": [checked(1, "fetch_score", 5)],
            "o": {"json": '{"score":"<step_1_result.score>"}'},
        }
    )
    server.push_json(
        {
            "g": "Score a name",
            "s": [checked(2, "lookup", 10)],
            "o": {"json": '{"score":"<step_2_result.score>"}'},
        }
    )
    for name in ("ab", "abcdefg"):  # the second fails its check: a repair, saved pending
        ran = plandag(
            "run", f"Score {name}", "--tools", "tools.py", "--base-url", server.url,
            "--retries", "0", "--task-type", "score_name", "--param", f"name={name}",
        )  # fmt: skip
        assert ran.exit_code == 0, ran.output
    approved = document_of(plandag("library", "approve", "score_name", "--who", "ana", "--json"))
    assert (approved["task_type"], approved["version"], approved["approved_by"]) == (
        "score_name",
        2,
        "ana",
    )
    assert approved["status"] != "pending"
    assert approved["plan"]["steps"][0]["tool"] == "lookup"
    removed = document_of(plandag("library", "rm", "score_name", "--version", "1", "--json"))
    assert removed == {"task_type": "score_name", "version": 1, "removed": 1}


def test_bench_json(tmp_path: Path) -> None:
    result = plandag(
        "bench", "compare2", "--time-scale", "0.01", "--out", str(tmp_path / "out"),
        "--no-prompt-cache", "--json",
    )  # fmt: skip
    document = document_of(result)
    assert set(document) == {
        "title", "real", "wall_s", "settings", "workloads", "summary", "runs", "targets",
        "notes", "results", "chart", "plandag_right",
    }  # fmt: skip
    assert document["workloads"] == ["compare2"]
    assert {(item["agent"], item["prompt_cache"]) for item in document["summary"]} == {
        ("plandag", False),
        ("react", False),
    }
    assert {run["agent"] for run in document["runs"]} == {"plandag", "react"}
    assert document["plandag_right"] is True
    assert document["settings"]["time_scale"] == 0.01
    assert document["results"].endswith("RESULTS.md")
    assert "wrote" in result.stderr
