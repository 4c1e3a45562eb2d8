"""Events a run sends to its observers (progress bars, traces).

An observer is a plain callable ``observer(event) -> None`` called on the event loop, in
order, as things happen. It should return quickly. An observer that raises never breaks the
run: the runner logs one warning for it and goes on.

Order within a run: ``RunStarted``; per step ``StepStarted`` then ``CheckEvaluated`` (one
per check) then one of ``StepSucceeded`` / ``StepFailed`` / ``StepCancelled``, or a single
``StepSkipped`` for a step that never started; finally ``RunFinished``. All ``time`` fields
are wall-clock seconds since the epoch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from plandag.checks.base import CheckOutcome
from plandag.scheduler.result import RunResult, StepErrorInfo

__all__ = [
    "CheckEvaluated",
    "Event",
    "Observer",
    "RunFinished",
    "RunStarted",
    "StepCancelled",
    "StepFailed",
    "StepSkipped",
    "StepStarted",
    "StepSucceeded",
]


@dataclasses.dataclass(frozen=True, slots=True)
class RunStarted:
    """A run began. ``step_count``: how many steps the plan has."""

    run_id: str
    step_count: int
    time: float


@dataclasses.dataclass(frozen=True, slots=True)
class StepStarted:
    """A step's attempt began running (after it acquired its concurrency limits)."""

    run_id: str
    step_id: int
    tool: str
    attempt: int
    time: float


@dataclasses.dataclass(frozen=True, slots=True)
class StepSucceeded:
    """A step's tool returned and every check passed. ``duration_s``: monotonic seconds."""

    run_id: str
    step_id: int
    duration_s: float
    time: float


@dataclasses.dataclass(frozen=True, slots=True)
class StepFailed:
    """A step failed. ``reason``: the stable code; ``error``: type and message."""

    run_id: str
    step_id: int
    reason: str
    error: StepErrorInfo | None
    time: float


@dataclasses.dataclass(frozen=True, slots=True)
class StepSkipped:
    """A step will never start: ``reason`` ``upstream_failed`` (``detail`` names the failed
    upstream steps) or ``interrupted``."""

    run_id: str
    step_id: int
    reason: str
    detail: str
    time: float


@dataclasses.dataclass(frozen=True, slots=True)
class StepCancelled:
    """A running step was stopped because the run was interrupted (``reason``)."""

    run_id: str
    step_id: int
    reason: str
    time: float


@dataclasses.dataclass(frozen=True, slots=True)
class CheckEvaluated:
    """One check of a step was evaluated on its result."""

    run_id: str
    step_id: int
    outcome: CheckOutcome
    time: float


@dataclasses.dataclass(frozen=True, slots=True)
class RunFinished:
    """The run ended; ``result`` is the complete :class:`RunResult`."""

    run_id: str
    result: RunResult
    time: float


Event = (
    RunStarted
    | StepStarted
    | StepSucceeded
    | StepFailed
    | StepSkipped
    | StepCancelled
    | CheckEvaluated
    | RunFinished
)
"""Any event a run emits."""

Observer = Callable[[Event], None]
"""``observer(event) -> None``, called on the event loop for every event of a run."""
