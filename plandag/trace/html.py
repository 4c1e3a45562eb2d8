"""A run's trace as one self-contained HTML page (``plandag trace RUN_ID --html FILE``).

The page holds, with inline CSS and inline SVG only (no script, no external URL, so it opens
anywhere and can be mailed):

* a header: run id, status, duration (active and wall clock apart when the run waited
  between segments), cost, tokens, segments, the reader's notes;
* the DAG (``<svg id="dag">``): one ``<g class="node">`` per step, laid out by topological
  generation (:func:`networkx.topological_generations`: a step's column is the length of
  its longest chain of parents), one ``<path class="edge">`` per dependency, the critical
  path drawn thick; an edge that skips a column runs along a lane above the boxes, so that
  no edge passes behind a box (:func:`dag_layout`);
* a Gantt chart (``<svg id="gantt">``) over the run's active time
  (:meth:`plandag.trace.model.Trace.active_time`): one ``<rect class="bar">`` per step and
  active period it ran in (``data-period``; a step whose attempts lie in two segments gets
  two bars, never one across the wait), model calls as ``<rect class="llm">``, the critical
  path outlined. Each wait between periods is cut out and drawn as a narrow shaded band
  (``<g class="wait">``, a dashed line and its label ``waited 1m 40s``), each segment's start
  as a dashed ``<line class="segment">``;
* a table of steps (status, reason, times, attempts, checks), the plan versions, replans and
  approval decisions.

Every text from the trace is escaped with :func:`html.escape`.
"""

from __future__ import annotations

import dataclasses
import html
import itertools
from pathlib import Path

import networkx as nx

from plandag.trace.model import OFFLINE_LINE, ActiveTime, Trace
from plandag.trace.timeline import attempt_hulls, format_seconds, usage_text

__all__ = [
    "PAGE_CSS",
    "STATUS_COLORS",
    "DagLayout",
    "dag_layout",
    "dag_svg",
    "gantt_svg",
    "render_html",
    "steps_table",
    "write_html",
]

STATUS_COLORS: dict[str, str] = {
    "succeeded": "#2e7d32",
    "failed": "#c62828",
    "skipped": "#f9a825",
    "cancelled": "#8e24aa",
    "running": "#0277bd",
    "unknown": "#ef6c00",
    "pending": "#9e9e9e",
}
"""Fill color of each step status (nodes, bars, table)."""

_NODE_W, _NODE_H, _GAP_X, _GAP_Y, _MARGIN = 170, 44, 70, 18, 20
_GANTT_LABEL, _GANTT_WIDTH, _ROW, _AXIS = 220, 900, 24, 30
_WAIT_WIDTH, _WAIT_BAND = 24.0, 16

