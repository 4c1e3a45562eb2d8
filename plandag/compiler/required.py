"""Checks an application requires on some steps, attached where a plan left them out.

A check kind may carry a rule (:attr:`plandag.checks.base.CheckDefinition.required_on`)
naming the steps it must be on: a research answer (an ``llm`` step with the citation
schema) must carry ``citations_supported``. :func:`attach_required_checks` runs every
registered rule over the new steps of a plan or patch, before they are checked, and gives
each named step that lacks the check the check with the rule's arguments, with a
``check_attached`` warning. The guard therefore holds whether or not the planner
remembered it, and costs no model call (as ``implied_dependency`` adds a missing edge).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

from plandag.dag.diagnostics import DiagnosticCollector
from plandag.dag.plan import CheckSpec, Step
from plandag.tools.registry import Registry

__all__ = ["attach_required_checks"]


def attach_required_checks(
    new: MutableMapping[int, Step],
    steps: Mapping[int, Step],
    registry: Registry,
    diagnostics: DiagnosticCollector,
) -> dict[int, Step]:
    """Attach the registered checks' required checks to the steps of ``new``.

    Args:
        new: the new steps by id (a plan's, or a patch's); a step given a check is replaced
            here by its copy with the check.
        steps: every step of the run by id, ``new`` included (a rule may look at a step's
            parents).
        registry: the registered checks (only those with a ``required_on`` rule count).
        diagnostics: where a ``check_attached`` warning is added for each check attached.

    Returns:
        The replaced steps by id (old ids, new Step objects); empty when none.
    """
    rules = [item for item in registry.checks.values() if item.required_on is not None]
    if not rules:
        return {}
    replaced: dict[int, Step] = {}
    for step_id in list(new):
        step = new[step_id]
        added: list[CheckSpec] = []
        for definition in rules:
            if any(spec.kind == definition.name for spec in step.check):
                continue
            assert definition.required_on is not None
            try:
                arguments = definition.required_on(step, steps)
            except Exception:  # a rule that fails attaches nothing; the plan stays as written
                arguments = None
            if arguments is None:
                continue
            added.append(CheckSpec(kind=definition.name, **dict(arguments)))
            diagnostics.add(
                "check_attached",
                step_id,
                f"step {step_id} ({step.tool}) must carry the {definition.name} check, which "
                "the plan left out; plandag attached it",
                f"give the step the check {definition.name} yourself",
            )
        if added:
            changed = step.model_copy(update={"check": [*step.check, *added]})
            new[step_id] = changed
            replaced[step_id] = changed
    return replaced
