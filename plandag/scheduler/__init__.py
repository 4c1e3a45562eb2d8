"""The event-driven scheduler: runs a :class:`~plandag.compiler.compiled.CompiledPlan` and
returns a :class:`RunResult` (ARCHITECTURE.md, "Execution", "Brakes" and "States and exit
codes"), retrying transient failures (:class:`RetryPolicy`) within the run's brakes
(:class:`RunLimits`)."""

import typing as _typing

from plandag.lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
    from plandag.scheduler import events as events
    from plandag.scheduler.entry import run_plan as run_plan
    from plandag.scheduler.entry import run_plan_sync as run_plan_sync
    from plandag.scheduler.estimate import ModelCallEstimate as ModelCallEstimate
    from plandag.scheduler.estimate import PlanEstimate as PlanEstimate
    from plandag.scheduler.estimate import StepEstimate as StepEstimate
    from plandag.scheduler.estimate import estimate_plan as estimate_plan
    from plandag.scheduler.estimate import estimate_steps as estimate_steps
    from plandag.scheduler.heartbeat import JsonlHeartbeatWriter as JsonlHeartbeatWriter
    from plandag.scheduler.limits import RunLimits as RunLimits
    from plandag.scheduler.result import AttemptRecord as AttemptRecord
    from plandag.scheduler.result import RunResult as RunResult
    from plandag.scheduler.result import RunStatus as RunStatus
    from plandag.scheduler.result import StepErrorInfo as StepErrorInfo
    from plandag.scheduler.result import StepRecord as StepRecord
    from plandag.scheduler.result import StepStatus as StepStatus
    from plandag.scheduler.result import to_jsonable as to_jsonable
    from plandag.scheduler.session import RunSession as RunSession
    from plandag.scheduler.session import SessionState as SessionState
    from plandag.scheduler.session import open_session as open_session

__all__ = [
    "AttemptRecord",
    "JsonlHeartbeatWriter",
    "ModelCallEstimate",
    "PlanEstimate",
    "RunLimits",
    "RunResult",
    "RunSession",
    "RunStatus",
    "SessionState",
    "StepErrorInfo",
    "StepEstimate",
    "StepRecord",
    "StepStatus",
    "estimate_plan",
    "estimate_steps",
    "events",
    "open_session",
    "run_plan",
    "run_plan_sync",
    "to_jsonable",
]

if not _typing.TYPE_CHECKING:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "events": ("plandag.scheduler.events", None),
            "ModelCallEstimate": ("plandag.scheduler.estimate", "ModelCallEstimate"),
            "PlanEstimate": ("plandag.scheduler.estimate", "PlanEstimate"),
            "StepEstimate": ("plandag.scheduler.estimate", "StepEstimate"),
            "estimate_plan": ("plandag.scheduler.estimate", "estimate_plan"),
            "estimate_steps": ("plandag.scheduler.estimate", "estimate_steps"),
            "JsonlHeartbeatWriter": ("plandag.scheduler.heartbeat", "JsonlHeartbeatWriter"),
            "AttemptRecord": ("plandag.scheduler.result", "AttemptRecord"),
            "RunResult": ("plandag.scheduler.result", "RunResult"),
            "RunStatus": ("plandag.scheduler.result", "RunStatus"),
            "StepErrorInfo": ("plandag.scheduler.result", "StepErrorInfo"),
            "StepRecord": ("plandag.scheduler.result", "StepRecord"),
            "StepStatus": ("plandag.scheduler.result", "StepStatus"),
            "to_jsonable": ("plandag.scheduler.result", "to_jsonable"),
            "RunLimits": ("plandag.scheduler.limits", "RunLimits"),
            "run_plan": ("plandag.scheduler.entry", "run_plan"),
            "run_plan_sync": ("plandag.scheduler.entry", "run_plan_sync"),
            "RunSession": ("plandag.scheduler.session", "RunSession"),
            "SessionState": ("plandag.scheduler.session", "SessionState"),
            "open_session": ("plandag.scheduler.session", "open_session"),
        },
    )
