"""diff_traces: plan changes (by id, then by tool and args) and outcome changes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from plandag.scheduler.result import AttemptRecord, RunResult, StepRecord
from plandag.trace.diff import PlanChange, StepOutcome, diff_traces, render_diff
from plandag.trace.model import Trace
from plandag.trace.reader import load_trace
from plandag.trace.writer import TraceWriter

T = 1_700_000_000.0

Outcome = tuple[str, float, float, Any]  # status, start offset, duration, result


def write(
    path: Path,
    run_id: str,
    steps: list[dict[str, Any]],
    outcomes: dict[int, Outcome],
    status: str,
    spent_usd: float,
) -> Trace:
    writer = TraceWriter(path, run_id, clock=lambda: T)
    writer.run_started("exec", None, {})
    writer.plan(1, {"steps": steps}, "00" * 32, "stored")
    tools = {step["id"]: step["tool"] for step in steps}
    records = {
        step_id: StepRecord(
            id=step_id,
            tool=tools[step_id],
            status=step_status,  # type: ignore[arg-type]
            result=result,
            started_at=T + offset,
            ended_at=T + offset + duration,
            duration_s=duration,
        )
        for step_id, (step_status, offset, duration, result) in outcomes.items()
    }
    first = records[min(records)]  # the run's spend is its steps' attempts' spend
    first.attempt_log = [AttemptRecord(number=1, started_at=T, ended_at=T, cost_usd=spent_usd)]
    end = max(record.ended_at or T for record in records.values())
    writer.run_finished(
        RunResult(run_id, status, records, started_at=T, ended_at=end, spent_usd=spent_usd)  # type: ignore[arg-type]
    )
    writer.close()
    return load_trace(path)


def traces(tmp_path: Path) -> tuple[Trace, Trace]:
    a = write(
        tmp_path / "a.jsonl",
        "run-a",
        [
            {"id": 1, "tool": "echo", "args": {"value": "a"}},
            {"id": 2, "tool": "echo", "args": {"value": "b"}},
            {"id": 3, "tool": "echo", "args": {"value": "c"}},
            {"id": 6, "tool": "nap", "args": {"seconds": 1}},
            {"id": 7, "tool": "gone", "args": {}},
        ],
        {
            1: ("succeeded", 0, 1.0, "a"),
            2: ("succeeded", 1, 1.0, "b"),
            3: ("succeeded", 1, 2.0, "c"),
            6: ("succeeded", 0, 1.0, None),
            7: ("failed", 0, 1.0, None),
        },
        "failed",
        0.5,
    )
    b = write(
        tmp_path / "b.jsonl",
        "run-b",
        [
            {"id": 1, "tool": "echo", "args": {"value": "a"}},
            {"id": 2, "tool": "echo", "args": {"value": "B"}},
            {"id": 4, "tool": "echo", "args": {"value": "c"}},
            {"id": 5, "tool": "fetch", "args": {"url": "u"}},
            {"id": 6, "tool": "nap", "args": {"seconds": 1}, "depends_on": [1]},
        ],
        {
            1: ("succeeded", 0, 1.0, "a"),
            2: ("failed", 1, 2.0, None),
            4: ("succeeded", 1, 1.0, "c"),
            5: ("succeeded", 0, 1.0, "page"),
            6: ("succeeded", 1, 1.0, None),
        },
        "succeeded",
        0.25,
    )
    return a, b


def test_plan_changes_and_outcomes(tmp_path: Path) -> None:
    diff = diff_traces(*traces(tmp_path))
    assert (diff.run_a, diff.run_b, diff.status) == ("run-a", "run-b", ("failed", "succeeded"))
    assert (diff.duration_s, diff.duration_ratio) == ((3.0, 3.0), 1.0)
    assert (diff.cost_usd, diff.tokens) == ((0.5, 0.25), (0, 0))
    assert diff.plan_changes == (
        PlanChange("changed", 2, 2, "echo", {"args": [{"value": "b"}, {"value": "B"}]}),
        PlanChange("moved", 3, 4, "echo"),
        PlanChange("changed", 6, 6, "nap", {"depends_on": [[], [1]]}),
        PlanChange("removed", 7, None, "gone"),
        PlanChange("added", None, 5, "fetch"),
    )
    assert diff.outcomes == (
        StepOutcome(1, 1, "echo", "succeeded", "succeeded", 1.0, 1.0, 1.0, False),
        StepOutcome(2, 2, "echo", "succeeded", "failed", 1.0, 2.0, 2.0, True),
        StepOutcome(3, 4, "echo", "succeeded", "succeeded", 2.0, 1.0, 0.5, False),
        StepOutcome(6, 6, "nap", "succeeded", "succeeded", 1.0, 1.0, 1.0, False),
    )
    document = diff.to_json_dict()
    assert document["same_plan"] is False
    assert document["plan_changes"][1] == {
        "kind": "moved",
        "a_id": 3,
        "b_id": 4,
        "tool": "echo",
        "fields": {},
    }
    assert document["outcomes"][1]["status_changed"] is True


def test_a_run_against_itself(tmp_path: Path) -> None:
    a, _ = traces(tmp_path)
    diff = diff_traces(a, a)
    assert diff.same_plan
    assert all(
        not outcome.status_changed and not outcome.result_changed for outcome in diff.outcomes
    )
    console = Console(record=True, width=100, color_system=None)
    render_diff(diff, console)
    text = console.export_text()
    assert "plans: the same steps" in text
    assert "outcomes: 5 matched step(s), none changed" in text


def test_render(tmp_path: Path) -> None:
    console = Console(record=True, width=120, color_system=None)
    render_diff(diff_traces(*traces(tmp_path)), console)
    lines = [line.rstrip() for line in console.export_text().splitlines()]
    assert "plans: 5 step change(s)" in lines
    assert "  ~ step 2 echo" in lines
    assert '      args: {"value":"b"} → {"value":"B"}' in lines
    assert "  ~ step 3 → 4 echo (renumbered)" in lines
    assert "  - step 7 gone" in lines
    assert "  + step 5 fetch" in lines
    changed = [
        [cell.strip() for cell in line.split("│")]
        for line in lines
        if line.lstrip().startswith(("2 ", "3→4 "))
    ]
    assert changed == [
        ["2", "echo", "succeeded", "failed", "1.00 s", "2.00 s (×2.00)", "changed"],
        ["3→4", "echo", "succeeded", "succeeded", "2.00 s", "1.00 s (×0.50)", "same"],
    ]


def test_the_same_steps_on_other_params_are_told_apart(tmp_path: Path) -> None:
    def run(name: str, value: str) -> Trace:
        writer = TraceWriter(tmp_path / f"{name}.jsonl", name, clock=lambda: T)
        writer.run_started("exec", None, {"input": value, "same": 1})
        writer.plan(1, {"steps": [{"id": 1, "tool": "echo", "args": {}}]}, "00" * 32, "stored")
        writer.close()
        return load_trace(tmp_path / f"{name}.jsonl")

    diff = diff_traces(run("a", "jan.xml"), run("b", "feb.xml"))
    assert diff.same_plan
    assert diff.param_changes == (("input", "jan.xml", "feb.xml"),)
    assert diff.to_json_dict()["param_changes"] == [["input", "jan.xml", "feb.xml"]]
    console = Console(record=True, width=100)
    render_diff(diff, console)
    assert 'param input: "jan.xml" → "feb.xml"' in console.export_text()


def test_timing_noise_of_fast_steps_is_not_shown(tmp_path: Path) -> None:
    steps = [{"id": 1, "tool": "echo", "args": {}}, {"id": 2, "tool": "nap", "args": {}}]
    a = write(
        tmp_path / "a.jsonl",
        "run-a",
        steps,
        {1: ("succeeded", 0, 0.001, "x"), 2: ("succeeded", 0, 1.0, "y")},
        "succeeded",
        0.0,
    )
    b = write(
        tmp_path / "b.jsonl",
        "run-b",
        steps,
        {1: ("succeeded", 0, 0.003, "x"), 2: ("succeeded", 0, 2.0, "y")},
        "succeeded",
        0.0,
    )
    console = Console(record=True, width=120, color_system=None)
    render_diff(diff_traces(a, b), console)
    rows = [
        line.split("│")[0].strip()
        for line in console.export_text().splitlines()
        if "│" in line and line.split("│")[0].strip().isdigit()
    ]
    assert rows == ["2"]  # x3 on 1 ms is noise; x2 on a second is not
