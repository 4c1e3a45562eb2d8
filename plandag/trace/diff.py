"""Comparing two runs (``plandag diff RUN_A RUN_B``): their plans and their outcomes.

Plans are compared on each run's steps as planned (every plan version's steps, the latest
version winning; without a plan line, the steps the trace saw). Steps are matched:

1. by id, when the tool and the args are the same in both runs;
2. then by tool and args among the steps left (a step renumbered: ``moved``);
3. then by id again (same id, another tool, args, parents or checks: ``changed``, with
   the fields that differ);
4. what is left is ``removed`` (only in A) or ``added`` (only in B).

Outcomes are compared for every matched pair: status, duration (B / A ratio), whether the
result differs; and for the runs: status, duration, cost, tokens.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from plandag.trace.model import Trace
from plandag.trace.timeline import STATUS_STYLES, format_seconds
from plandag.trace.writer import plan_dependencies

__all__ = ["PlanChange", "StepOutcome", "TraceDiff", "diff_traces", "render_diff"]

_COMPARED_FIELDS = ("tool", "args", "depends_on", "check")
_RATIO_SHOWN = (0.8, 1.25)
_SECONDS_SHOWN = 0.05
"""A duration change is shown only past both the ratio and this many seconds (timing noise
of fast steps is not a change)."""


@dataclasses.dataclass(frozen=True, slots=True)
class PlanChange:
    """A step that differs between the plans.

    Attributes:
        kind: ``added`` (only in B), ``removed`` (only in A), ``changed`` (same id, some of
            tool / args / depends_on / check differ), ``moved`` (same tool and args under
            another id).
        a_id, b_id: its id in each run (None where it is absent).
        tool: its tool (B's when both exist).
        fields: for ``changed``, ``{field: [A's value, B's value]}``; else empty.
    """

    kind: str
    a_id: int | None
    b_id: int | None
    tool: str
    fields: dict[str, list[Any]] = dataclasses.field(default_factory=dict)

    def to_json_dict(self) -> dict[str, Any]:
        """As JSON-safe data."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, slots=True)
class StepOutcome:
    """A matched step's outcome in both runs.

    Attributes:
        a_id, b_id: its ids; tool: its tool (B's).
        a_status, b_status: its status in each run.
        a_duration_s, b_duration_s: active seconds from start to end in each run (time
            waiting between segments left out).
        duration_ratio: B / A, or None when A's duration is 0.
        result_changed: the recorded results differ (as canonical JSON).
    """

    a_id: int
    b_id: int
    tool: str
    a_status: str
    b_status: str
    a_duration_s: float
    b_duration_s: float
    duration_ratio: float | None
    result_changed: bool

    @property
    def status_changed(self) -> bool:
        """The status differs."""
        return self.a_status != self.b_status

    def to_json_dict(self) -> dict[str, Any]:
        """As JSON-safe data (``status_changed`` included)."""
        return {**dataclasses.asdict(self), "status_changed": self.status_changed}


@dataclasses.dataclass(frozen=True, slots=True)
class TraceDiff:
    """What :func:`diff_traces` found.

    Attributes:
        run_a, run_b: the run ids.
        status: ``(A's, B's)`` run status.
        duration_s: ``(A's, B's)`` active seconds (waits for a person between segments left
            out); duration_ratio: B / A (None when A's is 0).
        cost_usd: ``(A's, B's)`` US dollars (steps and model calls).
        tokens: ``(A's, B's)`` tokens (steps and model calls).
        plan_changes: every :class:`PlanChange`, removed and changed by A's id, then added
            by B's id.
        outcomes: a :class:`StepOutcome` for every matched step, by A's id.
        param_changes: ``(name, A's value, B's value)`` for every run param that differs
            (a missing one is None), by name: the same steps on other inputs.
    """

    run_a: str
    run_b: str
    status: tuple[str, str]
    duration_s: tuple[float, float]
    duration_ratio: float | None
    cost_usd: tuple[float, float]
    tokens: tuple[int, int]
    plan_changes: tuple[PlanChange, ...]
    outcomes: tuple[StepOutcome, ...]
    param_changes: tuple[tuple[str, Any, Any], ...] = ()

    @property
    def same_plan(self) -> bool:
        """No step was added, removed, changed or moved."""
        return not self.plan_changes

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON form (``plandag diff --json``)::

        {"run_a", "run_b", "status": [a, b], "duration_s": [a, b], "duration_ratio",
         "cost_usd": [a, b], "tokens": [a, b], "same_plan",
         "plan_changes": [{"kind", "a_id", "b_id", "tool", "fields"}],
         "outcomes": [{"a_id", "b_id", "tool", "a_status", "b_status", "a_duration_s",
                       "b_duration_s", "duration_ratio", "result_changed",
                       "status_changed"}]}
        """
        return {
            "run_a": self.run_a,
            "run_b": self.run_b,
            "status": list(self.status),
            "duration_s": list(self.duration_s),
            "duration_ratio": self.duration_ratio,
            "cost_usd": list(self.cost_usd),
            "tokens": list(self.tokens),
            "same_plan": self.same_plan,
            "param_changes": [list(change) for change in self.param_changes],
            "plan_changes": [change.to_json_dict() for change in self.plan_changes],
            "outcomes": [outcome.to_json_dict() for outcome in self.outcomes],
        }


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _definitions(trace: Trace) -> dict[int, dict[str, Any]]:
    planned = trace.final_plan_steps()
    if planned:
        parents = plan_dependencies({"steps": list(planned.values())})
        return {
            step_id: {
                "tool": str(step.get("tool", "?")),
                "args": step.get("args", {}),
                "depends_on": parents.get(step_id, []),
                "check": step.get("check", []),
            }
            for step_id, step in planned.items()
        }
    return {
        step_id: {"tool": step.tool, "args": step.args, "depends_on": step.depends_on, "check": []}
        for step_id, step in trace.steps.items()
    }


def _ratio(a: float, b: float) -> float | None:
    return b / a if a > 0 else None


def diff_traces(a: Trace, b: Trace) -> TraceDiff:
    """Compare run A with run B (see the module docstring for how steps are matched).

    Args:
        a, b: the two runs' traces (:func:`plandag.trace.reader.load_trace`).

    Returns:
        A :class:`TraceDiff`.
    """
    defs_a, defs_b = _definitions(a), _definitions(b)

    def signature(definition: dict[str, Any]) -> str:
        return _canonical([definition["tool"], definition["args"]])

    pairs: dict[int, int] = {}
    for step_id in sorted(defs_a.keys() & defs_b.keys()):
        if signature(defs_a[step_id]) == signature(defs_b[step_id]):
            pairs[step_id] = step_id
    moved: set[int] = set()
    free_b = [step_id for step_id in sorted(defs_b) if step_id not in pairs.values()]
    for step_id in sorted(defs_a):
        if step_id in pairs:
            continue
        for candidate in free_b:
            if signature(defs_a[step_id]) == signature(defs_b[candidate]):
                pairs[step_id] = candidate
                moved.add(step_id)
                free_b.remove(candidate)
                break
    for step_id in sorted(defs_a):
        if step_id not in pairs and step_id in free_b:
            pairs[step_id] = step_id
            free_b.remove(step_id)

    changes: list[PlanChange] = []
    for a_id in sorted(defs_a):
        if a_id not in pairs:
            changes.append(PlanChange("removed", a_id, None, defs_a[a_id]["tool"]))
            continue
        b_id = pairs[a_id]
        if a_id in moved:
            changes.append(PlanChange("moved", a_id, b_id, defs_b[b_id]["tool"]))
            continue
        fields = {
            name: [defs_a[a_id][name], defs_b[b_id][name]]
            for name in _COMPARED_FIELDS
            if _canonical(defs_a[a_id][name]) != _canonical(defs_b[b_id][name])
        }
        if fields:
            changes.append(PlanChange("changed", a_id, b_id, defs_b[b_id]["tool"], fields))
    changes.extend(PlanChange("added", None, b_id, defs_b[b_id]["tool"]) for b_id in sorted(free_b))

    outcomes: list[StepOutcome] = []
    active_a, active_b = a.active_time(), b.active_time()
    for a_id in sorted(pairs):
        b_id = pairs[a_id]
        step_a, step_b = a.steps.get(a_id), b.steps.get(b_id)
        # active seconds: a wait for a person between segments is not the step's time
        duration_a = a.step_active_s(step_a, active_a) if step_a is not None else 0.0
        duration_b = b.step_active_s(step_b, active_b) if step_b is not None else 0.0
        result_a = step_a.result if step_a is not None else None
        result_b = step_b.result if step_b is not None else None
        outcomes.append(
            StepOutcome(
                a_id=a_id,
                b_id=b_id,
                tool=defs_b[b_id]["tool"],
                a_status=step_a.status if step_a is not None else "pending",
                b_status=step_b.status if step_b is not None else "pending",
                a_duration_s=duration_a,
                b_duration_s=duration_b,
                duration_ratio=_ratio(duration_a, duration_b),
                result_changed=_canonical(result_a) != _canonical(result_b),
            )
        )
    return TraceDiff(
        run_a=a.run_id,
        run_b=b.run_id,
        status=(a.status, b.status),
        duration_s=(active_a.total_s, active_b.total_s),
        duration_ratio=_ratio(active_a.total_s, active_b.total_s),
        cost_usd=(a.steps_cost_usd + a.llm_cost_usd, b.steps_cost_usd + b.llm_cost_usd),
        tokens=(a.tokens, b.tokens),
        plan_changes=tuple(changes),
        outcomes=tuple(outcomes),
        param_changes=_param_changes(a, b),
    )


def _param_changes(a: Trace, b: Trace) -> tuple[tuple[str, Any, Any], ...]:
    """The run params (as written at each run's start) that differ, by name."""
    params_a = a.segments[0].params if a.segments else {}
    params_b = b.segments[0].params if b.segments else {}
    return tuple(
        (name, params_a.get(name), params_b.get(name))
        for name in sorted(params_a.keys() | params_b.keys())
        if _canonical(params_a.get(name)) != _canonical(params_b.get(name))
    )


def _status(status: str) -> Text:
    return Text(status, style=STATUS_STYLES.get(status, ""))


def _short(value: Any, limit: int = 60) -> str:
    text = _canonical(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_diff(diff: TraceDiff, console: Console) -> None:
    """Print ``diff`` for a person: the runs side by side, the plan changes, and the steps
    whose status or result changed or whose duration moved by more than 25 % and 50 ms.

    Args:
        diff: from :func:`diff_traces`.
        console: where to print.
    """
    summary = Table(title=f"{diff.run_a} → {diff.run_b}", show_edge=False)
    summary.add_column("")
    summary.add_column("A")
    summary.add_column("B")
    summary.add_row("status", _status(diff.status[0]), _status(diff.status[1]))
    ratio = f" (×{diff.duration_ratio:.2f})" if diff.duration_ratio is not None else ""
    summary.add_row(
        "duration",
        format_seconds(diff.duration_s[0]),
        format_seconds(diff.duration_s[1]) + ratio,
    )
    summary.add_row("cost", f"${diff.cost_usd[0]:.4f}", f"${diff.cost_usd[1]:.4f}")
    summary.add_row("tokens", str(diff.tokens[0]), str(diff.tokens[1]))
    console.print(summary)

    for name, value_a, value_b in diff.param_changes:
        console.print(f"param {name}: {_short(value_a)} → {_short(value_b)}")
    if diff.same_plan:
        console.print("plans: the same steps")
    else:
        console.print(f"plans: {len(diff.plan_changes)} step change(s)")
        for change in diff.plan_changes:
            if change.kind == "added":
                console.print(Text(f"  + step {change.b_id} {change.tool}", style="green"))
            elif change.kind == "removed":
                console.print(Text(f"  - step {change.a_id} {change.tool}", style="red"))
            elif change.kind == "moved":
                console.print(
                    Text(f"  ~ step {change.a_id} → {change.b_id} {change.tool} (renumbered)")
                )
            else:
                console.print(Text(f"  ~ step {change.a_id} {change.tool}", style="yellow"))
                for name, (old, new) in change.fields.items():
                    console.print(Text(f"      {name}: {_short(old)} → {_short(new)}"))

    low, high = _RATIO_SHOWN
    shown = [
        outcome
        for outcome in diff.outcomes
        if outcome.status_changed
        or outcome.result_changed
        or (
            outcome.duration_ratio is not None
            and not low <= outcome.duration_ratio <= high
            and abs(outcome.b_duration_s - outcome.a_duration_s) >= _SECONDS_SHOWN
        )
    ]
    if not shown:
        console.print(f"outcomes: {len(diff.outcomes)} matched step(s), none changed")
        return
    table = Table(title="outcomes that changed", show_edge=False)
    for column in ("step", "tool", "status A", "status B", "duration A", "duration B", "result"):
        table.add_column(column)
    for outcome in shown:
        step = (
            str(outcome.a_id) if outcome.a_id == outcome.b_id else f"{outcome.a_id}→{outcome.b_id}"
        )
        ratio_text = (
            f" (×{outcome.duration_ratio:.2f})" if outcome.duration_ratio is not None else ""
        )
        table.add_row(
            step,
            outcome.tool,
            _status(outcome.a_status),
            _status(outcome.b_status),
            format_seconds(outcome.a_duration_s),
            format_seconds(outcome.b_duration_s) + ratio_text,
            "changed" if outcome.result_changed else "same",
        )
    console.print(table)
