"""The replanner: only the failed part of a run goes back to the model
(ARCHITECTURE.md, "Retry vs replan", "Replanning", "Untrusted content").

When steps fail after their retries, :meth:`Replanner.replan` sends the model one request
holding:

* the task (the user's words, trusted);
* every step of the run so far, in the wire format, with its state;
* the completed steps with their results, each quoted as data
  (:func:`~plandag.executors.data.quote_data`: a large result is cut to its first and last
  ``max_chars // 2`` characters, and the block states its whole size in bytes and its
  SHA-256);
* the failed steps with their error type, message, reason and detail (quoted as data);
* the pruned steps (never ran because a step they need failed) and those still running;
* the current output, and the joiner's reason when the joiner asked for the replan (both
  quoted as data: the reason is a model's words about tool results).

The model answers with a *patch* in the wire format (``{"g", "s": [new steps], "o"}``):
new steps for the affected subgraph only, with ids above every id the run has used (ids are
never reused), and optionally a new output. The patch is compiled against the run as it
stands (:meth:`~plandag.scheduler.session.RunSession.add` with ``supersedes`` = the failed,
pruned and cancelled steps the model was shown, so they gain ``superseded_by``); completed
steps keep their ids and results and never run again; steps still running are untouched.
A patch that does not compile is not applied: its diagnostics are returned, and the next
call (a repair, which counts against the caller's replan caps) carries them back as data.

The patch's schema is the planner's (:func:`~plandag.planner.schema.plan_json_schema`); a
provider that refuses it as too large (:func:`~plandag.planner.planner.schema_too_large`)
gets the plan's subset of tools, those its steps call, for this and later replans.

Tool outputs are data: nothing a tool returned is shown outside a data block, and whatever
the model proposes passes the same compiler and write boundary as the first plan (a step
writing outside the boundary does not compile, so it never runs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal

import anyio

from plandag.brakes.budget import Budget
from plandag.brakes.clock import Clock, SystemClock
from plandag.brakes.retry import RetryPolicy
from plandag.compiler import Diagnostic
from plandag.compiler.patch import PatchBase, check_output, compile_patch
from plandag.dag.diagnostics import DIAGNOSTIC_CODES
from plandag.dag.plan import Plan, Step
from plandag.errors import PlanError, StepError
from plandag.executors.data import quote_data
from plandag.models import (
    DEFAULT_PRICES,
    CallRecord,
    ChatMessage,
    LLMClient,
    LLMRequest,
    PriceTable,
    call_with_retries,
)
from plandag.models.calls import deadline_from
from plandag.planner.planner import schema_too_large
from plandag.planner.prompt import repair_message, system_prompt
from plandag.planner.schema import plan_json_schema
from plandag.planner.triggers import ReplanStrategy
from plandag.planner.wire import WIRE_SCHEMA_NAME, to_wire, wire_to_document
from plandag.scheduler.session import RunSession, SessionState
from plandag.tools.boundary import WriteBoundary
from plandag.tools.registry import Registry

__all__ = [
    "DEFAULT_REPLAN_MAX_CHARS",
    "DEFAULT_REPLAN_MAX_TOKENS",
    "REPLAN_RULES",
    "TOTAL_REPLAN_RULES",
    "ReplanRecord",
    "ReplanTrigger",
    "Replanner",
    "replan_prompt",
]

DEFAULT_REPLAN_MAX_TOKENS = 4096
"""Output tokens a patch may take."""

DEFAULT_REPLAN_MAX_CHARS = 2000
"""Characters of each step result shown to the replanner (first and last halves kept)."""

ReplanTrigger = Literal["failure", "joiner", "instruction", "resume"]
"""What asked for a replan: failed steps, the joiner, a person's instruction mid-run, or a
person who resumed an escalated run."""

REPLAN_RULES = """\
Write a patch, not a new plan: answer in the wire format with only the NEW steps that \
replace the failed, pruned and cancelled steps listed above (the affected part of the \
plan), and nothing else.
- Completed steps keep their ids and results and never run again: do not repeat them; use \
their results through references (<step_N_result>, <step_N_result.field>).
- Every new step id must be greater than {max_id}; ids are never reused.
- A new step may depend on completed steps, on steps still running, and on other new \
steps; never on a failed, pruned or cancelled step (its result will never exist).
- Try a different way around the failure (another tool, other arguments); repeating the \
failed call as it was will fail the same way.
- "o": write the new output when the current one uses a step being replaced; leave "o" out \
to keep the current output.
- Put "g" to the task's goal. Do not declare params ("p")."""

