"""Replanning triggers and strategies through the real Anthropic SDK against the local
Messages API server: an intent blocked N times escalates, a dependency down makes the next
replan total and is named in the request, a person's instruction mid-run replans the steps
not started, and a completion threshold chooses a total replan."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.checks.builtins import BUILTIN_CHECKS
from plandag.dag.plan import Step
from plandag.models import AnthropicClient
from plandag.planner.agent import Agent, AgentResult
from plandag.planner.intents import IntentLedger, intent_of
from plandag.planner.triggers import choose_strategy
from plandag.scheduler import RunLimits, RunSession
from plandag.scheduler.breaker import Dependency, DownDependency
from plandag.scheduler.result import StepRecord
from plandag.testing import MessagesServer
from plandag.tools import tool
from plandag.tools.registry import Registry

MODEL = "claude-sonnet-4-6"
tool_calls: Counter[str] = Counter()
gates: dict[str, anyio.Event] = {}


@tool
def lookup(name: str) -> dict[str, Any]:
    """Look a name up; returns its score."""
    tool_calls[f"lookup:{name}"] += 1
    return {"name": name, "score": len(name)}


@tool
def broken(name: str) -> dict[str, Any]:
    """A service that is always down."""
    tool_calls[f"broken:{name}"] += 1
    raise ValueError(f"service down for {name}")


@tool
async def hold(name: str) -> dict[str, Any]:
    """Wait until the test opens gate ``name``, then return a score."""
    tool_calls[f"hold:{name}"] += 1
    await gates.setdefault(name, anyio.Event()).wait()
    return {"name": name, "score": len(name)}


@tool
def total(a: float, b: float) -> float:
    """Add two scores."""
    tool_calls["total"] += 1
    return a + b


def registry() -> Registry:
    return Registry([lookup, broken, hold, total], BUILTIN_CHECKS)


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    tool_calls.clear()
    gates.clear()


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


def make_agent(server: MessagesServer, client: AnthropicClient, **options: Any) -> Agent:
    return Agent(
        client,
        MODEL,
        registry(),
        retry=RetryPolicy(retries=1, base_delay=0.01, jitter=False),
        clock=VirtualClock(),
        **{"limits": RunLimits(heartbeat_every=None), **options},
    )


async def run_agent(server: MessagesServer, goal: str, **options: Any) -> AgentResult:
    client = AnthropicClient(api_key="test", base_url=server.url)
    try:
        return await make_agent(server, client, **options).run(goal)
    finally:
        await client.aclose()


def step(i: int, tool_name: str, args: dict[str, Any], d: list[int], n: str | None = None) -> Any:
    item: dict[str, Any] = {"i": i, "t": tool_name, "a": args, "d": d}
    if n is not None:
        item["n"] = n
    return item


def user_text(server: MessagesServer, number: int) -> str:
    content = server.message_requests[number].json["messages"][0]["content"]
    assert isinstance(content, str)
    return content


# -- blocked intents ---------------------------------------------------------------------------


def test_the_intent_is_the_description_or_the_tool_and_its_arguments_as_written() -> None:
    assert intent_of(Step(id=1, tool="broken", args={"name": "x"})) == 'broken {"name":"x"}'
    assert (
        intent_of(Step(id=9, tool="total", args={"b": "<step_7_result.score>", "a": 1}))
        == 'total {"a":1,"b":"<step_*_result.score>"}'
    )
    assert (
        intent_of(Step(id=2, tool="broken", args={"name": "y"}, description="  score  the x "))
        == "description: score the x"
    )
    assert intent_of(Step(id=3, tool="lookup", args={"name": "<param.who>"})) == (
        'lookup {"name":"<param.who>"}'
    )


def test_the_ledger_counts_failed_steps_once_and_not_those_never_tried() -> None:
    ledger = IntentLedger(2)
    steps = {n: Step(id=n, tool="broken", args={"name": "x"}) for n in (1, 2, 3)}
    records = {
        1: StepRecord(1, "broken", "failed", reason="tool_error", detail="down"),
        2: StepRecord(2, "broken", "failed", reason="dependency_down", detail="not tried"),
    }
    ledger.observe(steps, records)
    ledger.observe(steps, records)  # counted once
    assert ledger.blocked() == []
    records[3] = StepRecord(3, "broken", "failed", reason="tool_error", detail="down again")
    ledger.observe(steps, records)
    [blocked] = ledger.blocked()
    assert (blocked.intent, blocked.failed_steps, blocked.last) == (
        'broken {"name":"x"}',
        (1, 3),
        "tool_error: down again",
    )
    assert IntentLedger(None).blocked() == []
    with pytest.raises(ValueError, match="max_blocked must be >= 1 or None, not 0"):
        IntentLedger(0)


@pytest.mark.anyio
async def test_the_same_intent_failing_three_times_escalates(server: MessagesServer) -> None:
    """The replanner keeps proposing the same call (under new ids, with progress in between,
    so the replan caps do not stop it): the third failure escalates, no fourth request."""
    server.push_json(
        {"g": "Score x", "s": [step(1, "broken", {"name": "x"}, [])], "o": "<step_1_result>"}
    )
    for first, name in ((2, "p"), (4, "q"), (6, "r")):
        server.push_json(
            {
                "g": "Score x",
                "s": [
                    step(first, "lookup", {"name": f"{name}"}, []),
                    step(first + 1, "broken", {"name": "x"}, [first]),
                ],
                "o": f'"<step_{first + 1}_result>"',
            }
        )
    result = await run_agent(
        server, "Score x", limits=RunLimits(heartbeat_every=None, breaker_after=None)
    )

    assert len(server.message_requests) == 3  # the plan and two replans; no third
    assert result.status == "escalated"
    assert result.gave_up == "blocked_intent"
    assert result.run.escalation == "blocked_intent"
    assert result.run.escalation_detail == (
        'the intent `broken {"name":"x"}` failed 3 times across replans (steps 1, 3, 5; last: '
        "tool_error: ValueError: service down for x); replanning it again would repeat the "
        "failure"
    )
    assert tool_calls["broken:x"] == 3
    assert result.to_json_dict()["escalation"] == "blocked_intent"


@pytest.mark.anyio
async def test_the_same_description_is_the_same_intent(server: MessagesServer) -> None:
    server.push_json(
        {
            "g": "Score x",
            "s": [step(1, "broken", {"name": "x"}, [], "score x")],
            "o": "<step_1_result>",
        }
    )
    server.push_json(
        {
            "g": "Score x",
            "s": [step(2, "broken", {"name": "X"}, [], "score x")],
            "o": "<step_2_result>",
        }
    )
    result = await run_agent(server, "Score x", max_blocked=2)
    assert len(server.message_requests) == 2
    assert (result.status, result.run.escalation) == ("escalated", "blocked_intent")
    assert result.run.escalation_detail is not None
    assert result.run.escalation_detail.startswith(
        "the intent `description: score x` failed 2 times across replans (steps 1, 2;"
    )


@pytest.mark.anyio
async def test_blocked_intents_can_be_turned_off_and_escalate_never_gives_up(
    server: MessagesServer,
) -> None:
    server.push_json(
        {"g": "Score x", "s": [step(1, "broken", {"name": "x"}, [])], "o": "<step_1_result>"}
    )
    server.push_json(
        {"g": "Score x", "s": [step(2, "broken", {"name": "x"}, [])], "o": "<step_2_result>"}
    )
    result = await run_agent(server, "Score x", max_blocked=2, escalate="never")
    assert (result.status, result.gave_up, result.run.escalation) == (
        "gave_up",
        "blocked_intent",
        None,
    )
    with pytest.raises(ValueError, match="max_blocked must be >= 1 or None, not 0"):
        Agent(AnthropicClient(api_key="test"), MODEL, registry(), max_blocked=0)


# -- a dependency down ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_dependency_down_makes_the_replan_total_and_is_named_in_the_request(
    server: MessagesServer,
) -> None:
    server.push_json(
        {"g": "Score", "s": [step(1, "broken", {"name": "a"}, [])], "o": "<step_1_result>"}
    )
    server.push_json(
        {
            "g": "Score",
            "s": [step(2, "lookup", {"name": "p"}, []), step(3, "broken", {"name": "b"}, [2])],
            "o": "<step_3_result>",
        }
    )
    server.push_json(
        {
            "g": "Score",
            "s": [step(4, "lookup", {"name": "q"}, []), step(5, "broken", {"name": "c"}, [4])],
            "o": "<step_5_result>",
        }
    )
    server.push_json(
        {"g": "Score", "s": [step(6, "lookup", {"name": "r"}, [])], "o": "<step_6_result>"}
    )
    result = await run_agent(server, "Score")

    assert result.status == "succeeded"
    assert result.answer == {"name": "r", "score": 1}
    assert [
        (down.dependency.kind, down.dependency.name, down.failed_steps)
        for down in result.run.dependencies_down
    ] == [("tool", "broken", (1, 3, 5))]
    assert [(record.strategy, record.strategy_reason) for record in result.replans] == [
        ("partial", "only the failed part and the steps pruned below it"),
        ("partial", "only the failed part and the steps pruned below it"),
        ("total", "dependency down (tool broken): the plan is written again without it"),
    ]
    assert "Dependencies down" not in user_text(server, 2)
    prompt = user_text(server, 3)
    assert "tool broken (steps 1, 3, 5 failed in a row)" in prompt
    assert "Plan again from the goal and the current state" in prompt
    assert "Never use a dependency listed as down." in prompt
    document = result.to_json_dict()
    assert document["replans"][2]["strategy"] == "total"
    assert document["dependencies_down"][0]["steps"] == [1, 3, 5]


# -- the completion threshold --------------------------------------------------------------------


PLAN_WITH_A_SLOW_BRANCH = {
    "g": "Score a and b",
    "s": [
        step(1, "broken", {"name": "a"}, []),
        step(2, "hold", {"name": "bb"}, []),
        step(3, "lookup", {"name": "<step_2_result.name>"}, [2]),
    ],
    "o": "<step_3_result.score>",
}


async def wait_for(predicate: Any) -> None:
    """Wait (at most 10 s) until ``predicate()`` holds."""
    for _ in range(1000):
        if predicate():
            return
        await anyio.sleep(0.01)
    raise AssertionError("waited 10 s in vain")


@pytest.mark.anyio
@pytest.mark.parametrize("threshold", [None, 0.5])
async def test_a_threshold_chooses_a_total_replan(
    server: MessagesServer, threshold: float | None
) -> None:
    """Step 1 fails while step 2 runs and step 3 waits for it: with total_replan_below=0.5
    (0 of 3 steps completed), step 3 is dropped (skipped, replanned) and the planner plans
    again; without it, only step 1 is replaced and step 3 runs."""
    server.push_json(PLAN_WITH_A_SLOW_BRANCH)
    if threshold is None:
        server.push_json({"g": "Score a and b", "s": [step(4, "lookup", {"name": "a"}, [])]})
    else:
        server.push_json(
            {
                "g": "Score a and b",
                "s": [
                    step(4, "lookup", {"name": "a"}, []),
                    step(
                        5,
                        "total",
                        {"a": "<step_4_result.score>", "b": "<step_2_result.score>"},
                        [2, 4],
                    ),
                ],
                "o": "<step_5_result>",
            }
        )
    client = AnthropicClient(api_key="test", base_url=server.url)
    sessions: list[RunSession] = []
    agent = make_agent(server, client, total_replan_below=threshold, on_session=sessions.append)
    async with anyio.create_task_group() as group:

        async def open_when_replanned() -> None:
            await wait_for(lambda: len(server.message_requests) == 2 and 4 in sessions[0].steps)
            gates.setdefault("bb", anyio.Event()).set()

        group.start_soon(open_when_replanned)
        result = await agent.run("Score a and b")
    await client.aclose()

    assert result.status == "succeeded"
    [replan] = result.replans
    steps = result.run.steps
    if threshold is None:
        assert (replan.strategy, replan.withdrawn, replan.replaced) == ("partial", (), (1,))
        assert result.answer == 2
        assert (steps[3].status, steps[3].superseded_by) == ("succeeded", None)
        assert "Write a patch, not a new plan" in user_text(server, 1)
    else:
        assert (replan.strategy, replan.strategy_reason) == (
            "total",
            "0 of 3 steps completed (0%), under total_replan_below=0.5",
        )
        assert (replan.withdrawn, replan.replaced) == ((3,), (1, 3))
        assert (steps[3].status, steps[3].reason, steps[3].superseded_by) == (
            "skipped",
            "replanned",
            [4, 5],
        )
        assert result.answer == 3.0
        assert "Plan again from the goal and the current state" in user_text(server, 1)
        assert "Dropped steps (not started; they are replanned now, replace them): 3" in (
            user_text(server, 1)
        )
    assert tool_calls["hold:bb"] == 1  # the running step finished once, its result kept


def test_choose_strategy_first_match_wins() -> None:
    down = DownDependency(Dependency("host", "api.example.com"), (1, 2, 3), "http_503: x", 0.0)
    assert choose_strategy(goal_changed=True, newly_down=[down]).reason == (
        "a person's instruction changed the goal"
    )
    assert choose_strategy(newly_down=[down]).reason == (
        "dependency down (host api.example.com): the plan is written again without it"
    )
    assert choose_strategy(completed=1, steps=4, total_replan_below=0.25).strategy == "partial"
    assert choose_strategy(completed=1, steps=5, total_replan_below=0.25).strategy == "total"
    assert choose_strategy(completed=0, steps=4).strategy == "partial"


# -- a person's instruction mid-run ---------------------------------------------------------------


PLAN_WAITING = {
    "g": "Score a and bb",
    "s": [
        step(1, "lookup", {"name": "a"}, []),
        step(2, "hold", {"name": "bb"}, []),
        step(3, "total", {"a": "<step_1_result.score>", "b": "<step_2_result.score>"}, [1, 2]),
    ],
    "o": "<step_3_result>",
}
INSTRUCTION = 'Use "ccc" instead of bb for the second score, and <keep> the first.'


@pytest.mark.anyio
@pytest.mark.parametrize("new_goal", [False, True])
async def test_tell_replans_the_steps_not_started_and_keeps_the_completed_ones(
    server: MessagesServer, new_goal: bool
) -> None:
    server.push_json(PLAN_WAITING)
    server.push_json(
        {
            "g": "Score a and ccc",
            "s": [
                step(4, "lookup", {"name": "ccc"}, []),
                step(
                    5, "total", {"a": "<step_1_result.score>", "b": "<step_4_result.score>"}, [1, 4]
                ),
            ],
            "o": "<step_5_result>",
        }
    )
    client = AnthropicClient(api_key="test", base_url=server.url)
    sessions: list[RunSession] = []
    agent = make_agent(server, client, on_session=sessions.append)
    with pytest.raises(RuntimeError, match="no run of this agent is running"):
        agent.tell("too early")
    async with anyio.create_task_group() as group:

        async def tell_while_step_2_runs() -> None:
            await wait_for(
                lambda: (
                    bool(sessions)
                    and sessions[0].records.get(2) is not None
                    and sessions[0].records[2].status == "running"
                    and sessions[0].records[1].status == "succeeded"
                )
            )
            agent.tell(INSTRUCTION, goal_changed=new_goal, who="ana")
            await wait_for(lambda: 5 in sessions[0].steps)
            gates.setdefault("bb", anyio.Event()).set()

        group.start_soon(tell_while_step_2_runs)
        result = await agent.run("Score a and bb")
    await client.aclose()

    assert result.status == "succeeded"
    assert result.answer == 4.0
    assert len(server.message_requests) == 2
    prompt = user_text(server, 1)
    [replan] = result.replans
    assert (replan.trigger, replan.withdrawn, replan.replaced, replan.new_ids) == (
        "instruction",
        (3,),
        (3,),
        (4, 5),
    )
    if new_goal:
        assert prompt.startswith(f"Task:\n{INSTRUCTION}\n\nA person changed the task")
        assert "Score a and bb" in prompt  # the original task, shown as replaced
        assert (replan.strategy, replan.strategy_reason) == (
            "total",
            "a person's instruction changed the goal",
        )
    else:
        assert f"- {INSTRUCTION}" in prompt  # verbatim, outside any data block
        assert replan.instructions == (INSTRUCTION,)
        assert replan.strategy == "partial"
    assert replan.reason == f"a person's instruction: {INSTRUCTION}"
    steps = result.run.steps
    assert (steps[3].status, steps[3].reason, steps[3].superseded_by) == (
        "skipped",
        "replanned",
        [4, 5],
    )
    assert tool_calls == Counter({"lookup:a": 1, "hold:bb": 1, "lookup:ccc": 1, "total": 1})
    [told] = result.instructions
    assert (told.text, told.goal_changed, told.who) == (INSTRUCTION, new_goal, "ana")
    assert result.to_json_dict()["replans"][0]["trigger"] == "instruction"


@pytest.mark.anyio
async def test_an_instruction_source_is_polled_and_replans_do_not_count_against_caps(
    server: MessagesServer,
) -> None:
    """An instruction source (how ``plandag run`` reads the store) is polled while the run
    runs; with ``max_replans=0`` the person's replan still happens."""
    from plandag.planner.triggers import Instruction

    server.push_json(PLAN_WAITING)
    server.push_json(
        {
            "g": "Score a and ccc",
            "s": [
                step(4, "lookup", {"name": "ccc"}, []),
                step(
                    5, "total", {"a": "<step_1_result.score>", "b": "<step_4_result.score>"}, [1, 4]
                ),
            ],
            "o": "<step_5_result>",
        }
    )
    queued: list[Instruction] = []

    def source() -> list[Instruction]:
        items = list(queued)
        queued.clear()
        return items

    client = AnthropicClient(api_key="test", base_url=server.url)
    sessions: list[RunSession] = []
    agent = make_agent(
        server, client, on_session=sessions.append, instructions=source, max_replans=0
    )
    async with anyio.create_task_group() as group:

        async def tell_while_step_2_runs() -> None:
            await wait_for(
                lambda: (
                    bool(sessions)
                    and sessions[0].records.get(2) is not None
                    and sessions[0].records[2].status == "running"
                )
            )
            queued.append(Instruction("use ccc"))
            await wait_for(lambda: 5 in sessions[0].steps)
            gates.setdefault("bb", anyio.Event()).set()

        group.start_soon(tell_while_step_2_runs)
        result = await agent.run("Score a and bb")
    await client.aclose()
    assert result.status == "succeeded"
    assert [record.trigger for record in result.replans] == ["instruction"]
    assert "- use ccc" in user_text(server, 1)


