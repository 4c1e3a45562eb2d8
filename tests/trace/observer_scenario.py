"""A run's events, fixed in every value and time, fed to a :class:`TraceWriter` as the
scheduler would feed them: steps that succeed with results of many shapes, fail, retry, are
cancelled, skipped, restored and superseded; results and errors holding credentials,
personal data, lone surrogates and values that are not JSON; an environment secret added
while the run goes. The lines written are compared with lines pinned in ``data/``."""

from __future__ import annotations

import dataclasses
import decimal
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from plandag.checks.base import CheckOutcome
from plandag.scheduler import events
from plandag.scheduler.result import AttemptRecord, RunResult, StepErrorInfo, StepRecord
from plandag.trace.writer import TraceWriter

T = 1_700_000_000.0
RUN = "run-obs"

#: An environment secret the run starts with, and one added while it goes.
SECRET_NAME, SECRET_VALUE = "OBSERVER_SCENARIO_API_KEY", "scenario-secret-4f9a1c"
LATE_NAME, LATE_VALUE = "OBSERVER_LATE_TOKEN", "late-secret-88d2e0b7"

_OPENAI = "sk-" + "a1B2c3D4e5F6g7H8i9J0k1L2"
_JWT = (
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
)


@dataclasses.dataclass
class Point:
    """A result that is no JSON value (a dataclass)."""

    x: int
    label: str


def _attempt(
    number: int,
    start: float,
    end: float | None,
    *,
    error: StepErrorInfo | None = None,
    reason: str | None = None,
    retry: str | None = None,
    children: Sequence[dict[str, Any]] = (),
) -> AttemptRecord:
    return AttemptRecord(
        number=number,
        started_at=start,
        ended_at=end,
        error=error,
        reason=reason,
        retry=retry,
        children=list(children),
    )


def _record(
    step_id: int,
    tool: str,
    status: str,
    start: float | None,
    end: float | None,
    *,
    result: Any = None,
    attempts: Sequence[AttemptRecord] = (),
    error: StepErrorInfo | None = None,
    reason: str | None = None,
    detail: str | None = None,
    checks: Sequence[CheckOutcome] = (),
) -> StepRecord:
    return StepRecord(
        id=step_id,
        tool=tool,
        status=status,  # type: ignore[arg-type]
        result=result,
        error=error,
        reason=reason,
        detail=detail,
        attempts=len(attempts),
        started_at=start,
        ended_at=end,
        duration_s=(end - start) if start is not None and end is not None else None,
        checks=list(checks),
        attempt_log=list(attempts),
    )


