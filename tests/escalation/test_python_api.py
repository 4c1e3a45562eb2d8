"""Escalation from Python: ``Agent(on_escalation=...)`` past its replan caps (the local
Messages API server plays the model), and the durable API, which stores the case of a run
whose irreversible step's outcome is unknown on resume and calls ``on_escalation``."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from plandag import Agent
from plandag.approval import ApprovalRequest, CallbackApprover, Decision
from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.checks.builtins import BUILTIN_CHECKS
from plandag.compiler import compile_plan
from plandag.models import AnthropicClient
from plandag.planner import agent as planner_agent
from plandag.runs.options import RunOptions
from plandag.runs.segments import continue_run, start_run
from plandag.scheduler import RunLimits
from plandag.store import open_store
from plandag.testing import MessagesServer
from plandag.tools import ToolContext, tool
from plandag.tools.registry import Registry

calls: collections.Counter[str] = collections.Counter()


@tool
def broken(name: str) -> dict[str, Any]:
    """A service that is always down."""
    raise ValueError(f"service down for {name}")


@tool(effects="irreversible")
def pay(amount: float) -> str:
    """Pay AMOUNT; the bank answers late, after the money left (an error after the fact)."""
    calls["pay"] += 1
    raise ConnectionResetError("the bank hung up before it answered")


def registry() -> Registry:
    return Registry([broken, pay], BUILTIN_CHECKS)


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    calls.clear()


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


def step(i: int, tool_name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"i": i, "t": tool_name, "a": args, "d": []}


@pytest.mark.anyio
async def test_the_agent_calls_on_escalation_with_the_case(server: MessagesServer) -> None:
    for number, name in ((1, "x"), (2, "y"), (3, "z")):
        server.push_json(
            {"g": "Score x", "s": [step(number, "broken", {"name": f"{name}"})], "o": None}
        )
    seen: list[dict[str, Any]] = []
    client = AnthropicClient(api_key="test", base_url=server.url)
    agent = Agent(
        client,
        "claude-sonnet-4-6",
        registry(),
        retry=RetryPolicy(retries=0),
        clock=VirtualClock(),
        limits=RunLimits(heartbeat_every=None),
        approve="never",  # the registry has an irreversible tool; these plans do not use it
        on_escalation=seen.append,
    )
    try:
        result = await agent.run("Score x")
    finally:
        await client.aclose()
    assert (result.status, result.run.escalation) == ("escalated", "replan_caps")
    [case] = seen
    assert (case["run_id"], case["reason"], case["goal"], case["command"]) == (
        result.run.run_id,
        "replan_caps",
        "Score x",
        "Agent",
    )
    assert case["detail"] == result.run.escalation_detail
    assert len(case["plan_versions"]) == 3
    assert [(item["id"], item["status"]) for item in case["failures"]] == [
        (1, "failed"),
        (2, "failed"),
        (3, "failed"),
    ]
    assert case["spend"] == {"usd": result.run.spent_usd, "tokens": result.run.spent_tokens}
    assert case["actions"] is None  # no run store: no commands to close it


@pytest.mark.anyio
async def test_the_planners_agent_is_handed_its_hooks(server: MessagesServer) -> None:
    from plandag.escalation import EscalationHooks

    for number, name in ((1, "x"), (2, "y"), (3, "z")):
        server.push_json(
            {"g": "Score x", "s": [step(number, "broken", {"name": f"{name}"})], "o": None}
        )
    seen: list[dict[str, Any]] = []
    client = AnthropicClient(api_key="test", base_url=server.url)
    agent = planner_agent.Agent(
        client,
        "claude-sonnet-4-6",
        registry(),
        retry=RetryPolicy(retries=0),
        clock=VirtualClock(),
        limits=RunLimits(heartbeat_every=None),
        approve="never",  # the registry has an irreversible tool; these plans do not use it
        on_escalation=EscalationHooks(callback=seen.append),
    )
    try:
        result = await agent.run("Score x")
    finally:
        await client.aclose()
    assert result.status == "escalated"
    assert [(case["command"], case["reason"]) for case in seen] == [("Agent", "replan_caps")]
    assert agent.alert_hooks() is agent.on_escalation  # EscalationHooks are alert hooks too


@pytest.mark.anyio
async def test_an_agents_hook_that_raises_leaves_the_result_escalated(
    server: MessagesServer,
) -> None:
    for number, name in ((1, "x"), (2, "y"), (3, "z")):
        server.push_json(
            {"g": "Score x", "s": [step(number, "broken", {"name": f"{name}"})], "o": None}
        )
    goals: list[str] = []

    class Failing:
        async def agent_escalated(self, result: Any, *, goal: str, plans: Any, params: Any) -> None:
            goals.append(goal)
            raise RuntimeError("the pager is down")

    client = AnthropicClient(api_key="test", base_url=server.url)
    agent = planner_agent.Agent(
        client,
        "claude-sonnet-4-6",
        registry(),
        retry=RetryPolicy(retries=0),
        clock=VirtualClock(),
        limits=RunLimits(heartbeat_every=None),
        approve="never",  # the registry has an irreversible tool; these plans do not use it
        on_escalation=Failing(),
    )
    try:
        result = await agent.run("Score x")
    finally:
        await client.aclose()
    assert (result.status, goals) == ("escalated", ["Score x"])
    assert agent.alert_hooks() is None  # not alert hooks: alerts call nothing


def test_the_planners_agent_refuses_a_plain_function() -> None:
    client = AnthropicClient(api_key="test", base_url="http://127.0.0.1:9")
    for argument in ("on_escalation", "on_alert"):
        with pytest.raises(TypeError, match=r"plandag\.Agent.*EscalationHooks\(callback=fn\)"):
            planner_agent.Agent(client, "claude-sonnet-4-6", registry(), **{argument: print})


@pytest.mark.anyio
async def test_the_agent_with_escalate_never_calls_nothing(server: MessagesServer) -> None:
    for number, name in ((1, "x"), (2, "y"), (3, "z")):
        server.push_json(
            {"g": "Score x", "s": [step(number, "broken", {"name": f"{name}"})], "o": None}
        )
    seen: list[dict[str, Any]] = []
    client = AnthropicClient(api_key="test", base_url=server.url)
    agent = Agent(
        client,
        "claude-sonnet-4-6",
        registry(),
        retry=RetryPolicy(retries=0),
        clock=VirtualClock(),
        limits=RunLimits(heartbeat_every=None),
        approve="never",  # the registry has an irreversible tool; these plans do not use it
        escalate="never",
        on_escalation=seen.append,
    )
    try:
        result = await agent.run("Score x")
    finally:
        await client.aclose()
    assert result.status == "gave_up"
    assert seen == []


def approve_all(request: ApprovalRequest) -> Decision:
    return Decision(True, request.plan_hash, who="test")


@pytest.mark.anyio
async def test_an_unknown_irreversible_outcome_on_resume_escalates(tmp_path: Path) -> None:
    compiled = compile_plan(
        {
            "version": 1,
            "goal": "pay the invoice",
            "steps": [{"id": 1, "tool": "pay", "args": {"amount": 12.5}}],
        },
        registry(),
    )
    options = RunOptions(retries=0)
    store = open_store(tmp_path / "runs.sqlite3")
    seen: list[dict[str, Any]] = []
    try:
        first = await start_run(
            store, compiled, options, command="exec", approver=CallbackApprover(approve_all)
        )
        assert first.status == "failed"
        assert calls["pay"] == 1
        outcome = await continue_run(
            store, first.run_id, compiled, options, on_escalation=seen.append
        )
        assert (outcome.status, outcome.escalation) == ("escalated", "unknown_outcome")
        assert outcome.escalation_detail is not None
        assert outcome.escalation_detail.startswith(
            "step(s) 1 (pay) have irreversible effects and started before the run stopped"
        )
        assert calls["pay"] == 1  # never repeated without a person
        digest = store.plan_versions(first.run_id)[-1].hash
        assert outcome.message is not None
        assert f"`plandag approve {first.run_id} --hash {digest}`" in outcome.message
        [case] = store.escalations()
        assert (case.run_id, case.reason, case.status) == (first.run_id, "unknown_outcome", "open")
        assert (
            case.context["actions"]["approve"] == f"plandag approve {first.run_id} --hash {digest}"
        )
        assert [(item["id"], item["effects"]) for item in case.context["failures"]] == [
            (1, "irreversible")
        ]
        assert seen == [case.context]
        assert store.run(first.run_id).status == "escalated"

        never = await continue_run(
            store, first.run_id, compiled, RunOptions(retries=0, escalate="never")
        )
        assert never.status == "awaiting_approval"  # as a run nobody can be handed to
        assert len(store.escalations()) == 1
    finally:
        store.close()


@pytest.mark.anyio
async def test_an_instruction_is_refused_for_a_run_without_a_planner(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from plandag.cli.app import app

    compiled = compile_plan(
        {
            "version": 1,
            "goal": "pay the invoice",
            "steps": [{"id": 1, "tool": "pay", "args": {"amount": 12.5}}],
        },
        registry(),
    )
    store_path = tmp_path / "runs.sqlite3"
    store = open_store(store_path)
    try:
        first = await start_run(
            store,
            compiled,
            RunOptions(retries=0),
            command="exec",
            approver=CallbackApprover(approve_all),
        )
        escalated = await continue_run(store, first.run_id, compiled, RunOptions(retries=0))
        assert escalated.status == "escalated"
    finally:
        store.close()
    result = CliRunner().invoke(
        app, ["resume", first.run_id, "--instruction", "pay by card", "--store", str(store_path)]
    )
    assert result.exit_code == 2
    assert (
        f"run {first.run_id} has no planner to follow an instruction (it was made by "
        "`plandag exec` without --planner)" in result.stderr
    )
    store = open_store(store_path)
    try:
        assert [case.status for case in store.escalations(status=None)] == ["open"]
        assert store.run(first.run_id).status == "escalated"
    finally:
        store.close()


# -- run_plan ---------------------------------------------------------------------------------

RUN_CLOCK = VirtualClock()


@tool(typical_seconds=2.0)
def slow_lookup(seconds: float) -> str:
    """Takes ``seconds`` on the run's virtual clock; declares 2 s."""
    calls["slow_lookup"] += 1
    RUN_CLOCK.advance(seconds)
    return "found"


