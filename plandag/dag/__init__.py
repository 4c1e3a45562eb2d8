"""Plan and Step models, the reference grammar, and graph helpers."""

import typing as _typing

from plandag.lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
    from plandag.dag.graph import ancestors as ancestors
    from plandag.dag.graph import critical_path as critical_path
    from plandag.dag.graph import descendants as descendants
    from plandag.dag.graph import mermaid as mermaid
    from plandag.dag.graph import topological_order as topological_order
    from plandag.dag.plan import PLAN_FORMAT_VERSION as PLAN_FORMAT_VERSION
    from plandag.dag.plan import CheckSpec as CheckSpec
    from plandag.dag.plan import ParamSpec as ParamSpec
    from plandag.dag.plan import Plan as Plan
    from plandag.dag.plan import Step as Step
    from plandag.dag.references import Reference as Reference
    from plandag.dag.references import ReferenceResolutionError as ReferenceResolutionError
    from plandag.dag.references import find_malformed as find_malformed
    from plandag.dag.references import find_references as find_references
    from plandag.dag.references import resolve_value as resolve_value

__all__ = [
    "PLAN_FORMAT_VERSION",
    "CheckSpec",
    "ParamSpec",
    "Plan",
    "Reference",
    "ReferenceResolutionError",
    "Step",
    "ancestors",
    "critical_path",
    "descendants",
    "find_malformed",
    "find_references",
    "mermaid",
    "resolve_value",
    "topological_order",
]

if not _typing.TYPE_CHECKING:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "ancestors": ("plandag.dag.graph", "ancestors"),
            "critical_path": ("plandag.dag.graph", "critical_path"),
            "descendants": ("plandag.dag.graph", "descendants"),
            "mermaid": ("plandag.dag.graph", "mermaid"),
            "topological_order": ("plandag.dag.graph", "topological_order"),
            "PLAN_FORMAT_VERSION": ("plandag.dag.plan", "PLAN_FORMAT_VERSION"),
            "CheckSpec": ("plandag.dag.plan", "CheckSpec"),
            "ParamSpec": ("plandag.dag.plan", "ParamSpec"),
            "Plan": ("plandag.dag.plan", "Plan"),
            "Step": ("plandag.dag.plan", "Step"),
            "Reference": ("plandag.dag.references", "Reference"),
            "ReferenceResolutionError": ("plandag.dag.references", "ReferenceResolutionError"),
            "find_malformed": ("plandag.dag.references", "find_malformed"),
            "find_references": ("plandag.dag.references", "find_references"),
            "resolve_value": ("plandag.dag.references", "resolve_value"),
        },
    )
