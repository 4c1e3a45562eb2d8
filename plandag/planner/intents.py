"""Blocked intents: what a step tries to do, and how often that failed across replans
(ARCHITECTURE.md, "Replanning"; the replanning triggers).

A replanner that keeps proposing the same call that keeps failing wastes the run's replans
and money; after ``max_blocked`` failures (3 by default) of one **intent** the run stops
replanning it and escalates to a person (``RunResult.escalation="blocked_intent"``).

The intent of a step (:func:`intent_of`):

* its ``description``, when the planner gave one (whitespace collapsed): the planner's own
  words for what the step is for, which survive a change of tool or arguments;
* otherwise its tool and its arguments **as written** in the plan (not resolved: a step
  reading another result is the same intent whatever that result holds), as canonical JSON
  (keys sorted, no spaces), with every step reference's id replaced by ``*``
  (``<step_7_result.url>`` becomes ``<step_*_result.url>``): a replan gives the steps it
  adds new ids, so the same call written against the replacement of an earlier step is the
  same intent. ``<param.NAME>`` references stay as they are.

A failure counts once per failed step (after its retries), superseded or not. Steps that
never ran do not count: those skipped, those failed with ``dependency_down`` (the circuit
breaker stopped them; :mod:`plandag.scheduler.breaker`), and those whose model call the
cost caps refused before sending it (``budget``, ``agent_budget``: the brake stopped them,
the intent was never tried).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

from plandag.dag.plan import Step
from plandag.scheduler.breaker import BUDGET_REFUSALS
from plandag.scheduler.result import StepRecord

__all__ = ["BlockedIntent", "IntentLedger", "intent_of"]

_STEP_REFERENCE = re.compile(r"<step_\d+_result")
_NOT_COUNTED = frozenset({"dependency_down", *BUDGET_REFUSALS})


def _normalised(value: Any) -> Any:
    if isinstance(value, str):
        return _STEP_REFERENCE.sub("<step_*_result", value)
    if isinstance(value, Mapping):
        return {str(key): _normalised(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_normalised(item) for item in value]
    return value


def intent_of(step: Step) -> str:
    """The intent of ``step`` (module docstring): ``description: TEXT`` when it has a
    description, else ``TOOL ARGS`` with ARGS the canonical JSON of its arguments as
    written, step references normalised.

    Args:
        step: a plan step.

    Returns:
        The intent, one line.
    """
    if step.description is not None and step.description.strip():
        return "description: " + " ".join(step.description.split())
    args = json.dumps(
        _normalised(step.args), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return f"{step.tool} {args}"


@dataclasses.dataclass(frozen=True, slots=True)
class BlockedIntent:
    """An intent that failed ``max_blocked`` times or more.

    Attributes:
        intent: the intent (:func:`intent_of`).
        failed_steps: the steps of that intent that failed, in the order they were seen.
        last: the last failure, in words (``reason: detail``).
    """

    intent: str
    failed_steps: tuple[int, ...]
    last: str

    def describe(self) -> str:
        """A sentence for the person who gets the case."""
        steps = ", ".join(map(str, self.failed_steps))
        return (
            f"the intent `{self.intent}` failed {len(self.failed_steps)} times across replans "
            f"(steps {steps}; last: {self.last}); replanning it again would repeat the failure"
        )


class IntentLedger:
    """Counts failures per intent over a run (one ledger per run).

    Args:
        max_blocked: failures of one intent that block it (>= 1), or None: never blocked.

    Raises:
        ValueError: ``max_blocked`` < 1.
    """

    def __init__(self, max_blocked: int | None) -> None:
        if max_blocked is not None and max_blocked < 1:
            raise ValueError(f"max_blocked must be >= 1 or None, not {max_blocked}")
        self.max_blocked = max_blocked
        self.failures: dict[str, list[int]] = {}
        self.last: dict[str, str] = {}
        self._seen: set[int] = set()

    def observe(self, steps: Mapping[int, Step], records: Mapping[int, StepRecord]) -> None:
        """Count every failed step not counted yet (superseded ones included).

        Args:
            steps: the run's steps by id (as the plan wrote them).
            records: their records by id.
        """
        for step_id in sorted(records):
            record = records[step_id]
            if record.status != "failed" or step_id in self._seen or step_id not in steps:
                continue
            self._seen.add(step_id)
            if record.reason in _NOT_COUNTED:
                continue
            intent = intent_of(steps[step_id])
            self.failures.setdefault(intent, []).append(step_id)
            self.last[intent] = f"{record.reason or 'tool_error'}: {record.detail or ''}".strip()

    def blocked(self) -> list[BlockedIntent]:
        """The intents that failed ``max_blocked`` times or more, most failures first."""
        limit = self.max_blocked
        if limit is None:
            return []
        found = [
            BlockedIntent(intent, tuple(ids), self.last[intent])
            for intent, ids in self.failures.items()
            if len(ids) >= limit
        ]
        return sorted(found, key=lambda item: -len(item.failed_steps))
