"""What starts a replan besides a failure, and how wide the replan is (ARCHITECTURE.md,
"Replanning"; the replanning triggers and strategies).

**A person's instruction mid-run.** ``plandag tell RUN_ID "text"`` (or
:meth:`plandag.planner.agent.Agent.tell`) reaches the running agent **through the run
store**: ``tell`` writes a row in the store's ``instruction`` table, and the process running
the run polls that table every :data:`INSTRUCTION_POLL_S` seconds (0.5 s; a bounded
``SELECT`` on an index), so an instruction reaches it within a second. ``Agent.tell`` from
Python puts it straight into the agent's inbox (at once from the agent's own event loop,
within the same poll period from another thread). The steps not started yet (pending, or
held for approval) are dropped (``skipped``, reason ``replanned``) and replanned with the
instruction; completed steps keep their results and never run again; running steps finish.
Every later replan of the run carries every instruction given so far. Replans a person asked
for do not count against the replan caps (they still pay the cost caps).

**Strategy** (:func:`choose_strategy`): ``partial`` (the default) replaces only the affected
part of the plan: the failed steps and the steps pruned below them (or, for an instruction,
the steps not started). ``total`` drops every step not started yet (``skipped``, reason
``replanned``), lets running steps finish, keeps completed results, and asks the planner to
plan again from the goal and the current state. Total is chosen, first match wins:

1. a person's instruction changed the goal (``tell --new-goal``,
   ``Agent.tell(text, goal_changed=True)``: the text is the run's new goal);
2. a dependency went down since the previous replan (the circuit breaker,
   :mod:`plandag.scheduler.breaker`): the rest of the plan was written around it;
3. ``total_replan_below`` is set and the fraction of the run's steps completed (succeeded,
   of the steps not superseded) is under it.

The choice and its reason are recorded on the replan (``ReplanRecord.strategy``,
``strategy_reason``; ``plandag run --json`` ``replans``) and in the trace's replan span.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Literal

from plandag.scheduler.breaker import DownDependency

__all__ = [
    "INSTRUCTION_POLL_S",
    "Instruction",
    "InstructionSource",
    "ReplanStrategy",
    "StrategyChoice",
    "choose_strategy",
]

INSTRUCTION_POLL_S = 0.5
"""Seconds between two looks for new instructions (the run store's table, or a source)."""

ReplanStrategy = Literal["partial", "total"]
"""``partial``: replace the affected part; ``total``: plan again from the goal."""


@dataclasses.dataclass(frozen=True, slots=True)
class Instruction:
    """A person's new input for a running run.

    Attributes:
        text: the instruction, verbatim (the new goal when ``goal_changed``).
        goal_changed: the text replaces the run's goal (a total replan follows).
        who: who gave it (a user name), or None.
        time: when it was given, seconds since the epoch.
    """

    text: str
    goal_changed: bool = False
    who: str | None = None
    time: float = 0.0

    def as_dict(self) -> dict[str, object]:
        """``{"text", "goal_changed", "who", "time"}`` for JSON output."""
        return {
            "text": self.text,
            "goal_changed": self.goal_changed,
            "who": self.who,
            "time": self.time,
        }


InstructionSource = Callable[[], Sequence[Instruction]]
"""Polled by a running agent every :data:`INSTRUCTION_POLL_S` seconds: returns the
instructions given since the last call (each once), oldest first; ``plandag run`` reads the
run store's ``instruction`` table with it."""


@dataclasses.dataclass(frozen=True, slots=True)
class StrategyChoice:
    """A replan's strategy and why, in words."""

    strategy: ReplanStrategy
    reason: str


def choose_strategy(
    *,
    goal_changed: bool = False,
    newly_down: Sequence[DownDependency] = (),
    completed: int = 0,
    steps: int = 0,
    total_replan_below: float | None = None,
    instruction: bool = False,
) -> StrategyChoice:
    """Partial or total (rules in the module docstring, first match wins).

    Args:
        goal_changed: a person's instruction replaced the goal.
        newly_down: dependencies that went down since the previous replan.
        completed: steps that succeeded (not superseded).
        steps: steps not superseded.
        total_replan_below: the completion fraction (0 to 1) under which a replan is total,
            or None (off).
        instruction: the replan answers a person's instruction (for the partial reason).

    Returns:
        The :class:`StrategyChoice`.
    """
    if goal_changed:
        return StrategyChoice("total", "a person's instruction changed the goal")
    if newly_down:
        names = ", ".join(str(down.dependency) for down in newly_down)
        return StrategyChoice(
            "total", f"dependency down ({names}): the plan is written again without it"
        )
    if total_replan_below is not None and steps > 0 and completed / steps < total_replan_below:
        return StrategyChoice(
            "total",
            f"{completed} of {steps} steps completed ({completed / steps:.0%}), under "
            f"total_replan_below={total_replan_below:g}",
        )
    if instruction:
        return StrategyChoice(
            "partial", "a person's instruction: the steps not started are replanned with it"
        )
    return StrategyChoice("partial", "only the failed part and the steps pruned below it")
