"""The event-driven scheduler: runs a :class:`~plandag.compiler.compiled.CompiledPlan` and
returns a :class:`RunResult` (ARCHITECTURE.md, "Execution", "Brakes" and "States and exit
codes"), retrying transient failures (:class:`RetryPolicy`) within the run's brakes
(:class:`RunLimits`)."""

from plandag.scheduler import events as events
from plandag.scheduler.budget import Budget as Budget
from plandag.scheduler.budget import PlanBudget as PlanBudget
from plandag.scheduler.clock import Clock as Clock
from plandag.scheduler.clock import SystemClock as SystemClock
from plandag.scheduler.clock import VirtualClock as VirtualClock
from plandag.scheduler.estimate import ModelCallEstimate as ModelCallEstimate
from plandag.scheduler.estimate import PlanEstimate as PlanEstimate
from plandag.scheduler.estimate import StepEstimate as StepEstimate
from plandag.scheduler.estimate import estimate_plan as estimate_plan
from plandag.scheduler.estimate import estimate_steps as estimate_steps
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
from plandag.scheduler.session import RunSession as RunSession
from plandag.scheduler.session import SessionState as SessionState
from plandag.scheduler.session import open_session as open_session

__all__ = [
    "AttemptRecord",
    "Budget",
    "Clock",
    "JsonlHeartbeatWriter",
    "ModelCallEstimate",
    "PlanBudget",
    "PlanEstimate",
    "RetryDecision",
    "RetryPolicy",
    "RunLimits",
    "RunResult",
    "RunSession",
    "RunStatus",
    "SessionState",
    "StepErrorInfo",
    "StepEstimate",
    "StepRecord",
    "StepStatus",
    "SystemClock",
    "VirtualClock",
    "estimate_plan",
    "estimate_steps",
    "events",
    "open_session",
    "run_plan",
    "run_plan_sync",
    "to_jsonable",
]
