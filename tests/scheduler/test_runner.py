"""The event-driven runner: concurrency, limits, timeouts, failure isolation, checks, events."""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest

from plandag.checks import BUILTIN_CHECKS
from plandag.compiler import CompiledPlan, compile_plan
from plandag.errors import PermanentStepError
from plandag.scheduler import RunResult, events, run_plan, run_plan_sync
from plandag.tools.base import Tool, ToolContext, tool
from plandag.tools.boundary import WriteBoundary
from plandag.tools.registry import Registry

TERMINAL = {"succeeded", "failed", "skipped", "cancelled"}


@tool
async def nap(seconds: float, value: Any = None) -> Any:
    """Sleep ``seconds`` on the event loop, then return ``value``."""
    await anyio.sleep(seconds)
    return value


@tool
async def echo(value: Any) -> Any:
    """Return ``value``."""
    return value


@tool
def fail(message: str = "boom") -> Any:
    """Raise ValueError(message)."""
    raise ValueError(message)


def compiled(steps: list[dict[str, Any]], *tools: Tool, **options: Any) -> CompiledPlan:
    output = options.pop("output", None)
    registry = Registry([nap, echo, fail, *tools], BUILTIN_CHECKS)
    plan: dict[str, Any] = {"steps": steps}
    if output is not None:
        plan["output"] = output
    return compile_plan(plan, registry, **options)


def assert_all_terminal(result: RunResult) -> None:
    assert all(record.status in TERMINAL for record in result.steps.values())


# -- concurrency ---------------------------------------------------------------------------


def test_independent_steps_overlap() -> None:
    plan = compiled(
        [
            {"id": 1, "tool": "nap", "args": {"seconds": 0.2, "value": 1}},
            {"id": 2, "tool": "nap", "args": {"seconds": 0.2, "value": 2}},
        ]
    )
    result = run_plan_sync(plan)
    first, second = result.steps[1], result.steps[2]
    assert result.status == "succeeded"
    assert (first.result, second.result) == (1, 2)
    assert first.started_at is not None
    assert second.started_at is not None
    assert first.ended_at is not None
    assert second.ended_at is not None
    assert first.started_at < second.ended_at
    assert second.started_at < first.ended_at
    assert result.duration_s < 0.35


def test_child_starts_when_its_last_parent_ends() -> None:
    plan = compiled(
        [
            {"id": 1, "tool": "nap", "args": {"seconds": 0.05, "value": "a"}},
            {"id": 2, "tool": "nap", "args": {"seconds": 0.2, "value": "b"}},
            {
                "id": 3,
                "tool": "echo",
                "args": {"value": ["<step_1_result>", "<step_2_result>"]},
                "depends_on": [1, 2],
            },
        ]
    )
    result = run_plan_sync(plan)
    child, last_parent = result.steps[3], result.steps[2]
    assert child.result == ["a", "b"]
    assert child.started_at is not None
    assert last_parent.ended_at is not None
    assert 0 <= child.started_at - last_parent.ended_at < 0.02


def test_chain_records_attempts_and_times() -> None:
    plan = compiled(
        [
            {"id": 1, "tool": "echo", "args": {"value": 1}},
            {"id": 2, "tool": "echo", "args": {"value": "<step_1_result>"}, "depends_on": [1]},
        ]
    )
    result = run_plan_sync(plan, run_id="r1")
    assert result.run_id == "r1"
    for record in result.steps.values():
        assert record.attempts == 1
        assert record.error is None
        assert record.reason is None
        assert record.duration_s is not None
        assert record.duration_s >= 0
    assert result.steps[1].ended_at is not None
    assert result.steps[2].started_at is not None
    assert result.steps[1].ended_at <= result.steps[2].started_at


# -- failure isolation ---------------------------------------------------------------------


