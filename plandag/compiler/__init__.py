"""The plan compiler: check a plan like code, build its DAG, report every problem at once."""

from plandag.compiler.compile import compile_plan as compile_plan
from plandag.compiler.compiled import CompiledCheck as CompiledCheck
from plandag.compiler.compiled import CompiledPlan as CompiledPlan
from plandag.compiler.compiled import CompiledStep as CompiledStep
from plandag.compiler.diagnostics import DIAGNOSTIC_CODES as DIAGNOSTIC_CODES
from plandag.compiler.diagnostics import Diagnostic as Diagnostic
from plandag.compiler.limits import DEFAULT_MAX_ARG_BYTES as DEFAULT_MAX_ARG_BYTES
from plandag.compiler.limits import DEFAULT_MAX_STEPS as DEFAULT_MAX_STEPS
from plandag.compiler.load import load_plan as load_plan
from plandag.compiler.patch import PatchResult as PatchResult
from plandag.compiler.patch import compile_patch as compile_patch

__all__ = [
    "DEFAULT_MAX_ARG_BYTES",
    "DEFAULT_MAX_STEPS",
    "DIAGNOSTIC_CODES",
    "CompiledCheck",
    "CompiledPlan",
    "CompiledStep",
    "Diagnostic",
    "PatchResult",
    "compile_patch",
    "compile_plan",
    "load_plan",
]
