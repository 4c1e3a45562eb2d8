"""Reading a trace file back: :func:`load_trace` gives a :class:`Trace`.

The reader is tolerant, because a trace is most needed after something went wrong:

* a segment with no ``run_finished`` (the process crashed or is still running): its steps
  come from the live ``event`` lines; a step still running when the lines stop is
  ``running`` in the last segment (it may still be running) and ``unknown`` in an earlier
  one (its process died), its end the last time the segment was seen;
* a last line cut by a crash mid-write, or any line that is not a JSON object, is skipped
  with a note in :attr:`Trace.notes`;
* a resumed run (several segments in one file) is one continued timeline: a step seen in
  several segments keeps its earlier attempts, and its latest state wins.

Active time (:meth:`Trace.active_time`, :class:`ActiveTime`): a run that waited for a
person's decision, or crashed and was resumed, spent the time between its segments doing
nothing. The periods in which it was active are each segment's [start, end] (end its
``run_finished`` time, else the last time seen in it) and any model call, planning, compile
or replan span outside them (a revision asked for by ``plandag reject``); active time is
wall-clock time with the :class:`Wait` between those periods cut out. The timeline, the
Gantt chart, step durations and the critical path are measured in it.

Format: issue 6's trace contract (``/work/notes/ISSUE6.md``), written by
:class:`plandag.trace.writer.TraceWriter`.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import networkx as nx

from plandag.dag.graph import critical_path
from plandag.errors import InputError
from plandag.trace.writer import plan_dependencies

__all__ = [
    "ActivePeriod",
    "ActiveTime",
    "ApprovalSpan",
    "Attempt",
    "CheckResult",
    "CompileSpan",
    "LLMCallSpan",
    "PlanVersion",
    "ReplanSpan",
    "Segment",
    "StepTrace",
    "Trace",
    "Wait",
    "load_trace",
    "parse_trace",
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
    or None) and the ``segment`` it ran in."""

    number: int
    start: float
    end: float | None
    status: str
    reason: str | None = None
    error: dict[str, Any] | None = None
    segment: int = 0


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
            ``unknown`` for a step whose segment stopped without its end (see the module
            docstring); ``pending`` for a planned step never seen running.
        reason, detail, error: why it ended so (None when it succeeded).
        start, end: seconds since the epoch (None for a pending step); a skipped step has
            ``start == end``, the time it was skipped.
        depends_on: parent step ids.
        attempts: every attempt, across segments, in order.
        checks: the check outcomes of its last attempt.
        args: its resolved args when recorded, else None.
        result: its result (bounded by the writer), else None.
        superseded_by: the replan's steps that replace it, else None.
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
    ``start``, ``end``."""

    number: int
    failed: list[int]
    pruned: list[int]
    new_steps: list[int]
    version: int
    start: float
    end: float


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
        notes: what the reader skipped or guessed (a cut last line...).
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
    heartbeats: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    stalls: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)

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
        (those outside every segment make periods of their own)."""
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


