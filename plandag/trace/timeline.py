"""The terminal timeline of a run (``plandag trace RUN_ID``): steps as bars over time.

One row per step (in order of start), each attempt a run of ``█`` (retry waits ``─``, a
skipped step a ``·`` where it was skipped), colored by status; the steps on the critical
path (longest chain of measured durations, :meth:`plandag.trace.model.Trace.critical_path`)
carry a ``*`` and are bold. Model calls (``llm``), replans and approval decisions are rows
too. A header gives the run id, status, duration, cost and tokens; a document of an
``extract`` batch shows its own model calls, tokens and cost after its status.

The bars are drawn over active time (:meth:`plandag.trace.model.Trace.active_time`): the
time a run spent waiting between its segments (for ``plandag approve``, or between a crash
and ``plandag resume``) is cut out and drawn as one ``┊`` column through every row, and a
``waits`` row under the axis says how long each wait was (``waited 1m 40s``). A segment
that began with no wait before it is marked ``┊`` on the axis. The header then gives the
active duration and the wall-clock span apart (``8.00 s active, 1m 48s wall clock``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import Any

from rich.console import Console
from rich.text import Text

from plandag.brakes.budget import over_reservation_warning
from plandag.trace.model import OFFLINE_LINE, ActiveTime, Trace

__all__ = ["STATUS_STYLES", "attempt_hulls", "format_seconds", "render_timeline", "usage_text"]

STATUS_STYLES: dict[str, str] = {
    "succeeded": "green",
    "failed": "red",
    "skipped": "yellow",
    "cancelled": "magenta",
    "running": "cyan",
    "unknown": "yellow",
    "pending": "dim",
}
"""The rich style of each step status (bars and status words)."""

_LABEL = 26
_TAIL = 30
_MIN_BAR = 10


def format_seconds(seconds: float) -> str:
    """``seconds`` for a person: ``0.042 s``, ``3.20 s``, ``2m 05s``, ``1h 02m``."""
    if seconds < 1:
        return f"{seconds:.3f} s"
    if seconds < 60:
        return f"{seconds:.2f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {rest:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


class _Columns:
    """The bar area's columns: each active period gets columns in proportion to its
    seconds (at least one), each wait between two periods one ``┊`` column after it."""

    def __init__(self, active: ActiveTime, width: int) -> None:
        self.active = active
        count = len(active.periods)
        columns = max(width - len(active.waits), count)
        total = active.total_s
        edges = [0]
        for period in active.periods:
            share = (period.offset_s + period.seconds) / total if total > 0 else 0.0
            edges.append(round(share * columns) if total > 0 else 0)
        if total <= 0:
            edges = [round(index * columns / count) for index in range(count + 1)]
        sizes = [max(0, high - low) for low, high in itertools.pairwise(edges)]
        for index, size in enumerate(sizes):  # every period at least one column
            if size == 0:
                largest = max(range(count), key=lambda other: sizes[other])
                if sizes[largest] > 1:
                    sizes[largest] -= 1
                sizes[index] = 1
        self.first: list[int] = []
        self.breaks: list[int] = []
        position = 0
        for index, size in enumerate(sizes):
            self.first.append(position)
            position += size
            if index < len(active.waits):
                self.breaks.append(position)
                position += 1
        self.sizes = sizes
        self.width = position

    def column(self, time: float) -> int:
        """The column of ``time`` (seconds since the epoch); a wait's is its ``┊``."""
        wait = self.active.wait_at(time)
        if wait is not None:
            return self.breaks[wait.index]
        index = self.active.period_index(time)
        period, size = self.active.periods[index], self.sizes[index]
        position = int((time - period.start) / max(period.seconds, 1e-9) * size)
        return self.first[index] + min(max(position, 0), size - 1)


def _label(text: str, mark: bool) -> Text:
    body = ("* " if mark else "  ") + text
    if len(body) > _LABEL - 1:
        body = body[: _LABEL - 2] + "…"
    return Text(body.ljust(_LABEL), style="bold" if mark else "")


def _row(label: Text, cells: list[tuple[str, str]], tail: Text) -> Text:
    row = Text()
    row.append_text(label)
    row.append("│", style="dim")
    for character, style in cells:
        row.append(character, style=style)
    row.append("│ ", style="dim")
    row.append_text(tail)
    row.no_wrap = True
    row.overflow = "crop"
    return row


def _blank(columns: _Columns) -> list[tuple[str, str]]:
    cells = [(" ", "")] * columns.width
    for position in columns.breaks:
        cells[position] = ("┊", "dim")
    return cells


