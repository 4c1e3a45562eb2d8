"""Brakes on by default in Python, as on the command line: the cost, token, wall-clock and
stall brakes of ``run_plan`` and ``Agent``, the write boundary (the working directory) and
the approval gate (``approve=`` required for a plan with effects)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from plandag import (
    UNLIMITED,
    ApprovalRequest,
    ApprovalRequiredError,
    Decision,
    RunLimits,
    compile_plan,
    run_plan_sync,
    tool,
)
from plandag.brakes import brakes_line
from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.models import AnthropicClient
from plandag.planner.agent import Agent
from plandag.testing import MessagesServer
from plandag.tools.registry import Registry

done: list[str] = []


@tool(cost_estimate_usd=0.6)
def pricey(x: int) -> int:
    """An estimated $0.60 per call."""
    done.append(f"pricey {x}")
    return x


@tool(tokens_estimate=150_000)
def wordy(x: int) -> int:
    """An estimated 150,000 tokens per call."""
    done.append(f"wordy {x}")
    return x


@tool(effects="write", writes="path")
def save(path: str, text: str) -> str:
    """Write ``text`` to ``path``."""
    Path(path).write_text(text, encoding="utf-8")
    done.append(f"save {path}")
    return path


@tool(effects="irreversible")
def pay(amount: int) -> int:
    """Pay ``amount`` (irreversible)."""
    done.append(f"pay {amount}")
    return amount


@tool
def look(name: str) -> str:
    """Read-only."""
    done.append(f"look {name}")
    return name


REGISTRY = Registry([pricey, wordy, save, pay, look])


@pytest.fixture(autouse=True)
def _clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    done.clear()
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    yield
    done.clear()


def plan(*steps: dict[str, Any]) -> Any:
    return compile_plan({"steps": list(steps)}, REGISTRY)


def step(step_id: int, tool_name: str, **args: Any) -> dict[str, Any]:
    return {"id": step_id, "tool": tool_name, "args": args}


# -- the brakes' defaults ------------------------------------------------------------------


def test_run_plan_without_limits_has_the_default_cost_cap() -> None:
    # $1.00 per run: the second $0.60 step does not start
    result = run_plan_sync(plan(step(1, "pricey", x=1), step(2, "pricey", x=2)))
    assert (result.status, result.stop_reason, result.spent_usd) == (
        "budget_exceeded",
        "budget",
        0.6,
    )
    assert len(done) == 1
    lifted = run_plan_sync(
        plan(step(1, "pricey", x=1), step(2, "pricey", x=2)),
        limits=RunLimits(max_cost_usd=UNLIMITED),
    )
    assert (lifted.status, lifted.spent_usd) == ("succeeded", 1.2)


def test_run_plan_without_limits_has_the_default_token_cap() -> None:
    # 200,000 tokens per run: the second 150,000-token step does not start
    result = run_plan_sync(plan(step(1, "wordy", x=1), step(2, "wordy", x=2)))
    assert (result.status, result.spent_tokens) == ("budget_exceeded", 150_000)
    lifted = run_plan_sync(
        plan(step(1, "wordy", x=1), step(2, "wordy", x=2)),
        limits=RunLimits(max_tokens=UNLIMITED),
    )
    assert (lifted.status, lifted.spent_tokens) == ("succeeded", 300_000)


def test_the_default_limits_are_the_tables_and_print_as_the_cli_does() -> None:
    limits = RunLimits()
    assert (
        limits.max_cost_usd,
        limits.max_tokens,
        limits.max_seconds,
        limits.stall_after,
        limits.stop_on_stall,
    ) == (1.0, 200_000, 900.0, 120.0, True)
    assert brakes_line(
        max_cost_usd=limits.max_cost_usd,
        max_tokens=limits.max_tokens,
        max_seconds=limits.max_seconds,
        stall_after=limits.stall_after,
        stop_on_stall=limits.stop_on_stall,
        boundary="./",
    ) == (
        "brakes: $1.00, 200,000 tokens, 15 min, stall 120 s, writes ./ — plandag config shows "
        "them all and how to lift each"
    )
    assert repr(UNLIMITED) == "UNLIMITED"
    assert RunLimits(max_seconds=UNLIMITED).as_json()["max_seconds"] == "none"
    assert RunLimits.from_json({"max_seconds": "none", "max_cost_usd": None}) == RunLimits(
        max_seconds=UNLIMITED, max_cost_usd=UNLIMITED
    )


def test_none_is_not_a_way_to_lift_a_brake() -> None:
    with pytest.raises(ValueError, match="max_cost_usd=None is ambiguous"):
        RunLimits(max_cost_usd=None)  # type: ignore[arg-type]


# -- the approval gate -----------------------------------------------------------------------


def test_a_plan_with_effects_and_no_approver_raises_before_anything_runs() -> None:
    compiled = plan(step(1, "look", name="a"), step(2, "save", path="a.txt", text="x"))
    with pytest.raises(ApprovalRequiredError) as caught:
        run_plan_sync(compiled)
    assert str(caught.value) == (
        "run_plan: the plan has steps with effects (2: save [write]) and no approver; pass "
        "approve= an approver (a callable taking an ApprovalRequest and returning a "
        'Decision), "auto" (write effects approved, irreversible ones need an approver) or '
        '"never" (nothing with effects runs: the run ends awaiting_approval). Nothing ran.'
    )
    assert done == []
    assert not Path("a.txt").exists()


def test_a_read_only_plan_needs_no_approver() -> None:
    assert run_plan_sync(plan(step(1, "look", name="a"))).status == "succeeded"


def test_never_and_auto_without_an_approver_end_awaiting_approval() -> None:
    writes = plan(step(1, "look", name="a"), step(2, "save", path="a.txt", text="x"))
    result = run_plan_sync(writes, approve="never")
    assert (result.status, result.stop_reason) == ("awaiting_approval", "awaiting_approval")
    assert {(r.status, r.reason) for r in result.steps.values()} == {
        ("skipped", "awaiting_approval")
    }
    assert done == []
    # auto approves writes...
    assert run_plan_sync(writes, approve="auto").status == "succeeded"
    assert Path("a.txt").read_text(encoding="utf-8") == "x"
    # ...but irreversible effects need an approver
    done.clear()
    result = run_plan_sync(plan(step(1, "pay", amount=5)), approve="auto")
    assert result.status == "awaiting_approval"
    assert result.steps[1].detail == (
        "not started: the plan has irreversible effects; nobody here can approve it "
        "(approve='auto')"
    )
    assert done == []


def test_an_approver_decides_and_a_rejection_runs_nothing() -> None:
    asked: list[ApprovalRequest] = []

    def approver(request: ApprovalRequest) -> Decision:
        asked.append(request)
        return Decision(False, request.plan_hash, feedback="not today", who="ana")

    result = run_plan_sync(plan(step(1, "pay", amount=5)), approve=approver)
    assert (result.status, result.steps[1].detail) == ("rejected", "not started: not today")
    assert done == []
    assert [request.effects for request in asked] == [((1, "pay", "irreversible", ()),)]

    async def yes(request: ApprovalRequest) -> Decision:
        return Decision(True, request.plan_hash, who="ana")

    assert run_plan_sync(plan(step(1, "pay", amount=5)), approve=yes).status == "succeeded"
    assert done == ["pay 5"]


# -- the write boundary ----------------------------------------------------------------------


def test_run_plan_writes_only_inside_the_working_directory_by_default(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    result = run_plan_sync(
        plan(step(1, "save", path=str(outside), text="x")), approve="auto", retry=RetryPolicy(0)
    )
    assert (result.status, result.steps[1].reason) == ("failed", "write_outside_boundary")
    assert not outside.exists()
    inside = run_plan_sync(plan(step(1, "save", path="in.txt", text="y")), approve="auto")
    assert inside.status == "succeeded"
    assert Path("in.txt").read_text(encoding="utf-8") == "y"
    lifted = run_plan_sync(
        plan(step(1, "save", path=str(outside), text="z")),
        approve="auto",
        write_boundary=UNLIMITED,
    )
    assert lifted.status == "succeeded"
    assert outside.read_text(encoding="utf-8") == "z"


# -- the agent --------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_an_agent_that_may_plan_effects_needs_an_approver() -> None:
    with MessagesServer() as server:
        async with AnthropicClient(api_key="test", base_url=server.url) as client:
            agent = Agent(client, "claude-sonnet-4-6", REGISTRY, clock=VirtualClock())
            with pytest.raises(ApprovalRequiredError) as caught:
                await agent.run("Pay 5")
            assert str(caught.value).startswith(
                "Agent: the model may plan steps with effects (the registry has tools with "
                "effects: pay [irreversible], save [write]) and no approver; pass approve="
            )
            assert server.requests == []  # nothing ran, not even the planning call
            # read-only agents, and registries without effects, need none
            server.push_json(
                {
                    "g": "look",
                    "s": [{"i": 1, "t": "look", "a": {"name": "a"}}],
                    "o": "<step_1_result>",
                }
            )
            read_only = Agent(
                client, "claude-sonnet-4-6", REGISTRY, read_only=True, clock=VirtualClock()
            )
            result = await read_only.run("Look at a")
            assert result.status == "succeeded"
            assert (result.run.spent_tokens > 0, done) == (True, ["look a"])


@pytest.mark.anyio
async def test_a_model_without_a_price_runs_under_the_default_caps_capped_by_tokens() -> None:
    # RunLimits() has a $1.00 cap: an unpriced model is never refused for having no price;
    # it costs $0 and its tokens count against the 200,000-token cap.
    with MessagesServer() as server:
        server.push_json(
            {"g": "look", "s": [{"i": 1, "t": "look", "a": {"name": "a"}}], "o": "<step_1_result>"}
        )
        async with AnthropicClient(api_key="test", base_url=server.url) as client:
            agent = Agent(
                client, "local-llama-unpriced", REGISTRY, read_only=True, clock=VirtualClock()
            )
            result = await agent.run("Look at a")
    assert (result.status, result.answer) == ("succeeded", "a")
    [call] = result.llm_calls
    assert (call.priced, call.cost_usd) == (False, 0.0)
    assert result.run.spent_usd == 0.0
    assert result.run.spent_tokens == call.usage.total_tokens > 0
