"""The compiler's output: a plan checked against a registry, as a graph ready to run."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from plandag.checks.base import CheckDefinition
from plandag.dag.diagnostics import Diagnostic
from plandag.dag.graph import BottomLevels, bottom_levels
from plandag.dag.limits import DEFAULT_MAX_STEPS
from plandag.dag.plan import Plan, Step
from plandag.dag.references import ArgsTemplate, compile_template, find_references, is_constant
from plandag.tools.base import Tool
from plandag.tools.boundary import WriteBoundary

if TYPE_CHECKING:
    import networkx as nx

    from plandag.tools.registry import Registry

__all__ = ["CompiledCheck", "CompiledPlan", "CompiledStep", "allowed_hosts"]


def allowed_hosts(configured: Sequence[str] | None, listed: Iterable[str]) -> tuple[str, ...]:
    """An allow-list: ``configured`` patterns in their order, then each ``listed`` host not
    already there, sorted (ARCHITECTURE.md, "Untrusted content")."""
    head = tuple(configured or ())
    return head + tuple(sorted(set(listed) - set(head)))


@dataclasses.dataclass(frozen=True, slots=True)
class CompiledCheck:
    """A check of a step bound to its definition; ``args`` may still hold references.

    ``args_template(step_result, params)`` gives the args with their references resolved
    (compiled once, as :attr:`CompiledStep.args_template`)."""

    definition: CheckDefinition
    args: Mapping[str, Any]
    args_template: ArgsTemplate = dataclasses.field(default=None, repr=False, compare=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.args_template is None:
            object.__setattr__(self, "args_template", compile_template(self.args))


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
        tainted_input: its args carry tainted data (ARCHITECTURE.md, "Untrusted content"):
            a reference to a tainted result, or literal text written by a model that had
            read outside content (a replan's). Found at compile time, conservatively.
        tainted_output: its result is tainted: tainted input, or a ``taint_source`` tool.
        hosts: the ``host:port`` of each literal URL the step requests (a tool's
            ``reaches`` argument, params resolved): the hosts this step lists for the
            run's HTTP allow-list. A URL that holds a step reference lists nothing.
        tainted_literals: its literal args were written by a model that had read outside
            content (a replan's step).
    """

    step: Step
    tool: Tool
    parents: tuple[int, ...]
    children: tuple[int, ...]
    checks: tuple[CompiledCheck, ...]
    args_template: ArgsTemplate = dataclasses.field(default=None, repr=False)  # type: ignore[assignment]
    args_have_references: bool = dataclasses.field(default=False, repr=False)
    tainted_input: bool = False
    tainted_output: bool = False
    hosts: tuple[str, ...] = ()
    tainted_literals: bool = False

    def __post_init__(self) -> None:
        if self.args_template is None:
            template = compile_template(self.step.args)
            object.__setattr__(self, "args_template", template)
            object.__setattr__(self, "args_have_references", not is_constant(template))

    @property
    def id(self) -> int:
        """The step's id."""
        return self.step.id

    @property
    def tainted_egress(self) -> bool:
        """The step sends tainted data out (an ``egress`` tool with tainted input): it
        needs a person's approval, and a read-only run refuses it."""
        return self.tool.egress and self.tainted_input


