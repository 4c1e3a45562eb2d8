"""Streaming dispatch: steps start while the model is still writing the plan
(ARCHITECTURE.md, "Execution", "Streaming").

:class:`StreamingPlanner` asks the model for the plan exactly as
:class:`~plandag.planner.planner.Planner` does (same prompt, same wire schema, same repairs),
but streams the answer. :class:`WireStepScanner` reads the streamed wire JSON one delta at a
time and hands over each step of the ``s`` list as soon as its object is complete;
:class:`StepDispatcher` compiles it against the open run at once
(:meth:`~plandag.scheduler.session.RunSession.add`, i.e.
:func:`~plandag.compiler.patch.compile_patch`), so a step whose parents have succeeded starts
before the rest of the plan has arrived.

When is a step complete? The architecture note says "once the next one has begun or the
list has closed", the rule a partial-JSON parser needs: ``jiter.from_json(text,
partial_mode="trailing-strings")`` (jiter 0.19, installed with the SDK) returns the same
value for ``[{"i":1,"d":[]}`` and ``[{"i":1,"d":[]}]``, so it cannot tell a closed step from
one still being written. The scanner here tracks strings, escapes and nesting itself, so it
sees the step's closing brace, which is exact and never later than the next step's opening
brace: a closed JSON object can no longer change. Each delta is scanned once (linear in the
plan's size, no re-parse of the whole text per delta). The typed wire format nests a step's
arguments (and its checks' arguments) as objects inside it; the scanner counts that
nesting, so a step is still handed over at its own closing brace. A maintained partial
parser with the rule "complete once the next one begins or the array closes" would hand
each step over only when the model starts writing the next one (the last one when the
array closes), and re-parse the text on each delta, so the scanner stays.

Order and references: a step is added once every step it names (``depends_on`` and
references in its args and checks) is already in the run; until then it waits in a buffer
(a model may write a step before one it depends on). The buffer is flushed when the plan
ends, so a reference to a step that never arrives is reported by the compiler.

Steps whose upstream already failed: the run does not wait for the plan, so a step may
arrive after a step it needs has failed (or been pruned). It is still part of a valid plan:
it is added with ``prune_on_ended_parents`` and ends ``skipped`` at once (``upstream_failed``,
``"upstream N failed"``), and the plan's output may name it (``set_output(...,
allow_ended=True)``). The plan is accepted; the failure and what it pruned are left to the
replanner once the plan is complete, exactly as if the whole plan had arrived before the
failure. Only a plan that does not compile goes back to the model.

Effects: the run is opened with ``hold_effects`` (the session's default), so only steps
without effects start early; :meth:`StreamingPlanner.plan_into` releases them once the whole
plan has arrived and compiled as a whole (:func:`~plandag.planner.wire.compile_wire`).
Approval, where required, comes before that release.

A stream that breaks off mid-plan (an ``overloaded_error`` event, a dropped connection) and
is retried is discarded whole: the steps it had added leave the run (running ones are
cancelled, finished ones' results dropped; steps with effects never started, they wait for
the whole plan), and the retried attempt's plan runs as if it were the first — nothing of
the broken attempt is reused or left for the new plan to repeat or skip.

A plan cut off by ``max_tokens`` is an error, never a shorter plan: the
:class:`~plandag.models.TruncatedResponseError` propagates (the agent then ends the
run: steps already started end cancelled, the others skipped). A plan that does not compile
goes back to the model with every diagnostic, as in the Planner; steps already accepted may
be running, so the repair must keep them unchanged (a changed step with an accepted id is a
``duplicate_step_id`` error).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import anyio

from plandag.compiler import Diagnostic
from plandag.dag.diagnostics import DIAGNOSTIC_CODES
from plandag.dag.references import find_references
from plandag.errors import PlanError
from plandag.models import CallRecord, ChatMessage
from plandag.models.calls import deadline_from
from plandag.planner.planner import PlanAttempt, Planner, PlannerGaveUp, PlanOutcome
from plandag.planner.prompt import repair_message, user_prompt
from plandag.planner.wire import compile_wire, wire_to_document
from plandag.scheduler.session import RunSession
from plandag.tools.registry import Registry

__all__ = ["StepDispatcher", "StreamingPlanner", "WireStepScanner"]


class WireStepScanner:
    """Finds the complete steps of a wire plan (``{"g", "p", "s": [...], "o"}``) in a
    stream of text deltas.

    :meth:`feed` takes the next delta and returns the steps whose JSON object closed in it,
    decoded (dicts in the wire format, in stream order). Objects of the top-level ``s`` array
    only; anything else is skipped. Text that is not JSON yields nothing here (the whole
    answer is parsed at the end, where its error is reported).

    Attributes:
        steps_closed: the ``s`` array has closed.
        text: everything fed so far.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget everything (a retried stream starts from its first character again)."""
        self._parts: list[str] = []
        self._step: list[str] | None = None
        self._depth = 0
        self._in_string = False
        self._escape = False
        self._string: list[str] = []
        self._last_string: str | None = None
        self._key: str | None = None
        self._in_steps = False
        self.steps_closed = False

    @property
    def text(self) -> str:
        """The text fed so far."""
        return "".join(self._parts)

    def feed(self, delta: str) -> list[Any]:
        """Scan ``delta``; return the steps completed in it.

        Args:
            delta: the next piece of the model's text.

        Returns:
            The decoded step objects (usually dicts) whose closing brace is in ``delta``.
        """
        self._parts.append(delta)
        found: list[Any] = []
        step = self._step
        for char in delta:
            if step is not None:
                step.append(char)
            if self._in_string:
                if self._depth == 1:
                    self._string.append(char)
                if self._escape:
                    self._escape = False
                elif char == "\\":
                    self._escape = True
                elif char == '"':
                    self._in_string = False
                    if self._depth == 1:
                        self._last_string = "".join(self._string[:-1])
                continue
            if char == '"':
                self._in_string = True
                self._string = []
            elif char == ":" and self._depth == 1:
                self._key = self._decode_key(self._last_string)
            elif char in "{[":
                self._depth += 1
                if self._depth == 2 and char == "[" and self._key == "s" and not self.steps_closed:
                    self._in_steps = True
                elif self._depth == 3 and char == "{" and self._in_steps:
                    step = self._step = ["{"]
            elif char in "}]":
                if self._depth == 3 and char == "}" and step is not None:
                    found.append(self._decode_step("".join(step)))
                    step = self._step = None
                elif self._depth == 2 and char == "]" and self._in_steps:
                    self._in_steps = False
                    self.steps_closed = True
                self._depth -= 1
        return [item for item in found if item is not None]

    @staticmethod
    def _decode_key(raw: str | None) -> str | None:
        if raw is None:
            return None
        try:
            key = json.loads(f'"{raw}"')
        except ValueError:
            return None
        return key if isinstance(key, str) else None

    @staticmethod
    def _decode_step(text: str) -> Any:
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            return None


def _referenced_ids(step: Mapping[str, Any]) -> set[int]:
    """Every step id a verbose step document names: ``depends_on`` and references."""
    ids: set[int] = set()
    depends_on = step.get("depends_on")
    if isinstance(depends_on, list):
        ids.update(item for item in depends_on if isinstance(item, int) and item > 0)
    for field in ("args", "check"):
        for _, reference in find_references(step.get(field)):
            if reference.step_id is not None:
                ids.add(reference.step_id)
    return ids


def _diagnostic(code: str, step_id: int | None, message: str, hint: str = "") -> Diagnostic:
    return Diagnostic(code, DIAGNOSTIC_CODES[code], step_id, message, hint)


class StepDispatcher:
    """Adds streamed steps to an open run, each as soon as the steps it names are there.

    Args:
        session: the open run (opened with ``hold_effects=True``, so steps with effects
            wait for the whole plan).
        accepted: the verbose step documents already added to ``session`` by earlier
            attempts, by id (shared and updated: a repair must keep them unchanged).
        registry: the run's tools and checks, for reading the steps' arguments
            (:func:`~plandag.planner.wire.wire_to_document`), or None.

    Attributes:
        diagnostics: the errors of steps that could not be added (wire problems, compile
            errors, a changed accepted step), in order.
        added: ids added by this dispatcher, in order.
    """

    def __init__(
        self,
        session: RunSession,
        accepted: dict[int, dict[str, Any]],
        registry: Registry | None = None,
    ) -> None:
        self.session = session
        self.accepted = accepted
        self.registry = registry
        self.scanner = WireStepScanner()
        self.diagnostics: list[Diagnostic] = []
        self.added: list[int] = []
        self._waiting: list[dict[str, Any]] = []
        self._seen: set[int] = set()

    async def feed(self, delta: str) -> None:
        """Take the next text delta (``call_with_retries(on_text=...)``)."""
        for raw in self.scanner.feed(delta):
            self._take(raw)

    async def restart(self) -> None:
        """The stream broke and is retried from its start
        (``call_with_retries(on_restart=...)``): the broken attempt is discarded whole.
        Every step it added leaves the run with its descendants (running ones are
        cancelled, results dropped: :meth:`RunSession.discard`), so the retried attempt's
        plan runs as if it were the first; steps accepted by earlier, complete attempts
        stay."""
        added, self.added = self.added, []
        for step_id in added:
            self.accepted.pop(step_id, None)
        await self.session.discard(added)
        self.scanner.reset()
        self._waiting.clear()
        self._seen.clear()
        self.diagnostics.clear()

    def _take(self, raw: Any) -> None:
        text_problems: list[Diagnostic] = []
        try:
            document = wire_to_document(
                {"g": "", "s": [raw]}, self.registry, json_text_problems=text_problems
            )["steps"][0]
        except PlanError as error:
            self.diagnostics.extend(error.diagnostics)
            return
        if text_problems:
            return  # not added; the whole plan's reading reports the JSON text
        step_id = document.get("id")
        if isinstance(step_id, int) and step_id in self._seen:
            return  # a duplicate id: the whole plan's compile reports it
        if isinstance(step_id, int):
            self._seen.add(step_id)
        if isinstance(step_id, int) and step_id in self.accepted:
            if self.accepted[step_id] != document:
                self.diagnostics.append(
                    _diagnostic(
                        "duplicate_step_id",
                        step_id,
                        f"step {step_id} was already accepted and may be running; this plan "
                        "changes it",
                        f"keep step {step_id} exactly as it was, or give the new step a new id",
                    )
                )
            return
        self._waiting.append(document)
        self._add_ready()

    def _add_ready(self) -> None:
        """Add every waiting step whose named steps are all in the run, until none is
        (a named step that already failed or was pruned counts: the new step is added
        pruned)."""
        progress = True
        while progress and self._waiting:
            progress = False
            for document in list(self._waiting):
                if not _referenced_ids(document) <= self.session.steps.keys():
                    continue
                self._waiting.remove(document)
                progress = True
                self._add([document])

    def _add(self, documents: Sequence[dict[str, Any]]) -> None:
        try:
            self.session.add(documents, prune_on_ended_parents=True)
        except PlanError as error:
            self.diagnostics.extend(error.diagnostics)
            return
        for document in documents:
            self.accepted[document["id"]] = document
            self.added.append(document["id"])

    def flush(self) -> None:
        """The plan has ended: add the steps still waiting, together (the compiler reports
        references to steps that never came, and cycles among them)."""
        if self._waiting:
            waiting, self._waiting = self._waiting, []
            self._add(waiting)


class StreamingPlanner:
    """The planner with streaming dispatch: the plan's steps join a run as they arrive.

    Args:
        planner: the :class:`~plandag.planner.planner.Planner` whose client, model,
            registry, prices, budget, retry policy, clock, ``max_tokens``, ``max_repairs``,
            read-only flag and write boundary are used (its prompt and schema too).
    """

    def __init__(self, planner: Planner) -> None:
        self.planner = planner

    async def plan_into(
        self,
        session: RunSession,
        goal: str,
        context: str = "",
        params: Mapping[str, Any] | None = None,
        *,
        records: list[CallRecord] | None = None,
    ) -> PlanOutcome:
        """Stream a plan for ``goal`` into ``session``; repair it until it compiles.

        Each complete step is added to ``session`` at once (steps without effects whose
        parents succeeded start then). When the whole plan has arrived and compiles, its
        output is set, the session sealed and effects released.

        Args:
            session: an open run, opened with ``hold_effects=True`` and the same params.
            goal: the task.
            context: trusted context from the user, or "".
            params: the run's param values by name, or None.
            records: a list every call attempt's record is also appended to as it is made,
                or None.

        Returns:
            A :class:`PlanOutcome`: the plan (as the model wrote it, compiled as a whole),
            every attempt, every call record.

        Raises:
            PlannerGaveUp: ``1 + max_repairs`` plans in a row did not compile.
            TruncatedResponseError: an answer was cut at ``max_tokens`` (steps already
                added stay in the session: the caller ends the run).
            StepError: a call failed past its retries (``BudgetRefusedError`` for the
                budget).
            TimeoutError: the session's wall-clock cap passed while the model wrote.
        """
        planner = self.planner
        messages: list[ChatMessage] = [
            {"role": "user", "content": user_prompt(goal, context, params)}
        ]
        calls: list[CallRecord] = records if records is not None else []
        first_call = len(calls)
        attempts: list[PlanAttempt] = []
        accepted: dict[int, dict[str, Any]] = {}
        for number in range(1, planner.max_repairs + 2):
            dispatcher = StepDispatcher(session, accepted, planner.registry)
            with anyio.fail_after(session.remaining_s):
                response = await planner.request_plan(
                    messages,
                    calls=calls,
                    deadline=deadline_from(planner.clock, session.remaining_s),
                    budget=planner.budget if planner.budget is not None else session.budget,
                    on_text=dispatcher.feed,
                    on_restart=dispatcher.restart,
                )
            dispatcher.flush()
            diagnostics: list[Diagnostic] = []
            compiled = None
            try:
                compiled = compile_wire(
                    response.text,
                    planner.registry,
                    params=params,
                    read_only=planner.read_only,
                    write_boundary=planner.write_boundary,
                    http_allow=planner.http_allow,
                    max_steps=planner.max_steps,
                )
            except PlanError as error:
                diagnostics.extend(error.diagnostics)
            if compiled is not None:
                diagnostics.extend(dispatcher.diagnostics)
                diagnostics.extend(_dropped(accepted, compiled.steps.keys()))
                if not diagnostics:
                    try:
                        session.set_output(compiled.plan.output, allow_ended=True)
                    except PlanError as error:
                        diagnostics.extend(error.diagnostics)
            else:
                known = {(d.code, d.step_id, d.message) for d in diagnostics}
                diagnostics.extend(
                    d for d in dispatcher.diagnostics if (d.code, d.step_id, d.message) not in known
                )
            if compiled is not None and not any(d.severity == "error" for d in diagnostics):
                attempts.append(
                    PlanAttempt(
                        number,
                        response.text,
                        response.usage.output_tokens,
                        tuple(compiled.diagnostics),
                        compiled=True,
                    )
                )
                session.seal()
                session.release_effects()
                return PlanOutcome(
                    compiled.plan, compiled, tuple(attempts), tuple(calls[first_call:])
                )
            attempts.append(
                PlanAttempt(
                    number,
                    response.text,
                    response.usage.output_tokens,
                    tuple(diagnostics),
                    compiled=False,
                )
            )
            messages.append({"role": "assistant", "content": response.text})
            messages.append(
                {"role": "user", "content": _repair_text(diagnostics, number, sorted(accepted))}
            )
        raise PlannerGaveUp(attempts[-1].diagnostics, attempts=attempts, records=calls[first_call:])


def _dropped(accepted: Mapping[int, Any], planned: Collection[int]) -> list[Diagnostic]:
    """Errors for accepted steps (added to the run, maybe running) a repaired plan left out."""
    return [
        _diagnostic(
            "unknown_dependency",
            step_id,
            f"step {step_id} was accepted and may already be running, but this plan leaves it out",
            f"keep step {step_id} exactly as it was",
        )
        for step_id in sorted(accepted.keys() - set(planned))
    ]


def _repair_text(diagnostics: Sequence[Diagnostic], attempt: int, accepted: Sequence[int]) -> str:
    text = repair_message(diagnostics, attempt)
    if accepted:
        ids = ", ".join(map(str, accepted))
        text += (
            f"\nSteps {ids} were accepted and may already be running: keep each of them "
            "exactly as it was (same id, tool, arguments, dependencies and checks)."
        )
    return text
