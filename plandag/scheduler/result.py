"""What a run produces: a record per step and the run's outcome (ARCHITECTURE.md, "States
and exit codes").

Every step ends in exactly one terminal state:

* ``succeeded``: its tool returned and every check passed;
* ``failed``: its tool raised, ran past its timeout, or a check failed (``reason`` says which),
  and no retry was allowed (``detail`` says why);
* ``skipped``: it never started: an upstream step failed (``upstream_failed``), the cost cap
  left no room for it (``budget``), the run hit its deadline (``deadline``) or stalled
  (``stalled``), or was interrupted (``interrupted``);
* ``cancelled``: it was running when the run stopped (``deadline``, ``stalled``,
  ``interrupted``).

``pending`` and ``running`` only exist while the run goes on. :meth:`RunResult.to_json_dict`
is the stable JSON shape printed by ``plandag exec --json``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel

from plandag.checks.base import CheckOutcome
from plandag.scheduler.breaker import DownDependency

__all__ = [
    "ESCALATION_MODES",
    "ESCALATION_REASONS",
    "AttemptRecord",
    "EscalationMode",
    "RunResult",
    "RunStatus",
    "StepErrorInfo",
    "StepRecord",
    "StepStatus",
    "jsonable_result",
    "jsonable_result_text",
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
    "escalated",
    "abandoned",
]

ESCALATION_REASONS: frozenset[str] = frozenset(
    {
        "replan_caps",  # the replan caps were hit (max replans, or no progress)
        "plan_budget",  # spend or time passed its multiple of the plan's estimate
        "blocked_intent",  # the same intent failed N times across replans
        "no_valid_replan",  # the repairs produced no plan that compiles, in a started run
        "unknown_outcome",  # an irreversible step's outcome is unknown on resume
        "superseded_unknown",  # a superseded step with effects whose outcome is unknown
    }
)
"""Why a run ends ``escalated`` (handed to a person, ARCHITECTURE.md "States")."""

EscalationMode = Literal["person", "never"]
"""What a run does when it cannot go on by itself (its replan caps, a plan-relative budget,
a blocked intent, no valid replan, an unknown irreversible outcome): ``person`` (the
default) ends it ``escalated`` (exit 5), handed to a person with its full context (the
inbox, the escalation hook); ``never`` ends it ``gave_up`` (exit 1), as a run without
anyone to hand it to (CLI ``--escalate``, setting ``escalate``)."""

ESCALATION_MODES: tuple[str, ...] = ("person", "never")
"""The values of :data:`EscalationMode`, in the order the CLI lists them."""

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
class AttemptRecord:
    """One attempt of a step.

    Attributes:
        number: 1 for the first attempt, 2 for the first retry...
        started_at: wall-clock start, seconds since the epoch.
        ended_at: wall-clock end, seconds since the epoch (None while it runs).
        error: the error it ended with (for an exception group, the real leaf), or None.
        reason: ``None`` when it succeeded; else the failure's reason code (as on
            :class:`StepRecord`), or ``deadline`` / ``stalled`` / ``interrupted`` when it
            was cancelled.
        kind: ``transient`` or ``permanent`` for a failed attempt, else None.
        retry: what followed a failure: ``"retried"``, or why not (a
            :data:`plandag.brakes.retry.StopReason`, ``budget`` when the cost cap
            left no room for another attempt, ``dependency_down`` when the step's tool or
            host went down meanwhile); None for a success or a cancellation.
        delay_before_s: seconds waited before it started (0.0 for the first attempt).
        cost_usd: US dollars charged for it (reported, else the tool's estimate when the
            run had a cost cap, else 0.0).
        tokens: tokens charged for it, likewise.
        children: what the attempt did inside, in order (``ToolContext.add_child``: the
            model calls of an ``llm`` step, an ``agent``'s model and tool calls), each
            ``{"kind", "name", "start", "end", "attrs"}``; the trace shows them as child
            spans of the step.
    """

    number: int
    started_at: float
    ended_at: float | None = None
    error: StepErrorInfo | None = None
    reason: str | None = None
    kind: str | None = None
    retry: str | None = None
    delay_before_s: float = 0.0
    cost_usd: float = 0.0
    tokens: int = 0
    children: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def to_json_dict(self) -> dict[str, Any]:
        """The attempt as JSON-safe data (``children`` only when it has some)."""
        data = {
            "number": self.number,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "error": self.error.as_dict() if self.error is not None else None,
            "reason": self.reason,
            "kind": self.kind,
            "retry": self.retry,
            "delay_before_s": self.delay_before_s,
            "cost_usd": self.cost_usd,
            "tokens": self.tokens,
        }
        if self.children:
            data["children"] = to_jsonable(self.children)
        return data


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
            ``dependency_down`` (failed without an attempt: its tool or host is down),
            ``replanned`` (skipped: a replan withdrew it before it started),
            ``budget``, ``deadline``, ``stalled``, ``interrupted``, or the ``reason`` of a
            :class:`plandag.errors.StepError`.
        detail: the same in words, e.g. ``"upstream 2 failed"``.
        attempts: how many attempts started (0 for a step that never ran).
        attempt_log: every attempt, in order (see :class:`AttemptRecord`).
        started_at: wall-clock time of the first attempt's start (seconds since the epoch),
            or None when it never started.
        ended_at: wall-clock time it reached its terminal state (seconds since the epoch).
        duration_s: seconds from start to end on the monotonic clock, or None when it never
            started.
        checks: the outcome of every check, in the plan's order (empty when the tool failed).
        superseded_by: for a ``failed``, ``skipped`` or ``cancelled`` step that a replan
            replaced (:meth:`plandag.scheduler.session.RunSession.supersede`), the ids of
            the steps that replace it, sorted; None otherwise. The record keeps its status
            and error; a superseded step no longer fails the run (ARCHITECTURE.md,
            "States and exit codes").
        tainted: the result came from outside, or was computed from such a result
            (ARCHITECTURE.md, "Untrusted content"): an HTTP body, a file this run did not
            write, what a step made of them. Set when the step succeeds.
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
    attempt_log: list[AttemptRecord] = dataclasses.field(default_factory=list)
    superseded_by: list[int] | None = None
    tainted: bool = False

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
            "attempt_log": [attempt.to_json_dict() for attempt in self.attempt_log],
            "superseded_by": list(self.superseded_by) if self.superseded_by is not None else None,
            "tainted": self.tainted,
        }


@dataclasses.dataclass(slots=True, repr=False)
class RunResult:
    """The outcome of a run: its status and every step's record.

    Attributes:
        run_id: the run's id.
        status: the first that applies of: ``interrupted`` (cancelled from outside);
            ``escalated`` (handed to a person: see ``escalation``); ``timed_out`` (the
            wall-clock cap was reached, or the run stopped on a stall);
            ``budget_exceeded`` (a step or a retry was not started for lack of budget);
            ``succeeded`` (every step succeeded, or failed and was superseded by a
            replan); ``gave_up`` (a session's planner gave up: replan caps); ``failed``.
        steps: every step's record by id, each in exactly one terminal state.
        output: the plan's ``output`` with its references resolved, when every step it
            references succeeded; else None.
        started_at: wall-clock start, seconds since the epoch.
        ended_at: wall-clock end, seconds since the epoch.
        duration_s: seconds on the monotonic clock.
        spent_usd: US dollars charged over every attempt (see
            :class:`AttemptRecord`.cost_usd).
        spent_tokens: tokens charged over every attempt.
        stop_reason: what stopped the run before its steps were done: ``deadline``,
            ``stalled``, ``budget`` or ``interrupted``; None when it ran to the end.
        first_tool_start_s: seconds from the run's start (a session's opening) to the
            first attempt of any step (wall clock), None when no step started: the "time
            to first tool", with and without streaming.
        escalation: when ``status`` is ``escalated``, why (one of
            :data:`ESCALATION_REASONS`); else None.
        escalation_detail: a sentence for the person who gets the case; else None.
        dependencies_down: the tools and HTTP hosts the circuit breaker took out of the run
            (:mod:`plandag.scheduler.breaker`), in the order they went down.
        usage_over_reservation: when a provider reported more than a call had reserved,
            the worst ratio seen (reported ÷ reserved, > 1; later calls were counted at it
            and the spend may pass the cap, within the bound of
            :mod:`plandag.brakes.budget`); None when every settlement stayed within its
            reservation. A run sharing a batch's budget reports the batch's.
    """

    run_id: str
    status: RunStatus
    steps: dict[int, StepRecord]
    output: Any = None
    started_at: float = 0.0
    ended_at: float = 0.0
    duration_s: float = 0.0
    spent_usd: float = 0.0
    spent_tokens: int = 0
    stop_reason: str | None = None
    first_tool_start_s: float | None = None
    escalation: str | None = None
    escalation_detail: str | None = None
    dependencies_down: tuple[DownDependency, ...] = ()
    usage_over_reservation: float | None = None

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

    def step_ids(self, status: StepStatus) -> list[int]:
        """The ids of the steps in ``status``, sorted. After a deadline:
        ``succeeded``/``failed`` finished, ``cancelled`` were running, ``skipped`` never
        started."""
        return sorted(key for key, record in self.steps.items() if record.status == status)

    def progress(self) -> dict[str, list[int]]:
        """Where the run got to: ``{"finished", "running", "not_started"}``, each a sorted
        list of step ids. ``finished``: succeeded or failed; ``running``: cancelled while
        running; ``not_started``: skipped."""
        groups: dict[str, list[int]] = {"finished": [], "running": [], "not_started": []}
        names = {
            "succeeded": "finished",
            "failed": "finished",
            "cancelled": "running",
            "skipped": "not_started",
        }
        for key in sorted(self.steps):
            group = names.get(self.steps[key].status)
            if group is not None:
                groups[group].append(key)
        return groups

    def to_json_dict(self) -> dict[str, Any]:
        """The run as JSON-safe data; the shape ``plandag exec --json`` prints (stable)::

            {"run_id", "status", "started_at", "ended_at", "duration_s", "output",
             "spent_usd", "spent_tokens", "stop_reason", "first_tool_start_s",
             "escalation", "escalation_detail",
             "dependencies_down": [{"kind", "name", "steps", "detail", "time"}],
             "usage_over_reservation",
             "steps": [{"id", "tool", "status", "result", "error": {"type", "message"} | null,
                        "reason", "detail", "attempts", "started_at", "ended_at",
                        "duration_s", "checks": [{"kind", "status", "detail"}],
                        "attempt_log": [{"number", "started_at", "ended_at", "error",
                                         "reason", "kind", "retry", "delay_before_s",
                                         "cost_usd", "tokens"}],
                        "superseded_by": [int] | null}]}

        Steps are sorted by id.
        """
        return {
            "run_id": self.run_id,
            "status": self.status,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "duration_s": self.duration_s,
            "output": to_jsonable(self.output),
            "spent_usd": self.spent_usd,
            "spent_tokens": self.spent_tokens,
            "stop_reason": self.stop_reason,
            "first_tool_start_s": self.first_tool_start_s,
            "escalation": self.escalation,
            "escalation_detail": self.escalation_detail,
            "dependencies_down": [down.as_dict() for down in self.dependencies_down],
            "usage_over_reservation": self.usage_over_reservation,
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


_JSONABLE_NODES = 1_000_000
"""The most values :func:`to_jsonable` converts; past it the rest is cut (see below)."""
_JSONABLE_DEPTH = 200
"""Containers nested deeper than this become ``"<too deep>"`` (no RecursionError)."""


def to_jsonable(value: Any) -> Any:
    """``value`` made JSON-safe, for ``--json`` output and traces.

    * dicts (keys become strings), lists and tuples (become lists), str, int, bool and None
      pass through, recursively; floats too, except NaN and ±Infinity, which strict JSON
      lacks: they become the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``;
    * :class:`~decimal.Decimal` → its string (``"12.50"``, no precision lost);
    * bytes → ``{"bytes": length, "sha256": hex digest}``;
    * pydantic models → ``model_dump(mode="json")``; dataclass instances → their fields;
    * lxml elements → ``{"xml_element": tag}``;
    * sets → sorted lists; anything else → its ``repr``, cut to 200 characters;
    * a container that holds itself → ``"<cycle>"``; past one million values in all (a
      result built by sharing references can be exponentially large once written out)
      every further value becomes ``"<truncated>"``; containers nested more than 200 deep
      become ``"<too deep>"``.

    Never raises.
    """
    budget = [_JSONABLE_NODES]
    return _jsonable(value, budget, set())


_RESULTS_KEPT = 64
_results_lock = threading.Lock()
_results: OrderedDict[int, list[Any]] = OrderedDict()
_NOT_ENCODED: Any = object()
_encode_compact = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False
).encode
"""``json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)``, with
its encoder made once."""


def jsonable_result(value: Any) -> Any:
    """:func:`to_jsonable` of a step's result, converted once for all who record it.

    The trace writer and the run store both record a step's result as it ends; the second
    to ask gets the first one's conversion. The last 64 results converted are remembered
    by identity (each kept alive while remembered, so its ``id`` is its own). A result is
    not to be changed once its step ended (observers share it,
    :class:`~plandag.scheduler.events.StepSucceeded`); one changed later anyway is
    recorded as it was when it was first converted.

    Args:
        value: a step's result (any object).

    Returns:
        The JSON-safe value (shared: callers must not change it). Never raises.
    """
    if type(value) in _PLAIN:
        return value
    return _remembered(value)[1]


def jsonable_result_text(value: Any) -> tuple[Any, str | None]:
    """:func:`jsonable_result` of a step's result and its compact JSON text, encoded once
    for all who record it (the run store and the trace write the same text).

    Args:
        value: a step's result (any object).

    Returns:
        ``(jsonable_result(value), text)``: ``text`` is ``json.dumps(converted,
        ensure_ascii=False, separators=(",", ":"), allow_nan=False)``, shared like the
        conversion; None when ``value`` is a ``str``, ``int``, ``bool`` or None (returned as
        it is, not remembered: each caller encodes it) or when the conversion cannot be
        written so (NaN or an infinity a pydantic model gave, an int too long for
        ``str``). Never raises.
    """
    if type(value) in _PLAIN:
        return value, None
    entry = _remembered(value)
    text = entry[2]
    if text is _NOT_ENCODED:
        try:
            text = _encode_compact(entry[1])
        except (TypeError, ValueError):
            text = None
        entry[2] = text  # two threads may both encode: the same text either way
    return entry[1], text


def _remembered(value: Any) -> list[Any]:
    """The cache entry ``[value, to_jsonable(value), text or _NOT_ENCODED]`` of a result
    (made when it is not remembered)."""
    key = id(value)
    with _results_lock:
        remembered = _results.get(key)
        if remembered is not None and remembered[0] is value:
            _results.move_to_end(key)
            return remembered
    entry = [value, to_jsonable(value), _NOT_ENCODED]
    with _results_lock:
        _results[key] = entry
        if len(_results) > _RESULTS_KEPT:
            _results.popitem(last=False)
    return entry


_PLAIN = frozenset({str, int, bool, type(None)})
"""Types :func:`to_jsonable` returns as they are (exactly these: a subclass takes the long
way, where ``isinstance`` decides)."""


def _item(value: Any, budget: list[int], path: set[int]) -> Any:
    """:func:`_jsonable` of a container's item; a plain one (or a finite float) without the
    call."""
    kind = type(value)
    if kind in _PLAIN or (kind is float and math.isfinite(value)):
        budget[0] -= 1
        return value if budget[0] >= 0 else "<truncated>"
    return _jsonable(value, budget, path)


def _jsonable(value: Any, budget: list[int], path: set[int]) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        return "<truncated>"
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is dict or kind is list:  # the usual containers: plain items inline
        if id(value) in path:
            return "<cycle>"
        if len(path) >= _JSONABLE_DEPTH:
            return "<too deep>"
        path.add(id(value))
        try:
            if kind is dict:
                return {str(key): _item(item, budget, path) for key, item in value.items()}
            return [_item(item, budget, path) for item in value]
        finally:
            path.discard(id(value))
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Mapping | list | tuple | set | frozenset):
        if id(value) in path:
            return "<cycle>"
        if len(path) >= _JSONABLE_DEPTH:
            return "<too deep>"
        path.add(id(value))
        try:
            if isinstance(value, Mapping):
                return {str(key): _jsonable(item, budget, path) for key, item in value.items()}
            if isinstance(value, list | tuple):
                return [_jsonable(item, budget, path) for item in value]
            return sorted((_jsonable(item, budget, path) for item in value), key=repr)
        finally:
            path.discard(id(value))
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
        if id(value) in path:
            return "<cycle>"
        path.add(id(value))
        try:
            return {
                field.name: _jsonable(getattr(value, field.name, None), budget, path)
                for field in dataclasses.fields(value)
            }
        finally:
            path.discard(id(value))
    if type(value).__module__.startswith("lxml"):
        from lxml import etree

        if isinstance(value, etree._Element):
            return {"xml_element": str(value.tag)}
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
