"""Plan estimates in the run store: measured durations replace declared ones after 5 runs,
each plan version is stored with its estimate, approval requests show it."""

from __future__ import annotations

import math
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
from plandag.scheduler.estimate import MEASURED_LATEST_STEPS
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


def _durations_row_by_row(
    store: Store, tools: list[str] | None, min_runs: int, latest: int = 1000
) -> dict[str, float]:
    """Per tool, the median of its latest ``latest`` succeeded steps' durations (by end
    time; among steps that ended at the same time, the longer first), for tools that
    succeeded in ``min_runs`` runs, read row by row: what Store.tool_durations answers."""
    steps: dict[str, list[tuple[float, float]]] = {}
    runs: dict[str, set[str]] = {}
    for tool_name, run_id, ended, duration in store.connection.execute(
        "SELECT tool, run_id, ended_at, duration_s FROM step WHERE status = 'succeeded' "
        "AND duration_s IS NOT NULL"
    ):
        if tools is None or tool_name in tools:
            ended_at = -math.inf if ended is None else float(ended)
            steps.setdefault(tool_name, []).append((ended_at, float(duration)))
            runs.setdefault(tool_name, set()).add(run_id)
    return {
        name: statistics.median(duration for _, duration in sorted(values)[-latest:])
        for name, values in sorted(steps.items())
        if len(runs[name]) >= min_runs
    }


def test_measured_durations_are_the_medians_of_the_latest_steps(store: Store) -> None:
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
            ended = chooser.choice([1.0, 2.0, number + chooser.random()])
            store.step_ended(run_id, step, status, ended, duration_s=seconds, durable=False)
    # a step whose end time is unknown counts as the oldest
    store.create_run("unknown-end", command="exec", goal=None, params={}, options={})
    store.write_steps(
        "unknown-end",
        [
            (
                1,
                "parse",
                "none",
                "succeeded",
                None,
                None,
                1,
                None,
                None,
                99.0,
                None,
                None,
                None,
                None,
            )
        ],
    )
    for wanted in (None, ["fetch"], ["rare", "Zed", "missing"], tools, []):
        for min_runs in (0, 1, 2, 5, 13):
            for latest in (1, 2, 3, 7, 1000):
                expected = _durations_row_by_row(store, wanted, min_runs, latest)
                measured = store.tool_durations(wanted, min_runs=min_runs, latest=latest)
                assert measured == expected, (wanted, min_runs, latest)
                assert list(measured) == list(expected)
    assert set(store.tool_durations(min_runs=5)) >= {"fetch", "parse"}
    with pytest.raises(ValueError, match="latest must be at least 1"):
        store.tool_durations(latest=0)


def _record_steps(store: Store, run_id: str, durations: list[float], ended: float) -> None:
    """One stored run with one succeeded ``fetch`` step per duration, ending one after the
    other from ``ended`` on."""
    store.create_run(run_id, command="exec", goal=None, params={}, options={})
    store.declare_steps(run_id, [(step, "fetch", "none") for step in range(len(durations))])
    for step, seconds in enumerate(durations):
        at = ended + step * 0.001
        store.step_ended(run_id, step, "succeeded", at, duration_s=seconds, durable=False)


def test_a_tool_whose_duration_changed_is_measured_by_its_latest_1000_steps(
    store: Store,
) -> None:
    assert MEASURED_LATEST_STEPS == 1000
    for number in range(6):  # 1,800 steps of 1 s
        _record_steps(store, f"slow{number}", [1.0] * 300, ended=1000.0 + number)
    assert store.tool_durations() == {"fetch": 1.0}
    for number in range(4):  # then 1,200 steps of 0.25 s: the median of every step is 1 s
        _record_steps(store, f"fast{number}", [0.25] * 300, ended=2000.0 + number)
    assert store.tool_durations() == {"fetch": 0.25}
    assert _durations_row_by_row(store, None, 5) == {"fetch": 0.25}
    assert store.tool_durations(latest=3000) == {"fetch": 1.0}


