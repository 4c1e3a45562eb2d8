"""The scheduler escapes lone surrogates (text UTF-8 cannot encode) in what a step makes
(its result, its error, its checks' messages, what it did inside) before anyone sees it:
later steps, observers and the record get the same escaped text, and the record's
``detail`` says so."""

from __future__ import annotations

from typing import Any

from plandag.checks import BUILTIN_CHECKS
from plandag.checks.base import CheckOutcome, check
from plandag.compiler import compile_plan
from plandag.scheduler import events, run_plan_sync
from plandag.surrogates import ESCAPED_NOTE
from plandag.tools.base import ToolContext, tool
from plandag.tools.registry import Registry


@tool
def lone(text: str) -> dict[str, Any]:
    """Return a value with lone surrogates in a value and in a key."""
    return {"value": text + "\ud800", "k\udcff": [text]}


@tool
def broken(text: str) -> str:
    """Fail with a lone surrogate in the message."""
    raise ValueError("cannot read " + text + "\udc80")


@tool
def inside(text: str, ctx: ToolContext) -> str:
    """Record something done inside whose attributes hold a lone surrogate."""
    ctx.add_child("tool_call", "read", 0.0, 0.0, args={"path": "\udcff"})
    return text


@check
def quotes(result: Any) -> CheckOutcome:
    """Fail, quoting a lone surrogate."""
    return CheckOutcome("quotes", "fail", "saw \ud83d")


def run(steps: list[dict[str, Any]], **options: Any) -> Any:
    seen: list[events.Event] = []
    registry = Registry([lone, broken, inside], [*BUILTIN_CHECKS, quotes])
    compiled = compile_plan({"steps": steps, "output": options.pop("output", None)}, registry)
    result = run_plan_sync(compiled, observers=[seen.append], **options)
    return result, seen


def test_a_result_is_escaped_for_the_next_step_the_observers_and_the_record() -> None:
    result, seen = run(
        [
            {"id": 1, "tool": "lone", "args": {"text": "x"}},
            {"id": 2, "tool": "lone", "args": {"text": "<step_1_result.value>"}},
            {"id": 3, "tool": "inside", "args": {"text": "y"}},
        ],
        output="<step_2_result.value>",
    )
    assert result.status == "succeeded"
    assert result.steps[1].result == {"value": "x\\ud800", "k\\xff": ["x"]}
    assert result.output == "x\\ud800\\ud800"
    assert [result.steps[i].detail for i in (1, 2, 3)] == [ESCAPED_NOTE] * 3
    succeeded = [event for event in seen if isinstance(event, events.StepSucceeded)]
    assert {event.step_id: event.result for event in succeeded}[1] == result.steps[1].result
    assert result.steps[3].attempt_log[0].children[0]["attrs"] == {"args": {"path": "\\xff"}}
    result.to_json_dict()  # nothing left that UTF-8 cannot encode
    assert "\\ud800" in str(result.to_json_dict())


def test_an_error_message_and_a_check_message_are_escaped() -> None:
    result, seen = run(
        [
            {"id": 1, "tool": "broken", "args": {"text": "x"}},
            {"id": 2, "tool": "inside", "args": {"text": "y"}, "check": [{"kind": "quotes"}]},
        ],
        retry=None,
    )
    failed, checked = result.steps[1], result.steps[2]
    assert failed.error is not None
    assert failed.error.message == "cannot read x\\x80"
    assert failed.attempt_log[0].error is not None
    assert failed.attempt_log[0].error.message == "cannot read x\\x80"
    assert failed.detail is not None
    assert failed.detail.endswith(ESCAPED_NOTE)
    assert "\udc80" not in failed.detail
    assert checked.checks[0].detail == "saw \\ud83d"
    assert checked.error is not None
    assert "saw \\ud83d" in checked.error.message
    evaluated = [event for event in seen if isinstance(event, events.CheckEvaluated)]
    assert evaluated[0].outcome.detail == "saw \\ud83d"
    for event in seen:
        if isinstance(event, events.StepFailed) and event.error is not None:
            event.error.message.encode("utf-8")
