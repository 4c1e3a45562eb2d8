"""The plan compiler: plan JSON → :class:`CompiledPlan`, or :class:`PlanError` with every problem.

Like a compiler, it never stops at the first problem: each pass records diagnostics and the
next pass runs on what is still usable, so a replanner can fix everything at once. The only
exception it raises is :class:`PlanError` (a hypothesis property test holds it to that).
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pydantic

from plandag.compiler.collector import collector_paused
from plandag.compiler.compiled import CompiledCheck, CompiledPlan, CompiledStep
from plandag.compiler.egress import StepTaint, check_egress
from plandag.compiler.load import decode_plan, load_plan, location, step_count, validate_plan
from plandag.compiler.params import check_params
from plandag.compiler.required import attach_required_checks
from plandag.compiler.targets import check_literal_targets, holds_reference
from plandag.compiler.types import path_problem
from plandag.compiler.values import check_header, check_values
from plandag.dag.diagnostics import DiagnosticCollector
from plandag.dag.graph import dependency_order
from plandag.dag.limits import DEFAULT_MAX_ARG_BYTES, DEFAULT_MAX_STEPS, MAX_NESTING
from plandag.dag.plan import Plan, Step
from plandag.dag.references import (
    find_references,
    malformed_tokens,
    suggest_reference,
)
from plandag.errors import PlanError
from plandag.tools.base import bind_effects
from plandag.tools.boundary import WriteBoundary
from plandag.tools.registry import Registry

if TYPE_CHECKING:
    import networkx as nx

__all__ = [
    "DEFAULT_MAX_ARG_BYTES",
    "DEFAULT_MAX_STEPS",
    "MAX_NESTING",
    "StepTaint",
    "check_egress",
    "compile_plan",
    "load_plan",
    "plan_error",
    "step_limit_diagnostic",
]


def plan_error(diagnostics: DiagnosticCollector) -> PlanError:
    """The :class:`PlanError` for what ``diagnostics`` holds (listed ones and the count)."""
    return PlanError(diagnostics.items, error_count=diagnostics.error_count)


def step_limit_diagnostic(diagnostics: DiagnosticCollector, message: str, max_steps: int) -> None:
    """Record ``too_many_steps``: ``message`` says how many steps there are; the hint says
    how to raise the limit (``--max-steps``, config ``max_steps``, ``max_steps=``)."""
    diagnostics.add(
        "too_many_steps",
        None,
        f"{message}; this run allows at most {max_steps} (max_steps)",
        "raise the limit with --max-steps N (config key max_steps; max_steps=N in "
        "Python), or merge steps or split the task into several plans",
    )


def _errors_outside_references(
    error: pydantic.ValidationError, args: Mapping[str, Any]
) -> list[tuple[str, str]]:
    """Validation errors whose location does not pass through a reference-bearing value.

    A reference's type is known only at run time (or from the referenced tool's declared
    result type), so a field fed by a reference is not judged by its literal text. A key
    the tool (or a model it takes) does not have is refused whatever its value: no value
    a reference resolves to makes an unknown argument known.
    """
    kept: list[tuple[str, str]] = []
    for item in error.errors():
        loc = tuple(item["loc"])
        if item["type"] == "extra_forbidden":
            kept.append((location(loc), item["msg"]))
            continue
        value: Any = args
        fed_by_reference = False
        for part in loc:
            if isinstance(value, Mapping) and part in value:
                value = value[part]
            elif isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
                value = value[part]
            else:
                break
            if isinstance(value, str) and holds_reference(value):
                fed_by_reference = True
                break
        if not fed_by_reference:
            kept.append((location(loc), item["msg"]))
    return kept


@collector_paused
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
        max_steps: the most steps a plan may have (>= 1; default 500, the CLI's
            ``--max-steps`` and config ``max_steps``). A plan over it is refused at once
            with one ``too_many_steps`` diagnostic, before anything else is analysed;
            sessions opened on the compiled plan keep the limit for the steps they add.
        max_arg_bytes: the most bytes a step's args may take as JSON.
        http_allow: the configured HTTP allow-list (host globs,
            :mod:`plandag.allowlist`), or None for none. The run's allow-list is
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
        ValueError: ``max_steps`` is not an integer >= 1.
        PlanError: carrying every Diagnostic found (codes in
            :mod:`plandag.dag.diagnostics`), when any has severity ``error``; past
            100 the first 100 and a ``diagnostics_omitted`` summary counting the rest
            (compile time stays linear in the plan's size). Integers outside ±(2^53 - 1)
            and lone UTF-16 surrogates anywhere in the plan or its params are errors
            (``integer_out_of_range``, ``lone_surrogate``): the plan's hash (RFC 8785)
            cannot encode them.
    """
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(
            f"compile_plan: max_steps must be an integer >= 1, got {max_steps!r}; give the "
            f"most steps a plan may have (default {DEFAULT_MAX_STEPS})"
        )
    diagnostics = DiagnosticCollector()
    decoded = decode_plan(plan, diagnostics)
    if decoded is None:
        raise plan_error(diagnostics)
    count = step_count(decoded)
    if count > max_steps:  # refused at once: nothing else of the plan is analysed
        step_limit_diagnostic(diagnostics, f"the plan has {count} steps", max_steps)
        raise plan_error(diagnostics)
    loaded = validate_plan(decoded, diagnostics)
    if loaded is None:
        raise plan_error(diagnostics)

    check_header(loaded, diagnostics)
    by_id = _index_steps(loaded.steps, diagnostics)
    written = dict(by_id)
    attached = attach_required_checks(by_id, by_id, registry, diagnostics)
    if attached:  # the plan carries the attached checks from here on
        loaded = loaded.model_copy(
            update={
                "steps": [
                    attached[step.id] if step.id in attached and written[step.id] is step else step
                    for step in loaded.steps
                ]
            }
        )
    resolved_params = check_params(loaded, params, diagnostics)
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

    parents_of = _dependencies(by_id, edges)
    order: tuple[int, ...] = ()
    taint: dict[int, StepTaint] = {}
    found = dependency_order(parents_of)
    if found is None:
        _check_cycles(_graph_of(by_id, edges), diagnostics)  # networkx names the cycles
    else:
        order = tuple(found)
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
        raise plan_error(diagnostics)

    compiled_steps = _compiled_steps(parents_of, order, by_id, registry, compiled_checks, taint)
    return CompiledPlan(
        plan=loaded,
        steps=compiled_steps,
        order=order,
        params=resolved_params,
        diagnostics=tuple(diagnostics.items),
        read_only=read_only,
        write_boundary=write_boundary,
        http_allow=tuple(http_allow) if http_allow is not None else None,
        max_steps=max_steps,
    )


