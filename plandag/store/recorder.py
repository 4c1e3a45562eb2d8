"""An observer that writes a run's step transitions into the run store (issue 6).

Recorded inputs have their secrets masked (API keys, authorization headers:
:func:`plandag.trace.redact.scrub_secrets`); they are for reading, resume never needs them.
Steps without effects are written in batches; a step whose tool has effects is committed
as started before its tool runs (the runner calls observers synchronously, in order,
before it calls the tool: :mod:`plandag.scheduler.events`) and as ended as soon as it ends.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from plandag.compiler.compiled import CompiledStep
from plandag.scheduler import events
from plandag.store.store import Store
from plandag.trace.redact import Redactor

__all__ = ["StoreRecorder"]

logger = logging.getLogger(__name__)


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
        self._scrub = Redactor(personal=False)  # secrets only; the environment read once
        self.attempts: dict[int, int] = {}
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
        """Write ``event`` (step events, heartbeats and stalls; others are ignored)."""
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
                result=event.result,
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
        elif isinstance(event, events.Heartbeat):
            store.record_event(
                run_id, "heartbeat", {"done": event.done, "total": event.total}, event.time
            )
        elif isinstance(event, events.Stall):
            store.record_event(run_id, "stall", {"idle_s": event.idle_s}, event.time)
        elif isinstance(event, events.RunFinished):
            result = event.result
            for step_id, record in result.steps.items():
                if record.superseded_by:
                    store.supersede(run_id, step_id, record.superseded_by)
            store.flush()