PAGE_CSS = """
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; background: #fff; }
h1 { font-size: 20px; margin: 0 0 8px; } h2 { font-size: 16px; margin: 24px 0 8px; }
.summary span { margin-right: 18px; } .note { color: #777; font-size: 13px; }
svg { border: 1px solid #ddd; background: #fafafa; }
.node rect { stroke: #333; stroke-width: 1; }
.node.critical rect { stroke: #000; stroke-width: 3; }
.node text { font-size: 12px; fill: #fff; font-weight: 600; }
.edge { fill: none; stroke: #888; stroke-width: 1.5; }
.edge.critical { stroke: #000; stroke-width: 3; }
.bar.critical { stroke: #000; stroke-width: 2; }
.llm { fill: #1565c0; opacity: 0.7; }
.axis { stroke: #ccc; } .tick { font-size: 11px; fill: #666; }
.wait rect { fill: #e6e6e6; } .wait line { stroke: #555; stroke-dasharray: 4 3; }
.wait text { font-size: 11px; fill: #444; }
.label { font-size: 12px; fill: #222; } .label.critical { font-weight: 700; }
table { border-collapse: collapse; font-size: 13px; }
td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
.status { color: #fff; padding: 1px 6px; border-radius: 3px; font-weight: 600; }
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _color(status: str) -> str:
    return STATUS_COLORS.get(status, "#607d8b")


def _px(value: float) -> int | float:
    """A coordinate as written in the SVG: a whole number without a decimal point."""
    return int(value) if float(value).is_integer() else value


def _generations(graph: nx.DiGraph) -> list[list[int]]:
    try:
        return [sorted(generation) for generation in nx.topological_generations(graph)]
    except nx.NetworkXUnfeasible:  # never for a compiled plan; draw it flat rather than fail
        return [sorted(graph.nodes)]


_LANE = 10
"""Vertical distance, px, between the lanes above the boxes that carry the edges skipping a
column."""


@dataclasses.dataclass(frozen=True)
class DagLayout:
    """Where the DAG's boxes and edges are drawn (px, y downwards).

    Attributes:
        boxes: step id → ``(x, y)`` of its box's top-left corner; every box is
            ``_NODE_W`` x ``_NODE_H``.
        edges: ``(parent, child)`` → the points of its path, in order. An edge between
            neighbouring columns is a curve whose control points are these four (it stays
            inside their hull, in the gap between the columns); an edge that skips a column
            is the polyline through these points: out of the parent's right side into the
            gap after it, up to a lane of its own above every box, along the lane, down the
            gap before the child, into the child's left side. No edge crosses a box other
            than its ends'.
        width: the drawing's width.
        height: the drawing's height.
    """

    boxes: dict[int, tuple[float, float]]
    edges: dict[tuple[int, int], list[tuple[float, float]]]
    width: float
    height: float

    def curved(self, edge: tuple[int, int]) -> bool:
        """Whether ``edge`` is drawn as a curve (between neighbouring columns)."""
        return len(self.edges[edge]) == 4


def dag_layout(graph: nx.DiGraph) -> DagLayout:
    """The DAG's layout: a column per topological generation
    (:func:`networkx.topological_generations`), a row per step within it, and each edge
    routed so that it is seen whole (:class:`DagLayout`).

    Args:
        graph: the steps (nodes, step ids) and their dependencies (edges parent → child).

    Returns:
        The boxes' places, the edges' paths and the drawing's size.
    """
    generations = _generations(graph)
    column_of = {step: column for column, steps in enumerate(generations) for step in steps}
    skipping = sorted(
        (parent, child) for parent, child in graph.edges if column_of[child] - column_of[parent] > 1
    )
    top = _MARGIN + len(skipping) * _LANE + (_GAP_Y if skipping else 0)
    boxes: dict[int, tuple[float, float]] = {}
    for column, generation in enumerate(generations):
        for row, step_id in enumerate(generation):
            x = _MARGIN + column * (_NODE_W + _GAP_X)
            boxes[step_id] = (float(x), float(top + row * (_NODE_H + _GAP_Y)))
    rows = max((len(generation) for generation in generations), default=0)
    width = _MARGIN * 2 + max(1, len(generations)) * (_NODE_W + _GAP_X) - _GAP_X
    height = top + _MARGIN + max(1, rows) * (_NODE_H + _GAP_Y) - _GAP_Y
    lanes = {edge: _MARGIN + index * _LANE for index, edge in enumerate(skipping)}
    edges: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for parent, child in sorted(graph.edges):
        x1, y1 = boxes[parent]
        x2, y2 = boxes[child]
        start = (x1 + _NODE_W, y1 + _NODE_H / 2)
        end = (x2, y2 + _NODE_H / 2)
        lane = lanes.get((parent, child))
        if lane is None:
            middle = (start[0] + end[0]) / 2
            edges[(parent, child)] = [start, (middle, start[1]), (middle, end[1]), end]
            continue
        # the gap channels: a little apart per edge, so that parallel ones stay apart
        offset = 8 + (lane - _MARGIN) / _LANE % 5 * 6
        out_x = start[0] + offset
        in_x = end[0] - offset
        edges[(parent, child)] = [
            start,
            (out_x, start[1]),
            (out_x, lane),
            (in_x, lane),
            (in_x, end[1]),
            end,
        ]
    return DagLayout(boxes, edges, float(width), float(height))


def dag_svg(trace: Trace, critical: list[int]) -> str:
    """The DAG as inline SVG (``<svg id="dag">``, see the module docstring); ``critical``:
    the critical path's step ids (:meth:`Trace.critical_path`), drawn thick."""
    graph = trace.graph()
    active = trace.active_time()
    layout = dag_layout(graph)
    position = {step: (_px(x), _px(y)) for step, (x, y) in layout.boxes.items()}
    width, height = _px(layout.width), _px(layout.height)
    critical_edges = set(itertools.pairwise(critical))
    on_path = set(critical)
    parts = [
        f'<svg id="dag" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="plan DAG">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="9" '
        'markerHeight="9" markerUnits="userSpaceOnUse" orient="auto">'
        '<path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>',
    ]
    for (parent, child), points in sorted(layout.edges.items()):
        css = "edge critical" if (parent, child) in critical_edges else "edge"
        (x0, y0), *rest = points
        if layout.curved((parent, child)):
            (ax, ay), (bx, by), (ex, ey) = rest
            shape = f"M{x0:.1f},{y0:.1f} C{ax:.1f},{ay:.1f} {bx:.1f},{by:.1f} {ex:.1f},{ey:.1f}"
        else:
            shape = f"M{x0:.1f},{y0:.1f} " + " ".join(f"L{x:.1f},{y:.1f}" for x, y in rest)
        parts.append(
            f'<path class="{css}" data-from="{parent}" data-to="{child}" '
            f'd="{shape}" marker-end="url(#arrow)"/>'
        )
    for step_id in sorted(position):
        step = trace.steps[step_id]
        x, y = position[step_id]
        css = f"node status-{_e(step.status)}" + (" critical" if step_id in on_path else "")
        label = f"{step_id} {step.tool}"
        if len(label) > 22:
            label = label[:21] + "…"
        title = f"step {step_id}: {step.tool} — {step.status}"
        if step.reason:
            title += f" ({step.reason})"
        parts.append(
            f'<g class="{css}" data-step="{step_id}"><title>{_e(title)}</title>'
            f'<rect x="{x}" y="{y}" rx="6" width="{_NODE_W}" height="{_NODE_H}" '
            f'fill="{_color(step.status)}"/>'
            f'<text x="{x + 8}" y="{y + 18}">{_e(label)}</text>'
            f'<text x="{x + 8}" y="{y + 34}">{_e(step.status)} · '
            f"{_e(format_seconds(trace.step_active_s(step, active)))}</text></g>"
        )
    parts.append("</svg>")
    return "".join(parts)


