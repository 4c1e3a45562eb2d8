"""A run's trace as one self-contained HTML page (``plandag trace RUN_ID --html FILE``).

The page holds, with inline CSS and inline SVG only (no script, no external URL, so it opens
anywhere and can be mailed):

* a header: run id, status, duration, cost, segments, the reader's notes;
* the DAG (``<svg id="dag">``): one ``<g class="node">`` per step, laid out by topological
  generation (:func:`networkx.topological_generations`: a step's column is the length of
  its longest chain of parents), one ``<path class="edge">`` per dependency, colored by
  status; the critical path drawn thick;
* a Gantt chart (``<svg id="gantt">``): one ``<rect class="bar">`` per step over the run's
  time, model calls as ``<rect class="llm">``, the critical path outlined;
* a table of steps (status, reason, times, attempts, checks), the plan versions, replans and
  approval decisions.

Every text from the trace is escaped with :func:`html.escape`.
"""

from __future__ import annotations

import html
import itertools
from pathlib import Path

import networkx as nx

from plandag.trace.model import Trace
from plandag.trace.timeline import format_seconds

__all__ = ["STATUS_COLORS", "render_html", "write_html"]

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

_CSS = """
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


def _generations(graph: nx.DiGraph) -> list[list[int]]:
    try:
        return [sorted(generation) for generation in nx.topological_generations(graph)]
    except nx.NetworkXUnfeasible:  # never for a compiled plan; draw it flat rather than fail
        return [sorted(graph.nodes)]


def _dag_svg(trace: Trace, critical: list[int]) -> str:
    graph = trace.graph()
    generations = _generations(graph)
    position: dict[int, tuple[int, int]] = {}
    for column, generation in enumerate(generations):
        for row, step_id in enumerate(generation):
            x = _MARGIN + column * (_NODE_W + _GAP_X)
            y = _MARGIN + row * (_NODE_H + _GAP_Y)
            position[step_id] = (x, y)
    rows = max((len(generation) for generation in generations), default=0)
    width = _MARGIN * 2 + max(1, len(generations)) * (_NODE_W + _GAP_X) - _GAP_X
    height = _MARGIN * 2 + max(1, rows) * (_NODE_H + _GAP_Y) - _GAP_Y
    critical_edges = set(itertools.pairwise(critical))
    on_path = set(critical)
    parts = [
        f'<svg id="dag" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="plan DAG">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="9" '
        'markerHeight="9" markerUnits="userSpaceOnUse" orient="auto">'
        '<path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>',
    ]
    for parent, child in sorted(graph.edges):
        x1, y1 = position[parent]
        x2, y2 = position[child]
        start_x, start_y = x1 + _NODE_W, y1 + _NODE_H / 2
        end_x, end_y = x2, y2 + _NODE_H / 2
        middle = (start_x + end_x) / 2
        css = "edge critical" if (parent, child) in critical_edges else "edge"
        parts.append(
            f'<path class="{css}" data-from="{parent}" data-to="{child}" '
            f'd="M{start_x:.1f},{start_y:.1f} C{middle:.1f},{start_y:.1f} {middle:.1f},'
            f'{end_y:.1f} {end_x:.1f},{end_y:.1f}" marker-end="url(#arrow)"/>'
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
            f"{_e(format_seconds(step.duration_s))}</text></g>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _gantt_svg(trace: Trace, critical: list[int]) -> str:
    start, span = trace.start, max(trace.duration_s, 1e-9)
    on_path = set(critical)

    def x_of(time: float) -> float:
        return _GANTT_LABEL + (time - start) / span * _GANTT_WIDTH

    steps = sorted(
        trace.steps.values(),
        key=lambda step: (step.start if step.start is not None else float("inf"), step.id),
    )
    rows = len(steps) + len(trace.llm_calls)
    width = _GANTT_LABEL + _GANTT_WIDTH + _MARGIN
    height = _AXIS + max(1, rows) * _ROW + _MARGIN
    parts = [
        f'<svg id="gantt" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="Gantt chart">'
    ]
    for tick in range(6):
        x = _GANTT_LABEL + tick * _GANTT_WIDTH / 5
        parts.append(
            f'<line class="axis" x1="{x:.1f}" y1="{_AXIS - 6}" x2="{x:.1f}" y2="{height}"/>'
            f'<text class="tick" x="{x + 2:.1f}" y="{_AXIS - 10}">'
            f"{_e(format_seconds(span * tick / 5 if span > 1e-6 else 0.0))}</text>"
        )
    for segment in trace.segments[1:]:
        x = x_of(segment.start)
        parts.append(
            f'<line class="segment" x1="{x:.1f}" y1="{_AXIS - 6}" x2="{x:.1f}" y2="{height}" '
            f'stroke="#000" stroke-dasharray="4 3"><title>segment {segment.number} '
            f"({_e(segment.command or '?')})</title></line>"
        )
    y = _AXIS
    for step in steps:
        mark = step.id in on_path
        label_css = "label critical" if mark else "label"
        label = ("* " if mark else "") + f"{step.id} {step.tool}"
        parts.append(f'<text class="{label_css}" x="6" y="{y + 16}">{_e(label[:30])}</text>')
        if step.start is not None and step.end is not None:
            left, right = x_of(step.start), x_of(step.end)
            bar_width = max(right - left, 2.0)
        else:
            left, bar_width = float(_GANTT_LABEL), 0.0
        css = f"bar status-{_e(step.status)}" + (" critical" if mark else "")
        title = f"step {step.id} {step.tool}: {step.status}, {format_seconds(step.duration_s)}"
        parts.append(
            f'<rect class="{css}" data-step="{step.id}" x="{left:.1f}" y="{y + 4}" '
            f'width="{bar_width:.1f}" height="{_ROW - 8}" fill="{_color(step.status)}">'
            f"<title>{_e(title)}</title></rect>"
        )
        y += _ROW
    for call in trace.llm_calls:
        parts.append(
            f'<text class="label" x="6" y="{y + 16}">{_e(("llm " + call.purpose)[:30])}</text>'
        )
        left, right = x_of(call.start), x_of(call.end)
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


def _steps_table(trace: Trace, critical: list[int]) -> str:
    on_path = set(critical)
    rows = [
        '<table id="steps"><thead><tr><th>step</th><th>tool</th><th>status</th>'
        "<th>reason</th><th>start</th><th>duration</th><th>attempts</th><th>checks</th>"
        "<th>depends on</th><th>critical</th></tr></thead><tbody>"
    ]
    for step in trace.steps.values():
        start = f"+{format_seconds(step.start - trace.start)}" if step.start is not None else ""
        checks = ", ".join(
            f"{check.kind}: {check.status}" + (f" ({check.message})" if check.message else "")
            for check in step.checks
        )
        reason = " — ".join(part for part in (step.reason, step.detail) if part)
        rows.append(
            f"<tr><td>{step.id}</td><td>{_e(step.tool)}</td>"
            f'<td><span class="status" style="background:{_color(step.status)}">'
            f"{_e(step.status)}</span></td><td>{_e(reason)}</td><td>{_e(start)}</td>"
            f"<td>{_e(format_seconds(step.duration_s))}</td><td>{len(step.attempts)}</td>"
            f"<td>{_e(checks)}</td><td>{_e(', '.join(map(str, step.depends_on)))}</td>"
            f"<td>{'*' if step.id in on_path else ''}</td></tr>"
        )
    rows.append("</tbody></table>")
    return "".join(rows)


def render_html(trace: Trace) -> str:
    """The page's text (see the module docstring)."""
    critical = trace.critical_path()
    cost = trace.steps_cost_usd + trace.llm_cost_usd
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>plandag run {_e(trace.run_id)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>plandag run {_e(trace.run_id)}</h1>",
        '<p class="summary">',
        f'<span>status <span class="status" style="background:{_color(trace.status)}">'
        f"{_e(trace.status)}</span></span>",
        f"<span>duration {_e(format_seconds(trace.duration_s))}</span>",
        f"<span>cost ${cost:.4f} (steps ${trace.steps_cost_usd:.4f}, models "
        f"${trace.llm_cost_usd:.4f})</span>",
        f"<span>{len(trace.steps)} step(s)</span>",
        f"<span>{len(trace.segments)} segment(s)</span></p>",
    ]
    if critical:
        parts.append(f"<p>critical path: {_e(' → '.join(map(str, critical)))}</p>")
    parts.extend(f'<p class="note">note: {_e(note)}</p>' for note in trace.notes)
    parts += [
        "<h2>DAG</h2>",
        _dag_svg(trace, critical),
        "<h2>Timeline</h2>",
        _gantt_svg(trace, critical),
        "<h2>Steps</h2>",
        _steps_table(trace, critical),
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
            f"{_e(replan.new_steps)} → v{replan.version}</li>"
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
        trace: the run, from :func:`plandag.trace.model.load_trace`.
        path: the file to write; its folder must exist.

    Returns:
        The path written.

    Raises:
        OSError: the file cannot be written.
    """
    target = Path(path)
    target.write_text(render_html(trace), encoding="utf-8")
    return target
