"""plandag: compile an LLM's plan into a validated DAG and run it, parallel, checked, bounded.

The data flows one way: plan JSON → :class:`Plan` → :func:`compile_plan` →
:class:`CompiledPlan` → :func:`run_plan` → :class:`RunResult`.

Importing the package imports none of its parts: each public name is imported the first
time it is used (a module ``__getattr__``, PEP 562), so the command line and programs that
need one part start fast.
"""

import typing as _typing

from plandag.lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
    from plandag.api import Agent as Agent
    from plandag.api import run_plan as run_plan
    from plandag.api import run_plan_sync as run_plan_sync
    from plandag.approval.gate import ApprovalRequest as ApprovalRequest
    from plandag.approval.gate import ApprovalRequiredError as ApprovalRequiredError
    from plandag.approval.gate import Decision as Decision
    from plandag.brakes import JOB_BRAKES as JOB_BRAKES
    from plandag.brakes import UNLIMITED as UNLIMITED
    from plandag.brakes.retry import RetryPolicy as RetryPolicy
    from plandag.checks.base import CheckDefinition as CheckDefinition
    from plandag.checks.base import CheckOutcome as CheckOutcome
    from plandag.checks.base import check as check
    from plandag.compiler import CompiledPlan as CompiledPlan
    from plandag.compiler import Diagnostic as Diagnostic
    from plandag.compiler import compile_plan as compile_plan
    from plandag.compiler import load_plan as load_plan
    from plandag.dag.plan import Plan as Plan
    from plandag.dag.plan import Step as Step
    from plandag.errors import BoundaryError as BoundaryError
    from plandag.errors import CheckFailedError as CheckFailedError
    from plandag.errors import NotStartedError as NotStartedError
    from plandag.errors import PermanentStepError as PermanentStepError
    from plandag.errors import PlanBudgetError as PlanBudgetError
    from plandag.errors import PlandagError as PlandagError
    from plandag.errors import PlanError as PlanError
    from plandag.errors import StepError as StepError
    from plandag.errors import StepTimeoutError as StepTimeoutError
    from plandag.errors import TransientStepError as TransientStepError
    from plandag.errors import classify_error as classify_error
    from plandag.executors.access import ModelAccess as ModelAccess
    from plandag.jobs.research.run import ResearchResult as ResearchResult
    from plandag.jobs.research.run import research as research
    from plandag.models import AnthropicClient as AnthropicClient
    from plandag.models import OpenAICompatibleClient as OpenAICompatibleClient
    from plandag.planner.agent import AgentResult as AgentResult
    from plandag.scheduler import PlanEstimate as PlanEstimate
    from plandag.scheduler import RunLimits as RunLimits
    from plandag.scheduler import RunResult as RunResult
    from plandag.scheduler import StepRecord as StepRecord
    from plandag.scheduler import estimate_plan as estimate_plan
    from plandag.tools.base import Tool as Tool
    from plandag.tools.base import ToolContext as ToolContext
    from plandag.tools.base import tool as tool
    from plandag.tools.boundary import WriteBoundary as WriteBoundary
    from plandag.tools.registry import Registry as Registry
    from plandag.tools.registry import default_registry as default_registry

__version__ = "0.1.0"

__all__ = [  # noqa: RUF022 (sorted by code point, as tests/test_exported_members.py checks)
    "Agent",
    "AgentResult",
    "AnthropicClient",
    "ApprovalRequest",
    "ApprovalRequiredError",
    "BoundaryError",
    "CheckDefinition",
    "CheckFailedError",
    "CheckOutcome",
    "CompiledPlan",
    "Decision",
    "Diagnostic",
    "JOB_BRAKES",
    "ModelAccess",
    "NotStartedError",
    "OpenAICompatibleClient",
    "PermanentStepError",
    "Plan",
    "PlanBudgetError",
    "PlanError",
    "PlanEstimate",
    "PlandagError",
    "Registry",
    "ResearchResult",
    "RetryPolicy",
    "RunLimits",
    "RunResult",
    "Step",
    "StepError",
    "StepRecord",
    "StepTimeoutError",
    "Tool",
    "ToolContext",
    "TransientStepError",
    "UNLIMITED",
    "WriteBoundary",
    "__version__",
    "check",
    "classify_error",
    "compile_plan",
    "default_registry",
    "estimate_plan",
    "load_plan",
    "research",
    "run_plan",
    "run_plan_sync",
    "tool",
]