class _GanttScale:
    """x positions over active time: each active period gets width in proportion to its
    seconds, each wait a band of ``_WAIT_WIDTH`` px (narrower when there are many)."""

    def __init__(self, active: ActiveTime, width: float) -> None:
        self.active = active
        count = len(active.waits)
        self.wait_width = min(_WAIT_WIDTH, width / (2 * count)) if count else 0.0
        usable = width - count * self.wait_width
        total = active.total_s
        self.lefts: list[float] = []
        self.sizes: list[float] = []
        self.wait_lefts: list[float] = []
        position = float(_GANTT_LABEL)
        for index, period in enumerate(active.periods):
            size = period.seconds / total * usable if total > 0 else usable / len(active.periods)
            self.lefts.append(position)
            self.sizes.append(size)
            position += size
            if index < count:
                self.wait_lefts.append(position)
                position += self.wait_width

    def x(self, time: float) -> float:
        """The x of ``time`` (seconds since the epoch); a time in a wait lies in its band."""
        wait = self.active.wait_at(time)
        if wait is not None:
            share = (time - wait.start) / wait.seconds
            return self.wait_lefts[wait.index] + share * self.wait_width
        index = self.active.period_index(time)
        period = self.active.periods[index]
        share = (time - period.start) / period.seconds if period.seconds > 0 else 0.0
        return self.lefts[index] + min(max(share, 0.0), 1.0) * self.sizes[index]

    def x_of_active(self, seconds: float) -> float:
        """The x of ``seconds`` of active time (the earlier period's end at a wait)."""
        for index, period in enumerate(self.active.periods):
            if seconds <= period.offset_s + period.seconds or index == len(self.sizes) - 1:
                within = seconds - period.offset_s
                share = within / period.seconds if period.seconds > 0 else 0.0
                return self.lefts[index] + min(max(share, 0.0), 1.0) * self.sizes[index]
        return float(_GANTT_LABEL)  # no period: never (ActiveTime has at least one)


