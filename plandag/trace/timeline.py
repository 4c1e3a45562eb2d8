"""The terminal timeline of a run (``plandag trace RUN_ID``): steps as bars over time.

One row per step (in order of start), each attempt a run of ``█`` (retry waits ``─``, a
skipped step a ``·`` where it was skipped), colored by status; the steps on the critical
path (longest chain of measured durations, :meth:`plandag.trace.model.Trace.critical_path`)
carry a ``*`` and are bold. Model calls (``llm``), replans and approval decisions are rows
too. A header gives the run id, status, duration and cost; an axis row marks where each
resumed segment began (``┊``).
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Console
from rich.text import Text

from plandag.trace.model import Trace

__all__ = ["STATUS_STYLES", "format_seconds", "render_timeline"]

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


class _Scale:
    def __init__(self, start: float, end: float, width: int) -> None:
        self.start = start
        self.span = max(end - start, 1e-9)
        self.width = width

    def column(self, time: float) -> int:
        position = int((time - self.start) / self.span * self.width)
        return min(max(position, 0), self.width - 1)


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


def _blank(width: int) -> list[tuple[str, str]]:
    return [(" ", "")] * width


def _fill(
    cells: list[tuple[str, str]],
    scale: _Scale,
    start: float,
    end: float,
    character: str,
    style: str,
) -> None:
    first, last = scale.column(start), scale.column(end)
    for position in range(first, max(first, last) + 1):
        cells[position] = (character, style)


def render_timeline(trace: Trace, console: Console, width: int | None = None) -> None:
    """Print ``trace``'s timeline on ``console``.

    Args:
        trace: the run, from :func:`plandag.trace.model.load_trace`.
        console: where to print (a ``Console(record=True)`` in tests).
        width: total characters per row (default the console's width); the bars get what
            the label (26) and status (30) columns leave, at least 10.
    """
    total = width if width is not None else console.width
    bar_width = max(_MIN_BAR, total - _LABEL - _TAIL - 3)
    scale = _Scale(trace.start, trace.end, bar_width)
    critical = trace.critical_path()
    on_path = set(critical)

    header = Text()
    header.append(f"run {trace.run_id}", style="bold")
    header.append("  ")
    header.append(trace.status, style=STATUS_STYLES.get(trace.status, "bold"))
    cost = trace.steps_cost_usd + trace.llm_cost_usd
    header.append(
        f"  {format_seconds(trace.duration_s)}  ${cost:.4f} (steps ${trace.steps_cost_usd:.4f}, "
        f"models ${trace.llm_cost_usd:.4f})  {len(trace.steps)} step(s)"
    )
    if len(trace.segments) > 1:
        header.append(f"  {len(trace.segments)} segments")
    console.print(header, soft_wrap=True)

    axis = [("─", "dim")] * bar_width
    for segment in trace.segments[1:]:
        axis[scale.column(segment.start)] = ("┊", "bold")
    console.print(
        _row(Text("  time".ljust(_LABEL)), axis, Text(f"0 → {format_seconds(trace.duration_s)}")),
        soft_wrap=True,
    )

    def start_key(step_id: int) -> tuple[float, int]:
        step = trace.steps[step_id]
        return (step.start if step.start is not None else float("inf"), step_id)

    for step_id in sorted(trace.steps, key=start_key):
        step = trace.steps[step_id]
        style = STATUS_STYLES.get(step.status, "")
        mark = step_id in on_path
        cells = _blank(bar_width)
        bar_style = style + (" bold" if mark else "")
        if step.start is not None and step.end is not None:
            if step.attempts:
                _fill(cells, scale, step.start, step.end, "─", style)
                for attempt in step.attempts:
                    end = attempt.end if attempt.end is not None else step.end
                    _fill(cells, scale, attempt.start, end, "█", bar_style)
            elif step.status == "skipped":
                cells[scale.column(step.start)] = ("·", style)
            else:
                _fill(cells, scale, step.start, step.end, "█", bar_style)
        tail = Text(step.status, style=style)
        details = [format_seconds(step.duration_s)] if step.attempts else []
        if len(step.attempts) > 1:
            details.append(f"{len(step.attempts)} attempts")
        if step.reason:
            details.append(step.reason)
        if step.superseded_by:
            details.append("→ " + ",".join(map(str, step.superseded_by)))
        if details:
            tail.append("  " + "  ".join(details))
        console.print(_row(_label(f"{step_id} {step.tool}", mark), cells, tail), soft_wrap=True)

    for call in trace.llm_calls:
        cells = _blank(bar_width)
        _fill(cells, scale, call.start, call.end, "▒", "blue")
        tail = Text(
            f"{call.input_tokens}→{call.output_tokens} tok ${call.cost_usd:.4f}"
            + (f"  {call.error}" if call.error else ""),
            style="red" if call.error else "blue",
        )
        label = _label(f"llm {call.purpose} {call.model}", False)
        console.print(_row(label, cells, tail), soft_wrap=True)

    for replan in trace.replans:
        cells = _blank(bar_width)
        _fill(cells, scale, replan.start, replan.end, "↻", "magenta")
        tail = Text(f"v{replan.version}  new {_ids(replan.new_steps)}", style="magenta")
        console.print(_row(_label(f"replan {replan.number}", False), cells, tail), soft_wrap=True)

    for approval in trace.approvals:
        cells = _blank(bar_width)
        style = {"approved": "green", "rejected": "red", "expired": "yellow"}.get(
            approval.decision, "cyan"
        )
        cells[scale.column(approval.end)] = ("◆", style)
        text = approval.decision + (f" by {approval.who}" if approval.who else "")
        console.print(
            _row(_label(f"approval v{approval.version}", False), cells, Text(text, style=style)),
            soft_wrap=True,
        )

    if critical:
        length = sum(trace.steps[step_id].duration_s for step_id in critical)
        console.print(
            Text(
                f"critical path (*): {' → '.join(map(str, critical))}  ({format_seconds(length)})"
            ),
            soft_wrap=True,
        )
    for note in trace.notes:
        console.print(Text(f"note: {note}", style="dim"), soft_wrap=True)


def _ids(values: Iterable[int]) -> str:
    return ",".join(map(str, values)) or "none"
