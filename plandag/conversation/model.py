"""A conversation and its plan mode (docs/durable-runs.md, "Plan mode for conversations").

A :class:`Conversation` is a sequence of :class:`Turn` s (user messages, planner questions,
answers to them, plans shown for decision, decisions, and the mode changes) with an
``origin``: who started it (``person``, ``schedule``, ``event``, ``delegation``,
``pipeline``, ``api`` or ``channel``).

Every state a conversation has (armed or not, since when, the plan waiting for a decision)
is derived from its turns by replaying them in order, the same way in memory and after a
reload from the database (:class:`plandag.conversation.store.ConversationStore`): a
reloaded conversation behaves exactly as the one that was saved. Each change records its
turns before it changes the object, all the turns of one change in one transaction.

Plan mode, the rules (docs/durable-runs.md, "Plan mode for conversations") and how they are
read here:

* **Who can arm it.** Only a conversation whose own ``origin`` is ``person`` can be armed
  (:meth:`Conversation.arm`); arming any other raises :class:`PlanModeError`. "A
  conversation of any other origin never enters plan mode."
* **While armed** only tools without effects may run (:func:`allowed_registry`,
  :func:`check_tool_allowed`, :meth:`Conversation.check_tool_allowed`), nothing is written
  but the plan (a tool with ``write`` or ``irreversible`` effects is refused, whoever's
  message asked for it), and each planning turn ends with a plan for decision
  (:meth:`Conversation.end_turn_with_plan`) or a question to the person.
* **The mode belongs to the conversation, not to the message.** An answer to the planner's
  question, a rejection with feedback (the planner revises the plan) and a queued message
  all leave it armed. The issue also lists "deciding an approval" among what keeps it
  armed while "approval" ends it; read together: a *rejection* is a decision that keeps it
  armed, an *approval* of the shown plan ends it.
* **Automated messages.** A message whose origin is not ``person`` (a scheduled job's
  result, an event, a delegated agent's answer...) may be recorded in an armed person's
  conversation (:meth:`Conversation.add_message`): it lands in the history as context
  only. It neither arms nor disarms the conversation, does not restart the expiry clock,
  is never handled in plan mode (:meth:`Conversation.mode_for` returns ``"normal"`` for it)
  and is not planned in the armed conversation (:func:`plandag.conversation.plan_turn`
  records it and returns): the work it asks for runs, in normal mode, in its own
  conversation. It cannot decide the pending plan either (:meth:`Conversation.decide`
  refuses a decision whose origin is not ``person`` while armed).
* **The mode ends** by approval (reason ``approved``), by disarming (``disarmed``), when no
  decision can be shown (``cannot_show_decision``: the channel cannot show one), or after
  ``expiry_s`` seconds (default 24 hours) without a decision (``expired``). The clock
  starts when the conversation is armed and starts again at each decision (a rejection);
  messages and answers do not restart it. Every end is recorded as a ``mode`` turn with
  its reason; an expiry is recorded by the next change (or :meth:`Conversation.expire_if_due`)
  with the time the mode ended, the deadline itself.
* **Decisions are bound to the plan's hash** (ARCHITECTURE.md, "People in the loop"): a
  decision naming another hash than the pending plan's is refused
  (:class:`StaleDecisionError`), as is one when no plan waits for a decision.
"""

from __future__ import annotations

import dataclasses
import math
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, get_args

from plandag import approval
from plandag.dag.plan import Plan
from plandag.errors import PlandagError
from plandag.tools.base import Tool
from plandag.tools.registry import Registry

__all__ = [
    "DEFAULT_EXPIRY_S",
    "ORIGINS",
    "Conversation",
    "ConversationError",
    "EndReason",
    "Mode",
    "Origin",
    "PendingDecision",
    "PlanModeDecision",
    "PlanModeError",
    "StaleDecisionError",
    "Turn",
    "TurnKind",
    "TurnWriter",
    "allowed_registry",
    "check_tool_allowed",
]

