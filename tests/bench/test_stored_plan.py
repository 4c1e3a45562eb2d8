"""A stored plan run by the agent (the NF-e workload's path): compiled once per agent and
reused with each run's params; a plan that does not compile, a bad param and a plan that
writes under a write boundary behave as before (compiled in the run)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from plandag.bench.workloads import WORKLOADS, World
from plandag.brakes import UNLIMITED
from plandag.brakes.retry import RetryPolicy
from plandag.compiler import CompiledPlan, compile_plan
from plandag.dag.plan import Plan
from plandag.errors import PlanError
from plandag.models import LLMClient
from plandag.planner import agent_run
from plandag.planner.agent import Agent
from plandag.scheduler import RunLimits, events
from plandag.tools.boundary import WriteBoundary
from plandag.tools.registry import default_registry

pytestmark = pytest.mark.anyio

NFE = WORKLOADS["nfe"]
NO_MODEL = cast(LLMClient, SimpleNamespace(provider="anthropic"))  # never called: a stored
# plan that compiles and succeeds asks nothing (the Agent reads only the provider's name)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The step count of every plan the agent compiles (0: a header)."""
    seen: list[int] = []

    def counting(plan: Any, *args: Any, **kwargs: Any) -> CompiledPlan:
        seen.append(len(plan.steps))
        return compile_plan(plan, *args, **kwargs)

    monkeypatch.setattr(agent_run, "compile_plan", counting)
    return seen


def make_agent(**options: Any) -> Agent:
    return Agent(
        NO_MODEL,
        "claude-sonnet-4-6",
        default_registry(),
        limits=RunLimits(heartbeat_every=None),
        retry=RetryPolicy(),
        # no write boundary: a plan is then compiled once per agent, and not per run as
        # one with a boundary (checked against the file system) would be
        **{"write_boundary": UNLIMITED, **options},
    )


async def test_the_stored_plan_compiles_once_per_agent(compiles: list[int]) -> None:
    seen: list[events.Event] = []
    agent = make_agent(observers=[seen.append])
    plan = NFE.stored_plan(World()) if NFE.stored_plan is not None else None
    assert plan is not None
    results = [
        await agent.run(question.goal, params=question.params, plan=plan)
        for question in NFE.questions
    ]
    assert compiles == [0, 9, 0, 0]  # each run's header; the 9 steps once
    assert [result.status for result in results] == ["succeeded"] * 3
    assert [result.answer["total"]["vNF"] for result in results] == ["203.51", "9.06", "516.00"]
    assert [result.answer["source"] for result in results] == [
        question.params["input"] for question in NFE.questions
    ]
    for result in results:
        assert sorted(result.run.steps) == list(range(1, 10))
        assert {step.status for step in result.run.steps.values()} == {"succeeded"}
        assert result.plan_versions == (plan,)
        assert result.llm_calls == ()
    # the session opens with the plan's steps (as run_plan does): no StepsAdded event
    started = [event for event in seen if isinstance(event, events.RunStarted)]
    assert [event.step_count for event in started] == [9, 9, 9]
    assert not any(isinstance(event, events.StepsAdded) for event in seen)


async def test_an_equal_plan_is_reused_a_changed_one_compiled_again(
    compiles: list[int],
) -> None:
    agent = make_agent()
    question = NFE.questions[0]
    assert NFE.stored_plan is not None
    first = NFE.stored_plan(World())
    await agent.run(question.goal, params=question.params, plan=first)
    again = NFE.stored_plan(World())  # another object, the same plan
    await agent.run(question.goal, params=question.params, plan=again)
    assert compiles == [0, 9, 0]
    again.steps[3].description = "changed"
    result = await agent.run(question.goal, params=question.params, plan=again)
    assert compiles == [0, 9, 0, 0, 9]
    assert result.status == "succeeded"


async def test_a_stored_plan_that_does_not_compile_fails_as_before(
    compiles: list[int],
) -> None:
    agent = make_agent()
    plan = Plan.model_validate(
        {
            "goal": "read",
            "params": {"input": {"type": "string"}},
            "steps": [{"id": 1, "tool": "read_fil", "args": {"path": "<param.input>"}}],
            "output": "<step_1_result>",
        }
    )
    for _ in range(2):
        result = await agent.run("read it", params={"input": "a.txt"}, plan=plan)
        assert result.status == "failed"
        assert result.plan_did_not_compile is True
        assert [diagnostic.code for diagnostic in result.diagnostics] == ["unknown_tool"]
        assert result.error is not None
        assert result.error.type == "PlanError"
        assert result.run.steps == {}
    assert compiles == [0, 1, 0, 1]  # not kept: each run compiles it, then reports it


async def test_a_bad_param_raises_as_before() -> None:
    agent = make_agent()
    assert NFE.stored_plan is not None
    plan = NFE.stored_plan(World())
    with pytest.raises(PlanError) as raised:
        await agent.run("extract", params={"input": "a.xml", "index": "first"}, plan=plan)
    assert [diagnostic.code for diagnostic in raised.value.diagnostics] == ["invalid_param_value"]


async def test_a_writing_plan_under_a_write_boundary_compiles_in_each_run(
    tmp_path: Path, compiles: list[int]
) -> None:
    agent = make_agent(write_boundary=WriteBoundary([tmp_path]), approve="auto")
    plan = Plan.model_validate(
        {
            "goal": "write",
            "params": {"out": {"type": "string"}},
            "steps": [{"id": 1, "tool": "write_json", "args": {"path": "<param.out>", "data": 7}}],
            "output": "<step_1_result>",  # assembled by code: no joiner call
        }
    )
    for name in ("a.json", "b.json"):
        result = await agent.run("write", params={"out": str(tmp_path / name)}, plan=plan)
        assert result.status == "succeeded"
    assert compiles == [0, 0]  # headers only: the steps were compiled by session.add
    assert json.loads((tmp_path / "b.json").read_text(encoding="utf-8")) == 7
    outside = await agent.run("write", params={"out": str(tmp_path.parent / "x.json")}, plan=plan)
    assert outside.status == "failed"
    assert [diagnostic.code for diagnostic in outside.diagnostics] == ["write_outside_boundary"]