def gantt_svg(trace: Trace, critical: list[int]) -> str:
    """The Gantt chart as inline SVG (``<svg id="gantt">``, see the module docstring) over
    the run's active time; ``critical``: the critical path's step ids, outlined."""
    active = trace.active_time()
    scale = _GanttScale(active, _GANTT_WIDTH)
    span = active.total_s
    on_path = set(critical)
    top = _WAIT_BAND if active.waits else 0
    axis = top + _AXIS

    steps = sorted(
        trace.steps.values(),
        key=lambda step: (step.start if step.start is not None else float("inf"), step.id),
    )
    rows = len(steps) + len(trace.llm_calls)
    width = _GANTT_LABEL + _GANTT_WIDTH + _MARGIN
    height = axis + max(1, rows) * _ROW + _MARGIN
    parts = [
        f'<svg id="gantt" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="Gantt chart">'
    ]
    for tick in range(6):
        x = scale.x_of_active(span * tick / 5)
        parts.append(
            f'<line class="axis" x1="{x:.1f}" y1="{axis - 6}" x2="{x:.1f}" y2="{height}"/>'
            f'<text class="tick" x="{x + 2:.1f}" y="{axis - 10}">'
            f"{_e(format_seconds(span * tick / 5 if span > 1e-6 else 0.0))}</text>"
        )
    for wait in active.waits:
        left = scale.wait_lefts[wait.index]
        middle = left + scale.wait_width / 2
        label = f"waited {format_seconds(wait.seconds)}"
        parts.append(
            f'<g class="wait" data-waited="{wait.seconds:.3f}"><title>{_e(label)} (not drawn to '
            f"scale)</title>"
            f'<rect x="{left:.1f}" y="{axis - 6}" width="{scale.wait_width:.1f}" '
            f'height="{height - axis + 6}"/>'
            f'<line x1="{middle:.1f}" y1="{axis - 6}" x2="{middle:.1f}" y2="{height}"/>'
            f'<text x="{middle:.1f}" y="12" text-anchor="middle">{_e(label)}</text></g>'
        )
    for segment in trace.segments[1:]:
        x = scale.x(segment.start)
        parts.append(
            f'<line class="segment" x1="{x:.1f}" y1="{axis - 6}" x2="{x:.1f}" y2="{height}" '
            f'stroke="#000" stroke-dasharray="4 3"><title>segment {segment.number} '
            f"({_e(segment.command or '?')})</title></line>"
        )
    y = axis
    for step in steps:
        mark = step.id in on_path
        label_css = "label critical" if mark else "label"
        label = ("* " if mark else "") + f"{step.id} {step.tool}"
        parts.append(f'<text class="{label_css}" x="6" y="{y + 16}">{_e(label[:30])}</text>')
        css = f"bar status-{_e(step.status)}" + (" critical" if mark else "")
        title = (
            f"step {step.id} {step.tool}: {step.status}, "
            f"{format_seconds(trace.step_active_s(step, active))}"
        )
        if len(step.attempts) > 1:
            title += f", {len(step.attempts)} attempts"
        if step.usage is not None:
            title += f", {usage_text(step.usage)}"
        for period, left, bar_width in _step_bars(trace, step.id, scale):
            parts.append(
                f'<rect class="{css}" data-step="{step.id}" data-period="{period}" '
                f'x="{left:.1f}" y="{y + 4}" width="{bar_width:.1f}" height="{_ROW - 8}" '
                f'fill="{_color(step.status)}"><title>{_e(title)}</title></rect>'
            )
        y += _ROW
    for call in trace.llm_calls:
        parts.append(
            f'<text class="label" x="6" y="{y + 16}">{_e(("llm " + call.purpose)[:30])}</text>'
        )
        left, right = scale.x(call.start), scale.x(call.end)
        title = (
            f"{call.provider}:{call.model} {call.input_tokens}→{call.output_tokens} tokens "
            f"${call.cost_usd:.4f}"
        )
        parts.append(
            f'<rect class="llm" x="{left:.1f}" y="{y + 4}" width="{max(right - left, 2.0):.1f}" '
            f'height="{_ROW - 8}"><title>{_e(title)}</title></rect>'
        )
        y += _ROW
    parts.append("</svg>")
    return "".join(parts)


