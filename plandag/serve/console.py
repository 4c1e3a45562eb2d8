"""The console's work behind the pages: conversations in plan mode, decisions, the runs they
start, and the inbox's decisions (docs/console.md).

:class:`Console` holds the run store (conversations live in its database,
:class:`~plandag.conversation.ConversationStore`) and the conversation planner, and does
what a page asks, following the rules of :mod:`plandag.conversation.model`:

* **A message** (:meth:`Console.send`) is recorded in the person's conversation; the
  ``Plan`` box ticked arms plan mode first, unticked disarms it (reason ``disarmed``). The
  turn is then handled in the background (:func:`plandag.conversation.plan_turn`): in plan
  mode the planner may run only tools without effects (with a planner made with
  ``investigate=True`` it investigates with them first; what the investigation found is
  recorded in the conversation, :func:`plandag.conversation.recording_investigations`) and
  the turn ends with a plan waiting for a decision. While a turn runs the conversation is
  *busy*: a message sent meanwhile is recorded ``queued`` (the mode left as it is) and
  handled, in order, once the turn ends.
* **The decision card** (:meth:`Console.card`): the plan compiled against the console's
  registry, so that its steps, dependencies (declared and implied by references), effects
  and write targets, estimate of cost and time and hash are those an approval binds
  (:class:`plandag.approval.ApprovalRequest`); shown within ``card_chars`` characters
  (:func:`plandag.conversation.render_for_decision`: a plan too large is cut at a step
  boundary with the explicit notice; the decision never is). A plan whose card cannot be
  built (it does not compile against the registry) ends plan mode, reason
  ``cannot_show_decision``.
* **Approve** (:meth:`Console.decide`) records the decision with the person's name (and
  per-step choices: rejected steps and the steps downstream of them dropped, edited
  arguments, :func:`plandag.approval.amend`), ends plan mode, and runs the approved plan in
  the run store (:func:`plandag.runs.start_run`, command ``serve``, approved by
  that name); the run's start and end are recorded in the same conversation (messages of
  origin ``pipeline``), so the conversation keeps everything said and found before.
  **Reject** records the decision with the feedback; the feedback is then the person's next
  message, planned in plan mode: the planner gets it verbatim as the task and as "the
  instruction for this revision, in full" (:func:`plandag.conversation.conversation_context`).
* **The inbox** (:meth:`Console.abandon`, :meth:`Console.resume`,
  :meth:`Console.approve_escalated`): ``abandon`` closes the case here
  (:func:`plandag.runs.abandon`); ``resume`` and ``approve`` run ``plandag resume``
  / ``plandag approve`` as a child process on the same store with ``--who``, as a person at
  a terminal would, so the run goes on exactly as the command line makes it go on.

Every conversation change happens on the event loop's thread (the store's connection is
used there only); tools run in worker threads as in any run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from plandag.approval import ApprovalRequest, ApprovedElsewhere, Decision
from plandag.approval.steps import amend
from plandag.compiler import CompiledPlan, compile_plan
from plandag.conversation import (
    Conversation,
    ConversationError,
    ConversationStore,
    PlanModeError,
    PlannerFunction,
    Shown,
    Turn,
    plan_turn,
    recording_investigations,
    render_for_decision,
)
from plandag.dag.plan import Plan
from plandag.errors import PlandagError, PlanError
from plandag.planner.investigate import Investigation
from plandag.store import Store, open_store
from plandag.tools.boundary import WriteBoundary
from plandag.tools.registry import Registry

__all__ = ["Card", "Console", "ConsoleConfig", "ConsoleError", "Spawn"]

logger = logging.getLogger(__name__)

Spawn = Callable[[Sequence[str]], Awaitable[tuple[int, str]]]
"""``await spawn(argv) -> (exit code, standard error)``: runs a ``plandag`` command (the
inbox's resume and approve)."""

MAX_QUEUED_PER_TURN = 1000
"""At most this many queued messages are handled after one turn (then the next message
handles the rest)."""


class ConsoleError(PlandagError, ValueError):
    """What the console was asked cannot be done (unknown conversation, a decision on no
    plan, bad step choices...); the message says what and what to do."""


async def spawn_process(argv: Sequence[str]) -> tuple[int, str]:
    """The default :data:`Spawn`: run ``argv`` as a child process, wait for it, and return
    its exit code and the last 2000 characters of its standard error."""
    completed = await anyio.run_process(list(argv), check=False)
    return completed.returncode, completed.stderr.decode("utf-8", "replace")[-2000:]


@dataclasses.dataclass(frozen=True, slots=True)
class ConsoleConfig:
    """How the console works.

    Attributes:
        store_path: the run store (SQLite) the runs and conversations live in.
        registry: the tools and checks plans may use.
        planner: the conversation planner (:func:`plandag.conversation.planner_function`
            over the model client), or None: messages are recorded, nothing plans.
        write_boundary: where approved plans may write (None: nowhere is checked beyond
            the tools' own rules); hashed with every plan.
        base: the folder runs work in (relative paths in plans mean paths there).
        tools: the ``--tools`` files the registry holds (absolute paths), recorded with
            each run (and their SHA-256) so that ``plandag resume`` rebuilds the same
            registry.
        boundary_specs: the ``--write-boundary`` specs, recorded with each run (None: the
            default, the folder ``base``).
        card_chars: the most characters a decision card shows of a plan (the decision
            itself is always shown whole).
        poll_s: how often the live pages look for changes, seconds (> 0).
        stream_s: how long one server-sent-event stream stays open before the browser
            reconnects, seconds (> 0).
        clock: wall-clock time, seconds since the epoch (an injectable clock for tests).
        spawn: runs ``plandag`` commands for the inbox (:data:`Spawn`).
        plandag_command: the command line that starts ``plandag`` (default: this Python
            with ``-m plandag``).
        on_close: awaited when the console stops, on its event loop (say, the model
            client's ``aclose``), or None.
        offline: the planner is the offline model (``serve --offline``): every run is
            stored as planned offline, and its pages say so.
    """

    store_path: Path
    registry: Registry
    planner: PlannerFunction | None = None
    write_boundary: WriteBoundary | None = None
    base: Path = dataclasses.field(default_factory=Path.cwd)
    tools: tuple[str, ...] = ()
    boundary_specs: tuple[str, ...] | None = None
    card_chars: int = 20_000
    poll_s: float = 0.5
    stream_s: float = 300.0
    clock: Callable[[], float] = time.time
    spawn: Spawn = spawn_process
    offline: bool = False
    plandag_command: tuple[str, ...] = (sys.executable, "-m", "plandag")
    on_close: Callable[[], Awaitable[None]] | None = None

    def __post_init__(self) -> None:
        if self.card_chars < 0:
            raise ValueError(f"card_chars must be >= 0, not {self.card_chars}")
        for name in ("poll_s", "stream_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a number of seconds > 0, not {value!r}")


@dataclasses.dataclass(frozen=True, slots=True)
class Card:
    """A plan shown for decision.

    Attributes:
        plan: the whole plan.
        plan_hash: the hash a decision binds.
        shown: the plan as :func:`render_for_decision` fits it in ``card_chars``.
        request: the plan as an approval shows it (dependencies, effects, estimate).
        steps: the steps shown (the first ``shown.shown_steps``), each as a dict: ``id``,
            ``tool``, ``args`` (JSON text), ``rows`` (its lines, at most 12),
            ``depends_on``, ``effects``, ``targets``, ``description``.
    """

    plan: Plan
    plan_hash: str
    shown: Shown
    request: ApprovalRequest
    steps: tuple[dict[str, Any], ...]


class Console:
    """The console's state and actions (module docstring). Use it inside
    ``async with console:`` (the app's lifespan): it opens the store and the task group
    that runs turns in the background.

    Args:
        config: how it works (:class:`ConsoleConfig`).
    """

    def __init__(self, config: ConsoleConfig) -> None:
        self.config = config
        self.busy: set[str] = set()
        self._live: dict[str, Conversation] = {}
        self.errors: dict[str, str] = {}
        self.notices: dict[str, str] = {}
        self._store: Store | None = None
        self._conversations: ConversationStore | None = None
        self._group: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> Console:
        self._store = open_store(self.config.store_path)
        self._conversations = ConversationStore(self._store.connection)
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        assert self._group is not None
        self._group.cancel_scope.cancel()
        try:
            await self._group.__aexit__(*exc_info)
        finally:
            self._group = None
            if self.config.on_close is not None:
                with anyio.CancelScope(shield=True):
                    await self.config.on_close()
            if self._store is not None:
                self._store.close()
                self._store = None

    @property
    def store(self) -> Store:
        """The run store (open inside ``async with``)."""
        if self._store is None:
            raise RuntimeError("the console is not started: use it inside `async with console`")
        return self._store

    @property
    def conversations(self) -> ConversationStore:
        """The conversations, in the run store's database."""
        if self._conversations is None:
            raise RuntimeError("the console is not started: use it inside `async with console`")
        return self._conversations

    def now(self) -> float:
        """The console clock's time, seconds since the epoch."""
        return float(self.config.clock())

    def _start(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        if self._group is None:
            raise RuntimeError("the console is not started: use it inside `async with console`")
        self._group.start_soon(work)

    # -- conversations ----------------------------------------------------------------------

    def load(self, conversation_id: str) -> Conversation:
        """The conversation, its plan-mode expiry recorded when due: while a turn of it
        runs, the very object that turn records in (so a message queued meanwhile and the
        turn's plan are recorded one after the other); otherwise as stored.

        Raises:
            ConsoleError: no conversation has this id.
        """
        conversation = self._live.get(conversation_id)
        if conversation is None:
            try:
                conversation = self.conversations.load(conversation_id)
            except ConversationError as error:
                raise ConsoleError(str(error)) from error
        conversation.expire_if_due(self.now())
        return conversation

    def send(self, conversation_id: str | None, text: str, *, plan: bool | None) -> str:
        """Record a person's message and handle it (module docstring).

        Args:
            conversation_id: the conversation, or None to start a new person's conversation.
            text: the message (not blank).
            plan: the Plan box: True ticked (arm), False unticked (disarm), None not sent
                (a disabled box: the mode is left as it is).

        Returns:
            The conversation's id.

        Raises:
            ConsoleError: a blank message, an unknown conversation.
            PlanModeError: the box ticked on a conversation not started by a person.
        """
        if not text.strip():
            raise ConsoleError("the message is empty: write what you want done")
        now = self.now()
        if conversation_id is None:
            conversation = self.conversations.create("person", now)
        else:
            conversation = self.load(conversation_id)
        if conversation.id in self.busy:
            conversation.add_message(text, "person", now, queued=True)
            return conversation.id
        if plan is not None:
            self._set_mode(conversation, plan, now)
        turn = conversation.add_message(text, "person", now)
        self.errors.pop(conversation.id, None)
        self._handle(conversation.id, turn)
        return conversation.id

    def set_mode(self, conversation_id: str, armed: bool) -> None:
        """Tick or untick the Plan box (ignored while a turn runs: the box is disabled).

        Raises:
            ConsoleError: an unknown conversation.
            PlanModeError: arming a conversation not started by a person.
        """
        conversation = self.load(conversation_id)
        if conversation.id not in self.busy:
            self._set_mode(conversation, armed, self.now())

    @staticmethod
    def _set_mode(conversation: Conversation, armed: bool, now: float) -> None:
        if armed:
            conversation.arm(now)
        else:
            conversation.disarm(now)

    def _hold(self, conversation: Conversation) -> None:
        """Mark the conversation busy: every change goes through this object until
        :meth:`_release`."""
        self.busy.add(conversation.id)
        self._live[conversation.id] = conversation

    def _release(self, conversation_id: str) -> None:
        self.busy.discard(conversation_id)
        self._live.pop(conversation_id, None)

    def _handle(
        self,
        conversation_id: str,
        first: Turn | None,
        before: Callable[[], Coroutine[Any, Any, None]] | None = None,
    ) -> None:
        """Mark the conversation busy, run ``before`` (an approved plan's run), handle
        ``first``, then the messages queued meanwhile, in order."""
        self._hold(self.load(conversation_id))

        async def work() -> None:
            tried: set[int] = set()
            try:
                if before is not None:
                    await before()
                if first is not None:
                    tried.add(first.index)
                    await self._plan(conversation_id, first)
                for _ in range(MAX_QUEUED_PER_TURN):
                    conversation = self.load(conversation_id)
                    waiting = [t for t in conversation.queued_messages() if t.index not in tried]
                    if not waiting:
                        break
                    tried.add(waiting[0].index)
                    await self._plan(conversation_id, waiting[0])
            finally:
                self._release(conversation_id)

        self._start(work)

    async def _plan(self, conversation_id: str, turn: Turn) -> None:
        """One planning turn for ``turn``; a failure is kept to show, the message stays."""
        planner = self.config.planner
        if planner is None:
            self.errors[conversation_id] = (
                "no planner is configured: start `plandag serve` with a model (--provider, "
                "--model, --base-url) to plan messages"
            )
            return
        conversation = self.load(conversation_id)
        now = self.now()

        def found(investigation: Investigation) -> None:
            # What plan mode's investigation found stays in the conversation (context for
            # the revisions, and the record beside the run an approval starts).
            conversation.add_message(
                f"{investigation.summary()}\n\n{investigation.section}", "pipeline", self.now()
            )

        try:
            with recording_investigations(found):
                ended = await plan_turn(
                    conversation,
                    turn,
                    planner,
                    self.config.registry,
                    now,
                    write_boundary=self.config.write_boundary,
                )
        except Exception as error:  # the planner's failure is shown; the console goes on
            logger.warning("conversation %s: the planner failed: %s", conversation_id, error)
            self.errors[conversation_id] = f"the planner could not write a plan: {error}"
            return
        if ended.kind != "plan":
            return
        if ended.data.get("pending"):
            try:
                self.card(conversation, ended)
            except ConsoleError as error:
                conversation.disarm(self.now(), reason="cannot_show_decision")
                self.errors[conversation_id] = str(error)
            return
        # Not in plan mode: the plan runs at once, through the approval gate (a plan with
        # effects waits, awaiting_approval, for `plandag approve` or the runs page).
        await self._run(conversation, ended.plan, who=None, choices=None)

    # -- the decision card ------------------------------------------------------------------

    def compile(self, plan: Plan) -> CompiledPlan:
        """``plan`` compiled against the console's registry and write boundary.

        Raises:
            ConsoleError: it does not compile (every diagnostic in the message).
        """
        try:
            return compile_plan(
                plan.model_dump(mode="json", exclude_unset=True),
                self.config.registry,
                params={},
                write_boundary=self.config.write_boundary,
            )
        except PlanError as error:
            raise ConsoleError(
                f"the plan cannot be shown for a decision: it does not compile against the "
                f"console's tools ({error})"
            ) from error

    def card(self, conversation: Conversation, turn: Turn) -> Card:
        """The decision card of a ``plan`` turn (module docstring).

        Raises:
            ConsoleError: the plan does not compile against the registry.
        """
        plan = turn.plan
        plan_hash = str(turn.data["hash"])
        compiled = self.compile(plan)
        request = ApprovalRequest.for_plan(
            conversation.id, 1, compiled, reason="plan mode: a person decides", now=self.now()
        )
        shown = render_for_decision(
            plan, plan_hash, self.config.card_chars, registry=self.config.registry
        )
        marked = {step_id: (effects, targets) for step_id, _, effects, targets in request.effects}
        steps = []
        for step in plan.steps[: shown.shown_steps]:
            effects, targets = marked.get(step.id, ("none", ()))
            steps.append(
                {
                    "id": step.id,
                    "tool": step.tool,
                    "args": json.dumps(step.args, ensure_ascii=False, indent=1, default=str),
                    "rows": min(json.dumps(step.args, indent=1, default=str).count("\n") + 1, 12),
                    "depends_on": list(request.dependencies.get(step.id, step.depends_on)),
                    "effects": effects,
                    "targets": list(targets),
                    "description": step.description or "",
                }
            )
        return Card(plan, plan_hash, shown, request, tuple(steps))

    def pending_card(self, conversation: Conversation) -> Card | None:
        """The card of the plan waiting for a decision, or None (none waits, or plan mode
        is off at the console's time)."""
        pending = conversation.pending
        if pending is None or not conversation.is_armed(self.now()):
            return None
        return self.card(conversation, conversation.turns[pending.turn])

    def decide(
        self,
        conversation_id: str,
        *,
        approved: bool,
        plan_hash: str,
        who: str,
        feedback: str = "",
        reject_steps: Sequence[int] = (),
        edit_steps: Mapping[int, Mapping[str, Any]] | None = None,
    ) -> None:
        """Approve (and run) or reject (and have it revised) the plan waiting in the
        conversation (module docstring).

        Args:
            conversation_id: the conversation.
            approved: approve (True) or reject (False).
            plan_hash: the hash shown on the card (a stale one is refused).
            who: the person's name, recorded with the decision.
            feedback: for a rejection, the text for the planner (not blank).
            reject_steps: with an approval, steps not to run (with those that need them).
            edit_steps: with an approval, new argument values by step id.

        Raises:
            ConsoleError: an unknown conversation, a blank rejection, nothing waiting, a
                stale hash, step choices that do not fit the plan, a busy conversation.
        """
        conversation = self.load(conversation_id)
        if conversation.id in self.busy:
            raise ConsoleError("a turn of this conversation is running; decide once it ends")
        if not approved and not feedback.strip():
            raise ConsoleError("a rejection needs feedback: say what the revised plan should do")
        edits = dict(edit_steps or {})
        choices: Decision | None = None
        if approved and (reject_steps or edits):
            pending = conversation.pending
            if pending is None:
                raise ConsoleError("no plan waits for a decision in this conversation")
            plan = conversation.turns[pending.turn].plan
            compiled = self.compile(plan)
            choices = Decision(
                True,
                plan_hash,
                who=who,
                reject_steps=tuple(sorted(set(reject_steps))),
                edit_steps=edits,
            )
            if set(choices.reject_steps) >= {step.id for step in plan.steps}:
                raise ConsoleError("every step is rejected: reject the plan instead, with feedback")
            try:
                amend(compiled, choices)
            except PlandagError as error:
                raise ConsoleError(str(error)) from error
        try:
            decision = conversation.decide(
                approved=approved,
                plan_hash=plan_hash,
                now=self.now(),
                feedback=feedback if not approved else (feedback or None),
                who=who,
                reject_steps=tuple(reject_steps),
                edit_steps=edits,
            )
        except (ConversationError, PlanModeError) as error:
            raise ConsoleError(str(error)) from error
        self.errors.pop(conversation.id, None)
        if approved:

            async def run() -> None:
                await self._run(self.load(conversation_id), decision.plan, who, choices)

            self._handle(conversation.id, None, run)
            return
        # The feedback is the person's next message: recorded, and planned in plan mode.
        turn = conversation.add_message(feedback, "person", self.now())
        self._handle(conversation.id, turn)

    async def _run(
        self, conversation: Conversation, plan: Plan, who: str | None, choices: Decision | None
    ) -> None:
        """Run ``plan`` in the run store and record its start and end in the conversation."""
        from plandag.runs.options import RunOptions, mcp_fields
        from plandag.runs.segments import start_run
        from plandag.trace.redact import Redactor
        from plandag.trace.writer import TraceWriter

        try:
            compiled = self.compile(plan)
            if choices is not None:
                compiled = amend(compiled, choices).compiled
        except (ConsoleError, PlandagError) as error:
            self.errors[conversation.id] = str(error)
            return
        run_id = uuid.uuid4().hex[:16]
        conversation.add_message(
            f"run {run_id} started: {plan.goal or '(no goal)'}", "pipeline", self.now()
        )
        store = open_store(self.config.store_path)
        options = RunOptions(
            tools=self.config.tools,
            tools_sha256=self._tools_sha256(),
            base=str(self.config.base),
            write_boundary=self.config.boundary_specs,
            approve="ask" if who is not None else "never",
            planned_offline=self.config.offline,
            **mcp_fields(self.config.registry),
        )

        def trace(run: str, segment: int) -> Any:
            return TraceWriter(
                store.trace_path(run), run, segment=segment, redact=Redactor(personal=False)
            )

        try:
            outcome = await start_run(
                store,
                compiled,
                options,
                command="serve",
                approver=ApprovedElsewhere(who) if who is not None else None,
                trace=trace,
                run_id=run_id,
                source="planner",
            )
        except Exception as error:  # recorded in the conversation; the console goes on
            logger.warning("run %s failed to start: %s", run_id, error)
            conversation = self.load(conversation.id)
            conversation.add_message(f"run {run_id} failed: {error}", "pipeline", self.now())
            return
        finally:
            store.close()
        output = ""
        if outcome.result is not None and outcome.status == "succeeded":
            output = json.dumps(outcome.result.output, ensure_ascii=False, default=str)[:2000]
        elif outcome.result is not None:
            failed = [
                f"step {step.id} ({step.tool}) {step.status}: {step.detail or step.reason}"
                for step in outcome.result.steps.values()
                if step.status == "failed"
            ]
            output = "; ".join(failed)[:2000]
        text = f"run {run_id} {outcome.status}"
        text += f": {output}" if output else (f": {outcome.message}" if outcome.message else "")
        self.load(conversation.id).add_message(text, "pipeline", self.now())

    def _tools_sha256(self) -> dict[str, str]:
        """SHA-256 of each tools file the runs use (resume refuses changed code)."""
        return {
            tool: hashlib.sha256(Path(tool).read_bytes()).hexdigest()
            for tool in self.config.tools
            if Path(tool).is_file()
        }

    # -- the inbox ----------------------------------------------------------------------------

    def abandon(self, run_id: str, *, who: str, reason: str) -> None:
        """Close an escalated run for good (``abandoned``), recording who and why.

        Raises:
            ConsoleError: a blank reason, or the run is not escalated.
        """
        from plandag.runs.decisions import abandon

        if not reason.strip():
            raise ConsoleError("abandoning needs a reason: say why the run is given up")
        try:
            abandon(self.store, run_id, who=who, reason=reason)
        except PlandagError as error:
            raise ConsoleError(str(error)) from error

    def resume(self, run_id: str, *, who: str, instruction: str) -> list[str]:
        """Continue an escalated run with the person's instruction: ``plandag resume RUN_ID
        --instruction TEXT --who NAME`` in the background; a crashed run (its process died
        while running it) goes on as it is: ``plandag resume RUN_ID --who NAME``. Returns
        the command line.

        Raises:
            ConsoleError: a blank instruction for a run that did not crash.
        """
        if not instruction.strip():
            if self.store.run(run_id).crashed:
                return self._command(run_id, ["resume", run_id], who)
            raise ConsoleError("resuming needs an instruction: say what the planner should do")
        return self._command(run_id, ["resume", run_id, "--instruction", instruction], who)

    def approve_escalated(self, run_id: str, *, who: str, plan_hash: str) -> list[str]:
        """Run again the step(s) of an escalated run whose outcome was unknown: ``plandag
        approve RUN_ID --hash H --who NAME`` in the background. Returns the command line."""
        return self._command(run_id, ["approve", run_id, "--hash", plan_hash], who)

    def decide_run(
        self, run_id: str, *, approved: bool, who: str, plan_hash: str, feedback: str = ""
    ) -> list[str]:
        """Decide on a run awaiting approval (a plan with effects started without a person
        at hand): ``plandag approve RUN_ID --hash H --who NAME`` (it runs, in the same run)
        or ``plandag reject RUN_ID --hash H --feedback TEXT --who NAME``, in the background.
        Returns the command line.

        Raises:
            ConsoleError: a rejection without feedback.
        """
        if approved:
            return self._command(run_id, ["approve", run_id, "--hash", plan_hash], who)
        if not feedback.strip():
            raise ConsoleError("a rejection needs feedback: say why, in words a planner can act on")
        arguments = ["reject", run_id, "--hash", plan_hash, "--feedback", feedback]
        return self._command(run_id, arguments, who)

    def _command(self, run_id: str, arguments: list[str], who: str) -> list[str]:
        argv = [
            *self.config.plandag_command,
            *arguments,
            "--who",
            who,
            "--store",
            str(self.config.store_path),
        ]
        self.notices[run_id] = f"started: plandag {' '.join(arguments[:2])} (by {who})"

        async def work() -> None:
            code, errors = await self.config.spawn(argv)
            last = errors.strip().splitlines()[-1] if errors.strip() else ""
            self.notices[run_id] = f"plandag {arguments[0]} ended with exit code {code}" + (
                f": {last}" if last else ""
            )

        self._start(work)
        return argv
