"""The event-driven scheduler: runs a :class:`~plandag.compiler.compiled.CompiledPlan` and
returns a :class:`RunResult` (ARCHITECTURE.md, "Execution" and "States and exit codes")."""

from plandag.scheduler import events as events
from plandag.scheduler.result import RunResult as RunResult
from plandag.scheduler.result import RunStatus as RunStatus
from plandag.scheduler.result import StepErrorInfo as StepErrorInfo
from plandag.scheduler.result import StepRecord as StepRecord
from plandag.scheduler.result import StepStatus as StepStatus
from plandag.scheduler.result import to_jsonable as to_jsonable
from plandag.scheduler.runner import run_plan as run_plan
from plandag.scheduler.runner import run_plan_sync as run_plan_sync

__all__ = [
    "RunResult",
    "RunStatus",
    "StepErrorInfo",
    "StepRecord",
    "StepStatus",
    "events",
    "run_plan",
    "run_plan_sync",
    "to_jsonable",
]