Origin = Literal["person", "schedule", "event", "delegation", "pipeline", "api", "channel"]
"""Who started a conversation, or sent a message: a person, or one of the automated sources."""

ORIGINS: tuple[Origin, ...] = get_args(Origin)
"""Every :data:`Origin`, in the order of the issue."""

TurnKind = Literal["message", "answer", "question", "plan", "decision", "mode"]
"""``message``: a user's (or automated source's) message; ``answer``: a person's answer to
the planner's open question; ``question``: the planner asks; ``plan``: a plan the planner
wrote (shown for decision in plan mode); ``decision``: approve or reject of a shown plan;
``mode``: plan mode armed or ended, with the reason."""

Mode = Literal["plan", "normal"]
"""How a turn is handled: in plan mode (read-only tools, ends with a plan for decision) or not."""

EndReason = Literal["approved", "disarmed", "cannot_show_decision", "expired"]
"""Why plan mode ended: approval, disarming, no decision can be shown, 24 hours."""

DEFAULT_EXPIRY_S = approval.DEFAULT_EXPIRY_S
"""Seconds an armed conversation waits for a decision before plan mode ends (24 h,
the same as a pending approval)."""


class ConversationError(PlandagError, ValueError):
    """A conversation cannot do what was asked (unknown id, no plan waiting, bad time...)."""


class StaleDecisionError(approval.StaleDecisionError, ConversationError):
    """A decision names another plan version than the one waiting for a decision (also a
    :class:`plandag.approval.StaleDecisionError`).

    Attributes:
        expected: the hash of the plan waiting for a decision.
        given: the hash the decision named.
    """

    def __init__(self, *, expected: str, given: str) -> None:
        super().__init__(
            f"this decision is for plan {given}, but the plan waiting for a decision is "
            f"{expected}; decide on the plan shown last"
        )
        self.expected = expected
        self.given = given


class PlanModeError(PlandagError, PermissionError):
    """Plan mode forbids this: a tool with effects while armed, or arming an automated
    conversation.

    Attributes:
        tool: the refused tool's name, or None when no tool is involved.
    """

    def __init__(self, message: str, *, tool: str | None = None) -> None:
        super().__init__(message)
        self.tool = tool


# -- the tool rules of plan mode -----------------------------------------------------------


def allowed_registry(registry: Registry) -> Registry:
    """The tools plan mode lets run: those of ``registry`` without effects, and every check.

    Args:
        registry: the run's full registry (not changed).

    Returns:
        A new :class:`Registry` holding the tools whose ``effects`` is ``"none"`` and all of
        ``registry``'s check kinds (checks read a result, they write nothing).
    """
    return Registry(
        [item for item in registry.tools.values() if item.effects == "none"],
        registry.checks.values(),
    )


def check_tool_allowed(tool: Tool) -> None:
    """Refuse a tool plan mode may not run: only tools without effects may run.

    Args:
        tool: the tool about to run.

    Raises:
        PlanModeError: the tool has ``write`` or ``irreversible`` effects.
    """
    if tool.effects != "none":
        raise PlanModeError(
            f"tool {tool.name} has {tool.effects} effects and plan mode runs only tools "
            "without effects; approve the plan to run it, or disarm plan mode",
            tool=tool.name,
        )


