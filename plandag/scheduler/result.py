"""What a run produces: a record per step and the run's outcome (ARCHITECTURE.md, "States
and exit codes").

Every step ends in exactly one terminal state:

* ``succeeded``: its tool returned and every check passed;
* ``failed``: its tool raised, ran past its timeout, or a check failed (``reason`` says which);
* ``skipped``: it never started (an upstream step failed, or the run was interrupted);
* ``cancelled``: it was running when the run was interrupted.

``pending`` and ``running`` only exist while the run goes on. :meth:`RunResult.to_json_dict`
is the stable JSON shape printed by ``plandag exec --json``.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel

from plandag.checks.base import CheckOutcome

__all__ = [
    "RunResult",
    "RunStatus",
    "StepErrorInfo",
    "StepRecord",
    "StepStatus",
    "to_jsonable",
]

StepStatus = Literal["pending", "running", "succeeded", "failed", "skipped", "cancelled"]
RunStatus = Literal[
    "succeeded",
    "failed",
    "gave_up",
    "timed_out",
    "budget_exceeded",
    "interrupted",
    "awaiting_approval",
    "rejected",
]

TERMINAL_STEP_STATUSES: frozenset[str] = frozenset({"succeeded", "failed", "skipped", "cancelled"})

_REPR_CHARACTERS = 200


@dataclasses.dataclass(frozen=True, slots=True)
class StepErrorInfo:
    """The error a failed step ended with.

    Attributes:
        type: the exception's class name (``ValueError``, ``StepTimeoutError``...).
        message: its message.
    """

    type: str
    message: str

    def as_dict(self) -> dict[str, str]:
        """``{"type", "message"}`` for JSON output."""
        return {"type": self.type, "message": self.message}


@dataclasses.dataclass(slots=True)
class StepRecord:
    """One step's record; the runner fills it in as the step goes.

    Attributes:
        id: the step's id.
        tool: the tool's name.
        status: see the module docstring.
        result: what the tool returned. Kept when the step failed only because a check
            failed (so a caller can still see what was checked); None otherwise on failure.
        error: the error of a failed step, else None.
        reason: a stable code for ``failed``, ``skipped`` and ``cancelled`` steps:
            ``tool_error``, ``timeout``, ``check_failed``, ``invalid_args``,
            ``reference_error``, ``write_outside_boundary``, ``upstream_failed``,
            ``interrupted``, or the ``reason`` of a :class:`plandag.errors.StepError`.
        detail: the same in words, e.g. ``"upstream 2 failed"``.
        attempts: how many attempts started (0 for a step that never ran).
        started_at: wall-clock time of the first attempt's start (seconds since the epoch),
            or None when it never started.
        ended_at: wall-clock time it reached its terminal state (seconds since the epoch).
        duration_s: seconds from start to end on the monotonic clock, or None when it never
            started.
        checks: the outcome of every check, in the plan's order (empty when the tool failed).
    """

    id: int
    tool: str
    status: StepStatus = "pending"
    result: Any = None
    error: StepErrorInfo | None = None
    reason: str | None = None
    detail: str | None = None
    attempts: int = 0
    started_at: float | None = None
    ended_at: float | None = None
    duration_s: float | None = None
    checks: list[CheckOutcome] = dataclasses.field(default_factory=list)

    def to_json_dict(self) -> dict[str, Any]:
        """The record as JSON-safe data (the result through :func:`to_jsonable`)."""
        return {
            "id": self.id,
            "tool": self.tool,
            "status": self.status,
            "result": to_jsonable(self.result),
            "error": self.error.as_dict() if self.error is not None else None,
            "reason": self.reason,
            "detail": self.detail,
            "attempts": self.attempts,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "duration_s": self.duration_s,
            "checks": [outcome.as_dict() for outcome in self.checks],
        }


@dataclasses.dataclass(slots=True, repr=False)
class RunResult:
    """The outcome of a run: its status and every step's record.

    Attributes:
        run_id: the run's id.
        status: ``succeeded`` when every step succeeded, ``failed`` when any step failed,
            ``interrupted`` when the run was cancelled from outside (other statuses belong to
            later features: budgets, deadlines, approval, replanning).
        steps: every step's record by id, each in exactly one terminal state.
        output: the plan's ``output`` with its references resolved, when every step it
            references succeeded; else None.
        started_at: wall-clock start, seconds since the epoch.
        ended_at: wall-clock end, seconds since the epoch.
        duration_s: seconds on the monotonic clock.
    """

    run_id: str
    status: RunStatus
    steps: dict[int, StepRecord]
    output: Any = None
    started_at: float = 0.0
    ended_at: float = 0.0
    duration_s: float = 0.0

    def __repr__(self) -> str:
        # Short on purpose: asyncio formats the main task's result into a repr when a loop
        # closes (CPython 3.11), and a full repr of a large run costs O(steps).
        counts: dict[str, int] = {}
        for record in self.steps.values():
            counts[record.status] = counts.get(record.status, 0) + 1
        summary = ", ".join(f"{status}={count}" for status, count in sorted(counts.items()))
        return f"RunResult(run_id={self.run_id!r}, status={self.status!r}, steps: {summary})"

    @property
    def succeeded(self) -> bool:
        """True when the run's status is ``succeeded``."""
        return self.status == "succeeded"

    def failed_steps(self) -> list[StepRecord]:
        """The records of failed steps, by id."""
        return [self.steps[key] for key in sorted(self.steps) if self.steps[key].status == "failed"]

    def to_json_dict(self) -> dict[str, Any]:
        """The run as JSON-safe data; the shape ``plandag exec --json`` prints (stable)::

            {"run_id", "status", "started_at", "ended_at", "duration_s", "output",
             "steps": [{"id", "tool", "status", "result", "error": {"type", "message"} | null,
                        "reason", "detail", "attempts", "started_at", "ended_at",
                        "duration_s", "checks": [{"kind", "status", "detail"}]}]}

        Steps are sorted by id.
        """
        return {
            "run_id": self.run_id,
            "status": self.status,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "duration_s": self.duration_s,
            "output": to_jsonable(self.output),
            "steps": [self.steps[key].to_json_dict() for key in sorted(self.steps)],
        }


