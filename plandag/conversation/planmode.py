"""Plan-mode turns: showing a plan for decision, and running one planning turn.

* :func:`render_for_decision` shows a plan to a person within a size limit. A plan too long
  to show is shown cut, at a step boundary, with an explicit notice ("… plan cut: showing
  N of M steps; the decision covers all M steps, hash H"); the decision itself (the hash it
  binds and the options) is never cut, even when it alone passes the limit.
* :func:`plan_turn` handles one message of a conversation with any planner (an async
  callable; no LLM here): it records the message, lets the planner run only the tools the
  mode allows, and ends the turn with the planner's question or its plan, shown for
  decision in plan mode. The plan's hash is :func:`plandag.approval.plan_hash`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from plandag.approval import plan_hash as compute_plan_hash
from plandag.conversation.model import (
    Conversation,
    ConversationError,
    Origin,
    Turn,
    allowed_registry,
)
from plandag.dag.plan import Plan, Step
from plandag.tools.boundary import WriteBoundary
from plandag.tools.registry import Registry

__all__ = ["PlannerFunction", "Shown", "cut_notice", "plan_turn", "render_for_decision"]

PlannerFunction = Callable[[str, Sequence[Turn], Registry], Awaitable[Plan | str]]
"""``await planner(message, history, runnable) -> Plan | question``.