TOTAL_REPLAN_RULES = """\
Plan again from the goal and the current state: the steps not started were dropped. Answer \
in the wire format with the NEW steps of all the work still needed to reach the goal (the \
task above), and nothing else.
- Completed steps keep their ids and results and never run again: do not repeat them; use \
their results through references (<step_N_result>, <step_N_result.field>).
- Every new step id must be greater than {max_id}; ids are never reused.
- A new step may depend on completed steps, on steps still running, and on other new \
steps; never on a failed, pruned, dropped or cancelled step (its result will never exist).
- Never use a dependency listed as down.
- "o": write the output of the new plan (it is required: the old one may name dropped \
steps).
- Put "g" to the task's goal. Do not declare params ("p")."""


@dataclasses.dataclass(frozen=True, slots=True)
class ReplanRecord:
    """One call to the replanner and what became of its patch.

    Attributes:
        number: 1 for the run's first replan, 2 for the next (repairs of a patch that did
            not compile are replans too).
        trigger: ``failure`` (steps failed), ``joiner`` (the joiner asked for it),
            ``instruction`` (a person's instruction mid-run) or ``resume`` (a person
            resumed an escalated run, with or without an instruction).
        reason: why, in words: the failures, the joiner's reason, or the person's
            instruction.
        replaced: the ended steps the patch was to replace (failed, pruned, cancelled).
        new_ids: the ids the patch added (empty when it was not applied).
        applied: the patch compiled and its steps joined the run.
        text: the model's answer (wire JSON).
        output_tokens: output tokens of the call.
        diagnostics: the errors of a patch that did not compile, or the warnings of one
            that did.
        output_changed: the patch replaced the run's output.
        started_at, ended_at: wall-clock times of the replan (the call and the patch's
            compile), seconds since the epoch (the run's clock); None when unknown.
        strategy: ``partial`` (the affected part replaced) or ``total`` (the steps not
            started dropped, planned again from the goal;
            :mod:`plandag.planner.triggers`).
        strategy_reason: why that strategy, in words.
        instructions: the instructions a person gave during the run that the request
            carried, verbatim, oldest first.
        withdrawn: the steps not started that were dropped for this replan (``skipped``,
            reason ``replanned``).
    """

    number: int
    trigger: ReplanTrigger
    reason: str
    replaced: tuple[int, ...]
    new_ids: tuple[int, ...]
    applied: bool
    text: str
    output_tokens: int
    diagnostics: tuple[Diagnostic, ...]
    output_changed: bool = False
    started_at: float | None = None
    ended_at: float | None = None
    strategy: ReplanStrategy = "partial"
    strategy_reason: str = ""
    instructions: tuple[str, ...] = ()
    withdrawn: tuple[int, ...] = ()

    def to_json_dict(self) -> dict[str, Any]:
        """The record as JSON-safe data (``plandag run --json``, ``"replans"``)."""
        return {
            "number": self.number,
            "trigger": self.trigger,
            "reason": self.reason,
            "replaced": list(self.replaced),
            "new_ids": list(self.new_ids),
            "applied": self.applied,
            "output_tokens": self.output_tokens,
            "output_changed": self.output_changed,
            "diagnostics": [diagnostic.as_dict() for diagnostic in self.diagnostics],
            "strategy": self.strategy,
            "strategy_reason": self.strategy_reason,
            "instructions": list(self.instructions),
            "withdrawn": list(self.withdrawn),
        }


