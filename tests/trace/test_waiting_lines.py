"""When a trace's lines reach the file: the lines of steps without effects wait (at most the
flush interval, on the writer's flush clock) and are written together; the lines of a step
with effects, the explicit records, the run's end, ``close``, an interrupted run and any
reader in the process write them at once, in order."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from plandag.checks import BUILTIN_CHECKS
from plandag.compiler import compile_plan
from plandag.runs.options import RunOptions
from plandag.runs.segments import start_run
from plandag.runs.traces import trace_factory
from plandag.scheduler import events, run_plan_sync
from plandag.scheduler.result import RunResult, StepRecord
from plandag.store import Store
from plandag.tools.base import tool
from plandag.tools.registry import Registry
from plandag.trace import writer as writer_module
from plandag.trace.reader import load_trace
from plandag.trace.redact import Redactor
from plandag.trace.writer import TraceWriter, flush_traces

T = 1_700_000_000.0


class FakeClock:
    """A flush clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _kinds(path: Path) -> list[tuple[str, Any]]:
    """Each line's type and, for events, kind and step id."""
    found: list[tuple[str, Any]] = []
    for text in path.read_text(encoding="utf-8").splitlines():
        line = json.loads(text)
        if line["type"] == "event":
            found.append((line["kind"], line["attrs"].get("step_id")))
        elif line["type"] == "span":
            found.append((f"span {line['kind']}", line["attrs"].get("step_id")))
        else:
            found.append((line["type"], None))
    return found


def _record(step_id: int) -> StepRecord:
    return StepRecord(
        id=step_id,
        tool="echo",
        status="succeeded",
        attempts=1,
        started_at=T + step_id,
        ended_at=T + step_id + 0.5,
        result=step_id,
    )


def _step(writer: TraceWriter, step_id: int, effects: str | None = "none") -> None:
    writer(events.StepStarted("r", step_id, "echo", 1, T + step_id, effects))
    writer(events.StepSucceeded("r", step_id, 0.5, T + step_id + 0.5, step_id, _record(step_id)))


def test_lines_of_steps_without_effects_wait_the_flush_interval(tmp_path: Path) -> None:
    clock = FakeClock()
    path = tmp_path / "t.jsonl"
    writer = TraceWriter(path, "r", redact=Redactor(), flush_clock=clock)
    try:
        _step(writer, 1)
        clock.now = 0.1
        _step(writer, 2)
        assert path.read_text(encoding="utf-8") == ""
        clock.now = 0.199
        assert not writer._flush_due()  # due 0.2 s after the oldest line
        assert path.read_text(encoding="utf-8") == ""
        clock.now = 0.2
        assert writer._flush_due()
        assert _kinds(path) == [
            ("step_started", 1),
            ("step_ended", 1),
            ("span step", 1),
            ("step_started", 2),
            ("step_ended", 2),
            ("span step", 2),
        ]
        clock.now = 5.0
        assert not writer._flush_due()  # nothing waits
    finally:
        writer.close()


def test_the_writers_thread_writes_an_idle_runs_lines(tmp_path: Path) -> None:
    clock = FakeClock()
    path = tmp_path / "t.jsonl"
    writer = TraceWriter(path, "r", flush_interval_s=0.05, flush_clock=clock)
    try:
        writer(events.StepStarted("r", 1, "slow", 1, T, "none"))  # then a long tool call
        assert path.read_text(encoding="utf-8") == ""
        clock.now = 0.05  # nothing else is written: the thread looks at the clock again
        for _ in range(2000):  # bounded: 20 s at most
            if path.read_text(encoding="utf-8"):
                break
            time.sleep(0.01)
        assert _kinds(path) == [("step_started", 1)]
    finally:
        writer.close()


def test_the_lines_of_a_step_with_effects_are_written_at_once(tmp_path: Path) -> None:
    clock = FakeClock()  # never moves: only what is written at once reaches the file
    path = tmp_path / "t.jsonl"
    writer = TraceWriter(path, "r", redact=Redactor(), flush_clock=clock)
    try:
        _step(writer, 1)
        writer(events.StepStarted("r", 2, "send", 1, T + 2, "write"))
        # the waiting lines first, in order
        assert _kinds(path) == [
            ("step_started", 1),
            ("step_ended", 1),
            ("span step", 1),
            ("step_started", 2),
        ]
        writer(events.StepSucceeded("r", 2, 0.5, T + 2.5, 2, _record(2)))
        assert _kinds(path)[-2:] == [("step_ended", 2), ("span step", 2)]
        _step(writer, 3, None)  # a sender that does not say: as a step with effects
        assert _kinds(path)[-3:] == [("step_started", 3), ("step_ended", 3), ("span step", 3)]
        _step(writer, 4)
        assert len(_kinds(path)) == 9
    finally:
        writer.close()
    assert len(_kinds(path)) == 12