# -- turns ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Turn:
    """One recorded turn of a conversation.

    Attributes:
        index: position in the conversation, 0 for the first turn.
        kind: see :data:`TurnKind`.
        time: wall-clock seconds since the epoch when it happened.
        text: the message, question or answer; for ``plan``, ``decision`` and ``mode``
            turns a one-line summary for people.
        origin: who sent it (:data:`Origin`) for ``message``, ``answer`` and ``decision``
            turns; None for turns plandag writes (questions, plans, mode changes).
        mode: how it was handled, ``"plan"`` or ``"normal"``.
        data: JSON details by kind: ``plan``: ``{"plan": Plan JSON, "hash": str,
            "pending": bool, "in_reply_to": int | None}``; ``decision``: ``{"approved":
            bool, "hash": str, "feedback": str | None, "who": str | None, "plan_turn":
            int}`` (plus ``"reject_steps"`` and ``"edit_steps"`` for an approval with
            per-step choices); ``mode``: ``{"armed": bool, "reason": EndReason | None}`` (plus
            ``"detected_at"`` for an expiry); ``question``: ``{"in_reply_to": int | None}``;
            ``answer``: ``{"question": int}``; ``message``: ``{"queued": bool,
            "history_only": bool}``.
    """

    index: int
    kind: TurnKind
    time: float
    text: str
    origin: Origin | None = None
    mode: Mode = "normal"
    data: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def plan(self) -> Plan:
        """The plan of a ``plan`` turn. Raises ConversationError for another kind."""
        if self.kind != "plan":
            raise ConversationError(f"turn {self.index} is a {self.kind} turn, not a plan")
        return Plan.model_validate(self.data["plan"])


@dataclasses.dataclass(frozen=True, slots=True)
class PendingDecision:
    """The plan shown last in plan mode, waiting for a person's decision.

    Attributes:
        turn: index of its ``plan`` turn.
        plan_hash: the hash a decision must name (SHA-256 hex, ``plandag.approval.plan_hash``).
        shown_at: wall-clock seconds since the epoch when it was shown.
    """

    turn: int
    plan_hash: str
    shown_at: float


@dataclasses.dataclass(frozen=True, slots=True)
class PlanModeDecision:
    """What :meth:`Conversation.decide` recorded.

    Attributes:
        approved: True for an approval (plan mode ended), False for a rejection.
        plan: the decided plan: on approval the plan to run, now with its effects.
        plan_hash: its hash.
        feedback: the person's feedback text, in full (for the planner's revision).
        turn: the recorded ``decision`` turn.
    """

    approved: bool
    plan: Plan
    plan_hash: str
    feedback: str | None
    turn: Turn


@dataclasses.dataclass(frozen=True, slots=True)
class _Draft:
    """A turn about to be recorded (its index is given when it is recorded)."""

    kind: TurnKind
    time: float
    text: str
    origin: Origin | None
    mode: Mode
    data: dict[str, Any]


class TurnWriter(Protocol):
    """Where a conversation records its turns (``ConversationStore`` implements it)."""

    def append_turns(
        self, conversation_id: str, expected_count: int, turns: Sequence[Turn]
    ) -> None:
        """Record ``turns`` after the first ``expected_count`` turns, all or none.

        Raises:
            ConversationError: the stored conversation does not have ``expected_count``
                turns (another writer got there first); nothing was written.
        """
        ...


def _plan_json(plan: Plan) -> dict[str, Any]:
    # exclude_unset keeps which fields were given (ParamSpec.is_required reads it), so the
    # reloaded plan is the same plan, with the same hash.
    return plan.model_dump(mode="json", exclude_unset=True)


def _check_time(now: float) -> float:
    if not isinstance(now, int | float) or not math.isfinite(now):
        raise ConversationError(f"now must be a finite number of seconds, not {now!r}")
    return float(now)


# -- the conversation ----------------------------------------------------------------------


