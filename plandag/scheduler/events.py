"""Events a run sends to its observers (progress bars, traces).

An observer is a plain callable ``observer(event) -> None`` called on the event loop, in
order, as things happen. It should return quickly. An observer that raises never breaks the
run: the runner logs one warning for it and goes on — except a :class:`StartVeto` raised on
``StepStarted``, which fails that attempt before its tool is called.

Order within a run: ``RunStarted``; per step ``StepStarted`` then ``CheckEvaluated`` (one
per check), and for a failed attempt that will be tried again ``StepRetrying``, then
``StepStarted`` of the next attempt...; then one of ``StepSucceeded`` / ``StepFailed`` /
``StepCancelled``, or a single ``StepSkipped`` for a step that never started; finally
``RunFinished``. In a session (:mod:`plandag.scheduler.session`) ``StepsAdded`` comes
before the events of the steps it adds, ``StepSuperseded`` when a replan replaces an
ended step, and ``StepsDiscarded`` when the steps of a broken planner attempt leave the
run. ``DependencyDown`` follows the ``StepFailed`` that took a tool or host out of the
run. ``Heartbeat`` and ``Stall`` come in between, from a monitor task, every
``heartbeat_every`` seconds and when no step has finished for ``stall_after`` seconds. All
``time`` fields are wall-clock seconds since the epoch (from the run's clock).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from plandag.checks.base import CheckOutcome
from plandag.scheduler.result import RunResult, StepErrorInfo, StepRecord

__all__ = [
    "CheckEvaluated",
    "DependencyDown",
    "Event",
    "Heartbeat",
    "Observer",
    "RunFinished",
    "RunStarted",
    "Stall",
    "StartVeto",
    "StepCancelled",
    "StepFailed",
    "StepRetrying",
    "StepSkipped",
    "StepStarted",
    "StepSucceeded",
    "StepSuperseded",
    "StepsAdded",
    "StepsDiscarded",
]


_T = TypeVar("_T")


def _set_through_slots(cls: type[_T]) -> type[_T]:
    """Give a frozen, slotted dataclass an ``__init__`` that sets each field through its
    slot's descriptor: the one dataclasses writes calls ``object.__setattr__`` per field
    (frozen), about twice the cost of an event made once or twice per step. Everything else
    (fields, defaults, signature, repr, equality, hash, frozenness, ``replace``, pickling)
    stays the dataclass's own. Fields need a plain default or none (no default factory,
    no ``init=False``, no keyword-only field).

    Raises:
        TypeError: a field this does not handle.
    """
    namespace: dict[str, Any] = {}
    parameters: list[str] = []
    body: list[str] = []
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        name = field.name
        if not field.init or field.kw_only or field.default_factory is not dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{name}: only plain fields are set through slots")
        if field.default is dataclasses.MISSING:
            parameters.append(name)
        else:
            namespace[f"_default_{name}"] = field.default
            parameters.append(f"{name}=_default_{name}")
        namespace[f"_set_{name}"] = getattr(cls, name).__set__
        body.append(f"    _set_{name}(self, {name})")
    source = f"def __init__(self, {', '.join(parameters)}):\n" + "\n".join(body) + "\n"
    exec(source, namespace)  # the way dataclasses makes its own __init__
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


class StartVeto(Exception):
    """Raised by an observer on :class:`StepStarted` to keep the attempt's tool from being
    called: the attempt fails with ``error`` (a run store that cannot durably record that a
    step with effects starts raises it with a :class:`~plandag.errors.NotStartedError`, which
    the retry policy may retry since nothing ran). Raised on any other event it is logged and
    ignored like any observer error."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


@dataclasses.dataclass(frozen=True, slots=True)
class RunStarted:
    """A run began. ``step_count``: how many steps the plan has."""

    run_id: str
    step_count: int
    time: float


@_set_through_slots
@dataclasses.dataclass(frozen=True, slots=True)
class StepStarted:
    """A step's attempt began running (after it acquired its concurrency limits).
    ``effects``: its tool's effects (``none``, ``write`` or ``irreversible``; the runner
    always says), None when the sender did not say (observers then treat the step as one
    with effects)."""

    run_id: str
    step_id: int
    tool: str
    attempt: int
    time: float
    effects: str | None = None


@_set_through_slots
@dataclasses.dataclass(frozen=True, slots=True)
class StepSucceeded:
    """A step's tool returned and every check passed. ``duration_s``: monotonic seconds;
    ``result``: what the tool returned (a reference, not a copy: observers must not change
    it; the run store records it for resume); ``record``: the step's record, complete as
    the step ended (the same object: observers read it, never change it; a later replan
    may still mark it superseded), or None."""

    run_id: str
    step_id: int
    duration_s: float
    time: float
    result: Any = dataclasses.field(default=None, repr=False, compare=False)
    record: StepRecord | None = dataclasses.field(default=None, repr=False, compare=False)


@_set_through_slots
@dataclasses.dataclass(frozen=True, slots=True)
class StepFailed:
    """A step failed. ``reason``: the stable code; ``error``: type and message;
    ``record``: the step's record as it ended (as for :class:`StepSucceeded`), or None."""

    run_id: str
    step_id: int
    reason: str
    error: StepErrorInfo | None
    time: float
    record: StepRecord | None = dataclasses.field(default=None, repr=False, compare=False)


