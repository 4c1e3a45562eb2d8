"""Run traces: a JSON Lines file per run, read back, drawn and compared (ARCHITECTURE.md,
"People in the loop").

* :class:`~plandag.trace.writer.TraceWriter` writes the file (and observes the scheduler);
* :func:`~plandag.trace.reader.load_trace` reads it into a :class:`~plandag.trace.model.Trace`;
* :func:`~plandag.trace.timeline.render_timeline` draws it in the terminal,
  :func:`~plandag.trace.html.write_html` as a self-contained page (DAG and Gantt chart);
* :func:`~plandag.trace.diff.diff_traces` compares two runs.
"""

import typing as _typing

from plandag.lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
    from plandag.trace.diff import TraceDiff as TraceDiff
    from plandag.trace.diff import diff_traces as diff_traces
    from plandag.trace.diff import render_diff as render_diff
    from plandag.trace.html import write_html as write_html
    from plandag.trace.model import Trace as Trace
    from plandag.trace.reader import load_trace as load_trace
    from plandag.trace.timeline import render_timeline as render_timeline
    from plandag.trace.writer import TraceWriter as TraceWriter

__all__ = [
    "Trace",
    "TraceDiff",
    "TraceWriter",
    "diff_traces",
    "load_trace",
    "render_diff",
    "render_timeline",
    "write_html",
]

if not _typing.TYPE_CHECKING:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "TraceDiff": ("plandag.trace.diff", "TraceDiff"),
            "diff_traces": ("plandag.trace.diff", "diff_traces"),
            "render_diff": ("plandag.trace.diff", "render_diff"),
            "write_html": ("plandag.trace.html", "write_html"),
            "Trace": ("plandag.trace.model", "Trace"),
            "load_trace": ("plandag.trace.reader", "load_trace"),
            "render_timeline": ("plandag.trace.timeline", "render_timeline"),
            "TraceWriter": ("plandag.trace.writer", "TraceWriter"),
        },
    )
