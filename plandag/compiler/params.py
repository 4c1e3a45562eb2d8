"""Param values: coerced to their declared types, checked against the plan's params.

A plan declares its params (``"params": {"input": {"type": "string"}}``); a run gives their
values (``--param input=a.xml``, or ``params=`` in Python), as strings from the command line
or as values from Python. Diagnostics: ``invalid_param_value``, ``missing_param``,
``unknown_param``, and for a value the plan's hash cannot encode ``integer_out_of_range`` or
``lone_surrogate`` (:mod:`plandag.compiler.values`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from plandag.compiler.values import check_values
from plandag.dag.diagnostics import DiagnosticCollector
from plandag.dag.plan import ParamSpec, Plan

__all__ = ["check_params", "coerce_param"]


def coerce_param(name: str, spec: ParamSpec, value: Any) -> tuple[Any, str | None]:
    """``(value, None)`` with ``value`` coerced to the declared type of param ``name``
    (CLI strings included: ``"3"`` for an integer), or ``(value, problem)`` with a sentence
    saying what was expected when it cannot be."""
    kind = spec.type
    try:
        if kind == "string":
            if isinstance(value, str):
                return value, None
            if isinstance(value, int | float) and not isinstance(value, bool):
                return str(value), None
        elif kind == "integer":
            if isinstance(value, int) and not isinstance(value, bool):
                return value, None
            if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
                return int(value), None
        elif kind == "number":
            if isinstance(value, int | float) and not isinstance(value, bool):
                return value, None
            if isinstance(value, str):
                return float(value), None
        elif kind == "boolean":
            if isinstance(value, bool):
                return value, None
            if isinstance(value, str) and value.lower() in {"true", "false", "1", "0"}:
                return value.lower() in {"true", "1"}, None
        elif kind in ("object", "array"):
            expected = dict if kind == "object" else list
            decoded = json.loads(value) if isinstance(value, str) else value
            if isinstance(decoded, expected):
                return decoded, None
        else:
            return value, None
    except (ValueError, TypeError, RecursionError):
        pass
    article = "an" if kind[0] in "aeiou" else "a"
    return value, f"param {name!r} must be {article} {kind}, got {value!r:.80}"


def check_params(
    plan: Plan, given: Mapping[str, Any] | None, diagnostics: DiagnosticCollector
) -> dict[str, Any]:
    """The run's param values by name: given ones coerced, defaults for the others.

    Args:
        plan: the plan, whose ``params`` declare names, types and defaults.
        given: the values given for the run, or None (``plandag check``: nothing is
            required then, and only defaults are resolved).
        diagnostics: where problems are recorded.

    Returns:
        The resolved values (a value that cannot be coerced is kept as given, with an
        ``invalid_param_value`` error recorded).
    """
    resolved: dict[str, Any] = {}
    for name, spec in plan.params.items():
        if given is not None and name in given:
            value, problem = coerce_param(name, spec, given[name])
            if problem is not None:
                diagnostics.add("invalid_param_value", None, problem, f"--param {name}=VALUE")
            resolved[name] = value
        elif not spec.is_required:
            resolved[name] = spec.default
            if spec.default is not None:
                value, problem = coerce_param(name, spec, spec.default)
                if problem is not None:
                    diagnostics.add(
                        "invalid_param_value",
                        None,
                        f"the default of {problem}",
                        f'fix "default" of param {name!r} in the plan',
                    )
                resolved[name] = value
        elif given is not None:
            diagnostics.add(
                "missing_param",
                None,
                f"param {name!r} is required and was not given",
                f"pass it with --param {name}=VALUE",
            )
    if given is not None:
        for name in given:
            if name in resolved:
                check_values(diagnostics, None, resolved[name], f"params.{name}")
            if name not in plan.params:
                declared = ", ".join(sorted(plan.params)) or "none"
                diagnostics.add(
                    "unknown_param",
                    None,
                    f"a value was given for param {name!r}, which the plan does not declare",
                    f"declared params: {declared}",
                )
    return resolved
