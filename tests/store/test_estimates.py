"""Plan estimates in the run store: measured durations replace declared ones after 5 runs,
each plan version is stored with its estimate, approval requests show it."""

from __future__ import annotations

import random
import statistics
from pathlib import Path
from typing import Any

import anyio
import pytest

from plandag.approval import ApprovalRequest, CallbackApprover, Decision
from plandag.compiler import CompiledPlan, compile_plan
from plandag.runs.options import RunOptions
from plandag.runs.segments import plan_estimate, start_run
from plandag.store import Store, open_store
from plandag.tools import ToolContext, tool
from plandag.tools.registry import Registry


@tool(typical_seconds=2.0)
def fetch(name: str) -> str:
    """Fetch NAME; typically 2 s."""
    return name.upper()


@tool(effects="write", typical_seconds=0.5, cost_estimate_usd=0.25)
def publish(text: str) -> str:
    """Publish TEXT; typically 0.5 s and $0.25."""
    return text


REGISTRY = Registry([fetch, publish])


@pytest.fixture
def store(tmp_path: Path) -> Any:
    opened = open_store(tmp_path / "runs.sqlite3")
    yield opened
    opened.close()


def _compiled() -> CompiledPlan:
    return compile_plan(
        {
            "goal": "publish a and b",
            "steps": [
                {"id": 1, "tool": "fetch", "args": {"name": "a"}},
                {"id": 2, "tool": "fetch", "args": {"name": "b"}},
                {"id": 3, "tool": "publish", "args": {"text": "<step_1_result>"}},
            ],
        },
        REGISTRY,
    )


def _record_runs(store: Store, durations: list[list[float]], first: int = 0) -> None:
    """One stored run per list, with one succeeded ``fetch`` step per duration (seconds)."""
    for number, run_durations in enumerate(durations, start=first):
        run_id = f"run{number}"
        store.create_run(run_id, command="exec", goal=None, params={}, options={})
        store.declare_steps(
            run_id, [(step_id, "fetch", "none") for step_id in range(1, len(run_durations) + 1)]
        )
        for step_id, seconds in enumerate(run_durations, start=1):
            store.step_started(run_id, step_id, 1, 100.0, durable=True)
            store.step_ended(
                run_id, step_id, "succeeded", 100.0 + seconds, duration_s=seconds, durable=True
            )


def test_the_measured_median_replaces_the_declared_figure_after_5_runs(store: Store) -> None:
    _record_runs(store, [[0.1], [0.2], [0.3], [0.4, 0.5]])  # 4 runs of fetch (5 steps)
    # a failed step does not count as a run of the tool
    store.create_run("failed-run", command="exec", goal=None, params={}, options={})
    store.declare_steps("failed-run", [(1, "fetch", "none")])
    store.step_ended("failed-run", 1, "failed", 190.0, duration_s=90.0, durable=True)
    assert store.tool_durations() == {}
    estimate = plan_estimate(store, _compiled())
    assert estimate.steps[1].source == "declared"
    assert estimate.seconds == 2.5  # fetch 2 s (declared) -> publish 0.5 s

    _record_runs(store, [[6.0]], first=4)  # a fifth run
    assert store.tool_durations() == {"fetch": 0.35}  # median of 0.1 .. 0.5 and 6.0
    assert store.tool_durations(["publish"]) == {}
    estimate = plan_estimate(store, _compiled())
    assert estimate.steps[1].source == "measured"
    assert estimate.steps[3].source == "declared"
    assert estimate.seconds == 0.85  # fetch 0.35 s (measured) -> publish 0.5 s
    assert estimate.describe() == ("estimated cost $0.2500, time 0.85 s (critical path 1 -> 3)")


def test_each_plan_version_is_stored_with_its_estimate(store: Store) -> None:
    seen: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> Decision:
        seen.append(request)
        return Decision(True, request.plan_hash, who="ana")

    outcome = anyio.run(
        lambda: start_run(
            store,
            _compiled(),
            RunOptions(approve="ask"),
            command="exec",
            approver=CallbackApprover(approve),
        )
    )
    assert outcome.status == "succeeded"
    version = store.plan_versions(outcome.run_id)[0]
    assert version.estimate is not None
    assert (version.estimate["cost_usd"], version.estimate["seconds"]) == (0.25, 2.5)
    assert version.estimate["critical_path"] == [1, 3]
    assert version.estimate["unknown"] == []
    assert "Estimate: estimated cost $0.2500, time 2.5 s (critical path 1 -> 3)" in (
        seen[0].summary_lines()
    )
    assert seen[0].estimated_cost_usd == 0.25


