"""The plan compiler: plan JSON → :class:`CompiledPlan`, or :class:`PlanError` with every problem.

Like a compiler, it never stops at the first problem: each pass records diagnostics and the
next pass runs on what is still usable, so a replanner can fix everything at once. The only
exception it raises is :class:`PlanError` (a hypothesis property test holds it to that).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Container, Mapping, Sequence
from typing import Any, NamedTuple

import networkx as nx
import pydantic

from plandag.compiler.compiled import CompiledCheck, CompiledPlan, CompiledStep
from plandag.compiler.diagnostics import DIAGNOSTIC_CODES, Diagnostic
from plandag.compiler.types import path_problem
from plandag.dag.plan import ParamSpec, Plan, Step
from plandag.dag.references import (
    REFERENCE_PATTERN,
    ReferenceResolutionError,
    find_malformed,
    find_references,
    get_path,
    parse_reference,
)
from plandag.errors import PlanError
from plandag.tools.allowlist import host_allowed, host_pattern
from plandag.tools.boundary import WriteBoundary
from plandag.tools.registry import Registry

__all__ = [
    "DEFAULT_MAX_ARG_BYTES",
    "DEFAULT_MAX_STEPS",
    "MAX_NESTING",
    "StepTaint",
    "check_egress",
    "compile_plan",
    "load_plan",
]

DEFAULT_MAX_STEPS = 500
DEFAULT_MAX_ARG_BYTES = 1_000_000
MAX_NESTING = 200
"""The deepest nesting of dicts and lists a plan may have (the compiler walks it recursively)."""


class _Diagnostics:
    def __init__(self) -> None:
        self.items: list[Diagnostic] = []

    def add(self, code: str, step_id: int | None, message: str, hint: str = "") -> None:
        self.items.append(Diagnostic(code, DIAGNOSTIC_CODES[code], step_id, message, hint))

    @property
    def has_errors(self) -> bool:
        return any(item.severity == "error" for item in self.items)


def _location(loc: tuple[int | str, ...]) -> str:
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
    diagnostics = _Diagnostics()
    plan = _load(source, diagnostics)
    if plan is None:
        raise PlanError(diagnostics.items)
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


def _load(source: Any, diagnostics: _Diagnostics) -> Plan | None:
    if isinstance(source, Plan):
        values = [source.output, *(step.args for step in source.steps)]
        values += [check.arguments for step in source.steps for check in step.check]
        if any(_nesting_depth(value, MAX_NESTING) > MAX_NESTING for value in values):
            diagnostics.add(
                "invalid_schema",
                None,
                f"the plan nests dicts and lists more than {MAX_NESTING} levels deep",
                "flatten the arguments, or pass large data by reference or as a file",
            )
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
            diagnostics.add("invalid_json", None, "the plan nests too deeply to read")
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
        diagnostics.add(
            "invalid_schema",
            None,
            f"the plan nests dicts and lists more than {MAX_NESTING} levels deep",
            "flatten the arguments, or pass large data by reference or as a file",
        )
        return None
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
                f"{_location(loc)}: {item['msg']}",
                "see `plandag schema plan` for the expected shape",
            )
        return None
    except RecursionError:
        diagnostics.add("invalid_schema", None, "the plan nests too deeply to validate")
        return None


def _holds_reference(value: Any) -> bool:
    """True when ``value`` holds a reference (or a malformed one, reported on its own)."""
    if isinstance(value, str):
        return "<" in value and (
            REFERENCE_PATTERN.search(value) is not None or any(find_malformed(value))
        )
    if isinstance(value, Mapping):
        return any(_holds_reference(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(_holds_reference(item) for item in value)
    return False


def _errors_outside_references(
    error: pydantic.ValidationError, args: Mapping[str, Any]
) -> list[tuple[str, str]]:
    """Validation errors whose location does not pass through a reference-bearing value.

    A reference's type is known only at run time (or from the referenced tool's declared
    result type), so a field fed by a reference is not judged by its literal text.
    """
    kept: list[tuple[str, str]] = []
    for item in error.errors():
        loc = tuple(item["loc"])
        value: Any = args
        fed_by_reference = False
        for part in loc:
            if isinstance(value, Mapping) and part in value:
                value = value[part]
            elif isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
                value = value[part]
            else:
                break
            if isinstance(value, str) and _holds_reference(value):
                fed_by_reference = True
                break
        if not fed_by_reference:
            kept.append((_location(loc), item["msg"]))
    return kept


def _coerce_param(name: str, spec: ParamSpec, value: Any) -> tuple[Any, str | None]:
    """Coerce a param value (CLI strings included) to its declared type."""
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


def compile_plan(
    plan: Plan | str | bytes | Mapping[str, Any],
    registry: Registry,
    *,
    params: Mapping[str, Any] | None = None,
    read_only: bool = False,
    write_boundary: WriteBoundary | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    max_arg_bytes: int = DEFAULT_MAX_ARG_BYTES,
    http_allow: Sequence[str] | None = None,
    tainted_author: bool = False,
) -> CompiledPlan:
    """Check a plan against a registry and build its dependency graph.

    Args:
        plan: a Plan, JSON text/bytes, or the decoded JSON object.
        registry: the tools and check kinds this run may use.
        params: values for the plan's params (CLI strings are coerced to the declared
            type). ``None`` compiles without values (``plandag check``): references to
            params are still checked against the declared params.
        read_only: allow only tools with ``effects="none"``.
        write_boundary: where the run may write; literal write targets are checked here,
            resolved ones again at run time. ``None`` skips write checks.
        max_steps: the most steps a plan may have.
        max_arg_bytes: the most bytes a step's args may take as JSON.
        http_allow: the configured HTTP allow-list (host globs,
            :mod:`plandag.tools.allowlist`), or None for none. The run's allow-list is
            these and the hosts of the plan's literal URLs
            (:attr:`CompiledPlan.allowed_hosts`); a read-only run gets only these, and a
            literal URL on another host is a ``host_not_allowed`` error.
        tainted_author: the plan was written by a model that had read outside content
            (results of an earlier run, an investigation): its literal args are tainted
            too. Taint (ARCHITECTURE.md, "Untrusted content") is traced through
            references from ``taint_source`` tools; in a read-only run a step that sends
            tainted data out (an ``egress`` tool) is a ``tainted_egress`` error.

    Returns:
        A :class:`CompiledPlan` whose ``diagnostics`` hold the warnings.

    Raises:
        PlanError: carrying every Diagnostic found (codes in
            :mod:`plandag.compiler.diagnostics`), when any has severity ``error``.
    """
    diagnostics = _Diagnostics()
    loaded = _load(plan, diagnostics)
    if loaded is None:
        raise PlanError(diagnostics.items)

    steps = loaded.steps
    if len(steps) > max_steps:
        diagnostics.add(
            "too_many_steps",
            None,
            f"the plan has {len(steps)} steps; this run allows at most {max_steps}",
            "merge steps or split the task into several plans",
        )
    by_id = _index_steps(steps, diagnostics)

    resolved_params = _check_params(loaded, params, diagnostics)
    edges: set[tuple[int, int]] = set()
    compiled_checks: dict[int, tuple[CompiledCheck, ...]] = {}

    for step in by_id.values():
        _check_step(
            step,
            by_id,
            loaded,
            registry,
            diagnostics,
            edges,
            compiled_checks,
            read_only=read_only,
            write_boundary=write_boundary,
            params=resolved_params if params is not None else None,
            max_arg_bytes=max_arg_bytes,
        )
    _check_output(loaded, by_id, diagnostics)

    graph: nx.DiGraph = nx.DiGraph()
    graph.add_nodes_from(by_id)
    graph.add_edges_from(edges)
    _check_cycles(graph, diagnostics)
    order: tuple[int, ...] = ()
    taint: dict[int, StepTaint] = {}
    if not any(item.code == "cycle" for item in diagnostics.items):
        order = tuple(nx.lexicographical_topological_sort(graph))
        taint = check_egress(
            order,
            by_id,
            registry,
            diagnostics,
            tainted_before=(),
            tainted_author=tainted_author,
            params=resolved_params if params is not None else None,
            read_only=read_only,
            http_allow=http_allow,
        )

    if diagnostics.has_errors:
        raise PlanError(diagnostics.items)

    compiled_steps = _compiled_steps(graph, order, by_id, registry, compiled_checks, taint)
    return CompiledPlan(
        plan=loaded,
        graph=graph,
        steps=compiled_steps,
        order=order,
        params=resolved_params,
        diagnostics=tuple(diagnostics.items),
        read_only=read_only,
        write_boundary=write_boundary,
        http_allow=tuple(http_allow) if http_allow is not None else None,
    )


def _index_steps(
    steps: list[Step], diagnostics: _Diagnostics, existing: Mapping[int, Step] | None = None
) -> dict[int, Step]:
    """``steps`` by id, the first of each id kept; a repeated id, or one already used by a
    step of ``existing`` (a running session's steps: ids are never reused), is a
    ``duplicate_step_id`` error."""
    existing = existing or {}

    def largest() -> int:  # only computed for a message: O(steps of the run)
        return max([*(s.id for s in steps), *existing], default=0)

    by_id: dict[int, Step] = {}
    for step in steps:
        if step.id in existing:
            diagnostics.add(
                "duplicate_step_id",
                step.id,
                f"step id {step.id} is already used by step {step.id} of this run (tool "
                f"{existing[step.id].tool}); ids are never reused, not even by a replacement",
                f"give new steps ids above {largest()}",
            )
        elif step.id in by_id:
            diagnostics.add(
                "duplicate_step_id",
                step.id,
                f"step id {step.id} is used by more than one step",
                f"give each step its own id; the largest in use is {largest()}",
            )
        else:
            by_id[step.id] = step
    return by_id


def _compiled_steps(
    graph: nx.DiGraph,
    order: tuple[int, ...],
    by_id: Mapping[int, Step],
    registry: Registry,
    compiled_checks: Mapping[int, tuple[CompiledCheck, ...]],
    taint: Mapping[int, StepTaint],
) -> dict[int, CompiledStep]:
    """The steps of ``order`` bound to their tools, parents and children as in ``graph``,
    with their taint and listed hosts (also used by
    :func:`plandag.compiler.patch.compile_patch`)."""
    return {
        step_id: CompiledStep(
            step=by_id[step_id],
            tool=registry.tools[by_id[step_id].tool],
            parents=tuple(sorted(graph.predecessors(step_id))),
            children=tuple(sorted(graph.successors(step_id))),
            checks=compiled_checks.get(step_id, ()),
            tainted_input=taint[step_id].tainted_input,
            tainted_output=taint[step_id].tainted_output,
            hosts=taint[step_id].hosts,
            tainted_literals=taint[step_id].tainted_literals,
        )
        for step_id in order
    }


class StepTaint(NamedTuple):
    """What :func:`check_egress` found for one step (see :class:`CompiledStep`)."""

    tainted_input: bool
    tainted_output: bool
    hosts: tuple[str, ...]
    tainted_literals: bool = False


def check_egress(
    order: Sequence[int],
    by_id: Mapping[int, Step],
    registry: Registry,
    diagnostics: _Diagnostics,
    *,
    tainted_before: Container[int],
    tainted_author: bool,
    params: Mapping[str, Any] | None,
    read_only: bool,
    http_allow: Sequence[str] | None,
) -> dict[int, StepTaint]:
    """Trace taint through the steps of ``order`` (a topological order) and collect the
    hosts their literal URLs list; in a read-only run, report ``tainted_egress`` and
    ``host_not_allowed`` (ARCHITECTURE.md, "Untrusted content").

    A step's input is tainted when ``tainted_author`` (its literal text was written after
    reading outside content) or when a reference in its args names a step whose output is
    tainted (of ``order``, or of ``tainted_before``: existing steps of a run). Its output
    is tainted when its input is, or when its tool is a ``taint_source``.

    Returns:
        Each step's :class:`StepTaint`, by id (steps with an unknown tool: tainted output,
        no hosts).
    """
    found: dict[int, StepTaint] = {}
    configured = tuple(http_allow or ())
    for step_id in order:
        step = by_id[step_id]
        tool = registry.tools.get(step.tool)
        referenced = {
            reference.step_id
            for _, reference in find_references(step.args, "args")
            if reference.step_id is not None
        }
        tainted_input = tainted_author or any(
            (found[parent].tainted_output if parent in found else parent in tainted_before)
            for parent in referenced
        )
        if tool is None:
            found[step_id] = StepTaint(tainted_input, True, (), tainted_author)
            continue
        hosts: list[str] = []
        if tool.reaches is not None:
            value = step.args.get(tool.reaches)
            if params is not None:
                value = _resolve_params_only(value, params)
            if isinstance(value, str) and not _holds_reference(value):
                pattern = host_pattern(value)
                if pattern is not None:
                    hosts.append(pattern)
                    if read_only and not host_allowed(value, configured):
                        diagnostics.add(
                            "host_not_allowed",
                            step_id,
                            f"args.{tool.reaches}: {value!r} is on host {pattern}, which the "
                            "configured HTTP allow-list does not list; a read-only run "
                            "reaches only configured hosts, never hosts the plan names",
                            f"add the host with --http-allow {pattern} (or http_allow in "
                            "plandag.toml), or drop --read-only",
                        )
        if read_only and tool.egress and tainted_input:
            why = (
                "the plan was written after reading outside content"
                if tainted_author
                else "its args use results that came from outside (steps "
                + ", ".join(
                    str(parent)
                    for parent in sorted(referenced)
                    if (
                        found[parent].tainted_output
                        if parent in found
                        else parent in tainted_before
                    )
                )
                + ")"
            )
            diagnostics.add(
                "tainted_egress",
                step_id,
                f"tool {tool.name} sends data out and {why}; a read-only run never asks, so it "
                "cannot send tainted data anywhere",
                "drop --read-only so that a person approves the step, or do not pass outside "
                "content to it",
            )
        found[step_id] = StepTaint(
            tainted_input, tainted_input or tool.taint_source, tuple(hosts), tainted_author
        )
    return found


def _check_params(
    plan: Plan, given: Mapping[str, Any] | None, diagnostics: _Diagnostics
) -> dict[str, Any]:
    resolved: dict[str, Any] = {}
    for name, spec in plan.params.items():
        if given is not None and name in given:
            value, problem = _coerce_param(name, spec, given[name])
            if problem is not None:
                diagnostics.add("invalid_param_value", None, problem, f"--param {name}=VALUE")
            resolved[name] = value
        elif not spec.is_required:
            resolved[name] = spec.default
            if spec.default is not None:
                value, problem = _coerce_param(name, spec, spec.default)
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
            if name not in plan.params:
                declared = ", ".join(sorted(plan.params)) or "none"
                diagnostics.add(
                    "unknown_param",
                    None,
                    f"a value was given for param {name!r}, which the plan does not declare",
                    f"declared params: {declared}",
                )
    return resolved


def _check_step(
    step: Step,
    by_id: Mapping[int, Step],
    plan: Plan,
    registry: Registry,
    diagnostics: _Diagnostics,
    edges: set[tuple[int, int]],
    compiled_checks: dict[int, tuple[CompiledCheck, ...]],
    *,
    read_only: bool,
    write_boundary: WriteBoundary | None,
    params: Mapping[str, Any] | None,
    max_arg_bytes: int,
) -> None:
    sid = step.id
    tool = registry.tools.get(step.tool)
    if tool is None:
        nearest = registry.nearest_tools(step.tool)
        diagnostics.add(
            "unknown_tool",
            sid,
            f"tool {step.tool!r} is not registered",
            f"did you mean {', '.join(nearest)}?"
            if nearest
            else f"registered tools: {_name_list(registry.tools)}",
        )
    try:
        size = len(json.dumps(step.args, default=str))
    except (TypeError, ValueError, RecursionError):
        size = 0
    if size > max_arg_bytes:
        diagnostics.add(
            "args_too_large",
            sid,
            f"the step's args take {size} bytes as JSON; at most {max_arg_bytes} are allowed",
            "pass large data by reference (<step_N_result>) or as a file path",
        )

    if tool is not None:
        try:
            tool.args_model.model_validate(step.args)
        except pydantic.ValidationError as error:
            for where, why in _errors_outside_references(error, step.args):
                diagnostics.add(
                    "invalid_args",
                    sid,
                    f"args.{where}: {why} (tool {tool.name})",
                    f"arguments of {tool.name}: {_argument_names(tool.args_model)}",
                )
        if read_only and tool.effects != "none":
            diagnostics.add(
                "effects_in_read_only",
                sid,
                f"tool {tool.name} has effects ({tool.effects}) and this run is read-only",
                "drop --read-only, or plan with tools without effects",
            )
        if write_boundary is not None and tool.writes is not None:
            _check_literal_targets(step, tool.write_targets, write_boundary, params, diagnostics)

    checks: list[CompiledCheck] = []
    for index, spec in enumerate(step.check):
        definition = registry.checks.get(spec.kind)
        if definition is None:
            nearest = registry.nearest_checks(spec.kind)
            diagnostics.add(
                "unknown_check",
                sid,
                f"check[{index}]: kind {spec.kind!r} is not registered",
                f"did you mean {', '.join(nearest)}?"
                if nearest
                else f"known kinds: {_name_list(registry.checks)}",
            )
            continue
        arguments = spec.arguments
        try:
            definition.args_model.model_validate(arguments)
        except pydantic.ValidationError as error:
            for where, why in _errors_outside_references(error, arguments):
                diagnostics.add(
                    "invalid_check_args",
                    sid,
                    f"check[{index}] ({spec.kind}).{where}: {why}",
                    f"fields of {spec.kind}: {_argument_names(definition.args_model)}",
                )
        checks.append(CompiledCheck(definition, arguments))
    compiled_checks[sid] = tuple(checks)

    seen: set[int] = set()
    for parent in step.depends_on:
        if parent in seen:
            diagnostics.add(
                "duplicate_dependency",
                sid,
                f"depends_on lists step {parent} more than once",
                "list each dependency once",
            )
            continue
        seen.add(parent)
        if parent == sid:
            diagnostics.add(
                "self_dependency", sid, f"step {sid} depends on itself", "remove it from depends_on"
            )
        elif parent not in by_id:
            diagnostics.add(
                "unknown_dependency",
                sid,
                f"depends_on names step {parent}, which does not exist",
                f"existing steps: {_id_list(by_id)}",
            )
        else:
            edges.add((parent, sid))

    containers: dict[str, Any] = {
        "args": step.args,
        "check": [spec.arguments for spec in step.check],
    }
    for field, container in containers.items():
        for where, token, suggestion in find_malformed(container, field):
            diagnostics.add(
                "malformed_reference",
                sid,
                f"{where}: {token!r} is not a valid reference",
                f"write {suggestion}; references are <step_N_result>, "
                "<step_N_result.field.0> or <param.NAME>",
            )
        for where, reference in find_references(container, field):
            _check_reference(step, where, reference, by_id, plan, registry, diagnostics, edges)


def _argument_names(model: type[pydantic.BaseModel]) -> str:
    return ", ".join(field.alias or name for name, field in model.model_fields.items())


def _name_list(names: Mapping[str, Any]) -> str:
    shown = sorted(names)
    text = ", ".join(shown[:30]) + (", ..." if len(shown) > 30 else "")
    return text or "none"


def _id_list(by_id: Mapping[int, Step]) -> str:
    ids = sorted(by_id)
    shown = ", ".join(map(str, ids[:20]))
    return shown + (", ..." if len(ids) > 20 else "") if ids else "none"


def _check_reference(
    step: Step,
    where: str,
    reference: Any,
    by_id: Mapping[int, Step],
    plan: Plan,
    registry: Registry,
    diagnostics: _Diagnostics,
    edges: set[tuple[int, int]],
) -> None:
    sid = step.id
    if reference.param is not None:
        if reference.param not in plan.params:
            declared = ", ".join(sorted(plan.params)) or "none"
            diagnostics.add(
                "unknown_param",
                sid,
                f"{where}: {reference.text} names param {reference.param!r}, which the plan "
                "does not declare",
                f'declare it under "params" (declared: {declared})',
            )
        return
    target = reference.step_id
    if target == sid:
        diagnostics.add(
            "self_dependency",
            sid,
            f"{where}: {reference.text} refers to the step's own result",
            "a step can only use results of earlier steps",
        )
        return
    if target not in by_id:
        diagnostics.add(
            "reference_to_missing_step",
            sid,
            f"{where}: {reference.text} refers to step {target}, which does not exist",
            f"existing steps: {_id_list(by_id)}",
        )
        return
    if target not in step.depends_on and (target, sid) not in edges:
        diagnostics.add(
            "implied_dependency",
            sid,
            f"{where}: {reference.text} uses step {target}, missing from depends_on; "
            "the dependency was added",
            f"add {target} to depends_on",
        )
    edges.add((target, sid))
    referenced_tool = registry.tools.get(by_id[target].tool)
    if referenced_tool is not None and reference.path:
        problem = path_problem(referenced_tool.result_type, reference.path)
        if problem is not None:
            diagnostics.add(
                "invalid_reference_path",
                sid,
                f"{where}: {reference.text}: {problem} (step {target} calls "
                f"{referenced_tool.name})",
                "use a path the referenced tool's result has",
            )


def _check_literal_targets(
    step: Step,
    targets_of: Any,
    boundary: WriteBoundary,
    params: Mapping[str, Any] | None,
    diagnostics: _Diagnostics,
) -> None:
    args: Any = step.args
    if params is not None:
        # Param values are known now: resolve them so `<param.out>` targets are checked too;
        # step references stay as written (their targets are checked at run time).
        args = _resolve_params_only(step.args, params)
    try:
        targets = targets_of(args)
    except Exception:
        return  # a target function that needs run-time values: checked again at run time
    for target in targets:
        if _holds_reference(target):
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


def _resolve_params_only(value: Any, params: Mapping[str, Any]) -> Any:
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


def _check_output(plan: Plan, by_id: Mapping[int, Step], diagnostics: _Diagnostics) -> None:
    for where, token, nearest in find_malformed(plan.output, "output"):
        diagnostics.add(
            "malformed_reference",
            None,
            f"{where}: {token!r} is not a valid reference",
            f"write {nearest}",
        )
    for where, reference in find_references(plan.output, "output"):
        if reference.step_id is not None and reference.step_id not in by_id:
            diagnostics.add(
                "reference_to_missing_step",
                None,
                f"{where}: {reference.text} refers to step {reference.step_id}, "
                "which does not exist",
                f"existing steps: {_id_list(by_id)}",
            )
        if reference.param is not None and reference.param not in plan.params:
            diagnostics.add(
                "unknown_param",
                None,
                f"{where}: {reference.text} names an undeclared param",
                'declare it under "params"',
            )


def _check_cycles(graph: nx.DiGraph, diagnostics: _Diagnostics) -> None:
    if nx.is_directed_acyclic_graph(graph):
        return
    reported: set[frozenset[int]] = set()
    for cycle in itertools.islice(nx.simple_cycles(graph), 10):
        if frozenset(cycle) in reported:
            continue
        reported.add(frozenset(cycle))
        start = cycle.index(min(cycle))
        ordered = cycle[start:] + cycle[:start]
        text = " → ".join(str(node) for node in [*ordered, ordered[0]])
        diagnostics.add(
            "cycle",
            ordered[0],
            f"the dependencies form a cycle: {text}",
            "break the cycle: one of these steps must not need the others' results",
        )
