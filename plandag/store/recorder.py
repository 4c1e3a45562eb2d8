"""An observer that writes a run's step transitions into the run store.

Recorded inputs have their secrets masked (API keys, authorization headers:
:func:`plandag.trace.redact.scrub_secrets`); they are for reading, resume never needs them.
Steps without effects are written in batches; a step whose tool has effects is committed
as started before its tool runs (the runner calls observers synchronously, in order,
before it calls the tool: :mod:`plandag.scheduler.events`) and as ended as soon as it ends.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from plandag.compiler.compiled import CompiledStep
from plandag.errors import NotStartedError
from plandag.scheduler import events
from plandag.scheduler.result import RunResult, jsonable_result_text
from plandag.store.store import Store, store_json
from plandag.trace.redact import Redactor

__all__ = ["StoreRecorder"]

logger = logging.getLogger(__name__)

_Written = tuple[str, str | None, str | None, float | None, float | None, bool, int]
"""What a step's end wrote: state, reason, detail, end time, duration, whether an error was
written, attempts (0: not known)."""


class StoreRecorder:
    """Record every step event of one run segment into ``store``.

    Args:
        store: the run store.
        run_id: the run.
        steps: the run's compiled steps by id (a live mapping for a session whose steps
            grow: ``RunSession.steps``).
        params: the run's param values (to record each step's resolved inputs).
        segment: 0 for the first process to run it, one more per resume.
        completed: results of steps that succeeded in earlier segments.
        declared: the steps are recorded already (:meth:`Store.create_run_with_plan` with
            its ``steps``): they are not declared again.
        commit_at_end: True: at ``RunFinished`` the final rows are committed
            (:meth:`reconcile`); False: they are queued, for the caller's next write
            committed at once (the run's final state) to commit them with it, in one
            transaction and one sync of the disk.

    Attributes:
        at_end: called with the run's result at ``RunFinished``, after the final rows are
            committed or queued (the caller records the run's end there), or None.
    """

    def __init__(
        self,
        store: Store,
        run_id: str,
        steps: Mapping[int, CompiledStep],
        params: Mapping[str, Any],
        *,
        segment: int = 0,
        completed: Mapping[int, Any] | None = None,
        declared: bool = False,
        commit_at_end: bool = True,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.steps = steps
        self.params = params
        self.segment = segment
        self.results: dict[int, Any] = dict(completed or {})
        self.errors = 0
        """Writes that failed during the run (retried; see :meth:`__call__`)."""
        self.failure: Exception | None = None
        """The error of the final :meth:`reconcile` when it could not be written."""
        self._scrub = Redactor(personal=False)  # secrets only; the environment read once
        self.attempts: dict[int, int] = {}
        # per step, the final row queued for it and its successors (reconcile skips those
        # whose record says the same)
        self._written: dict[int, tuple[_Written, tuple[int, ...]]] = {}
        self.commit_at_end = commit_at_end
        self.at_end: Callable[[RunResult], None] | None = None
        if not declared:
            store.declare_steps(
                run_id,
                [(step_id, step.tool.name, step.tool.effects) for step_id, step in steps.items()],
                segment,
            )

    def _effects(self, step_id: int) -> bool:
        step = self.steps.get(step_id)
        return step is not None and step.tool.effects != "none"

    def _args(self, step_id: int) -> Any:
        step = self.steps.get(step_id)
        if step is None:
            return None
        if not step.args_have_references:
            return step.step.args
        try:
            return step.args_template(self.results.__getitem__, self.params)
        except Exception:  # a reference the runner will report on the step
            return None

    def _recorded_args(self, step_id: int) -> tuple[Any, bool]:
        """The step's inputs as recorded (secrets masked), and whether they are JSON data
        already (:func:`~plandag.scheduler.result.to_jsonable` would return them as they
        are): inputs the redactor keeps as they are are not copied, nor converted."""
        args = self._args(step_id)
        if args is None or (type(args) is dict and not args):
            return args, True
        if self._scrub.kept_as_is(args):
            return args, True
        return self._scrub(args), False

    def __call__(self, event: events.Event) -> None:
        """Write ``event`` (step events, heartbeats and stalls; others are ignored).

        A write that fails (the database locked past its busy timeout, a full disk) never
        loses what a resume relies on:

        * the start of a step with effects that cannot be committed vetoes the attempt
          (:class:`~plandag.scheduler.events.StartVeto` with a
          :class:`~plandag.errors.NotStartedError`: nothing ran, so the retry policy may try
          it again); the tool is never called unrecorded;
        * any other failed write stays queued and is retried with the next one, and at
          ``RunFinished`` every step's final state is written again from the complete
          result (:meth:`reconcile`); :attr:`failure` holds the error when even that
          failed, and the caller reports it.
        """
        kind = type(event)
        handler = self._handlers.get(kind)
        if handler is None:
            handler = self._handlers[kind] = _handler_for(kind)
        try:
            handler(self, event)
        except sqlite3.Error as error:
            if isinstance(event, events.StepStarted) and self._effects(event.step_id):
                raise events.StartVeto(
                    NotStartedError(
                        f"step {event.step_id}: the run store could not record that it starts "
                        f"({error}); its tool was not called"
                    )
                ) from error
            self.errors += 1
            if self.errors == 1:
                logger.warning(
                    "run %s: the run store could not record %s (%s); the writes are retried "
                    "and the final state is written again when the run ends",
                    self.run_id,
                    type(event).__name__,
                    error,
                )
        if handler is _ignored and isinstance(event, events.RunFinished):
            self.reconcile(event.result, commit=self.commit_at_end)
            if self.at_end is not None:
                self.at_end(event.result)

    def reconcile(
        self,
        result: RunResult,
        *,
        attempts: int = 5,
        pause_s: float = 0.5,
        commit: bool = True,
    ) -> None:
        """Commit what is queued, then write the final state of every step whose final
        state this recorder did not write already (every step when a write failed during
        the run) from ``result``, in one durable transaction: the steps' rows then match
        the run whatever writes failed during it. The tools of its succeeded steps are
        listed for the run in the same transaction (:meth:`Store.write_steps`, ``tools``).

        Args:
            result: the run's complete result.
            attempts: tries, ``pause_s`` seconds apart (blocking: the run is over).
            commit: False: queue those final states after what is queued, uncommitted
                (the caller's next write committed at once commits them, in order).

        Sets :attr:`failure` to the last error when every try failed.
        """
        rows = []
        written = {} if self.errors else self._written  # after a failed write: every step
        records = result.steps
        # listed for the run with its final rows: a tool is measured once it succeeded in
        # 5 runs (Store.tool_durations counts them there)
        tools = {
            record.tool
            for record in records.values()
            if record.status == "succeeded" and record.duration_s is not None
        }
        for step_id, record in records.items():
            superseded = record.superseded_by
            if written.get(step_id) == (
                (
                    record.status,
                    record.reason,
                    record.detail,
                    record.ended_at,
                    record.duration_s,
                    record.error is not None,
                    record.attempts,
                ),
                tuple(sorted(superseded)) if superseded else (),
            ):
                continue
            step = self.steps.get(step_id)
            inline, digest = (None, None)
            if record.status == "succeeded":
                converted, text = jsonable_result_text(record.result)
                inline, digest = self.store.value_columns(converted, jsonable=True, text=text)
            rows.append(
                (
                    step_id,
                    record.tool,
                    step.tool.effects if step is not None else "none",
                    record.status,
                    record.reason,
                    record.detail,
                    record.attempts,
                    record.started_at,
                    record.ended_at,
                    record.duration_s,
                    inline,
                    digest,
                    store_json(record.error.as_dict()) if record.error is not None else None,
                    json.dumps(record.superseded_by) if record.superseded_by else None,
                )
            )
        if not commit:
            if rows or tools:
                self.store.write_steps(self.run_id, rows, self.segment, durable=False, tools=tools)
            return
        for attempt in range(1, attempts + 1):
            try:
                self.store.flush()
                if rows or tools:
                    self.store.write_steps(self.run_id, rows, self.segment, tools=tools)
                self.failure = None
                return
            except sqlite3.Error as error:
                self.failure = error
                if attempt < attempts:
                    time.sleep(pause_s)

    def _ended(self, step_id: int, written: _Written) -> None:
        """Remember the final row queued for a step (what :meth:`reconcile` may skip)."""
        before = self._written.get(step_id)
        self._written[step_id] = (written, before[1] if before is not None else ())

    def _step_started(self, event: events.StepStarted) -> None:
        step_id = event.step_id
        attempt = event.attempt
        self.attempts[step_id] = attempt
        step = self.steps.get(step_id)
        if step is None:
            args_text, durable = None, False
        else:
            durable = step.tool.effects != "none"
            plain = step.step.args
            if not step.args_have_references and (
                plain is None or (type(plain) is dict and not plain)
            ):
                args_text = None if plain is None else "{}"
            else:
                args, jsonable = self._recorded_args(step_id)
                args_text = self.store.args_text(args, jsonable)
        self.store.queue_step_start(
            self.run_id, step_id, attempt, event.time, args_text, self.segment, durable
        )
        self._written.pop(step_id, None)

    def _step_succeeded(self, event: events.StepSucceeded) -> None:
        step_id = event.step_id
        result = event.result
        self.results[step_id] = result
        attempts = self.attempts.get(step_id, 0)
        if result is None:
            inline: str | None = "null"
            digest = None
        else:  # converted and encoded once, with the trace
            converted, text = jsonable_result_text(result)
            inline, digest = self.store.value_columns(converted, jsonable=True, text=text)
        at = event.time
        duration_s = event.duration_s
        self.store.queue_step_end(
            self.run_id,
            step_id,
            "succeeded",
            at,
            attempts,
            None,
            None,
            duration_s,
            inline,
            digest,
            None,
            self.segment,
            self._effects(step_id),
        )
        self._ended(step_id, ("succeeded", None, None, at, duration_s, False, attempts))

    def _step_failed(self, event: events.StepFailed) -> None:
        step_id = event.step_id
        attempts = self.attempts.get(step_id, 0)
        self.store.step_ended(
            self.run_id,
            step_id,
            "failed",
            event.time,
            attempt=attempts,
            reason=event.reason,
            error=event.error.as_dict() if event.error is not None else None,
            segment=self.segment,
            durable=self._effects(step_id),
        )
        error = event.error is not None
        self._ended(step_id, ("failed", event.reason, None, event.time, None, error, attempts))

    def _step_cancelled(self, event: events.StepCancelled) -> None:
        step_id = event.step_id
        attempts = self.attempts.get(step_id, 0)
        self.store.step_ended(
            self.run_id,
            step_id,
            "cancelled",
            event.time,
            attempt=attempts,
            reason=event.reason,
            segment=self.segment,
            durable=self._effects(step_id),
        )
        self._ended(step_id, ("cancelled", event.reason, None, event.time, None, False, attempts))

    def _step_skipped(self, event: events.StepSkipped) -> None:
        self.store.step_ended(
            self.run_id,
            event.step_id,
            "skipped",
            event.time,
            reason=event.reason,
            detail=event.detail,
            segment=self.segment,
            durable=False,
        )
        self._ended(
            event.step_id, ("skipped", event.reason, event.detail, event.time, None, False, 0)
        )

    def _steps_added(self, event: events.StepsAdded) -> None:
        self.store.declare_steps(
            self.run_id,
            [
                (step_id, self.steps[step_id].tool.name, self.steps[step_id].tool.effects)
                for step_id in event.step_ids
                if step_id in self.steps
            ],
            self.segment,
        )

    def _step_superseded(self, event: events.StepSuperseded) -> None:
        self.store.supersede(self.run_id, event.step_id, event.superseded_by)
        if event.step_id in self._written:
            end = self._written[event.step_id][0]
            self._written[event.step_id] = (end, tuple(sorted(event.superseded_by)))

    def _steps_discarded(self, event: events.StepsDiscarded) -> None:
        for step_id in event.step_ids:
            self.results.pop(step_id, None)
            self.attempts.pop(step_id, None)
        self.store.discard_steps(self.run_id, event.step_ids)
        for step_id in event.step_ids:
            self._written.pop(step_id, None)

    def _heartbeat(self, event: events.Heartbeat) -> None:
        self.store.record_event(
            self.run_id, "heartbeat", {"done": event.done, "total": event.total}, event.time
        )

    def _stall(self, event: events.Stall) -> None:
        self.store.record_event(self.run_id, "stall", {"idle_s": event.idle_s}, event.time)

    _handlers: ClassVar[dict[type[Any], Callable[[StoreRecorder, Any], None]]] = {}
    """Per event type, what records it (filled below, and by :func:`_handler_for` for a
    subclass)."""


def _ignored(recorder: StoreRecorder, event: Any) -> None:
    """Record nothing (an event the store does not keep)."""


def _handler_for(kind: type[Any]) -> Callable[[StoreRecorder, Any], None]:
    """What records events of ``kind``: the handler of the first event class it derives
    from, else nothing."""
    for base, handler in list(_HANDLERS.items()):
        if issubclass(kind, base):
            return handler
    return _ignored


_HANDLERS: dict[type[Any], Callable[[StoreRecorder, Any], None]] = {
    events.StepStarted: StoreRecorder._step_started,
    events.StepSucceeded: StoreRecorder._step_succeeded,
    events.StepFailed: StoreRecorder._step_failed,
    events.StepCancelled: StoreRecorder._step_cancelled,
    events.StepSkipped: StoreRecorder._step_skipped,
    events.StepsAdded: StoreRecorder._steps_added,
    events.StepSuperseded: StoreRecorder._step_superseded,
    events.StepsDiscarded: StoreRecorder._steps_discarded,
    events.Heartbeat: StoreRecorder._heartbeat,
    events.Stall: StoreRecorder._stall,
}
StoreRecorder._handlers.update(_HANDLERS)