def load_trace(path: Path | str) -> Trace:
    """Read a trace file (see the module docstring for what is tolerated).

    Args:
        path: the ``.jsonl`` file a :class:`~plandag.trace.writer.TraceWriter` wrote.

    Returns:
        The :class:`Trace`; its ``notes`` say what was skipped.

    Raises:
        InputError: the file cannot be read, or holds no trace line at all.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise InputError(f"trace file {file} does not exist") from None
    except OSError as error:
        raise InputError(f"cannot read trace file {file}: {error.strerror or error}") from None
    trace = parse_trace(text, source=str(file))
    trace.path = file
    return trace


def parse_trace(text: str, *, source: str = "trace") -> Trace:
    """Parse a trace's text, as :func:`load_trace` does.

    Args:
        text: the JSON Lines.
        source: a name for messages (the file).

    Raises:
        InputError: no line is a trace record.
    """
    lines = text.split("\n")
    records: list[dict[str, Any]] = []
    notes: list[str] = []
    last_index = max((index for index, line in enumerate(lines) if line.strip()), default=-1)
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("type"), str):
            if index == last_index and not text.endswith("\n"):
                notes.append(f"line {index + 1} is cut short (a crash while writing); ignored")
            else:
                notes.append(f"line {index + 1} is not a trace record (cut by a crash?); ignored")
            continue
        records.append(record)
    if not records:
        raise InputError(f"{source} holds no trace record")
    builder = _Builder(str(records[0].get("run_id", "")), notes)
    for record in records:
        builder.add(record)
    return builder.finish()


def _number(value: Any, default: float = 0.0) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return default


def _int_list(value: Any) -> list[int]:
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, int) and not isinstance(item, bool)]


class _Builder:
    """Folds records into a Trace, in file order."""

    def __init__(self, run_id: str, notes: list[str]) -> None:
        self.trace = Trace(run_id=run_id, notes=notes)
        self.segments: dict[int, Segment] = {}
        self.current = 0
        self.plan_parents: dict[int, list[int]] = {}
        self.plan_tools: dict[int, str] = {}
        self.other_runs = 0

    def segment(self, time: float) -> Segment:
        segment = self.segments.get(self.current)
        if segment is None:
            segment = Segment(number=self.current, start=time, end=time)
            self.segments[self.current] = segment
        if not segment.finished:  # lines after run_finished (a decision) are not its run
            segment.end = max(segment.end, time)
        return segment

    def step(self, step_id: int, tool: str | None = None) -> StepTrace:
        step = self.trace.steps.get(step_id)
        if step is None:
            step = StepTrace(
                id=step_id,
                tool=tool or self.plan_tools.get(step_id, "?"),
                depends_on=list(self.plan_parents.get(step_id, [])),
            )
            self.trace.steps[step_id] = step
        elif tool:
            step.tool = tool
        return step

    def add(self, record: dict[str, Any]) -> None:
        if str(record.get("run_id", "")) != self.trace.run_id:
            self.other_runs += 1
            return
        kind = record["type"]
        time = _number(record.get("time"))
        if kind == "run_started":
            self.close_segment()
            number = record.get("segment")
            self.current = number if isinstance(number, int) else self.current + 1
            segment = self.segments.get(self.current)
            if segment is None or segment.command is not None:
                segment = Segment(number=self.current, start=time, end=time)
                self.segments[self.current] = segment
            segment.command = record.get("command")
            goal = record.get("goal")
            segment.goal = goal if isinstance(goal, str) else None
            params = record.get("params")
            segment.params = dict(params) if isinstance(params, dict) else {}
            return
        segment = self.segment(time)
        if kind == "plan":
            self.add_plan(record, time)
        elif kind == "span":
            self.add_span(record)
        elif kind == "event":
            self.add_event(record, time)
        elif kind == "run_finished":
            segment.status = str(record.get("status"))
            segment.spent_usd = _number(record.get("spent_usd"))
            segment.spent_tokens = int(_number(record.get("spent_tokens")))
            segment.critical_path = _int_list(record.get("critical_path"))
            segment.end = time

    def add_plan(self, record: dict[str, Any], time: float) -> None:
        plan = record.get("plan")
        plan = plan if isinstance(plan, dict) else {}
        self.trace.plans.append(
            PlanVersion(
                version=int(_number(record.get("version"), 0)),
                hash=str(record.get("hash", "")),
                plan=plan,
                source=str(record.get("source", "")),
                time=time,
                segment=self.current,
            )
        )
        self.plan_parents.update(plan_dependencies(plan))
        for step in plan.get("steps") or []:
            if isinstance(step, dict) and isinstance(step.get("id"), int):
                self.plan_tools[step["id"]] = str(step.get("tool", "?"))
                known = self.trace.steps.get(step["id"])
                if known is not None and not known.depends_on:
                    known.depends_on = list(self.plan_parents[step["id"]])

    def add_span(self, record: dict[str, Any]) -> None:
        attrs = record.get("attrs")
        attrs = attrs if isinstance(attrs, dict) else {}
        start = _number(record.get("start"))
        end = _number(record.get("end"), start)
        self.segment(end)
        kind = record.get("kind")
        if kind == "step":
            self.add_step_span(attrs, start, end)
        elif kind == "compile":
            diagnostics = attrs.get("diagnostics")
            self.trace.compiles.append(
                CompileSpan(
                    version=int(_number(attrs.get("version"))),
                    ok=bool(attrs.get("ok")),
                    diagnostics=list(diagnostics) if isinstance(diagnostics, list) else [],
                    start=start,
                    end=end,
                )
            )
        elif kind == "plan":
            self.trace.planning.append({**attrs, "start": start, "end": end})
        elif kind == "llm_call":
            self.trace.llm_calls.append(
                LLMCallSpan(
                    purpose=str(attrs.get("purpose", "")),
                    model=str(attrs.get("model", "")),
                    provider=str(attrs.get("provider", "")),
                    attempt=int(_number(attrs.get("attempt"), 1)),
                    input_tokens=int(_number(attrs.get("input_tokens"))),
                    output_tokens=int(_number(attrs.get("output_tokens"))),
                    cost_usd=_number(attrs.get("cost_usd")),
                    stop_reason=_optional_text(attrs.get("stop_reason")),
                    error=_optional_text(attrs.get("error")),
                    start=start,
                    end=end,
                )
            )
        elif kind == "replan":
            self.trace.replans.append(
                ReplanSpan(
                    number=int(_number(attrs.get("number"))),
                    failed=_int_list(attrs.get("failed")),
                    pruned=_int_list(attrs.get("pruned")),
                    new_steps=_int_list(attrs.get("new_steps")),
                    version=int(_number(attrs.get("version"))),
                    start=start,
                    end=end,
                )
            )
        elif kind == "approval":
            self.trace.approvals.append(
                ApprovalSpan(
                    version=int(_number(attrs.get("version"))),
                    hash=str(attrs.get("hash", "")),
                    decision=str(attrs.get("decision", "")),
                    who=_optional_text(attrs.get("who")),
                    feedback=_optional_text(attrs.get("feedback")),
                    start=start,
                    end=end,
                )
            )

    def add_step_span(self, attrs: dict[str, Any], start: float, end: float) -> None:
        step_id = attrs.get("step_id")
        if not isinstance(step_id, int):
            self.trace.notes.append("a step span without a step_id; ignored")
            return
        step = self.step(step_id, _optional_text(attrs.get("tool")))
        earlier = [attempt for attempt in step.attempts if attempt.segment != self.current]
        attempts = []
        for item in attrs.get("attempts") or []:
            if not isinstance(item, dict):
                continue
            item_end = item.get("end")
            attempts.append(
                Attempt(
                    number=int(_number(item.get("attempt"), 1)),
                    start=_number(item.get("start")),
                    end=_number(item_end) if item_end is not None else None,
                    status=str(item.get("status", "unknown")),
                    reason=_optional_text(item.get("reason")),
                    error=item.get("error") if isinstance(item.get("error"), dict) else None,
                    segment=self.current,
                )
            )
        # A step restored into this segment's run (a resumed run's completed step) has no
        # attempt of its own: it keeps its earlier attempts and times.
        earlier = [old for old in earlier if all(old.start != new.start for new in attempts)]
        restored = not attempts and bool(earlier)
        step.attempts = earlier + attempts
        step.status = str(attrs.get("status", "unknown"))
        step.reason = _optional_text(attrs.get("reason"))
        step.detail = _optional_text(attrs.get("detail"))
        error = attrs.get("error")
        step.error = error if isinstance(error, dict) else None
        if step.attempts:
            step.start = min(attempt.start for attempt in step.attempts)
        else:
            step.start = start
        if not restored:
            step.end = end
        elif step.end is None:
            step.end = max(attempt.end or attempt.start for attempt in earlier)
        if "depends_on" in attrs:
            step.depends_on = _int_list(attrs.get("depends_on"))
        step.checks = [
            CheckResult(
                kind=str(item.get("kind", "")),
                passed=bool(item.get("passed", item.get("status") != "fail")),
                status=str(item.get("status", "pass" if item.get("passed") else "fail")),
                message=str(item.get("message", "")),
            )
            for item in attrs.get("checks") or []
            if isinstance(item, dict)
        ]
        step.args = attrs.get("args")
        step.result = attrs.get("result")
        superseded = attrs.get("superseded_by")
        step.superseded_by = _int_list(superseded) if isinstance(superseded, list) else None
        step.segment = self.current
        step.from_events = False

    def add_event(self, record: dict[str, Any], time: float) -> None:
        attrs = record.get("attrs")
        attrs = attrs if isinstance(attrs, dict) else {}
        kind = record.get("kind")
        if kind in ("heartbeat", "stall"):
            target = self.trace.heartbeats if kind == "heartbeat" else self.trace.stalls
            target.append({**attrs, "time": time})
            return
        step_id = attrs.get("step_id")
        if not isinstance(step_id, int):
            return
        if kind == "step_started":
            step = self.step(step_id, _optional_text(attrs.get("tool")))
            self.close_open_attempt(step, time, "failed")
            step.attempts.append(
                Attempt(
                    number=int(_number(attrs.get("attempt"), len(step.attempts) + 1)),
                    start=time,
                    end=None,
                    status="running",
                    segment=self.current,
                )
            )
            step.start = min(attempt.start for attempt in step.attempts)
            step.status, step.reason, step.detail, step.end = "running", None, None, None
            step.segment = self.current
            step.from_events = True
        elif kind == "step_ended":
            step = self.step(step_id)
            status = str(attrs.get("status", "unknown"))
            reason = _optional_text(attrs.get("reason"))
            error = attrs.get("error")
            step.error = error if isinstance(error, dict) else None
            open_attempt = self.close_open_attempt(step, time, status)
            if open_attempt is not None:
                open_attempt.reason = reason
                open_attempt.error = step.error
            step.status, step.reason = status, reason
            step.detail = _optional_text(attrs.get("detail"))
            if step.start is None:
                step.start = time
            step.end = time
            step.segment = self.current
            step.from_events = True

    def close_segment(self) -> None:
        """A new segment begins: what was still running in the current one ended with its
        process, at its last time seen, outcome ``unknown`` (unless it finished)."""
        segment = self.segments.get(self.current)
        if segment is None:
            return
        for step in self.trace.steps.values():
            if step.segment != self.current:
                continue
            if self.close_open_attempt(step, segment.end, "unknown") is not None:
                step.status, step.end = "unknown", segment.end

    def close_open_attempt(self, step: StepTrace, time: float, status: str) -> Attempt | None:
        if step.attempts and step.attempts[-1].end is None:
            attempt = step.attempts[-1]
            attempt.end, attempt.status = time, status
            return attempt
        return None

    def finish(self) -> Trace:
        trace = self.trace
        trace.segments = [self.segments[number] for number in sorted(self.segments)]
        last = trace.segments[-1].number if trace.segments else 0
        for step in trace.steps.values():
            if step.status != "running":
                continue
            seen = self.segments.get(step.segment)
            end = seen.end if seen is not None else step.start
            if step.segment != last or (seen is not None and seen.finished):
                step.status = "unknown"
            step.end = end
            for attempt in step.attempts:
                if attempt.end is None:
                    attempt.end, attempt.status = end, step.status
        if trace.plans:  # planned steps never seen: pending (a crash came first)
            latest = max(trace.plans, key=lambda plan: plan.version)
            for step in latest.plan.get("steps") or []:
                if isinstance(step, dict) and isinstance(step.get("id"), int):
                    self.step(step["id"])
        for step_id, parents in self.plan_parents.items():
            if step_id in trace.steps and not trace.steps[step_id].depends_on:
                trace.steps[step_id].depends_on = list(parents)
        trace.steps = dict(sorted(trace.steps.items()))
        if self.other_runs:
            trace.notes.append(
                f"{self.other_runs} line(s) of another run than {trace.run_id}; ignored"
            )
        for segment in trace.segments:
            if not segment.finished and segment.number != last:
                trace.notes.append(
                    f"segment {segment.number} has no run_finished (its process stopped); its "
                    "steps come from live events"
                )
        if trace.segments and not trace.segments[-1].finished:
            trace.notes.append(
                f"segment {last} has no run_finished: the run crashed or is still running"
            )
        return trace


def _optional_text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
