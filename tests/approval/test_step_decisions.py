"""Per-step approve / edit / reject in the approval request, from Python: an edit or a
rejection makes a new plan version with a new hash, approved in the same request by the
same person; rejected steps and their descendants are dropped; every per-step decision is
recorded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from plandag.approval import (
    ApprovalRequest,
    CallbackApprover,
    Decision,
    InvalidDecisionError,
    compiled_plan_hash,
)
from plandag.approval.steps import StepDecision, amend
from plandag.compiler import compile_plan
from plandag.runs.options import RunOptions
from plandag.runs.segments import start_run
from plandag.store import Store, open_store
from plandag.tools import tool
from plandag.tools.registry import Registry

CALLS: list[str] = []


@tool
def shout(text: str) -> str:
    """Upper-case TEXT."""
    CALLS.append(f"shout {text}")
    return text.upper()


@tool(effects="write")
def save(text: str) -> str:
    """Pretend to save TEXT."""
    CALLS.append(f"save {text}")
    return f"saved {text}"


@tool(effects="irreversible")
def send(text: str) -> str:
    """Pretend to send TEXT (cannot be undone)."""
    CALLS.append(f"send {text}")
    return f"sent {text}"


PLAN: dict[str, Any] = {
    "version": 1,
    "goal": "shout, keep, send",
    "steps": [
        {"id": 1, "tool": "shout", "args": {"text": "hi"}},
        {"id": 2, "tool": "save", "args": {"text": "<step_1_result>"}},
        {"id": 3, "tool": "send", "args": {"text": "<step_1_result>"}},
        {"id": 4, "tool": "save", "args": {"text": "<step_3_result>"}},
    ],
    "output": "<step_2_result>",
}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(tmp_path / "runs.sqlite3")
    CALLS.clear()
    yield opened
    opened.close()


def compiled() -> Any:
    return compile_plan(PLAN, Registry([shout, save, send]))


def answer(**choices: Any) -> tuple[CallbackApprover, list[ApprovalRequest]]:
    seen: list[ApprovalRequest] = []

    def decide(request: ApprovalRequest) -> Decision:
        seen.append(request)
        return Decision(True, request.plan_hash, who="ana", **choices)

    return CallbackApprover(decide), seen


def test_edit_and_reject_make_a_new_version_approved_by_the_same_person(store: Store) -> None:
    approver, seen = answer(
        reject_steps=(3,), edit_steps={2: {"text": "bye"}}, feedback="never send it"
    )
    outcome = anyio.run(
        lambda: start_run(store, compiled(), RunOptions(), command="exec", approver=approver)
    )
    assert outcome.status == "succeeded"
    assert outcome.result is not None
    assert outcome.result.output == "saved bye"
    assert CALLS == ["shout hi", "save bye"]  # step 3 and its child 4 never ran
    run_id = outcome.run_id
    versions = store.plan_versions(run_id)
    assert [(v.version, v.source) for v in versions] == [(1, "stored"), (2, "amended")]
    [request] = seen
    assert versions[0].hash == request.plan_hash
    assert versions[1].hash != versions[0].hash
    assert [step["id"] for step in versions[1].plan["steps"]] == [1, 2]
    assert versions[1].plan["steps"][1]["args"] == {"text": "bye"}
    assert (versions[0].approved_by, versions[1].approved_by) == (None, "ana")
    decisions = [(d.version, d.decision, d.who, d.feedback) for d in store.decisions(run_id)]
    assert decisions == [
        (1, "asked", None, None),
        (1, "amended", "ana", "never send it"),
        (2, "approved", "ana", None),
    ]
    steps = [
        (d.version, d.step_id, d.decision, d.args, d.who) for d in store.step_decisions(run_id)
    ]
    assert steps == [
        (1, 1, "approved", None, "ana"),
        (1, 2, "edited", {"text": "bye"}, "ana"),
        (1, 3, "rejected", None, "ana"),
        (1, 4, "dropped", None, "ana"),
    ]
    rows = store.steps(run_id)
    assert (rows[3].status, rows[3].reason, rows[3].attempts) == ("skipped", "rejected", 0)
    assert rows[3].detail == "rejected by ana in the approval request: never send it"
    assert (rows[4].status, rows[4].reason) == ("skipped", "rejected")
    assert (rows[1].status, rows[2].status) == ("succeeded", "succeeded")
    assert CALLS.count("shout hi") == 1  # the effect-free step that ran is not run again


def test_an_edit_of_a_step_that_already_ran_runs_it_again(store: Store) -> None:
    approver, _ = answer(edit_steps={1: {"text": "yo"}})

    async def main() -> Any:
        return await start_run(store, compiled(), RunOptions(), command="exec", approver=approver)

    outcome = anyio.run(main)
    assert outcome.status == "succeeded"
    assert outcome.result is not None
    assert outcome.result.output == "saved YO"
    # step 1 ran with "hi" while the person decided; edited, it ran again, and the steps
    # after it used the new result only
    assert sorted(CALLS) == ["save YO", "save sent YO", "send YO", "shout hi", "shout yo"]


def test_amend_alone_gives_the_new_hash_and_every_step_decision() -> None:
    plan = compiled()
    decision = Decision(True, compiled_plan_hash(plan), who="ana", reject_steps=(3,))
    amendment = amend(plan, decision)
    assert sorted(amendment.compiled.steps) == [1, 2]
    assert amendment.plan_hash == compiled_plan_hash(amendment.compiled)
    assert amendment.plan_hash != compiled_plan_hash(plan)
    assert amendment.dropped == (3, 4)
    assert amendment.stale == ()
    assert amendment.steps == (
        StepDecision(1, "approved"),
        StepDecision(2, "approved"),
        StepDecision(3, "rejected"),
        StepDecision(4, "dropped"),
    )
    with pytest.raises(InvalidDecisionError, match="does not compile"):
        amend(plan, Decision(True, "h", edit_steps={2: {"text": 5, "colour": "red"}}))


@pytest.mark.parametrize(
    ("choices", "message"),
    [
        ({"reject_steps": (9,)}, "no step 9 in the plan"),
        ({"reject_steps": (2,), "edit_steps": {2: {"text": "x"}}}, "both rejected and edited"),
        ({"reject_steps": (3,), "edit_steps": {4: {"text": "x"}}}, "dropped with a rejected"),
        ({"edit_steps": {2: ["text", "x"]}}, "must be a JSON object"),
    ],
)
def test_step_choices_that_do_not_fit_leave_the_run_waiting(
    store: Store, choices: dict[str, Any], message: str
) -> None:
    approver, _ = answer(**choices)
    outcome = anyio.run(
        lambda: start_run(store, compiled(), RunOptions(), command="exec", approver=approver)
    )
    assert outcome.status == "awaiting_approval"
    assert outcome.message is not None
    assert message in outcome.message
    assert [call for call in CALLS if not call.startswith("shout")] == []  # no effect ran
    assert [v.version for v in store.plan_versions(outcome.run_id)] == [1]
    assert store.step_decisions(outcome.run_id) == []


def test_step_choices_on_a_rejection_are_refused() -> None:
    plan = compiled()
    request = ApprovalRequest.for_plan("r", 1, plan, reason="the plan has effects")
    with pytest.raises(InvalidDecisionError, match="reject it without step choices"):
        Decision(False, request.plan_hash, reject_steps=(3,)).check(request)