def steps() -> list[tuple[StepRecord, str, dict[str, Any]]]:
    """Every step of the run: its final record, how it ended, and the fields of its end
    event."""
    bearer = StepErrorInfo("HTTPStatusError", "401 for Authorization: Bearer abcDEF123456789xyz")
    timeout = StepErrorInfo("StepTimeoutError", "timed out after 2.0 s")
    made: list[tuple[StepRecord, str, dict[str, Any]]] = []
    made.append(
        (
            _record(
                1,
                "fetch",
                "succeeded",
                T + 1,
                T + 1.5,
                result={"status": 200, "body": "plain text", "items": [1, 2.5, True, None]},
                attempts=[_attempt(1, T + 1, T + 1.5)],
            ),
            "succeeded",
            {},
        )
    )
    made.append(
        (
            _record(
                2,
                "fetch",
                "failed",
                T + 2,
                T + 2.25,
                attempts=[_attempt(1, T + 2, T + 2.25, error=bearer, reason="tool_error")],
                error=bearer,
                reason="tool_error",
                detail="the tool raised",
            ),
            "failed",
            {"reason": "tool_error", "error": bearer},
        )
    )
    made.append(
        (
            _record(
                3,
                "summarize",
                "succeeded",
                T + 3,
                T + 4,
                result=f"key {SECRET_VALUE} and {_OPENAI} and token={_JWT}",
                attempts=[
                    _attempt(1, T + 3, T + 3.5, error=timeout, reason="timeout", retry="retried"),
                    _attempt(2, T + 3.6, T + 4),
                ],
                checks=[
                    CheckOutcome("regex", "pass", "matched"),
                    CheckOutcome("length", "not_applicable", ""),
                ],
            ),
            "succeeded",
            {},
        )
    )
    made.append(
        (
            _record(
                4,
                "lookup",
                "succeeded",
                T + 5,
                T + 5.5,
                result={
                    "dest": {
                        "CPF": "123.456.789-09",
                        "xNome": "Maria Silva",
                        "fone": "11912345678",
                    },
                    "contact": "maria@example.com, (11) 91234-5678, cpf 52998224725",
                    "emit": {"CNPJ": "11222333000181", "xNome": "Empresa SA"},
                    "password": "hunter22",
                    "headers": [["Authorization", "Basic dXNlcjpwYXNz"], ["Accept", "json"]],
                },
                attempts=[_attempt(1, T + 5, T + 5.5)],
            ),
            "succeeded",
            {},
        )
    )
    made.append(
        (
            _record(
                5,
                "nap",
                "cancelled",
                T + 6,
                T + 8,
                attempts=[_attempt(1, T + 6, T + 8, reason="deadline")],
                reason="deadline",
                detail="the run's deadline passed",
            ),
            "cancelled",
            {"reason": "deadline"},
        )
    )
    made.append(
        (
            _record(
                6,
                "write",
                "skipped",
                None,
                None,
                reason="upstream_failed",
                detail="upstream 2 failed",
            ),
            "skipped",
            {"reason": "upstream_failed", "detail": "upstream 2 failed"},
        )
    )
    made.append(
        (
            _record(
                7,
                "echo",
                "failed",
                T + 9,
                T + 9.5,
                result=["x", "r"],
                attempts=[_attempt(1, T + 9, T + 9.5, reason="check_failed")],
                error=StepErrorInfo("CheckFailedError", "equals: ['x', 'r'] != 'y'"),
                reason="check_failed",
                detail="a check failed",
                checks=[
                    CheckOutcome("not_empty", "pass", "3 items"),
                    CheckOutcome("equals", "fail", "['x', 'r'] != 'y' (password=opensesame1)"),
                ],
            ),
            "failed",
            {
                "reason": "check_failed",
                "error": StepErrorInfo("CheckFailedError", "equals: ['x', 'r'] != 'y'"),
            },
        )
    )
    made.append(
        (
            _record(
                8,
                f"tool-{LATE_VALUE}",
                "succeeded",
                T + 10,
                T + 10.5,
                result={"rows": [{"n": index, "text": "row " * 20} for index in range(60)]},
                attempts=[_attempt(1, T + 10, T + 10.5)],
            ),
            "succeeded",
            {},
        )
    )
    made.append(
        (
            _record(
                9,
                "odd\ud800tool",
                "succeeded",
                T + 11,
                T + 11.5,
                result={
                    "surrogate": "a\udcff b",
                    "nan": float("nan"),
                    "money": decimal.Decimal("12.50"),
                    "tags": {"b", "a"},
                    "raw": b"\x00\x01",
                    "point": Point(1, "p"),
                    "tuple": (1, "two"),
                    7: "an int key",
                },
                attempts=[_attempt(1, T + 11, T + 11.5)],
            ),
            "succeeded",
            {},
        )
    )
    made.append(
        (
            _record(
                10,
                "agent",
                "succeeded",
                T + 12,
                T + 13,
                result='done: ünïcödé ✓ "quoted" \\ back\nline',
                attempts=[
                    _attempt(
                        1,
                        T + 12,
                        T + 13,
                        children=[
                            {
                                "kind": "model_call",
                                "name": "anthropic:claude",
                                "start": T + 12.1,
                                "end": T + 12.4,
                                "attrs": {"input_tokens": 10, "api_key": "sk-ant-abcdefgh123"},
                            },
                            {"kind": "tool_call", "name": "search", "start": T + 12.5},
                        ],
                    )
                ],
            ),
            "succeeded",
            {},
        )
    )
    made.append(
        (
            _record(
                11,
                "password=hunter2tool",
                "succeeded",
                T + 14,
                T + 14.5,
                result=f"the late secret {LATE_VALUE} appears",
                attempts=[_attempt(1, T + 14, T + 14.5)],
            ),
            "succeeded",
            {},
        )
    )
    made.append(
        (
            _record(
                12,
                f"tool-{LATE_VALUE}",
                "succeeded",
                T + 15,
                float("inf"),
                result=12,
                attempts=[_attempt(1, T + 15, float("inf"))],
            ),
            "succeeded",
            {},
        )
    )
    made.append(
        (
            _record(
                13,
                "fetch",
                "succeeded",
                T + 16,
                T + 16.5,
                result=None,
                attempts=[_attempt(1, T + 16, T + 16.5)],
                detail="personal maria@example.com",
            ),
            "succeeded",
            {},
        )
    )
    return made


