"""``plandag exec`` of a plan with llm and agent steps: --provider, --model, --base-url,
--executor-model, the key checked before anything runs; ``plandag tools`` lists them; the
plan's estimate counts them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from plandag.cli import app
from plandag.compiler import compile_plan
from plandag.executors.llm import LLM_SYSTEM
from plandag.scheduler.estimate import estimate_plan
from plandag.testing import ChatCompletionsServer, MessagesServer
from plandag.tools.registry import default_registry

PLAN = {
    "version": 1,
    "goal": "two model steps in parallel",
    "steps": [
        {"id": 1, "tool": "llm", "args": {"prompt": "Name a colour.", "max_tokens": 50}},
        {
            "id": 2,
            "tool": "llm",
            "args": {
                "prompt": "Name a number.",
                "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
                "max_tokens": 50,
            },
        },
    ],
    "output": {"colour": "<step_1_result>", "number": "<step_2_result.n>"},
}


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "runs.sqlite3"))
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def plan_file(tmp_path: Path) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(PLAN), encoding="utf-8")
    return path


def reply(body: dict[str, Any]) -> Any:
    from plandag.testing import ScriptedResponse

    text = json.dumps(body)
    if "Name a number" in text:
        return ScriptedResponse.json({"n": 7}, usage={"input_tokens": 20, "output_tokens": 4})
    return ScriptedResponse.text("teal", usage={"input_tokens": 20, "output_tokens": 2})


def exec_json(args: list[str], env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(app, ["exec", *args, "--json"], env=env or {})


def test_a_plan_with_model_steps_and_no_key_stops_before_anything_runs(plan_file: Path) -> None:
    with MessagesServer() as server:
        result = exec_json([str(plan_file), "--base-url", server.url, "--provider", "anthropic"])
        assert server.requests == []
    assert result.exit_code == 2
    assert "steps 1 (llm), 2 (llm) call a model" in result.stderr
    assert "no Anthropic API key: set ANTHROPIC_API_KEY" in result.stderr
    assert "or --offline to try it with no key" in result.stderr


def test_openai_without_a_model_is_refused(plan_file: Path) -> None:
    result = exec_json([str(plan_file), "--provider", "openai", "--base-url", "http://127.0.0.1:9"])
    assert result.exit_code == 2
    assert "give --model NAME (or --executor-model NAME)" in result.stderr


def test_exec_against_a_local_openai_compatible_server(plan_file: Path) -> None:
    with ChatCompletionsServer(default=reply) as server:
        result = exec_json(
            [
                str(plan_file),
                "--provider",
                "openai",
                "--base-url",
                server.url + "/v1",
                "--model",
                "llama3.1:8b",
            ]
        )
        bodies = [request.json for request in server.message_requests]
    assert result.exit_code == 0, result.stderr
    run = json.loads(result.stdout)
    assert run["output"] == {"colour": "teal", "number": 7}
    assert sorted(body["model"] for body in bodies) == ["llama3.1:8b", "llama3.1:8b"]
    assert run["spent_tokens"] == 22 + 24


def test_exec_against_the_messages_server_with_an_executor_model(plan_file: Path) -> None:
    with MessagesServer(default=reply) as server:
        result = exec_json(
            [
                str(plan_file),
                "--provider",
                "anthropic",
                "--base-url",
                server.url,
                "--executor-model",
                "claude-3-5-haiku",
            ],
            env={"ANTHROPIC_API_KEY": "test"},
        )
        bodies = [request.json for request in server.message_requests]
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["output"] == {"colour": "teal", "number": 7}
    assert [body["model"] for body in bodies] == ["claude-3-5-haiku", "claude-3-5-haiku"]


def test_base_url_without_a_provider_means_anthropic_as_for_run(plan_file: Path) -> None:
    with MessagesServer(default=reply) as server:
        result = exec_json(
            [str(plan_file), "--base-url", server.url, "--model", "claude-3-5-haiku"],
            env={"ANTHROPIC_API_KEY": "test"},
        )
        paths = [request.path for request in server.message_requests]
        bodies = [request.json for request in server.message_requests]
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["output"] == {"colour": "teal", "number": 7}
    assert paths == ["/v1/messages", "/v1/messages"]
    assert [body["model"] for body in bodies] == ["claude-haiku-4-5", "claude-haiku-4-5"]


def test_base_url_without_a_provider_needs_the_anthropic_key(plan_file: Path) -> None:
    with MessagesServer() as server:
        result = exec_json([str(plan_file), "--base-url", server.url])
        assert server.requests == []
    assert result.exit_code == 2
    assert "no Anthropic API key: set ANTHROPIC_API_KEY" in result.stderr


def test_tools_lists_llm_and_agent_with_their_schemas() -> None:
    result = CliRunner().invoke(app, ["tools", "--json"])
    assert result.exit_code == 0, result.stderr
    listing = {item["name"]: item for item in json.loads(result.stdout)["tools"]}
    assert {"llm", "agent"} <= set(listing)
    text = json.dumps(listing["llm"])
    assert "prompt" in text
    assert "schema" in text
    assert "max_turns" in json.dumps(listing["agent"])


def test_the_plan_estimate_prices_each_llm_step_from_its_arguments() -> None:
    compiled = compile_plan(PLAN, default_registry())
    estimate = estimate_plan(compiled, executor_model="claude-haiku-4-5")
    # input: the system prompt's template, the prompt (and schema) at 3 bytes a token;
    # output: max_tokens; at $1 / $5 per million tokens
    first = -(-(len(LLM_SYSTEM) + len("Name a colour.")) // 3)
    schema = json.dumps(PLAN["steps"][1]["args"]["schema"])  # type: ignore[index]
    second = -(-(len(LLM_SYSTEM) + len("Name a number.") + len(schema)) // 3)
    assert estimate.steps[1].cost_usd == pytest.approx((first + 50 * 5) / 1e6)
    assert estimate.steps[2].cost_usd == pytest.approx((second + 50 * 5) / 1e6)
    assert estimate.cost_usd == pytest.approx((first + second + 100 * 5) / 1e6)
    # without an executor model the steps are priced by the run's model
    unknown = estimate_plan(compiled)
    assert unknown.cost_usd is None
    assert unknown.unknown_cost == (1, 2)


AGENT_PLAN = {
    "version": 1,
    "goal": "an agent with a misspelt tool",
    "steps": [{"id": 1, "tool": "agent", "args": {"task": "t", "tools": ["llm", "serch_web"]}}],
}


@pytest.mark.parametrize("command", ["check", "exec"])
def test_an_agent_listing_an_unregistered_tool_stops_before_anything_runs(
    command: str, tmp_path: Path
) -> None:
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(AGENT_PLAN), encoding="utf-8")
    args = [command, str(path)]
    with MessagesServer() as server:
        if command == "exec":
            args += ["--provider", "anthropic", "--base-url", server.url]
        result = CliRunner().invoke(app, args, env={"ANTHROPIC_API_KEY": "k"})
        assert server.requests == []
    assert result.exit_code == 2, result.output
    assert "step 1: error[unknown_tool]: args.tools[1]: tool 'serch_web' is not registered" in (
        result.stderr
    )