def _fill(
    cells: list[tuple[str, str]],
    columns: _Columns,
    start: float,
    end: float,
    character: str,
    style: str,
) -> None:
    """Fill ``[start, end]``'s columns, piece by active period (never a wait's column,
    unless the whole span lies in that wait)."""
    pieces = columns.active.pieces(start, end)
    if not pieces:
        cells[columns.column(start)] = (character, style)
    for _, low, high in pieces:
        first, last = columns.column(low), columns.column(high)
        for position in range(first, max(first, last) + 1):
            cells[position] = (character, style)


def attempt_hulls(
    trace: Trace, step_id: int, active: ActiveTime | None = None
) -> dict[int, tuple[float, float]]:
    """Where a step ran, piece by active period.

    Args:
        trace: the run; step_id: one of its steps.
        active: ``trace.active_time()``, when the caller has it already.

    Returns:
        ``{period index: (first start, last end)}`` of the step's attempts in each active
        period they lie in (seconds since the epoch; an attempt wholly in a wait counts as a
        point in the period before it); ``{}`` for a step without attempts.
    """
    step = trace.steps[step_id]
    active = active or trace.active_time()
    hulls: dict[int, tuple[float, float]] = {}
    for attempt in step.attempts:
        end = attempt.end if attempt.end is not None else (step.end or attempt.start)
        pieces = active.pieces(attempt.start, end) or [
            (active.period_index(attempt.start), attempt.start, attempt.start)
        ]
        for index, low, high in pieces:
            known = hulls.get(index, (low, high))
            hulls[index] = (min(known[0], low), max(known[1], high))
    return hulls


def _wait_labels(columns: _Columns) -> list[tuple[str, str]]:
    """The ``waits`` row: each wait's ``┊`` with ``waited …`` beside it where it fits."""
    cells = _blank(columns)
    for wait, position in zip(columns.active.waits, columns.breaks, strict=True):
        cells[position] = ("┊", "bold")
        text = f"waited {format_seconds(wait.seconds)}"
        after = columns.first[wait.index + 1]
        room_after = columns.sizes[wait.index + 1]
        room_before = columns.sizes[wait.index]
        if len(text) <= room_after:
            start = after
        elif len(text) <= room_before:
            start = position - len(text)
        else:
            continue
        for offset, character in enumerate(text):
            cells[start + offset] = (character, "bold")
    return cells