if not _typing.TYPE_CHECKING:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "Agent": ("plandag.api", "Agent"),
            "AgentResult": ("plandag.planner.agent", "AgentResult"),
            "AnthropicClient": ("plandag.models.anthropic", "AnthropicClient"),
            "OpenAICompatibleClient": ("plandag.models.openai", "OpenAICompatibleClient"),
            "ModelAccess": ("plandag.executors.access", "ModelAccess"),
            "ApprovalRequest": ("plandag.approval.gate", "ApprovalRequest"),
            "ApprovalRequiredError": ("plandag.approval.gate", "ApprovalRequiredError"),
            "Decision": ("plandag.approval.gate", "Decision"),
            "JOB_BRAKES": ("plandag.brakes", "JOB_BRAKES"),
            "UNLIMITED": ("plandag.brakes", "UNLIMITED"),
            "CheckDefinition": ("plandag.checks.base", "CheckDefinition"),
            "CheckOutcome": ("plandag.checks.base", "CheckOutcome"),
            "check": ("plandag.checks.base", "check"),
            "CompiledPlan": ("plandag.compiler", "CompiledPlan"),
            "Diagnostic": ("plandag.compiler", "Diagnostic"),
            "compile_plan": ("plandag.compiler", "compile_plan"),
            "load_plan": ("plandag.compiler", "load_plan"),
            "ResearchResult": ("plandag.jobs.research.run", "ResearchResult"),
            "research": ("plandag.jobs.research.run", "research"),
            "Plan": ("plandag.dag.plan", "Plan"),
            "Step": ("plandag.dag.plan", "Step"),
            "BoundaryError": ("plandag.errors", "BoundaryError"),
            "CheckFailedError": ("plandag.errors", "CheckFailedError"),
            "NotStartedError": ("plandag.errors", "NotStartedError"),
            "PermanentStepError": ("plandag.errors", "PermanentStepError"),
            "PlanBudgetError": ("plandag.errors", "PlanBudgetError"),
            "PlandagError": ("plandag.errors", "PlandagError"),
            "PlanError": ("plandag.errors", "PlanError"),
            "StepError": ("plandag.errors", "StepError"),
            "StepTimeoutError": ("plandag.errors", "StepTimeoutError"),
            "TransientStepError": ("plandag.errors", "TransientStepError"),
            "classify_error": ("plandag.errors", "classify_error"),
            "PlanEstimate": ("plandag.scheduler", "PlanEstimate"),
            "RetryPolicy": ("plandag.brakes.retry", "RetryPolicy"),
            "RunLimits": ("plandag.scheduler", "RunLimits"),
            "RunResult": ("plandag.scheduler", "RunResult"),
            "StepRecord": ("plandag.scheduler", "StepRecord"),
            "estimate_plan": ("plandag.scheduler", "estimate_plan"),
            "run_plan": ("plandag.api", "run_plan"),
            "run_plan_sync": ("plandag.api", "run_plan_sync"),
            "Tool": ("plandag.tools.base", "Tool"),
            "ToolContext": ("plandag.tools.base", "ToolContext"),
            "tool": ("plandag.tools.base", "tool"),
            "WriteBoundary": ("plandag.tools.boundary", "WriteBoundary"),
            "Registry": ("plandag.tools.registry", "Registry"),
            "default_registry": ("plandag.tools.registry", "default_registry"),
        },
    )
