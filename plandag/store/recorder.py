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
from collections.abc import Mapping
from typing import Any

from plandag.compiler.compiled import CompiledStep
from plandag.errors import NotStartedError
from plandag.scheduler import events
from plandag.scheduler.result import RunResult, jsonable_result
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
        try:
            self._record(event)
            self._note(event)
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
        if isinstance(event, events.RunFinished):
            self.reconcile(event.result)

    def reconcile(self, result: RunResult, *, attempts: int = 5, pause_s: float = 0.5) -> None:
        """Commit what is queued, then write the final state of every step whose final
        state this recorder did not write already (every step when a write failed during
        the run) from ``result``, in one durable transaction: the steps' rows then match
        the run whatever writes failed during it.

        Args:
            result: the run's complete result.
            attempts: tries, ``pause_s`` seconds apart (blocking: the run is over).

        Sets :attr:`failure` to the last error when every try failed.
        """
        rows = []
        for step_id, record in result.steps.items():
            if not self.errors and self._written.get(step_id) == (
                (
                    record.status,
                    record.reason,
                    record.detail,
                    record.ended_at,
                    record.duration_s,
                    record.error is not None,
                    record.attempts,
                ),
                tuple(sorted(record.superseded_by or ())),
            ):
                continue
            step = self.steps.get(step_id)
            inline, digest = (None, None)
            if record.status == "succeeded":
                inline, digest = self.store.value_columns(jsonable_result(record.result))
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
        for attempt in range(1, attempts + 1):
            try:
                self.store.flush()
                if rows:
                    self.store.write_steps(self.run_id, rows, self.segment)
                self.failure = None
                return
            except sqlite3.Error as error:
                self.failure = error
                if attempt < attempts:
                    time.sleep(pause_s)

    def _note(self, event: events.Event) -> None:
        """Remember the final row queued for a step (what :meth:`reconcile` may skip)."""
        written: _Written | None = None
        attempts = self.attempts.get(getattr(event, "step_id", 0), 0)
        if isinstance(event, events.StepStarted):
            self._written.pop(event.step_id, None)
        elif isinstance(event, events.StepSucceeded):
            written = ("succeeded", None, None, event.time, event.duration_s, False, attempts)
        elif isinstance(event, events.StepFailed):
            error = event.error is not None
            written = ("failed", event.reason, None, event.time, None, error, attempts)
        elif isinstance(event, events.StepCancelled):
            written = ("cancelled", event.reason, None, event.time, None, False, attempts)
        elif isinstance(event, events.StepSkipped):
            written = ("skipped", event.reason, event.detail, event.time, None, False, 0)
        elif isinstance(event, events.StepSuperseded):
            if event.step_id in self._written:
                end = self._written[event.step_id][0]
                self._written[event.step_id] = (end, tuple(sorted(event.superseded_by)))
        elif isinstance(event, events.StepsDiscarded):
            for step_id in event.step_ids:
                self._written.pop(step_id, None)
        if written is not None:
            step_id = getattr(event, "step_id", 0)
            self._written[step_id] = (written, self._written.get(step_id, (written, ()))[1])

    def _record(self, event: events.Event) -> None:
        store, run_id, segment = self.store, self.run_id, self.segment
        if isinstance(event, events.StepStarted):
            self.attempts[event.step_id] = event.attempt
            store.step_started(
                run_id,
                event.step_id,
                event.attempt,
                event.time,
                args=self._scrub(self._args(event.step_id)),
                segment=segment,
                durable=self._effects(event.step_id),
            )
        elif isinstance(event, events.StepSucceeded):
            self.results[event.step_id] = event.result
            store.step_ended(
                run_id,
                event.step_id,
                "succeeded",
                event.time,
                attempt=self.attempts.get(event.step_id, 0),
                duration_s=event.duration_s,
                result=jsonable_result(event.result),  # converted once, with the trace
                segment=segment,
                durable=self._effects(event.step_id),
            )
        elif isinstance(event, events.StepFailed):
            store.step_ended(
                run_id,
                event.step_id,
                "failed",
                event.time,
                attempt=self.attempts.get(event.step_id, 0),
                reason=event.reason,
                error=event.error.as_dict() if event.error is not None else None,
                segment=segment,
                durable=self._effects(event.step_id),
            )
        elif isinstance(event, events.StepCancelled):
            store.step_ended(
                run_id,
                event.step_id,
                "cancelled",
                event.time,
                attempt=self.attempts.get(event.step_id, 0),
                reason=event.reason,
                segment=segment,
                durable=self._effects(event.step_id),
            )
        elif isinstance(event, events.StepSkipped):
            store.step_ended(
                run_id,
                event.step_id,
                "skipped",
                event.time,
                reason=event.reason,
                detail=event.detail,
                segment=segment,
                durable=False,
            )
        elif isinstance(event, events.StepsAdded):
            store.declare_steps(
                run_id,
                [
                    (step_id, self.steps[step_id].tool.name, self.steps[step_id].tool.effects)
                    for step_id in event.step_ids
                    if step_id in self.steps
                ],
                segment,
            )
        elif isinstance(event, events.StepSuperseded):
            store.supersede(run_id, event.step_id, event.superseded_by)
        elif isinstance(event, events.StepsDiscarded):
            for step_id in event.step_ids:
                self.results.pop(step_id, None)
                self.attempts.pop(step_id, None)
            store.discard_steps(run_id, event.step_ids)
        elif isinstance(event, events.Heartbeat):
            store.record_event(
                run_id, "heartbeat", {"done": event.done, "total": event.total}, event.time
            )
        elif isinstance(event, events.Stall):
            store.record_event(run_id, "stall", {"idle_s": event.idle_s}, event.time)
