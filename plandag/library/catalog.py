"""The plan library's tables in the run store: versions of plans by task type, and the runs
of each task type (docs/library.md).

A *task type* is a name for a kind of task (``invoice_total``). Each of its *versions* is a
whole plan (the plan format, with its ``params``) saved once a run of it succeeded; a version
is ``admitted`` (runs reuse the latest admitted one) or ``pending`` (it waits for a person:
``plandag library approve``). Versions are numbered from 1 and never renumbered; removing
one leaves a gap.

Every run that went through the library (a plan reused, routed, or planned for a task type)
leaves one ``task_run`` row: how the plan was found, the run's status, its replans, spend and
model calls (planner calls and routing calls apart). :mod:`plandag.library.stats` reads them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from plandag.dag.plan import Plan
from plandag.errors import InputError
from plandag.library.entries import (
    HOW,
    UNFINISHED,
    LibraryPlan,
    TaskRun,
    TaskTypeSummary,
    VersionStatus,
    check_task_type,
)
from plandag.store.store import Store, store_json

if TYPE_CHECKING:
    from plandag.planner.agent import Agent, AgentResult

__all__ = [
    "HOW",
    "UNFINISHED",
    "LibraryPlan",
    "PlanLibrary",
    "TaskRun",
    "TaskTypeSummary",
    "check_task_type",
]

_PLAN_COLUMNS = (
    "task_type, version, plan, plan_hash, params, tools, goal, status, reason, source_run, "
    "approved_by, approved_at, created"
)


class PlanLibrary:
    """The plan library in a run store (module docstring).

    Args:
        store: the open run store (:func:`plandag.store.open_store`); the library uses its
            connection, from the same thread.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    async def run_task(
        self,
        agent: Agent,
        goal: str,
        context: str = "",
        params: Mapping[str, Any] | None = None,
        *,
        task_type: str | None = None,
        run_id: str | None = None,
    ) -> AgentResult:
        """Run ``goal`` through ``agent`` and this library (what ``Agent(library=...).run``
        does): :func:`plandag.library.runner.run_task`, whose arguments, result and errors
        these are; ``agent.library`` is this library."""
        from plandag.library.runner import run_task

        return await run_task(agent, goal, context, params, task_type=task_type, run_id=run_id)

    # -- reading -------------------------------------------------------------------------------

    def _uses(self, task_type: str) -> dict[int, tuple[int, int]]:
        self.store.flush()
        rows = self.store.connection.execute(
            "SELECT version, count(*), sum(status = 'succeeded') FROM task_run "
            "WHERE task_type = ? AND version IS NOT NULL GROUP BY version",
            (task_type,),
        )
        return {int(row[0]): (int(row[1]), int(row[2] or 0)) for row in rows}

    def _row(self, row: Sequence[Any], uses: Mapping[int, tuple[int, int]]) -> LibraryPlan:
        used, succeeded = uses.get(int(row[1]), (0, 0))
        return LibraryPlan(
            task_type=row[0],
            version=int(row[1]),
            plan=Plan.model_validate(json.loads(row[2])),
            plan_hash=row[3],
            params=json.loads(row[4]),
            tools=tuple(json.loads(row[5])),
            goal=row[6],
            status=row[7],
            reason=row[8],
            source_run=row[9],
            approved_by=row[10],
            approved_at=row[11],
            created=row[12],
            uses=used,
            successes=succeeded,
        )

    def versions(self, task_type: str) -> list[LibraryPlan]:
        """Every version of ``task_type``, oldest first ([] for an unknown type)."""
        uses = self._uses(task_type)
        rows = self.store.connection.execute(
            f"SELECT {_PLAN_COLUMNS} FROM library_plan WHERE task_type = ? ORDER BY version",
            (task_type,),
        ).fetchall()
        return [self._row(row, uses) for row in rows]

    def version(self, task_type: str, version: int | None = None) -> LibraryPlan:
        """Version ``version`` of ``task_type`` (None: the latest, admitted or pending).

        Raises:
            InputError: no such task type or version (what exists, and ``plandag library
                list``).
        """
        found = self.versions(task_type)
        if not found:
            raise InputError(
                f"task type {task_type!r} is not in the plan library; `plandag library list` "
                "shows the task types"
            )
        if version is None:
            return found[-1]
        for item in found:
            if item.version == version:
                return item
        raise InputError(
            f"task type {task_type!r} has no version {version} (versions: "
            f"{', '.join(str(item.version) for item in found)})"
        )

    def latest(self, task_type: str) -> LibraryPlan | None:
        """The latest admitted version of ``task_type`` (what a run reuses), or None."""
        admitted = [item for item in self.versions(task_type) if item.status == "admitted"]
        return admitted[-1] if admitted else None

    def task_types(self) -> list[TaskTypeSummary]:
        """Every task type in the library, by name."""
        names = [
            row[0]
            for row in self.store.connection.execute(
                "SELECT DISTINCT task_type FROM library_plan ORDER BY task_type"
            )
        ]
        summaries = []
        for name in names:
            versions = self.versions(name)
            admitted = [item for item in versions if item.status == "admitted"]
            shown = admitted[-1] if admitted else versions[-1]
            summaries.append(
                TaskTypeSummary(
                    task_type=name,
                    latest=admitted[-1].version if admitted else None,
                    versions=len(versions),
                    pending=sum(1 for item in versions if item.status == "pending"),
                    params=shown.params,
                    tools=shown.tools,
                    uses=sum(item.uses for item in versions),
                    successes=sum(item.successes for item in versions),
                )
            )
        return summaries

    def admitted(self) -> list[LibraryPlan]:
        """The latest admitted version of every task type that has one (what routing picks
        from), by name."""
        found = [self.latest(summary.task_type) for summary in self.task_types()]
        return [item for item in found if item is not None]

    def source_runs(self) -> frozenset[str]:
        """The runs that produced a kept version (``plandag gc`` keeps them)."""
        rows = self.store.connection.execute(
            "SELECT DISTINCT source_run FROM library_plan WHERE source_run IS NOT NULL"
        )
        return frozenset(row[0] for row in rows)

    def task_run(self, run_id: str) -> TaskRun | None:
        """The recorded run ``run_id``, or None when it did not go through the library."""
        found = self._task_runs(" WHERE run_id = ?", (run_id,))
        return found[0] if found else None

    def task_runs(self, task_type: str | None = None) -> list[TaskRun]:
        """The recorded runs (of ``task_type``, or all), oldest first."""
        if task_type is None:
            return self._task_runs("", ())
        return self._task_runs(" WHERE task_type = ?", (task_type,))

    def _task_runs(self, where: str, args: tuple[Any, ...]) -> list[TaskRun]:
        self.store.flush()
        sql = (
            "SELECT run_id, task_type, version, how, status, replans, escalated, spent_usd, "
            "planner_calls, planner_usd, routing_calls, routing_usd, alerts, duration_s, time "
            "FROM task_run"
        )
        rows = self.store.connection.execute(sql + where + " ORDER BY time, run_id", args)
        return [
            TaskRun(
                run_id=row[0],
                task_type=row[1],
                version=row[2],
                how=row[3],
                status=row[4],
                replans=int(row[5]),
                escalated=bool(row[6]),
                spent_usd=float(row[7]),
                planner_calls=int(row[8]),
                planner_usd=float(row[9]),
                routing_calls=int(row[10]),
                routing_usd=float(row[11]),
                alerts=int(row[12]),
                duration_s=row[13],
                time=float(row[14]),
            )
            for row in rows
        ]

    # -- writing -------------------------------------------------------------------------------

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
        """Save ``plan`` as the next version of ``task_type``.

        Args:
            task_type: the task type (:func:`check_task_type`).
            plan: the whole plan (its params, steps and output).
            status: ``admitted`` or ``pending``.
            reason: why it is pending.
            source_run: the run that produced it.
            approved_by: who approved it (``auto``, ``read-only`` or a person), for an
                admitted version.
            now: the time, seconds since the epoch (default ``time.time()``).

        Returns:
            The saved version.

        Raises:
            InputError: a bad task type name.
        """
        from plandag.approval import plan_hash

        check_task_type(task_type)
        at = time.time() if now is None else now
        document = plan.model_dump(mode="json", exclude_none=True)
        params = {
            name: spec.model_dump(mode="json", exclude_none=True)
            for name, spec in plan.params.items()
        }
        tools = sorted({step.tool for step in plan.steps})
        with self.store.transaction() as connection:
            row = connection.execute(
                "SELECT max(version) FROM library_plan WHERE task_type = ?", (task_type,)
            ).fetchone()
            version = int(row[0] or 0) + 1
            connection.execute(
                f"INSERT INTO library_plan ({_PLAN_COLUMNS}) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    task_type,
                    version,
                    store_json(document),
                    plan_hash(document),
                    store_json(params),
                    json.dumps(tools),
                    plan.goal or None,
                    status,
                    reason,
                    source_run,
                    approved_by if status == "admitted" else None,
                    at if status == "admitted" else None,
                    at,
                ),
            )
        return self.version(task_type, version)

    def approve(
        self, task_type: str, version: int | None = None, *, who: str, now: float | None = None
    ) -> LibraryPlan:
        """Admit a pending version (None: the latest pending one): a person read it and
        lets runs reuse it.

        Raises:
            InputError: no such type or version, no pending version, or the version is not
                pending (what it is).
        """
        if version is None:
            pending = [item for item in self.versions(task_type) if item.status == "pending"]
            if not pending:
                self.version(task_type)  # an unknown type says so
                raise InputError(
                    f"task type {task_type!r} has no version waiting for approval; "
                    "`plandag library show` shows its versions"
                )
            version = pending[-1].version
        item = self.version(task_type, version)
        if item.status != "pending":
            raise InputError(
                f"task type {task_type!r} version {version} is {item.status}, not waiting for "
                "approval"
            )
        at = time.time() if now is None else now
        with self.store.transaction() as connection:
            connection.execute(
                "UPDATE library_plan SET status = 'admitted', approved_by = ?, approved_at = ? "
                "WHERE task_type = ? AND version = ?",
                (who, at, task_type, version),
            )
        return self.version(task_type, version)

    def in_use(self, task_type: str, version: int | None = None) -> list[tuple[str, int, str]]:
        """The unfinished runs that reuse ``task_type`` (one ``version``, or any):
        ``(run_id, version, status)`` for each run :data:`UNFINISHED` (a person may still
        approve or resume it), oldest first."""
        self.store.flush()
        marks = ", ".join("?" for _ in UNFINISHED)
        sql = (
            "SELECT task_run.run_id, task_run.version, run.status FROM task_run "
            "JOIN run ON run.run_id = task_run.run_id "
            f"WHERE task_run.task_type = ? AND task_run.version IS NOT NULL "
            f"AND run.status IN ({marks})"
        )
        args: list[Any] = [task_type, *UNFINISHED]
        if version is not None:
            sql += " AND task_run.version = ?"
            args.append(version)
        rows = self.store.connection.execute(sql + " ORDER BY task_run.time", args)
        return [(row[0], int(row[1]), row[2]) for row in rows]

    def remove(self, task_type: str, version: int | None = None, *, force: bool = False) -> int:
        """Remove ``task_type`` (every version) or one of its versions; its run records
        stay (``plandag stats``). Returns the number of versions removed.

        Args:
            task_type: the task type.
            version: one version, or None for every one.
            force: remove it even while unfinished runs reuse it (:meth:`in_use`); such a
                run, approved or resumed later, then saves nothing.

        Raises:
            InputError: no such task type or version, or (without ``force``) an unfinished
                run reuses it (which runs, and what to do).
        """
        self.version(task_type, version)  # raises for an unknown one
        using = [] if force else self.in_use(task_type, version)
        if using:
            shown = "; ".join(
                f"run {run_id} ({status}) reuses version {number}"
                for run_id, number, status in using[:5]
            )
            more = f" and {len(using) - 5} more" if len(using) > 5 else ""
            first, _, status = using[0]
            finish = {
                "awaiting_approval": f"`plandag approve {first}` or `plandag reject {first} "
                "--feedback TEXT`",
                "escalated": f"`plandag resume {first} --instruction TEXT` or `plandag "
                f"abandon {first} --reason TEXT`",
            }.get(status, f"`plandag resume {first}`")
            what = f"version {version} of {task_type!r}" if version is not None else repr(task_type)
            raise InputError(
                f"{what} is in use: {shown}{more}; finish those runs first ({finish}), or "
                "give --force to remove it anyway"
            )
        with self.store.transaction() as connection:
            if version is None:
                cursor = connection.execute(
                    "DELETE FROM library_plan WHERE task_type = ?", (task_type,)
                )
            else:
                cursor = connection.execute(
                    "DELETE FROM library_plan WHERE task_type = ? AND version = ?",
                    (task_type, version),
                )
        return int(cursor.rowcount)

    def record_run(self, run: TaskRun) -> None:
        """Record one run of a task type (committed at once)."""
        with self.store.transaction() as connection:
            connection.execute(
                "INSERT OR REPLACE INTO task_run (run_id, task_type, version, how, status, "
                "replans, escalated, spent_usd, planner_calls, planner_usd, routing_calls, "
                "routing_usd, alerts, duration_s, time) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run.run_id,
                    run.task_type,
                    run.version,
                    run.how,
                    run.status,
                    run.replans,
                    int(run.escalated),
                    run.spent_usd,
                    run.planner_calls,
                    run.planner_usd,
                    run.routing_calls,
                    run.routing_usd,
                    run.alerts,
                    run.duration_s,
                    run.time,
                ),
            )
