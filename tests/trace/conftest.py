"""Trace files for the tests of plandag.trace: a sample run written by the real writer.

The sample run (``T`` = 1_700_000_000.0, seconds since the epoch)::

    step 1 echo        T+1 → T+2    succeeded
    step 2 echo <1>    T+2 → T+3    succeeded          (implied parent 1)
    step 3 nap         T+2 → T+6    succeeded, 2 attempts (depends_on 1)
    step 4 echo <2,3>  T+6 → T+6.5  failed check_failed (parents 2, 3)

critical path 1 → 3 → 4 (1 + 4 + 0.5 = 5.5 s); one model call (100 → 20 tokens,
$0.0015), one approval, one heartbeat; the run ``failed``, steps spent $0.25 and 40 tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from plandag.checks.base import CheckOutcome
from plandag.models import CallRecord, Usage
from plandag.scheduler import events
from plandag.scheduler.result import AttemptRecord, RunResult, StepErrorInfo, StepRecord
from plandag.trace.writer import TraceWriter

T = 1_700_000_000.0
PLAN_HASH = "ab" * 32

SAMPLE_PLAN: dict[str, Any] = {
    "version": 1,
    "goal": "sample",
    "steps": [
        {"id": 1, "tool": "echo", "args": {"value": "x"}},
        {"id": 2, "tool": "echo", "args": {"value": "<step_1_result>"}},
        {"id": 3, "tool": "nap", "args": {"seconds": 0.1}, "depends_on": [1]},
        {
            "id": 4,
            "tool": "echo",
            "args": {"value": ["<step_2_result>", "<step_3_result>"]},
            "check": [{"kind": "equals", "value": "y"}],
        },
    ],
}


class Clock:
    """A wall clock the test sets by hand."""

    def __init__(self, now: float = T) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def sample_records() -> dict[int, StepRecord]:
    """The sample run's step records."""
    error = StepErrorInfo("CheckFailedError", "equals: ['x', 'r'] != 'y'")
    return {
        1: StepRecord(
            id=1,
            tool="echo",
            status="succeeded",
            result="x",
            attempts=1,
            started_at=T + 1,
            ended_at=T + 2,
            duration_s=1.0,
            # the run's spend (0.25 USD, 40 tokens) is its steps' attempts' spend
            attempt_log=[
                AttemptRecord(number=1, started_at=T + 1, ended_at=T + 2, cost_usd=0.25, tokens=40)
            ],
        ),
        2: StepRecord(
            id=2,
            tool="echo",
            status="succeeded",
            result="x",
            attempts=1,
            started_at=T + 2,
            ended_at=T + 3,
            duration_s=1.0,
            attempt_log=[AttemptRecord(number=1, started_at=T + 2, ended_at=T + 3)],
        ),
        3: StepRecord(
            id=3,
            tool="nap",
            status="succeeded",
            result="r",
            attempts=2,
            started_at=T + 2,
            ended_at=T + 6,
            duration_s=4.0,
            attempt_log=[
                AttemptRecord(
                    number=1,
                    started_at=T + 2,
                    ended_at=T + 4,
                    error=StepErrorInfo("TimeoutError", "slow"),
                    reason="timeout",
                    kind="transient",
                    retry="retried",
                ),
                AttemptRecord(number=2, started_at=T + 4.5, ended_at=T + 6, delay_before_s=0.5),
            ],
        ),
        4: StepRecord(
            id=4,
            tool="echo",
            status="failed",
            result=["x", "r"],
            error=error,
            reason="check_failed",
            detail="a check failed",
            attempts=1,
            started_at=T + 6,
            ended_at=T + 6.5,
            duration_s=0.5,
            checks=[CheckOutcome("equals", "fail", "['x', 'r'] != 'y'")],
            attempt_log=[
                AttemptRecord(
                    number=1,
                    started_at=T + 6,
                    ended_at=T + 6.5,
                    error=error,
                    reason="check_failed",
                    kind="permanent",
                )
            ],
        ),
    }


def sample_result(run_id: str) -> RunResult:
    """The sample run's result."""
    return RunResult(
        run_id=run_id,
        status="failed",
        steps=sample_records(),
        started_at=T + 1,
        ended_at=T + 6.5,
        duration_s=5.5,
        spent_usd=0.25,
        spent_tokens=40,
    )


def live_events(run_id: str) -> list[events.Event]:
    """The sample run's events up to (not including) RunFinished, in order."""
    failure = StepErrorInfo("CheckFailedError", "equals: ['x', 'r'] != 'y'")
    return [
        events.RunStarted(run_id, 4, T + 1),
        events.StepStarted(run_id, 1, "echo", 1, T + 1),
        events.StepSucceeded(run_id, 1, 1.0, T + 2),
        events.StepStarted(run_id, 2, "echo", 1, T + 2),
        events.StepStarted(run_id, 3, "nap", 1, T + 2),
        events.StepSucceeded(run_id, 2, 1.0, T + 3),
        events.StepRetrying(
            run_id, 3, 1, "timeout", StepErrorInfo("TimeoutError", "slow"), 0.5, T + 4
        ),
        events.StepStarted(run_id, 3, "nap", 2, T + 4.5),
        events.Heartbeat(run_id, 4.0, 4, 2, 0, 0, 0, 1, 1, 0.2, 30, (3,), ("nap",), T + 5),
        events.StepSucceeded(run_id, 3, 1.5, T + 6),
        events.StepStarted(run_id, 4, "echo", 1, T + 6),
        events.CheckEvaluated(run_id, 4, CheckOutcome("equals", "fail", "no"), T + 6.5),
        events.StepFailed(run_id, 4, "check_failed", failure, T + 6.5),
    ]


def write_sample(path: Path, run_id: str = "run-a", *, finish: bool = True) -> TraceWriter:
    """Write the sample run to ``path`` (with its RunFinished when ``finish``); the writer
    is returned closed."""
    clock = Clock()
    writer = TraceWriter(path, run_id, clock=clock)
    writer.run_started("exec", "sample", {"n": 1})
    clock.now = T + 0.1
    writer.plan(1, SAMPLE_PLAN, PLAN_HASH, "stored")
    writer.compile(1, T + 0.2, T + 0.3, [])
    writer.llm_call(
        CallRecord(
            provider="anthropic",
            model="claude-x",
            attempt=1,
            streamed=False,
            usage=Usage(input_tokens=100, output_tokens=20),
            cost_usd=0.0015,
            priced=True,
            started_at=T + 0.3,
            duration_s=0.3,
            stop_reason="end_turn",
        ),
        "plan",
    )
    writer.approval(1, PLAN_HASH, "approved", "ana", None, start=T + 0.6, end=T + 0.8)
    for event in live_events(run_id):
        writer(event)
    if finish:
        writer(events.RunFinished(run_id, sample_result(run_id), T + 6.5))
    writer.close()
    return writer


@pytest.fixture
def sample_path(tmp_path: Path) -> Path:
    """The finished sample run's trace file."""
    path = tmp_path / "traces" / "run-a.jsonl"
    write_sample(path)
    return path


@pytest.fixture
def sample_writer() -> Callable[..., TraceWriter]:
    """:func:`write_sample`, for tests that need several traces."""
    return write_sample