ARGS: dict[int, Any] = {
    1: {"url": "https://user:pw12345@example.com/x", "n": 3},
    3: {"text": "plain", "opts": {"depth": 2, "tags": ["a", "b"]}},
    4: {"query": "cpf 529.982.247-25", "token": "abcdefgh"},
    5: ("tuple", 1),
    7: {"expected": "y", "when": [1, 2]},
    12: {"seen": f"before {LATE_VALUE}", "n": 1},
    8: {"seen": f"before {LATE_VALUE}", "n": 1},
    13: {"nested": [[{"deep": [1, 2, {"x": "y"}]}]]},
}


def write_scenario(
    path: Path,
    redact: Callable[[Any], Any] | None,
    exporters: Sequence[Callable[[dict[str, Any]], None]] = (),
    effects: Callable[[int], str | None] = lambda step_id: None,
) -> None:
    """Write the scenario's lines to ``path`` through a fresh writer (``redact`` and
    ``exporters`` as given; ``effects``: what each step's ``StepStarted`` says of its
    effects, by step id). Sets and removes :data:`LATE_NAME` in ``os.environ`` while it
    runs; :data:`SECRET_NAME` is the caller's to set."""
    writer = TraceWriter(path, RUN, redact=redact, exporters=exporters, clock=lambda: T)
    writer.set_dependencies({1: [], 2: [1], 3: [1], 4: [3], 5: [], 6: [2], 7: [4, 5]})
    for step_id, args in ARGS.items():
        writer.step_args(step_id, args)
    made = steps()
    records: dict[int, StepRecord] = {}
    try:
        for record, ended, fields in made:
            if record.id == 11:
                os.environ[LATE_NAME] = LATE_VALUE
            for attempt in record.attempt_log:
                writer(
                    events.StepStarted(
                        RUN,
                        record.id,
                        record.tool,
                        attempt.number,
                        attempt.started_at,
                        effects(record.id),
                    )
                )
                if attempt.number == 1 and attempt.retry is not None:
                    writer(
                        events.StepRetrying(
                            RUN,
                            record.id,
                            1,
                            attempt.reason or "",
                            attempt.error,
                            0.1,
                            T,  # type: ignore[arg-type]
                        )
                    )
            time = record.ended_at if record.ended_at is not None else T + 20
            if ended == "succeeded":
                writer(events.StepSucceeded(RUN, record.id, 0.5, time, record.result, record))
            elif ended == "failed":
                writer(
                    events.StepFailed(
                        RUN, record.id, fields["reason"], fields["error"], time, record
                    )
                )
            elif ended == "cancelled":
                writer(events.StepCancelled(RUN, record.id, fields["reason"], time, record))
            else:
                writer(events.StepSkipped(RUN, record.id, fields["reason"], fields["detail"], time))
            records[record.id] = record
            if record.id == 4:
                writer(
                    events.Heartbeat(
                        RUN, 4.0, 13, 3, 1, 0, 0, 1, 8, 0.25, 30, (5,), ("nap",), T + 5.6
                    )
                )
                writer(
                    events.DependencyDown(
                        RUN, "host", "api.example.com", (5, 6), "token=abcdefghij refused", T + 5.7
                    )
                )
        writer(events.StepStarted(RUN, 14, "fetch", 1, float("nan"), effects(14)))
        # at the run's end: a step restored from an earlier segment, one superseded since
        records[15] = _record(15, "fetch", "succeeded", None, None, result={"kept": 1})
        records[2].superseded_by = [16]
        result = RunResult(RUN, "failed", records, started_at=T, ended_at=T + 30)
        writer(events.RunFinished(RUN, result, T + 30))
    finally:
        os.environ.pop(LATE_NAME, None)
        writer.close()
