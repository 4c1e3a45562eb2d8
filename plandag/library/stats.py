"""Figures per task type, for operations (docs/operations.md; ``plandag
stats``).

Read from the runs recorded by the plan library (:class:`~plandag.library.catalog.TaskRun`,
one per run that went through it; runs without a task type are counted under ``""``,
shown as ``(none)``). Runs deleted by ``plandag gc`` leave the figures with them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from plandag.library.catalog import PlanLibrary

__all__ = ["TaskTypeStats", "task_type_stats"]


@dataclasses.dataclass(frozen=True)
class TaskTypeStats:
    """The figures of one task type.

    Attributes:
        task_type: the name ("" for runs without one).
        runs: runs recorded.
        no_replan: runs whose plan ran to success with no replan (it survived first
            contact).
        replans: replans over every run.
        escalations: runs handed to a person (ended ``escalated``, resumed later or not).
        spend_usd: US dollars over every run: steps, planner calls and routing calls.
        out_of_registry: out-of-registry alerts (the planner named a tool or check that
            is not registered; counted even when a repair fixed it).
        reused: runs that reused a library plan (``--task-type`` or routed).
        planner_calls: model call attempts of the planner, replanner and joiner.
        routing_calls: routing call attempts.
        planner_usd: US dollars of the planner's calls.
        routing_usd: US dollars of the routing calls.
    """

    task_type: str
    runs: int
    no_replan: int
    replans: int
    escalations: int
    spend_usd: float
    out_of_registry: int
    reused: int
    planner_calls: int
    routing_calls: int
    planner_usd: float
    routing_usd: float

    @property
    def replans_per_run(self) -> float:
        """``replans / runs`` (0.0 with no run)."""
        return self.replans / self.runs if self.runs else 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready data, ``replans_per_run`` included."""
        document = dataclasses.asdict(self)
        document["replans_per_run"] = self.replans_per_run
        return document


def task_type_stats(library: PlanLibrary) -> list[TaskTypeStats]:
    """The figures of every task type with a recorded run, by name ("" first)."""
    found: dict[str, list[Any]] = {}
    for run in library.task_runs():
        found.setdefault(run.task_type, []).append(run)
    figures = []
    for name in sorted(found):
        runs = found[name]
        figures.append(
            TaskTypeStats(
                task_type=name,
                runs=len(runs),
                no_replan=sum(1 for run in runs if run.replans == 0 and run.status == "succeeded"),
                replans=sum(run.replans for run in runs),
                escalations=sum(1 for run in runs if run.escalated),
                spend_usd=sum(run.spent_usd for run in runs),
                out_of_registry=sum(run.alerts for run in runs),
                reused=sum(1 for run in runs if run.version is not None),
                planner_calls=sum(run.planner_calls for run in runs),
                routing_calls=sum(run.routing_calls for run in runs),
                planner_usd=sum(run.planner_usd for run in runs),
                routing_usd=sum(run.routing_usd for run in runs),
            )
        )
    return figures
