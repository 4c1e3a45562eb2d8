"""Durable runs through the Python API: the store's records, the approval gate bound to the
plan hash, expiry, and resume of a stored run."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from plandag.approval import (
    ApprovalRequest,
    CallbackApprover,
    Decision,
    StaleDecisionError,
    approval_needed,
    plan_hash,
)
from plandag.compiler import compile_plan
from plandag.dag.plan import Plan
from plandag.errors import InputError
from plandag.runs.decisions import decide
from plandag.runs.options import RunOptions
from plandag.runs.segments import continue_run, start_run
from plandag.store import Store, open_store
from plandag.tools import WriteBoundary, tool
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


def _registry() -> Registry:
    registry = Registry()
    for function in (shout, save, send):
        registry.add_tool(function)
    return registry


def _plan(second_tool: str = "save") -> dict[str, Any]:
    return {
        "version": 1,
        "goal": "shout then keep",
        "steps": [
            {"id": 1, "tool": "shout", "args": {"text": "hi"}},
            {"id": 2, "tool": second_tool, "args": {"text": "<step_1_result>"}, "depends_on": [1]},
        ],
        "output": "<step_2_result>",
    }


@pytest.fixture
def store(tmp_path: Path) -> Any:
    opened = open_store(tmp_path / "runs.sqlite3")
    CALLS.clear()
    yield opened
    opened.close()


def _approver(answer: bool, feedback: str = "", seen: list[ApprovalRequest] | None = None) -> Any:
    def decide_now(request: ApprovalRequest) -> Decision:
        if seen is not None:
            seen.append(request)
        return Decision(answer, request.plan_hash, feedback=feedback, who="ana")

    return CallbackApprover(decide_now)


def test_plan_hash_is_rfc8785_canonical_and_binds_params_and_boundary(tmp_path: Path) -> None:
    plan = Plan.model_validate(_plan())
    reordered = Plan.model_validate(
        {"steps": _plan()["steps"], "output": "<step_2_result>", "goal": "shout then keep"}
    )
    assert plan_hash(plan) == plan_hash(reordered)
    assert len(plan_hash(plan)) == 64
    assert plan_hash(plan, {"x": 1}) != plan_hash(plan, {"x": 2})
    assert plan_hash(plan, {"x": 1.0}) == plan_hash(plan, {"x": 1})  # RFC 8785 numbers
    inside = WriteBoundary([tmp_path / "a"])
    elsewhere = WriteBoundary([tmp_path / "b"])
    assert plan_hash(plan, {}, inside) != plan_hash(plan, {}, elsewhere)
    assert plan_hash(plan, {}, inside) == plan_hash(plan, {}, WriteBoundary([tmp_path / "a"]))


def test_approval_needed_by_mode() -> None:
    registry = _registry()
    read_only = compile_plan(
        {"steps": [{"id": 1, "tool": "shout", "args": {"text": "a"}}]}, registry
    )
    writes = compile_plan(_plan("save"), registry)
    irreversible = compile_plan(_plan("send"), registry)
    table = {
        (name, mode): approval_needed(compiled, mode)
        for name, compiled in (("read", read_only), ("write", writes), ("irr", irreversible))
        for mode in ("ask", "auto", "never")
    }
    assert table == {
        ("read", "ask"): False,
        ("read", "auto"): False,
        ("read", "never"): False,
        ("write", "ask"): True,
        ("write", "auto"): False,
        ("write", "never"): True,
        ("irr", "ask"): True,
        ("irr", "auto"): True,
        ("irr", "never"): True,
    }


def test_read_only_plan_never_asks_and_is_stored(store: Store) -> None:
    compiled = compile_plan(
        {"goal": "g", "steps": [{"id": 1, "tool": "shout", "args": {"text": "a"}}]}, _registry()
    )
    seen: list[ApprovalRequest] = []
    outcome = anyio.run(
        lambda: start_run(
            store, compiled, RunOptions(), command="exec", approver=_approver(True, seen=seen)
        )
    )
    assert outcome.status == "succeeded"
    assert seen == []
    row = store.run(outcome.run_id)
    assert (row.status, row.command, row.goal, row.version) == ("succeeded", "exec", "g", 1)
    (step,) = store.steps(outcome.run_id).values()
    assert (step.status, step.result, step.args, step.attempts) == (
        "succeeded",
        "A",
        {"text": "a"},
        1,
    )
    assert store.decisions(outcome.run_id) == []


def test_irreversible_step_asks_even_with_auto(store: Store) -> None:
    compiled = compile_plan(_plan("send"), _registry())
    seen: list[ApprovalRequest] = []
    options = RunOptions(approve="auto")
    outcome = anyio.run(
        lambda: start_run(
            store, compiled, options, command="exec", approver=_approver(True, seen=seen)
        )
    )
    assert outcome.status == "succeeded"
    assert len(seen) == 1
    assert seen[0].effects == ((2, "send", "irreversible", ()),)
    assert seen[0].reason == "the plan has irreversible effects"
    assert [(d.decision, d.who) for d in store.decisions(outcome.run_id)] == [
        ("asked", None),
        ("approved", "ana"),
    ]
    assert store.plan_versions(outcome.run_id)[0].approved_by == "ana"
    assert CALLS == ["shout hi", "send HI"]


def test_write_plan_is_approved_automatically_with_auto(store: Store) -> None:
    compiled = compile_plan(_plan("save"), _registry())
    outcome = anyio.run(
        lambda: start_run(
            store, compiled, RunOptions(approve="auto"), command="exec", approver=None
        )
    )
    assert outcome.status == "succeeded"
    assert [(d.decision, d.who) for d in store.decisions(outcome.run_id)] == [("approved", "auto")]


def test_rejection_runs_no_effect_and_keeps_the_feedback(store: Store) -> None:
    compiled = compile_plan(_plan("save"), _registry())
    outcome = anyio.run(
        lambda: start_run(
            store,
            compiled,
            RunOptions(),
            command="exec",
            approver=_approver(False, "use the archive"),
        )
    )
    assert outcome.status == "rejected"
    assert CALLS == ["shout hi"]  # the effect-free step ran while the person decided
    decisions = store.decisions(outcome.run_id)
    assert [(d.decision, d.feedback) for d in decisions] == [
        ("asked", None),
        ("rejected", "use the archive"),
    ]
    assert store.run(outcome.run_id).status == "rejected"


def test_a_decision_for_another_hash_is_refused(store: Store) -> None:
    compiled = compile_plan(_plan("save"), _registry())

    def stale(request: ApprovalRequest) -> Decision:
        return Decision(True, "0" * 64, who="ana")

    with pytest.raises(StaleDecisionError, match="decide again on the current plan"):
        anyio.run(
            lambda: start_run(
                store, compiled, RunOptions(), command="exec", approver=CallbackApprover(stale)
            )
        )
    assert [call for call in CALLS if call.startswith("save")] == []  # no effect ran


def test_never_waits_then_approve_runs_the_same_run(store: Store) -> None:
    compiled = compile_plan(_plan("save"), _registry())
    outcome = anyio.run(
        lambda: start_run(store, compiled, RunOptions(approve="never"), command="exec")
    )
    assert outcome.status == "awaiting_approval"
    # the pending approval held only the step with effects: the other one ran, its result
    # saved in the store
    assert CALLS == ["shout hi"]
    assert outcome.result is not None
    assert outcome.result.status == "awaiting_approval"
    assert {key: step.status for key, step in outcome.result.steps.items()} == {
        1: "succeeded",
        2: "skipped",
    }
    saved = store.steps(outcome.run_id)
    assert (saved[1].status, saved[1].result) == ("succeeded", "HI")
    assert (saved[2].status, saved[2].reason, saved[2].attempts) == ("skipped", "effects_held", 0)
    row = store.run(outcome.run_id)
    assert row.status == "awaiting_approval"
    assert row.expires_at is not None
    assert row.expires_at - row.awaiting_since == pytest.approx(24 * 3600, abs=5)
    digest = plan_hash(compiled.plan, compiled.params, compiled.write_boundary)
    assert outcome.request is not None
    assert outcome.request.plan_hash == digest

    with pytest.raises(StaleDecisionError, match="is not the plan awaiting a decision"):
        decide(store, outcome.run_id, approved=True, who="ana", expected_hash="f" * 64)
    assert decide(store, outcome.run_id, approved=True, who="ana", expected_hash=digest) == digest
    resumed = anyio.run(
        lambda: continue_run(
            store,
            outcome.run_id,
            compiled,
            RunOptions(approve="never"),
            command="approve",
            approved_unknown=True,
        )
    )
    assert resumed.status == "succeeded"
    assert resumed.result is not None
    assert resumed.result.output == "saved HI"
    assert CALLS == ["shout hi", "save HI"]  # the completed step was not run again
    assert store.run(outcome.run_id).segment == 1
    assert store.plan_versions(outcome.run_id)[0].approved_by == "ana"


def test_a_pending_approval_expires(store: Store) -> None:
    compiled = compile_plan(_plan("save"), _registry())
    options = RunOptions(approve="never", expiry_s=60.0)
    outcome = anyio.run(lambda: start_run(store, compiled, options, command="exec"))
    row = store.run(outcome.run_id)
    assert row.expires_at is not None
    with pytest.raises(InputError, match="its approval request expired"):
        decide(store, outcome.run_id, approved=True, who="ana", now=row.expires_at + 1)
    assert store.run(outcome.run_id).status == "rejected"
    assert [d.decision for d in store.decisions(outcome.run_id)] == ["asked", "expired"]
    with pytest.raises(InputError, match="not awaiting_approval"):
        decide(store, outcome.run_id, approved=True, who="ana")


def test_time_awaiting_approval_is_not_counted_by_the_deadline(store: Store) -> None:
    compiled = compile_plan(_plan("save"), _registry())
    options = RunOptions(approve="ask", limits={"max_seconds": 0.5})

    async def slow_person(request: ApprovalRequest) -> Decision:
        await anyio.sleep(0.8)  # longer than the whole run's cap
        return Decision(True, request.plan_hash, who="ana")

    outcome = anyio.run(
        lambda: start_run(
            store, compiled, options, command="exec", approver=CallbackApprover(slow_person)
        )
    )
    assert outcome.status == "succeeded"


def test_steps_already_succeeded_are_not_run_again(store: Store) -> None:
    registry = _registry()
    compiled = compile_plan(_plan("save"), registry)
    run_id = "feedfacecafe0001"
    store.create_run(run_id, command="exec", goal="g", params={}, options=RunOptions().as_json())
    digest = plan_hash(compiled.plan, compiled.params, compiled.write_boundary)
    store.add_plan_version(
        run_id, 1, compiled.plan.model_dump(mode="json", exclude_none=True), digest, "stored"
    )
    store.record_decision(run_id, 1, digest, "approved", who="ana")
    store.declare_steps(run_id, [(1, "shout", "none"), (2, "save", "write")])
    store.step_started(run_id, 1, 1, 1.0, durable=True)
    store.step_ended(run_id, 1, "succeeded", 2.0, attempt=1, result="FROM STORE", durable=True)
    store.update_run(run_id, status="interrupted")
    outcome = anyio.run(lambda: continue_run(store, run_id, compiled, RunOptions()))
    assert outcome.status == "succeeded"
    assert outcome.result is not None
    assert outcome.result.output == "saved FROM STORE"
    assert CALLS == ["save FROM STORE"]


def test_large_results_live_beside_the_database(store: Store, tmp_path: Path) -> None:
    big = "x" * 100_000
    store.create_run("r1", command="exec", goal=None, params={}, options={})
    store.declare_steps("r1", [(1, "t", "none")])
    store.step_ended("r1", 1, "succeeded", 1.0, result={"text": big}, durable=True)
    step = store.steps("r1")[1]
    assert step.result == {"text": big}
    assert step.result_hash is not None
    assert (tmp_path / "blobs" / step.result_hash[:2] / f"{step.result_hash}.json").is_file()


def test_run_ids_resolve_by_prefix_and_unknown_ones_say_what_to_do(store: Store) -> None:
    for run_id in ("abc123", "abd456"):
        store.create_run(run_id, command="exec", goal=None, params={}, options={})
    assert store.resolve_run_id("abc") == "abc123"
    with pytest.raises(InputError, match="ambiguous"):
        store.resolve_run_id("ab")
    with pytest.raises(InputError, match="`plandag runs` lists the runs"):
        store.resolve_run_id("zzz")
    assert [row.run_id for row in store.runs()] == ["abd456", "abc123"]


def test_batched_writes_survive_only_when_flushed(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    first = Store(path, flush_interval_s=60.0)
    first.create_run("r", command="exec", goal=None, params={}, options={})
    first.declare_steps("r", [(1, "t", "none"), (2, "t", "write")])
    first.step_started("r", 1, 1, 1.0, durable=False)
    outside = sqlite3.connect(path)  # another process's view
    status = "SELECT status FROM step WHERE run_id = 'r' AND step_id = ?"
    assert outside.execute(status, (1,)).fetchone() == ("pending",)  # queued, not committed
    first.step_started("r", 2, 1, 2.0, durable=True)  # commits everything queued before it
    assert [outside.execute(status, (i,)).fetchone()[0] for i in (1, 2)] == [
        "running",
        "running",
    ]
    first.step_started("r", 1, 2, 3.0, durable=False)
    other = Store(path)  # another store of this process: its reads commit the queue first
    assert other.steps("r")[1].attempts == 2
    outside.close()
    first.close()
    other.close()


_ = dataclasses


def test_only_one_of_two_racing_processes_takes_a_run(store: Store) -> None:
    compiled = compile_plan(_plan("save"), _registry())
    outcome = anyio.run(
        lambda: start_run(store, compiled, RunOptions(approve="never"), command="exec")
    )
    row = store.run(outcome.run_id)
    # both read the same row, then both try to take it: one wins
    assert store.claim_run(outcome.run_id, ["awaiting_approval"], row.pid) is True
    assert store.claim_run(outcome.run_id, ["awaiting_approval"], row.pid) is False
    assert store.run(outcome.run_id).status == "running"
    with pytest.raises(InputError, match="is running, not awaiting_approval"):
        decide(store, outcome.run_id, approved=True, who="bob")
    # a crashed run (running, its process gone) is taken by a compare-and-swap on its pid
    taken = store.run(outcome.run_id)
    assert store.claim_run(outcome.run_id, ["running"], taken.pid) is True
    assert store.claim_run(outcome.run_id, ["running"], taken.pid + 1) is False


def test_every_segment_s_spend_adds_up(store: Store) -> None:
    @tool
    def paid(text: str) -> str:
        """Costs a cent."""
        return text

    registry = Registry([paid])
    compiled = compile_plan({"steps": [{"id": 1, "tool": "paid", "args": {"text": "a"}}]}, registry)
    store.create_run("r2", command="exec", goal=None, params={}, options={})
    store.update_run("r2", spent_usd=0.5, spent_tokens=10, status="interrupted")
    store.add_plan_version("r2", 1, compiled.plan.model_dump(mode="json"), "h", "stored")
    outcome = anyio.run(lambda: continue_run(store, "r2", compiled, RunOptions()))
    assert outcome.status == "succeeded"
    row = store.run("r2")
    assert (row.spent_usd, row.spent_tokens) == (0.5, 10)  # nothing new was spent


def test_the_clock_runs_while_an_effect_free_step_runs_during_the_approval(
    store: Store,
) -> None:
    @tool
    async def slow(text: str) -> str:
        """Take 1.5 s."""
        CALLS.append(f"slow {text}")
        await anyio.sleep(1.5)
        return text

    registry = Registry([slow, save])
    compiled = compile_plan(
        {
            "steps": [
                {"id": 1, "tool": "slow", "args": {"text": "a"}},
                {"id": 2, "tool": "save", "args": {"text": "b"}},
            ]
        },
        registry,
    )

    async def slow_person(request: ApprovalRequest) -> Decision:
        await anyio.sleep(2.0)  # step 1 runs for most of this: the clock is not paused
        return Decision(True, request.plan_hash, who="ana")

    options = RunOptions(approve="ask", limits={"max_seconds": 0.5})
    outcome = anyio.run(
        lambda: start_run(
            store, compiled, options, command="exec", approver=CallbackApprover(slow_person)
        )
    )
    assert outcome.status == "timed_out"
    assert outcome.result is not None
    assert outcome.result.steps[1].status == "cancelled"
    assert outcome.result.steps[1].reason == "deadline"
    assert CALLS == ["slow a"]  # the effect never started


def test_the_clock_stops_once_no_step_runs_during_the_approval(store: Store) -> None:
    compiled = compile_plan(_plan("save"), _registry())

    async def slow_person(request: ApprovalRequest) -> Decision:
        await anyio.sleep(1.0)  # step 1 ended at once: nothing runs, the clock stands
        return Decision(True, request.plan_hash, who="ana")

    options = RunOptions(approve="ask", limits={"max_seconds": 0.5})
    outcome = anyio.run(
        lambda: start_run(
            store, compiled, options, command="exec", approver=CallbackApprover(slow_person)
        )
    )
    assert outcome.status == "succeeded"
    assert CALLS == ["shout hi", "save HI"]
    elapsed = store.run(outcome.run_id).options["elapsed_s"]
    assert elapsed < 0.5  # the time the person took is not the run's


def test_discarded_steps_leave_the_store_before_their_ids_come_back(store: Store) -> None:
    store.create_run("r3", command="run", goal=None, params={}, options={})
    store.declare_steps("r3", [(1, "shout", "none"), (2, "shout", "none")])
    store.step_started("r3", 1, 1, 1.0, durable=False)
    store.step_ended("r3", 1, "succeeded", 2.0, attempt=1, result="OLD", durable=False)
    store.discard_steps("r3", [1, 2])
    assert store.steps("r3") == {}
    store.declare_steps("r3", [(1, "save", "write")])  # the retried attempt's step 1
    [row] = store.steps("r3").values()
    assert (row.step_id, row.tool, row.status, row.result) == (1, "save", "pending", None)