def test_explicit_records_the_run_end_and_close_write_what_waits(tmp_path: Path) -> None:
    clock = FakeClock()
    path = tmp_path / "t.jsonl"
    writer = TraceWriter(path, "r", clock=lambda: T, flush_clock=clock)
    _step(writer, 1)
    writer(events.Heartbeat("r", 4.0, 1, 0, 1, 0, 0, 0, 0, 0.0, 30, (), (), T + 1))
    writer.approval(1, "h", "asked", None, None)
    assert _kinds(path) == [
        ("step_started", 1),
        ("step_ended", 1),
        ("span step", 1),
        ("heartbeat", None),
        ("span approval", None),
    ]
    _step(writer, 2)
    result = RunResult("r", "succeeded", {1: _record(1), 2: _record(2)}, T, T + 3)
    writer(events.RunFinished("r", result, T + 3))
    assert _kinds(path)[5:] == [
        ("step_started", 2),
        ("step_ended", 2),
        ("span step", 2),
        ("run_finished", None),
    ]
    _step(writer, 3)
    writer.close()
    assert _kinds(path)[-3:] == [("step_started", 3), ("step_ended", 3), ("span step", 3)]
    writer.close()  # again: nothing more


def test_a_reader_in_the_process_reads_the_lines_that_wait(tmp_path: Path) -> None:
    clock = FakeClock()
    path = tmp_path / "t.jsonl"
    writer = TraceWriter(path, "r", clock=lambda: T, flush_clock=clock)
    try:
        writer.run_started("run", None, {})
        _step(writer, 1)
        assert load_trace(path).steps[1].status == "succeeded"
        _step(writer, 2)
        flush_traces(tmp_path / "." / "t.jsonl")  # the same file, named otherwise
        assert _kinds(path)[-1] == ("span step", 2)
        _step(writer, 3)
        # a second writer of the same file (a decision appended) writes after them
        with TraceWriter(path, "r", clock=lambda: T) as second:
            second.approval(1, "h", "approved", "ana", None)
        assert _kinds(path)[-4:] == [
            ("step_started", 3),
            ("step_ended", 3),
            ("span step", 3),
            ("span approval", None),
        ]
    finally:
        writer.close()


def test_lines_are_written_once_they_pass_the_size_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_module, "PENDING_CHARACTERS", 1000)
    path = tmp_path / "t.jsonl"
    writer = TraceWriter(path, "r", flush_clock=FakeClock())
    try:
        written = 0
        for step_id in range(1, 40):
            _step(writer, step_id)
            size = len(path.read_text(encoding="utf-8"))
            assert size >= written
            written = size
            total = sum(len(line) + 1 for line in _lines_text(writer, path))
            assert total - size < 1000 + 400  # what waits stays under the bound (+ a step)
        assert written > 0
    finally:
        writer.close()


def _lines_text(writer: TraceWriter, path: Path) -> list[str]:
    """Every line written so far, those that wait included."""
    return path.read_text(encoding="utf-8").splitlines() + "".join(writer._pending).splitlines()


@tool
def echo(text: str) -> str:
    """Return ``text``."""
    return text


def test_a_tool_with_effects_finds_its_start_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    seen: list[list[tuple[str, Any]]] = []

    @tool(effects="write", idempotent=True)
    def send(text: str) -> str:
        """Look at the trace file as another process would, then send ``text``."""
        seen.append(_kinds(path))
        return text

    plan = {
        "steps": [
            {"id": 1, "tool": "echo", "args": {"text": "a"}},
            {"id": 2, "tool": "send", "args": {"text": "<step_1_result>"}},
            {"id": 3, "tool": "echo", "args": {"text": "<step_2_result>"}},
        ]
    }
    compiled = compile_plan(plan, Registry([echo, send], BUILTIN_CHECKS))
    writer = TraceWriter(path, "fx", redact=Redactor(), flush_clock=FakeClock())
    before: list[list[tuple[str, Any]]] = []

    def watch(event: events.Event) -> None:  # called before the writer
        if isinstance(event, events.StepStarted):
            assert event.effects == ("write" if event.step_id == 2 else "none")
            before.append(_kinds(path))

    try:
        run_plan_sync(compiled, run_id="fx", observers=[watch, writer], approve="auto")
    finally:
        writer.close()
    # step 1's lines waited until step 2's start was written, before its tool was called
    assert before[:2] == [[], []]
    assert seen == [[("step_started", 1), ("step_ended", 1), ("span step", 1), ("step_started", 2)]]
    assert _kinds(path)[-1] == ("run_finished", None)


@tool
async def hang(text: str) -> str:
    """Wait until cancelled."""
    await anyio.sleep_forever()
    return text