def _step_bars(trace: Trace, step_id: int, scale: _GanttScale) -> list[tuple[int, float, float]]:
    """A step's bars as ``(period index, x, width)``: per active period, from its first
    attempt's start to its last attempt's end in that period
    (:func:`plandag.trace.timeline.attempt_hulls`: retry waits within one process included,
    waits between segments never), or from its start to its end when it has no attempt; at
    least 2 px wide. A step never started (pending) gets one empty bar at the left edge."""
    step = trace.steps[step_id]
    if step.start is None or step.end is None:
        return [(0, float(_GANTT_LABEL), 0.0)]
    hulls = attempt_hulls(trace, step_id, scale.active)
    if not hulls:
        pieces = scale.active.pieces(step.start, step.end) or [
            (scale.active.period_index(step.start), step.start, step.start)
        ]
        hulls = {index: (low, high) for index, low, high in pieces}
    bars = []
    for index, (low, high) in sorted(hulls.items()):
        left, right = scale.x(low), scale.x(high)
        bars.append((index, left, max(right - left, 2.0)))
    return bars


def steps_table(trace: Trace, critical: list[int]) -> str:
    """The steps as an HTML ``<table id="steps">``: status, reason, start, duration,
    attempts, checks (kind, status, message), dependencies, and a ``*`` on the critical
    path; every text escaped."""
    on_path = set(critical)
    rows = [
        '<table id="steps"><thead><tr><th>step</th><th>tool</th><th>status</th>'
        "<th>reason</th><th>start</th><th>duration</th><th>attempts</th><th>checks</th>"
        "<th>depends on</th><th>critical</th></tr></thead><tbody>"
    ]
    active = trace.active_time()
    for step in trace.steps.values():
        start = f"+{format_seconds(active.seconds(step.start))}" if step.start is not None else ""
        checks = ", ".join(
            f"{check.kind}: {check.status}" + (f" ({check.message})" if check.message else "")
            for check in step.checks
        )
        usage = usage_text(step.usage) if step.usage is not None else None
        reason = " — ".join(part for part in (step.reason, step.detail, usage) if part)
        rows.append(
            f"<tr><td>{step.id}</td><td>{_e(step.tool)}</td>"
            f'<td><span class="status" style="background:{_color(step.status)}">'
            f"{_e(step.status)}</span></td><td>{_e(reason)}</td><td>{_e(start)}</td>"
            f"<td>{_e(format_seconds(active.between(step.start, step.end)))}</td>"
            f"<td>{len(step.attempts)}</td>"
            f"<td>{_e(checks)}</td><td>{_e(', '.join(map(str, step.depends_on)))}</td>"
            f"<td>{'*' if step.id in on_path else ''}</td></tr>"
        )
    rows.append("</tbody></table>")
    return "".join(rows)