def test_runs_are_counted_over_every_stored_step_of_the_tool(store: Store) -> None:
    for number in range(4):  # 1,600 steps in 4 runs: not measured
        _record_steps(store, f"r{number}", [float(number)] * 400, ended=100.0 + number)
    assert store.tool_durations() == {}
    # the latest 1,000: 400 steps of 3 s, 400 of 2 s, 200 of 1 s
    assert store.tool_durations(min_runs=4) == {"fetch": 2.0}
    # a fifth run, older than the latest 1,000 steps, makes the tool measured
    _record_steps(store, "early", [9.0], ended=1.0)
    assert store.tool_durations() == {"fetch": 2.0}
    assert store.tool_durations(min_runs=6) == {}


def test_measured_durations_read_only_the_index_of_durations(store: Store) -> None:
    succeeded = "status = 'succeeded' AND duration_s IS NOT NULL"
    queries = (
        (f"SELECT tool FROM step WHERE {succeeded} ORDER BY tool LIMIT 1", ()),
        (f"SELECT tool FROM step WHERE tool > ? AND {succeeded} ORDER BY tool LIMIT 1", ("t",)),
        (
            f"SELECT duration_s, run_id FROM step WHERE tool = ? AND {succeeded} "
            "ORDER BY ended_at DESC, duration_s DESC LIMIT ?",
            ("t", 1000),
        ),
        (
            f"SELECT duration_s FROM step WHERE tool = ? AND {succeeded} "
            "ORDER BY ended_at DESC, duration_s DESC LIMIT ?",
            ("t", 1000),
        ),
        (
            f"SELECT count(*) FROM (SELECT DISTINCT run_id FROM step WHERE tool = ? "
            f"AND {succeeded} LIMIT ?)",
            ("t", 5),
        ),
    )
    plans = [
        " ".join(
            str(row[3]) for row in store.connection.execute(f"EXPLAIN QUERY PLAN {query}", args)
        )
        for query, args in queries
    ]
    assert all("COVERING INDEX step_recent_durations" in plan for plan in plans), plans
    assert not any("FOR ORDER BY" in plan for plan in plans), plans
    (listed,) = store.connection.execute(
        "EXPLAIN QUERY PLAN SELECT run_id FROM tool_run WHERE tool = ? LIMIT ?", ("t", 5)
    ).fetchall()
    assert "COVERING INDEX tool_run_tool (tool=?)" in listed[3], listed


def _listed_runs(store: Store) -> set[tuple[str, str]]:
    """The (run, tool) pairs of the runs listed per tool."""
    store.flush()
    return set(store.connection.execute("SELECT run_id, tool FROM tool_run").fetchall())


def _succeeded_pairs(store: Store, *, running: bool = True) -> set[tuple[str, str]]:
    """The (run, tool) pairs of the stored succeeded steps whose duration is known (of runs
    not running only when ``running`` is False)."""
    store.flush()
    rows = store.connection.execute(
        "SELECT DISTINCT step.run_id, step.tool, run.status FROM step "
        "LEFT JOIN run USING (run_id) WHERE step.status = 'succeeded' "
        "AND step.duration_s IS NOT NULL"
    ).fetchall()
    return {(run_id, name) for run_id, name, status in rows if running or status != "running"}


