"""The plan library's records: a task type's name (:func:`check_task_type`), a saved version
of its plan (:class:`LibraryPlan`), a task type's summary (:class:`TaskTypeSummary`) and one
run of a task type (:class:`TaskRun`). :class:`~plandag.library.catalog.PlanLibrary` keeps
them in the run store; the routing call and the library's runner read them.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from plandag.dag.plan import Plan
from plandag.errors import InputError

if TYPE_CHECKING:
    from plandag.store.store import Store

__all__ = [
    "HOW",
    "UNFINISHED",
    "LibraryPlan",
    "LibraryTables",
    "TaskRun",
    "TaskTypeSummary",
    "VersionStatus",
    "check_task_type",
]

VersionStatus = Literal["admitted", "pending"]

HOW: tuple[str, ...] = ("library", "routed", "planned")
"""How a run found its plan: ``library`` (``--task-type``: the latest version, no model
call), ``routed`` (the routing call picked the task type), ``planned`` (the planner wrote
it: a new task type, or a run without one)."""

_NAME_LIMIT = 64

UNFINISHED: tuple[str, ...] = ("running", "interrupted", "awaiting_approval", "escalated")
"""Run states in which a person may still approve or resume a run: a version such a run
reuses is *in use* (``plandag library rm`` refuses it without ``--force``)."""


def check_task_type(name: str) -> str:
    """``name`` checked as a task type: 1 to 64 characters of letters, digits, ``_``, ``-``
    and ``.``, starting with a letter or digit.

    Raises:
        InputError: it is not (what was given and an example).
    """
    ok = (
        0 < len(name) <= _NAME_LIMIT
        and name[0].isascii()
        and name[0].isalnum()
        and all(char.isascii() and (char.isalnum() or char in "_-.") for char in name)
    )
    if not ok:
        raise InputError(
            f"task type {name!r}: give 1 to {_NAME_LIMIT} letters, digits, '_', '-' or '.', "
            "starting with a letter or digit (e.g. invoice_total)"
        )
    return name


@dataclasses.dataclass(frozen=True)
class LibraryPlan:
    """One version of a task type's plan.

    Attributes:
        task_type: the task type.
        version: its number (1, 2, ...).
        plan: the plan (the plan format, with its params and output).
        plan_hash: SHA-256 (hex) of the plan's canonical JSON
            (:func:`plandag.approval.plan_hash` of the plan alone).
        params: the plan's params (name → their spec as JSON).
        tools: the tools its steps use, sorted.
        goal: the goal of the run that produced it.
        status: ``admitted`` or ``pending``.
        reason: why it is pending (None when admitted).
        source_run: the run that produced it (gc keeps it).
        approved_by: who approved it: a person's name, ``auto`` (the run's ``--approve
            auto``), ``read-only`` (no step has effects); None while pending.
        approved_at: when, seconds since the epoch; None while pending.
        created: when it was saved, seconds since the epoch.
        uses: runs that reused this version.
        successes: of those, the runs that succeeded.
    """

    task_type: str
    version: int
    plan: Plan
    plan_hash: str
    params: dict[str, Any]
    tools: tuple[str, ...]
    goal: str | None
    status: VersionStatus
    reason: str | None
    source_run: str | None
    approved_by: str | None
    approved_at: float | None
    created: float
    uses: int = 0
    successes: int = 0

    @property
    def success_rate(self) -> float | None:
        """``successes / uses``, or None before any use."""
        return self.successes / self.uses if self.uses else None

    def as_dict(self) -> dict[str, Any]:
        """The version as JSON-ready data (the plan in the plan format)."""
        return {
            "task_type": self.task_type,
            "version": self.version,
            "status": self.status,
            "reason": self.reason,
            "plan_hash": self.plan_hash,
            "params": self.params,
            "tools": list(self.tools),
            "goal": self.goal,
            "source_run": self.source_run,
            "approved_by": self.approved_by,
            "approved_at": self.approved_at,
            "created": self.created,
            "uses": self.uses,
            "successes": self.successes,
            "success_rate": self.success_rate,
            "plan": self.plan.model_dump(mode="json", exclude_none=True),
        }


@dataclasses.dataclass(frozen=True)
class TaskTypeSummary:
    """A task type as ``plandag library list`` shows it.

    Attributes:
        task_type: the name.
        latest: the latest admitted version (what runs reuse), or None when none is.
        versions: versions kept.
        pending: versions waiting for a person.
        params: the latest version's params (name → spec), or {} without one.
        tools: the tools of the latest version.
        uses: runs that reused a version of this type.
        successes: of those, the runs that succeeded.
    """

    task_type: str
    latest: int | None
    versions: int
    pending: int
    params: dict[str, Any]
    tools: tuple[str, ...]
    uses: int
    successes: int

    @property
    def success_rate(self) -> float | None:
        """``successes / uses``, or None before any use."""
        return self.successes / self.uses if self.uses else None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {
            "task_type": self.task_type,
            "latest": self.latest,
            "versions": self.versions,
            "pending": self.pending,
            "params": self.params,
            "tools": list(self.tools),
            "uses": self.uses,
            "successes": self.successes,
            "success_rate": self.success_rate,
        }


@dataclasses.dataclass(frozen=True)
class TaskRun:
    """One run of a task type (a ``task_run`` row).

    Attributes:
        run_id: the run.
        task_type: the task type ("" for a run that had none).
        version: the library version it reused, or None (planned).
        how: ``library``, ``routed`` or ``planned`` (:data:`HOW`).
        status: the run's final status.
        replans: replans during the run.
        escalated: the run was handed to a person (it ended ``escalated``; a person
            may have resumed it since).
        spent_usd: US dollars: its steps, its planner calls and its routing call.
        planner_calls: model call attempts of the planner, replanner and joiner.
        planner_usd: their US dollars.
        routing_calls: routing call attempts (the executor model picking a task type).
        routing_usd: their US dollars.
        alerts: out-of-registry alerts (a tool or check the planner named that is not
            registered).
        duration_s: seconds from the run's start to its end (the routing call included).
        time: when it was recorded, seconds since the epoch.
    """

    run_id: str
    task_type: str
    version: int | None
    how: str
    status: str
    replans: int
    escalated: bool
    spent_usd: float
    planner_calls: int
    planner_usd: float
    routing_calls: int
    routing_usd: float
    alerts: int
    duration_s: float | None
    time: float

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return dataclasses.asdict(self)


@runtime_checkable
class LibraryTables(Protocol):
    """What a run through the plan library reads and writes
    (:class:`~plandag.library.catalog.PlanLibrary` is it; its methods say more)."""

    store: Store

    def latest(self, task_type: str) -> LibraryPlan | None:
        """The latest admitted version of ``task_type``, or None."""
        ...

    def admitted(self) -> list[LibraryPlan]:
        """The latest admitted version of every task type."""
        ...

    def save(
        self,
        task_type: str,
        plan: Plan,
        *,
        status: VersionStatus,
        reason: str | None = None,
        source_run: str | None = None,
        approved_by: str | None = None,
        now: float | None = None,
    ) -> LibraryPlan:
        """Save ``plan`` as the next version of ``task_type``."""
        ...

    def record_run(self, run: TaskRun) -> None:
        """Record one run of a task type."""
        ...
