"""The event-driven scheduler: runs a :class:`~plandag.compiler.compiled.CompiledPlan` and
returns a :class:`RunResult` (ARCHITECTURE.md, "Execution", "Brakes" and "States and exit
codes"), retrying transient failures (:class:`RetryPolicy`) within the run's brakes
(:class:`RunLimits`)."""

from plandag.scheduler import events as events
from plandag.scheduler.budget import Budget as Budget
from plandag.scheduler.clock import Clock as Clock
from plandag.scheduler.clock import SystemClock as SystemClock
from plandag.scheduler.clock import VirtualClock as VirtualClock
from plandag.scheduler.heartbeat import JsonlHeartbeatWriter as JsonlHeartbeatWriter
from plandag.scheduler.result import AttemptRecord as AttemptRecord
from plandag.scheduler.result import RunResult as RunResult
from plandag.scheduler.result import RunStatus as RunStatus
from plandag.scheduler.result import StepErrorInfo as StepErrorInfo
from plandag.scheduler.result import StepRecord as StepRecord
from plandag.scheduler.result import StepStatus as StepStatus
from plandag.scheduler.result import to_jsonable as to_jsonable
from plandag.scheduler.retry import RetryDecision as RetryDecision
from plandag.scheduler.retry import RetryPolicy as RetryPolicy
from plandag.scheduler.runner import RunLimits as RunLimits
from plandag.scheduler.runner import run_plan as run_plan
from plandag.scheduler.runner import run_plan_sync as run_plan_sync

__all__ = [
    "AttemptRecord",
    "Budget",
    "Clock",
    "JsonlHeartbeatWriter",
    "RetryDecision",
    "RetryPolicy",
    "RunLimits",
    "RunResult",
    "RunStatus",
    "StepErrorInfo",
    "StepRecord",
    "StepStatus",
    "SystemClock",
    "VirtualClock",
    "events",
    "run_plan",
    "run_plan_sync",
    "to_jsonable",
]
