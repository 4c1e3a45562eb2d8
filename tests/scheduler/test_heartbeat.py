"""Heartbeats, stalls and the JSON Lines writer (ARCHITECTURE.md, "Brakes")."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anyio

from plandag.compiler import CompiledPlan, compile_plan
from plandag.scheduler import JsonlHeartbeatWriter, RunLimits, events, run_plan_sync
from plandag.tools.base import Tool, ToolContext, tool
from plandag.tools.registry import Registry


@tool
async def nap(seconds: float, value: Any = None) -> Any:
    """Sleep ``seconds``, then return ``value``."""
    await anyio.sleep(seconds)
    return value


@tool(cost_estimate_usd=0.5)
async def paid_nap(seconds: float, ctx: ToolContext) -> None:
    """Report $0.25, then sleep ``seconds``."""
    ctx.report_cost(usd=0.25, tokens=40)
    await anyio.sleep(seconds)


def compiled(steps: list[dict[str, Any]], *tools: Tool) -> CompiledPlan:
    return compile_plan({"steps": steps}, Registry([nap, paid_nap, *tools]))


def of_type(seen: list[events.Event], kind: type[Any]) -> list[Any]:
    return [event for event in seen if isinstance(event, kind)]


def test_heartbeats_say_where_the_run_is() -> None:
    plan = compiled(
        [
            {"id": 1, "tool": "paid_nap", "args": {"seconds": 0.0}},
            {"id": 2, "tool": "nap", "args": {"seconds": 0.35}, "depends_on": [1]},
            {"id": 3, "tool": "nap", "args": {"seconds": 0}, "depends_on": [2]},
        ]
    )
    seen: list[events.Event] = []
    result = run_plan_sync(
        plan, run_id="hb", limits=RunLimits(heartbeat_every=0.1), observers=[seen.append]
    )
    assert result.succeeded
    beats: list[events.Heartbeat] = of_type(seen, events.Heartbeat)
    assert 2 <= len(beats) <= 4
    first = beats[0]
    assert first.run_id == "hb"
    assert (first.total, first.succeeded, first.running, first.pending) == (3, 1, 1, 1)
    assert (first.failed, first.skipped, first.cancelled, first.done) == (0, 0, 0, 1)
    assert (first.running_steps, first.running_tools) == ((2,), ("nap",))
    assert (first.spent_usd, first.spent_tokens) == (0.25, 40)
    assert 0.09 < first.elapsed_s < 0.3
    assert [beat.elapsed_s for beat in beats] == sorted(beat.elapsed_s for beat in beats)
    assert of_type(seen, events.Stall) == []
    # heartbeats come between the run's first and last events
    assert isinstance(seen[0], events.RunStarted)
    assert isinstance(seen[-1], events.RunFinished)


def test_the_heartbeat_does_not_keep_the_run_alive() -> None:
    plan = compiled([{"id": 1, "tool": "nap", "args": {"seconds": 0}}])
    started = time.perf_counter()
    result = run_plan_sync(
        plan, limits=RunLimits(heartbeat_every=10, stall_after=30), observers=[lambda _: None]
    )
    assert result.succeeded
    assert time.perf_counter() - started < 1


def test_a_stall_is_reported_once_and_the_run_goes_on() -> None:
    plan = compiled(
        [
            {"id": 1, "tool": "nap", "args": {"seconds": 0.3, "value": "slow"}},
            {"id": 2, "tool": "nap", "args": {"seconds": 0}, "depends_on": [1]},
        ]
    )
    seen: list[events.Event] = []
    result = run_plan_sync(
        plan,
        # stopping on a stall is the default: reporting only is the explicit choice
        limits=RunLimits(heartbeat_every=None, stall_after=0.1, stop_on_stall=False),
        observers=[seen.append],
    )
    assert result.succeeded
    stalls: list[events.Stall] = of_type(seen, events.Stall)
    assert len(stalls) == 1
    stall = stalls[0]
    assert (stall.running_steps, stall.running_tools, stall.stopping) == ((1,), ("nap",), False)
    assert 0.1 <= stall.idle_s < 0.25
    assert of_type(seen, events.Heartbeat) == []


def test_stop_on_stall() -> None:
    plan = compiled(
        [
            {"id": 1, "tool": "nap", "args": {"seconds": 5}},
            {"id": 2, "tool": "nap", "args": {"seconds": 0}, "depends_on": [1]},
            {"id": 3, "tool": "nap", "args": {"seconds": 0, "value": "fast"}},
        ]
    )
    seen: list[events.Event] = []
    started = time.perf_counter()
    result = run_plan_sync(
        plan,
        limits=RunLimits(stall_after=0.15, stop_on_stall=True),
        observers=[seen.append],
    )
    assert time.perf_counter() - started < 1.5
    steps = result.steps
    assert (result.status, result.stop_reason) == ("timed_out", "stalled")
    assert [steps[i].status for i in (1, 2, 3)] == ["cancelled", "skipped", "succeeded"]
    assert steps[1].detail == (
        "the run stopped on a stall (no step finished for 0.15 s) while this step was running"
    )
    assert (steps[2].reason, steps[2].detail) == (
        "stalled",
        "the run stopped on a stall (no step finished for 0.15 s) before this step started",
    )
    stalls: list[events.Stall] = of_type(seen, events.Stall)
    assert [(stall.stopping, stall.running_steps) for stall in stalls] == [(True, (1,))]


def test_stop_on_stall_works_without_observers() -> None:
    plan = compiled([{"id": 1, "tool": "nap", "args": {"seconds": 5}}])
    result = run_plan_sync(plan, limits=RunLimits(stall_after=0.1, stop_on_stall=True))
    assert (result.status, result.steps[1].reason) == ("timed_out", "stalled")


def test_jsonl_writer(tmp_path: Path) -> None:
    path = tmp_path / "heartbeat.jsonl"
    plan = compiled(
        [
            {"id": 1, "tool": "paid_nap", "args": {"seconds": 0.25}},
            {"id": 2, "tool": "nap", "args": {"seconds": 0}, "depends_on": [1]},
        ]
    )
    writer = JsonlHeartbeatWriter(path)
    result = run_plan_sync(
        plan,
        run_id="file",
        limits=RunLimits(heartbeat_every=0.1, stall_after=0.15, stop_on_stall=False),
        observers=[writer],
    )
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    kinds = [line["event"] for line in lines]
    assert kinds[0] == "run_started"
    assert kinds[-1] == "run_finished"
    assert set(kinds[1:-1]) == {"heartbeat", "stall"}
    assert lines[0] == {
        "event": "run_started",
        "run_id": "file",
        "time": result.started_at,
        "step_count": 2,
    }
    beat = next(line for line in lines if line["event"] == "heartbeat")
    assert set(beat) == {
        "event",
        "run_id",
        "time",
        "elapsed_s",
        "total",
        "done",
        "succeeded",
        "failed",
        "skipped",
        "cancelled",
        "running",
        "pending",
        "spent_usd",
        "spent_tokens",
        "running_steps",
        "running_tools",
    }
    assert (beat["running_steps"], beat["running_tools"], beat["pending"]) == ([1], ["paid_nap"], 1)
    stall = next(line for line in lines if line["event"] == "stall")
    assert (stall["running_steps"], stall["stopping"]) == ([1], False)
    assert lines[-1] == {
        "event": "run_finished",
        "run_id": "file",
        "time": result.ended_at,
        "status": "succeeded",
        "stop_reason": None,
        "duration_s": round(result.duration_s, 6),
        "spent_usd": 0.25,
        "spent_tokens": 40,
        "steps": {"succeeded": 2},
        "progress": {"finished": [1, 2], "running": [], "not_started": []},
    }
    # a second run appends; append=False starts the file over
    run_plan_sync(plan, observers=[writer], limits=RunLimits(heartbeat_every=None))
    assert len(path.read_text(encoding="utf-8").splitlines()) == len(lines) + 2
    run_plan_sync(
        plan,
        observers=[JsonlHeartbeatWriter(path, append=False)],
        limits=RunLimits(heartbeat_every=None),
    )
    assert len(path.read_text(encoding="utf-8").splitlines()) == 2
