"""A plan's limits (:mod:`plandag.dag.limits`), named where the compiler's callers look for
them: the compiler holds every plan to them.
"""

from plandag.dag.limits import DEFAULT_MAX_ARG_BYTES as DEFAULT_MAX_ARG_BYTES
from plandag.dag.limits import DEFAULT_MAX_PLAN_BYTES as DEFAULT_MAX_PLAN_BYTES
from plandag.dag.limits import DEFAULT_MAX_STEPS as DEFAULT_MAX_STEPS
from plandag.dag.limits import MAX_DIAGNOSTICS as MAX_DIAGNOSTICS
from plandag.dag.limits import MAX_NESTING as MAX_NESTING

__all__ = [
    "DEFAULT_MAX_ARG_BYTES",
    "DEFAULT_MAX_PLAN_BYTES",
    "DEFAULT_MAX_STEPS",
    "MAX_DIAGNOSTICS",
    "MAX_NESTING",
]
