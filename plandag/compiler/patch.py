"""Compile steps added to a running plan: a streamed step, or a replan's patch.

ARCHITECTURE.md, "Replanning": *the patch is compiled against the existing graph before it
runs; completed steps keep their ids and results and are never run again; new step ids
never reuse old ones*; and "Streaming": *each step is compiled as soon as it is complete in
the stream*.

:func:`compile_patch` runs every check :func:`~plandag.compiler.compile_plan` runs on a
step (the same passes of :mod:`plandag.compiler.compile`, the same diagnostic codes), with
the run's existing steps in view:

* a new id already used by the run is ``duplicate_step_id`` (ids are never reused, not even
  by the step that replaces a failed one);
* ``depends_on`` and references may name existing steps that succeeded or have not ended
  yet (pending, running), and other steps of the patch;
* naming an existing step that ended without succeeding (failed, skipped, cancelled) is an
  error: ``unknown_dependency`` when ``depends_on`` names it, ``reference_to_missing_step``
  when only a reference does. Its result will never exist: the patch must depend on the
  step that replaces it. With ``prune_on_ended_parents=True`` (streaming dispatch: a step of
  a valid plan may arrive after its upstream failed) it is allowed instead, and the new
  steps downstream of an ended step are listed in :attr:`PatchResult.pruned`: the run
  registers them already skipped, as if they had been there when the upstream ended;
* the patch must not close a cycle (existing steps never depend on new ones, so a cycle
  can only run through new steps);
* implied dependencies are added with the ``implied_dependency`` warning, as in a plan.

Every problem is reported at once in one :class:`~plandag.errors.PlanError`.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Collection, Container, Mapping, MutableMapping, Sequence
from typing import Any, cast

import networkx as nx

from plandag.compiler.collector import collector_paused
from plandag.compiler.compile import (
    _check_cycles,
    _check_output,
    _check_step,
    _compiled_steps,
    _index_steps,
    plan_error,
    step_limit_diagnostic,
)
from plandag.compiler.compiled import CompiledCheck, CompiledPlan, CompiledStep
from plandag.compiler.egress import StepTaint, check_egress
from plandag.compiler.load import decode_plan, step_count, validate_plan
from plandag.compiler.required import attach_required_checks
from plandag.compiler.values import check_values
from plandag.dag.diagnostics import Diagnostic, DiagnosticCollector
from plandag.dag.limits import DEFAULT_MAX_ARG_BYTES, DEFAULT_MAX_STEPS
from plandag.dag.plan import Plan, Step
from plandag.dag.references import find_references
from plandag.tools.boundary import WriteBoundary
from plandag.tools.registry import Registry

__all__ = ["PatchBase", "PatchResult", "check_output", "compile_patch"]

_ENDED_WORDS = {
    "failed": "failed",
    "skipped": "was skipped (it never ran)",
    "cancelled": "was cancelled",
}


@dataclasses.dataclass(frozen=True)
class PatchBase:
    """The run a patch is compiled against.

    Attributes:
        plan: the run's plan header: its ``params`` declare what ``<param.NAME>`` may
            name (its ``steps`` and ``output`` are not read).
        steps: every step the run already has, as written, by id (whatever its state).
        ended: the existing steps that ended without succeeding, by id, with their
            status (``failed``, ``skipped`` or ``cancelled``): a new step may not depend
            on them. Steps absent from it succeeded or have not ended yet.
        replacements: ids of ended steps already superseded, with the ids replacing them
            (named in the hint of a diagnostic).
        tainted: ids of existing steps whose results are tainted (a new step referring to
            one has tainted input).
    """

    plan: Plan
    steps: Mapping[int, Step]
    ended: Mapping[int, str] = dataclasses.field(default_factory=dict)
    replacements: Mapping[int, Sequence[int]] = dataclasses.field(default_factory=dict)
    tainted: Container[int] = frozenset()

    @classmethod
    def from_compiled(
        cls, compiled: CompiledPlan, ended: Mapping[int, str] | None = None
    ) -> PatchBase:
        """The base of a compiled plan's run: its header and steps, ``ended`` as given
        (default: no step ended)."""
        return cls(
            compiled.plan,
            {key: item.step for key, item in compiled.steps.items()},
            ended or {},
            tainted=frozenset(key for key, item in compiled.steps.items() if item.tainted_output),
        )


@dataclasses.dataclass(frozen=True)
class PatchResult:
    """A patch that compiled.

    Attributes:
        steps: the new steps, compiled, in a topological order (smaller ids first among
            ready steps). ``parents`` may name existing steps; ``children`` name only new
            steps (existing steps never depend on new ones).
        diagnostics: the warnings found (``implied_dependency``); a patch that compiled
            has no errors.
        pruned: ids of the new steps that depend, directly or through other new steps, on
            an existing step that ended without succeeding, in the order of :attr:`steps`
            (only with ``prune_on_ended_parents=True``; else always empty). They can never
            start.
    """

    steps: tuple[CompiledStep, ...]
    diagnostics: tuple[Diagnostic, ...] = ()
    pruned: tuple[int, ...] = ()

    @property
    def ids(self) -> tuple[int, ...]:
        """The new steps' ids, in the order of :attr:`steps`."""
        return tuple(item.id for item in self.steps)