def test_failure_beside_a_slow_step() -> None:
    plan = compiled(
        [
            {"id": 1, "tool": "nap", "args": {"seconds": 0.2, "value": 10}},
            {"id": 2, "tool": "fail", "args": {"message": "bad input"}},
            {"id": 3, "tool": "echo", "args": {"value": "<step_1_result>"}, "depends_on": [1]},
            {"id": 4, "tool": "echo", "args": {"value": "<step_2_result>"}, "depends_on": [2]},
            {"id": 5, "tool": "echo", "args": {"value": "<step_4_result>"}, "depends_on": [4]},
        ]
    )
    result = run_plan_sync(plan)
    steps = result.steps
    assert result.status == "failed"
    assert [steps[i].status for i in range(1, 6)] == [
        "succeeded",
        "failed",
        "succeeded",
        "skipped",
        "skipped",
    ]
    assert steps[3].result == 10
    assert steps[2].error is not None
    assert (steps[2].error.type, steps[2].error.message) == ("ValueError", "bad input")
    assert steps[2].reason == "tool_error"
    assert steps[2].detail == "ValueError: bad input"
    for skipped in (4, 5):
        assert steps[skipped].reason == "upstream_failed"
        assert steps[skipped].detail == "upstream 2 failed"
        assert steps[skipped].attempts == 0
        assert steps[skipped].started_at is None
    assert [record.id for record in result.failed_steps()] == [2]
    assert_all_terminal(result)


def test_skip_detail_names_every_failed_upstream() -> None:
    plan = compiled(
        [
            {"id": 1, "tool": "echo", "args": {"value": 1}},
            {"id": 2, "tool": "fail", "args": {}},
            {"id": 3, "tool": "echo", "args": {"value": "<step_2_result>"}, "depends_on": [2]},
            {"id": 4, "tool": "nap", "args": {"seconds": 0.02}},
            {"id": 5, "tool": "fail", "args": {}, "depends_on": [4]},
            {
                "id": 6,
                "tool": "echo",
                "args": {"value": ["<step_3_result>", "<step_5_result>", "<step_1_result>"]},
                "depends_on": [1, 3, 5],
            },
        ]
    )
    result = run_plan_sync(plan)
    assert result.steps[3].detail == "upstream 2 failed"
    assert result.steps[6].status == "skipped"
    assert result.steps[6].detail == "upstream 2, 5 failed"
    assert_all_terminal(result)


def test_step_error_reason_is_kept() -> None:
    @tool
    def missing(name: str) -> str:
        raise PermanentStepError(f"no record named {name}", reason="not_found")

    result = run_plan_sync(compiled([{"id": 1, "tool": "missing", "args": {"name": "x"}}], missing))
    record = result.steps[1]
    assert record.reason == "not_found"
    assert record.error is not None
    assert (record.error.type, record.error.message) == (
        "PermanentStepError",
        "no record named x",
    )


def test_invalid_args_at_run_time() -> None:
    @tool
    def double(x: int) -> int:
        return 2 * x

    plan = compiled(
        [
            {"id": 1, "tool": "echo", "args": {"value": "not a number"}},
            {"id": 2, "tool": "double", "args": {"x": "<step_1_result>"}, "depends_on": [1]},
        ],
        double,
    )
    record = run_plan_sync(plan).steps[2]
    assert record.status == "failed"
    assert record.reason == "invalid_args"
    assert record.error is not None
    assert record.error.type == "ValidationError"
    assert record.detail is not None
    assert record.detail.startswith("invalid arguments: x: Input should be a valid integer")


def test_reference_error_at_run_time() -> None:
    plan = compiled(
        [
            {"id": 1, "tool": "echo", "args": {"value": {"a": 1}}},
            {"id": 2, "tool": "echo", "args": {"value": "<step_1_result.b>"}, "depends_on": [1]},
        ]
    )
    record = run_plan_sync(plan).steps[2]
    assert record.status == "failed"
    assert record.reason == "reference_error"
    assert record.error is not None
    assert record.error.message == "<step_1_result.b>: no key 'b' (keys: a)"


# -- timeouts ------------------------------------------------------------------------------


