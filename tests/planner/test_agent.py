"""The agent end to end through the real Anthropic SDK against the local Messages API server:
plan once, run, join by code or by one model call; failures of the planning call; the
brakes over model calls."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.checks.builtins import BUILTIN_CHECKS
from plandag.executors.data import parse_data_blocks
from plandag.models import AnthropicClient
from plandag.planner.agent import Agent, AgentResult
from plandag.scheduler import RunLimits
from plandag.testing import MessagesServer
from plandag.tools import tool
from plandag.tools.registry import Registry

MODEL = "claude-sonnet-4-6"
tool_calls: Counter[str] = Counter()


@tool
def lookup(name: str) -> dict[str, Any]:
    """Look a name up; returns its score."""
    tool_calls[f"lookup:{name}"] += 1
    return {"name": name, "score": len(name)}


@tool
def total(a: float, b: float) -> float:
    """Add two scores."""
    tool_calls["total"] += 1
    return a + b


def registry() -> Registry:
    return Registry([lookup, total], BUILTIN_CHECKS)


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    tool_calls.clear()


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


async def run_agent(
    server: MessagesServer, clock: VirtualClock | None = None, **options: Any
) -> AgentResult:
    client = AnthropicClient(api_key="test", base_url=server.url)
    options.setdefault("limits", RunLimits(heartbeat_every=None))
    agent = Agent(
        client,
        MODEL,
        registry(),
        retry=RetryPolicy(retries=2, base_delay=0.5, jitter=False),
        clock=clock or VirtualClock(),
        **options,
    )
    try:
        return await agent.run("Score a and bb")
    finally:
        await client.aclose()


def step(i: int, tool_name: str, args: dict[str, Any], d: list[int]) -> dict[str, Any]:
    return {"i": i, "t": tool_name, "a": args, "d": d}


STEPS = [
    step(1, "lookup", {"name": "a"}, []),
    step(2, "lookup", {"name": "bb"}, []),
    step(3, "total", {"a": "<step_1_result.score>", "b": "<step_2_result.score>"}, [1, 2]),
]
PLAN = {"g": "Score a and bb", "s": STEPS, "o": {"json": '{"sum":"<step_3_result>"}'}}
PLAN_WITHOUT_OUTPUT = {"g": "Score a and bb", "s": STEPS}


@pytest.mark.anyio
async def test_happy_path_one_planning_call_no_replan_output_by_code(
    server: MessagesServer,
) -> None:
    server.push_json(PLAN, usage={"input_tokens": 900, "output_tokens": 60})
    result = await run_agent(server)

    assert len(server.message_requests) == 1  # the planner, once; the joiner by code
    assert result.status == "succeeded"
    assert result.answer == {"sum": 3.0}
    assert result.run.output == {"sum": 3.0}
    assert result.replans == ()
    assert result.join is not None
    assert (result.join.action, result.join.by_model, result.join.answer) == (
        "finish",
        False,
        {"sum": 3.0},
    )
    assert result.output_tokens_per_step == 20.0
    assert len(result.plan_versions) == 1
    assert result.first_tool_start_s is not None
    assert tool_calls == Counter({"lookup:a": 1, "lookup:bb": 1, "total": 1})
    [call] = result.llm_calls
    assert (call.output_tokens, call.input_tokens, call.streamed) == (60, 900, False)
    # the model call is charged on the run's budget: $3/M input, $15/M output
    assert call.cost_usd == pytest.approx(900 * 3e-6 + 60 * 15e-6)
    assert result.run.spent_usd == pytest.approx(call.cost_usd)
    assert result.run.spent_tokens == 960
    document = result.to_json_dict()
    assert document["status"] == "succeeded"
    assert document["answer"] == {"sum": 3.0}
    assert document["replans"] == []
    assert document["join"] == {"action": "finish", "by_model": False, "reason": ""}
    assert document["plan_versions"][0]["steps"][2] == {
        "id": 3,
        "tool": "total",
        "args": {"a": "<step_1_result.score>", "b": "<step_2_result.score>"},
        "depends_on": [1, 2],
    }
    assert [call["output_tokens"] for call in document["llm_calls"]] == [60]
    assert json.loads(json.dumps(document)) == document


@pytest.mark.anyio
async def test_a_plan_without_output_is_joined_by_one_model_call(server: MessagesServer) -> None:
    server.push_json(PLAN_WITHOUT_OUTPUT)
    server.push_json({"decision": {"action": "finish", "answer": "a and bb score 3 together"}})
    result = await run_agent(server)

    assert result.status == "succeeded"
    assert result.answer == "a and bb score 3 together"
    assert result.join is not None
    assert result.join.by_model is True
    assert len(server.message_requests) == 2
    joiner = server.message_requests[1].json
    blocks = {
        block.label: block.value for block in parse_data_blocks(joiner["messages"][0]["content"])
    }
    assert blocks == {
        "step 1 result": {"name": "a", "score": 1},
        "step 2 result": {"name": "bb", "score": 2},
        "step 3 result": 3.0,
    }
    assert joiner["messages"][0]["content"].startswith("Task:\nScore a and bb\n")


@pytest.mark.anyio
async def test_a_joiner_replan_counts_against_the_caps(server: MessagesServer) -> None:
    server.push_json(PLAN_WITHOUT_OUTPUT)
    server.push_json({"decision": {"action": "replan", "reason": "the task wanted names too"}})
    server.push_json(
        {
            "g": "Score a and bb",
            "s": [],
            "o": {"json": '{"sum":"<step_3_result>","names":["a","bb"]}'},
        }
    )
    result = await run_agent(server)

    assert len(server.message_requests) == 3
    assert result.status == "succeeded"
    assert result.answer == {"sum": 3.0, "names": ["a", "bb"]}
    [replan] = result.replans
    assert (replan.trigger, replan.reason, replan.applied, replan.new_ids) == (
        "joiner",
        "the task wanted names too",
        True,
        (),
    )
    prompt = server.message_requests[2].json["messages"][0]["content"]
    assert {block.label: block.value for block in parse_data_blocks(prompt)}[
        "joiner reason"
    ] == "the task wanted names too"
    assert tool_calls == Counter({"lookup:a": 1, "lookup:bb": 1, "total": 1})


@pytest.mark.anyio
async def test_joiner_replans_stop_at_the_cap(server: MessagesServer) -> None:
    server.push_json(PLAN_WITHOUT_OUTPUT)
    server.push_json({"decision": {"action": "replan", "reason": "not enough"}})
    result = await run_agent(server, max_replans=0)
    assert len(server.message_requests) == 2
    assert result.status == "escalated"
    assert result.run.escalation == "replan_caps"
    assert result.gave_up == "max_replans"
    assert result.answer is None


@pytest.mark.anyio
async def test_joiner_replans_past_the_cap_give_up_with_escalate_never(
    server: MessagesServer,
) -> None:
    server.push_json(PLAN_WITHOUT_OUTPUT)
    server.push_json({"decision": {"action": "replan", "reason": "not enough"}})
    result = await run_agent(server, max_replans=0, escalate="never")
    assert (result.status, result.gave_up, result.run.escalation) == (
        "gave_up",
        "max_replans",
        None,
    )


# -- the planning call fails -------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_529_during_planning_is_retried_on_the_clock(server: MessagesServer) -> None:
    server.push_error(529)
    server.push_json(PLAN)
    clock = VirtualClock()
    result = await run_agent(server, clock)
    assert result.status == "succeeded"
    assert clock.sleeps == [0.5]
    assert [record.error_reason for record in result.llm_calls] == ["http_529", None]
    assert len(server.message_requests) == 2


@pytest.mark.anyio
async def test_a_429_with_retry_after_during_planning_waits_what_the_server_asked(
    server: MessagesServer,
) -> None:
    server.push_error(429, retry_after=7)
    server.push_json(PLAN)
    clock = VirtualClock()
    result = await run_agent(server, clock)
    assert result.status == "succeeded"
    assert clock.sleeps == [7.0]
    assert [record.error_reason for record in result.llm_calls] == ["http_429", None]


@pytest.mark.anyio
async def test_a_plan_cut_at_max_tokens_is_an_error_never_a_shorter_plan(
    server: MessagesServer,
) -> None:
    server.push_max_tokens(
        '{"g":"x","s":[{"i":1,"t":"lookup","a":{"name":"a"},"d":[]},{"i"', usage={}
    )
    result = await run_agent(server)
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.type == "TruncatedResponseError"
    assert result.run.steps == {}
    assert result.answer is None
    assert tool_calls == Counter()
    assert [record.error_reason for record in result.llm_calls] == ["max_tokens"]
    assert len(server.message_requests) == 1


@pytest.mark.anyio
async def test_a_plan_that_never_compiles_stops_with_its_diagnostics(
    server: MessagesServer,
) -> None:
    bad = {"g": "x", "s": [step(1, "lookup_fast", {"name": "a"}, [])]}
    for _ in range(3):
        server.push_json(bad)
    result = await run_agent(server)
    assert result.status == "failed"
    assert result.plan_did_not_compile is True
    assert [d.code for d in result.diagnostics] == ["unknown_tool"]
    assert result.error is not None
    assert result.error.type == "PlannerGaveUp"
    assert len(result.llm_calls) == 3
    assert tool_calls == Counter()


@pytest.mark.anyio
async def test_the_cost_cap_refuses_a_planning_call_before_it_is_sent(
    server: MessagesServer,
) -> None:
    result = await run_agent(server, limits=RunLimits(heartbeat_every=None, max_cost_usd=0.0001))
    assert result.status == "budget_exceeded"
    assert result.error is not None
    assert result.error.type == "BudgetRefusedError"
    assert server.message_requests == []


@pytest.mark.anyio
async def test_the_wall_clock_cap_bounds_the_planning_call(server: MessagesServer) -> None:
    server.ttft = 5.0
    server.push_json(PLAN)
    result = await run_agent(server, limits=RunLimits(heartbeat_every=None, max_seconds=0.3))
    assert result.status == "timed_out"
    assert result.run.duration_s < 2.0
    assert tool_calls == Counter()


def test_caps_are_checked() -> None:
    client = AnthropicClient(api_key="test", base_url="http://127.0.0.1:9")
    with pytest.raises(ValueError, match="max_replans must be >= 0"):
        Agent(client, MODEL, registry(), max_replans=-1)
    with pytest.raises(ValueError, match="max_replans_without_progress must be >= 1"):
        Agent(client, MODEL, registry(), max_replans_without_progress=0)