def _slow_plan() -> Any:
    plan = {
        "goal": "look it up",
        "steps": [{"id": 1, "tool": "slow_lookup", "args": {"seconds": 7.0}}],
    }
    return compile_plan(plan, Registry([slow_lookup]))


def _limits() -> RunLimits:
    return RunLimits(heartbeat_every=None)


@pytest.mark.anyio
async def test_run_plan_calls_a_plain_function_with_the_case() -> None:
    import plandag

    seen: list[dict[str, Any]] = []
    # estimated 2 s, 3x is 6 s: the step's 7 s escalates the run (plan_budget)
    result = await plandag.run_plan(
        _slow_plan(), limits=_limits(), clock=RUN_CLOCK, on_escalation=seen.append
    )

    assert (result.status, result.escalation) == ("escalated", "plan_budget")
    [case] = seen
    assert (case["run_id"], case["status"], case["reason"]) == (
        result.run_id,
        "escalated",
        "plan_budget",
    )
    assert (case["command"], case["goal"]) == ("run_plan", "look it up")
    assert [version["plan"]["steps"][0]["tool"] for version in case["plan_versions"]] == [
        "slow_lookup"
    ]


@pytest.mark.anyio
async def test_the_schedulers_run_plan_is_handed_an_escalation_hook() -> None:
    from plandag.escalation import EscalationHooks
    from plandag.scheduler import run_plan

    seen: list[dict[str, Any]] = []
    result = await run_plan(
        _slow_plan(),
        limits=_limits(),
        clock=RUN_CLOCK,
        on_escalation=EscalationHooks(callback=seen.append),
    )

    assert result.status == "escalated"
    assert [case["reason"] for case in seen] == ["plan_budget"]