def _state_of(session: RunSession, state: SessionState, step_id: int) -> str:
    if step_id in state.failed:
        return "failed"
    if step_id in state.superseded:
        record = session.records[step_id]
        replaced_by = ", ".join(map(str, record.superseded_by or ()))
        return f"{record.status}, superseded by {replaced_by}"
    for name in ("succeeded", "pruned", "cancelled", "held", "pending", "running"):
        if step_id in getattr(state, name):
            if name == "pruned" and session.records[step_id].reason == "replanned":
                return "dropped (not started; replanned)"
            return name
    return session.records[step_id].status


def failure_summary(session: RunSession, state: SessionState) -> str:
    """The failures of ``state`` in one line: ``step 3 failed (tool_error: ...); ...``.

    Args:
        session: the run.
        state: its state.

    Returns:
        The summary, or ``"no step failed"``.
    """
    parts = []
    for step_id, failure in state.failed.items():
        detail = failure.detail or (failure.error.message if failure.error else "")
        parts.append(f"step {step_id} failed ({failure.reason or 'no reason'}: {detail})")
    for step_id in state.cancelled:
        parts.append(f"step {step_id} cancelled ({session.records[step_id].reason})")
    return "; ".join(parts) or "no step failed"


def replan_prompt(
    goal: str,
    session: RunSession,
    state: SessionState,
    *,
    joiner_reason: str | None = None,
    max_chars: int = DEFAULT_REPLAN_MAX_CHARS,
    strategy: ReplanStrategy = "partial",
    instructions: Sequence[str] = (),
    original_goal: str | None = None,
    instruction: str | None = None,
    earlier: Sequence[Mapping[str, Any]] = (),
    used_ids: int = 0,
    registry: Registry | None = None,
) -> str:
    """The replanner's user message (see the module docstring for what it holds).

    Args:
        goal: the task, in the user's words (trusted).
        session: the open run (its steps, records and output).
        state: the run's state (:meth:`RunSession.settled` or :meth:`RunSession.state`).
        joiner_reason: the joiner's reason when it asked for the replan, else None.
        max_chars: the most characters of each result or error shown.
        strategy: ``partial`` (write a patch of the affected part) or ``total`` (plan
            again from the goal; :data:`TOTAL_REPLAN_RULES`).
        instructions: what a person told the run while it ran, verbatim, oldest first
            (trusted: it comes from the user, as the task does), shown outside data blocks.
        original_goal: the task as first given, when a person's instruction replaced it
            with ``goal``; else None.
        instruction: a person's instruction for this replan, given when they resumed an
            escalated run (trusted, like the task: shown verbatim, outside any data
            block), else None.
        earlier: the steps of earlier segments of the run that did not succeed (a resumed
            run: ``{"id", "tool", "status", "reason", "detail", "error"}`` each), shown
            as data; they are no part of the run any more.
        used_ids: the largest step id earlier segments of the run used (new ids go above
            it as well); 0 when none.
        registry: the run's tools and checks: the steps are listed as the model writes
            them (JSON text where the schema asks for it); None lists arguments as they are.

    Returns:
        The text. Everything a tool produced is inside a data block.
    """
    steps = session.steps
    max_id = max(max(steps, default=0), used_ids)
    plan = Plan(goal=goal, steps=[steps[key].step for key in sorted(steps)])
    wire_steps = to_wire(plan, registry)["s"]
    listing = [{"state": _state_of(session, state, item["i"]), **item} for item in wire_steps]
    parts = [f"Task:\n{goal.strip()}"]
    if original_goal is not None and original_goal.strip() != goal.strip():
        parts.append(
            "A person changed the task while the run was running; the task above replaces "
            f"this one:\n{original_goal.strip()}"
        )
    if instructions:
        parts.append(
            "Instructions a person gave while the run was running (from the user, like the "
            "task: follow them; the last one is the newest):\n"
            + "\n".join(f"- {text}" for text in instructions)
        )
    parts += [
        "Every step of the run so far, with its state (wire format):\n"
        + quote_data("plan steps", listing, max_chars=max(max_chars, 64_000)),
    ]
    records = session.records
    completed = [
        f"step {step_id} ({records[step_id].tool}) succeeded:\n"
        + quote_data(f"step {step_id} result", records[step_id].result, max_chars)
        for step_id in state.succeeded
    ]
    parts.append(
        "Completed steps and their results:\n" + ("\n".join(completed) if completed else "none")
    )
    failed = []
    for step_id, failure in state.failed.items():
        error = failure.error
        failed.append(
            f"step {step_id} ({records[step_id].tool}) failed:\n"
            + quote_data(
                f"step {step_id} error",
                {
                    "type": error.type if error is not None else None,
                    "message": error.message if error is not None else None,
                    "reason": failure.reason,
                    "detail": failure.detail,
                },
                max_chars,
            )
        )
    for step_id in state.cancelled:
        record = records[step_id]
        failed.append(
            f"step {step_id} ({record.tool}) was cancelled while running:\n"
            + quote_data(
                f"step {step_id} error",
                {"reason": record.reason, "detail": record.detail},
                max_chars,
            )
        )
    parts.append("Failed steps:\n" + ("\n".join(failed) if failed else "none"))
    pruned = [
        f"step {step_id} ({records[step_id].tool}): {records[step_id].detail or 'never ran'}"
        for step_id in state.pruned
        if records[step_id].reason != "replanned"
    ]
    dropped = [step_id for step_id in state.pruned if records[step_id].reason == "replanned"]
    if dropped:
        parts.append(
            "Dropped steps (not started; they are replanned now, replace them): "
            + ", ".join(map(str, dropped))
        )
    parts.append(
        "Pruned steps (never ran, because a step they need did not succeed):\n"
        + ("\n".join(pruned) if pruned else "none")
    )
    waiting = sorted({*state.running, *state.pending, *state.held})
    if waiting:
        parts.append(
            "Steps still running or waiting (an independent branch; leave them be): "
            + ", ".join(map(str, waiting))
        )
    if state.down:
        parts.append(
            "Dependencies down (the circuit breaker took them out of this run: a step that "
            "needs one fails at once without being tried; the new steps must not use them):\n"
            + "\n".join(
                f"- {down.dependency} (steps {', '.join(map(str, down.failed_steps))} failed "
                "in a row):\n"
                + quote_data(f"{down.dependency} last failure", down.detail, max_chars)
                for down in state.down
            )
        )
    output = session.output
    parts.append(
        "The current output:\n"
        + (quote_data("current output", output, max_chars) if output is not None else "none")
    )
    if joiner_reason is not None:
        parts.append(
            "Every step succeeded, but the joiner judged that the results do not answer the "
            "task, and asked for a replan:\n" + quote_data("joiner reason", joiner_reason)
        )
    if earlier:
        parts.append(
            "The run was handed to a person after these steps did not succeed; they are no "
            "part of the run any more (write new steps for the remaining work instead):\n"
            + quote_data("earlier failures", list(earlier), max_chars)
        )
    if instruction is not None:
        parts.append(
            "A person resumed the run with this instruction; follow it in this patch:\n"
            + instruction
        )
    rules = TOTAL_REPLAN_RULES if strategy == "total" else REPLAN_RULES
    parts.append(rules.format(max_id=max_id))
    return "\n\n".join(parts) + "\n"