``message`` is the text to plan for, ``history`` every turn recorded before it (the message
included), ``runnable`` the tools the planner may *run* while planning (investigation): in
plan mode only tools without effects. The plan it returns may name tools with effects (its
writer knows the full registry): they run only once a person approves the plan. A ``str``
is a question for the person."""


def cut_notice(shown: int, total: int, plan_hash: str) -> str:
    """The notice under a plan shown cut (exact wording of the issue's rule).

    Args:
        shown: steps shown.
        total: steps in the plan.
        plan_hash: the full plan's hash.
    """
    return (
        f"… plan cut: showing {shown} of {total} steps; the decision covers all {total} "
        f"steps, hash {plan_hash}"
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Shown:
    """A plan as shown to a person for decision.

    Attributes:
        body: the plan's header and the steps shown, one or two lines per step.
        notice: :func:`cut_notice` when steps were left out, else None.
        decision: what the person decides on and how; always complete.
        shown_steps: steps shown.
        total_steps: steps in the plan (the decision covers them all).
        plan_hash: the hash the decision binds (the whole plan's).
    """

    body: str
    notice: str | None
    decision: str
    shown_steps: int
    total_steps: int
    plan_hash: str

    @property
    def cut(self) -> bool:
        """True when steps were left out of the body."""
        return self.shown_steps < self.total_steps

    @property
    def text(self) -> str:
        """Body, notice (when cut) and decision, one after the other on separate lines."""
        return "\n".join(part for part in (self.body, self.notice, self.decision) if part)


def _step_lines(step: Step, registry: Registry | None) -> str:
    arguments = json.dumps(step.args, ensure_ascii=False, sort_keys=True, default=str)
    after = f" after {', '.join(map(str, step.depends_on))}" if step.depends_on else ""
    line = f"  {step.id}. {step.tool} {arguments}{after}"
    tool = registry.tools.get(step.tool) if registry is not None else None
    if tool is not None and tool.effects != "none":
        try:
            targets = tool.write_targets(step.args)
        except Exception:  # a writes function that needs resolved arguments
            targets = []
        line += f"  [{tool.effects.upper()}" + (f": {', '.join(targets)}]" if targets else "]")
    if step.description:
        line += f"\n       {step.description}"
    return line


def _decision_text(plan_hash: str, total: int) -> str:
    steps = f"{total} step{'s' if total != 1 else ''}"
    return "\n".join(
        [
            f"Decision on plan {plan_hash} (all {steps}):",
            "  approve  run this plan, with its effects (plan mode ends)",
            "  reject   with feedback: the planner revises the plan (plan mode stays on)",
            "  disarm   leave plan mode without running anything",
        ]
    )


def render_for_decision(
    plan: Plan, plan_hash: str, max_chars: int, *, registry: Registry | None = None
) -> Shown:
    """Show ``plan`` for a decision in at most ``max_chars`` characters, cutting steps if
    needed but never the decision.

    The text is the header (goal, number of steps), one entry per step (id, tool, arguments
    as JSON, dependencies, effects and write targets when ``registry`` knows the tool, the
    description), then the decision. When everything does not fit, the last steps are left
    out, whole, and :func:`cut_notice` says how many are shown, that the decision covers
    all of them and the hash it binds. The decision block is always shown in full: when it
    alone (with the notice) passes ``max_chars``, ``text`` is longer than ``max_chars``.

    Args:
        plan: the whole plan.
        plan_hash: its hash (:func:`plandag.approval.plan_hash`), the one a decision names.
        max_chars: the most characters the channel shows (>= 0).
        registry: the run's registry, to mark steps with effects; None to leave them unmarked.

    Returns:
        The :class:`Shown` plan; ``len(shown.text) <= max_chars`` unless the decision and
        notice alone are longer.

    Raises:
        ValueError: ``max_chars`` is negative.
    """
    if max_chars < 0:
        raise ValueError(f"max_chars must be >= 0, not {max_chars}")
    total = len(plan.steps)
    header = f"Plan ({total} step{'s' if total != 1 else ''}): {plan.goal or '(no goal)'}"
    entries = [header, *(_step_lines(step, registry) for step in plan.steps)]
    decision = _decision_text(plan_hash, total)
    # lengths[k]: characters of the header and the first k steps, newlines included.
    lengths = [len(header)]
    for entry in entries[1:]:
        lengths.append(lengths[-1] + 1 + len(entry))
    if lengths[-1] + 1 + len(decision) <= max_chars:
        return Shown("\n".join(entries), None, decision, total, total, plan_hash)
    for shown in range(total - 1, -1, -1):
        notice = cut_notice(shown, total, plan_hash)
        if lengths[shown] + 1 + len(notice) + 1 + len(decision) <= max_chars:
            body = "\n".join(entries[: shown + 1])
            return Shown(body, notice, decision, shown, total, plan_hash)
    return Shown("", cut_notice(0, total, plan_hash), decision, 0, total, plan_hash)


async def plan_turn(
    conversation: Conversation,
    message: str | Turn,
    planner_fn: PlannerFunction,
    registry: Registry,
    now: float,
    *,
    origin: Origin = "person",
    params: Mapping[str, Any] | None = None,
    write_boundary: WriteBoundary | None = None,
    can_show: bool = True,
) -> Turn:
    """Handle one message of ``conversation``: record it, plan, end the turn.

    1. Record the message (:meth:`Conversation.add_message`; an answer when the planner's
       question is open), unless ``message`` is a turn already recorded (a queued message,
       :meth:`Conversation.queued_messages`).
    2. An automated message (``origin`` not ``person``) in an armed conversation stays
       history: the planner is not called, the recorded turn is returned (see
       :mod:`plandag.conversation.model`).
    3. Call ``planner_fn(text, history, runnable)``, where ``runnable`` is
       :func:`allowed_registry` ``(registry)`` in plan mode and ``registry`` otherwise.
    4. A ``str`` answer is recorded as the planner's question. A plan is recorded with its
       hash; in plan mode it waits for a decision (:meth:`Conversation.end_turn_with_plan`),
       or ends plan mode when ``can_show`` is False.

    Args:
        conversation: the conversation (persisted or not).
        message: the text, or a recorded ``message`` turn (its own origin is used).
        planner_fn: see :data:`PlannerFunction`.
        registry: the run's full registry.
        now: wall-clock seconds since the epoch, when the message arrived; the same time is
            recorded on the turn that ends it.
        origin: who sent the text (ignored for a recorded turn).
        params: the run's param values, hashed with the plan ({} when None).
        write_boundary: the run's write boundary, hashed with the plan.
        can_show: whether the channel can show a decision.

    Returns:
        The turn that ends this turn: the planner's ``question``, the ``plan`` (pending a
        decision in plan mode), or the message itself when it stays history.

    Raises:
        ConversationError: ``message`` is a turn that is not a message of ``conversation``;
            and the errors of :class:`Conversation`.
        Exception: whatever ``planner_fn`` raises (the message stays recorded, unplanned).
    """
    if isinstance(message, Turn):
        recorded = message
        turns = conversation.turns
        if recorded.index >= len(turns) or turns[recorded.index] != recorded:
            raise ConversationError(
                f"turn {recorded.index} is not a turn of conversation {conversation.id}"
            )
        if recorded.origin is None or recorded.kind not in ("message", "answer"):
            raise ConversationError(
                f"turn {recorded.index} is a {recorded.kind} turn, not a message to plan for"
            )
        origin = recorded.origin
        conversation.expire_if_due(now)
    else:
        recorded = conversation.add_message(message, origin, now)
    mode = conversation.mode_for(origin, now)
    if origin != "person" and conversation.is_armed(now):
        return recorded
    runnable = allowed_registry(registry) if mode == "plan" else registry
    answer = await planner_fn(recorded.text, conversation.turns, runnable)
    if isinstance(answer, str):
        return conversation.ask(answer, now, in_reply_to=recorded.index)
    digest = compute_plan_hash(answer, params or {}, write_boundary)
    return conversation.end_turn_with_plan(
        answer, digest, now, can_show=can_show, in_reply_to=recorded.index
    )