def test_measured_durations_follow_the_steps_as_runs_end_resume_and_lose_steps(
    store: Store,
) -> None:
    """Runs that end (their tools listed as the recorder lists them), crash, are taken
    again, lose steps or are forgotten: after each change, the answer is the row-by-row
    reading, and every run listed for a tool has a succeeded step of it."""
    chooser = random.Random(23)
    tools = ["fetch", "parse", "slow"]
    runs: list[str] = []
    clock = 0.0

    def record_steps(run_id: str, first: int) -> None:
        nonlocal clock
        count = chooser.randint(0, 30)
        steps = [(first + n, chooser.choice(tools), "none") for n in range(count)]
        store.declare_steps(run_id, steps)
        for step, _, _ in steps:
            clock += chooser.choice([0.0, 0.5, 1.0])  # ties included
            status = chooser.choice(["succeeded"] * 4 + ["failed", "running"])
            if status == "running":
                store.step_started(run_id, step, 1, clock, durable=False)
                continue
            seconds = chooser.choice([None, 0.5, 1.0, round(chooser.random() * 9, 3)])
            store.step_ended(run_id, step, status, clock, duration_s=seconds, durable=False)

    def end(run_id: str) -> None:
        # what StoreRecorder.reconcile lists: the tools of the run's succeeded steps
        ended = {name for run, name in _succeeded_pairs(store) if run == run_id}
        store.write_steps(run_id, [], tools=sorted(ended), durable=chooser.random() < 0.5)
        store.update_run(run_id, status=chooser.choice(["succeeded", "failed", "escalated"]))

    for change in range(160):
        action = chooser.choice(["new", "new", "new", "resume", "discard", "reset", "forget"])
        if action == "new" or not runs:
            run_id = f"run{change}"
            runs.append(run_id)
            store.create_run(run_id, command="exec", goal=None, params={}, options={})
            record_steps(run_id, 0)
            if chooser.random() < 0.8:  # else it crashed: still running
                end(run_id)
        else:
            run_id = chooser.choice(runs)
            if action == "resume":
                store.update_run(run_id, status="running")
                record_steps(run_id, 100 + change)
                if chooser.random() < 0.8:
                    end(run_id)
            elif action == "discard":
                ids = [
                    row[0]
                    for row in store.connection.execute(
                        "SELECT step_id FROM step WHERE run_id = ?", (run_id,)
                    )
                ]
                store.discard_steps(run_id, chooser.sample(ids, min(len(ids), 3)))
            elif action == "reset":
                store.reset_steps(run_id)
            else:  # store upkeep removes a whole run, table by table
                with store.transaction() as connection:
                    for table in ("run", "step", "tool_run", "transition"):
                        connection.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
                runs.remove(run_id)
        assert _listed_runs(store) <= _succeeded_pairs(store, running=False), change
        for min_runs in (1, 3, 5):
            for latest in (2, 5, 40):
                store.flush()
                expected = _durations_row_by_row(store, None, min_runs, latest)
                measured = store.tool_durations(min_runs=min_runs, latest=latest)
                assert measured == expected, (change, action, min_runs, latest)
    assert len(_listed_runs(store)) > 20  # the lists were used, not only the steps


@tool(typical_seconds=0.01)
def tick(n: int) -> int:
    """Return N; typically 10 ms."""
    return n


@tool(typical_seconds=0.01)
def refuse(n: int) -> int:
    """Fail."""
    raise RuntimeError(f"no {n}")


def test_a_run_that_ends_is_listed_for_the_tools_that_succeeded_in_it(store: Store) -> None:
    registry = Registry([tick, refuse])
    plan = {
        "steps": [
            {"id": 1, "tool": "tick", "args": {"n": 1}},
            {"id": 2, "tool": "tick", "args": {"n": 2}, "depends_on": [1]},
            {"id": 3, "tool": "refuse", "args": {"n": 3}},
        ]
    }
    outcomes = [
        anyio.run(
            lambda: start_run(store, compile_plan(plan, registry), RunOptions(), command="exec")
        )
        for _ in range(2)
    ]
    assert [outcome.status for outcome in outcomes] == ["failed", "failed"]
    listed = _listed_runs(store)
    assert listed == {(outcome.run_id, "tick") for outcome in outcomes}
    assert listed == _succeeded_pairs(store)
    # taken again: no longer listed until it ends again
    store.update_run(outcomes[0].run_id, status="running")
    assert _listed_runs(store) == {(outcomes[1].run_id, "tick")}


def test_measured_durations_read_as_many_rows_however_long_the_oldest_runs_were(
    tmp_path: Path,
) -> None:
    """A tool whose latest 1,000 steps all come from one run, after 5 ended runs: the
    SQLite instructions spent answering do not grow with the steps of those older runs."""

    def instructions(name: str, older_steps: int) -> int:
        with open_store(tmp_path / f"{name}.sqlite3") as opened:
            for number in range(5):
                _record_steps(opened, f"old{number}", [1.0] * older_steps, ended=100.0 + number)
                opened.write_steps(f"old{number}", [], tools=["fetch"])
                opened.update_run(f"old{number}", status="succeeded")
            _record_steps(opened, "latest", [2.0] * 1000, ended=900.0)
            opened.flush()
            counted = [0]

            def count() -> int:
                counted[0] += 1
                return 0

            opened.connection.set_progress_handler(count, 1)
            assert opened.tool_durations(["fetch"]) == {"fetch": 2.0}
            opened.connection.set_progress_handler(None, 1)
            return counted[0]

    assert instructions("short", 1000) == instructions("long", 3000)