@pytest.mark.anyio
async def test_a_hook_that_raises_leaves_the_result_escalated() -> None:
    from plandag.scheduler import run_plan

    class Failing:
        async def run_escalated(self, result: Any, compiled: Any) -> None:
            raise RuntimeError("the pager is down")

    result = await run_plan(
        _slow_plan(), limits=_limits(), clock=RUN_CLOCK, on_escalation=Failing()
    )

    assert result.status == "escalated"


@pytest.mark.anyio
async def test_the_schedulers_run_plan_refuses_a_plain_function_before_anything_runs() -> None:
    from plandag.scheduler import run_plan

    with pytest.raises(TypeError, match=r"EscalationHooks\(callback=fn\).*plandag.run_plan"):
        await run_plan(_slow_plan(), limits=_limits(), clock=RUN_CLOCK, on_escalation=print)
    assert calls["slow_lookup"] == 0


def test_run_plan_takes_the_schedulers_arguments() -> None:
    import inspect

    import plandag
    from plandag.scheduler import entry

    for public, core in (
        (plandag.run_plan, entry.run_plan),
        (plandag.run_plan_sync, entry.run_plan_sync),
    ):
        ours = inspect.signature(public).parameters
        theirs = inspect.signature(core).parameters
        assert list(ours) == list(theirs)
        assert [(p.kind, p.default) for p in ours.values()] == [
            (p.kind, p.default) for p in theirs.values()
        ]