def _as_items(new_steps: Sequence[Step | Mapping[str, Any]]) -> Any:
    """The patch as plain data for :func:`~plandag.compiler.load.decode_plan` (a Step is
    dumped, so its shape and nesting are checked like any plan's)."""
    if isinstance(new_steps, str | bytes | Mapping) or not isinstance(new_steps, Sequence):
        return new_steps  # not a list of steps: the schema pass says so
    return [
        item.model_dump(exclude_unset=True) if isinstance(item, Step) else item
        for item in new_steps
    ]


def _ended_problem(
    diagnostics: DiagnosticCollector,
    code: str,
    step_id: int | None,
    where: str,
    target: int,
    base: PatchBase,
    replaces: Collection[int],
) -> None:
    status = base.ended[target]
    replacement = base.replacements.get(target)
    if replacement:
        hint = f"depend on its replacement: step(s) {', '.join(map(str, replacement))}"
    elif target in replaces:
        hint = "depend on the step of this patch that replaces it"
    else:
        hint = "depend on a step that replaces it (a new step with a new id)"
    diagnostics.add(
        code,
        step_id,
        f"{where} step {target}, which {_ENDED_WORDS.get(status, status)}; "
        "its result will never exist",
        hint,
    )


@collector_paused
def compile_patch(
    base: PatchBase | CompiledPlan,
    new_steps: Sequence[Step | Mapping[str, Any]],
    registry: Registry,
    *,
    params: Mapping[str, Any] | None = None,
    read_only: bool = False,
    write_boundary: WriteBoundary | None = None,
    replaces: Collection[int] = (),
    max_steps: int = DEFAULT_MAX_STEPS,
    max_arg_bytes: int = DEFAULT_MAX_ARG_BYTES,
    prune_on_ended_parents: bool = False,
    http_allow: Sequence[str] | None = None,
    tainted_author: bool = False,
) -> PatchResult:
    """Check steps to be added to a run against the run's existing graph.

    Args:
        base: the run so far (:class:`PatchBase`), or a compiled plan none of whose steps
            has ended.
        new_steps: the steps to add: :class:`~plandag.dag.plan.Step` objects or their
            JSON objects (dicts), in any order; may be empty.
        registry: the tools and check kinds of the run.
        params: the run's param values (resolved, e.g. ``CompiledPlan.params``), used to
            check literal write targets; None skips that part, as ``compile_plan`` does.
        read_only: allow only tools with ``effects="none"``.
        write_boundary: where the run may write (literal targets checked here, resolved
            ones again at run time); None skips write checks.
        replaces: ids of ended steps this patch replaces (only used to word hints).
        max_steps: the most steps the run may have, existing and new together.
        max_arg_bytes: the most bytes a step's args may take as JSON.
        prune_on_ended_parents: allow ``depends_on`` and references to name existing
            steps that ended without succeeding; the new steps downstream of them are
            listed in :attr:`PatchResult.pruned` (streaming dispatch: ARCHITECTURE.md,
            "Streaming", a streamed step is part of the plan whatever ran before it
            arrived). False (a replan's patch): naming them is an error.
        http_allow: the configured HTTP allow-list, as ``compile_plan`` takes it (a
            read-only run's literal hosts are checked against it).
        tainted_author: the steps were written by a model that had read outside content
            (a replan that saw tainted results): their literal args are tainted, so an
            ``egress`` step among them needs approval (``tainted_egress`` when read-only).

    Returns:
        A :class:`PatchResult`: the new steps compiled, the warnings, the pruned steps.

    Raises:
        PlanError: carrying every diagnostic (same codes as ``compile_plan``; see the
            module docstring for what a patch adds), when any is an error. Nothing is
            returned for a patch with an error, so nothing of it can run.
    """
    if isinstance(base, CompiledPlan):
        base = PatchBase.from_compiled(base)
    diagnostics = DiagnosticCollector()
    decoded = decode_plan({"steps": _as_items(new_steps)}, diagnostics)
    if decoded is None:
        raise plan_error(diagnostics)
    count = step_count(decoded)
    total = len(base.steps) + count
    if total > max_steps:  # refused at once: nothing else of the patch is analysed
        step_limit_diagnostic(
            diagnostics,
            f"the run would have {total} steps ({len(base.steps)} already, {count} new)",
            max_steps,
        )
        raise plan_error(diagnostics)
    loaded = validate_plan(decoded, diagnostics)
    if loaded is None:
        raise plan_error(diagnostics)
    steps = loaded.steps
    new_by_id = _index_steps(steps, diagnostics, base.steps)
    # ChainMap only reads ``base.steps`` here: no copy of the run's steps per patch.
    by_id: Mapping[int, Step] = collections.ChainMap(
        new_by_id, cast(MutableMapping[int, Step], base.steps)
    )
    attach_required_checks(new_by_id, by_id, registry, diagnostics)
    edges: set[tuple[int, int]] = set()
    compiled_checks: dict[int, tuple[CompiledCheck, ...]] = {}
    for step in new_by_id.values():
        _check_step(
            step,
            by_id,
            base.plan,
            registry,
            diagnostics,
            edges,
            compiled_checks,
            read_only=read_only,
            write_boundary=write_boundary,
            params=params,
            max_arg_bytes=max_arg_bytes,
        )
    ended_parents: set[int] = set()

    @functools.cache
    def declared_of(child: int) -> frozenset[int]:
        return frozenset(new_by_id[child].depends_on)

    for parent, child in sorted(edges):
        if parent in base.ended and parent not in new_by_id:
            if prune_on_ended_parents:
                ended_parents.add(parent)
                continue
            declared = parent in declared_of(child)
            _ended_problem(
                diagnostics,
                "unknown_dependency" if declared else "reference_to_missing_step",
                child,
                "depends_on names" if declared else "a reference uses",
                parent,
                base,
                replaces,
            )

    graph: nx.DiGraph = nx.DiGraph()
    graph.add_nodes_from(new_by_id)
    graph.add_edges_from(edges)
    order: tuple[int, ...] = ()
    taint: dict[int, StepTaint] = {}
    if _check_cycles(graph, diagnostics):
        order = tuple(
            step_id
            for step_id in nx.lexicographical_topological_sort(graph)
            if step_id in new_by_id
        )
        taint = check_egress(
            order,
            new_by_id,
            registry,
            diagnostics,
            tainted_before=base.tainted,
            tainted_author=tainted_author,
            params=params,
            read_only=read_only,
            http_allow=http_allow,
        )
    if diagnostics.has_errors:
        raise plan_error(diagnostics)

    compiled = _compiled_steps(
        {node: set(graph.predecessors(node)) for node in graph},
        order,
        by_id,
        registry,
        compiled_checks,
        taint,
    )
    pruned: set[int] = set()
    for parent in ended_parents:
        pruned.update(nx.descendants(graph, parent))
    return PatchResult(
        tuple(compiled[step_id] for step_id in order),
        tuple(diagnostics.items),
        tuple(step_id for step_id in order if step_id in pruned),
    )