def render_timeline(trace: Trace, console: Console, width: int | None = None) -> None:
    """Print ``trace``'s timeline on ``console``.

    Args:
        trace: the run, from :func:`plandag.trace.reader.load_trace`.
        console: where to print (a ``Console(record=True)`` in tests).
        width: total characters per row (default the console's width); the bars get what
            the label (26) and status (30) columns leave, at least 10.
    """
    total = width if width is not None else console.width
    bar_width = max(_MIN_BAR, total - _LABEL - _TAIL - 3)
    active = trace.active_time()
    columns = _Columns(active, bar_width)
    critical = trace.critical_path()
    on_path = set(critical)

    header = Text()
    header.append(f"run {trace.run_id}", style="bold")
    header.append("  ")
    header.append(trace.status, style=STATUS_STYLES.get(trace.status, "bold"))
    cost = trace.steps_cost_usd + trace.llm_cost_usd
    if active.waits or len(trace.segments) > 1:
        duration = (
            f"{format_seconds(active.total_s)} active, "
            f"{format_seconds(trace.duration_s)} wall clock"
        )
    else:
        duration = format_seconds(trace.duration_s)
    header.append(
        f"  {duration}  ${cost:.4f} (steps ${trace.steps_cost_usd:.4f}, "
        f"models ${trace.llm_cost_usd:.4f})  {trace.tokens:,} tokens  {len(trace.steps)} step(s)"
    )
    if len(trace.segments) > 1:
        header.append(f"  {len(trace.segments)} segments")
    console.print(header, soft_wrap=True)
    if trace.offline:
        console.print(Text(OFFLINE_LINE, style="yellow"), soft_wrap=True)
    warning = over_reservation_warning(trace.usage_over_reservation)
    if warning is not None:
        console.print(Text(warning, style="yellow"), soft_wrap=True)

    axis = [("─", "dim")] * columns.width
    for position in columns.breaks:
        axis[position] = ("┊", "bold")
    for segment in trace.segments[1:]:
        index = active.period_index(segment.start)
        if index == 0 or active.periods[index].start != segment.start:  # no wait marks it
            axis[columns.column(segment.start)] = ("┊", "bold")
    console.print(
        _row(Text("  time".ljust(_LABEL)), axis, Text(f"0 → {format_seconds(active.total_s)}")),
        soft_wrap=True,
    )
    if active.waits:
        tail = Text(f"{format_seconds(active.waited_s)} of waiting cut out")
        console.print(
            _row(Text("  waits".ljust(_LABEL)), _wait_labels(columns), tail), soft_wrap=True
        )

    def start_key(step_id: int) -> tuple[float, int]:
        step = trace.steps[step_id]
        return (step.start if step.start is not None else float("inf"), step_id)

    for step_id in sorted(trace.steps, key=start_key):
        step = trace.steps[step_id]
        style = STATUS_STYLES.get(step.status, "")
        mark = step_id in on_path
        cells = _blank(columns)
        bar_style = style + (" bold" if mark else "")
        if step.start is not None and step.end is not None:
            if step.attempts:
                # retry waits: between attempts in one period, never across a wait
                for low, high in attempt_hulls(trace, step_id, active).values():
                    _fill(cells, columns, low, high, "─", style)
                for attempt in step.attempts:
                    end = attempt.end if attempt.end is not None else step.end
                    _fill(cells, columns, attempt.start, end, "█", bar_style)
            elif step.status == "skipped":
                cells[columns.column(step.start)] = ("·", style)
            else:
                _fill(cells, columns, step.start, step.end, "█", bar_style)
        tail = Text(step.status, style=style)
        details = [format_seconds(trace.step_active_s(step, active))] if step.attempts else []
        if len(step.attempts) > 1:
            details.append(f"{len(step.attempts)} attempts")
        if step.reason:
            details.append(step.reason)
        if step.usage is not None:
            details.append(usage_text(step.usage))
        if step.superseded_by:
            details.append("→ " + ",".join(map(str, step.superseded_by)))
        if details:
            tail.append("  " + "  ".join(details))
        console.print(_row(_label(f"{step_id} {step.tool}", mark), cells, tail), soft_wrap=True)

    for call in trace.llm_calls:
        cells = _blank(columns)
        _fill(cells, columns, call.start, call.end, "▒", "blue")
        tail = Text(
            f"{call.input_tokens}→{call.output_tokens} tok ${call.cost_usd:.4f}"
            + (f"  {call.error}" if call.error else ""),
            style="red" if call.error else "blue",
        )
        label = _label(f"llm {call.purpose} {call.model}", False)
        console.print(_row(label, cells, tail), soft_wrap=True)

    for replan in trace.replans:
        cells = _blank(columns)
        _fill(cells, columns, replan.start, replan.end, "↻", "magenta")
        tail = Text(
            f"v{replan.version}  new {_ids(replan.new_steps)}  {replan.strategy}",
            style="magenta",
        )
        console.print(_row(_label(f"replan {replan.number}", False), cells, tail), soft_wrap=True)

    for approval in trace.approvals:
        cells = _blank(columns)
        style = {"approved": "green", "rejected": "red", "expired": "yellow"}.get(
            approval.decision, "cyan"
        )
        cells[columns.column(approval.end)] = ("◆", style)
        text = approval.decision + (f" by {approval.who}" if approval.who else "")
        console.print(
            _row(_label(f"approval v{approval.version}", False), cells, Text(text, style=style)),
            soft_wrap=True,
        )

    if critical:
        length = sum(trace.step_active_s(trace.steps[step_id], active) for step_id in critical)
        console.print(
            Text(
                f"critical path (*): {' → '.join(map(str, critical))}  ({format_seconds(length)})"
            ),
            soft_wrap=True,
        )
    for note in trace.notes:
        console.print(Text(f"note: {note}", style="dim"), soft_wrap=True)


def usage_text(usage: Mapping[str, Any]) -> str:
    """A document's model usage in a few words: ``5 calls 14,765→554 tok $0.0175`` (``2
    failed`` after the calls when some did)."""
    requests = _whole(usage.get("requests"))
    failed = _whole(usage.get("failed_requests"))
    cost = usage.get("cost_usd")
    usd = float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else 0.0
    text = f"{requests} call{'' if requests == 1 else 's'}"
    if failed:
        text += f" ({failed} failed)"
    text += (
        f" {_whole(usage.get('input_tokens')):,}→{_whole(usage.get('output_tokens')):,} tok"
        f" ${usd:.4f}"
    )
    return text


def _whole(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _ids(values: Iterable[int]) -> str:
    return ",".join(map(str, values)) or "none"
