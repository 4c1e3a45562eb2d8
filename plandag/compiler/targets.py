"""Write targets known before the run: literal paths checked against the write boundary.

A tool that writes names its targets (``writes="path"``); when the target is literal text,
or a ``<param.NAME>`` whose value is known, the compiler checks it against the run's write
boundary (``write_outside_boundary``). Targets made from step results are checked at run
time, when they are known (ARCHITECTURE.md, "Brakes": write boundary).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from plandag.dag.diagnostics import DiagnosticCollector
from plandag.dag.plan import Step
from plandag.dag.references import (
    REFERENCE_PATTERN,
    ReferenceResolutionError,
    get_path,
    malformed_tokens,
    parse_reference,
)
from plandag.tools.boundary import WriteBoundary

__all__ = ["check_literal_targets", "holds_reference", "resolve_params_only"]


def holds_reference(value: Any) -> bool:
    """True when ``value`` holds a reference (or a malformed one, reported on its own)."""
    if isinstance(value, str):
        return "<" in value and (
            REFERENCE_PATTERN.search(value) is not None or any(malformed_tokens(value))
        )
    if isinstance(value, Mapping):
        return any(holds_reference(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(holds_reference(item) for item in value)
    return False


def check_literal_targets(
    step: Step,
    targets_of: Any,
    boundary: WriteBoundary,
    params: Mapping[str, Any] | None,
    diagnostics: DiagnosticCollector,
) -> None:
    """Record ``write_outside_boundary`` for each literal target of ``step`` outside
    ``boundary``; ``targets_of(args)`` gives the targets (a tool's ``write_targets``), and
    ``params`` (when known) resolve ``<param.NAME>`` in them first."""
    args: Any = step.args
    if params is not None:
        # Param values are known now: resolve them so `<param.out>` targets are checked too;
        # step references stay as written (their targets are checked at run time).
        args = resolve_params_only(step.args, params)
    try:
        targets = targets_of(args)
    except Exception:
        return  # a target function that needs run-time values: checked again at run time
    for target in targets:
        if holds_reference(target):
            continue
        try:
            inside = boundary.contains(target)
        except (OSError, ValueError):
            inside = False
        if not inside:
            roots = boundary.describe()
            diagnostics.add(
                "write_outside_boundary",
                step.id,
                f"write target {target!r} lies outside the write boundary ({roots})",
                "write inside the boundary or widen it with --write-boundary",
            )


def resolve_params_only(value: Any, params: Mapping[str, Any]) -> Any:
    """``value`` with its param references resolved; step references (and param references
    that cannot resolve) are left as written."""

    def param_value(match: re.Match[str]) -> tuple[bool, Any]:
        reference = parse_reference(match.group(0))
        if reference is None or reference.param is None or reference.param not in params:
            return False, None
        try:
            return True, get_path(params[reference.param], reference.path)
        except ReferenceResolutionError:
            return False, None

    def as_text(match: re.Match[str]) -> str:
        found, item = param_value(match)
        if not found:
            return match.group(0)
        return item if isinstance(item, str) else json.dumps(item, default=str)

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            if "<" not in item:
                return item
            whole = REFERENCE_PATTERN.fullmatch(item)
            if whole:
                found, resolved = param_value(whole)
                return resolved if found else item
            return REFERENCE_PATTERN.sub(as_text, item)
        if isinstance(item, Mapping):
            return {key: walk(sub) for key, sub in item.items()}
        if isinstance(item, list | tuple):
            return [walk(sub) for sub in item]
        return item

    return walk(value)
