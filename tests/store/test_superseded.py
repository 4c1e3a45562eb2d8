"""A step a replan superseded never runs again on ``resume`` or ``approve``; one whose
effect is unknown (it was stopped mid-call) escalates the run instead of letting its
replacement repeat the effect."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from plandag.approval import plan_hash
from plandag.compiler import compile_plan
from plandag.runs.options import RunOptions
from plandag.runs.segments import continue_run, superseded_steps
from plandag.store import Store, open_store
from plandag.tools import tool
from plandag.tools.registry import Registry

CALLS: list[str] = []


@tool
def shout(text: str) -> str:
    """Upper-case TEXT."""
    CALLS.append(f"shout {text}")
    return text.upper()


@tool(effects="irreversible")
def send(text: str) -> str:
    """Send TEXT (cannot be undone)."""
    CALLS.append(f"send {text}")
    return f"sent {text}"


@tool(effects="irreversible", idempotent=True)
def send_once(text: str) -> str:
    """Send TEXT; the receiver drops a repeat."""
    CALLS.append(f"send_once {text}")
    return f"sent {text}"


PLAN: dict[str, Any] = {
    "version": 1,
    "goal": "send it",
    "steps": [
        {"id": 1, "tool": "shout", "args": {"text": "hi"}},
        {"id": 2, "tool": "send", "args": {"text": "<step_1_result>"}, "depends_on": [1]},
        {"id": 3, "tool": "send", "args": {"text": "again <step_1_result>"}, "depends_on": [1]},
    ],
    "output": "<step_3_result>",
}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(tmp_path / "runs.sqlite3")
    CALLS.clear()
    yield opened
    opened.close()


def stored_run(store: Store, plan: dict[str, Any], status: str, step_2_tool: str = "send") -> Any:
    """A run whose step 2 ended ``status`` after one attempt and was superseded by step 3,
    approved, then interrupted before step 3 ran."""
    registry = Registry([shout, send, send_once])
    compiled = compile_plan(plan, registry)
    store.create_run("r1", command="run", goal="send it", params={}, options={})
    digest = plan_hash(compiled.plan, compiled.params, compiled.write_boundary)
    store.add_plan_version("r1", 1, compiled.plan.model_dump(mode="json"), digest, "planner")
    store.record_decision("r1", 1, digest, "approved", who="ana")
    store.declare_steps(
        "r1", [(1, "shout", "none"), (2, step_2_tool, "irreversible"), (3, "send", "irreversible")]
    )
    store.step_started("r1", 1, 1, 1.0, durable=True)
    store.step_ended("r1", 1, "succeeded", 2.0, attempt=1, result="HI", durable=True)
    store.step_started("r1", 2, 1, 3.0, durable=True)
    store.step_ended("r1", 2, status, 4.0, attempt=1, reason="deadline", durable=True)
    store.supersede("r1", 2, [3])
    store.update_run("r1", status="interrupted")
    return compiled


def test_a_superseded_step_that_failed_never_runs_again_on_resume(store: Store) -> None:
    compiled = stored_run(store, PLAN, "failed")
    assert superseded_steps(store.steps("r1"), compiled) == ([2], [])
    outcome = anyio.run(lambda: continue_run(store, "r1", compiled, RunOptions()))
    assert outcome.status == "succeeded"
    assert outcome.result is not None
    assert outcome.result.output == "sent again HI"
    assert CALLS == ["send again HI"]  # step 2 never ran again, step 1 was not re-run
    steps = store.steps("r1")
    assert (steps[2].status, steps[2].attempts, steps[2].superseded_by) == ("failed", 1, [3])


def test_a_superseded_step_stopped_mid_call_escalates(store: Store) -> None:
    compiled = stored_run(store, PLAN, "cancelled")
    assert superseded_steps(store.steps("r1"), compiled) == ([2], [2])
    outcome = anyio.run(lambda: continue_run(store, "r1", compiled, RunOptions()))
    assert outcome.status == "escalated"
    assert outcome.result is not None
    assert outcome.result.escalation == "superseded_unknown"
    assert outcome.result.escalation_detail is not None
    assert "superseded step(s) 2 (send)" in outcome.result.escalation_detail
    assert CALLS == []  # neither the superseded step nor its replacement ran
    row = store.run("r1")
    assert row.status == "escalated"
    assert store.steps("r1")[3].status == "pending"


def test_an_idempotent_superseded_step_stopped_mid_call_does_not_escalate(
    store: Store,
) -> None:
    plan = {
        **PLAN,
        "steps": [
            PLAN["steps"][0],
            {**PLAN["steps"][1], "tool": "send_once"},
            PLAN["steps"][2],
        ],
    }
    compiled = stored_run(store, plan, "cancelled", step_2_tool="send_once")
    assert superseded_steps(store.steps("r1"), compiled) == ([2], [])
    outcome = anyio.run(lambda: continue_run(store, "r1", compiled, RunOptions()))
    assert outcome.status == "succeeded"
    assert CALLS == ["send again HI"]