def _index_steps(
    steps: list[Step],
    diagnostics: DiagnosticCollector,
    existing: Mapping[int, Step] | None = None,
) -> dict[int, Step]:
    """``steps`` by id, the first of each id kept; a repeated id, or one already used by a
    step of ``existing`` (a running session's steps: ids are never reused), is a
    ``duplicate_step_id`` error. Linear in the steps: the largest id (named in hints) is
    found once."""
    existing = existing or {}

    @functools.cache
    def largest() -> int:
        return max([*(s.id for s in steps), *existing], default=0)

    by_id: dict[int, Step] = {}
    for step in steps:
        if step.id in existing:
            tool = existing[step.id].tool
            diagnostics.add(
                "duplicate_step_id",
                step.id,
                f"step id {step.id} is already used by step {step.id} of this run (tool "
                f"{tool}); ids are never reused, not even by a replacement",
                lambda: f"give new steps ids above {largest()}",
            )
        elif step.id in by_id:
            diagnostics.add(
                "duplicate_step_id",
                step.id,
                f"step id {step.id} is used by more than one step",
                lambda: f"give each step its own id; the largest in use is {largest()}",
            )
        else:
            by_id[step.id] = step
    return by_id


def _dependencies(nodes: Iterable[int], edges: Iterable[tuple[int, int]]) -> dict[int, set[int]]:
    """Each step's parents: ``nodes`` (in their order), then any other step an edge
    ``(parent, child)`` names."""
    parents_of: dict[int, set[int]] = {node: set() for node in nodes}
    for parent, child in edges:
        parents_of.setdefault(parent, set())
        parents_of.setdefault(child, set()).add(parent)
    return parents_of


def _graph_of(nodes: Iterable[int], edges: Iterable[tuple[int, int]]) -> nx.DiGraph:
    import networkx as nx

    graph = nx.DiGraph()
    graph.add_nodes_from(nodes)
    graph.add_edges_from(edges)
    return graph