def check_output(
    base: PatchBase, output: Any, *, allow_ended: bool = False
) -> tuple[Diagnostic, ...]:
    """Check a replacement ``output`` (a replan's, or a streamed plan's) against the run.

    References must name existing steps that have not ended without succeeding, params
    must be declared, and angle references must be well formed (the checks
    ``compile_plan`` makes on a plan's ``output``).

    Args:
        base: the run so far.
        output: the new output: any JSON value, references allowed at any depth.
        allow_ended: references may name steps that ended without succeeding (a streamed
            plan's output, whose steps may have failed before the plan ended: it then
            resolves to None unless a replan replaces it).

    Returns:
        The warnings (none today).

    Raises:
        PlanError: with every problem (``malformed_reference``,
            ``reference_to_missing_step``, ``unknown_param``).
    """
    diagnostics = DiagnosticCollector()
    header = base.plan.model_copy(update={"output": output})
    check_values(diagnostics, None, output, "output")
    _check_output(header, base.steps, diagnostics)
    for where, reference in find_references(output, "output"):
        target = reference.step_id
        if target is not None and target in base.ended and not allow_ended:
            _ended_problem(
                diagnostics,
                "reference_to_missing_step",
                None,
                f"{where}: {reference.text} uses",
                target,
                base,
                (),
            )
    if diagnostics.has_errors:
        raise plan_error(diagnostics)
    return tuple(diagnostics.items)
