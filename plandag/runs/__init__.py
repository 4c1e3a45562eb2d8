"""The runs service: a plan run recorded in the run store, behind the approval gate,
resumable after a crash without doing anything twice (docs/durable-runs.md); the command line,
the web console, the Python API and the jobs all
start, resume, decide on and finish their runs through it.

* :mod:`plandag.runs.options`: :class:`RunOptions` (stored with a run) and
  :class:`DurableOutcome`;
* :mod:`plandag.runs.segments`: :func:`start_run` and :func:`continue_run`, a run's segments;
* :mod:`plandag.runs.decisions`: a person's decisions (:func:`decide`,
  :func:`approve_escalated`, :func:`abandon`);
* :mod:`plandag.runs.escalations`: a run handed to a person (:func:`escalate_run`,
  :func:`close_escalation`);
* :mod:`plandag.runs.planned`: a run whose plan a model writes, recorded as it goes
  (``SessionRecorder``, ``record_agent_run``), revised after a rejection (``revise``) and
  brought back by a person (``PlannerResume``);
* :mod:`plandag.runs.repairs`: ``exec --planner``'s stored run (``RepairGate``);
* :mod:`plandag.runs.stored`: a stored run read back for a later segment (its options,
  tools and plan: ``prepare``, ``rebuild``, ``run_registry``);
* :mod:`plandag.runs.traces`: a run's trace writers (``trace_factory``) and the lines a
  decision between segments appends;
* :mod:`plandag.runs.library`: the plan library's bookkeeping after a later segment;
* :mod:`plandag.runs.listing`: the runs and the open cases as ``runs`` and ``inbox`` list
  them.

Importing this package imports none of its parts: each name is imported on first use.
"""

import typing as _typing

from plandag.lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
    from plandag.runs.decisions import abandon as abandon
    from plandag.runs.decisions import approve_escalated as approve_escalated
    from plandag.runs.decisions import decide as decide
    from plandag.runs.escalations import close_escalation as close_escalation
    from plandag.runs.escalations import escalate_run as escalate_run
    from plandag.runs.options import RESUMABLE as RESUMABLE
    from plandag.runs.options import DurableOutcome as DurableOutcome
    from plandag.runs.options import RunOptions as RunOptions
    from plandag.runs.segments import continue_run as continue_run
    from plandag.runs.segments import plan_estimate as plan_estimate
    from plandag.runs.segments import start_run as start_run
    from plandag.runs.segments import superseded_steps as superseded_steps

__all__ = [
    "RESUMABLE",
    "DurableOutcome",
    "RunOptions",
    "abandon",
    "approve_escalated",
    "close_escalation",
    "continue_run",
    "decide",
    "escalate_run",
    "plan_estimate",
    "start_run",
    "superseded_steps",
]

if not _typing.TYPE_CHECKING:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "RESUMABLE": ("plandag.runs.options", "RESUMABLE"),
            "DurableOutcome": ("plandag.runs.options", "DurableOutcome"),
            "RunOptions": ("plandag.runs.options", "RunOptions"),
            "abandon": ("plandag.runs.decisions", "abandon"),
            "approve_escalated": ("plandag.runs.decisions", "approve_escalated"),
            "close_escalation": ("plandag.runs.escalations", "close_escalation"),
            "continue_run": ("plandag.runs.segments", "continue_run"),
            "decide": ("plandag.runs.decisions", "decide"),
            "escalate_run": ("plandag.runs.escalations", "escalate_run"),
            "plan_estimate": ("plandag.runs.segments", "plan_estimate"),
            "start_run": ("plandag.runs.segments", "start_run"),
            "superseded_steps": ("plandag.runs.segments", "superseded_steps"),
        },
    )