def test_blocking_sync_tool_times_out() -> None:
    release = threading.Event()

    @tool(timeout=0.2)
    def block() -> str:
        release.wait(5)  # a blocking call the event loop cannot interrupt
        return "late"

    plan = compiled(
        [
            {"id": 1, "tool": "block", "args": {}},
            {"id": 2, "tool": "echo", "args": {"value": "<step_1_result>"}, "depends_on": [1]},
            {"id": 3, "tool": "nap", "args": {"seconds": 0.05, "value": "ok"}},
        ],
        block,
    )
    started = time.perf_counter()
    try:
        result = run_plan_sync(plan)
    finally:
        release.set()
    assert time.perf_counter() - started < 2
    record = result.steps[1]
    assert record.status == "failed"
    assert record.reason == "timeout"
    assert record.result is None
    assert record.error is not None
    assert record.error.type == "StepTimeoutError"
    assert record.error.message == (
        "step 1: tool block did not finish within its timeout of 0.2 s; a late result is discarded"
    )
    assert record.duration_s is not None
    assert 0.19 < record.duration_s < 1
    assert result.steps[2].detail == "upstream 1 failed"
    assert result.steps[3].result == "ok"


def test_timeout_counts_from_the_start_not_the_wait() -> None:
    @tool(timeout=0.15, max_concurrency=1)
    async def slowish(value: int) -> int:
        await anyio.sleep(0.1)
        return value

    plan = compiled(
        [{"id": i, "tool": "slowish", "args": {"value": i}} for i in (1, 2, 3)], slowish
    )
    result = run_plan_sync(plan)
    assert result.status == "succeeded"
    assert result.duration_s > 0.3  # each waited its turn; none timed out


# -- limits --------------------------------------------------------------------------------


def _concurrency_probe(**options: Any) -> tuple[Tool, list[int]]:
    running = [0]
    peaks: list[int] = []

    @tool(**options)
    async def probe(value: int) -> int:
        running[0] += 1
        peaks.append(running[0])
        await anyio.sleep(0.03)
        running[0] -= 1
        return value

    return probe, peaks


def test_global_limit_serialises() -> None:
    probe, peaks = _concurrency_probe()
    plan = compiled([{"id": i, "tool": "probe", "args": {"value": i}} for i in range(1, 5)], probe)
    result = run_plan_sync(plan, max_concurrency=1)
    assert result.status == "succeeded"
    assert max(peaks) == 1
    ordered = sorted(result.steps.values(), key=lambda record: record.started_at or 0)
    for earlier, later in itertools.pairwise(ordered):
        assert earlier.ended_at is not None
        assert later.started_at is not None
        assert earlier.ended_at <= later.started_at


def test_per_tool_limit_and_override() -> None:
    probe, peaks = _concurrency_probe(max_concurrency=2)
    steps = [{"id": i, "tool": "probe", "args": {"value": i}} for i in range(1, 7)]
    steps.append({"id": 7, "tool": "nap", "args": {"seconds": 0.05}})
    plan = compiled(steps, probe)
    assert run_plan_sync(plan).status == "succeeded"
    assert max(peaks) == 2
    peaks.clear()
    assert run_plan_sync(plan, tool_limits={"probe": 1}).status == "succeeded"
    assert max(peaks) == 1


def test_limits_below_one_are_refused() -> None:
    plan = compiled([{"id": 1, "tool": "echo", "args": {"value": 1}}])
    with pytest.raises(ValueError, match="max_concurrency must be >= 1"):
        run_plan_sync(plan, max_concurrency=0)
    with pytest.raises(ValueError, match=r"tool_limits\['echo'\] must be >= 1"):
        run_plan_sync(plan, tool_limits={"echo": 0})


# -- kinds of tools and the context --------------------------------------------------------


def test_async_thread_and_inline_tools() -> None:
    loop_thread: list[int] = []

    @tool
    async def where_async() -> int:
        loop_thread.append(threading.get_ident())
        return threading.get_ident()

    @tool
    def where_thread() -> int:
        return threading.get_ident()

    @tool(inline=True)
    def where_inline() -> int:
        return threading.get_ident()

    plan = compiled(
        [
            {"id": 1, "tool": "where_async", "args": {}},
            {"id": 2, "tool": "where_thread", "args": {}},
            {"id": 3, "tool": "where_inline", "args": {}},
        ],
        where_async,
        where_thread,
        where_inline,
    )
    result = run_plan_sync(plan)
    assert result.status == "succeeded"
    assert result.steps[1].result == loop_thread[0]
    assert result.steps[3].result == loop_thread[0]
    assert result.steps[2].result != loop_thread[0]


