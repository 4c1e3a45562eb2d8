"""Step-by-step decisions in an approval request (ARCHITECTURE.md, "People in the loop").

A person may approve a plan while rejecting some of its steps and editing the arguments of
others (:class:`~plandag.scheduler.gate.Decision` ``reject_steps`` and ``edit_steps``). That
answer approves a new plan version: the edited arguments in place (each edit's keys replace
those arguments of the step), the rejected steps and every step downstream of them dropped,
the output kept unless it names a dropped step. The new version has its own hash and is
decided in the same request by the same person; every step of the version decided on gets
a recorded decision: ``approved``, ``edited``, ``rejected`` or ``dropped``.

:func:`amend` does this for a compiled plan (``exec``, ``plandag approve``); a running
agent applies the same decision to its session (``RunSession.edit_step`` and
``RunSession.reject_steps``) and replans the rejected part.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from plandag.compiler import CompiledPlan, compile_plan
from plandag.dag.plan import Plan
from plandag.errors import PlanError
from plandag.scheduler.gate import Decision, InvalidDecisionError, compiled_plan_hash, downstream

__all__ = ["Amendment", "StepDecision", "StepVerdict", "amend", "step_decisions"]

StepVerdict = Literal["approved", "edited", "rejected", "dropped"]
"""A decision on one step: kept as it was, edited, rejected, or dropped because a step
upstream of it was rejected."""


@dataclasses.dataclass(frozen=True)
class StepDecision:
    """The decision on one step of the plan version decided on.

    Attributes:
        step_id: the step.
        decision: a :data:`StepVerdict`.
        args: for ``edited``, the step's whole arguments after the edit; else None.
    """

    step_id: int
    decision: StepVerdict
    args: Mapping[str, Any] | None = None


@dataclasses.dataclass(frozen=True)
class Amendment:
    """The plan version a step-by-step approval made.

    Attributes:
        compiled: the new version, compiled (edits in place, dropped steps gone).
        plan_hash: its hash (:func:`~plandag.scheduler.gate.compiled_plan_hash`).
        steps: the decision on every step of the version decided on, by id order.
        dropped: the rejected steps and every step downstream of them, sorted.
        stale: the edited steps and every step downstream of them that was kept, sorted:
            results they got before the edit do not hold for the new version.
    """

    compiled: CompiledPlan
    plan_hash: str
    steps: tuple[StepDecision, ...]
    dropped: tuple[int, ...]
    stale: tuple[int, ...]


def edited_args(args: Mapping[str, Any], edit: Mapping[str, Any]) -> dict[str, Any]:
    """A step's arguments after an edit: the edit's keys replace those arguments, the
    others are kept."""
    return {**dict(args), **dict(edit)}


def step_decisions(plan: Plan, decision: Decision, dropped: set[int]) -> tuple[StepDecision, ...]:
    """The decision on every step of ``plan`` that ``decision`` (an approval with step
    choices) took, ``dropped`` being the rejected steps and those downstream of them."""
    rejected = set(decision.reject_steps)
    found: list[StepDecision] = []
    for step in sorted(plan.steps, key=lambda item: item.id):
        if step.id in rejected:
            found.append(StepDecision(step.id, "rejected"))
        elif step.id in dropped:
            found.append(StepDecision(step.id, "dropped"))
        elif step.id in decision.edit_steps:
            args = edited_args(step.args, decision.edit_steps[step.id])
            found.append(StepDecision(step.id, "edited", args))
        else:
            found.append(StepDecision(step.id, "approved"))
    return tuple(found)


def amend(compiled: CompiledPlan, decision: Decision) -> Amendment:
    """The plan version that ``decision`` (an approval with step choices, already
    checked against its request) makes of ``compiled``.

    The edited plan is compiled again with the plan's own tools and check kinds, params,
    read-only flag, write boundary and HTTP allow-list, so an edit passes every check the
    plan passed (a write target outside the boundary, bad arguments for the tool...).

    Args:
        compiled: the plan version decided on.
        decision: the approval, with ``reject_steps`` and ``edit_steps``.

    Returns:
        The :class:`Amendment`.

    Raises:
        InvalidDecisionError: an edited step no longer compiles (every diagnostic is in
            the message).
    """
    registry = compiled.registry()
    document = compiled.plan.model_dump(mode="json", exclude_none=True)
    for step in document["steps"]:
        edit = decision.edit_steps.get(step["id"])
        if edit is not None:
            step["args"] = edited_args(step.get("args", {}), edit)
    try:
        edited = compile_plan(
            document,
            registry,
            params=compiled.params,
            read_only=compiled.read_only,
            write_boundary=compiled.write_boundary,
            http_allow=compiled.http_allow,
            max_steps=max(compiled.max_steps, len(compiled.steps)),  # it compiled already
        )
    except PlanError as error:
        ids = ", ".join(map(str, sorted(decision.edit_steps)))
        raise InvalidDecisionError(
            f"the edit of step(s) {ids} does not compile: {error}; edit again"
        ) from error
    dependencies = {step_id: step.parents for step_id, step in compiled.steps.items()}
    dropped = downstream(dependencies, decision.reject_steps) & set(compiled.steps)
    amended = edited.without_steps(sorted(dropped))
    stale = downstream(dependencies, tuple(decision.edit_steps)) - dropped
    return Amendment(
        compiled=amended,
        plan_hash=compiled_plan_hash(amended),
        steps=step_decisions(compiled.plan, decision, dropped),
        dropped=tuple(sorted(dropped)),
        stale=tuple(sorted(stale)),
    )
