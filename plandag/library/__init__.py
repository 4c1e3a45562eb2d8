"""The plan library: plans that worked, kept by task type and reused without a model call,
and the figures of each task type (docs/library.md, docs/operations.md).

* :class:`PlanLibrary` (:mod:`plandag.library.catalog`): versions of plans by task type in
  the run store, with each version's uses and success rate;
* :func:`run_task` (:mod:`plandag.library.runner`): a run through the library (what
  ``Agent(library=...).run`` does): the plan found by task type or by one routing call,
  run, and saved when it may be;
* :mod:`plandag.library.routing`: the routing call to the small executor model;
* :mod:`plandag.library.stats`: runs, replans, escalations, spend and alerts per task type;
* out-of-registry alerts (a tool or check the planner named that is not registered) are the
  planner's: :mod:`plandag.planner.alerts`.

Runs that produced a kept version are kept by ``plandag gc`` (a keeper registered with
:func:`plandag.store.gc.register_keeper` when this package is imported).
"""

from plandag.library.catalog import LibraryPlan as LibraryPlan
from plandag.library.catalog import PlanLibrary as PlanLibrary
from plandag.library.catalog import TaskRun as TaskRun
from plandag.library.catalog import TaskTypeSummary as TaskTypeSummary
from plandag.library.keeper import keep_library_runs as keep_library_runs
from plandag.library.runner import Admission as Admission
from plandag.library.runner import LibraryOutcome as LibraryOutcome
from plandag.library.runner import admission as admission
from plandag.library.runner import run_task as run_task
from plandag.library.stats import TaskTypeStats as TaskTypeStats
from plandag.library.stats import task_type_stats as task_type_stats

__all__ = [
    "Admission",
    "LibraryOutcome",
    "LibraryPlan",
    "PlanLibrary",
    "TaskRun",
    "TaskTypeStats",
    "TaskTypeSummary",
    "admission",
    "keep_library_runs",
    "run_task",
    "task_type_stats",
]
