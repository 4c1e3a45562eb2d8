"""The trace data model: a run's :class:`Trace`, its steps, segments, spans and active time.

A :class:`Trace` is what :func:`load_trace` (:mod:`plandag.trace.reader`) reads back from a
trace file: the run's segments (one per process), plan versions, steps with their attempts
and checks, and the spans of compiling, planning, model calls, replans and approvals. The
reader's tolerance of crashed, cut or resumed runs is described in
:mod:`plandag.trace.reader`.

Active time (:meth:`Trace.active_time`, :class:`ActiveTime`): a run that waited for a
person's decision, or crashed and was resumed, spent the time between its segments doing
nothing. The periods in which it was active are each segment's [start, end] (end its
``run_finished`` time, else the last time seen in it) and any model call, planning, compile
or replan span outside them (a revision asked for by ``plandag reject``); active time is
wall-clock time with the :class:`Wait` between those periods cut out. The timeline, the
Gantt chart, step durations and the critical path are measured in it.

Format: the trace file written by :class:`plandag.trace.writer.TraceWriter`, whose module
docstring describes every record (docs/durable-runs.md).
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import networkx as nx

from plandag.dag.graph import critical_path

__all__ = [
    "OFFLINE_LINE",
    "ActivePeriod",
    "ActiveTime",
    "ApprovalSpan",
    "Attempt",
    "CheckResult",
    "ChildSpan",
    "CompileSpan",
    "LLMCallSpan",
    "PlanVersion",
    "ReplanSpan",
    "Segment",
    "StepTrace",
    "Trace",
    "Wait",
]


@dataclasses.dataclass(slots=True)
class Segment:
    """One process's part of a run (0 the first; each resume or approval adds one).

    Attributes:
        number: the segment number.
        command: ``exec``, ``run``, ``resume``, ``approve``, ``extract`` (None when the
            ``run_started`` line is missing).
        goal, params: as written at its start.
        start: its ``run_started`` time (else its first line's), seconds since the epoch.
        end: its ``run_finished`` time, else the last time seen in it.
        status: the run's status at its ``run_finished``, None when it has none.
        spent_usd, spent_tokens: what its steps spent (0 when unfinished).
        critical_path: the critical path its writer recorded ([] when unfinished).
        usage_over_reservation: the worst ratio of reported to reserved usage when its
            provider reported more than a call reserved, else None
            (``RunResult.usage_over_reservation``).
    """

    number: int
    command: str | None = None
    goal: str | None = None
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    start: float = 0.0
    end: float = 0.0
    status: str | None = None
    spent_usd: float = 0.0
    spent_tokens: int = 0
    critical_path: list[int] = dataclasses.field(default_factory=list)
    usage_over_reservation: float | None = None

    @property
    def finished(self) -> bool:
        """True when the segment wrote its ``run_finished`` line."""
        return self.status is not None


@dataclasses.dataclass(slots=True)
class PlanVersion:
    """A ``plan`` line: ``version``, ``hash`` (SHA-256 hex), ``plan`` (its JSON),
    ``source`` (``stored``, ``planner``, ``replan``, ``revision``), ``time``, ``segment``."""

    version: int
    hash: str
    plan: dict[str, Any]
    source: str
    time: float
    segment: int


@dataclasses.dataclass(slots=True)
class Attempt:
    """One attempt of a step: ``number`` (1 first), ``start`` / ``end`` (seconds since the
    epoch; ``end`` None only while unknown), ``status`` (``succeeded``, ``failed``,
    ``cancelled``, ``running``, ``unknown``), ``reason``, ``error`` (``{"type", "message"}``
    or None), the ``segment`` it ran in, and ``retry``: what followed it (``retried``,
    ``reask`` for a model's reply asked again, or why not), None when unknown."""

    number: int
    start: float
    end: float | None
    status: str
    reason: str | None = None
    error: dict[str, Any] | None = None
    segment: int = 0
    retry: str | None = None


@dataclasses.dataclass(slots=True)
class ChildSpan:
    """Something a step's attempt did inside, a child of the step (a ``step_child`` span):
    ``kind`` (``llm_call``: a model call of an ``llm`` or ``agent`` step; ``tool_call``: a
    tool call of an ``agent``), ``name`` (``anthropic:claude-haiku-4-5``, ``read_file``),
    the ``attempt`` of the step it belongs to, ``start`` / ``end`` (seconds since the
    epoch) and its ``attrs`` (tokens, US dollars, a tool's args, an error)."""

    kind: str
    name: str
    attempt: int
    start: float
    end: float
    attrs: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(slots=True)
class CheckResult:
    """A check's outcome: ``kind``, ``passed`` (False only for a failed check), ``status``
    (``pass``, ``fail``, ``not_applicable``) and ``message``."""

    kind: str
    passed: bool
    status: str
    message: str


@dataclasses.dataclass(slots=True)
class StepTrace:
    """One step over the whole run.

    Attributes:
        id, tool: the step's id and tool.
        status: ``succeeded``, ``failed``, ``skipped``, ``cancelled``; ``running`` /
            ``unknown`` for a step whose segment stopped without its end (see
            :mod:`plandag.trace.reader`); ``pending`` for a planned step never seen running.
        reason, detail, error: why it ended so (None when it succeeded).
        start, end: seconds since the epoch (None for a pending step); a skipped step has
            ``start == end``, the time it was skipped.
        depends_on: parent step ids.
        attempts: every attempt, across segments, in order.
        checks: the check outcomes of its last attempt.
        args: its resolved args when recorded, else None.
        result: its result (bounded by the writer), else None.
        superseded_by: the replan's steps that replace it, else None.
        children: what its attempts did inside (:class:`ChildSpan`), in order.
        usage: for a document of an ``extract`` batch, what its model calls used
            (``{"requests", "failed_requests", "input_tokens", "output_tokens",
            "cost_usd"}``), else None.
        segment: the last segment it was seen in.
        from_events: True when known only from live event lines (no span).
    """

    id: int
    tool: str
    status: str = "pending"
    reason: str | None = None
    detail: str | None = None
    error: dict[str, Any] | None = None
    start: float | None = None
    end: float | None = None
    depends_on: list[int] = dataclasses.field(default_factory=list)
    attempts: list[Attempt] = dataclasses.field(default_factory=list)
    checks: list[CheckResult] = dataclasses.field(default_factory=list)
    args: Any = None
    result: Any = None
    superseded_by: list[int] | None = None
    children: list[ChildSpan] = dataclasses.field(default_factory=list)
    usage: dict[str, Any] | None = None
    segment: int = 0
    from_events: bool = False

    @property
    def duration_s(self) -> float:
        """Seconds from start to end (0.0 when either is unknown)."""
        if self.start is None or self.end is None:
            return 0.0
        return max(0.0, self.end - self.start)


@dataclasses.dataclass(slots=True)
class CompileSpan:
    """A ``compile`` span: ``version``, ``ok``, ``diagnostics`` (dicts with ``code``,
    ``severity``, ``step_id``, ``message``), ``start``, ``end``."""

    version: int
    ok: bool
    diagnostics: list[dict[str, Any]]
    start: float
    end: float


OFFLINE_LINE = "offline (offline-extractive): the model answers are extracts, not a model's"
"""What the timeline and the HTML page of a run with the offline model say
(:attr:`Trace.offline`)."""


@dataclasses.dataclass(slots=True)
class LLMCallSpan:
    """An ``llm_call`` span: one attempt of one model call (tokens, US dollars)."""

    purpose: str
    model: str
    provider: str
    attempt: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    stop_reason: str | None
    error: str | None
    start: float
    end: float


@dataclasses.dataclass(slots=True)
class ReplanSpan:
    """A ``replan`` span: ``number``, ``failed``, ``pruned``, ``new_steps``, ``version``,
    ``start``, ``end``; what asked for it (``trigger``), its ``strategy`` (``partial`` or
    ``total``) with ``strategy_reason``, and the steps ``withdrawn`` for it (traces written
    before strategies existed read as partial)."""

    number: int
    failed: list[int]
    pruned: list[int]
    new_steps: list[int]
    version: int
    start: float
    end: float
    trigger: str = "failure"
    strategy: str = "partial"
    strategy_reason: str = ""
    withdrawn: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(slots=True)
class ApprovalSpan:
    """An ``approval`` span: ``version``, ``hash``, ``decision`` (``approved``,
    ``rejected``, ``expired``, ``asked``), ``who``, ``feedback``, ``start``, ``end``."""

    version: int
    hash: str
    decision: str
    who: str | None
    feedback: str | None
    start: float
    end: float


@dataclasses.dataclass(frozen=True, slots=True)
class ActivePeriod:
    """A stretch of wall-clock time in which the run was active (see the module docstring).

    Attributes:
        start, end: seconds since the epoch (``end >= start``).
        offset_s: active seconds before it (the sum of the earlier periods' lengths).
        segments: the numbers of the segments that start in it (empty for a span outside
            every segment, such as a revision asked for by ``plandag reject``).
    """

    start: float
    end: float
    offset_s: float
    segments: tuple[int, ...] = ()

    @property
    def seconds(self) -> float:
        """Its length in seconds."""
        return self.end - self.start


@dataclasses.dataclass(frozen=True, slots=True)
class Wait:
    """The time between two :class:`ActivePeriod` s, cut out of active time.

    Attributes:
        index: its place among the waits (0 the first); it follows period ``index``.
        start, end: seconds since the epoch (the earlier period's end, the later one's start;
            ``end > start``).
        at_s: the active time where it sits (the earlier period's end, in active seconds).
    """

    index: int
    start: float
    end: float
    at_s: float

    @property
    def seconds(self) -> float:
        """How long the run waited, in seconds."""
        return self.end - self.start


@dataclasses.dataclass(frozen=True, slots=True)
class ActiveTime:
    """The mapping from wall-clock time to active time (see the module docstring).

    Attributes:
        periods: the active periods in time order (at least one), separated by ``waits``.
        waits: ``len(periods) - 1`` waits, ``waits[i]`` between ``periods[i]`` and
            ``periods[i + 1]``.
    """

    periods: tuple[ActivePeriod, ...]
    waits: tuple[Wait, ...]

    @classmethod
    def from_intervals(cls, intervals: list[tuple[float, float, int | None]]) -> ActiveTime:
        """Merge intervals into periods.

        Args:
            intervals: ``(start, end, segment)`` in seconds since the epoch; ``segment`` the
                number of the segment it is, None for another span. Overlapping or touching
                intervals make one period; an end before its start counts as its start.
                An empty list gives one empty period at 0.0.

        Returns:
            The active time, its periods in time order.
        """
        if not intervals:
            return cls((ActivePeriod(0.0, 0.0, 0.0),), ())
        ordered = sorted(
            ((start, max(start, end), segment) for start, end, segment in intervals),
            key=lambda interval: (interval[0], interval[1]),
        )
        merged: list[tuple[float, float, list[int]]] = []
        for start, end, segment in ordered:
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end), merged[-1][2])
            else:
                merged.append((start, end, []))
            if segment is not None:
                merged[-1][2].append(segment)
        periods: list[ActivePeriod] = []
        waits: list[Wait] = []
        offset = 0.0
        for start, end, segments in merged:
            if periods:
                waits.append(Wait(len(waits), periods[-1].end, start, offset))
            periods.append(ActivePeriod(start, end, offset, tuple(sorted(segments))))
            offset += end - start
        return cls(tuple(periods), tuple(waits))

    @property
    def total_s(self) -> float:
        """Active seconds in all (the periods' lengths added up)."""
        last = self.periods[-1]
        return last.offset_s + last.seconds

    @property
    def waited_s(self) -> float:
        """Seconds spent waiting between the periods, in all."""
        return sum(wait.seconds for wait in self.waits)

    def wait_at(self, time: float) -> Wait | None:
        """The wait ``time`` (seconds since the epoch) falls in, strictly between two
        periods, else None."""
        index = self._index(time)
        if index < len(self.waits) and self.periods[index].end < time:
            return self.waits[index]
        return None

    def period_index(self, time: float) -> int:
        """The index of the period holding ``time``; a time before the first period gives 0,
        after the last the last, and in a wait the period before it."""
        return self._index(time)

    def _index(self, time: float) -> int:
        starts = [period.start for period in self.periods]
        return max(0, bisect.bisect_right(starts, time) - 1)

    def seconds(self, time: float) -> float:
        """Active seconds from the first period's start to ``time`` (seconds since the
        epoch): a time in a wait gives the wait's ``at_s``; before the first period 0.0,
        after the last :attr:`total_s`."""
        period = self.periods[self._index(time)]
        return period.offset_s + min(max(time - period.start, 0.0), period.seconds)

    def between(self, start: float | None, end: float | None) -> float:
        """Active seconds from ``start`` to ``end`` (seconds since the epoch; 0.0 when
        either is None or ``end`` comes first)."""
        if start is None or end is None:
            return 0.0
        return max(0.0, self.seconds(end) - self.seconds(start))

    def pieces(self, start: float, end: float) -> list[tuple[int, float, float]]:
        """The parts of ``[start, end]`` (seconds since the epoch) inside periods, as
        ``(period index, start, end)`` in time order; ``[]`` when it lies wholly in a wait.
        A time before the first period or after the last counts as its edge."""
        first, last = self.periods[0], self.periods[-1]
        start = min(max(start, first.start), last.end)
        end = min(max(end, start), last.end)
        parts = []
        for index in range(self._index(start), self._index(end) + 1):
            period = self.periods[index]
            low, high = max(start, period.start), min(end, period.end)
            if low <= high:
                parts.append((index, low, high))
        return parts

    def to_json_dict(self) -> dict[str, Any]:
        """``{"active_s", "waited_s", "periods": [...], "waits": [...]}`` (JSON-safe)."""
        return {
            "active_s": self.total_s,
            "waited_s": self.waited_s,
            "periods": [_as_json(period) for period in self.periods],
            "waits": [{**_as_json(wait), "seconds": wait.seconds} for wait in self.waits],
        }


