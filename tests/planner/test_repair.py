"""Stored plans with a planner attached: the plan runs with no model call; only a
failing step goes to the replanner, with the input's excerpt as data; the caps; reuse; the
saved plan. Through the real SDK against the local Messages API server."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.checks.builtins import BUILTIN_CHECKS
from plandag.compiler import CompiledPlan, compile_plan
from plandag.errors import PermanentStepError
from plandag.executors.data import parse_data_blocks
from plandag.models import AnthropicClient
from plandag.planner.repair import PlanRepairer, RepairedRun, run_with_repairs, save_repair
from plandag.scheduler import RunLimits
from plandag.scheduler.result import EscalationMode
from plandag.scheduler.session import RunSession, SessionState
from plandag.testing import MessagesServer
from plandag.tools import tool
from plandag.tools.registry import Registry

MODEL = "claude-sonnet-4-6"
calls: Counter[str] = Counter()


@tool
def lookup(name: str) -> dict[str, Any]:
    """Look a name up in the fast index; returns its score."""
    calls[f"lookup:{name}"] += 1
    return {"name": name, "score": len(name)}


@tool
def fetch(name: str) -> dict[str, Any]:
    """Fetch a name from the legacy service; it knows no name with an 'x'."""
    calls[f"fetch:{name}"] += 1
    if "x" in name:
        raise PermanentStepError(f"legacy service: unknown name {name}", reason="tool_error")
    return {"name": name, "score": len(name)}


@tool
def total(a: float, b: float) -> float:
    """Add two scores."""
    calls["total"] += 1
    return a + b


@tool
def broken(name: str) -> dict[str, Any]:
    """A service that is always down."""
    calls["broken"] += 1
    raise ValueError(f"service down for {name}")


def registry() -> Registry:
    return Registry([lookup, fetch, total, broken], BUILTIN_CHECKS)


STORED = {
    "version": 1,
    "goal": "Score a and the given name",
    "params": {"name": {"type": "string"}},
    "steps": [
        {"id": 1, "tool": "lookup", "args": {"name": "a"}},
        {"id": 2, "tool": "fetch", "args": {"name": "<param.name>"}},
        {
            "id": 3,
            "tool": "total",
            "args": {"a": "<step_1_result.score>", "b": "<step_2_result.score>"},
            "depends_on": [1, 2],
        },
    ],
    "output": {"sum": "<step_3_result>"},
}

PATCH = {
    "g": "Score a and the given name",
    "s": [
        {"i": 4, "t": "lookup", "a": {"name": "<param.name>"}, "d": []},
        {"i": 5, "t": "total", "a": {"a": "<step_1_result.score>", "b": "<step_4_result.score>"}},
    ],
    "o": {"json": '{"sum":"<step_5_result>"}'},
}


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


def compiled(name: str, plan: dict[str, Any] | None = None) -> CompiledPlan:
    return compile_plan(plan or STORED, registry(), params={"name": name})


def params_excerpt(plan: CompiledPlan) -> Callable[[RunSession, SessionState], Any]:
    def excerpt(session: RunSession, state: SessionState) -> Any:
        return {"params": dict(plan.params)}

    return excerpt


async def run(
    server: MessagesServer,
    plans: list[CompiledPlan],
    escalate: EscalationMode = "person",
    **options: Any,
) -> list[RepairedRun]:
    client = AnthropicClient(api_key="test", base_url=server.url)
    repairer = PlanRepairer(
        client,
        MODEL,
        registry(),
        retry=RetryPolicy(retries=0),
        clock=VirtualClock(),
        **options,
    )
    try:
        return [
            await run_with_repairs(
                plan,
                registry(),
                repairer=repairer,
                excerpt=params_excerpt(plan),
                limits=RunLimits(heartbeat_every=None),
                retry=RetryPolicy(retries=0),
                escalate=escalate,
            )
            for plan in plans
        ]
    finally:
        await client.aclose()


@pytest.mark.anyio
async def test_no_failure_no_model_call(server: MessagesServer) -> None:
    [result] = await run(server, [compiled("bb")])
    assert server.message_requests == []
    assert result.status == "succeeded"
    assert result.run.output == {"sum": 3.0}
    assert (result.triggered, result.replans, result.plan) == (False, (), None)


@pytest.mark.anyio
async def test_a_failing_step_is_repaired_in_the_same_run(server: MessagesServer) -> None:
    server.push_json(PATCH, usage={"input_tokens": 2000, "output_tokens": 80})
    [result] = await run(server, [compiled("xyz")])

    assert len(server.message_requests) == 1
    assert result.status == "succeeded"
    assert result.repaired
    assert result.run.output == {"sum": 4.0}  # a (1) + xyz (3)
    # the completed step 1 ran once; the failed 2 and pruned 3 are superseded by 4 and 5
    assert calls == Counter({"lookup:a": 1, "fetch:xyz": 1, "lookup:xyz": 1, "total": 1})
    steps = result.run.steps
    assert [(key, steps[key].status, steps[key].superseded_by) for key in sorted(steps)] == [
        (1, "succeeded", None),
        (2, "failed", [4, 5]),
        (3, "skipped", [4, 5]),
        (4, "succeeded", None),
        (5, "succeeded", None),
    ]
    assert result.failed == (
        {
            "step": 2,
            "tool": "fetch",
            "reason": "tool_error",
            "error_type": "PermanentStepError",
            "message": "legacy service: unknown name xyz",
            "checks": [],
        },
    )
    [call] = result.llm_calls
    assert (call.input_tokens, call.output_tokens) == (2000, 80)
    # the request: the failure and the excerpt, both quoted as data
    content = server.message_requests[0].json["messages"][0]["content"]
    blocks = {block.label: block.value for block in parse_data_blocks(content)}
    assert blocks["step 2 error"] == {
        "type": "PermanentStepError",
        "message": "legacy service: unknown name xyz",
        "reason": "tool_error",
        "detail": "PermanentStepError: legacy service: unknown name xyz",
    }
    assert blocks["step 1 result"] == {"name": "a", "score": 1}
    assert blocks["input excerpt"] == {"params": {"name": "xyz"}}
    assert "Every new step id must be greater than 3" in content
    # the whole plan after the patch
    assert result.plan is not None
    assert [step.id for step in result.plan.steps] == [1, 4, 5]
    assert result.plan.output == {"sum": "<step_5_result>"}


@pytest.mark.anyio
async def test_a_repair_is_reused_without_a_call_for_the_next_input(
    server: MessagesServer,
) -> None:
    server.push_json(PATCH)
    first, second, third = await run(server, [compiled("xyz"), compiled("bb"), compiled("xx")])
    assert len(server.message_requests) == 1  # only for the first failing input
    assert (first.status, first.reused, first.run.output) == ("succeeded", False, {"sum": 4.0})
    assert (second.triggered, second.run.output) == (False, {"sum": 3.0})
    assert (third.status, third.reused, third.llm_calls) == ("succeeded", True, ())
    assert third.run.output == {"sum": 3.0}
    assert third.replans[0].reason == (
        "reused: step 2 failed (tool_error: PermanentStepError: legacy service: unknown name xx)"
    )


@pytest.mark.anyio
async def test_a_tool_that_always_fails_escalates_after_the_caps(server: MessagesServer) -> None:
    plan = {
        "version": 1,
        "goal": "Score x",
        "steps": [{"id": 1, "tool": "broken", "args": {"name": "x"}}],
        "output": "<step_1_result>",
    }
    for number in (2, 3, 4):
        server.push_json(
            {
                "g": "Score x",
                "s": [{"i": number, "t": "broken", "a": {"name": f"x{number}"}}],
                "o": f'"<step_{number}_result>"',
            }
        )
    [result] = await run(server, [compile_plan(plan, registry())])
    assert result.status == "escalated"
    assert result.gave_up == "no_progress"  # 2 replans in a row without a completed step
    assert result.run.escalation == "replan_caps"
    assert result.run.escalation_detail is not None
    assert "no-progress cap" in result.run.escalation_detail
    assert len(server.message_requests) == 2
    assert result.run.output is None
    assert result.plan is not None  # patches were applied, but the run did not succeed
    assert not result.repaired


@pytest.mark.anyio
async def test_max_replans_cap(server: MessagesServer) -> None:
    plan = {
        "version": 1,
        "goal": "Score x",
        "steps": [{"id": 1, "tool": "broken", "args": {"name": "x"}}],
        "output": "<step_1_result>",
    }
    for number in (2, 3):
        server.push_json(
            {
                "g": "Score x",
                "s": [{"i": number, "t": "broken", "a": {"name": f"x{number}"}}],
                "o": f'"<step_{number}_result>"',
            }
        )
    [result] = await run(server, [compile_plan(plan, registry())], max_replans=1)
    assert (result.status, result.gave_up) == ("escalated", "max_replans")
    assert result.run.escalation == "replan_caps"
    assert len(server.message_requests) == 1


@pytest.mark.anyio
async def test_max_replans_cap_with_escalate_never_gives_up(server: MessagesServer) -> None:
    plan = {
        "version": 1,
        "goal": "Score x",
        "steps": [{"id": 1, "tool": "broken", "args": {"name": "x"}}],
        "output": "<step_1_result>",
    }
    server.push_json(
        {
            "g": "Score x",
            "s": [{"i": 2, "t": "broken", "a": {"name": "x2"}}],
            "o": "<step_2_result>",
        }
    )
    [result] = await run(server, [compile_plan(plan, registry())], escalate="never", max_replans=1)
    assert (result.status, result.gave_up) == ("gave_up", "max_replans")
    assert (result.run.status, result.run.escalation) == ("gave_up", None)


@pytest.mark.anyio
async def test_repairs_that_never_compile_escalate_no_valid_replan(
    server: MessagesServer,
) -> None:
    plan = {
        "version": 1,
        "goal": "Score x",
        "steps": [{"id": 1, "tool": "broken", "args": {"name": "x"}}],
        "output": "<step_1_result>",
    }
    for _ in range(2):  # a patch naming a tool that does not exist, twice (no progress)
        server.push_json({"g": "Score x", "s": [{"i": 2, "t": "no_such_tool", "a": {}}]})
    [result] = await run(server, [compile_plan(plan, registry())])
    assert result.status == "escalated"
    assert result.run.escalation == "no_valid_replan"
    assert [record.applied for record in result.replans] == [False, False]
    assert result.run.escalation_detail is not None
    assert result.run.escalation_detail.startswith(
        "no valid repair: the last 2 patch(es) did not compile"
    )


@pytest.mark.anyio
async def test_save_repair_writes_a_plan_that_compiles(
    server: MessagesServer, tmp_path: Path
) -> None:
    server.push_json(PATCH)
    [result] = await run(server, [compiled("xyz")])
    saved = save_repair(tmp_path / "repairs", "scores", result, source="in.json", model=MODEL)
    assert saved is not None
    assert saved.name.startswith("scores.")
    assert saved.suffix == ".json"
    assert len(saved.name) == len("scores.") + 10 + len(".json")
    document = json.loads(saved.read_text(encoding="utf-8"))
    assert document == {
        "version": 1,
        "goal": "Score a and the given name",
        "params": {"name": {"type": "string"}},
        "steps": [
            {"id": 1, "tool": "lookup", "args": {"name": "a"}},
            {"id": 4, "tool": "lookup", "args": {"name": "<param.name>"}, "depends_on": []},
            {
                "id": 5,
                "tool": "total",
                "args": {"a": "<step_1_result.score>", "b": "<step_4_result.score>"},
            },
        ],
        "output": {"sum": "<step_5_result>"},
    }
    again = compile_plan(document, registry(), params={"name": "xq"})
    assert sorted(again.steps) == [1, 4, 5]
    sidecar = json.loads(
        saved.with_name(saved.name.removesuffix(".json") + ".repair.json").read_text("utf-8")
    )
    assert sidecar["replaced"] == [2, 3]
    assert sidecar["new_steps"] == [4, 5]
    assert sidecar["failed"][0]["message"] == "legacy service: unknown name xyz"
    assert sidecar["output_changed"] is True
    assert sidecar["source"] == "in.json"
    assert json.loads(sidecar["replans"][0]["patch"]) == PATCH


# -- replanning triggers: blocked intents, a dependency down -----------------------------------


def broken_plan(*names: str) -> CompiledPlan:
    plan = {
        "version": 1,
        "goal": "Score the names",
        "steps": [
            {"id": n, "tool": "broken", "args": {"name": name}}
            for n, name in enumerate(names, start=1)
        ],
        "output": "<step_1_result>",
    }
    return compile_plan(plan, registry())


@pytest.mark.anyio
async def test_a_repair_that_repeats_the_failing_call_escalates_blocked_intent(
    server: MessagesServer,
) -> None:
    for first in (2, 3, 4):
        server.push_json(
            {
                "g": "Score the names",
                "s": [{"i": first, "t": "broken", "a": {"name": "x"}, "d": []}],
                "o": f'"<step_{first}_result>"',
            }
        )
    [result] = await run(server, [broken_plan("x")])
    assert len(server.message_requests) == 2  # the third failure stops the repairs
    assert (result.status, result.gave_up, result.run.escalation) == (
        "escalated",
        "blocked_intent",
        "blocked_intent",
    )
    assert result.run.escalation_detail == (
        'the intent `broken {"name":"x"}` failed 3 times across replans (steps 1, 2, 3; last: '
        "tool_error: ValueError: service down for x); replanning it again would repeat the "
        "failure"
    )
    assert result.to_json_dict()["gave_up"] == "blocked_intent"


@pytest.mark.anyio
async def test_a_dependency_down_makes_the_repair_total_and_names_it(
    server: MessagesServer,
) -> None:
    server.push_json(
        {
            "g": "Score the names",
            "s": [{"i": 4, "t": "lookup", "a": {"name": "x"}, "d": []}],
            "o": "<step_4_result>",
        }
    )
    [result] = await run(server, [broken_plan("x", "y", "z")])
    assert result.status == "succeeded"
    assert result.run.output == {"name": "x", "score": 1}
    [replan] = result.replans
    assert (replan.strategy, replan.strategy_reason) == (
        "total",
        "dependency down (tool broken): the plan is written again without it",
    )
    prompt = server.message_requests[0].json["messages"][0]["content"]
    found = re.search(r"tool broken \(steps (\d), (\d), (\d) failed in a row\)", prompt)
    assert found is not None
    assert sorted(found.groups()) == ["1", "2", "3"]  # in the order they failed
    assert "Plan again from the goal and the current state" in prompt
    assert result.to_json_dict()["replans"][0]["strategy"] == "total"