def test_tool_context() -> None:
    @tool
    def who(ctx: ToolContext) -> list[Any]:
        return [ctx.run_id, ctx.step_id, ctx.attempt, ctx.idempotency_key]

    plan = compiled([{"id": 7, "tool": "who", "args": {}}], who)
    assert run_plan_sync(plan, run_id="run-x").steps[7].result == ["run-x", 7, 1, "run-x:7"]


# -- references ----------------------------------------------------------------------------


def test_typed_references() -> None:
    plan = compiled(
        [
            {"id": 1, "tool": "echo", "args": {"value": {"items": [1, 2, 3], "name": "nf"}}},
            {
                "id": 2,
                "tool": "echo",
                "args": {"value": "<step_1_result.items>"},
                "depends_on": [1],
            },
            {
                "id": 3,
                "tool": "echo",
                "args": {
                    "value": {
                        "text": "doc <step_1_result.name> has <step_1_result.items> at $1 ${1}",
                        "nested": [{"first": "<step_2_result.0>"}],
                        "count": "<step_1_result.items.2>",
                    }
                },
                "depends_on": [1, 2],
            },
        ],
        output={"items": "<step_2_result>", "summary": "<step_3_result.text>"},
    )
    result = run_plan_sync(plan)
    assert result.steps[2].result == [1, 2, 3]
    assert result.steps[3].result == {
        "text": "doc nf has [1,2,3] at $1 ${1}",
        "nested": [{"first": 1}],
        "count": 3,
    }
    assert result.output == {"items": [1, 2, 3], "summary": "doc nf has [1,2,3] at $1 ${1}"}


def test_params_are_resolved() -> None:
    plan = compile_plan(
        {
            "params": {"who": {"type": "string"}},
            "steps": [{"id": 1, "tool": "echo", "args": {"value": "hello <param.who>"}}],
            "output": "<step_1_result>",
        },
        Registry([echo], BUILTIN_CHECKS),
        params={"who": "world"},
    )
    assert run_plan_sync(plan).output == "hello world"


def test_output_is_none_when_its_step_failed() -> None:
    plan = compiled(
        [{"id": 1, "tool": "fail", "args": {}}, {"id": 2, "tool": "echo", "args": {"value": 2}}],
        output="<step_1_result>",
    )
    result = run_plan_sync(plan)
    assert result.output is None
    assert result.steps[2].status == "succeeded"


# -- checks --------------------------------------------------------------------------------


def test_failed_check_fails_the_step_and_keeps_the_result() -> None:
    plan = compiled(
        [
            {
                "id": 1,
                "tool": "echo",
                "args": {"value": {"code": "12a"}},
                "check": [
                    {"kind": "not_empty", "path": "code"},
                    {"kind": "regex", "path": "code", "pattern": "[0-9]+"},
                ],
            },
            {"id": 2, "tool": "echo", "args": {"value": "<step_1_result>"}, "depends_on": [1]},
        ]
    )
    result = run_plan_sync(plan)
    record = result.steps[1]
    assert record.status == "failed"
    assert record.reason == "check_failed"
    assert record.result == {"code": "12a"}
    assert record.error is not None
    assert record.error.type == "CheckFailedError"
    assert record.error.message == (
        "check regex failed: the value at `code` \"12a\" does not fully match '[0-9]+'"
    )
    assert [(outcome.kind, outcome.status) for outcome in record.checks] == [
        ("not_empty", "pass"),
        ("regex", "fail"),
    ]
    assert result.steps[2].detail == "upstream 1 failed"


def test_several_failed_checks_are_all_named() -> None:
    plan = compiled(
        [
            {
                "id": 1,
                "tool": "echo",
                "args": {"value": {"a": 1}},
                "check": [
                    {"kind": "equals", "path": "a", "value": 2},
                    {"kind": "jmespath", "expr": "b"},
                ],
            }
        ]
    )
    record = run_plan_sync(plan).steps[1]
    assert record.error is not None
    assert record.error.message == (
        "check equals, jmespath failed: equals: the value at `a` is 1, expected 2; "
        "jmespath: `b` is null, which is false"
    )