def _diagnostic(code: str, step_id: int | None, message: str, hint: str = "") -> Diagnostic:
    return Diagnostic(code, DIAGNOSTIC_CODES[code], step_id, message, hint)


class Replanner:
    """Asks the model for a patch of the failed part of a run and applies it.

    Args:
        client: the model provider.
        model: the model name.
        registry: the run's tools and check kinds (listed in the system prompt, the same
            as the planner's).
        prices: the price table for call records and the budget.
        budget: the budget calls are reserved on; None: the session's
            (:attr:`RunSession.budget`), so the calls count against the run's cost caps.
        retry: how transient call failures are retried (default ``RetryPolicy()``).
        clock: where retry delays are slept; default the system clock.
        max_tokens: output tokens a patch may take (>= 1).
        max_chars: characters of each result shown (>= 2).
        temperature: sampling temperature where the provider supports it (default 0).
        read_only: the run allows only tools without effects (for the dry-run compile
            that reports every diagnostic of a patch at once; the session checks again).
        write_boundary: the run's write boundary, likewise.
        http_allow: the configured HTTP allow-list (host globs), likewise.

    A patch written after the model was shown outside content (a result, or an error, of a
    step whose result is tainted: :attr:`RunSession.outside_content_seen`) has tainted
    literal args (ARCHITECTURE.md, "Untrusted content"): an ``egress`` step in it needs a
    person's approval before it runs, and a read-only run refuses it (``tainted_egress``).
        used_ids: the largest step id earlier segments of the run used (a resumed run
            whose session holds only its completed steps): new ids must be above it too.

    Raises:
        ValueError: ``max_tokens`` < 1 or ``max_chars`` < 2.
    """

    def __init__(
        self,
        client: LLMClient,
        model: str,
        registry: Registry,
        *,
        prices: PriceTable = DEFAULT_PRICES,
        budget: Budget | None = None,
        retry: RetryPolicy | None = None,
        clock: Clock | None = None,
        max_tokens: int = DEFAULT_REPLAN_MAX_TOKENS,
        max_chars: int = DEFAULT_REPLAN_MAX_CHARS,
        temperature: float = 0.0,
        read_only: bool = False,
        write_boundary: WriteBoundary | None = None,
        http_allow: Sequence[str] | None = None,
        used_ids: int = 0,
    ) -> None:
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, not {max_tokens}")
        if max_chars < 2:
            raise ValueError(f"max_chars must be >= 2, not {max_chars}")
        self.client = client
        self.model = model
        self.registry = registry
        self.prices = prices
        self.budget = budget
        self.retry = retry if retry is not None else RetryPolicy()
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.max_tokens = max_tokens
        self.max_chars = max_chars
        self.temperature = temperature
        self.read_only = read_only
        self.write_boundary = write_boundary
        self.http_allow = tuple(http_allow) if http_allow is not None else None
        self.used_ids = used_ids
        self.tool_subset: tuple[str, ...] | None = None

    @property
    def json_schema(self) -> dict[str, Any]:
        """The structured-output schema of a patch: the planner's
        (:func:`~plandag.planner.schema.plan_json_schema`), of :attr:`tool_subset` once a
        provider refused the whole union as too large."""
        return plan_json_schema(self.registry, tools=self.tool_subset)

    def request_for(self, prompt: str, previous: ReplanRecord | None = None) -> LLMRequest:
        """The model request for a replan ``prompt``: the plan writer's system prompt and
        wire schema; after a patch that did not compile, the model's answer and the full
        diagnostics follow (so the model repairs its own patch).

        Args:
            prompt: the replan prompt (goal, steps and their states, quoted results).
            previous: the last replan, when its patch was not applied.

        Returns:
            The :class:`LLMRequest` to send.
        """
        messages: list[ChatMessage] = [{"role": "user", "content": prompt}]
        if previous is not None and not previous.applied:
            messages.append({"role": "assistant", "content": previous.text})
            messages.append(
                {"role": "user", "content": repair_message(previous.diagnostics, previous.number)}
            )
        return LLMRequest(
            model=self.model,
            messages=tuple(messages),
            max_tokens=self.max_tokens,
            system=system_prompt(self.registry),
            json_schema=self.json_schema,
            schema_name=WIRE_SCHEMA_NAME,
            temperature=self.temperature,
        )

    async def replan(
        self,
        session: RunSession,
        goal: str,
        state: SessionState,
        *,
        number: int,
        trigger: ReplanTrigger = "failure",
        joiner_reason: str | None = None,
        previous: ReplanRecord | None = None,
        records: list[CallRecord] | None = None,
        strategy: ReplanStrategy = "partial",
        strategy_reason: str = "",
        instructions: Sequence[str] = (),
        withdrawn: Sequence[int] = (),
        original_goal: str | None = None,
        reason: str | None = None,
        instruction: str | None = None,
        earlier: Sequence[Mapping[str, Any]] = (),
    ) -> ReplanRecord:
        """One replan: ask for a patch of ``state``'s failed part; apply it if it compiles.

        Args:
            session: the open run; its other branches keep running meanwhile.
            goal: the task, in the user's words.
            state: the run's state the patch answers (its failed, pruned and cancelled
                steps are the ones replaced).
            number: this replan's number in the run (1, 2...).
            trigger: ``failure``, ``joiner``, ``instruction`` or ``resume``.
            joiner_reason: the joiner's reason (with ``trigger="joiner"``).
            previous: the last replan, when its patch did not compile: its answer and
                diagnostics go back to the model (a repair).
            records: a list every call attempt's :class:`CallRecord` is appended to.
            strategy, strategy_reason: ``partial`` or ``total``, and why
                (:func:`plandag.planner.triggers.choose_strategy`); recorded, and the
                prompt's rules follow the strategy.
            instructions: every instruction a person gave during the run, verbatim.
            withdrawn: the steps not started that were dropped for this replan.
            original_goal: the task as first given, when an instruction replaced it.
            reason: why, in words (default: the failures, or the joiner's reason).
            instruction, earlier: with ``trigger="resume"``: the person's instruction
                (verbatim) and the earlier segments' failed steps (see
                :func:`replan_prompt`).

        Returns:
            The :class:`ReplanRecord` (``applied`` False with the diagnostics when the
            patch did not compile; nothing was added then).

        Raises:
            TimeoutError: the session's wall-clock cap passed during the call.
            TruncatedResponseError: the answer was cut at ``max_tokens``.
            StepError: the call failed past its retries (``BudgetRefusedError`` when the
                budget could not hold its estimate).
        """
        started_at = self.clock.time()
        if reason is None:
            if trigger == "joiner" and joiner_reason is not None:
                reason = joiner_reason
            elif trigger == "resume":
                reason = (
                    f"resumed by a person: {instruction}"
                    if instruction is not None
                    else "resumed by a person"
                )
            else:
                reason = failure_summary(session, state)
        prompt = replan_prompt(
            goal,
            session,
            state,
            joiner_reason=joiner_reason,
            max_chars=self.max_chars,
            strategy=strategy,
            instructions=instructions,
            original_goal=original_goal,
            instruction=instruction,
            earlier=earlier,
            used_ids=self.used_ids,
            registry=self.registry,
        )
        while True:
            request = self.request_for(prompt, previous)
            try:
                with anyio.fail_after(session.remaining_s):
                    response = await call_with_retries(
                        self.client,
                        request,
                        self.retry,
                        self.clock,
                        self.budget if self.budget is not None else session.budget,
                        prices=self.prices,
                        records=records,
                        deadline=deadline_from(self.clock, session.remaining_s),
                    )
                break
            except StepError as error:
                if self.tool_subset is not None or not schema_too_large(error):
                    raise
                # The plan's subset: the tools its steps call.
                used = {item.step.tool for item in session.steps.values()}
                self.tool_subset = tuple(sorted(used & self.registry.tools.keys())) or tuple(
                    sorted(self.registry.tools)
                )
        replaced = state.needs_replan
        applied, new_ids, diagnostics, output_changed = self.apply(session, response.text, replaced)
        return ReplanRecord(
            number=number,
            trigger=trigger,
            reason=reason,
            replaced=replaced,
            new_ids=new_ids,
            applied=applied,
            text=response.text,
            output_tokens=response.usage.output_tokens,
            diagnostics=diagnostics,
            output_changed=output_changed,
            started_at=started_at,
            ended_at=self.clock.time(),
            strategy=strategy,
            strategy_reason=strategy_reason,
            instructions=tuple(instructions),
            withdrawn=tuple(withdrawn),
        )

    def apply(
        self,
        session: RunSession,
        text: str,
        replaced: Collection[int],
        *,
        tainted_author: bool | None = None,
    ) -> tuple[bool, tuple[int, ...], tuple[Diagnostic, ...], bool]:
        """Compile a patch (wire JSON) against the run and add it, or report why not.

        Checks, all reported at once: the wire format; at least one step when steps are to
        be replaced; every new id above the run's largest; the new output (or the current
        one, when the patch keeps it) against the run with the patch; then the patch
        itself against the run (:meth:`RunSession.add`, which checks tools, arguments,
        references, dependencies, cycles and the write boundary).

        Args:
            session: the open run.
            text: the model's answer.
            replaced: the ended steps the patch replaces (they gain ``superseded_by``).
            tainted_author: the patch was written after reading outside content (its
                literal args are tainted); None: as :attr:`RunSession.outside_content_seen`
                says for this run.

        Returns:
            ``(applied, new_ids, diagnostics, output_changed)``: nothing was added when
            ``applied`` is False.
        """
        text_problems: list[Diagnostic] = []
        try:
            document = wire_to_document(text, self.registry, json_text_problems=text_problems)
        except PlanError as error:
            return False, (), tuple(error.diagnostics), False
        steps: list[dict[str, Any]] = document["steps"]
        problems: list[Diagnostic] = list(text_problems)
        max_id = max(max(session.steps, default=0), self.used_ids)
        if not steps and replaced:
            problems.append(
                _diagnostic(
                    "invalid_schema",
                    None,
                    f"the patch has no steps, and steps {', '.join(map(str, replaced))} need "
                    "replacing",
                    'write the new steps in "s"',
                )
            )
        for item in steps:
            step_id = item.get("id") if isinstance(item, Mapping) else None
            if isinstance(step_id, int) and 0 < step_id <= max_id and step_id not in session.steps:
                problems.append(
                    _diagnostic(
                        "duplicate_step_id",
                        step_id,
                        f"new step ids must be greater than {max_id}, the largest id the run "
                        "has used",
                        f"use ids from {max_id + 1} on",
                    )
                )
        base = _base(session)
        if tainted_author is None:
            tainted_author = session.outside_content_seen
        try:  # a dry run, for every diagnostic at once; the session compiles it again
            compile_patch(
                base,
                steps,
                self.registry,
                read_only=self.read_only,
                write_boundary=self.write_boundary,
                replaces=replaced,
                http_allow=self.http_allow,
                tainted_author=tainted_author,
                max_steps=session.max_steps,
            )
        except PlanError as error:
            problems.extend(error.diagnostics)
        output_changed = "output" in document
        output = document["output"] if output_changed else session.output
        problems.extend(_output_problems(base, steps, output))
        if problems:
            return False, (), tuple(problems), False
        try:
            warnings = session.add(
                steps,
                supersedes=tuple(replaced) if steps else (),
                tainted_author=tainted_author,
            )
        except PlanError as error:
            return False, (), tuple(error.diagnostics), False
        if output_changed:
            session.set_output(output)
        return True, tuple(item["id"] for item in steps), warnings, output_changed


def _base(session: RunSession) -> PatchBase:
    """The run as a patch is compiled against (a snapshot)."""
    return PatchBase(
        session.plan,
        {key: item.step for key, item in session.steps.items()},
        {
            key: record.status
            for key, record in session.records.items()
            if record.status in ("failed", "skipped", "cancelled")
        },
        {
            key: list(record.superseded_by)
            for key, record in session.records.items()
            if record.superseded_by is not None
        },
        frozenset(key for key, item in session.steps.items() if item.tainted_output),
    )


def _output_problems(
    base: PatchBase, steps: Sequence[Mapping[str, Any]], output: Any
) -> list[Diagnostic]:
    """The errors of ``output`` against the run with the patch's steps added."""
    if output is None:
        return []
    known: dict[int, Step] = dict(base.steps)
    for item in steps:
        try:
            step = Step.model_validate(item)
        except ValueError:
            continue  # the patch's own compile reports it
        known.setdefault(step.id, step)
    try:
        check_output(dataclasses.replace(base, steps=known), output)
    except PlanError as error:
        return list(error.diagnostics)
    return []