@dataclasses.dataclass(slots=True)
class Trace:
    """A run's whole trace.

    Attributes:
        run_id: the run's id (from the first line).
        path: the file read, if any.
        segments: every segment, by number.
        plans: every plan version, in the order written.
        steps: every step by id (sorted).
        compiles, planning, llm_calls, replans, approvals: the spans of those kinds, in order.
        heartbeats, stalls: the ``attrs`` of those event lines, each with its ``time``.
        dependencies_down: the tools and HTTP hosts the circuit breaker took out of the run
            (``{"kind", "name", "step_ids", "detail", "time"}``), in order.
        notes: what the reader skipped or guessed (a cut last line...).
        offline: the run's model answers are the offline model's extracts, not a model's
            (:mod:`plandag.models.offline`): one of its model calls is of provider
            ``offline``, or its stored options say so (``plandag trace`` reads them).
    """

    run_id: str
    path: Path | None = None
    segments: list[Segment] = dataclasses.field(default_factory=list)
    plans: list[PlanVersion] = dataclasses.field(default_factory=list)
    steps: dict[int, StepTrace] = dataclasses.field(default_factory=dict)
    compiles: list[CompileSpan] = dataclasses.field(default_factory=list)
    planning: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    llm_calls: list[LLMCallSpan] = dataclasses.field(default_factory=list)
    replans: list[ReplanSpan] = dataclasses.field(default_factory=list)
    approvals: list[ApprovalSpan] = dataclasses.field(default_factory=list)
    dependencies_down: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    heartbeats: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    stalls: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    offline: bool = False

    @property
    def status(self) -> str:
        """The last segment's status, or ``unfinished`` when it wrote no ``run_finished``
        (crashed or still running)."""
        if not self.segments or self.segments[-1].status is None:
            return "unfinished"
        return self.segments[-1].status

    @property
    def start(self) -> float:
        """The earliest time in the trace, seconds since the epoch (0.0 when empty)."""
        times = [segment.start for segment in self.segments]
        times += [step.start for step in self.steps.values() if step.start is not None]
        times += [call.start for call in self.llm_calls]
        return min(times, default=0.0)

    @property
    def end(self) -> float:
        """The latest time in the trace, seconds since the epoch."""
        times = [segment.end for segment in self.segments]
        times += [step.end for step in self.steps.values() if step.end is not None]
        times += [call.end for call in self.llm_calls]
        return max(times, default=self.start)

    @property
    def duration_s(self) -> float:
        """Wall-clock seconds from :attr:`start` to :attr:`end` (the waits between segments
        included; :attr:`active_s` leaves them out)."""
        return max(0.0, self.end - self.start)

    @property
    def active_s(self) -> float:
        """Active seconds of the run: :attr:`duration_s` without the waits between its
        segments (:meth:`active_time`)."""
        return self.active_time().total_s

    def active_time(self) -> ActiveTime:
        """The run's active periods and the waits between them (see the module docstring):
        each segment's [start, end], and the model call, planning, compile and replan spans
        (those outside every segment make periods of their own). A run of one segment
        has no wait: its gaps (between planning and the segment's start, say) are one
        process's own time, so its active time is one period from its first span's start
        to its last span's end."""
        intervals: list[tuple[float, float, int | None]] = [
            (segment.start, segment.end, segment.number) for segment in self.segments
        ]
        intervals += [(call.start, call.end, None) for call in self.llm_calls]
        intervals += [(span.start, span.end, None) for span in self.compiles]
        intervals += [(span.start, span.end, None) for span in self.replans]
        intervals += [
            (_number(span.get("start")), _number(span.get("end"), _number(span.get("start"))), None)
            for span in self.planning
        ]
        if not self.segments:
            intervals.append((self.start, self.end, None))
        elif len(self.segments) == 1:
            first = min(start for start, _, _ in intervals)
            last = max(max(start, end) for start, end, _ in intervals)
            intervals = [(first, last, self.segments[0].number)]
        return ActiveTime.from_intervals(intervals)

    def step_active_s(self, step: StepTrace, active: ActiveTime | None = None) -> float:
        """Active seconds from ``step``'s start to its end (0.0 when either is unknown): its
        :attr:`StepTrace.duration_s` without the waits between segments.

        Args:
            step: one of :attr:`steps`.
            active: :meth:`active_time`, when the caller has it already.
        """
        return (active or self.active_time()).between(step.start, step.end)

    @property
    def usage_over_reservation(self) -> float | None:
        """The worst ratio of reported to reserved usage over the segments whose provider
        reported more than a call reserved, else None."""
        ratios = [
            segment.usage_over_reservation
            for segment in self.segments
            if segment.usage_over_reservation is not None
        ]
        return max(ratios) if ratios else None

    @property
    def steps_cost_usd(self) -> float:
        """US dollars the steps spent, over every finished segment."""
        return sum(segment.spent_usd for segment in self.segments)

    @property
    def llm_cost_usd(self) -> float:
        """US dollars of every recorded model call."""
        return sum(call.cost_usd for call in self.llm_calls)

    @property
    def tokens(self) -> int:
        """Tokens spent by the steps plus the model calls' input and output tokens."""
        calls = sum(call.input_tokens + call.output_tokens for call in self.llm_calls)
        return sum(segment.spent_tokens for segment in self.segments) + calls

    def graph(self) -> nx.DiGraph:
        """The steps' DAG (edges parent → child, parents known to the trace only)."""
        graph = nx.DiGraph()
        graph.add_nodes_from(sorted(self.steps))
        for step in self.steps.values():
            for parent in step.depends_on:
                if parent in self.steps and parent != step.id:
                    graph.add_edge(parent, step.id)
        return graph

    def critical_path(self) -> list[int]:
        """The longest path of measured active durations (:meth:`step_active_s`) over
        :meth:`graph` (``[]`` when it has a cycle, which a compiled plan never has); ties as
        :func:`plandag.dag.graph.critical_path`."""
        active = self.active_time()
        durations = {
            step_id: active.between(step.start, step.end) for step_id, step in self.steps.items()
        }
        try:
            path, _ = critical_path(self.graph(), durations)
        except nx.NetworkXUnfeasible:
            return []
        return path

    def final_plan_steps(self) -> dict[int, dict[str, Any]]:
        """Every step definition of every plan version, the latest version's winning:
        ``{id: step JSON}`` (a replan's patch adds to the earlier steps)."""
        steps: dict[int, dict[str, Any]] = {}
        for version in sorted(self.plans, key=lambda plan: plan.version):
            for step in version.plan.get("steps") or []:
                if isinstance(step, Mapping) and isinstance(step.get("id"), int):
                    steps[step["id"]] = dict(step)
        return dict(sorted(steps.items()))

    def to_json_dict(self) -> dict[str, Any]:
        """The trace as JSON-safe data (``plandag trace --json``): every field above plus
        ``status``, ``start``, ``end``, ``duration_s``, ``active`` (:meth:`active_time`'s
        :meth:`ActiveTime.to_json_dict`), ``steps_cost_usd``, ``llm_cost_usd``, ``tokens``
        and ``critical_path``; ``steps`` a list by id."""
        document: dict[str, Any] = {
            "run_id": self.run_id,
            "status": self.status,
            "start": self.start,
            "end": self.end,
            "duration_s": self.duration_s,
            "active": self.active_time().to_json_dict(),
            "steps_cost_usd": self.steps_cost_usd,
            "llm_cost_usd": self.llm_cost_usd,
            "tokens": self.tokens,
            "critical_path": self.critical_path(),
        }
        for field in dataclasses.fields(self):
            if field.name in ("run_id", "path"):
                continue
            value = getattr(self, field.name)
            if field.name == "steps":
                value = [self.steps[key] for key in sorted(self.steps)]
            document[field.name] = _as_json(value)
        for segment_json, segment in zip(document["segments"], self.segments, strict=True):
            segment_json["finished"] = segment.finished
        return document


def _as_json(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            field.name: _as_json(getattr(value, field.name)) for field in dataclasses.fields(value)
        }
    if isinstance(value, list | tuple):
        return [_as_json(item) for item in value]
    return value


def _number(value: Any, default: float = 0.0) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return default