def test_check_args_with_references() -> None:
    plan = compiled(
        [
            {"id": 1, "tool": "echo", "args": {"value": {"total": "10.00"}}},
            {
                "id": 2,
                "tool": "echo",
                "args": {"value": {"items": ["4.00", "6.00"]}},
                "depends_on": [1],
                "check": [
                    {
                        "kind": "tolerance",
                        "actual": "items",
                        "expected_value": "<step_1_result.total>",
                    },
                    {"kind": "equals", "path": "items[0]", "value": "4.00"},
                ],
            },
        ]
    )
    result = run_plan_sync(plan)
    assert result.status == "succeeded"
    assert [outcome.status for outcome in result.steps[2].checks] == ["pass", "pass"]
    assert result.steps[2].checks[0].detail == (
        "actual `items` = 10.00, expected value = 10.00, difference 0.00 <= tolerance 0.01"
    )


# -- write boundary ------------------------------------------------------------------------


def test_write_boundary_checked_after_resolution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.chdir(out)
    calls: list[str] = []

    @tool(effects="write", writes="path")
    def save(path: str, text: str) -> str:
        calls.append(path)
        Path(path).write_text(text)
        return path

    plan = compiled(
        [
            {"id": 1, "tool": "echo", "args": {"value": "../escape.txt"}},
            {"id": 2, "tool": "save", "args": {"path": "<step_1_result>", "text": "x"}},
            {"id": 3, "tool": "save", "args": {"path": "inside.txt", "text": "y"}},
        ],
        save,
        write_boundary=WriteBoundary([out], base=out),
    )
    result = run_plan_sync(plan, approve="auto")
    record = result.steps[2]
    assert record.status == "failed"
    assert record.reason == "write_outside_boundary"
    assert record.error is not None
    assert record.error.type == "BoundaryError"
    assert "'../escape.txt'" in record.error.message
    assert calls == ["inside.txt"]
    assert not (tmp_path / "escape.txt").exists()
    assert (out / "inside.txt").read_text() == "y"


# -- observers -----------------------------------------------------------------------------


def test_observer_events_in_order() -> None:
    seen: list[events.Event] = []
    plan = compiled(
        [
            {"id": 1, "tool": "echo", "args": {"value": 1}, "check": [{"kind": "not_empty"}]},
            {"id": 2, "tool": "fail", "args": {}, "depends_on": [1]},
            {"id": 3, "tool": "echo", "args": {"value": 3}, "depends_on": [2]},
        ]
    )
    result = run_plan_sync(plan, run_id="obs", observers=[seen.append])
    summary = [(type(event).__name__, getattr(event, "step_id", None)) for event in seen]
    assert summary == [
        ("RunStarted", None),
        ("StepStarted", 1),
        ("CheckEvaluated", 1),
        ("StepSucceeded", 1),
        ("StepStarted", 2),
        ("StepFailed", 2),
        ("StepSkipped", 3),
        ("RunFinished", None),
    ]
    assert all(event.run_id == "obs" for event in seen)
    assert seen[0] == events.RunStarted("obs", 3, seen[0].time)
    failed = seen[5]
    assert isinstance(failed, events.StepFailed)
    assert failed.reason == "tool_error"
    skipped = seen[6]
    assert isinstance(skipped, events.StepSkipped)
    assert (skipped.reason, skipped.detail) == ("upstream_failed", "upstream 2 failed")
    finished = seen[-1]
    assert isinstance(finished, events.RunFinished)
    assert finished.result is result


def test_observer_that_raises_does_not_break_the_run(caplog: pytest.LogCaptureFixture) -> None:
    def broken(event: events.Event) -> None:
        raise RuntimeError("observer bug")

    seen: list[events.Event] = []
    plan = compiled(
        [
            {"id": 1, "tool": "echo", "args": {"value": 1}},
            {"id": 2, "tool": "echo", "args": {"value": "<step_1_result>"}, "depends_on": [1]},
        ]
    )
    with caplog.at_level(logging.WARNING, logger="plandag.scheduler"):
        result = run_plan_sync(plan, observers=[broken, seen.append])
    assert result.status == "succeeded"
    assert len(seen) == 6
    warnings = [r for r in caplog.records if r.name == "plandag.scheduler"]
    assert len(warnings) == 1
    assert "raised on RunStarted" in warnings[0].getMessage()


