"""``plandag run "TASK"`` against the local Messages API server through the real SDK."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from plandag.cli.run_command import register
from plandag.testing import MessagesServer

TOOLS_FILE = '''
from plandag import tool


@tool
def lookup(name: str) -> dict:
    """Look a name up; returns its score."""
    return {"name": name, "score": len(name)}


@tool
def total(a: float, b: float) -> float:
    """Add two scores."""
    return a + b


@tool
def broken(name: str) -> dict:
    """A service that is always down."""
    raise ValueError(f"service down for {name}")
'''


def step(i: int, tool_name: str, args: dict[str, Any], d: list[int]) -> dict[str, Any]:
    return {"i": i, "t": tool_name, "a": args, "d": d}


PLAN = {
    "g": "Score a and bb",
    "s": [
        step(1, "lookup", {"name": "a"}, []),
        step(2, "lookup", {"name": "bb"}, []),
        step(3, "total", {"a": "<step_1_result.score>", "b": "<step_2_result.score>"}, [1, 2]),
    ],
    "o": {"json": '{"sum":"<step_3_result>"}'},
}


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
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


def run_app() -> typer.Typer:
    app = typer.Typer(add_completion=False, rich_markup_mode=None)
    register(app)

    @app.callback()
    def root() -> None:
        """plandag, for this test."""

    return app


def invoke(args: list[str], key: str | None = "test") -> Any:
    env = {"ANTHROPIC_API_KEY": key} if key is not None else {}
    return CliRunner().invoke(run_app(), ["run", *args], env=env)


def test_a_missing_key_is_an_error_before_anything_runs(
    server: MessagesServer, tools: Path
) -> None:
    server.push_json(PLAN)
    result = invoke(["Score a and bb", "--tools", str(tools), "--base-url", server.url], key=None)
    assert result.exit_code == 2
    assert "no Anthropic API key: set ANTHROPIC_API_KEY" in result.output
    assert "or --offline to try it with no key" in result.output
    assert server.message_requests == []


@pytest.mark.parametrize("stream", [False, True])
def test_the_final_output_is_printed(server: MessagesServer, tools: Path, stream: bool) -> None:
    server.push_json(PLAN)
    args = ["Score a and bb", "--tools", str(tools), "--base-url", server.url]
    result = invoke([*args, "--stream"] if stream else args)
    assert result.exit_code == 0, result.output
    assert '"sum": 3.0' in result.stdout
    assert len(server.message_requests) == 1
    assert server.message_requests[0].json.get("stream", False) is stream
    assert server.message_requests[0].json["model"] == "claude-sonnet-4-6"


def test_json_output_is_the_run_result_plus_the_agent_fields(
    server: MessagesServer, tools: Path
) -> None:
    server.push_json(PLAN, usage={"input_tokens": 1000, "output_tokens": 75})
    result = invoke(["Score a and bb", "--tools", str(tools), "--base-url", server.url, "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["status"] == "succeeded"
    assert document["answer"] == {"sum": 3.0}
    assert document["output"] == {"sum": 3.0}
    assert document["replans"] == []
    assert len(document["plan_versions"]) == 1
    assert [call["output_tokens"] for call in document["llm_calls"]] == [75]
    assert document["output_tokens_per_step"] == 25.0
    assert [item["status"] for item in document["steps"]] == ["succeeded"] * 3
    assert document["first_tool_start_s"] is not None


def push_always_broken(server: MessagesServer) -> None:
    server.push_json(
        {"g": "x", "s": [step(1, "broken", {"name": "x"}, [])], "o": "<step_1_result>"}
    )
    server.push_json(
        {"g": "x", "s": [step(2, "broken", {"name": "y"}, [])], "o": "<step_2_result>"}
    )
    server.push_json(
        {"g": "x", "s": [step(3, "broken", {"name": "z"}, [])], "o": "<step_3_result>"}
    )


def test_the_replan_caps_escalate_exit_5_with_no_answer(
    server: MessagesServer, tools: Path
) -> None:
    push_always_broken(server)
    result = invoke(
        ["Score x", "--tools", str(tools), "--base-url", server.url, "--json", "--retries", "0"]
    )
    assert result.exit_code == 5, result.output
    document = json.loads(result.stdout)
    assert document["status"] == "escalated"
    assert document["escalation"] == "replan_caps"
    assert document["gave_up"] == "no_progress"
    assert document["answer"] is None
    assert [item["superseded_by"] for item in document["steps"]] == [[2], [3], None]


def test_escalate_never_keeps_gave_up_exit_1(server: MessagesServer, tools: Path) -> None:
    push_always_broken(server)
    args = ["Score x", "--tools", str(tools), "--base-url", server.url, "--retries", "0"]
    result = invoke([*args, "--json", "--escalate", "never"])
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    assert (document["status"], document["escalation"]) == ("gave_up", None)
    assert document["gave_up"] == "no_progress"


def test_escalate_refuses_an_unknown_mode(server: MessagesServer, tools: Path) -> None:
    result = invoke(["Score x", "--tools", str(tools), "--base-url", server.url, "--escalate", "x"])
    assert result.exit_code == 2
    assert "--escalate 'x': choose person or never" in result.output
    assert server.message_requests == []


def test_a_plan_that_never_compiles_exits_2(server: MessagesServer, tools: Path) -> None:
    bad = {"g": "x", "s": [step(1, "lookup_fast", {"name": "a"}, [])]}
    for _ in range(3):
        server.push_json(bad)
    result = invoke(["Score a", "--tools", str(tools), "--base-url", server.url])
    assert result.exit_code == 2, result.output
    assert "error[unknown_tool]: tool 'lookup_fast' is not registered" in result.output


def test_brake_options_are_checked_like_exec(server: MessagesServer, tools: Path) -> None:
    result = invoke(
        ["Score a", "--tools", str(tools), "--base-url", server.url, "--max-cost", "lots"]
    )
    assert result.exit_code == 2
    assert "Invalid value for '--max-cost': 'lots': expected a number of US dollars" in (
        " ".join(result.output.split())
    )
    assert server.message_requests == []


def test_an_unknown_provider_exits_2(server: MessagesServer) -> None:
    result = invoke(["Score a", "--provider", "mistral", "--base-url", server.url])
    assert result.exit_code == 2
    assert "--provider 'mistral': choose anthropic, openai or offline" in result.output


def test_the_plan_version_is_stored_with_its_estimate(
    server: MessagesServer, tools: Path, tmp_path: Path
) -> None:
    from plandag.store import open_store

    server.push_json(PLAN)
    store_path = tmp_path / "runs.sqlite3"
    args = ["Score a and bb", "--tools", str(tools), "--base-url", server.url, "--json"]
    result = invoke([*args, "--store", str(store_path)])
    assert result.exit_code == 0, result.output
    run_id = json.loads(result.stdout)["run_id"]
    store = open_store(store_path)
    try:
        [version] = store.plan_versions(run_id)
    finally:
        store.close()
    assert version.estimate is not None
    # the user's tools declare no typical_seconds: the time is unknown, shown as such
    assert (version.estimate["cost_usd"], version.estimate["seconds"]) == (0.0, None)
    assert version.estimate["unknown"] == [1, 2, 3]


def test_the_planning_call_takes_planner_max_tokens(server: MessagesServer, tools: Path) -> None:
    server.push_max_tokens('{"g":"x","s":[', usage={})
    result = invoke(
        ["Score a", "--tools", str(tools), "--base-url", server.url, "--planner-max-tokens", "1234"]
    )
    assert result.exit_code == 1
    assert server.message_requests[0].json["max_tokens"] == 1234
    assert "the output was cut off at max_tokens=1234" in " ".join(result.output.split())
    # and the brakes line came first
    assert result.output.startswith("brakes: $1.00, 200,000 tokens, 15 min, stall 120 s,")


def test_the_troubleshooting_page_quotes_the_missing_key_error(
    server: MessagesServer, tools: Path
) -> None:
    result = invoke(["Score a and bb", "--tools", str(tools), "--base-url", server.url], key=None)
    assert result.exit_code == 2
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("error: no Anthropic API key")
    page = (Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md").read_text(
        encoding="utf-8"
    )
    assert f"\n{line}\n" in page
