"""A provider that reports more than its calls reserved, through the local Messages API
server: the spend stays within the bound of :mod:`plandag.brakes.budget`, and the run's
result, ``plandag exec`` and ``plandag trace`` say that the provider reported more than was
reserved; ``--slow-start`` is checked like the other brakes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

from plandag.cli import app
from plandag.compiler import compile_plan
from plandag.executors import ModelAccess
from plandag.models import AnthropicClient
from plandag.models.base import Usage
from plandag.models.pricing import DEFAULT_PRICES
from plandag.scheduler import RunLimits, run_plan
from plandag.testing import MessagesServer, ScriptedResponse, estimate_tokens
from plandag.testing.server import input_text
from plandag.tools.registry import default_registry

HAIKU = "claude-haiku-4-5"  # $1 / $5 per million input / output tokens
FACTOR = 10
CAP = 0.05


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "runs.sqlite3"))
    monkeypatch.chdir(tmp_path)


def lying_usage(body: dict[str, Any]) -> dict[str, int]:
    """Ten times what the call reserved: its counted input tokens and its max_tokens."""
    return {
        "input_tokens": FACTOR * estimate_tokens(input_text(body)),
        "output_tokens": FACTOR * int(body["max_tokens"]),
    }


def lying(body: dict[str, Any]) -> ScriptedResponse:
    return ScriptedResponse.text("ok", usage=lying_usage(body))


def billed(server: MessagesServer) -> float:
    """What the provider billed: every message request it answered, at its reported usage."""
    price = DEFAULT_PRICES.price(HAIKU)
    return sum(
        price.cost(Usage(**lying_usage(request.json))) for request in server.message_requests
    )


def plan(steps: int) -> dict[str, Any]:
    return {
        "version": 1,
        "goal": "model calls at once",
        "steps": [
            {"id": n, "tool": "llm", "args": {"prompt": f"Say ok ({n}).", "max_tokens": 100}}
            for n in range(1, steps + 1)
        ],
    }


@pytest.mark.anyio
async def test_a_tenfold_over_report_with_every_call_in_flight_stays_within_the_bound() -> None:
    # 16 calls of about $0.0007 fit a $0.05 cap together; each reply comes after 0.3 s, so
    # that all would be in flight before any settles, and each reports ten times what it
    # reserved.
    with MessagesServer(default=lying, ttft=0.3) as server:
        client = AnthropicClient(api_key="test", base_url=server.url)
        try:
            with anyio.fail_after(60):
                result = await run_plan(
                    compile_plan(plan(16), default_registry()),
                    models=ModelAccess(client, HAIKU),
                    # the cost cap alone: a stop at 2x the plan's estimate would cancel
                    # calls the provider bills all the same, whose usage never arrives
                    limits=RunLimits(max_cost_usd=CAP, heartbeat_every=None, plan_cost_factor=None),
                )
        finally:
            await client.aclose()
        provider_bill = billed(server)
    # the bound of plandag.brakes.budget for a steady ratio L = 10 and the default slow
    # start f = 0.15 (no single call near f x C): max(L x f, 1) x C = 1.5 x the cap
    assert provider_bill <= 1.5 * CAP
    assert result.spent_usd <= 1.5 * CAP
    assert result.spent_usd == pytest.approx(provider_bill)
    assert result.usage_over_reservation is not None
    assert result.usage_over_reservation == pytest.approx(FACTOR, rel=0.01)
    assert result.status == "budget_exceeded"


def write_plan(tmp_path: Path, steps: int) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan(steps)), encoding="utf-8")
    return path


def exec_args(plan_file: Path, server: MessagesServer, *extra: str) -> list[str]:
    return [
        "exec",
        str(plan_file),
        "--base-url",
        server.url,
        "--executor-model",
        HAIKU,
        "--max-cost",
        str(CAP),
        "--plan-cost-factor",
        "none",
        *extra,
    ]


def test_exec_says_the_provider_reported_more_than_was_reserved(tmp_path: Path) -> None:
    plan_file = write_plan(tmp_path, 4)
    env = {"ANTHROPIC_API_KEY": "test"}
    with MessagesServer(default=lying) as server:
        as_json = CliRunner().invoke(app, [*exec_args(plan_file, server), "--json"], env=env)
        plain = CliRunner().invoke(app, exec_args(plan_file, server), env=env)
    assert as_json.exit_code == 0, as_json.stderr
    document = json.loads(as_json.stdout)
    assert document["usage_over_reservation"] == pytest.approx(FACTOR, rel=0.01)
    assert plain.exit_code == 0, plain.stderr
    warning = [line for line in plain.stderr.splitlines() if line.startswith("warning:")]
    assert warning == [
        "warning: the provider reported more than was reserved (up to 10x a call's "
        "reservation); later calls were counted at 10x, and the spend may pass the cap"
    ]
    shown = CliRunner().invoke(app, ["trace", document["run_id"]])
    assert shown.exit_code == 0, shown.stderr
    assert "the provider reported more than was reserved (up to 10x" in " ".join(
        shown.stdout.split()
    )


def test_an_honest_provider_brings_no_warning(tmp_path: Path) -> None:
    plan_file = write_plan(tmp_path, 2)
    with MessagesServer(default=lambda body: ScriptedResponse.text("ok")) as server:
        result = CliRunner().invoke(
            app, [*exec_args(plan_file, server), "--json"], env={"ANTHROPIC_API_KEY": "test"}
        )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["usage_over_reservation"] is None
    assert "warning:" not in result.stderr


@pytest.mark.parametrize("value", ["0", "1.5", "-0.1", "nan", "half"])
def test_a_bad_slow_start_is_one_line_and_exit_2(tmp_path: Path, value: str) -> None:
    result = CliRunner().invoke(app, ["exec", str(write_plan(tmp_path, 1)), "--slow-start", value])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: --slow-start {value!r}: give a fraction of the caps greater than 0 and at most "
        "1 (e.g. 0.15), or none"
    )


def test_a_slow_start_above_one_in_a_config_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "plandag.toml").write_text("slow_start = 2\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["exec", str(write_plan(tmp_path, 1))])
    assert result.exit_code == 2
    assert "slow_start = 2 (" in result.stderr
    assert 'at most 1, e.g. 0.15, or "none" to turn it off' in result.stderr


def test_the_slow_start_is_turned_off_with_none(tmp_path: Path) -> None:
    plan_file = write_plan(tmp_path, 4)
    with MessagesServer(default=lying, ttft=0.3) as server:
        result = CliRunner().invoke(
            app,
            [*exec_args(plan_file, server, "--slow-start", "none"), "--json"],
            env={"ANTHROPIC_API_KEY": "test"},
        )
        sent = len(server.message_requests)
    assert result.exit_code == 0, result.stderr
    assert sent == 4  # every call started before the first settled