@pytest.mark.anyio
async def test_approve_refused_on_a_run_without_a_planner_never_points_to_an_instruction(
    tmp_path: Path,
) -> None:
    from plandag.errors import InputError
    from plandag.runs.decisions import approve_escalated

    compiled = compile_plan(
        {
            "version": 1,
            "goal": "pay the invoice",
            "steps": [{"id": 1, "tool": "pay", "args": {"amount": 12.5}}],
        },
        registry(),
    )
    store = open_store(tmp_path / "runs.sqlite3")
    try:
        first = await start_run(
            store,
            compiled,
            RunOptions(retries=0),
            command="exec",
            approver=CallbackApprover(approve_all),
        )
        escalated = await continue_run(store, first.run_id, compiled, RunOptions(retries=0))
        assert escalated.status == "escalated"
        # the same run, held for a reason approve cannot settle
        store.close_escalations(first.run_id, "resumed", who="test")
        store.add_escalation(first.run_id, "plan_budget", {"why": "spend past the estimate"})
        digest = store.plan_versions(first.run_id)[-1].hash
        with pytest.raises(InputError) as refused:
            approve_escalated(store, first.run_id, who="ana", expected_hash=digest)
    finally:
        store.close()
    message = str(refused.value)
    assert f"run {first.run_id} was escalated for plan_budget" in message
    # the hint names what this run can do, never `resume --instruction`, which it refuses
    assert "--instruction" not in message
    assert f"`plandag resume {first.run_id}`" in message
    assert f"`plandag abandon {first.run_id} --reason TEXT`" in message


# -- an amended plan's run --------------------------------------------------------------------


@tool(effects="write", typical_seconds=0.1, cost_estimate_usd=0.01)
def order(item: str, ctx: ToolContext) -> str:
    """Order ITEM: estimated $0.01, costs $0.05 (past 2x the plan's estimated cost)."""
    calls["order"] += 1
    ctx.report_cost(usd=0.05)
    return f"ordered {item}"


@tool(effects="irreversible", typical_seconds=0.1, cost_estimate_usd=0.0)
def wire(amount: float) -> str:
    """Wire AMOUNT (cannot be undone)."""
    calls["wire"] += 1
    return f"wired {amount}"


def _order_plan() -> Any:
    plan = {
        "version": 1,
        "goal": "order a chair, wire the deposit",
        "steps": [
            {"id": 1, "tool": "order", "args": {"item": "chair"}},
            {"id": 2, "tool": "wire", "args": {"amount": 40.0}},
        ],
    }
    return compile_plan(plan, Registry([order, wire]))


@pytest.mark.anyio
@pytest.mark.parametrize(
    "choices",
    [{"reject_steps": (2,)}, {"edit_steps": {2: {"amount": 20.0}}}],
    ids=["reject_steps", "edit_steps"],
)
async def test_an_amended_plans_escalation_calls_the_hooks_once(
    tmp_path: Path, choices: dict[str, Any]
) -> None:
    def amend_and_approve(request: ApprovalRequest) -> Decision:
        return Decision(True, request.plan_hash, who="ana", **choices)

    seen: list[dict[str, Any]] = []
    store = open_store(tmp_path / "runs.sqlite3")
    try:
        outcome = await start_run(
            store,
            _order_plan(),
            RunOptions(retries=0),
            command="exec",
            approver=CallbackApprover(amend_and_approve),
            on_escalation=seen.append,
        )
        assert (outcome.status, outcome.escalation) == ("escalated", "plan_budget")
        assert calls["order"] == 1
        assert [v.source for v in store.plan_versions(outcome.run_id)] == ["stored", "amended"]
        [case] = store.escalations()
        assert (case.run_id, case.reason) == (outcome.run_id, "plan_budget")
        assert seen == [case.context]  # called for the amended run, and only once
    finally:
        store.close()
