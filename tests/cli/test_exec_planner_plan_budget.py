"""``plandag exec PLAN --planner`` holds the run to the limits relative to the plan's
estimate (2x its cost), as ``exec`` without a planner does: past them the run escalates
(exit 5, reason ``plan_budget``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from plandag.cli.app import app
from plandag.testing import MessagesServer

TOOLS_FILE = '''
from plandag import tool
from plandag.tools.base import ToolContext


@tool(typical_seconds=0.5, cost_estimate_usd=0.01)
def paid(usd: float, ctx: ToolContext) -> str:
    """Costs USD (reported); estimated at $0.01."""
    ctx.report_cost(usd=usd)
    return "paid"
'''

PLAN = {
    "version": 1,
    "steps": [
        {"id": 1, "tool": "paid", "args": {"usd": 0.015}},
        {"id": 2, "tool": "paid", "args": {"usd": 0.05}, "depends_on": [1]},
        {"id": 3, "tool": "paid", "args": {"usd": 0.0}, "depends_on": [2]},
    ],
    "output": "<step_3_result>",
}


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "store" / "runs.sqlite3"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tools.py").write_text(TOOLS_FILE, encoding="utf-8")
    (tmp_path / "plan.json").write_text(json.dumps(PLAN), encoding="utf-8")


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


@pytest.mark.parametrize("planner", [False, True])
def test_spend_past_2x_the_estimate_escalates_with_or_without_a_planner(
    server: MessagesServer, planner: bool
) -> None:
    args = ["exec", "plan.json", "--tools", "tools.py", "--retries", "0", "--json"]
    if planner:
        args += ["--planner", "anthropic", "--base-url", server.url]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 5, result.output
    document = json.loads(result.stdout)
    run = document
    assert document["status"] == "escalated"
    assert run["escalation"] == "plan_budget"
    assert run["escalation_detail"] == (
        "spend $0.0650 passed 2x the plan's estimated cost $0.0300 (limit $0.0600)"
    )
    assert server.requests == []  # no failure: no model call


def test_plan_cost_factor_none_lifts_it_for_exec_planner(server: MessagesServer) -> None:
    args = ["exec", "plan.json", "--tools", "tools.py", "--retries", "0", "--json"]
    args += ["--planner", "anthropic", "--base-url", server.url, "--plan-cost-factor", "none"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["status"] == "succeeded"