@pytest.mark.anyio
async def test_tell_from_another_thread_reaches_the_run(server: MessagesServer) -> None:
    server.push_json(PLAN_WAITING)
    server.push_json(
        {
            "g": "Score a and ccc",
            "s": [
                step(4, "lookup", {"name": "ccc"}, []),
                step(
                    5, "total", {"a": "<step_1_result.score>", "b": "<step_4_result.score>"}, [1, 4]
                ),
            ],
            "o": "<step_5_result>",
        }
    )
    client = AnthropicClient(api_key="test", base_url=server.url)
    sessions: list[RunSession] = []
    agent = make_agent(server, client, on_session=sessions.append)
    async with anyio.create_task_group() as group:

        async def tell_from_a_thread() -> None:
            await wait_for(
                lambda: (
                    bool(sessions)
                    and sessions[0].records.get(2) is not None
                    and sessions[0].records[2].status == "running"
                )
            )
            await anyio.to_thread.run_sync(lambda: agent.tell("use ccc", who="bo"))
            await wait_for(lambda: 5 in sessions[0].steps)
            gates.setdefault("bb", anyio.Event()).set()

        group.start_soon(tell_from_a_thread)
        result = await agent.run("Score a and bb")
    await client.aclose()
    assert result.status == "succeeded"
    assert [(item.text, item.who) for item in result.instructions] == [("use ccc", "bo")]
    assert "- use ccc" in user_text(server, 1)


def test_a_call_the_budget_refused_is_not_a_failure_of_its_intent() -> None:
    ledger = IntentLedger(2)
    steps = {n: Step(id=n, tool="llm", args={"prompt": "Say ok"}) for n in (1, 2, 3)}
    records = {
        n: StepRecord(n, "llm", "failed", reason=reason, detail="call not sent")
        for n, reason in ((1, "budget"), (2, "agent_budget"), (3, "budget"))
    }
    ledger.observe(steps, records)
    assert ledger.blocked() == []
    assert ledger.failures == {}
