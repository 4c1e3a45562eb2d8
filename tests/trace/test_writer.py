"""TraceWriter: the file format of :mod:`plandag.trace.writer`, read back by load_trace with
the same values."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from plandag.checks import BUILTIN_CHECKS
from plandag.compiler import compile_plan
from plandag.scheduler import events, run_plan_sync
from plandag.scheduler.result import RunResult, StepRecord
from plandag.tools.base import tool
from plandag.tools.registry import Registry
from plandag.trace.model import Attempt, CheckResult
from plandag.trace.reader import load_trace
from plandag.trace.writer import RESULT_CHARACTERS, TraceWriter, plan_dependencies

T = 1_700_000_000.0
HASH = "ab" * 32


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_every_line_has_type_run_id_and_time_in_order(sample_path: Path) -> None:
    records = lines(sample_path)
    assert [(record["type"], record.get("kind")) for record in records] == [
        ("run_started", None),
        ("plan", None),
        ("span", "compile"),
        ("span", "llm_call"),
        ("span", "approval"),
        ("event", "step_started"),
        ("event", "step_ended"),
        ("event", "step_started"),
        ("event", "step_started"),
        ("event", "step_ended"),
        ("event", "step_started"),
        ("event", "heartbeat"),
        ("event", "step_ended"),
        ("event", "step_started"),
        ("event", "step_ended"),
        ("span", "step"),
        ("span", "step"),
        ("span", "step"),
        ("span", "step"),
        ("run_finished", None),
    ]
    assert all(record["run_id"] == "run-a" for record in records)
    assert all(isinstance(record["time"], float) for record in records)


def test_exact_lines(sample_path: Path) -> None:
    records = lines(sample_path)
    assert records[0] == {
        "type": "run_started",
        "run_id": "run-a",
        "time": T,
        "segment": 0,
        "command": "exec",
        "goal": "sample",
        "params": {"n": 1},
    }
    assert records[3]["attrs"] == {
        "purpose": "plan",
        "model": "claude-x",
        "provider": "anthropic",
        "attempt": 1,
        "input_tokens": 100,
        "output_tokens": 20,
        "cost_usd": 0.0015,
        "stop_reason": "end_turn",
        "error": None,
    }
    assert (records[3]["start"], records[3]["end"]) == (T + 0.3, T + 0.6)
    assert records[5] == {
        "type": "event",
        "run_id": "run-a",
        "time": T + 1,
        "kind": "step_started",
        "attrs": {"step_id": 1, "tool": "echo", "attempt": 1},
    }
    assert records[11]["attrs"] == {
        "elapsed_s": 4.0,
        "total": 4,
        "succeeded": 2,
        "failed": 0,
        "skipped": 0,
        "cancelled": 0,
        "running": 1,
        "pending": 1,
        "spent_usd": 0.2,
        "spent_tokens": 30,
        "running_steps": [3],
        "running_tools": ["nap"],
    }
    step_4 = records[18]
    assert (step_4["kind"], step_4["name"], step_4["start"], step_4["end"]) == (
        "step",
        "step 4 echo",
        T + 6,
        T + 6.5,
    )
    error = {"type": "CheckFailedError", "message": "equals: ['x', 'r'] != 'y'"}
    assert step_4["attrs"] == {
        "step_id": 4,
        "tool": "echo",
        "status": "failed",
        "reason": "check_failed",
        "detail": "a check failed",
        "error": error,
        "depends_on": [2, 3],
        "attempts": [
            {
                "attempt": 1,
                "start": T + 6,
                "end": T + 6.5,
                "status": "failed",
                "reason": "check_failed",
                "error": error,
            }
        ],
        "checks": [
            {"kind": "equals", "passed": False, "status": "fail", "message": "['x', 'r'] != 'y'"}
        ],
        "args": None,
        "result": ["x", "r"],
        "superseded_by": None,
        "segment": 0,
        "restored": False,
    }
    assert records[-1] == {
        "type": "run_finished",
        "run_id": "run-a",
        "time": T + 6.5,
        "segment": 0,
        "status": "failed",
        "spent_usd": 0.25,
        "spent_tokens": 40,
        "critical_path": [1, 3, 4],
    }


def test_round_trip(sample_path: Path) -> None:
    trace = load_trace(sample_path)
    assert trace.run_id == "run-a"
    assert trace.status == "failed"
    assert trace.notes == []
    assert (trace.start, trace.end, trace.duration_s) == (T, T + 6.5, 6.5)
    assert (trace.steps_cost_usd, trace.llm_cost_usd, trace.tokens) == (0.25, 0.0015, 160)
    [segment] = trace.segments
    assert (segment.number, segment.command, segment.goal, segment.params) == (
        0,
        "exec",
        "sample",
        {"n": 1},
    )
    assert (segment.start, segment.end, segment.status, segment.critical_path) == (
        T,
        T + 6.5,
        "failed",
        [1, 3, 4],
    )
    assert [(plan.version, plan.hash, plan.source) for plan in trace.plans] == [(1, HASH, "stored")]
    assert {step_id: step.status for step_id, step in trace.steps.items()} == {
        1: "succeeded",
        2: "succeeded",
        3: "succeeded",
        4: "failed",
    }
    assert {step_id: step.depends_on for step_id, step in trace.steps.items()} == {
        1: [],
        2: [1],
        3: [1],
        4: [2, 3],
    }
    step_3 = trace.steps[3]
    assert (step_3.tool, step_3.start, step_3.end, step_3.duration_s) == ("nap", T + 2, T + 6, 4.0)
    assert step_3.attempts == [
        Attempt(
            1,
            T + 2,
            T + 4,
            "failed",
            "timeout",
            {"type": "TimeoutError", "message": "slow"},
            retry="retried",
        ),
        Attempt(2, T + 4.5, T + 6, "succeeded"),
    ]
    assert trace.steps[4].checks == [CheckResult("equals", False, "fail", "['x', 'r'] != 'y'")]
    assert trace.steps[4].result == ["x", "r"]
    assert not any(step.from_events for step in trace.steps.values())
    assert trace.critical_path() == [1, 3, 4]
    [call] = trace.llm_calls
    assert (call.purpose, call.model, call.input_tokens, call.output_tokens, call.cost_usd) == (
        "plan",
        "claude-x",
        100,
        20,
        0.0015,
    )
    [approval] = trace.approvals
    assert (approval.decision, approval.who, approval.hash, approval.start, approval.end) == (
        "approved",
        "ana",
        HASH,
        T + 0.6,
        T + 0.8,
    )
    [compiled] = trace.compiles
    assert (compiled.version, compiled.ok, compiled.diagnostics) == (1, True, [])
    assert [heartbeat["time"] for heartbeat in trace.heartbeats] == [T + 5]


def test_the_json_form_is_json(sample_path: Path) -> None:
    document = load_trace(sample_path).to_json_dict()
    text = json.dumps(document)
    again = json.loads(text)
    assert again["status"] == "failed"
    assert again["critical_path"] == [1, 3, 4]
    assert [step["id"] for step in again["steps"]] == [1, 2, 3, 4]
    assert again["segments"][0]["finished"] is True


def test_redactor_sees_attrs_params_and_plan_and_exporters_get_each_record(
    tmp_path: Path,
) -> None:
    seen: list[dict[str, Any]] = []

    def redact(value: Any) -> Any:
        if isinstance(value, str):
            return value.replace("secret", "[REDACTED]")
        if isinstance(value, dict):
            return {key: redact(item) for key, item in value.items()}
        if isinstance(value, list):
            return [redact(item) for item in value]
        return value

    path = tmp_path / "t.jsonl"
    writer = TraceWriter(path, "r", redact=redact, exporters=[seen.append], clock=lambda: T)
    writer.run_started("exec", "find the secret", {"token": "secret-123"})
    writer.plan(1, {"steps": [{"id": 1, "tool": "echo", "args": {"value": "secret"}}]}, HASH, "x")
    writer.step_args(1, {"value": "secret"})
    writer.approval(1, HASH, "rejected", "ana", "do not send the secret")
    record = StepRecord(id=1, tool="echo", status="succeeded", result="secret", ended_at=T)
    writer.run_finished(RunResult("r", "succeeded", {1: record}, started_at=T, ended_at=T))
    writer.close()
    text = path.read_text(encoding="utf-8")
    assert "secret" not in text
    assert text.count("[REDACTED]") == 6  # goal, param, plan args, feedback, args, result
    assert [record["type"] for record in seen] == [
        "run_started",
        "plan",
        "span",
        "span",
        "run_finished",
    ]
    assert seen[2]["attrs"]["feedback"] == "do not send the [REDACTED]"
    assert seen[3]["attrs"]["args"] == {"value": "[REDACTED]"}
    assert seen == lines(path)


def test_a_failing_exporter_is_logged_once_and_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(record: dict[str, Any]) -> None:
        raise RuntimeError("collector down")

    writer = TraceWriter(tmp_path / "t.jsonl", "r", exporters=[broken], clock=lambda: T)
    with caplog.at_level(logging.WARNING, logger="plandag.trace"):
        writer.run_started("exec", None, None)
        writer.run_started("exec", None, None)
    writer.close()
    assert len(lines(tmp_path / "t.jsonl")) == 2
    assert [record.getMessage().count("collector down") for record in caplog.records] == [1]


def test_the_observer_never_raises(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    writer = TraceWriter(tmp_path / "t.jsonl", "r", clock=lambda: T)
    writer.close()  # every later write fails
    with caplog.at_level(logging.WARNING, logger="plandag.trace"):
        writer(events.StepStarted("r", 1, "echo", 1, T))
        writer(events.StepStarted("r", 2, "echo", 1, T))
        writer("not an event")  # type: ignore[arg-type]
    assert len(caplog.records) == 1
    assert "closed" in caplog.records[0].getMessage()


def test_a_large_result_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    writer = TraceWriter(path, "r", clock=lambda: T)
    big = "x" * (RESULT_CHARACTERS * 2)
    record = StepRecord(id=1, tool="echo", status="succeeded", result=big, ended_at=T)
    writer.run_finished(RunResult("r", "succeeded", {1: record}, started_at=T, ended_at=T))
    writer.close()
    result = lines(path)[0]["attrs"]["result"]
    assert result["truncated"] is True
    assert result["chars"] == RESULT_CHARACTERS * 2 + 2
    assert result["preview"] == '"' + "x" * (RESULT_CHARACTERS // 4 - 1)
    assert len(result["sha256"]) == 64


def test_plan_dependencies_add_referenced_steps() -> None:
    plan = {
        "steps": [
            {"id": 1, "tool": "a"},
            {"id": 2, "tool": "a", "args": {"x": "<step_1_result.y>"}, "depends_on": [1]},
            {"id": 3, "tool": "a", "check": [{"kind": "equals", "value": "<step_2_result>"}]},
            {"id": "bad"},
        ]
    }
    assert plan_dependencies(plan) == {1: [], 2: [1], 3: [2]}


def test_reopening_after_a_cut_line_starts_a_new_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"type":"run_started","run_id":"r","time":1.0,"segment":0}\n{"type":"ev', "utf-8"
    )
    writer = TraceWriter(path, "r", segment=1, clock=lambda: 2.0)
    writer.run_started("resume", None, {})
    writer.close()
    assert path.read_text(encoding="utf-8").splitlines()[1:] == [
        '{"type":"ev',
        '{"type":"run_started","run_id":"r","time":2.0,"segment":1,"command":"resume",'
        '"goal":null,"params":{}}',
    ]


@tool
def shout(text: str) -> str:
    """Return ``text`` in capitals."""
    return text.upper()


@tool
def broken(text: str) -> str:
    """Always fail."""
    raise ValueError(f"cannot take {text}")


def test_a_real_run_observed(tmp_path: Path) -> None:
    plan = {
        "steps": [
            {"id": 1, "tool": "shout", "args": {"text": "hi"}},
            {"id": 2, "tool": "shout", "args": {"text": "<step_1_result>!"}},
            {"id": 3, "tool": "broken", "args": {"text": "<step_1_result>"}},
            {"id": 4, "tool": "shout", "args": {"text": "<step_3_result>"}},
        ]
    }
    compiled = compile_plan(plan, Registry([shout, broken], BUILTIN_CHECKS))
    path = tmp_path / "run.jsonl"
    writer = TraceWriter(path, "real")
    writer.run_started("exec", None, {})
    writer.plan(1, compiled.plan, HASH, "stored")
    result = run_plan_sync(compiled, run_id="real", observers=[writer])
    writer.close()
    trace = load_trace(path)
    assert trace.status == result.status == "failed"
    assert {step_id: step.status for step_id, step in trace.steps.items()} == {
        1: "succeeded",
        2: "succeeded",
        3: "failed",
        4: "skipped",
    }
    assert trace.steps[2].result == "HI!"
    assert trace.steps[3].error == {"type": "ValueError", "message": "cannot take HI"}
    assert (trace.steps[4].reason, trace.steps[4].attempts) == ("upstream_failed", [])
    assert {step_id: step.depends_on for step_id, step in trace.steps.items()} == {
        1: [],
        2: [1],
        3: [1],
        4: [3],
    }
    assert trace.segments[0].critical_path == trace.critical_path()


@pytest.fixture
def sample(sample_writer: Callable[..., TraceWriter], tmp_path: Path) -> Path:
    path = tmp_path / "s.jsonl"
    sample_writer(path, "s")
    return path


def test_the_sample_fixture_writes_its_run_id(sample: Path) -> None:
    assert {record["run_id"] for record in lines(sample)} == {"s"}


def test_set_graph_gives_the_step_spans_their_parents(tmp_path: Path) -> None:
    import networkx as nx

    path = tmp_path / "t.jsonl"
    writer = TraceWriter(path, "r", clock=lambda: T)
    writer.set_graph(nx.DiGraph([(1, 3), (2, 3)]))
    records = {
        step_id: StepRecord(id=step_id, tool="echo", status="succeeded", ended_at=T)
        for step_id in (1, 2, 3)
    }
    records[3].duration_s = 1.0
    writer.run_finished(RunResult("r", "succeeded", records, started_at=T, ended_at=T))
    writer.close()
    assert [line["attrs"]["depends_on"] for line in lines(path)[:3]] == [[], [], [1, 2]]
    # steps without an attempt here were restored: they sit at the segment's start
    assert lines(path)[2]["attrs"]["restored"] is True
    assert lines(path)[3]["critical_path"] == [1, 3]  # ties go to the smaller parent


def test_a_replan_span_keeps_its_trigger_and_strategy(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    writer = TraceWriter(path, "run-r", clock=lambda: T)
    writer.run_started("run", "goal", {})
    writer.replan(1, failed=[2], pruned=[3], new_steps=[5, 6], version=2, start=T, end=T + 1)
    writer.replan(
        2,
        failed=[],
        pruned=[4],
        new_steps=[7],
        version=3,
        start=T + 2,
        end=T + 3,
        trigger="instruction",
        strategy="total",
        strategy_reason="a person's instruction changed the goal",
        withdrawn=[4],
    )
    writer.close()
    first, second = load_trace(path).replans
    assert (first.trigger, first.strategy, first.strategy_reason, first.withdrawn) == (
        "failure",
        "partial",
        "",
        [],
    )
    assert (second.trigger, second.strategy, second.strategy_reason, second.withdrawn) == (
        "instruction",
        "total",
        "a person's instruction changed the goal",
        [4],
    )


def test_a_dependency_down_is_an_event_line(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    writer = TraceWriter(path, "run-d", clock=lambda: T)
    writer.run_started("exec", "goal", {})
    writer(events.DependencyDown("run-d", "host", "127.0.0.1:8001", (1, 2, 3), "http_503: x", T))
    writer.close()
    assert load_trace(path).dependencies_down == [
        {
            "kind": "host",
            "name": "127.0.0.1:8001",
            "step_ids": [1, 2, 3],
            "detail": "http_503: x",
            "time": T,
        }
    ]


_SOURCES = [
    "/data/in/a.xml",
    "/data/in/token=abcdef123456.xml",
    "/data/in/Bearer abcdefghijklmnop1234.xml",
    "/data/in/sk-ant-abcdefgh12345678.xml",
    "/data/in/529.982.247-25 joao@example.com (11) 91234-5678.xml",
    "/data/in/52998224725.xml",
    "/data/in/env-secret-value-99.xml",
    "/data/in/" + "ç" * 200 + ".xml",
    "/data/in/b\\xff.xml",
]


@pytest.mark.parametrize("personal", [False, True])
def test_a_document_line_is_the_same_through_any_redactor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, personal: bool
) -> None:
    """The summary line masks the path through Redactor.text, without building the mapping
    it walks for any other redactor: the lines are the same."""
    from plandag.trace.redact import Redactor

    monkeypatch.setenv("PLANDAG_TEST_IN_TOKEN", "env-secret-value-99")
    redactor = Redactor(personal=personal)
    lines = []
    for name, redact in (("fast", redactor), ("general", lambda value: redactor(value))):
        writer = TraceWriter(tmp_path / f"{name}.jsonl", "r1", redact=redact, clock=lambda: 5.0)
        for index, source in enumerate(_SOURCES):
            record = {"status": "ok", "checks": {}, "errors": []}
            writer.document(index, source, "ok", record, 1.0, 2.0)
        writer.close()
        lines.append((tmp_path / f"{name}.jsonl").read_text(encoding="utf-8"))
    assert lines[0] == lines[1]
    shown = [json.loads(line)["attrs"]["detail"] for line in lines[0].splitlines()]
    assert shown[1] == "/data/in/token=[secret]"
    assert shown[6] == "/data/in/[secret].xml"
    assert ("[cpf]" in shown[4]) is personal
    assert all(len(line.encode("utf-8")) <= 1024 for line in lines[0].splitlines())


def test_a_step_end_and_its_span_go_to_the_file_in_one_write(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    writer = TraceWriter(path, "r", clock=lambda: T)
    assert writer._file is not None
    file = writer._file
    writes: list[str] = []

    class Counting:
        def write(self, text: str) -> int:
            writes.append(text)
            return file.write(text)

        def flush(self) -> None:
            file.flush()

        def close(self) -> None:
            file.close()

    writer._file = Counting()  # type: ignore[assignment]
    record = StepRecord(id=1, tool="echo", status="succeeded", started_at=T, ended_at=T + 1)
    writer(events.StepStarted("r", 1, "echo", 1, T))
    writer(events.StepSucceeded("r", 1, 1.0, T + 1, record=record))
    writer(events.StepSucceeded("r", 1, 1.0, T + 1))  # no record: the event alone
    writer.close()
    assert len(writes) == 3
    assert writes[1].count("\n") == 2
    kinds = [(line["type"], line["kind"]) for line in lines(path)]
    assert kinds == [
        ("event", "step_started"),
        ("event", "step_ended"),
        ("span", "step"),
        ("event", "step_ended"),
    ]
