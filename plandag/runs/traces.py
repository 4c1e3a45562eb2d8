"""A durable run's trace (``traces/RUN_ID.jsonl`` beside the run store,
:mod:`plandag.trace.writer`): the writers of a run's segments (:func:`trace_factory`), and
the lines a decision taken between segments appends (:func:`trace_decision`,
:func:`trace_amendment`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from plandag.runs.options import TraceFactory
    from plandag.store import Store

__all__ = ["decision_writer", "trace_amendment", "trace_decision", "trace_factory"]


def trace_factory(store: Store, redact: bool) -> TraceFactory:
    """Trace writers in ``store``'s ``traces/`` folder (secrets always masked; personal data
    too with ``redact``); live OpenTelemetry spans exported when the environment configures
    it, with no message content in them under ``redact``."""
    from plandag.telemetry import set_redact
    from plandag.trace.export import exporter_from_env
    from plandag.trace.redact import Redactor
    from plandag.trace.writer import TraceWriter

    redactor = Redactor(personal=redact)
    set_redact(redact)
    exporter = exporter_from_env()

    def factory(run_id: str, segment: int) -> Any:
        writer = TraceWriter(store.trace_path(run_id), run_id, segment=segment, redact=redactor)
        if exporter is not None:  # spans batched so far are sent when the writer closes
            inner_close = writer.close

            def close() -> None:
                inner_close()
                exporter.flush()

            writer.close = close  # type: ignore[method-assign]
        return writer

    return factory


def decision_writer(store: Store, row: Any) -> Any:
    """A writer appending to the trace of the stored run ``row`` (its current segment;
    personal data masked when the run was started with ``redact``)."""
    from plandag.runs.options import RunOptions
    from plandag.trace.redact import Redactor
    from plandag.trace.writer import TraceWriter

    options = RunOptions.from_json(row.options)
    return TraceWriter(
        store.trace_path(row.run_id),
        row.run_id,
        segment=row.segment,
        redact=Redactor(personal=options.redact),
    )


def trace_decision(
    store: Store, row: Any, digest: str, decision: str, who: str, feedback: str | None
) -> Any:
    """Append a decision taken between segments (``approve``, ``reject``) to the run's
    trace; returns the writer (close it, or use it as a context manager to append more)."""
    writer = decision_writer(store, row)
    writer.approval(row.version, digest, decision, who, feedback)
    return writer


def trace_amendment(store: Store, row: Any, who: str, feedback: str | None) -> None:
    """Append a step-by-step decision taken between segments to the run's trace: the
    decision ``amended`` on the version decided on, the new version, its approval."""
    versions = store.plan_versions(row.run_id)
    old, new = versions[-2], versions[-1]
    writer = decision_writer(store, row)
    try:
        writer.approval(old.version, old.hash, "amended", who, feedback)
        writer.plan(new.version, new.plan, new.hash, "amended")
        writer.approval(new.version, new.hash, "approved", who, None)
    finally:
        writer.close()