def test_a_stored_run_past_its_plan_budget_is_escalated(store: Store) -> None:
    @tool(typical_seconds=0.5, cost_estimate_usd=0.01)
    def charge(usd: float, ctx: ToolContext) -> float:
        """Charge USD (reported)."""
        ctx.report_cost(usd=usd)
        return usd

    compiled = compile_plan(
        {"steps": [{"id": 1, "tool": "charge", "args": {"usd": 0.05}}]}, Registry([charge])
    )
    outcome = anyio.run(lambda: start_run(store, compiled, RunOptions(), command="exec"))
    assert outcome.status == "escalated"
    assert outcome.result is not None
    assert outcome.result.escalation == "plan_budget"
    assert store.run(outcome.run_id).status == "escalated"


def _durations_row_by_row(store: Store, tools: list[str] | None, min_runs: int) -> dict[str, float]:
    """Per tool, the median of its succeeded steps' durations, read row by row: what
    Store.tool_durations answers."""
    durations: dict[str, list[float]] = {}
    runs: dict[str, set[str]] = {}
    for tool_name, run_id, duration in store.connection.execute(
        "SELECT tool, run_id, duration_s FROM step WHERE status = 'succeeded' "
        "AND duration_s IS NOT NULL"
    ):
        if tools is None or tool_name in tools:
            durations.setdefault(tool_name, []).append(float(duration))
            runs.setdefault(tool_name, set()).add(run_id)
    return {
        name: statistics.median(values)
        for name, values in sorted(durations.items())
        if len(runs[name]) >= min_runs
    }


def test_measured_durations_are_the_medians_of_every_stored_run(store: Store) -> None:
    chooser = random.Random(7)
    tools = ["fetch", "parse", "rare", "ünïcode", "Zed"]
    for number in range(12):
        run_id = f"r{number}"
        store.create_run(run_id, command="exec", goal=None, params={}, options={})
        steps = [(step, chooser.choice(tools), "none") for step in range(chooser.randint(1, 9))]
        if number > 1:
            steps = [step for step in steps if step[1] != "rare"]
        store.declare_steps(run_id, steps)
        for step, _, _ in steps:
            status = chooser.choice(["succeeded", "succeeded", "succeeded", "failed"])
            seconds = chooser.choice([None, 0, 1, chooser.random() * 10, 2.5, 2.5])
            store.step_ended(run_id, step, status, 1.0, duration_s=seconds, durable=False)
    for wanted in (None, ["fetch"], ["rare", "Zed", "missing"], tools, []):
        for min_runs in (0, 1, 2, 5, 13):
            expected = _durations_row_by_row(store, wanted, min_runs)
            assert store.tool_durations(wanted, min_runs=min_runs) == expected
            assert list(store.tool_durations(wanted, min_runs=min_runs)) == list(expected)
    assert set(store.tool_durations(min_runs=5)) >= {"fetch", "parse"}


def test_measured_durations_read_only_the_index_of_durations(store: Store) -> None:
    plans = [
        " ".join(
            str(row[3]) for row in store.connection.execute(f"EXPLAIN QUERY PLAN {query}", ("t", 5))
        )
        for query in (
            "SELECT count(*) FROM (SELECT DISTINCT run_id FROM step WHERE tool = ? AND "
            "status = 'succeeded' AND duration_s IS NOT NULL LIMIT ?)",
            "SELECT duration_s FROM step WHERE tool = ? AND status = 'succeeded' "
            "AND duration_s IS NOT NULL ORDER BY duration_s LIMIT ? OFFSET 1",
        )
    ]
    assert all("COVERING INDEX step_durations" in plan for plan in plans), plans
    assert "TEMP B-TREE FOR ORDER BY" not in plans[1]