@dataclasses.dataclass(frozen=True)
class CompiledPlan:
    """A plan that compiled: the input of the scheduler.

    Attributes:
        plan: the plan as validated.
        steps: compiled steps by id.
        order: step ids in a topological order (smaller ids first among ready steps).
        params: param values for this run (given values, else defaults), by name; empty
            when compiled without params (``plandag check``).
        diagnostics: the warnings found (a compiled plan has no errors).
        read_only: the run allows only tools without effects (and reaches only the
            configured hosts, sending no tainted data out).
        write_boundary: where the run may write, or None for no write checks.
        http_allow: the configured HTTP allow-list (host globs, ``http_allow``), or None
            when none is configured.
        max_steps: the step limit it was compiled with; a run session opened on it keeps
            it for the steps added later (a replan's, a streamed plan's).
    """

    plan: Plan
    steps: Mapping[int, CompiledStep]
    order: tuple[int, ...]
    params: Mapping[str, Any]
    diagnostics: tuple[Diagnostic, ...] = ()
    read_only: bool = False
    write_boundary: WriteBoundary | None = None
    http_allow: tuple[str, ...] | None = None
    max_steps: int = DEFAULT_MAX_STEPS

    @functools.cached_property
    def graph(self) -> nx.DiGraph:
        """The dependency graph: a networkx DiGraph over the step ids (in the plan's
        order, then any step the plan does not hold: a header's), edges parent → child
        (declared and implied: each step's ``parents``). Built on first use, so that
        compiling a plan does not import networkx."""
        import networkx as nx

        graph = nx.DiGraph()
        graph.add_nodes_from(step.id for step in self.plan.steps if step.id in self.steps)
        graph.add_nodes_from(self.steps)
        graph.add_edges_from(
            (parent, step_id) for step_id in graph.nodes for parent in self.steps[step_id].parents
        )
        return graph

    @functools.cached_property
    def bottom_levels(self) -> BottomLevels:
        """Each step's bottom level counted in steps (every step weighs 1): the most steps
        on a path from it to the end of the plan, itself included
        (:func:`plandag.dag.graph.bottom_levels`; the scheduler starts ready steps highest
        first). Worked out on first use and kept: a plan's steps and order never change
        (a changed plan, such as :meth:`without_steps` makes, is a new object)."""
        return bottom_levels(self.order, self.steps)

    @property
    def listed_hosts(self) -> tuple[str, ...]:
        """The hosts the plan lists (literal URLs of its steps), sorted, once each."""
        return tuple(sorted({host for step in self.steps.values() for host in step.hosts}))

    @property
    def allowed_hosts(self) -> tuple[str, ...]:
        """The run's HTTP allow-list: the configured patterns, then the hosts the plan
        lists, except in a read-only run (which reaches only configured hosts)."""
        return allowed_hosts(self.http_allow, () if self.read_only else self.listed_hosts)

    @property
    def roots(self) -> tuple[int, ...]:
        """Steps with no dependencies, which start first."""
        return tuple(step_id for step_id in self.order if not self.steps[step_id].parents)

    def registry(self) -> Registry:
        """The tools and check kinds the plan's steps use, as a
        :class:`~plandag.tools.registry.Registry`: what an edit of one of its steps (a
        person's, in the approval request) is compiled again with."""
        from plandag.tools.registry import Registry

        return Registry(
            {step.tool.name: step.tool for step in self.steps.values()}.values(),
            {
                check.definition.name: check.definition
                for step in self.steps.values()
                for check in step.checks
            }.values(),
        )

    def without_steps(self, step_ids: Iterable[int]) -> CompiledPlan:
        """This plan with ``step_ids`` and every step downstream of them taken out: the
        steps a person rejected at approval, or steps a replan superseded, which must never
        run (ARCHITECTURE.md, "People in the loop", "Replanning").

        The remaining steps keep their ids, arguments and order (no recompile is needed: a
        remaining step depends on none of the removed ones). The output is kept when it
        references none of the removed steps, else it becomes None.

        Args:
            step_ids: ids to take out (ids not in the plan are ignored).

        Returns:
            A new :class:`CompiledPlan` (this one when nothing is taken out).
        """
        doomed: set[int] = set()
        pending = [step_id for step_id in step_ids if step_id in self.steps]
        while pending:  # each step once: at most len(self.steps) rounds
            step_id = pending.pop()
            if step_id not in doomed:
                doomed.add(step_id)
                pending.extend(self.steps[step_id].children)
        if not doomed:
            return self
        steps = {
            step_id: dataclasses.replace(
                step, children=tuple(child for child in step.children if child not in doomed)
            )
            for step_id, step in self.steps.items()
            if step_id not in doomed
        }
        output = self.plan.output
        if output is not None and any(
            reference.step_id in doomed for _, reference in find_references(output)
        ):
            output = None
        plan = self.plan.model_copy(
            update={
                "steps": [step for step in self.plan.steps if step.id not in doomed],
                "output": output,
            }
        )
        return dataclasses.replace(
            self,
            plan=plan,
            steps=steps,
            order=tuple(step_id for step_id in self.order if step_id not in doomed),
        )
