"""Reading a trace file back: :func:`load_trace` gives a :class:`~plandag.trace.model.Trace`.

The reader is tolerant, because a trace is most needed after something went wrong:

* a segment with no ``run_finished`` (the process crashed or is still running): its steps
  come from the live ``event`` lines; a step still running when the lines stop is
  ``running`` in the last segment (it may still be running) and ``unknown`` in an earlier
  one (its process died), its end the last time the segment was seen;
* a last line cut by a crash mid-write, or any line that is not a JSON object, is skipped
  with a note in :attr:`Trace.notes <plandag.trace.model.Trace.notes>`;
* a resumed run (several segments in one file) is one continued timeline: a step seen in
  several segments keeps its earlier attempts, and its latest state wins.

The types it builds are in :mod:`plandag.trace.model`.

Format: the trace file written by :class:`plandag.trace.writer.TraceWriter`, whose module
docstring describes every record (docs/durable-runs.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from plandag.errors import InputError
from plandag.trace.model import (
    ApprovalSpan,
    Attempt,
    CheckResult,
    ChildSpan,
    CompileSpan,
    LLMCallSpan,
    PlanVersion,
    ReplanSpan,
    Segment,
    StepTrace,
    Trace,
    _number,
)
from plandag.trace.writer import flush_traces, plan_dependencies

__all__ = ["load_trace", "parse_trace"]


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
    flush_traces(file)  # the lines a writer of this process holds back are read too
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
            ratio = record.get("usage_over_reservation")
            if isinstance(ratio, int | float) and not isinstance(ratio, bool):
                segment.usage_over_reservation = float(ratio)
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
        elif kind == "step_child":
            parent = attrs.get("parent_step")
            if isinstance(parent, int):
                self.step(parent, None).children.append(
                    ChildSpan(
                        kind=str(attrs.get("child_kind", "")),
                        name=str(record.get("name", "")),
                        attempt=int(_number(attrs.get("attempt"), 1)),
                        start=start,
                        end=end,
                        attrs={
                            key: value
                            for key, value in attrs.items()
                            if key not in ("child_kind", "parent_step", "attempt")
                        },
                    )
                )
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
                    trigger=_optional_text(attrs.get("trigger")) or "failure",
                    strategy=_optional_text(attrs.get("strategy")) or "partial",
                    strategy_reason=_optional_text(attrs.get("strategy_reason")) or "",
                    withdrawn=_int_list(attrs.get("withdrawn")),
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
                    retry=_optional_text(item.get("retry")),
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
        usage = attrs.get("usage")
        step.usage = dict(usage) if isinstance(usage, dict) else None
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
        if kind == "dependency_down":
            self.trace.dependencies_down.append({**attrs, "time": time})
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
        trace.offline = any(call.provider == "offline" for call in trace.llm_calls)
        return trace


def _optional_text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
