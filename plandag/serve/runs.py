"""What the runs pages show, read from the run store and the runs' traces.

* :func:`run_rows`: the runs list (``plandag runs``), each with its progress (steps done of
  the steps declared) and spend.
* :func:`run_view`: one run: its row, its steps and checks, its DAG and Gantt chart (the
  trace's SVG, :mod:`plandag.trace.html`) and the plan's Mermaid text
  (:func:`plandag.dag.graph.mermaid`), the model calls' spend, its open escalation with the
  actions that close it, and for an ``extract`` batch the batch summary.
* :func:`batch_summary`: an ``extract`` batch's documents counted as the summary table of
  ``plandag extract nfe`` counts them (records by status, failing checks, error codes).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping
from typing import Any

import networkx as nx

from plandag.runs.options import ran_offline
from plandag.store import RunRow, Store
from plandag.trace.html import PAGE_CSS

__all__ = ["TRACE_SVG_CSS", "BatchCounts", "batch_summary", "progress", "run_rows", "run_view"]

DONE_STATES = frozenset({"succeeded", "failed", "skipped", "cancelled"})
"""Step states that count as done in a run's progress."""


def progress(store: Store, row: RunRow) -> tuple[int, int]:
    """``(done, total)`` of a run: its steps in a terminal state of the steps declared (the
    current plan's steps before any is declared); for an ``extract`` batch, its documents
    recorded of its inputs."""
    if row.command == "extract":
        done = len(store.documents(row.run_id))
        return done, max(int(row.params.get("inputs") or 0), done)
    store.flush(durable=False)  # what the run queued is visible to this read
    counts = dict(
        store.connection.execute(
            "SELECT status, COUNT(*) FROM step WHERE run_id = ? GROUP BY status", (row.run_id,)
        ).fetchall()
    )
    if counts:
        done = sum(count for status, count in counts.items() if status in DONE_STATES)
        return done, sum(counts.values())
    versions = store.plan_versions(row.run_id)
    total = len(versions[-1].plan.get("steps", [])) if versions else 0
    return 0, total


def run_rows(store: Store, limit: int = 100) -> list[dict[str, Any]]:
    """The newest ``limit`` runs as the runs list shows them: ``run_id``, ``status`` (the
    run's :attr:`~plandag.store.RunRow.state`: ``crashed`` for a run whose process died),
    ``command``, ``offline`` (its model answers are the offline model's extracts:
    :func:`plandag.runs.options.ran_offline`), ``goal``, ``created`` (seconds since the
    epoch), ``done`` and ``total`` steps (for an ``extract`` batch: documents recorded,
    and its inputs), ``spent_usd``, ``spent_tokens``."""
    rows = []
    for row in store.runs(limit):
        done, total = progress(store, row)
        rows.append(
            {
                "run_id": row.run_id,
                "status": row.state,
                "command": row.command,
                "offline": ran_offline(row.options),
                "goal": row.goal or "",
                "created": row.created,
                "done": done,
                "total": total,
                "spent_usd": row.spent_usd,
                "spent_tokens": row.spent_tokens,
            }
        )
    return rows


@dataclasses.dataclass(frozen=True, slots=True)
class BatchCounts:
    """An ``extract`` batch's documents counted.

    Attributes:
        documents: documents recorded.
        by_status: records by status (``ok``, ``check_failed``, ``error``), most first.
        failing_checks: check name → records where it failed, most first.
        error_codes: error code → records carrying it, most first.
    """

    documents: int
    by_status: list[tuple[str, int]]
    failing_checks: list[tuple[str, int]]
    error_codes: list[tuple[str, int]]


def batch_summary(store: Store, batch_id: str) -> BatchCounts:
    """Count the documents of ``extract`` batch ``batch_id`` (module docstring)."""
    by_status: collections.Counter[str] = collections.Counter()
    failing: collections.Counter[str] = collections.Counter()
    codes: collections.Counter[str] = collections.Counter()
    documents = store.documents(batch_id)
    for document in documents:
        by_status[document.status] += 1
        record = document.record if isinstance(document.record, Mapping) else {}
        checks = record.get("checks")
        if isinstance(checks, Mapping):
            for name, outcome in checks.items():
                if isinstance(outcome, Mapping) and outcome.get("status") == "fail":
                    failing[str(name)] += 1
        for error in record.get("errors") or []:
            if isinstance(error, Mapping):
                codes[str(error.get("code"))] += 1
    return BatchCounts(
        len(documents), by_status.most_common(), failing.most_common(), codes.most_common()
    )


