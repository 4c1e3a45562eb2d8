"""Plan and Step models, the reference grammar, and graph helpers."""

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