def _truncated_repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception as error:  # a broken __repr__ must not break the JSON output
        text = f"<{type(value).__name__} (repr failed: {type(error).__name__})>"
    if len(text) > _REPR_CHARACTERS:
        return text[: _REPR_CHARACTERS - 1] + "…"
    return text


def to_jsonable(value: Any) -> Any:
    """``value`` made JSON-safe, for ``--json`` output and traces.

    * dicts (keys become strings), lists and tuples (become lists), str, int, float, bool and
      None pass through, recursively;
    * :class:`~decimal.Decimal` → its string (``"12.50"``, no precision lost);
    * bytes → ``{"bytes": length, "sha256": hex digest}``;
    * pydantic models → ``model_dump(mode="json")``; dataclass instances → their fields;
    * lxml elements → ``{"xml_element": tag}``;
    * sets → sorted lists; anything else → its ``repr``, cut to 200 characters.

    Never raises.
    """
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, Mapping):
        return {str(key): to_jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(item) for item in value]
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    if isinstance(value, BaseModel):
        try:
            return value.model_dump(mode="json")
        except Exception:
            return _truncated_repr(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            field.name: to_jsonable(getattr(value, field.name, None))
            for field in dataclasses.fields(value)
        }
    if isinstance(value, set | frozenset):
        return sorted((to_jsonable(item) for item in value), key=repr)
    if type(value).__module__.startswith("lxml"):
        from lxml import etree

        if isinstance(value, etree._Element):
            return {"xml_element": str(value.tag)}
    return _truncated_repr(value)
