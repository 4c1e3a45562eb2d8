"""RunResult, StepRecord and to_jsonable: the stable JSON shape of a run."""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal
from typing import Any

from lxml import etree
from pydantic import BaseModel

import plandag.scheduler
from plandag.checks import CheckOutcome
from plandag.scheduler import RunResult, StepRecord, to_jsonable
from plandag.scheduler.result import StepErrorInfo


def test_package_exports() -> None:
    assert plandag.scheduler.__all__ == sorted(plandag.scheduler.__all__)
    assert all(hasattr(plandag.scheduler, name) for name in plandag.scheduler.__all__)
    assert {"run_plan", "run_plan_sync", "RunResult", "StepRecord", "events"} <= set(
        plandag.scheduler.__all__
    )


def test_plain_values_pass_through() -> None:
    value = {"a": [1, 2.5, True, None, "x"], "b": {"c": []}}
    assert to_jsonable(value) == value


def test_special_values() -> None:
    class Item(BaseModel):
        price: Decimal
        name: str

    @dataclasses.dataclass
    class Pair:
        left: int
        right: bytes

    class Opaque:
        def __repr__(self) -> str:
            return "O" * 500

    element = etree.fromstring(b"<root xmlns='urn:x'><a/></root>")
    assert to_jsonable(Decimal("12.50")) == "12.50"
    assert to_jsonable(b"") == {
        "bytes": 0,
        "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    }
    assert to_jsonable(Item(price=Decimal("1.10"), name="n")) == {"price": "1.10", "name": "n"}
    assert to_jsonable(Pair(1, b"a"))["left"] == 1
    assert to_jsonable(element) == {"xml_element": "{urn:x}root"}
    assert to_jsonable({1: (1, 2), "s": {3, 1}}) == {"1": [1, 2], "s": [1, 3]}
    assert to_jsonable(Opaque()) == "O" * 199 + "…"


def _record(step_id: int, **fields: Any) -> StepRecord:
    return StepRecord(id=step_id, tool="t", **fields)


def test_run_result_helpers_and_json() -> None:
    result = RunResult(
        run_id="r",
        status="failed",
        steps={
            2: _record(
                2,
                status="failed",
                result={"x": Decimal("1")},
                error=StepErrorInfo("CheckFailedError", "check equals failed: no"),
                reason="check_failed",
                detail="check equals failed: no",
                attempts=1,
                started_at=1.0,
                ended_at=2.0,
                duration_s=1.0,
                checks=[CheckOutcome("equals", "fail", "no")],
            ),
            1: _record(1, status="succeeded", result=1, attempts=1),
        },
        output=None,
        started_at=1.0,
        ended_at=3.0,
        duration_s=2.0,
    )
    assert not result.succeeded
    assert [record.id for record in result.failed_steps()] == [2]
    data = result.to_json_dict()
    assert json.loads(json.dumps(data)) == data
    assert [step["id"] for step in data["steps"]] == [1, 2]
    assert data["steps"][1] == {
        "id": 2,
        "tool": "t",
        "status": "failed",
        "result": {"x": "1"},
        "error": {"type": "CheckFailedError", "message": "check equals failed: no"},
        "reason": "check_failed",
        "detail": "check equals failed: no",
        "attempts": 1,
        "started_at": 1.0,
        "ended_at": 2.0,
        "duration_s": 1.0,
        "checks": [{"kind": "equals", "status": "fail", "detail": "no"}],
        "attempt_log": [],
        "superseded_by": None,
        "tainted": False,
    }


def test_repr_is_short() -> None:
    steps = {i: _record(i, status="succeeded") for i in range(1, 1001)}
    steps[7].status = "failed"
    result = RunResult(run_id="r", status="failed", steps=steps)
    assert repr(result) == "RunResult(run_id='r', status='failed', steps: failed=1, succeeded=999)"
