"""A step ends when its last attempt ends: one clock reading for both, unless the step ends
later (a retry not made after its backoff)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.checks import BUILTIN_CHECKS
from plandag.compiler import CompiledPlan, compile_plan
from plandag.errors import TransientStepError
from plandag.scheduler import RunLimits, run_plan_sync
from plandag.tools.base import Tool, tool
from plandag.tools.registry import Registry
from plandag.trace.reader import load_trace
from plandag.trace.redact import Redactor
from plandag.trace.writer import TraceWriter
from tests.scheduler.down_during_backoff import plan_whose_tool_goes_down_during_a_backoff


class TickingClock(VirtualClock):
    """A virtual clock whose every wall-clock reading is a microsecond after the last: two
    readings are never the same number."""

    def time(self) -> float:
        self.advance(1e-6)
        return super().time()


tries: dict[str, int] = {}


@tool(inline=True)
def add(x: int) -> int:
    """x + 1, on the event loop."""
    return x + 1


@tool
async def later(x: int) -> int:
    """x + 1, in a task."""
    return x + 1


@tool
def broken(x: int) -> int:
    """Always fails."""
    raise ValueError(f"no {x}")


@tool
def hiccup(name: str) -> str:
    """Fails its first attempt for each name with a transient error, then works."""
    tries[name] = tries.get(name, 0) + 1
    if tries[name] == 1:
        raise TransientStepError(f"hiccup on {name}")
    return name


def compiled(steps: list[dict[str, Any]], *tools: Tool) -> CompiledPlan:
    registry = Registry([add, later, broken, hiccup, *tools], BUILTIN_CHECKS)
    return compile_plan({"steps": steps}, registry)


PLAN = [
    {"id": 1, "tool": "add", "args": {"x": 0}},
    {"id": 2, "tool": "later", "args": {"x": "<step_1_result>"}, "depends_on": [1]},
    {"id": 3, "tool": "add", "args": {"x": "<step_2_result>"}, "depends_on": [2]},
    {"id": 4, "tool": "broken", "args": {"x": 4}},
    {"id": 5, "tool": "hiccup", "args": {"name": "a"}},
    {
        "id": 6,
        "tool": "add",
        "args": {"x": 5},
        "check": [{"kind": "equals", "value": 7}],
    },
]


def test_a_step_ends_with_the_reading_its_last_attempt_ended_at(tmp_path: Path) -> None:
    tries.clear()
    plan = compiled(PLAN)
    path = tmp_path / "trace.jsonl"
    writer = TraceWriter(path, "run-end", redact=Redactor())
    result = run_plan_sync(
        plan,
        run_id="run-end",
        retry=RetryPolicy(retries=1, base_delay=0.5, jitter=False),
        clock=TickingClock(),
        observers=[writer],
        limits=RunLimits(heartbeat_every=None),
    )
    writer.close()
    statuses = {step_id: record.status for step_id, record in result.steps.items()}
    assert statuses == {
        1: "succeeded",
        2: "succeeded",
        3: "succeeded",
        4: "failed",
        5: "succeeded",
        6: "failed",
    }
    assert result.steps[5].attempts == 2
    assert result.steps[6].reason == "check_failed"
    for record in result.steps.values():
        last = record.attempt_log[-1]
        assert last.ended_at is not None
        assert record.ended_at is last.ended_at  # the same reading, not a second one
        assert record.started_at == record.attempt_log[0].started_at
    # read back from the trace, the step's end is its last attempt's
    trace = load_trace(path)
    for step_id, record in result.steps.items():
        step = trace.steps[step_id]
        assert step.end == record.ended_at
        assert step.attempts[-1].end == record.ended_at


def test_a_step_whose_retry_is_not_made_after_its_backoff_ends_after_the_backoff() -> None:
    """Step 1 fails transiently (backoff 1 s) while steps 2-4 of the same tool fail for
    good: the tool goes down during the backoff, the retry is not made, and step 1 ends
    then, not when its attempt ended."""

    plan = plan_whose_tool_goes_down_during_a_backoff(Counter())
    result = run_plan_sync(
        plan,
        retry=RetryPolicy(retries=5, base_delay=1.0, jitter=False),
        clock=TickingClock(),
        limits=RunLimits(heartbeat_every=None),
    )
    first = result.steps[1]
    assert (first.status, first.attempts) == ("failed", 1)
    assert first.attempt_log[-1].retry == "dependency_down"
    attempt_end = first.attempt_log[-1].ended_at
    assert attempt_end is not None
    assert first.ended_at is not None
    assert first.ended_at >= attempt_end + 1.0
