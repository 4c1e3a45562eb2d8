"""Step spans are written as steps end, each once unless the step changes after, and a step's
result is made JSON-safe once for the trace and the store together."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel

from plandag.checks import BUILTIN_CHECKS
from plandag.compiler import compile_plan
from plandag.runs.options import RunOptions
from plandag.runs.segments import start_run
from plandag.scheduler import events, run_plan_sync
from plandag.scheduler.result import AttemptRecord, RunResult, StepRecord
from plandag.store import Store
from plandag.tools.base import tool
from plandag.tools.registry import Registry
from plandag.trace.reader import load_trace
from plandag.trace.redact import Redactor
from plandag.trace.writer import TraceWriter, flush_traces

T = 1_700_000_000.0


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _step_spans(path: Path) -> list[dict[str, Any]]:
    return [line for line in _lines(path) if line["type"] == "span" and line["kind"] == "step"]


@tool
def echo(text: str) -> str:
    """Return ``text``."""
    return text


@tool
def refuse(text: str) -> str:
    """Always fail."""
    raise ValueError(f"no {text}")


def _chain(size: int) -> Any:
    steps = [{"id": 1, "tool": "echo", "args": {"text": "a"}}]
    steps += [
        {"id": n, "tool": "echo", "args": {"text": f"<step_{n - 1}_result>"}}
        for n in range(2, size + 1)
    ]
    return compile_plan({"steps": steps}, Registry([echo, refuse], BUILTIN_CHECKS))


def test_a_step_span_is_in_the_file_when_the_next_step_starts(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    writer = TraceWriter(path, "live", redact=Redactor())
    seen: dict[int, list[int]] = {}

    def watch(event: events.Event) -> None:
        if isinstance(event, events.StepStarted):
            flush_traces(path)  # as every reader in the process does
            seen[event.step_id] = [span["attrs"]["step_id"] for span in _step_spans(path)]

    run_plan_sync(_chain(3), run_id="live", observers=[writer, watch])
    writer.close()
    assert seen == {1: [], 2: [1], 3: [1, 2]}
    assert [span["attrs"]["step_id"] for span in _step_spans(path)] == [1, 2, 3]
    assert _lines(path)[-1]["type"] == "run_finished"


def test_each_step_has_one_span_and_the_trace_reads_as_before(tmp_path: Path) -> None:
    plan = {
        "steps": [
            {"id": 1, "tool": "echo", "args": {"text": "a"}},
            {"id": 2, "tool": "refuse", "args": {"text": "<step_1_result>"}},
            {"id": 3, "tool": "echo", "args": {"text": "<step_2_result>"}},
            {"id": 4, "tool": "echo", "args": {"text": "<step_1_result>"}},
        ]
    }
    compiled = compile_plan(plan, Registry([echo, refuse], BUILTIN_CHECKS))
    path = tmp_path / "t.jsonl"
    writer = TraceWriter(path, "one", redact=Redactor())
    writer.set_graph(compiled.graph)
    run_plan_sync(compiled, run_id="one", observers=[writer])
    writer.close()
    ids = [span["attrs"]["step_id"] for span in _step_spans(path)]
    assert sorted(ids) == [1, 2, 3, 4]  # the skipped step 3 at the run's end
    assert ids[-1] == 3
    trace = load_trace(path)
    statuses = {step_id: step.status for step_id, step in trace.steps.items()}
    assert statuses == {1: "succeeded", 2: "failed", 3: "skipped", 4: "succeeded"}
    assert trace.steps[2].error == {"type": "ValueError", "message": "no a"}
    assert trace.steps[3].depends_on == [2]


def _echo_step(step_id: int, attempt: AttemptRecord, **fields: Any) -> StepRecord:
    """The record of step ``step_id`` of the tool ``echo`` with ``attempt`` as its one
    attempt, starting and ending with it; ``fields``: the record's other fields."""
    return StepRecord(
        id=step_id,
        tool="echo",
        attempts=1,
        attempt_log=[attempt],
        started_at=attempt.started_at,
        ended_at=attempt.ended_at,
        **fields,
    )