def _compiled_steps(
    parents_of: Mapping[int, Collection[int]],
    order: tuple[int, ...],
    by_id: Mapping[int, Step],
    registry: Registry,
    compiled_checks: Mapping[int, tuple[CompiledCheck, ...]],
    taint: Mapping[int, StepTaint],
) -> dict[int, CompiledStep]:
    """The steps of ``order`` bound to their tools, parents and children as in
    ``parents_of`` (each step's parents), with their taint and listed hosts (also used by
    :func:`plandag.compiler.patch.compile_patch`)."""
    children_of: dict[int, list[int]] = {}
    for child, parents in parents_of.items():
        for parent in parents:
            children_of.setdefault(parent, []).append(child)
    return {
        step_id: CompiledStep(
            step=by_id[step_id],
            tool=bind_effects(
                registry.tools[by_id[step_id].tool], by_id[step_id].args, registry.tools
            ),
            parents=tuple(sorted(parents_of.get(step_id, ()))),
            children=tuple(sorted(children_of.get(step_id, ()))),
            checks=compiled_checks.get(step_id, ()),
            tainted_input=taint[step_id].tainted_input,
            tainted_output=taint[step_id].tainted_output,
            hosts=taint[step_id].hosts,
            tainted_literals=taint[step_id].tainted_literals,
        )
        for step_id in order
    }


def _check_step(
    step: Step,
    by_id: Mapping[int, Step],
    plan: Plan,
    registry: Registry,
    diagnostics: DiagnosticCollector,
    edges: set[tuple[int, int]],
    compiled_checks: dict[int, tuple[CompiledCheck, ...]],
    *,
    read_only: bool,
    write_boundary: WriteBoundary | None,
    params: Mapping[str, Any] | None,
    max_arg_bytes: int,
) -> None:
    sid = step.id
    tool = registry.find_tool(step.tool)
    if tool is not None and tool.names_tools is not None:
        _check_named_tools(step, tool.name, tool.names_tools, registry, diagnostics)
    if tool is not None:
        tool = bind_effects(tool, step.args, registry.tools)
    if tool is None:
        diagnostics.add(
            "unknown_tool",
            sid,
            f"tool {step.tool!r} is not registered",
            functools.partial(
                _unknown_hint,
                registry,
                registry.nearest_tools,
                step.tool,
                registry.tools,
                "registered tools",
            ),
        )
    check_values(
        diagnostics,
        sid,
        step.model_dump(include={"id", "tool", "description", "depends_on"}, exclude_none=True),
        "",
    )
    check_values(diagnostics, sid, step.args, "args")
    check_values(diagnostics, sid, [spec.model_dump() for spec in step.check], "check")
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
            check_literal_targets(step, tool.write_targets, write_boundary, params, diagnostics)

    checks: list[CompiledCheck] = []
    for index, spec in enumerate(step.check):
        definition = registry.find_check(spec.kind)
        if definition is None:
            diagnostics.add(
                "unknown_check",
                sid,
                f"check[{index}]: kind {spec.kind!r} is not registered",
                functools.partial(
                    _unknown_hint,
                    registry,
                    registry.nearest_checks,
                    spec.kind,
                    registry.checks,
                    "known kinds",
                ),
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
    declared = set(step.depends_on)
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
                functools.partial(_existing_steps, by_id),
            )
        else:
            edges.add((parent, sid))

    containers: dict[str, Any] = {
        "args": step.args,
        "check": [spec.arguments for spec in step.check],
    }
    for field, container in containers.items():
        tokens = malformed_tokens(container, field)
        for where, token, closed in tokens:
            if diagnostics.full:  # the rest are only counted
                diagnostics.count("malformed_reference", 1 + sum(1 for _ in tokens))
                break
            diagnostics.add(
                "malformed_reference",
                sid,
                f"{where}: {token!r} is not a valid reference",
                functools.partial(_malformed_hint, closed),
            )
        for where, reference in find_references(container, field):
            _check_reference(
                step, declared, where, reference, by_id, plan, registry, diagnostics, edges
            )


