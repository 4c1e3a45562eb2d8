"""A library run finished later: ``plandag approve`` or ``plandag resume`` on a run that went
through the plan library (docs/library.md).

A run that ends ``awaiting_approval`` (a plan with effects and nobody at the terminal), is
interrupted, or is escalated leaves its ``task_run`` row with that status and nothing
saved. When a person finishes it later, :func:`finish_stored_run` does what
:func:`plandag.library.run_task` would have done had the run ended then: the run's row takes
its final status and spend (so a reused version's use counts as a success or not), and a
plan the library did not have (a new task type, a repair, a step-by-step edit) is saved by
the same admission rule (:func:`plandag.library.runner.decide_admission`): the person who
approved it in the run is who approved it for the library; steps written by a model that had
read outside content keep it pending.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from plandag.dag.limits import DEFAULT_MAX_STEPS
from plandag.dag.plan import Plan
from plandag.library.catalog import LibraryPlan, PlanLibrary
from plandag.library.runner import Admission, decide_admission

if TYPE_CHECKING:
    from plandag.store import Store
    from plandag.tools.boundary import WriteBoundary
    from plandag.tools.registry import Registry

__all__ = ["StoredFinish", "finish_stored_run"]


@dataclasses.dataclass(frozen=True)
class StoredFinish:
    """What :func:`finish_stored_run` did.

    Attributes:
        task_type: the run's task type.
        status: the run's final status, as recorded for the task type.
        saved: the version saved, or None.
        not_saved: why no version was saved (None when one was, or when a reused plan ran
            unchanged).
    """

    task_type: str
    status: str
    saved: LibraryPlan | None = None
    not_saved: str | None = None

    def lines(self) -> list[str]:
        """What happened, in words (``library: ...`` lines on standard error)."""
        if self.saved is not None and self.saved.status == "admitted":
            return [
                f"library: saved {self.saved.task_type} version {self.saved.version} "
                f"(approved by {self.saved.approved_by})"
            ]
        if self.saved is not None:
            return [
                f"library: saved {self.saved.task_type} version {self.saved.version}, pending: "
                f"{self.saved.reason}; `plandag library approve {self.saved.task_type} "
                f"--version {self.saved.version}` admits it"
            ]
        if self.not_saved is not None and self.status == "succeeded":
            return [f"library: nothing saved for {self.task_type}: {self.not_saved}"]
        return [f"library: recorded the run of {self.task_type} ({self.status})"]


def _kept_plan(store: Store, run_id: str, plan: Plan) -> Plan:
    """The steps of ``plan`` that succeeded in the run (superseded ones left out), its
    output, and the params of the run's first plan version (as
    :func:`plandag.library.runner.library_plan`)."""
    rows = store.steps(run_id)
    steps = [
        step
        for step in plan.steps
        if step.id in rows
        and rows[step.id].status == "succeeded"
        and not rows[step.id].superseded_by
    ]
    versions = store.plan_versions(run_id)
    params = plan.params
    if versions:
        first = Plan.model_validate(versions[0].plan)
        params = first.params or plan.params
    return Plan(goal=plan.goal, params=params, steps=steps, output=plan.output)


def _same_steps(saved: Plan, run: Plan) -> bool:
    """The run's plan has the saved version's steps and output (its goal may differ)."""

    def shape(plan: Plan) -> Any:
        document = plan.model_dump(mode="json", exclude_none=True)
        return document.get("steps"), document.get("output")

    return bool(shape(saved) == shape(run))


def finish_stored_run(
    store: Store,
    run_id: str,
    *,
    plan: Plan,
    registry: Registry,
    params: Mapping[str, Any],
    approve: str | None,
    read_only: bool = False,
    write_boundary: WriteBoundary | None = None,
    http_allow: Sequence[str] | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    tainted: Sequence[int] = (),
    replanned: bool = False,
) -> StoredFinish | None:
    """Bring the plan library up to date with a run finished after its first process
    ended (module docstring).

    Args:
        store: the run store.
        run_id: the run (exact id), its final status already recorded in the store.
        plan: the plan version the run finished with (secrets put back, as compiled).
        registry: the run's tools and checks.
        params: the run's param values, by name, as compiled.
        approve: the run's approval mode (``ask``, ``auto``, ``never``), or None.
        read_only, write_boundary, http_allow, max_steps: as the run compiled its plan.
        tainted: ids of steps written after the run's first process ended by a model that
            had read outside content (a replan on ``plandag resume --instruction``).
        replanned: the plan changed after the first process ended (a replan); otherwise a
            reused version counts as changed when the run's steps or output differ from it
            (a step-by-step edit or rejection at ``plandag approve``).

    Returns:
        What was done, or None when the run did not go through the library or had no task
        type (nothing to do).
    """
    library = PlanLibrary(store)
    recorded = library.task_run(run_id)
    if recorded is None or not recorded.task_type:
        return None
    marks = [data for _, kind, data in store.events(run_id) if kind == "library"]
    mark = marks[-1] if marks else {}
    run = store.run(run_id)
    status = run.status
    library.record_run(
        dataclasses.replace(
            recorded,
            status=status,
            escalated=recorded.escalated or status == "escalated",  # handed to a person once
            spent_usd=max(recorded.spent_usd, run.spent_usd),
        )
    )
    task_type = recorded.task_type
    if recorded.version is not None:
        reused = next(
            (item for item in library.versions(task_type) if item.version == recorded.version),
            None,
        )
        if reused is None:
            return StoredFinish(
                task_type,
                status,
                not_saved=f"version {recorded.version} it reused was removed from the library",
            )
        if not replanned and _same_steps(reused.plan, plan):
            return StoredFinish(task_type, status)  # a reused plan ran unchanged
    if any(item.source_run == run_id for item in library.versions(task_type)):
        return StoredFinish(task_type, status)  # saved when it ended the first time
    approvals = [row for row in store.decisions(run_id) if row.decision == "approved"]
    decided: Admission = decide_admission(
        _kept_plan(store, run_id, plan) if status == "succeeded" else None,
        run_status=status,
        registry=registry,
        params=params,
        tainted=[*mark.get("tainted_steps", []), *tainted],
        approved_by=approvals[-1].who if approvals else None,
        approve=approve,
        read_only=read_only,
        write_boundary=write_boundary,
        http_allow=http_allow,
        max_steps=max_steps,
    )
    if decided.plan is None or decided.status is None:
        return StoredFinish(task_type, status, not_saved=decided.reason)
    saved = library.save(
        task_type,
        decided.plan,
        status=decided.status,
        reason=decided.reason,
        source_run=run_id,
        approved_by=decided.approved_by,
    )
    return StoredFinish(task_type, status, saved=saved)
