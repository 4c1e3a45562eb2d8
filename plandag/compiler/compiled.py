"""The compiler's output: a plan checked against a registry, as a graph ready to run."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import networkx as nx

from plandag.checks.base import CheckDefinition
from plandag.compiler.diagnostics import Diagnostic
from plandag.dag.plan import Plan, Step
from plandag.dag.references import ArgsTemplate, compile_template, is_constant
from plandag.tools.base import Tool
from plandag.tools.boundary import WriteBoundary

__all__ = ["CompiledCheck", "CompiledPlan", "CompiledStep"]


@dataclasses.dataclass(frozen=True, slots=True)
class CompiledCheck:
    """A check of a step bound to its definition; ``args`` may still hold references."""

    definition: CheckDefinition
    args: Mapping[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class CompiledStep:
    """A step bound to its tool, with its parents after implied edges were added.

    Attributes:
        step: the step as written in the plan.
        tool: the registered tool it calls.
        parents: ids of every step it depends on (declared and implied), sorted.
        children: ids of every step depending on it, sorted.
        checks: its success checks, bound to their definitions.
        args_template: ``args_template(step_result, params)`` gives the args with their
            references resolved, walking only the parts that hold references.
        args_have_references: False when the args are constant (no reference anywhere).
    """

    step: Step
    tool: Tool
    parents: tuple[int, ...]
    children: tuple[int, ...]
    checks: tuple[CompiledCheck, ...]
    args_template: ArgsTemplate = dataclasses.field(default=None, repr=False)  # type: ignore[assignment]
    args_have_references: bool = dataclasses.field(default=False, repr=False)

    def __post_init__(self) -> None:
        if self.args_template is None:
            template = compile_template(self.step.args)
            object.__setattr__(self, "args_template", template)
            object.__setattr__(self, "args_have_references", not is_constant(template))

    @property
    def id(self) -> int:
        """The step's id."""
        return self.step.id


@dataclasses.dataclass(frozen=True)
class CompiledPlan:
    """A plan that compiled: the input of the scheduler.

    Attributes:
        plan: the plan as validated.
        graph: networkx DiGraph over step ids, edges parent → child (declared and implied).
        steps: compiled steps by id.
        order: step ids in a topological order (smaller ids first among ready steps).
        params: param values for this run (given values, else defaults), by name; empty
            when compiled without params (``plandag check``).
        diagnostics: the warnings found (a compiled plan has no errors).
        read_only: the run allows only tools without effects.
        write_boundary: where the run may write, or None for no write checks.
    """

    plan: Plan
    graph: nx.DiGraph
    steps: Mapping[int, CompiledStep]
    order: tuple[int, ...]
    params: Mapping[str, Any]
    diagnostics: tuple[Diagnostic, ...] = ()
    read_only: bool = False
    write_boundary: WriteBoundary | None = None

    @property
    def roots(self) -> tuple[int, ...]:
        """Steps with no dependencies, which start first."""
        return tuple(step_id for step_id in self.order if not self.steps[step_id].parents)