def _check_named_tools(
    step: Step, tool: str, argument: str, registry: Registry, diagnostics: DiagnosticCollector
) -> None:
    """Each name of the literal tool list in ``step.args[argument]`` (an agent's scope) is
    registered, else an ``unknown_tool`` error with the nearest names; a list written as a
    reference is checked when the step runs."""
    names = step.args.get(argument)
    if not isinstance(names, list):
        return
    for index, name in enumerate(names):
        if not isinstance(name, str) or "<" in name:
            continue  # not a name (invalid_args), or a reference resolved at run time
        if registry.find_tool(name) is not None:
            continue
        diagnostics.add(
            "unknown_tool",
            step.id,
            f"args.{argument}[{index}]: tool {name!r} is not registered ({tool})",
            functools.partial(
                _unknown_hint,
                registry,
                registry.nearest_tools,
                name,
                registry.tools,
                "registered tools",
            ),
        )


def _argument_names(model: type[pydantic.BaseModel]) -> str:
    return ", ".join(field.alias or name for name, field in model.model_fields.items())


def _name_list(names: Mapping[str, Any]) -> str:
    shown = sorted(names)
    text = ", ".join(shown[:30]) + (", ..." if len(shown) > 30 else "")
    return text or "none"


def _unknown_hint(
    registry: Registry,
    nearest_of: Callable[[str], list[str]],
    name: str,
    names: Mapping[str, Any],
    label: str,
) -> str:
    """The hint of an unknown tool or check kind: the installed application that provides
    it (a registry that does not resolve installed applications: a planner's), else the
    nearest names, else all of them."""
    provider = registry.provider_of(name)
    if provider is not None:
        return (
            f"{name!r} is a tool or check of the installed application {provider!r}, not given "
            f"to this run: pass --tools {provider} (Python: registry.add_application"
            f"({provider!r}))"
        )
    nearest = nearest_of(name)
    return f"did you mean {', '.join(nearest)}?" if nearest else f"{label}: {_name_list(names)}"


def _malformed_hint(closed: str) -> str:
    return (
        f"write {suggest_reference(closed)}; references are <step_N_result>, "
        "<step_N_result.field.0> or <param.NAME>"
    )


def _output_malformed_hint(closed: str) -> str:
    return f"write {suggest_reference(closed)}"


def _id_list(by_id: Mapping[int, Step]) -> str:
    ids = sorted(by_id)
    shown = ", ".join(map(str, ids[:20]))
    return shown + (", ..." if len(ids) > 20 else "") if ids else "none"


def _existing_steps(by_id: Mapping[int, Step]) -> str:
    return f"existing steps: {_id_list(by_id)}"


def _declared_params(plan: Plan) -> str:
    return ", ".join(sorted(plan.params)) or "none"


def _check_reference(
    step: Step,
    declared: set[int],
    where: str,
    reference: Any,
    by_id: Mapping[int, Step],
    plan: Plan,
    registry: Registry,
    diagnostics: DiagnosticCollector,
    edges: set[tuple[int, int]],
) -> None:
    sid = step.id
    if reference.param is not None:
        if reference.param not in plan.params:
            diagnostics.add(
                "unknown_param",
                sid,
                f"{where}: {reference.text} names param {reference.param!r}, which the plan "
                "does not declare",
                lambda: f'declare it under "params" (declared: {_declared_params(plan)})',
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
            functools.partial(_existing_steps, by_id),
        )
        return
    if target not in declared and (target, sid) not in edges:
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


def _check_output(plan: Plan, by_id: Mapping[int, Step], diagnostics: DiagnosticCollector) -> None:
    for where, token, closed in malformed_tokens(plan.output, "output"):
        diagnostics.add(
            "malformed_reference",
            None,
            f"{where}: {token!r} is not a valid reference",
            functools.partial(_output_malformed_hint, closed),
        )
    for where, reference in find_references(plan.output, "output"):
        if reference.step_id is not None and reference.step_id not in by_id:
            diagnostics.add(
                "reference_to_missing_step",
                None,
                f"{where}: {reference.text} refers to step {reference.step_id}, "
                "which does not exist",
                functools.partial(_existing_steps, by_id),
            )
        if reference.param is not None and reference.param not in plan.params:
            diagnostics.add(
                "unknown_param",
                None,
                f"{where}: {reference.text} names an undeclared param",
                'declare it under "params"',
            )


def _check_cycles(graph: nx.DiGraph, diagnostics: DiagnosticCollector) -> bool:
    """True when ``graph`` is acyclic; else record a ``cycle`` error for each of the
    first ten cycles found (each named once) and return False."""
    import networkx as nx

    if nx.is_directed_acyclic_graph(graph):
        return True
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
    return False
