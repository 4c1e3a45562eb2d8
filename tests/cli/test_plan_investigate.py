"""``plandag plan --investigate``: read-only tools run first, their results reach the planner
as quoted data; the written plan never runs. Against the local Messages API server
(plandag.testing) through the real Anthropic SDK, on 127.0.0.1."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from plandag.cli.plan_command import register
from plandag.executors.data import parse_data_blocks, quote_data
from plandag.planner.investigate import INVESTIGATION_HEADING
from plandag.testing import MessagesServer

TASK = "Convert 10 EUR to USD at today's rate."

TOOLS_FILE = '''
from plandag import tool

LOG = {log!r}


def note(text):
    with open(LOG, "a", encoding="utf-8") as log:
        log.write(text + "\\n")


@tool
def lookup(key: str) -> dict:
    """Look a fact up by key (read-only)."""
    note(f"lookup {{key}}")
    return {{"key": key, "value": 1.08}}


@tool
def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    note(f"multiply {{a}} {{b}}")
    return a * b


@tool(effects="irreversible")
def send_email(to: str, body: str) -> str:
    """Send an email (irreversible)."""
    note(f"send_email {{to}}")
    return "sent"
'''

INVESTIGATION: dict[str, Any] = {
    "g": "Find today's EUR to USD rate",
    "s": [{"i": 1, "t": "lookup", "a": {"key": "EURUSD"}, "d": []}],
}
FINAL: dict[str, Any] = {
    "g": "10 EUR in USD",
    "s": [{"i": 1, "t": "multiply", "a": {"a": 10, "b": 1.08}, "d": []}],
    "o": "<step_1_result>",
}
WITH_EFFECT: dict[str, Any] = {
    "g": "Ask for the rate",
    "s": [
        {"i": 1, "t": "lookup", "a": {"key": "EURUSD"}, "d": []},
        {"i": 2, "t": "send_email", "a": {"to": "bank@example.com", "body": "rate?"}, "d": []},
    ],
}
USAGE = {"input_tokens": 1000, "output_tokens": 100}


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests to 127.0.0.1 must not go through a proxy from the environment."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    # no prompt cache: the summaries' figures are those of the scripted usage alone, however
    # long the planner's prompt grows with the registered tools
    with MessagesServer(cache_min_tokens=10**9) as running:
        yield running


def plan_app() -> typer.Typer:
    app = typer.Typer(add_completion=False, rich_markup_mode=None)
    register(app)

    @app.callback()
    def root() -> None:
        """plandag, for this test."""

    return app


def run_plan_command(
    server: MessagesServer, tmp_path: Path, *options: str
) -> tuple[Any, Path, Path]:
    """``plandag plan TASK --tools FILE -o plan.json --base-url URL *options``; returns the
    result, the plan's path and the tools' call log."""
    log = tmp_path / "calls.log"
    tools = tmp_path / "fx_tools.py"
    tools.write_text(TOOLS_FILE.format(log=str(log)), encoding="utf-8")
    target = tmp_path / "plan.json"
    result = CliRunner().invoke(
        plan_app(),
        [
            "plan",
            TASK,
            "--tools",
            str(tools),
            "-o",
            str(target),
            "--base-url",
            server.url,
            *options,
        ],
        env={"ANTHROPIC_API_KEY": "test"},
    )
    return result, target, log


def logged(log: Path) -> str:
    return log.read_text(encoding="utf-8") if log.exists() else ""


def first_message(server: MessagesServer, index: int) -> str:
    text: str = server.message_requests[index].json["messages"][0]["content"]
    return text


FINAL_DOCUMENT = {
    "version": 1,
    "goal": "10 EUR in USD",
    "steps": [{"id": 1, "tool": "multiply", "args": {"a": 10, "b": 1.08}, "depends_on": []}],
    "output": "<step_1_result>",
}


def test_investigate_runs_read_only_tools_and_quotes_their_results(
    server: MessagesServer, tmp_path: Path
) -> None:
    server.push_json(INVESTIGATION, usage=USAGE)
    server.push_json(FINAL, usage=USAGE)
    result, target, log = run_plan_command(server, tmp_path, "--investigate")
    assert result.exit_code == 0, result.output

    # the investigation tool ran exactly once; the written plan's tools never ran
    assert logged(log) == "lookup EURUSD\n"
    # the written plan is the second reply
    assert json.loads(target.read_text(encoding="utf-8")) == FINAL_DOCUMENT
    assert result.stdout.endswith("%% critical path: 1 (1 step)\n")

    assert len(server.message_requests) == 2
    second = first_message(server, 1)
    block = quote_data("investigation step 1 result", {"key": "EURUSD", "value": 1.08}, 4000)
    assert f"{INVESTIGATION_HEADING}\nstep 1 (lookup) succeeded:\n{block}\n" in second
    [data] = parse_data_blocks(second)
    assert (data.label, data.value) == (
        "investigation step 1 result",
        {"key": "EURUSD", "value": 1.08},
    )
    assert first_message(server, 0).startswith("Task:\nInvestigate before planning.")

    assert re.search(
        r"^investigation: 1 plan\(s\) asked, 1 call\(s\), \$0\.0045; ran 1 of 1 step\(s\) "
        r"without effects \(lookup\) in \d+\.\d\d s: 1 succeeded; status succeeded$",
        result.stderr,
        flags=re.MULTILINE,
    ), result.stderr
    assert f"{target}: 1 step, 1 plan(s) asked, 1 call(s), 100 output tokens" in result.stderr


def test_an_investigation_step_with_effects_is_refused_repaired_and_never_runs(
    server: MessagesServer, tmp_path: Path
) -> None:
    server.push_json(WITH_EFFECT, usage=USAGE)
    server.push_json(INVESTIGATION, usage=USAGE)
    server.push_json(FINAL, usage=USAGE)
    result, target, log = run_plan_command(server, tmp_path, "--investigate")
    assert result.exit_code == 0, result.output
    assert logged(log) == "lookup EURUSD\n"
    assert json.loads(target.read_text(encoding="utf-8")) == FINAL_DOCUMENT
    assert len(server.message_requests) == 3
    repair = server.message_requests[1].json["messages"][2]["content"]
    [report] = parse_data_blocks(repair)
    assert report.value == (
        "plan.json: step 2: error[effects_in_read_only]: tool send_email has effects "
        "(irreversible) and this run is read-only (hint: drop --read-only, or plan with "
        "tools without effects)\n"
        "plan.json: 1 error(s); the plan does not compile"
    )
    assert "investigation: 2 plan(s) asked, 2 call(s), $0.0090; ran 1 of 1 step(s)" in (
        result.stderr
    )


def test_an_investigation_that_never_compiles_stops_with_exit_2(
    server: MessagesServer, tmp_path: Path
) -> None:
    for _ in range(3):
        server.push_json(WITH_EFFECT)
    result, target, log = run_plan_command(server, tmp_path, "--investigate")
    assert result.exit_code == 2
    assert "plan.json: step 2: error[effects_in_read_only]" in result.stderr
    assert (
        f"the model's investigation plan does not compile; nothing was written to {target}"
        in result.stderr
    )
    assert not target.exists()
    assert logged(log) == ""
    assert len(server.message_requests) == 3


def test_without_investigate_there_is_exactly_one_request_and_nothing_runs(
    server: MessagesServer, tmp_path: Path
) -> None:
    server.push_json(FINAL, usage=USAGE)
    result, target, log = run_plan_command(server, tmp_path)
    assert result.exit_code == 0, result.output
    assert len(server.message_requests) == 1
    assert logged(log) == ""
    assert json.loads(target.read_text(encoding="utf-8")) == FINAL_DOCUMENT
    assert INVESTIGATION_HEADING not in first_message(server, 0)
    assert "investigation" not in result.stderr


def test_plan_output_is_checked_before_any_model_call(tmp_path: Path) -> None:
    """-o naming a folder fails at once: no request reaches the model."""
    from typer.testing import CliRunner

    from plandag.cli import app
    from plandag.testing import MessagesServer

    with MessagesServer() as server:
        result = CliRunner(env={"ANTHROPIC_API_KEY": "test"}).invoke(
            app, ["plan", "anything", "-o", str(tmp_path), "--base-url", server.url]
        )
        assert result.exit_code == 2
        assert "is a folder" in result.stderr
        assert server.message_requests == []
