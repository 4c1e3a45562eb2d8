"""The plan compiler: check a plan like code, build its DAG, report every problem at once."""

import typing as _typing

from plandag.lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
    from plandag.compiler.compile import compile_plan as compile_plan
    from plandag.compiler.compiled import CompiledCheck as CompiledCheck
    from plandag.compiler.compiled import CompiledPlan as CompiledPlan
    from plandag.compiler.compiled import CompiledStep as CompiledStep
    from plandag.compiler.load import load_plan as load_plan
    from plandag.compiler.patch import PatchResult as PatchResult
    from plandag.compiler.patch import compile_patch as compile_patch
    from plandag.dag.diagnostics import DIAGNOSTIC_CODES as DIAGNOSTIC_CODES
    from plandag.dag.diagnostics import Diagnostic as Diagnostic
    from plandag.dag.limits import DEFAULT_MAX_ARG_BYTES as DEFAULT_MAX_ARG_BYTES
    from plandag.dag.limits import DEFAULT_MAX_PLAN_BYTES as DEFAULT_MAX_PLAN_BYTES
    from plandag.dag.limits import DEFAULT_MAX_STEPS as DEFAULT_MAX_STEPS

__all__ = [
    "DEFAULT_MAX_ARG_BYTES",
    "DEFAULT_MAX_PLAN_BYTES",
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

if not _typing.TYPE_CHECKING:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "compile_plan": ("plandag.compiler.compile", "compile_plan"),
            "CompiledCheck": ("plandag.compiler.compiled", "CompiledCheck"),
            "CompiledPlan": ("plandag.compiler.compiled", "CompiledPlan"),
            "CompiledStep": ("plandag.compiler.compiled", "CompiledStep"),
            "DIAGNOSTIC_CODES": ("plandag.dag.diagnostics", "DIAGNOSTIC_CODES"),
            "Diagnostic": ("plandag.dag.diagnostics", "Diagnostic"),
            "DEFAULT_MAX_ARG_BYTES": ("plandag.dag.limits", "DEFAULT_MAX_ARG_BYTES"),
            "DEFAULT_MAX_PLAN_BYTES": ("plandag.dag.limits", "DEFAULT_MAX_PLAN_BYTES"),
            "DEFAULT_MAX_STEPS": ("plandag.dag.limits", "DEFAULT_MAX_STEPS"),
            "load_plan": ("plandag.compiler.load", "load_plan"),
            "PatchResult": ("plandag.compiler.patch", "PatchResult"),
            "compile_patch": ("plandag.compiler.patch", "compile_patch"),
        },
    )