@_set_through_slots
@dataclasses.dataclass(frozen=True, slots=True)
class StepRetrying:
    """Attempt ``attempt`` of a step failed transiently; the next starts in ``delay_s``
    seconds. ``reason`` and ``error``: the failed attempt's."""

    run_id: str
    step_id: int
    attempt: int
    reason: str
    error: StepErrorInfo
    delay_s: float
    time: float


@_set_through_slots
@dataclasses.dataclass(frozen=True, slots=True)
class StepSkipped:
    """A step will never start: ``reason`` ``upstream_failed`` (``detail`` names the failed
    upstream steps), ``budget``, ``deadline``, ``stalled`` or ``interrupted``."""

    run_id: str
    step_id: int
    reason: str
    detail: str
    time: float


@_set_through_slots
@dataclasses.dataclass(frozen=True, slots=True)
class StepCancelled:
    """A running step was stopped: ``reason`` ``deadline``, ``stalled`` or ``interrupted``;
    ``record``: the step's record as it ended (as for :class:`StepSucceeded`), or None."""

    run_id: str
    step_id: int
    reason: str
    time: float
    record: StepRecord | None = dataclasses.field(default=None, repr=False, compare=False)


@_set_through_slots
@dataclasses.dataclass(frozen=True, slots=True)
class CheckEvaluated:
    """One check of a step was evaluated on its result."""

    run_id: str
    step_id: int
    outcome: CheckOutcome
    time: float


@dataclasses.dataclass(frozen=True, slots=True)
class StepsAdded:
    """Steps joined a running session (a streamed step, or a replan's patch); ``step_ids``
    in the order they were compiled (a topological order)."""

    run_id: str
    step_ids: tuple[int, ...]
    time: float


@dataclasses.dataclass(frozen=True, slots=True)
class StepSuperseded:
    """An ended step (failed, skipped or cancelled) was replaced by a replan's steps
    ``superseded_by``; its record keeps its status and no longer fails the run."""

    run_id: str
    step_id: int
    superseded_by: tuple[int, ...]
    time: float


@dataclasses.dataclass(frozen=True, slots=True)
class DependencyDown:
    """The circuit breaker took a dependency out of the run
    (:mod:`plandag.scheduler.breaker`): ``kind`` ``tool`` or ``host``, its ``name``, the
    steps that failed in a row (``step_ids``) and the last failure (``detail``). Sent right
    after the ``StepFailed`` that opened it; steps needing it fail from now on without an
    attempt (reason ``dependency_down``)."""

    run_id: str
    kind: str
    name: str
    step_ids: tuple[int, ...]
    detail: str
    time: float


@dataclasses.dataclass(frozen=True, slots=True)
class StepsDiscarded:
    """Steps left a running session whole: the planner's attempt that wrote them broke off
    mid-stream (its running steps were cancelled first, with reason ``discarded``). Their
    records and results are gone; a later step may reuse an id."""

    run_id: str
    step_ids: tuple[int, ...]
    time: float


@dataclasses.dataclass(frozen=True, slots=True)
class RunFinished:
    """The run ended; ``result`` is the complete :class:`RunResult`."""

    run_id: str
    result: RunResult
    time: float


@dataclasses.dataclass(frozen=True, slots=True)
class Heartbeat:
    """Where a run is, sent every ``heartbeat_every`` seconds while it runs.

    Attributes:
        run_id: the run's id.
        elapsed_s: seconds since the run started (monotonic).
        total: steps in the plan.
        succeeded, failed, skipped, cancelled: steps in each terminal state.
        running: steps running (between their first attempt's start and their end,
            backoff waits included).
        pending: steps not started yet (waiting for parents or a concurrency limit).
        spent_usd: US dollars settled so far; spent_tokens: tokens settled so far.
        running_steps: ids of the running steps, sorted.
        running_tools: their tools' names, in the same order.
        time: wall-clock time, seconds since the epoch.
    """

    run_id: str
    elapsed_s: float
    total: int
    succeeded: int
    failed: int
    skipped: int
    cancelled: int
    running: int
    pending: int
    spent_usd: float
    spent_tokens: int
    running_steps: tuple[int, ...]
    running_tools: tuple[str, ...]
    time: float

    @property
    def done(self) -> int:
        """Steps in a terminal state."""
        return self.succeeded + self.failed + self.skipped + self.cancelled


@dataclasses.dataclass(frozen=True, slots=True)
class Stall:
    """No step has finished for ``idle_s`` seconds (>= the run's ``stall_after``).

    Sent once per stall: again only after some step has finished. ``stopping`` is True when
    the run stops because of it (``stop_on_stall``): running steps end ``cancelled`` and
    steps not started ``skipped``, both with reason ``stalled``, and the run ``timed_out``.

    Attributes:
        run_id: the run's id.
        elapsed_s: seconds since the run started.
        idle_s: seconds since a step last finished (or since the run started).
        running_steps: ids of the steps running, sorted; running_tools: their tools.
        stopping: the run stops now.
        time: wall-clock time, seconds since the epoch.
    """

    run_id: str
    elapsed_s: float
    idle_s: float
    running_steps: tuple[int, ...]
    running_tools: tuple[str, ...]
    stopping: bool
    time: float


Event = (
    RunStarted
    | StepStarted
    | StepSucceeded
    | StepFailed
    | StepRetrying
    | StepSkipped
    | StepCancelled
    | CheckEvaluated
    | StepsAdded
    | StepSuperseded
    | DependencyDown
    | StepsDiscarded
    | Heartbeat
    | Stall
    | RunFinished
)
"""Any event a run emits."""

Observer = Callable[[Event], None]
"""``observer(event) -> None``, called on the event loop for every event of a run."""
