"""Reading a plan: text or data → :class:`~plandag.dag.plan.Plan`, in two stages.

:func:`decode_plan` turns the source into a JSON object (or keeps a Plan as it is) and
:func:`validate_plan` checks its shape. Between the two, the compiler counts the steps
(:func:`step_count`), so that a plan over its step limit is refused before anything else is
analysed. Each stage records what is wrong as ``invalid_json`` or ``invalid_schema``
diagnostics and returns None.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pydantic

from plandag.dag.diagnostics import DiagnosticCollector
from plandag.dag.limits import MAX_NESTING
from plandag.dag.plan import Plan
from plandag.errors import PlanError

__all__ = ["decode_plan", "load_plan", "location", "step_count", "validate_plan"]


def location(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as a path: ``("steps", 0, "id")`` → ``steps[0].id``."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(plan)"


def load_plan(source: Plan | str | bytes | Mapping[str, Any]) -> Plan:
    """Parse and validate a plan's shape only (no registry, no graph checks).

    Args:
        source: a Plan, JSON text or bytes, or the decoded JSON object.

    Returns:
        The validated :class:`Plan`.

    Raises:
        PlanError: with ``invalid_json`` or ``invalid_schema`` diagnostics.
    """
    diagnostics = DiagnosticCollector()
    decoded = decode_plan(source, diagnostics)
    plan = validate_plan(decoded, diagnostics) if decoded is not None else None
    if plan is None:
        raise PlanError(diagnostics.items, error_count=diagnostics.error_count)
    return plan


def _nesting_depth(value: Any, limit: int) -> int:
    """How deeply ``value`` nests dicts and lists, counted without recursion up to ``limit + 1``.

    The passes after loading walk args recursively; a deeper plan would end in RecursionError.
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > deepest:
            deepest = depth
            if deepest > limit:
                break
        if isinstance(item, Mapping):
            stack.extend((sub, depth + 1) for sub in item.values())
        elif isinstance(item, list | tuple):
            stack.extend((sub, depth + 1) for sub in item)
    return deepest


def _too_deep(diagnostics: DiagnosticCollector) -> None:
    diagnostics.add(
        "invalid_schema",
        None,
        f"the plan nests dicts and lists more than {MAX_NESTING} levels deep",
        "flatten the arguments, or pass large data by reference or as a file",
    )


def decode_plan(source: Any, diagnostics: DiagnosticCollector) -> Plan | Mapping[str, Any] | None:
    """``source`` as a JSON object (text and bytes decoded), or a Plan kept as it is.

    Args:
        source: a Plan, JSON text or bytes (UTF-8, a BOM allowed), or decoded JSON.
        diagnostics: where problems are recorded.

    Returns:
        The Plan or the JSON object; None when the text is not JSON, the value not an
        object, or it nests more than :data:`~plandag.dag.limits.MAX_NESTING` deep
        (``invalid_json`` / ``invalid_schema`` recorded).
    """
    if isinstance(source, Plan):
        values = [source.output, *(step.args for step in source.steps)]
        values += [check.arguments for step in source.steps for check in step.check]
        if any(_nesting_depth(value, MAX_NESTING) > MAX_NESTING for value in values):
            _too_deep(diagnostics)
            return None
        return source
    data: Any = source
    if isinstance(source, bytes | bytearray):
        try:
            data = bytes(source).decode("utf-8-sig")
        except UnicodeDecodeError as error:
            diagnostics.add(
                "invalid_json", None, f"the plan is not UTF-8 text ({error})", "save it as UTF-8"
            )
            return None
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as error:
            diagnostics.add(
                "invalid_json",
                None,
                f"the plan is not valid JSON: {error.msg} at line {error.lineno}, "
                f"column {error.colno}",
                "write the plan as one JSON object",
            )
            return None
        except ValueError as error:  # an integer past Python's 4300-digit conversion limit
            diagnostics.add(
                "invalid_json",
                None,
                f"the plan is not usable JSON: {error}",
                "write numbers with fewer digits",
            )
            return None
        except RecursionError:
            diagnostics.add(
                "invalid_json",
                None,
                f"the plan nests dicts and lists too deeply to read (over {MAX_NESTING} "
                "levels are refused)",
                "flatten the arguments, or pass large data by reference or as a file",
            )
            return None
    if not isinstance(data, Mapping):
        diagnostics.add(
            "invalid_schema",
            None,
            f"the plan must be a JSON object, got {type(data).__name__}",
            'start from {"version": 1, "goal": "...", "steps": [...]}',
        )
        return None
    if _nesting_depth(data, MAX_NESTING) > MAX_NESTING:
        _too_deep(diagnostics)
        return None
    return data


def step_count(decoded: Plan | Mapping[str, Any]) -> int:
    """How many steps a decoded plan lists (0 when ``steps`` is missing or not a list)."""
    if isinstance(decoded, Plan):
        return len(decoded.steps)
    steps = decoded.get("steps")
    return len(steps) if isinstance(steps, list | tuple) else 0


def validate_plan(
    decoded: Plan | Mapping[str, Any], diagnostics: DiagnosticCollector
) -> Plan | None:
    """The :class:`Plan` a decoded JSON object describes, or None (``invalid_schema``
    recorded for every field that does not fit, with its path and its step's id)."""
    if isinstance(decoded, Plan):
        return decoded
    data = decoded
    try:
        return Plan.model_validate(data)
    except pydantic.ValidationError as error:
        steps = data.get("steps")
        for item in error.errors():
            loc = tuple(item["loc"])
            step_id: int | None = None
            index = loc[1] if len(loc) >= 2 and loc[0] == "steps" else None
            if isinstance(index, int) and isinstance(steps, list) and index < len(steps):
                raw = steps[index]
                candidate = raw.get("id") if isinstance(raw, Mapping) else None
                if isinstance(candidate, int) and not isinstance(candidate, bool) and candidate > 0:
                    step_id = candidate
            diagnostics.add(
                "invalid_schema",
                step_id,
                f"{location(loc)}: {item['msg']}",
                "see `plandag schema plan` for the expected shape",
            )
        return None
    except RecursionError:
        _too_deep(diagnostics)
        return None
