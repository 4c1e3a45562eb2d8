"""load_trace: tolerant of crashes (cut lines, no run_finished), one timeline over segments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from plandag.errors import InputError
from plandag.scheduler import events
from plandag.scheduler.result import AttemptRecord, RunResult, StepRecord
from plandag.trace.model import ActivePeriod, Attempt, Wait
from plandag.trace.reader import load_trace, parse_trace
from plandag.trace.writer import TraceWriter

T = 1_700_000_000.0
HASH = "cd" * 32
CHAIN: dict[str, Any] = {
    "steps": [
        {"id": 1, "tool": "echo", "args": {"value": "x"}},
        {"id": 2, "tool": "slow", "args": {"value": "<step_1_result>"}},
        {"id": 3, "tool": "echo", "args": {"value": "<step_2_result>"}},
    ]
}
CUT = '{"type":"event","run_id":"r","time":1700000003.5,"kind":"step_en'


def crashed_segment(path: Path) -> None:
    """Segment 0: step 1 ends, step 2 is running when the process dies mid-line."""
    now = [T]
    writer = TraceWriter(path, "r", clock=lambda: now[0])
    writer.run_started("exec", None, {})
    writer.plan(1, CHAIN, HASH, "stored")
    crash: list[events.Event] = [
        events.StepStarted("r", 1, "echo", 1, T + 1),
        events.StepSucceeded("r", 1, 1.0, T + 2),
        events.StepStarted("r", 2, "slow", 1, T + 2),
        events.Heartbeat("r", 3.0, 3, 1, 0, 0, 0, 1, 1, 0.0, 0, (2,), ("slow",), T + 3),
    ]
    for event in crash:
        writer(event)
    writer.close()
    with path.open("a", encoding="utf-8") as file:
        file.write(CUT)


def resumed_segment(path: Path) -> None:
    """Segment 1: step 1 restored (completed), step 2 re-run, step 3 runs."""
    writer = TraceWriter(path, "r", segment=1, clock=lambda: T + 10)
    writer.run_started("resume", None, {})
    writer.set_dependencies({1: [], 2: [1], 3: [2]})
    resume: list[events.Event] = [
        events.StepStarted("r", 2, "slow", 1, T + 11),
        events.StepSucceeded("r", 2, 1.0, T + 12),
        events.StepStarted("r", 3, "echo", 1, T + 12),
        events.StepSucceeded("r", 3, 1.0, T + 13),
    ]
    for event in resume:
        writer(event)
    records = {
        1: StepRecord(id=1, tool="echo", status="succeeded", result="x"),
        2: StepRecord(
            id=2,
            tool="slow",
            status="succeeded",
            result="x!",
            attempts=1,
            started_at=T + 11,
            ended_at=T + 12,
            duration_s=1.0,
            attempt_log=[AttemptRecord(1, T + 11, T + 12)],
        ),
        3: StepRecord(
            id=3,
            tool="echo",
            status="succeeded",
            result="x!",
            attempts=1,
            started_at=T + 12,
            ended_at=T + 13,
            duration_s=1.0,
            attempt_log=[AttemptRecord(1, T + 12, T + 13)],
        ),
    }
    result = RunResult("r", "succeeded", records, started_at=T + 10, ended_at=T + 13)
    writer(events.RunFinished("r", result, T + 13))
    writer.close()


def test_a_crashed_segment_is_read_from_its_live_events(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    crashed_segment(path)
    trace = load_trace(path)
    assert trace.status == "unfinished"
    assert trace.notes == [
        "line 7 is cut short (a crash while writing); ignored",
        "segment 0 has no run_finished: the run crashed or is still running",
    ]
    assert [(step.id, step.tool, step.status) for step in trace.steps.values()] == [
        (1, "echo", "succeeded"),
        (2, "slow", "running"),
        (3, "echo", "pending"),
    ]
    first, second, third = trace.steps.values()
    assert (first.start, first.end, first.from_events) == (T + 1, T + 2, True)
    assert first.attempts == [Attempt(1, T + 1, T + 2, "succeeded")]
    # running when the lines stop: its end is the last time seen (the heartbeat)
    assert (second.start, second.end) == (T + 2, T + 3)
    assert second.attempts == [Attempt(1, T + 2, T + 3, "running")]
    assert (third.start, third.end, third.depends_on) == (None, None, [2])
    # a pending step takes no time, and ties end at the smaller id
    assert trace.critical_path() == [1, 2]
    assert trace.segments[0].end == T + 3


def test_a_resumed_run_continues_the_timeline(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    crashed_segment(path)
    resumed_segment(path)
    trace = load_trace(path)
    assert trace.status == "succeeded"
    assert [(s.number, s.command, s.start, s.end, s.status) for s in trace.segments] == [
        (0, "exec", T, T + 3, None),
        (1, "resume", T + 10, T + 13, "succeeded"),
    ]
    assert trace.notes == [
        "line 7 is not a trace record (cut by a crash?); ignored",
        "segment 0 has no run_finished (its process stopped); its steps come from live events",
    ]
    assert {step_id: step.status for step_id, step in trace.steps.items()} == {
        1: "succeeded",
        2: "succeeded",
        3: "succeeded",
    }
    first, second, third = trace.steps.values()
    # step 1 was restored in segment 1: it keeps segment 0's times and attempt
    assert (first.start, first.end, first.result) == (T + 1, T + 2, "x")
    assert first.attempts == [Attempt(1, T + 1, T + 2, "succeeded", segment=0)]
    # step 2: its attempt cut by the crash (unknown), then the re-run
    assert second.attempts == [
        Attempt(1, T + 2, T + 3, "unknown", segment=0),
        Attempt(1, T + 11, T + 12, "succeeded", segment=1),
    ]
    assert (second.start, second.end, second.segment) == (T + 2, T + 12, 1)
    assert (third.start, third.end, third.depends_on) == (T + 12, T + 13, [2])
    assert (trace.start, trace.end) == (T, T + 13)
    assert trace.critical_path() == [1, 2, 3]


def test_a_step_running_when_an_earlier_segment_died_is_unknown(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    crashed_segment(path)
    writer = TraceWriter(path, "r", segment=1, clock=lambda: T + 20)
    writer.run_started("approve", None, {})
    writer.close()
    trace = load_trace(path)
    step = trace.steps[2]
    assert (step.status, step.end) == ("unknown", T + 3)
    assert step.attempts == [Attempt(1, T + 2, T + 3, "unknown")]
    assert trace.status == "unfinished"


def test_lines_of_other_runs_and_odd_lines_are_skipped() -> None:
    text = (
        '{"type":"run_started","run_id":"r","time":1.0,"segment":0,"command":"exec"}\n'
        "[1, 2]\n"
        '{"type":"event","run_id":"other","time":2.0,"kind":"step_started",'
        '"attrs":{"step_id":1}}\n'
        '{"type":"event","run_id":"r","time":3.0,"kind":"step_started","attrs":{"step_id":"x"}}\n'
        '{"type":"run_finished","run_id":"r","time":4.0,"segment":0,"status":"succeeded",'
        '"spent_usd":0.0,"spent_tokens":0,"critical_path":[]}\n'
    )
    trace = parse_trace(text)
    assert trace.status == "succeeded"
    assert trace.steps == {}
    assert trace.notes == [
        "line 2 is not a trace record (cut by a crash?); ignored",
        "1 line(s) of another run than r; ignored",
    ]
    assert trace.duration_s == 3.0


def test_no_trace_at_all_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        load_trace(tmp_path / "missing.jsonl")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(InputError, match="holds no trace record"):
        load_trace(empty)


def test_active_time_cuts_out_the_wait_between_a_crash_and_its_resume(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    crashed_segment(path)
    resumed_segment(path)
    trace = load_trace(path)
    active = trace.active_time()
    # segment 0 ran T..T+3 (crashed: its last time seen), segment 1 T+10..T+13
    assert active.periods == (
        ActivePeriod(T, T + 3, 0.0, (0,)),
        ActivePeriod(T + 10, T + 13, 3.0, (1,)),
    )
    assert active.waits == (Wait(0, T + 3, T + 10, 3.0),)
    assert (active.total_s, active.waited_s, trace.active_s, trace.duration_s) == (
        6.0,
        7.0,
        6.0,
        13.0,
    )
    assert [active.seconds(time) for time in (T - 1, T + 2, T + 5, T + 12, T + 20)] == [
        0.0,
        2.0,
        3.0,  # in the wait: where it sits
        5.0,
        6.0,
    ]
    assert (active.wait_at(T + 5), active.wait_at(T + 3), active.wait_at(T + 10)) == (
        active.waits[0],
        None,
        None,
    )
    assert active.pieces(T + 2, T + 12) == [(0, T + 2, T + 3), (1, T + 10, T + 12)]
    assert active.pieces(T + 4, T + 6) == []
    # step 2 ran T+2..T+3 (cut by the crash) and T+11..T+12: 3 s of active time from its
    # start to its end, not the 10 s of wall clock
    step = trace.steps[2]
    assert (step.duration_s, trace.step_active_s(step)) == (10.0, 3.0)
    assert trace.to_json_dict()["active"] == {
        "active_s": 6.0,
        "waited_s": 7.0,
        "periods": [
            {"start": T, "end": T + 3, "offset_s": 0.0, "segments": [0]},
            {"start": T + 10, "end": T + 13, "offset_s": 3.0, "segments": [1]},
        ],
        "waits": [{"index": 0, "start": T + 3, "end": T + 10, "at_s": 3.0, "seconds": 7.0}],
    }


def test_a_decision_from_another_shell_lies_in_the_wait_not_in_the_segment() -> None:
    def span(kind: str, start: float, end: float, attrs: str) -> str:
        return (
            f'{{"type":"span","run_id":"r","kind":"{kind}","start":{T + start},'
            f'"end":{T + end},"attrs":{attrs}}}'
        )

    lines = [
        f'{{"type":"run_started","run_id":"r","time":{T},"segment":0,"command":"run"}}',
        f'{{"type":"run_finished","run_id":"r","time":{T + 1},"segment":0,'
        '"status":"awaiting_approval","spent_usd":0.0,"spent_tokens":0,"critical_path":[]}',
        span("approval", 1, 1, '{"version":1,"hash":"ab","decision":"asked"}'),
        # plandag reject 49 s later: its revision is a model call outside every segment
        span("approval", 50, 50, '{"version":1,"hash":"ab","decision":"rejected","who":"bo"}'),
        span("llm_call", 50, 52, '{"purpose":"revision","model":"m","input_tokens":1}'),
        span("approval", 100, 100, '{"version":2,"hash":"cd","decision":"approved"}'),
        f'{{"type":"run_started","run_id":"r","time":{T + 100},"segment":1,"command":"approve"}}',
        f'{{"type":"run_finished","run_id":"r","time":{T + 103},"segment":1,'
        '"status":"succeeded","spent_usd":0.0,"spent_tokens":0,"critical_path":[]}',
    ]
    trace = parse_trace("\n".join(lines) + "\n")
    # segment 0 ends at its run_finished, though the decisions were written after it
    assert [(s.number, s.start, s.end) for s in trace.segments] == [
        (0, T, T + 1),
        (1, T + 100, T + 103),
    ]
    active = trace.active_time()
    assert active.periods == (
        ActivePeriod(T, T + 1, 0.0, (0,)),
        ActivePeriod(T + 50, T + 52, 1.0, ()),
        ActivePeriod(T + 100, T + 103, 3.0, (1,)),
    )
    assert active.waits == (Wait(0, T + 1, T + 50, 1.0), Wait(1, T + 52, T + 100, 3.0))
    assert (active.total_s, active.waited_s, trace.duration_s) == (6.0, 97.0, 103.0)


def test_a_single_segment_is_one_active_period(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    crashed_segment(path)
    trace = load_trace(path)
    active = trace.active_time()
    assert (active.periods, active.waits) == ((ActivePeriod(T, T + 3, 0.0, (0,)),), ())
    assert active.total_s == trace.duration_s == 3.0