def _mermaid(plan: Mapping[str, Any]) -> str:
    """The plan's DAG as Mermaid text: declared dependencies and those its references imply
    (a step reading ``<step_N_result>`` comes after step N)."""
    from plandag.dag.graph import mermaid
    from plandag.dag.references import find_references

    graph = nx.DiGraph()
    labels: dict[int, str] = {}
    steps = plan.get("steps", [])
    ids = {int(step["id"]) for step in steps}
    for step in steps:
        step_id = int(step["id"])
        graph.add_node(step_id)
        labels[step_id] = f"{step_id}. {step.get('tool', '')}"
        parents = {int(parent) for parent in step.get("depends_on") or []}
        parents |= {
            reference.step_id
            for _, reference in find_references(step.get("args") or {})
            if reference.step_id is not None
        }
        for parent in sorted(parents & ids):
            graph.add_edge(parent, step_id)
    return mermaid(graph, labels)


TRACE_SVG_CSS = "\n".join(
    line
    for line in PAGE_CSS.splitlines()
    if line.startswith(("svg", ".node", ".edge", ".bar", ".llm", ".axis", ".wait", ".label"))
)
"""The trace page's style rules for its DAG and Gantt SVG (:data:`plandag.trace.html.PAGE_CSS`
without its page-wide rules)."""


def run_view(store: Store, run_id: str) -> dict[str, Any]:
    """Everything the run page shows (module docstring).

    Returns:
        ``row`` (:class:`~plandag.store.RunRow`), ``done``/``total``, ``steps`` (the store's
        step rows), ``versions``, ``decisions``, ``llm`` (model calls: ``calls``,
        ``input_tokens``, ``output_tokens``, ``cost_usd``), ``dag``/``gantt``/``table``
        (SVG and HTML from the trace, "" when it has no trace yet), ``mermaid`` (the current
        plan's), ``critical``, ``escalation`` (the open one's ``reason``, ``detail`` and
        ``actions``, or None), ``batch`` (:class:`BatchCounts` for an ``extract`` batch,
        else None).

    Raises:
        InputError: no such run.
    """
    from plandag.trace.html import dag_svg, gantt_svg, steps_table
    from plandag.trace.reader import load_trace

    row = store.run(run_id)
    versions = store.plan_versions(run_id)
    done, total = progress(store, row)
    llm = store.connection.execute(
        "SELECT COUNT(*), COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), "
        "COALESCE(SUM(cost_usd), 0) FROM llm_call WHERE run_id = ?",
        (run_id,),
    ).fetchone()
    view: dict[str, Any] = {
        "row": row,
        "done": done,
        "total": total,
        "steps": list(store.steps(run_id).values()),
        "versions": versions,
        "decisions": store.decisions(run_id),
        "llm": {
            "calls": llm[0],
            "input_tokens": llm[1],
            "output_tokens": llm[2],
            "cost_usd": float(llm[3]),
        },
        "dag": "",
        "gantt": "",
        "table": "",
        "critical": [],
        "mermaid": _mermaid(versions[-1].plan) if versions else "",
        "escalation": None,
        "awaiting": None,
        "batch": batch_summary(store, run_id) if row.command == "extract" else None,
    }
    path = store.trace_path(run_id)
    if path.exists():
        trace = load_trace(path)
        critical = trace.critical_path()
        view.update(
            dag=dag_svg(trace, critical),
            gantt=gantt_svg(trace, critical),
            table=steps_table(trace, critical),
            critical=critical,
        )
    if row.status == "awaiting_approval" and versions:
        view["awaiting"] = {
            "reason": row.awaiting_reason,
            "expires_at": row.expires_at,
            "plan_hash": versions[-1].hash,
        }
    cases = store.escalations(run_id=run_id)
    if cases and row.status == "escalated":
        case = cases[-1]
        context = case.context
        actions = context.get("actions") or {}
        view["escalation"] = {
            "reason": case.reason,
            "detail": context.get("detail"),
            "time": case.time,
            "actions": actions,
            "plan_hash": versions[-1].hash if versions else None,
        }
    return view