def test_a_step_changed_after_its_end_is_written_again_and_read_as_changed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.jsonl"
    writer = TraceWriter(path, "again", clock=lambda: T)
    attempt = AttemptRecord(number=1, started_at=T, ended_at=T + 1, reason="tool_error")
    attempt.children = [{"kind": "llm_call", "name": "ask", "start": T, "end": T + 1}]
    record = _echo_step(1, attempt, status="failed", reason="tool_error")
    writer(events.StepFailed("again", 1, "tool_error", None, T + 1, record))
    record.superseded_by = (2,)  # a replan replaced it
    writer.run_finished(RunResult("again", "failed", {1: record}, started_at=T, ended_at=T + 2))
    writer.close()
    spans = _step_spans(path)
    assert [span["attrs"]["superseded_by"] for span in spans] == [None, [2]]
    children = [line for line in _lines(path) if line.get("kind") == "step_child"]
    assert len(children) == 1  # written with the first span only
    trace = load_trace(path)
    assert trace.steps[1].superseded_by == [2]
    assert len(trace.steps[1].children) == 1
    assert len(trace.steps[1].attempts) == 1


class Counted(BaseModel):
    """A result whose conversions to JSON are counted."""

    text: str
    dumps: list[int] = []

    def model_dump(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.dumps.append(1)
        return super().model_dump(*args, **kwargs)


def test_a_result_is_made_json_safe_once_for_the_trace_and_the_store(tmp_path: Path) -> None:
    made: list[Counted] = []

    @tool
    def counted() -> Counted:
        """Return a fresh counted result."""
        result = Counted(text="x", dumps=[])
        made.append(result)
        return result

    compiled = compile_plan(
        {"steps": [{"id": 1, "tool": "counted", "args": {}}]},
        Registry([counted], BUILTIN_CHECKS),
    )
    store = Store(tmp_path / "runs.sqlite3")

    def factory(run_id: str, segment: int) -> TraceWriter:
        return TraceWriter(store.trace_path(run_id), run_id, segment=segment, redact=Redactor())

    async def run() -> Any:
        return await start_run(store, compiled, RunOptions(), command="exec", trace=factory)

    outcome = anyio.run(run)
    store.close()
    assert outcome.result is not None
    assert outcome.result.status == "succeeded"
    assert len(made) == 1
    assert made[0].dumps == [1]
    run_id = outcome.result.run_id
    spans = _step_spans(tmp_path / "traces" / f"{run_id}.jsonl")
    assert spans[0]["attrs"]["result"] == {"text": "x", "dumps": [1]}


def _plain_success(writer: TraceWriter, step_id: int) -> StepRecord:
    """A plain step's start and success, through the observer."""
    start, end = T + step_id, T + step_id + 0.5
    writer(events.StepStarted("plain", step_id, "echo", 1, start))
    attempt = AttemptRecord(number=1, started_at=start, ended_at=end)
    record = _echo_step(step_id, attempt, status="succeeded", result="r", duration_s=0.5)
    writer(events.StepSucceeded("plain", step_id, 0.5, end, "r", record))
    return record


def test_a_step_span_is_written_again_only_when_what_it_shows_changed(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    writer = TraceWriter(path, "plain", clock=lambda: T, redact=Redactor())
    writer.set_dependencies({1: [], 2: [1], 3: [1], 4: [1]})
    records = {step_id: _plain_success(writer, step_id) for step_id in (1, 2, 3, 4)}
    writer.set_dependencies({2: [1], 3: [1, 2]})  # a replan: 2 the same, 3 gains a parent
    records[4].attempt_log[0].retry = "retried"  # changed after its end
    writer.run_finished(RunResult("plain", "succeeded", records, started_at=T, ended_at=T + 9))
    writer.close()
    spans = [(span["attrs"]["step_id"], span["attrs"]["depends_on"]) for span in _step_spans(path)]
    assert spans == [(1, []), (2, [1]), (3, [1]), (4, [1]), (3, [1, 2]), (4, [1])]
    assert load_trace(path).steps[3].depends_on == [1, 2]