class Conversation:
    """A persisted sequence of turns, with plan mode (see the module docstring for the rules).

    Build one with :meth:`ConversationStore.create` (persisted) or :meth:`Conversation.new`
    (in memory only); load one with :meth:`ConversationStore.load`.

    Args:
        id: the conversation's id (uuid4 hex by default).
        origin: who started it.
        created: wall-clock seconds since the epoch.
        expiry_s: seconds without a decision after which plan mode ends (> 0).
        turns: the recorded turns, replayed in order to rebuild the state.
        writer: where new turns are recorded, or None to keep them in memory only.

    Raises:
        ConversationError: an unknown origin, a bad ``expiry_s``, turns out of order.
    """

    def __init__(
        self,
        *,
        id: str,
        origin: Origin,
        created: float,
        expiry_s: float = DEFAULT_EXPIRY_S,
        turns: Sequence[Turn] = (),
        writer: TurnWriter | None = None,
    ) -> None:
        if origin not in ORIGINS:
            raise ConversationError(f"origin must be one of {', '.join(ORIGINS)}, not {origin!r}")
        if not isinstance(expiry_s, int | float) or not math.isfinite(expiry_s) or expiry_s <= 0:
            raise ConversationError(f"expiry_s must be a number of seconds > 0, not {expiry_s!r}")
        self.id = id
        self.origin: Origin = origin
        self.created = _check_time(created)
        self.expiry_s = float(expiry_s)
        self._writer = writer
        self._turns: list[Turn] = []
        self._armed_at: float | None = None
        self._clock_start: float | None = None
        self._pending: PendingDecision | None = None
        self._open_question: int | None = None
        for turn in turns:
            if turn.index != len(self._turns):
                raise ConversationError(
                    f"conversation {id}: turn {turn.index} found where turn "
                    f"{len(self._turns)} was expected"
                )
            self._apply(turn)

    @classmethod
    def new(cls, origin: Origin, now: float, *, expiry_s: float = DEFAULT_EXPIRY_S) -> Conversation:
        """A new conversation kept in memory only (no database).

        Args:
            origin: who started it.
            now: wall-clock seconds since the epoch.
            expiry_s: seconds without a decision before plan mode ends (default 24 h).
        """
        return cls(id=uuid.uuid4().hex, origin=origin, created=now, expiry_s=expiry_s)

    # -- state, derived from the turns ------------------------------------------------------

    @property
    def turns(self) -> tuple[Turn, ...]:
        """Every turn, oldest first."""
        return tuple(self._turns)

    @property
    def pending(self) -> PendingDecision | None:
        """The plan waiting for a decision, or None. Not checked against expiry: see
        :meth:`is_armed`."""
        return self._pending

    @property
    def armed_at(self) -> float | None:
        """When plan mode was armed, if it is armed (expiry not considered)."""
        return self._armed_at

    @property
    def open_question(self) -> int | None:
        """Index of the planner's question not answered yet, or None."""
        return self._open_question

    def deadline(self) -> float | None:
        """When plan mode ends without a decision (seconds since the epoch), or None when
        not armed: the later of arming and the last decision, plus ``expiry_s``."""
        if self._clock_start is None:
            return None
        return self._clock_start + self.expiry_s

    def is_armed(self, now: float) -> bool:
        """True when plan mode is on at ``now``: armed, not ended, and ``now`` before the
        deadline (:meth:`deadline`; at the deadline itself the mode has ended)."""
        deadline = self.deadline()
        return deadline is not None and _check_time(now) < deadline

    def mode_for(self, origin: Origin, now: float) -> Mode:
        """How a message from ``origin`` arriving at ``now`` is handled.

        Returns:
            ``"plan"`` when the conversation is armed at ``now`` and the message comes from a
            person; ``"normal"`` otherwise: an automated message is never handled in plan
            mode, even in an armed conversation's history.
        """
        return "plan" if origin == "person" and self.is_armed(now) else "normal"

    def registry_for(self, registry: Registry, now: float) -> Registry:
        """The tools that may run in this conversation at ``now``: :func:`allowed_registry`
        when armed, else ``registry`` itself."""
        return allowed_registry(registry) if self.is_armed(now) else registry

    def check_tool_allowed(self, tool: Tool, now: float) -> None:
        """Refuse a tool with effects while the conversation is armed (whoever asked).

        Raises:
            PlanModeError: armed at ``now`` and ``tool`` has effects.
        """
        if self.is_armed(now):
            check_tool_allowed(tool)

    def queued_messages(self) -> list[Turn]:
        """Messages recorded with ``queued=True`` that no later question or plan answers yet."""
        handled = {
            turn.data.get("in_reply_to")
            for turn in self._turns
            if turn.kind in ("question", "plan")
        }
        return [
            turn
            for turn in self._turns
            if turn.kind == "message" and turn.data.get("queued") and turn.index not in handled
        ]

    def _apply(self, turn: Turn) -> None:
        """Advance the state by one turn (the only place the state changes)."""
        self._turns.append(turn)
        if turn.kind == "mode":
            if turn.data["armed"]:
                self._armed_at = self._clock_start = turn.time
            else:
                self._armed_at = self._clock_start = None
                self._pending = None
        elif turn.kind == "plan":
            if turn.data.get("pending"):
                self._pending = PendingDecision(turn.index, str(turn.data["hash"]), turn.time)
            self._open_question = None
        elif turn.kind == "question":
            self._open_question = turn.index
        elif turn.kind == "answer":
            self._open_question = None
        elif turn.kind == "decision":
            self._pending = None
            if self._clock_start is not None:
                self._clock_start = turn.time

    # -- recording ------------------------------------------------------------------------------

    def _record(self, *drafts: _Draft) -> list[Turn]:
        """Write the turns (all or none), then apply them; returns them."""
        built = [
            Turn(len(self._turns) + offset, d.kind, d.time, d.text, d.origin, d.mode, d.data)
            for offset, d in enumerate(drafts)
        ]
        if self._writer is not None:
            self._writer.append_turns(self.id, len(self._turns), built)
        for turn in built:
            self._apply(turn)
        return built

    def _expiry_turn(self, now: float) -> _Draft | None:
        deadline = self.deadline()
        if deadline is None or now < deadline:
            return None
        data: dict[str, Any] = {"armed": False, "reason": "expired", "detected_at": now}
        hours = self.expiry_s / 3600
        text = f"plan mode ended: expired ({hours:g} h without a decision)"
        return _Draft("mode", deadline, text, None, "plan", data)

    def expire_if_due(self, now: float) -> Turn | None:
        """Record the end of plan mode when its deadline has passed at ``now``.

        Every other change calls this first, so an expiry is always recorded before what
        follows it. Returns the ``mode`` turn recorded (its time is the deadline), or None.
        """
        expiry = self._expiry_turn(_check_time(now))
        return None if expiry is None else self._record(expiry)[0]

    def arm(self, now: float) -> Turn | None:
        """Arm plan mode at ``now``.

        Returns:
            The ``mode`` turn recorded, or None when already armed (nothing recorded).

        Raises:
            PlanModeError: the conversation's origin is not ``person``.
        """
        now = _check_time(now)
        if self.origin != "person":
            raise PlanModeError(
                f"conversation {self.id} was started by {self.origin}, and only a conversation "
                "started by a person can enter plan mode"
            )
        self.expire_if_due(now)
        if self.is_armed(now):
            return None
        return self._record(
            _Draft("mode", now, "plan mode armed", None, "plan", {"armed": True, "reason": None})
        )[0]

    def disarm(self, now: float, *, reason: EndReason = "disarmed") -> Turn | None:
        """End plan mode at ``now`` and record why.

        Args:
            now: wall-clock seconds since the epoch.
            reason: ``disarmed`` (a person turned it off) or ``cannot_show_decision``
                (the channel cannot show a decision); the other reasons are recorded by
                :meth:`decide` and :meth:`expire_if_due`.

        Returns:
            The ``mode`` turn recorded, or None when it was not armed (or had expired:
            then the expiry is what gets recorded).
        """
        now = _check_time(now)
        if self.expire_if_due(now) is not None or not self.is_armed(now):
            return None
        data: dict[str, Any] = {"armed": False, "reason": reason}
        return self._record(_Draft("mode", now, f"plan mode ended: {reason}", None, "plan", data))[
            0
        ]

    def add_message(self, text: str, origin: Origin, now: float, *, queued: bool = False) -> Turn:
        """Record a message; a person's message while the planner's question is open is
        recorded as its ``answer``.

        Args:
            text: the message.
            origin: who sent it.
            now: wall-clock seconds since the epoch.
            queued: the message arrived while another was being handled and waits its turn
                (:meth:`queued_messages`); it does not change the mode.

        Returns:
            The recorded turn: ``mode`` is :meth:`mode_for` ``(origin, now)``; an automated
            message in an armed conversation is marked ``history_only``.
        """
        now = _check_time(now)
        if origin not in ORIGINS:
            raise ConversationError(f"origin must be one of {', '.join(ORIGINS)}, not {origin!r}")
        self.expire_if_due(now)
        mode = self.mode_for(origin, now)
        if origin == "person" and self._open_question is not None and not queued:
            answer: dict[str, Any] = {"question": self._open_question}
            return self._record(_Draft("answer", now, text, origin, mode, answer))[0]
        history_only = origin != "person" and self.is_armed(now)
        data: dict[str, Any] = {"queued": queued, "history_only": history_only}
        return self._record(_Draft("message", now, text, origin, mode, data))[0]

    def ask(self, question: str, now: float, *, in_reply_to: int | None = None) -> Turn:
        """Record the planner's question (plan mode stays as it is).

        Args:
            question: what the planner asks.
            now: wall-clock seconds since the epoch.
            in_reply_to: index of the message or answer it replies to.
        """
        now = _check_time(now)
        self.expire_if_due(now)
        mode: Mode = "plan" if self.is_armed(now) else "normal"
        data: dict[str, Any] = {"in_reply_to": in_reply_to}
        return self._record(_Draft("question", now, question, None, mode, data))[0]

    def end_turn_with_plan(
        self,
        plan: Plan,
        plan_hash: str,
        now: float,
        *,
        can_show: bool = True,
        in_reply_to: int | None = None,
    ) -> Turn:
        """Record the plan a turn ended with; in plan mode it waits for a decision.

        Args:
            plan: the whole plan.
            plan_hash: its hash, ``plandag.approval.plan_hash(plan, params, write_boundary)``
                (a decision must name it).
            now: wall-clock seconds since the epoch.
            can_show: whether the person's channel can show a decision; when False, plan
                mode ends (reason ``cannot_show_decision``) in the same transaction and the
                plan waits for nothing here (it goes the normal approval way).
            in_reply_to: index of the message or answer it replies to.

        Returns:
            The ``plan`` turn (``data["pending"]`` says whether it waits for a decision). A
            plan shown while another waits replaces it: a decision for the older one is
            then stale.
        """
        now = _check_time(now)
        self.expire_if_due(now)
        armed = self.is_armed(now)
        pending = armed and can_show
        steps = len(plan.steps)
        text = f"plan {plan_hash[:12]} ({steps} step{'s' if steps != 1 else ''})"
        text += ", waiting for a decision" if pending else ""
        data: dict[str, Any] = {
            "plan": _plan_json(plan),
            "hash": plan_hash,
            "pending": pending,
            "in_reply_to": in_reply_to,
        }
        shown = _Draft("plan", now, text, None, "plan" if armed else "normal", data)
        if armed and not can_show:
            reason: EndReason = "cannot_show_decision"
            end = _Draft(
                "mode",
                now,
                f"plan mode ended: {reason}",
                None,
                "plan",
                {"armed": False, "reason": reason},
            )
            return self._record(shown, end)[0]
        return self._record(shown)[0]

    def decide(
        self,
        *,
        approved: bool,
        plan_hash: str,
        now: float,
        feedback: str | None = None,
        who: str | None = None,
        origin: Origin = "person",
        reject_steps: Sequence[int] = (),
        edit_steps: Mapping[int, Mapping[str, Any]] | None = None,
    ) -> PlanModeDecision:
        """Approve or reject the plan waiting for a decision.

        Args:
            approved: True to approve (plan mode ends, reason ``approved``, and the plan is
                returned to run with its effects), False to reject (plan mode stays armed;
                the planner revises with ``feedback``).
            plan_hash: the hash of the plan decided on; must be the pending plan's.
            now: wall-clock seconds since the epoch.
            feedback: the person's text, kept in full.
            who: who decided (a name or user id), recorded.
            origin: where the decision came from; only ``person`` may decide in plan mode.
            reject_steps: with an approval, the steps the person rejected (they and the
                steps downstream of them do not run: :func:`plandag.approval.amend`),
                recorded as ``data["reject_steps"]`` (sorted) when not empty.
            edit_steps: with an approval, new argument values by step id, recorded as
                ``data["edit_steps"]`` (keys as text, JSON objects) when not empty.

        Returns:
            The :class:`PlanModeDecision`, with the plan.

        Raises:
            ConversationError: plan mode is not armed (or just expired: the expiry is
                recorded first), or no plan waits for a decision.
            StaleDecisionError: ``plan_hash`` is not the pending plan's.
            PlanModeError: ``origin`` is not ``person``.
            ConversationError: step choices with a rejection, or for a step the plan
                does not have.
        """
        now = _check_time(now)
        edits = {int(key): dict(value) for key, value in (edit_steps or {}).items()}
        if (reject_steps or edits) and not approved:
            raise ConversationError(
                "per-step choices (rejected or edited steps) come with an approval; a "
                "rejection sends the whole plan back with the feedback"
            )
        if self.expire_if_due(now) is not None:
            raise ConversationError(
                f"plan mode of conversation {self.id} expired after {self.expiry_s:g} s without "
                "a decision; the plan can no longer be decided here, arm plan mode again"
            )
        if not self.is_armed(now):
            raise ConversationError(
                f"conversation {self.id} is not in plan mode; nothing to decide"
            )
        if origin != "person":
            raise PlanModeError(
                f"a decision from {origin} is refused: only a person decides in plan mode"
            )
        pending = self._pending
        if pending is None:
            raise ConversationError(f"conversation {self.id} has no plan waiting for a decision")
        if plan_hash != pending.plan_hash:
            raise StaleDecisionError(expected=pending.plan_hash, given=plan_hash)
        plan = self._turns[pending.turn].plan
        unknown = sorted({*reject_steps, *edits} - {step.id for step in plan.steps})
        if unknown:
            raise ConversationError(
                f"the plan has no step {', '.join(map(str, unknown))}; choose among its steps"
            )
        verb = "approved" if approved else "rejected"
        data: dict[str, Any] = {
            "approved": approved,
            "hash": plan_hash,
            "feedback": feedback,
            "who": who,
            "plan_turn": pending.turn,
        }
        if reject_steps:
            data["reject_steps"] = sorted(set(reject_steps))
        if edits:
            data["edit_steps"] = {str(key): edits[key] for key in sorted(edits)}
        decision = _Draft("decision", now, f"plan {plan_hash[:12]} {verb}", origin, "plan", data)
        if approved:
            end = _Draft(
                "mode",
                now,
                "plan mode ended: approved",
                None,
                "plan",
                {"armed": False, "reason": "approved"},
            )
            recorded = self._record(decision, end)
        else:
            recorded = self._record(decision)
        return PlanModeDecision(approved, plan, plan_hash, feedback, recorded[0])

    def end_reasons(self) -> list[EndReason]:
        """The reason of every end of plan mode, oldest first."""
        return [
            turn.data["reason"]
            for turn in self._turns
            if turn.kind == "mode" and not turn.data["armed"]
        ]