def render_html(trace: Trace) -> str:
    """The page's text (see the module docstring)."""
    critical = trace.critical_path()
    cost = trace.steps_cost_usd + trace.llm_cost_usd
    active = trace.active_time()
    duration = format_seconds(trace.duration_s)
    if active.waits or len(trace.segments) > 1:
        duration = (
            f"{format_seconds(active.total_s)} active, "
            f"{format_seconds(trace.duration_s)} wall clock"
        )
    waited = (
        f"<span>waited {_e(format_seconds(active.waited_s))} between segments (not drawn)</span>"
        if active.waits and len(trace.segments) > 1
        else ""
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>plandag run {_e(trace.run_id)}</title>",
        f"<style>{PAGE_CSS}</style></head><body>",
        f"<h1>plandag run {_e(trace.run_id)}</h1>",
        *(
            [f'<p class="goal">{_e(trace.segments[0].goal)}</p>']
            if trace.segments and trace.segments[0].goal
            else []
        ),
        '<p class="summary">',
        f'<span>status <span class="status" style="background:{_color(trace.status)}">'
        f"{_e(trace.status)}</span></span>",
        f"<span>duration {_e(duration)}</span>{waited}",
        f"<span>cost ${cost:.4f} (steps ${trace.steps_cost_usd:.4f}, models "
        f"${trace.llm_cost_usd:.4f})</span>",
        f"<span>{trace.tokens:,} tokens</span>",
        f"<span>{len(trace.steps)} step(s)</span>",
        f"<span>{len(trace.segments)} segment(s)</span></p>",
    ]
    if trace.offline:
        parts.append(f'<p class="note offline">{_e(OFFLINE_LINE)}</p>')
    if critical:
        parts.append(f"<p>critical path: {_e(' → '.join(map(str, critical)))}</p>")
    parts.extend(f'<p class="note">note: {_e(note)}</p>' for note in trace.notes)
    parts += [
        "<h2>DAG</h2>",
        dag_svg(trace, critical),
        "<h2>Timeline</h2>",
        gantt_svg(trace, critical),
        "<h2>Steps</h2>",
        steps_table(trace, critical),
    ]
    if trace.plans:
        parts.append("<h2>Plan versions</h2><ul>")
        parts.extend(
            f"<li>v{plan.version} ({_e(plan.source)}): <code>{_e(plan.hash)}</code></li>"
            for plan in trace.plans
        )
        parts.append("</ul>")
    if trace.replans:
        parts.append("<h2>Replans</h2><ul>")
        parts.extend(
            f"<li>replan {replan.number}: failed {_e(replan.failed)}, new steps "
            f"{_e(replan.new_steps)} → v{replan.version} ({_e(replan.strategy)}: "
            f"{_e(replan.strategy_reason)})</li>"
            for replan in trace.replans
        )
        parts.append("</ul>")
    if trace.approvals:
        parts.append("<h2>Approvals</h2><ul>")
        for approval in trace.approvals:
            text = f"v{approval.version} {approval.decision}"
            if approval.who:
                text += f" by {approval.who}"
            if approval.feedback:
                text += f": {approval.feedback}"
            parts.append(f"<li>{_e(text)}</li>")
        parts.append("</ul>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write_html(trace: Trace, path: Path | str) -> Path:
    """Write ``trace``'s page to ``path`` (UTF-8), replacing it.

    Args:
        trace: the run, from :func:`plandag.trace.reader.load_trace`.
        path: the file to write; its folder must exist.

    Returns:
        The path written.

    Raises:
        OSError: the file cannot be written.
    """
    target = Path(path)
    target.write_text(render_html(trace), encoding="utf-8")
    return target