# -- the result as JSON --------------------------------------------------------------------


def test_run_result_json_round_trip() -> None:
    @tool
    def odd() -> dict[str, Any]:
        return {"amount": Decimal("12.50"), "raw": b"abc", 3: (1, 2)}

    plan = compiled(
        [
            {"id": 1, "tool": "odd", "args": {}},
            {"id": 2, "tool": "fail", "args": {}},
            {"id": 3, "tool": "echo", "args": {"value": "<step_2_result>"}, "depends_on": [2]},
        ],
        odd,
    )
    result = run_plan_sync(plan, run_id="json")
    data = result.to_json_dict()
    assert json.loads(json.dumps(data)) == data
    assert list(data) == [
        "run_id",
        "status",
        "started_at",
        "ended_at",
        "duration_s",
        "output",
        "spent_usd",
        "spent_tokens",
        "stop_reason",
        "first_tool_start_s",
        "escalation",
        "escalation_detail",
        "dependencies_down",
        "usage_over_reservation",
        "steps",
    ]
    assert [step["id"] for step in data["steps"]] == [1, 2, 3]
    first = data["steps"][0]
    assert first["result"] == {
        "amount": "12.50",
        "raw": {
            "bytes": 3,
            "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
        },
        "3": [1, 2],
    }
    assert data["steps"][1]["error"] == {"type": "ValueError", "message": "boom"}
    assert data["steps"][2] == {
        "id": 3,
        "tool": "echo",
        "status": "skipped",
        "result": None,
        "error": None,
        "reason": "upstream_failed",
        "detail": "upstream 2 failed",
        "attempts": 0,
        "started_at": None,
        "ended_at": result.steps[3].ended_at,
        "duration_s": None,
        "checks": [],
        "attempt_log": [],
        "superseded_by": None,
        "tainted": False,
    }


# -- outside cancellation ------------------------------------------------------------------


@pytest.mark.anyio
async def test_outside_cancellation_gives_a_complete_result() -> None:
    release = threading.Event()

    @tool
    def block_thread() -> str:
        release.wait(5)
        return "late"

    plan = compiled(
        [
            {"id": 1, "tool": "nap", "args": {"seconds": 10}},
            {"id": 2, "tool": "echo", "args": {"value": "<step_1_result>"}, "depends_on": [1]},
            {"id": 3, "tool": "echo", "args": {"value": 3}},
            {"id": 4, "tool": "block_thread", "args": {}},
        ],
        block_thread,
    )
    seen: list[events.Event] = []
    started = time.perf_counter()
    try:
        with anyio.move_on_after(0.2):
            result = await run_plan(plan, observers=[seen.append])
    finally:
        release.set()
    assert time.perf_counter() - started < 1
    assert result.status == "interrupted"
    steps = result.steps
    assert [steps[i].status for i in (1, 2, 3, 4)] == [
        "cancelled",
        "skipped",
        "succeeded",
        "cancelled",
    ]
    assert steps[1].reason == steps[2].reason == steps[4].reason == "interrupted"
    assert steps[1].detail == "the run was interrupted while this step was running"
    assert steps[2].detail == "the run was interrupted before this step started"
    assert isinstance(seen[-1], events.RunFinished)
    assert {type(event).__name__ for event in seen} >= {"StepCancelled", "StepSkipped"}


@pytest.mark.anyio
async def test_steps_waiting_for_a_limit_are_skipped_when_interrupted() -> None:
    plan = compiled([{"id": i, "tool": "nap", "args": {"seconds": 10}} for i in (1, 2)])
    with anyio.move_on_after(0.05):
        result = await run_plan(plan, max_concurrency=1)
    # Which of the two ready steps takes the one slot is the event loop's choice (trio
    # randomises task order): one ran and was cancelled, the other never started.
    ran = [step for step in result.steps.values() if step.attempts]
    waited = [step for step in result.steps.values() if not step.attempts]
    assert [step.status for step in ran] == ["cancelled"]
    assert [(step.status, step.reason) for step in waited] == [("skipped", "interrupted")]


def test_empty_plan_succeeds() -> None:
    result = run_plan_sync(compiled([]))
    assert result.succeeded
    assert result.steps == {}
    assert result.output is None