@pytest.mark.parametrize("how", ["cancelled", "ctrl-c"])
def test_an_interrupted_durable_run_leaves_every_line_written(tmp_path: Path, how: str) -> None:
    plan = {
        "steps": [
            {"id": 1, "tool": "echo", "args": {"text": "a"}},
            {"id": 2, "tool": "echo", "args": {"text": "<step_1_result>"}},
            {"id": 3, "tool": "hang", "args": {"text": "<step_2_result>"}},
        ]
    }
    compiled = compile_plan(plan, Registry([echo, hang], BUILTIN_CHECKS))
    store = Store(tmp_path / "runs.sqlite3")
    factory = trace_factory(store, False)
    made: list[TraceWriter] = []

    def trace(run_id: str, segment: int) -> Any:
        writer = factory(run_id, segment)
        writer._flush_clock = FakeClock()  # never due: only what writes at once reaches it
        made.append(writer)
        return writer

    scopes: list[anyio.CancelScope] = []

    def stop(event: events.Event) -> None:
        if isinstance(event, events.StepStarted) and event.step_id == 3:
            if how == "ctrl-c":  # raised where the loop runs, before the trace sees it
                raise KeyboardInterrupt
            scopes[0].cancel()  # cancelled from outside while its tool waits

    async def main() -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            await start_run(
                store,
                compiled,
                RunOptions(),
                command="run",
                observers=[stop],
                trace=trace,
                run_id="cut",
            )

    try:
        if how == "ctrl-c":
            with pytest.raises(KeyboardInterrupt):
                anyio.run(main)
        else:
            anyio.run(main)
    finally:
        store.close()
    (writer,) = made
    kinds = _kinds(writer.path)
    assert kinds[:8] == [
        ("run_started", None),
        ("plan", None),
        ("step_started", 1),
        ("step_ended", 1),
        ("span step", 1),
        ("step_started", 2),
        ("step_ended", 2),
        ("span step", 2),
    ]
    if how == "cancelled":
        assert kinds[8:] == [
            ("step_started", 3),
            ("step_ended", 3),
            ("span step", 3),
            ("run_finished", None),
        ]
    else:
        assert kinds[8:] == []  # no end was written: close() wrote the lines that waited


def test_a_writer_left_open_writes_what_waits_at_the_interpreters_exit(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    script = f"""
from plandag.scheduler import events
from plandag.trace.writer import TraceWriter

writer = TraceWriter({str(path)!r}, "r", flush_interval_s=3600.0)
writer(events.StepStarted("r", 1, "echo", 1, 1.0, "none"))
assert open({str(path)!r}).read() == ""
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert _kinds(path) == [("step_started", 1)]


IDLE_TOOLS = '''
import os
import time
from pathlib import Path

from plandag.tools import tool


@tool
def first(text: str) -> str:
    """Return TEXT."""
    return text


@tool
def slow(text: str) -> str:
    """Mark that it runs, then wait (killed here)."""
    Path(os.environ["HANG_MARK"]).write_text("hanging")
    time.sleep(60)
    return text
'''


@pytest.mark.timeout(120)
def test_an_idle_runs_lines_reach_the_file_before_a_sigkill(tmp_path: Path) -> None:
    # a real `plandag exec` whose effect-free tool hangs: nothing else is written, the
    # writer's thread writes what waits; SIGKILL then keeps it
    (tmp_path / "idle_tools.py").write_text(IDLE_TOOLS, encoding="utf-8")
    plan = {
        "steps": [
            {"id": 1, "tool": "first", "args": {"text": "a"}},
            {"id": 2, "tool": "slow", "args": {"text": "<step_1_result>"}},
        ]
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    env = dict(os.environ)
    env.update(
        PLANDAG_STORE=str(tmp_path / "store" / "runs.sqlite3"),
        HANG_MARK=str(tmp_path / "hanging"),
    )
    traces = tmp_path / "store" / "traces"
    process = subprocess.Popen(
        [sys.executable, "-m", "plandag", "exec", "plan.json", "--tools", "idle_tools.py"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        kinds: list[tuple[str, Any]] = []
        for _ in range(600):  # bounded: 60 s at most
            assert process.poll() is None
            found = list(traces.glob("*.jsonl")) if traces.is_dir() else []
            if found:
                kinds = _kinds(found[0])
                if ("step_started", 2) in kinds:
                    break
            time.sleep(0.1)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert (tmp_path / "hanging").exists()
    (path,) = traces.glob("*.jsonl")
    assert _kinds(path) == [
        ("run_started", None),
        ("plan", None),
        ("span compile", None),
        ("step_started", 1),
        ("step_ended", 1),
        ("span step", 1),
        ("step_started", 2),
    ]
