"""Step-by-step decisions in ``run_plan`` (ARCHITECTURE.md, "People in the loop"): a step the
approver rejects never runs, nor does any step that needs it; an edited step runs with its
edited arguments; the effect-free branches run while the approver decides, as in ``exec``
and the ``Agent``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from plandag import (
    ApprovalRequest,
    Decision,
    compile_plan,
    run_plan,
    run_plan_sync,
    tool,
)
from plandag.approval import InvalidDecisionError
from plandag.compiler import CompiledPlan
from plandag.scheduler import events
from plandag.tools.registry import Registry, default_registry

seen: list[str] = []


@tool
async def look(name: str) -> str:
    """Look ``name`` up (no effects)."""
    seen.append(f"look {name}")
    return name.upper()


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    seen.clear()


def two_writes() -> CompiledPlan:
    return compile_plan(
        {
            "version": 1,
            "goal": "write two files",
            "steps": [
                {"id": 1, "tool": "write_json", "args": {"path": "out/a.json", "data": {"n": 1}}},
                {"id": 2, "tool": "write_json", "args": {"path": "out/b.json", "data": {"n": 2}}},
            ],
        },
        default_registry(),
    )


def written() -> list[str]:
    folder = Path("out")
    return sorted(path.name for path in folder.iterdir()) if folder.is_dir() else []


def test_a_rejected_step_never_runs() -> None:
    def approver(request: ApprovalRequest) -> Decision:
        return Decision(True, request.plan_hash, who="ana", reject_steps=(2,), feedback="no b")

    result = run_plan_sync(two_writes(), approve=approver)
    assert written() == ["a.json"]
    assert result.status == "succeeded"  # the approved version has step 1 only, which ran
    assert result.steps[1].status == "succeeded"
    assert (result.steps[2].status, result.steps[2].reason) == ("skipped", "rejected")
    assert result.steps[2].detail == "rejected by ana in the approval request: no b"


def test_a_rejected_step_drops_the_steps_that_need_it() -> None:
    plan = compile_plan(
        {
            "version": 1,
            "goal": "a chain of writes",
            "steps": [
                {"id": 1, "tool": "write_json", "args": {"path": "out/a.json", "data": 1}},
                {
                    "id": 2,
                    "tool": "write_json",
                    "args": {"path": "out/b.json", "data": "<step_1_result.path>"},
                },
                {"id": 3, "tool": "write_json", "args": {"path": "out/c.json", "data": 3}},
            ],
        },
        default_registry(),
    )

    def approver(request: ApprovalRequest) -> Decision:
        return Decision(True, request.plan_hash, who="ana", reject_steps=(1,))

    result = run_plan_sync(plan, approve=approver)
    assert written() == ["c.json"]
    assert (result.steps[2].status, result.steps[2].reason) == ("skipped", "rejected")
    assert result.steps[2].detail == "upstream 1 was rejected"
    assert result.status == "succeeded"


def test_an_edited_step_runs_with_its_edited_arguments() -> None:
    def approver(request: ApprovalRequest) -> Decision:
        return Decision(True, request.plan_hash, who="ana", edit_steps={2: {"path": "out/c.json"}})

    result = run_plan_sync(two_writes(), approve=approver)
    assert written() == ["a.json", "c.json"]
    assert json.loads(Path("out/c.json").read_text(encoding="utf-8")) == {"n": 2}
    assert result.status == "succeeded"
    assert Path(result.steps[2].result["path"]).name == "c.json"


def test_an_edit_outside_the_write_boundary_is_refused_and_nothing_is_written() -> None:
    def approver(request: ApprovalRequest) -> Decision:
        return Decision(True, request.plan_hash, edit_steps={2: {"path": "/etc/plandag.json"}})

    with pytest.raises(InvalidDecisionError, match="step 2"):
        run_plan_sync(two_writes(), approve=approver)
    assert written() == []


def test_a_whole_rejection_runs_nothing_with_effects() -> None:
    def approver(request: ApprovalRequest) -> Decision:
        return Decision(False, request.plan_hash, feedback="not today")

    result = run_plan_sync(two_writes(), approve=approver)
    assert written() == []
    assert result.status == "rejected"
    assert {(record.status, record.reason, record.detail) for record in result.steps.values()} == {
        ("skipped", "rejected", "not started: not today")
    }


def branching() -> CompiledPlan:
    """Step 1 (no effects) and step 2 (a write) are independent; step 3 writes what 1 found."""
    return compile_plan(
        {
            "version": 1,
            "goal": "look while a person decides",
            "steps": [
                {"id": 1, "tool": "look", "args": {"name": "ana"}},
                {"id": 2, "tool": "write_json", "args": {"path": "out/a.json", "data": 2}},
                {
                    "id": 3,
                    "tool": "write_json",
                    "args": {"path": "out/b.json", "data": "<step_1_result>"},
                },
            ],
        },
        Registry([look, *default_registry().tools.values()]),
    )


@pytest.mark.anyio
async def test_effect_free_branches_run_while_the_approver_decides() -> None:
    order: list[str] = []
    looked = anyio.Event()

    def observe(event: events.Event) -> None:
        if isinstance(event, events.StepSucceeded | events.StepStarted):
            order.append(f"{type(event).__name__} {event.step_id}")
        if isinstance(event, events.StepSucceeded) and event.step_id == 1:
            looked.set()

    async def slow_approver(request: ApprovalRequest) -> Decision:
        order.append("asked")
        # A person who takes their time: the decision comes only once step 1 has ended
        # (bounded: after 10 s it comes anyway, and the order below says what happened).
        with anyio.move_on_after(10):
            await looked.wait()
        order.append("decided")
        return Decision(True, request.plan_hash, who="ana")

    result = await run_plan(branching(), approve=slow_approver, observers=[observe])
    assert result.status == "succeeded"
    assert order.index("StepSucceeded 1") < order.index("decided")
    # nothing with effects started before the decision
    assert order.index("decided") < order.index("StepStarted 2")
    assert order.index("decided") < order.index("StepStarted 3")
    assert result.steps[3].result is not None
    assert Path(result.steps[3].result["path"]).name == "b.json"


@pytest.mark.anyio
async def test_a_step_that_ran_while_the_approver_decided_cannot_be_rejected() -> None:
    looked = anyio.Event()

    def observe(event: events.Event) -> None:
        if isinstance(event, events.StepSucceeded) and event.step_id == 1:
            looked.set()

    async def late_approver(request: ApprovalRequest) -> Decision:
        with anyio.move_on_after(10):
            await looked.wait()
        return Decision(True, request.plan_hash, reject_steps=(1,))

    with pytest.raises(InvalidDecisionError, match="step 1 has already started"):
        await run_plan(branching(), approve=late_approver, observers=[observe])
    assert seen == ["look ana"]


def test_the_documented_per_step_decision_runs_as_written() -> None:
    readme = (Path(__file__).parents[2] / "docs" / "durable-runs.md").read_text(encoding="utf-8")
    start = readme.index("`Decision(True, request.plan_hash, reject_steps=")
    expression = readme[start + 1 : readme.index("`", start + 1)]
    plan = compile_plan(
        {
            "version": 1,
            "goal": "three writes",
            "steps": [
                {"id": 1, "tool": "write_json", "args": {"path": "out/a.json", "data": 1}},
                {"id": 2, "tool": "write_json", "args": {"path": "out/x.json", "data": 2}},
                {"id": 3, "tool": "write_json", "args": {"path": "out/c.json", "data": 3}},
            ],
        },
        default_registry(),
    )

    def approver(request: ApprovalRequest) -> Any:
        return eval(expression, {"Decision": Decision, "request": request})

    result = run_plan_sync(plan, approve=approver)
    assert written() == ["a.json", "b.json"]  # step 2 edited to out/b.json, step 3 rejected
    assert result.status == "succeeded"
