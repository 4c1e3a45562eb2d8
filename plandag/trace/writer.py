"""The trace writer: one JSON line per record, appended as the run goes.

The file format, defined here (docs/durable-runs.md): every
line is a JSON object with ``type``, ``run_id`` and ``time`` (wall-clock seconds since the
epoch). A resumed run appends to the same file under a new ``segment`` number, so one file
holds the whole story of a run; :func:`plandag.trace.reader.load_trace` reads it back.

:class:`TraceWriter` is also a scheduler observer (:mod:`plandag.scheduler.events`): live
``event`` lines while steps start and end (so a crash still leaves the steps that ran), the
``step`` span of each step that ran as it ends (succeeded, failed or cancelled), then at
``RunFinished`` the spans of the other steps (skipped ones, steps restored from an earlier
segment), a step's span again when its record changed since (a replan superseded it, its
upstream failures were counted again), and a ``run_finished`` line.

When lines reach the file: the lines of steps without effects (``step_started``,
``step_ended``, their spans, ``heartbeat``, ``stall`` and ``dependency_down``) wait in memory
and are written together, at the latest :data:`FLUSH_INTERVAL_S` seconds after the oldest
of them (a thread of the writer's own writes them while the run is idle), or as soon as
:data:`PENDING_CHARACTERS` characters wait. Everything else is written at once, after
what waits, in order: the lines of a step with effects (its start is in the file before
its tool is called), every line written by an explicit method (``run_started``, ``plan``,
``approval``, ``segment_ended``, ``run_finished`` ...), :meth:`TraceWriter.flush`,
:meth:`TraceWriter.close`, and any read of the file in this process
(:func:`flush_traces`, which :func:`plandag.trace.reader.load_trace` calls). A process
killed outright (SIGKILL) loses at most the last :data:`FLUSH_INTERVAL_S` seconds of lines
of steps without effects; a run that raises, is cancelled or interrupted closes its writer,
which writes them all.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import threading
import time as _time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import networkx as nx

from plandag.dag.graph import longest_path, parents_first_among
from plandag.dag.plan import Plan
from plandag.dag.references import find_references
from plandag.scheduler import events
from plandag.scheduler.result import (
    RunResult,
    StepErrorInfo,
    StepRecord,
    jsonable_result_text,
    to_jsonable,
)
from plandag.surrogates import escape_json_text
from plandag.trace.lines import LINE_ENCODER, StepLines, attempt_status
from plandag.trace.redact import Redactor

if TYPE_CHECKING:
    from plandag.models.calls import CallRecord

__all__ = [
    "FLUSH_INTERVAL_S",
    "PENDING_CHARACTERS",
    "RESULT_CHARACTERS",
    "SUMMARY_LINE_BYTES",
    "SUMMARY_SOURCE_BYTES",
    "TraceWriter",
    "attempt_status",
    "document_summary",
    "document_summary_text",
    "flush_traces",
    "plan_dependencies",
]

logger = logging.getLogger("plandag.trace")

RESULT_CHARACTERS = 4000
"""A step's result longer than this (as compact JSON) is written as a preview: the first
``RESULT_CHARACTERS // 4`` characters with its length and SHA-256 (traces stay readable)."""

FLUSH_INTERVAL_S = 0.2
"""A line that may wait (a step without effects) reaches the file at most this many seconds
after it was written (the run store's :data:`plandag.store.writer.FLUSH_INTERVAL_S`)."""

PENDING_CHARACTERS = 1 << 18
"""Lines waiting to be written are written as soon as they hold this many characters."""

_IDLE_SECONDS = 5.0  # the flushing thread ends after this long with nothing to write

RedactFunction = Callable[[Any], Any]
_NO_DETAIL: Any = object()  # a step_ended line without a detail
Exporter = Callable[[dict[str, Any]], None]


def plan_dependencies(plan: Plan | Mapping[str, Any]) -> dict[int, list[int]]:
    """Every step's parents in ``plan``: its ``depends_on`` plus the steps its args and
    checks reference (the compiler's implied edges, ``plandag.compiler``), sorted.

    Args:
        plan: a :class:`~plandag.dag.plan.Plan` or its JSON (a mapping with ``steps``).
            Malformed steps of a mapping are skipped (never raises for odd input).

    Returns:
        ``{step id: [parent ids]}`` for every step with an integer id.
    """
    if isinstance(plan, Plan):
        steps: list[Any] = [step.model_dump(mode="json") for step in plan.steps]
    else:
        raw = plan.get("steps") if isinstance(plan, Mapping) else None
        steps = list(raw) if isinstance(raw, list) else []
    parents: dict[int, list[int]] = {}
    for step in steps:
        if not isinstance(step, Mapping) or not isinstance(step.get("id"), int):
            continue
        found: set[int] = set()
        for parent in step.get("depends_on") or []:
            if isinstance(parent, int) and not isinstance(parent, bool):
                found.add(parent)
        for part in ("args", "check"):
            for _, reference in find_references(step.get(part)):
                if reference.step_id is not None:
                    found.add(reference.step_id)
        found.discard(step["id"])
        parents[step["id"]] = sorted(found)
    return parents


_LINE_ENCODER = LINE_ENCODER


def _bounded(value: Any) -> Any:
    """``value`` JSON-safe (:func:`~plandag.scheduler.result.jsonable_result_text`: converted
    and encoded once, with the run store), or a preview when its JSON is longer than
    RESULT_CHARACTERS."""
    return _bounded_text(value)[0]


def _bounded_text(value: Any) -> tuple[Any, str | None, bool]:
    """:func:`_bounded` of ``value``; the JSON text of what it gives (lone surrogates
    escaped) when it was encoded to be measured (a mapping, a list, a long string), else
    None; and whether that text needed no escape (it is the value's compact JSON)."""
    data, shared = jsonable_result_text(value)
    if data is None or isinstance(data, bool | int | float):
        return data, None, False
    if isinstance(data, str) and len(data) <= RESULT_CHARACTERS // 6 - 2:
        return (
            data,
            None,
            False,
        )  # even all escapes (six characters each) and quotes cannot make it longer
    # the run store's text when it could be written without NaN (the same text then)
    encoded = shared if shared is not None else _LINE_ENCODER.encode(data)
    text = escape_json_text(encoded)
    if len(text) <= RESULT_CHARACTERS:
        # a lone surrogate in it is escaped when the line is written (_emit)
        return data, text, text is encoded
    preview = {
        "truncated": True,
        "chars": len(text),
        "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "preview": text[: RESULT_CHARACTERS // 4],
    }
    return preview, None, False


#: The most bytes (UTF-8) of an input's path a ``summary`` document line shows (then ``…``).
SUMMARY_SOURCE_BYTES = 120

#: A ``summary`` document line (:meth:`TraceWriter.document`) is at most this many bytes of
#: UTF-8, redaction and JSON escapes included.
SUMMARY_LINE_BYTES = 1024

_SUMMARY_NAMES = 5
# json.dumps(..., ensure_ascii=False, separators=(",", ":"), allow_nan=False), built once
# (JSONEncoder.encode keeps no state between calls).
_SUMMARY_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_SUMMARY_NAME_CHARACTERS = 32


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _cut_bytes(text: str, limit: int) -> str:
    data = text.encode("utf-8", "backslashreplace")
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode("utf-8", "ignore") + "\u2026"


def _json_bytes(text: str) -> int:
    """Bytes of ``text`` as a JSON string in a trace line (quotes left out)."""
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass")) - 2


def _cut_json(text: str, limit: int) -> str:
    """``text`` cut (then ``…``) so that it takes at most ``limit`` bytes as a JSON string."""
    if _json_bytes(text) <= limit:
        return text
    kept, size = [], _json_bytes("\u2026")
    for char in text:
        size += _json_bytes(char)
        if size > limit:
            break
        kept.append(char)
    return "".join(kept) + "\u2026"


def _document_line_text(
    run_id: Any,
    index: Any,
    status: Any,
    shown: str,
    result: Mapping[str, Any],
    start: Any,
    end: Any,
    segment: Any,
    result_text: str | None = None,
    start_text: str | None = None,
    end_text: str | None = None,
) -> str | None:
    """The JSON text of a ``summary`` document line (:meth:`TraceWriter.document`) without
    its ``usage``, put together from its values' own texts: the very text
    ``_SUMMARY_ENCODER`` makes of the whole line (the same encoder for each value, the keys
    and separators written as it writes them), at a third of its cost. None when a value is
    not of a type this covers (times that are not finite floats, an index or segment that
    is not an int): the caller encodes the line. The caller may give texts it has already:
    ``result_text`` (:func:`document_summary_text` of ``result``), ``start_text`` and
    ``end_text`` (``repr`` of ``start`` and ``end``).

    Raises:
        TypeError, ValueError: a value the encoder refuses (as encoding the line would).
    """
    if (
        type(start) is not float
        or type(end) is not float
        or type(index) is not int
        or type(segment) is not int
        or not (math.isfinite(start) and math.isfinite(end))
    ):
        return None
    encode = _SUMMARY_ENCODER.encode
    path = encode(shown)
    final = repr(end) if end_text is None else end_text
    if result_text is None:
        result_text = encode(result)
    return "".join(
        (
            '{"type":"span","run_id":',
            encode(run_id),
            ',"time":',
            final,
            ',"kind":"step","name":"step ',
            str(index + 1),
            ' extract","start":',
            repr(start) if start_text is None else start_text,
            ',"end":',
            final,
            ',"attrs":{"step_id":',
            str(index + 1),
            ',"tool":"extract","status":',
            '"failed"' if status == "error" else '"succeeded"',
            ',"reason":',
            encode(status),
            ',"detail":',
            path,
            ',"depends_on":[],"attempts":[],"checks":[],"args":{"path":',
            path,
            '},"result":',
            result_text,
            ',"superseded_by":null,"segment":',
            str(segment),
            "}}",
        )
    )


def _fitted(line: dict[str, Any], text: str) -> str:
    """A ``summary`` document ``line`` (whose JSON ``text`` is over
    :data:`SUMMARY_LINE_BYTES`) made to fit, in place, and its new JSON text.

    Characters that JSON escapes (a control character takes six bytes) and redaction masks
    longer than what they hide can push the line over: the path (written twice) is cut
    by the excess first; if the line is still too long (a record that is not plandag's,
    with huge names), the status and names are cut and the names left out (counted in
    ``more``), and the path is cut further.
    """
    attrs = line["attrs"]

    def dumped() -> str:
        return json.dumps(line, ensure_ascii=False, separators=(",", ":"), allow_nan=False)

    def size(encoded: str) -> int:
        return len(encoded.encode("utf-8", "surrogatepass"))

    excess = size(text) - SUMMARY_LINE_BYTES
    path = str(attrs["detail"])
    shown = _cut_json(path, max(_json_bytes(path) - (excess + 1) // 2, 0))
    attrs["detail"], attrs["args"] = shown, {"path": shown}
    text = dumped()
    if size(text) <= SUMMARY_LINE_BYTES:
        return text
    result = attrs["result"]
    named = len(result.get("failed_checks", ())) + len(result.get("errors", ()))
    attrs["reason"] = _cut_json(str(attrs["reason"]), _SUMMARY_NAME_CHARACTERS)
    attrs["result"] = {
        "status": _cut_json(str(result["status"]), _SUMMARY_NAME_CHARACTERS)
        if result.get("status") is not None
        else None,
        "failed_checks": [],
        "errors": [],
        "more": named + int(result.get("more", 0)),
    }
    shown = _cut_json(path, _SUMMARY_NAME_CHARACTERS * 4)
    attrs["detail"], attrs["args"] = shown, {"path": shown}
    return dumped()


_USAGE_COUNTS = ("requests", "failed_requests", "input_tokens", "output_tokens", "cost_usd")


def _usage_counts(usage: Any) -> dict[str, float | int] | None:
    """The numbers of a document's ``usage`` (:data:`_USAGE_COUNTS`; anything else
    dropped), or None when it is not a mapping."""
    if not isinstance(usage, Mapping):
        return None
    counts: dict[str, float | int] = {}
    for key in _USAGE_COUNTS:
        value = usage.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            counts[key] = value
    return counts


def document_summary(record: Any) -> dict[str, Any]:
    """A record's bounded summary for a trace line: ``{"status", "failed_checks",
    "errors"}`` (the names of the checks that failed and the error codes, at most 5 of each,
    each cut to 32 characters; ``"more"``: how many were left out, when any were).

    Args:
        record: an ``extract`` record (a mapping); anything else gives ``{"status": None}``.
    """
    if not isinstance(record, Mapping):
        return {"status": None, "failed_checks": [], "errors": []}
    checks = record.get("checks")
    failed = (
        [
            str(name)
            for name, outcome in checks.items()
            if isinstance(outcome, Mapping) and outcome.get("status") == "fail"
        ]
        if isinstance(checks, Mapping)
        else []
    )
    errors = record.get("errors")
    codes = (
        [str(error.get("code")) for error in errors if isinstance(error, Mapping)]
        if isinstance(errors, list)
        else []
    )
    status = record.get("status")
    summary: dict[str, Any] = {
        "status": _cut(str(status), _SUMMARY_NAME_CHARACTERS) if status is not None else None,
        "failed_checks": [_cut(name, _SUMMARY_NAME_CHARACTERS) for name in failed[:_SUMMARY_NAMES]],
        "errors": [_cut(code, _SUMMARY_NAME_CHARACTERS) for code in codes[:_SUMMARY_NAMES]],
    }
    more = max(len(failed) - _SUMMARY_NAMES, 0) + max(len(codes) - _SUMMARY_NAMES, 0)
    if more:
        summary["more"] = more
    return summary


def document_summary_text(summary: Mapping[str, Any]) -> str:
    """The JSON text a trace line holds for a :func:`document_summary` (compact separators,
    non-ASCII kept), for :meth:`TraceWriter.document`'s ``summary_text``: a batch's worker
    makes it with the summary.

    Raises:
        TypeError, ValueError: ``summary`` is not JSON data (a document summary always is).
    """
    return _SUMMARY_ENCODER.encode(summary)


class TraceWriter:
    """Writes one run's trace file (JSON Lines, append-only) and observes its events.

    Args:
        path: the trace file; created with its folders when missing, appended to when it
            exists (a resumed run continues the same file).
        run_id: the run's id, on every line.
        segment: 0 for the run's first process; each resume or approval adds 1.
        redact: applied to every ``attrs`` value and to the params, goal and plan before
            they are written (``plandag.trace.redact``); None writes them as they are.
        exporters: callables receiving every record written (a dict, after redaction), such
            as the OpenTelemetry exporter; one that raises is logged once and ignored.
        args: resolved arguments per step id, written in the step spans (``args`` is null
            for a step without them); :meth:`step_args` adds more.
        clock: wall-clock seconds since the epoch for records that carry no time of their
            own (default :func:`time.time`).
        flush_interval_s: the longest a line of a step without effects waits before it is
            written, seconds (default :data:`FLUSH_INTERVAL_S`; see the module docstring).
        flush_clock: the clock ``flush_interval_s`` is measured on (seconds, monotonic;
            default :func:`time.monotonic`); tests pass a fake one.

    Lines are written whole (a crash keeps every complete line), at once or within
    ``flush_interval_s`` (the module docstring says which). The observer side
    (:meth:`__call__`) never raises; the explicit methods raise ``OSError`` when the file
    cannot be written, and ``ValueError`` after :meth:`close`.

    Raises:
        ValueError: ``flush_interval_s`` is not above 0.
    """

    def __init__(
        self,
        path: Path,
        run_id: str,
        *,
        segment: int = 0,
        redact: RedactFunction | None = None,
        exporters: Sequence[Exporter] = (),
        args: Mapping[int, Any] | None = None,
        clock: Callable[[], float] = _time.time,
        flush_interval_s: float = FLUSH_INTERVAL_S,
        flush_clock: Callable[[], float] = _time.monotonic,
    ) -> None:
        if not flush_interval_s > 0:
            raise ValueError(f"flush_interval_s must be above 0, not {flush_interval_s!r}")
        self.path = Path(path)
        self.run_id = run_id
        self.segment = segment
        self._redact = redact
        self._exporters = list(exporters)
        self._clock = clock
        self._args: dict[int, Any] = dict(args or {})
        self._parents: dict[int, list[int]] = {}
        # what each step's span written so far showed (:func:`_span_state`), and the steps
        # whose step_child spans are written
        self._spans: dict[int, tuple[Any, ...]] = {}
        self._children: set[int] = set()
        # the text of the step lines assembled from their parts (plandag.trace.lines), for
        # the redactors whose rules it follows
        self._lines = (
            StepLines(run_id, segment, redact)
            if (redact is None or type(redact) is Redactor) and type(segment) is int
            else None
        )
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self._held: list[str] | None = None
        # lines a thread gathers to write at once (:meth:`_together`)
        self._gathering = threading.local()
        # lines that may wait (steps without effects), in order, their characters, and when
        # the oldest was written (on flush_clock); the steps with effects seen starting
        self._pending: list[str] = []
        self._pending_characters = 0
        self._since = 0.0
        self._interval = float(flush_interval_s)
        self._flush_clock = flush_clock
        self._wakeup = threading.Condition(self._lock)
        self._flusher: threading.Thread | None = None
        self._acting: set[int] = set()
        # the end time of the document written last and its text: a batch's next document
        # starts at that very time (the same float)
        self._document_end: tuple[float, str] | None = None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._key = os.path.realpath(self.path)
        _flush_key(self._key, self.path)  # another writer's waiting lines come first
        needs_newline = False
        if self.path.exists() and self.path.stat().st_size > 0:
            with self.path.open("rb") as existing:
                existing.seek(-1, 2)
                needs_newline = existing.read(1) != b"\n"
        self._file: IO[str] | None = self.path.open("a", encoding="utf-8", buffering=1)
        if needs_newline:  # a crash cut the last line: start ours on a line of its own
            self._file.write("\n")
            self._file.flush()
        # what waits is written when the writer is dropped unclosed, or at the interpreter's exit
        self._finalizer = weakref.finalize(
            self, _write_pending, self._lock, self._pending, self._file
        )
        _LIVE.add(self)

    # -- writing ---------------------------------------------------------------------------

    def _warn_once(self, key: str, message: str, *arguments: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message, *arguments)

    def _clean(self, value: Any, *, owned: bool = False) -> Any:
        """``value`` JSON-safe and masked: a copy; with ``owned`` (a value the writer built
        for this line alone), ``value`` itself when neither would change it
        (:meth:`Redactor.kept_as_is`)."""
        if owned and type(self._redact) is Redactor and self._redact.kept_as_is(value):
            return value
        data = to_jsonable(value)
        if self._redact is not None:
            data = self._redact(data)  # JSON-ready in, JSON-ready out
        return data

    def write(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """Write one record (``type`` first; ``run_id`` and ``time`` added when missing).

        Args:
            record: the line's fields; ``attrs`` is expected already redacted (the
                methods below do it).

        Returns:
            The dict written (what the exporters received).

        Raises:
            ValueError: the writer is closed.
            OSError: the file cannot be written.
        """
        line: dict[str, Any] = {"type": record["type"], "run_id": self.run_id}
        line["time"] = self._clock()
        line.update({key: value for key, value in record.items() if key != "type"})
        return self._emit(line, _LINE_ENCODER.encode(to_jsonable(line)))

    def _write_ready(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """:meth:`write` of a record whose values are JSON-safe already (``attrs`` made so
        by :meth:`_clean`, the other fields strings and numbers), without converting it
        again; a time that is not a finite number takes :meth:`write`'s way."""
        line: dict[str, Any] = {"type": record["type"], "run_id": self.run_id}
        line["time"] = self._clock()
        line.update({key: value for key, value in record.items() if key != "type"})
        for value in line.values():
            if type(value) is float and not math.isfinite(value):
                return self.write(record)
        try:
            text = _LINE_ENCODER.encode(line)
        except (TypeError, ValueError):  # a field that is not JSON after all: converted
            return self.write(record)
        return self._emit(line, text)

    def _write_with_text(self, record: Mapping[str, Any], field: str, text: str) -> dict[str, Any]:
        """:meth:`_write_ready` of ``record`` whose ``field`` is JSON data written as
        ``text`` already (its compact JSON text): the line's text is made of each field's
        text (as the encoder joins them), ``field``'s not encoded again."""
        line: dict[str, Any] = {"type": record["type"], "run_id": self.run_id}
        line["time"] = self._clock()
        line.update({key: value for key, value in record.items() if key != "type"})
        encode = _LINE_ENCODER.encode
        parts = []
        try:
            for key, value in line.items():
                if type(value) is float and not math.isfinite(value):
                    return self.write(record)
                parts.append(f"{encode(key)}:{text if key == field else encode(value)}")
        except (TypeError, ValueError):  # a field that is not JSON after all: converted
            return self.write(record)
        return self._emit(line, "{" + ",".join(parts) + "}")

    def _emit(self, line: dict[str, Any], text: str) -> dict[str, Any]:
        """Write ``text`` (``line`` as JSON; a lone surrogate in its strings escaped,
        :func:`plandag.surrogates.escape_json_text`, so the write never fails) and give
        ``line`` to the exporters."""
        text = escape_json_text(text)
        with self._lock:
            if self._file is None:
                raise ValueError(f"trace {self.path} is closed")
            gathered: list[str] | None = getattr(self._gathering, "lines", None)
            if self._held is not None:
                self._held.append(text + "\n")
            elif gathered is not None:
                gathered.append(text + "\n")
            else:
                self._write_now(self._file, text + "\n")
        for exporter in self._exporters:
            try:
                exporter(line)
            except Exception as error:
                self._warn_once(
                    f"exporter {id(exporter)}",
                    "trace exporter %r failed (%s: %s); its later failures are not logged",
                    exporter,
                    type(error).__name__,
                    error,
                )
        return line

    def _write_text(self, text: str, wait: bool = False) -> None:
        """Write lines' JSON ``text`` (escaped, each line ending in a newline) as
        :meth:`_emit` writes one: held, gathered, or written after what waits; with
        ``wait`` (lines of a step without effects), put with what waits
        (:meth:`_wait`)."""
        with self._lock:
            file = self._file
            if file is None:
                raise ValueError(f"trace {self.path} is closed")
            if self._held is not None:
                self._held.append(text)
                return
            gathered: list[str] | None = getattr(self._gathering, "lines", None)
            if gathered is not None:
                gathered.append(text)
            elif wait:
                self._wait(file, text)
            else:
                self._write_now(file, text)

    def _put(self, text: str, wait: bool) -> None:
        """:meth:`_write_text` of lines the observer assembled in one go (never inside a
        :meth:`_together` block, which only the general way opens)."""
        with self._lock:
            file = self._file
            if file is None:
                raise ValueError(f"trace {self.path} is closed")
            if self._held is not None:
                self._held.append(text)
            elif not wait:
                self._write_now(file, text)
            elif self._pending:  # as _wait, the oldest line's time known already
                self._pending.append(text)
                self._pending_characters += len(text)
                if self._pending_characters >= PENDING_CHARACTERS:
                    self._write_now(file, "")
            else:
                self._wait(file, text)

    def _write_now(self, file: IO[str], text: str) -> None:
        """Write what waits, then ``text``, in one write, and flush (the lock held)."""
        pending = self._pending
        if pending:
            pending.append(text)
            text = "".join(pending)
            pending.clear()
            self._pending_characters = 0
        file.write(text)
        file.flush()

    def _wait(self, file: IO[str], text: str) -> None:
        """Put ``text`` with the lines that wait (the lock held): written with them within
        the flush interval, by the flushing thread, or at once when they grow past
        :data:`PENDING_CHARACTERS`."""
        pending = self._pending
        pending.append(text)
        if len(pending) == 1:
            self._since = self._flush_clock()
            if self._flusher is None:
                self._flusher = threading.Thread(
                    target=self._flush_loop, name=f"plandag-trace {self.path.name}", daemon=True
                )
                self._flusher.start()
            else:
                self._wakeup.notify()
            self._pending_characters = len(text)
            return
        self._pending_characters += len(text)
        if self._pending_characters >= PENDING_CHARACTERS:
            self._write_now(file, "")

    def _flush_due(self) -> bool:
        """Write what waits when its oldest line has waited the flush interval (on the flush
        clock); whether anything was written. Takes the lock."""
        with self._lock:
            file = self._file
            if (
                file is None
                or not self._pending
                or self._flush_clock() < self._since + self._interval
            ):
                return False
            self._write_now(file, "")
            return True

    def _flush_loop(self) -> None:
        """The flushing thread: writes what waits once it is due; ends when the writer
        closes, or after a while with nothing waiting (the next line starts another)."""
        idle_since: float | None = None
        while True:
            try:
                self._flush_due()
            except Exception as error:  # the next write or close() meets it again
                self._warn_once(
                    "flush",
                    "trace %s: could not write (%s: %s)",
                    self.path,
                    type(error).__name__,
                    error,
                )
            with self._lock:
                if self._file is None:
                    self._flusher = None
                    return
                if self._pending:
                    idle_since = None
                    left = self._since + self._interval - self._flush_clock()
                    # measured on the flush clock, looked at again at least every interval
                    self._wakeup.wait(min(max(left, 0.001), self._interval))
                    continue
                now = _time.monotonic()
                if idle_since is None:
                    idle_since = now
                elif now - idle_since >= _IDLE_SECONDS:
                    self._flusher = None
                    return
                self._wakeup.wait(_IDLE_SECONDS)

    def flush(self) -> None:
        """Write every line that waits (see the module docstring) now.

        Raises:
            OSError: the file cannot be written.
        """
        with self._lock:
            if self._file is not None and self._pending:
                self._write_now(self._file, "")

    def _step_lines(self) -> StepLines | None:
        """The step lines' assembler when it can write them now (no exporter: they get the
        lines as dicts)."""
        lines = self._lines
        if lines is None or self._exporters or not lines.ready():
            return None
        return lines

    def _span(
        self, kind: str, name: str, start: float, end: float, attrs: Mapping[str, Any]
    ) -> dict[str, Any]:
        return self._span_of(kind, name, start, end, self._clean(dict(attrs)))

    def _span_of(
        self, kind: str, name: str, start: float, end: float, clean: dict[str, Any]
    ) -> dict[str, Any]:
        """Write a span whose ``attrs`` are :meth:`_clean` already."""
        return self._write_ready(
            {
                "type": "span",
                "time": end,
                "kind": kind,
                "name": name,
                "start": start,
                "end": end,
                "attrs": clean,
            }
        )

    @contextlib.contextmanager
    def grouped(self) -> Iterator[None]:
        """Lines written inside the block go to the file in one write when it ends (also
        when it raises), then flushed: a batch writing many lines at once makes one system
        call instead of one per line. Blocks do not nest."""
        with self._lock:
            self._held = []
        try:
            yield
        finally:
            with self._lock:
                held, self._held = self._held, None
                if held and self._file is not None:
                    self._write_now(self._file, "".join(held))

    @contextlib.contextmanager
    def _together(self, wait: bool = False) -> Iterator[None]:
        """The lines this thread writes inside the block go to the file in one write when
        it ends (one system call for a step's end and its span); with ``wait``, they are
        put with what waits instead (:meth:`_wait`)."""
        if getattr(self._gathering, "lines", None) is not None:
            yield  # the outer block writes them
            return
        self._gathering.lines = []
        try:
            yield
        finally:
            lines, self._gathering.lines = self._gathering.lines, None
            if lines:
                with self._lock:
                    if self._held is not None:  # a batch's block began meanwhile
                        self._held.extend(lines)
                    elif self._file is not None:
                        if wait:
                            self._wait(self._file, "".join(lines))
                        else:
                            self._write_now(self._file, "".join(lines))

    def close(self) -> None:
        """Write what waits and close the file (idempotent). Later writes raise
        ``ValueError``."""
        with self._lock:
            file = self._file
            if file is not None:
                try:
                    if self._pending:
                        self._write_now(file, "")
                finally:
                    self._file = None
                    self._pending.clear()
                    self._finalizer.detach()
                    _LIVE.discard(self)
                    self._wakeup.notify_all()
                    file.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- explicit records -----------------------------------------------------------------

    def run_started(
        self, command: str, goal: str | None, params: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        """Write the segment's ``run_started`` line.

        Args:
            command: ``exec``, ``run``, ``resume``, ``approve`` or ``extract``.
            goal: the task or the plan's goal, or None.
            params: the run's param values (redacted when a redactor is set).
        """
        return self._write_ready(
            {
                "type": "run_started",
                "segment": self.segment,
                "command": command,
                "goal": self._clean(goal) if goal is not None else None,
                "params": self._clean(dict(params or {})),
            }
        )

    def plan(
        self,
        version: int,
        plan: Plan | Mapping[str, Any],
        hash: str,
        source: str,
        *,
        text: str | None = None,
        parents: Mapping[int, Sequence[int]] | None = None,
    ) -> dict[str, Any]:
        """Write a ``plan`` line and learn its steps' dependencies for the step spans.

        Args:
            version: 1 for the first plan, then one more per replan or revision.
            plan: the plan (a :class:`~plandag.dag.plan.Plan` or its JSON).
            hash: its SHA-256 hex (``plandag.approval.plan_hash``), computed by the caller
                on the unredacted plan.
            source: ``stored``, ``planner``, ``replan`` or ``revision``.
            text: when ``plan`` is JSON data that
                :func:`~plandag.scheduler.result.to_jsonable` returns as it is
                (:attr:`plandag.scheduler.gate.PlanDocument.plain`), its compact JSON text
                (``json.dumps(plan, ensure_ascii=False, separators=(",", ":"))``): the plan
                is then written as it is when the redactor keeps that text
                (:meth:`~plandag.trace.redact.Redactor.keeps_json_text`), and the text goes
                into the line without encoding the plan again. None: the plan is converted
                and redacted as every value.
            parents: every step's parents, sorted, when the caller has them (the plan
                compiled: :attr:`~plandag.compiler.compiled.CompiledStep.parents`, which
                :func:`plan_dependencies` of a plan that compiles gives too); None: read
                from the plan.
        """
        data = plan.model_dump(mode="json", exclude_none=True) if isinstance(plan, Plan) else plan
        if parents is None:
            self.set_dependencies(plan_dependencies(data))
        else:
            self._parents.update({step_id: list(ids) for step_id, ids in parents.items()})
        record = {"type": "plan", "version": version, "hash": hash, "plan": data, "source": source}
        if text is not None and (
            self._redact is None
            or (type(self._redact) is Redactor and self._redact.keeps_json_text(text))
        ):
            return self._write_with_text(record, "plan", text)
        record["plan"] = self._clean(data)
        return self._write_ready(record)

    def set_dependencies(self, parents: Mapping[int, Sequence[int]]) -> None:
        """Record the parents of steps (say ``compiled.graph``'s), replacing known ones.

        Args:
            parents: ``{step id: parent ids}``.
        """
        for step_id, ids in parents.items():
            self._parents[int(step_id)] = sorted({int(parent) for parent in ids})

    def set_graph(self, graph: nx.DiGraph) -> None:
        """Record every step's parents from a compiled plan's graph (``compiled.graph``,
        edges parent → child), replacing known ones; call it again after a replan adds
        steps."""
        self.set_dependencies({node: list(graph.predecessors(node)) for node in graph.nodes})

    def step_args(self, step_id: int, args: Any) -> None:
        """Remember ``step_id``'s resolved args for its span (redacted when written)."""
        self._args[step_id] = args

    def compile(
        self,
        version: int,
        start: float,
        end: float,
        diagnostics: Sequence[Any],
        *,
        ok: bool | None = None,
    ) -> dict[str, Any]:
        """Write a ``compile`` span.

        Args:
            version: the plan version compiled.
            start, end: wall-clock seconds since the epoch.
            diagnostics: :class:`~plandag.dag.diagnostics.Diagnostic` objects or
                mappings with ``code``, ``severity``, ``step_id`` and ``message``.
            ok: whether it compiled; default: no diagnostic has severity ``error``.
        """
        items = [_diagnostic_dict(diagnostic) for diagnostic in diagnostics]
        if ok is None:
            ok = not any(item["severity"] == "error" for item in items)
        return self._span(
            "compile",
            f"compile v{version}",
            start,
            end,
            {"version": version, "ok": ok, "diagnostics": items},
        )

    def planning(self, version: int, start: float, end: float, calls: int) -> dict[str, Any]:
        """Write a ``plan`` span: the planning call(s) that produced plan ``version``.

        Args:
            version: the plan version produced; start, end: seconds since the epoch;
            calls: how many model calls it took.
        """
        return self._span(
            "plan", f"plan v{version}", start, end, {"version": version, "calls": calls}
        )

    def llm_call(self, record: CallRecord, purpose: str) -> dict[str, Any]:
        """Write an ``llm_call`` span for one attempt of one model call.

        Args:
            record: the attempt's :class:`plandag.models.calls.CallRecord` (its
                ``started_at`` and ``duration_s`` give the span's start and end).
            purpose: ``plan``, ``replan``, ``join`` or ``revision``.
        """
        start = float(record.started_at)
        end = start + float(record.duration_s)
        attrs = {
            "purpose": purpose,
            "model": record.model,
            "provider": record.provider,
            "attempt": record.attempt,
            "input_tokens": record.input_tokens,
            "output_tokens": record.output_tokens,
            "cost_usd": record.cost_usd,
            "stop_reason": record.stop_reason,
            "error": record.error,
        }
        return self._span("llm_call", f"{record.provider}:{record.model}", start, end, attrs)

    def replan(
        self,
        number: int,
        *,
        failed: Sequence[int],
        pruned: Sequence[int],
        new_steps: Sequence[int],
        version: int,
        start: float,
        end: float,
        trigger: str = "failure",
        strategy: str = "partial",
        strategy_reason: str = "",
        withdrawn: Sequence[int] = (),
    ) -> dict[str, Any]:
        """Write a ``replan`` span.

        Args:
            number: 1 for the run's first replan; failed: the failed steps it answers;
            pruned: the steps skipped because of them; new_steps: ids the patch added;
            version: the plan version it produced; start, end: seconds since the epoch.
            trigger: ``failure``, ``joiner`` or ``instruction`` (a person's, mid-run).
            strategy: ``partial`` or ``total`` (:mod:`plandag.planner.triggers`);
            strategy_reason: why, in words; withdrawn: steps not started that were
            dropped for it.
        """
        attrs = {
            "number": number,
            "failed": list(failed),
            "pruned": list(pruned),
            "new_steps": list(new_steps),
            "version": version,
            "trigger": trigger,
            "strategy": strategy,
            "strategy_reason": strategy_reason,
            "withdrawn": list(withdrawn),
        }
        return self._span("replan", f"replan {number}", start, end, attrs)

    def approval(
        self,
        version: int,
        hash: str,
        decision: str,
        who: str | None,
        feedback: str | None,
        *,
        start: float | None = None,
        end: float | None = None,
    ) -> dict[str, Any]:
        """Write an ``approval`` span.

        Args:
            version, hash: the plan version decided on and its hash.
            decision: ``approved``, ``rejected``, ``expired`` or ``asked``.
            who: who decided (a user name, ``auto``, ``callback``), or None.
            feedback: a rejection's text (verbatim, redacted only with a redactor).
            start: when the person was asked (default: ``end``); end: when they answered
                (default: now).
        """
        finish = self._clock() if end is None else end
        attrs = {
            "version": version,
            "hash": hash,
            "decision": decision,
            "who": who,
            "feedback": feedback,
        }
        return self._span(
            "approval",
            f"approval v{version}",
            finish if start is None else start,
            finish,
            attrs,
        )

    # -- observer ---------------------------------------------------------------------------

    def __call__(self, event: events.Event) -> None:
        """Observe one scheduler event (see the module docstring). Never raises: a failure
        is logged once and the run goes on."""
        try:
            # the lines of every step, assembled in one go when they can be (_started,
            # _succeeded); any other event, or a step they cannot vouch for, goes below
            if isinstance(event, events.StepSucceeded):
                if self._succeeded(event):
                    return
            elif isinstance(event, events.StepStarted) and self._started(event):
                return
            self._observe(event)
        except Exception as error:
            self._warn_once(
                "observer",
                "trace %s: could not record %s (%s: %s); later failures are not logged",
                self.path,
                type(event).__name__,
                type(error).__name__,
                error,
            )

    def _started(self, event: events.StepStarted) -> bool:
        """Write ``event``'s ``step_started`` line assembled (:meth:`StepLines.started`);
        False, having done nothing, when it cannot be."""
        lines = self._lines
        if lines is None or self._exporters or not lines.ready():
            return False
        text = lines.started(event.step_id, event.tool, event.attempt, event.time)
        if text is None:
            return False
        # a step with effects (or whose effects the sender did not say): its lines are in
        # the file before its tool is called, and when it ends
        wait = event.effects == "none"
        if not wait:
            self._acting.add(event.step_id)
        self._put(text, wait)
        return True

    def _succeeded(self, event: events.StepSucceeded) -> bool:
        """Write the ``step_ended`` line and the span of a step that succeeded plainly
        (:meth:`StepLines.succeeded`), in one go; False, having done nothing, for any other
        step (:meth:`_step_end` writes it)."""
        record = event.record
        lines = self._lines
        step_id = event.step_id
        if (
            record is None
            or lines is None
            or self._exporters
            or step_id in self._spans
            or not lines.ready()
        ):
            return False
        value = record.result
        parents = self._parents.get(step_id)
        args = self._args.get(step_id)
        try:
            if value is None:
                result = "null"
            else:
                data, text, compact = _bounded_text(value)
                result = lines.result(data, text, compact)
            line = lines.succeeded(
                step_id, event.time, record, parents if parents is not None else [], args, result
            )
        except ValueError:  # an int too long to write, say: the general way says so
            return False
        if line is None:
            return False
        attempt = record.attempt_log[0]
        # _span_state of the record: what its span shows (lines.succeeded vouched for the
        # fields left None)
        self._spans[step_id] = (
            record.status,
            None,
            None,
            None,
            record.started_at,
            record.ended_at,
            parents,
            id(args),
            id(value),
            None,
            0,
            1,
            attempt.ended_at,
            None,
            None,
            None,
            0,
        )
        self._children.add(step_id)
        acting = self._acting
        if acting and step_id in acting:
            acting.discard(step_id)
            self._put(line, False)
        else:
            self._put(line, True)
        return True

    def _event(self, kind: str, time: float, attrs: Mapping[str, Any]) -> None:
        """Write an ``event`` line (gathered, then put with what waits, when the observer
        says so: :meth:`_together`)."""
        self._write_ready(
            {"type": "event", "time": time, "kind": kind, "attrs": self._clean(attrs, owned=True)}
        )

    def _step_end(
        self,
        time: float,
        step_id: int,
        status: str,
        reason: str | None,
        record: StepRecord | None,
        *,
        error: StepErrorInfo | None = None,
        detail: Any = _NO_DETAIL,
    ) -> None:
        """A step's ``step_ended`` event (attrs ``step_id``, ``status``, ``reason``, then
        ``error`` when there is one, ``detail`` when given), then its span when the event
        carries its record, in one write; put with what waits unless the step has effects
        (its start said so)."""
        acting = self._acting
        wait = not acting or step_id not in acting
        if not wait:
            acting.discard(step_id)
        lines = self._step_lines()
        if lines is not None:
            extra: str | None = ""
            if error is not None:
                extra = lines.value(error.as_dict())
                extra = None if extra is None else ',"error":' + extra
            elif detail is not _NO_DETAIL:
                extra = lines.value(detail)
                extra = None if extra is None else ',"detail":' + extra
            ended = lines.ended(step_id, status, reason, time, extra) if extra is not None else None
            if ended is not None:
                span = (
                    ""
                    if record is None
                    else self._span_text(record, record.started_at, record.ended_at, lines)
                )
                if span is not None:
                    self._write_text(ended + span, wait)
                    return
        attrs: dict[str, Any] = {"step_id": step_id, "status": status, "reason": reason}
        if error is not None:
            attrs["error"] = error.as_dict()
        elif detail is not _NO_DETAIL:
            attrs["detail"] = detail
        with self._together(wait):
            self._event("step_ended", time, attrs)
            if record is not None:
                self._step_span(record, record.started_at, record.ended_at)

    def _observe(self, event: events.Event) -> None:
        if isinstance(event, events.StepStarted):
            # a step with effects (or whose effects the sender did not say): its lines are
            # in the file before its tool is called, and when it ends
            wait = event.effects == "none"
            if not wait:
                self._acting.add(event.step_id)
            lines = self._step_lines()
            if lines is not None:
                text = lines.started(event.step_id, event.tool, event.attempt, event.time)
                if text is not None:
                    self._write_text(text, wait)
                    return
            attrs = {"step_id": event.step_id, "tool": event.tool, "attempt": event.attempt}
            with self._together(wait):
                self._event("step_started", event.time, attrs)
        elif isinstance(event, events.StepSucceeded):
            self._step_end(event.time, event.step_id, "succeeded", None, event.record)
        elif isinstance(event, events.StepFailed):
            self._step_end(
                event.time, event.step_id, "failed", event.reason, event.record, error=event.error
            )
        elif isinstance(event, events.StepCancelled):
            self._step_end(event.time, event.step_id, "cancelled", event.reason, event.record)
        elif isinstance(event, events.StepSkipped):
            self._step_end(
                event.time, event.step_id, "skipped", event.reason, None, detail=event.detail
            )
        elif isinstance(event, events.Heartbeat | events.Stall):
            kind = "heartbeat" if isinstance(event, events.Heartbeat) else "stall"
            fields = {
                field.name: getattr(event, field.name)
                for field in dataclasses.fields(event)
                if field.name not in ("run_id", "time")
            }
            with self._together(True):
                self._event(kind, event.time, fields)
        elif isinstance(event, events.DependencyDown):
            attrs = {
                "kind": event.kind,
                "name": event.name,
                "step_ids": list(event.step_ids),
                "detail": event.detail,
            }
            with self._together(True):
                self._event("dependency_down", event.time, attrs)
        elif isinstance(event, events.RunFinished):
            self.run_finished(event.result, time=event.time)

    def document(
        self,
        index: int,
        source: str,
        status: str,
        record: Any,
        start: float,
        end: float,
        *,
        detail: str = "summary",
        usage: Any = None,
        summary: Mapping[str, Any] | None = None,
        summary_text: str | None = None,
    ) -> dict[str, Any]:
        """Write one ``extract`` document as a ``step`` span (step id ``index + 1``, tool
        ``extract``): ``succeeded`` when it got a record (``ok`` or ``check_failed``, in
        ``reason``), ``failed`` for an error row.

        Args:
            index: the input's position in the batch (0-based).
            source: the input's path.
            status: the record's status (``ok``, ``check_failed``, ``error``).
            record: the record.
            start, end: seconds since the epoch (the document's own run in the batch).
            detail: ``summary`` (the default): the result is :func:`document_summary` of
                the record (status, failing checks, error codes) and the path is cut to
                :data:`SUMMARY_SOURCE_BYTES` bytes, so the line stays under
                :data:`SUMMARY_LINE_BYTES` whatever the path and the record hold (a line
                still over it, through JSON escapes or redaction masks, has its path cut
                further); ``full``: the whole record (redacted) as result.

            usage: what the document's model calls used (``{"requests",
                "failed_requests", "input_tokens", "output_tokens", "cost_usd"}``, numbers
                only), kept as the span's ``usage``; None for none.
            summary: :func:`document_summary` of the record when the caller made it
                already (a batch's worker does), else None (made here); only used with
                ``detail="summary"``, where ``record`` is then not read.
            summary_text: :func:`document_summary_text` of ``summary`` when the caller made
                it already (a batch's worker does), else None (made here).

        Raises:
            ValueError: ``detail`` is neither ``summary`` nor ``full``; the writer is closed.
        """
        if detail not in ("summary", "full"):
            raise ValueError(f"trace detail must be 'summary' or 'full', not {detail!r}")
        attrs = {
            "step_id": index + 1,
            "tool": "extract",
            "status": "failed" if status == "error" else "succeeded",
            "reason": status,
            "detail": source,
            "depends_on": [],
            "attempts": [],
            "checks": [],
            "args": {"path": source},
            "result": None,
            "superseded_by": None,
            "segment": self.segment,
        }
        counts = _usage_counts(usage)
        if counts is not None:
            attrs["usage"] = counts
        name = f"step {index + 1} extract"
        if detail == "full":
            attrs["result"] = record  # the whole record (redacted by _span), never a preview
            return self._span("step", name, start, end, attrs)
        # The summary holds plandag's own names (status, check names, error codes): only
        # the path goes through the redactor, which keeps the line cheap.
        cut = _cut_bytes(source, SUMMARY_SOURCE_BYTES)
        if isinstance(self._redact, Redactor):  # the same text, without a mapping to walk
            shown = self._redact.text(cut)
        else:
            shown = self._clean({"detail": cut})["detail"]
        attrs["detail"], attrs["args"] = shown, {"path": shown}
        result = attrs["result"] = (
            dict(summary) if summary is not None else document_summary(record)
        )
        # Every value here is JSON already (strings, numbers, lists of strings): the line is
        # dumped as it is, without to_jsonable's walk, which gives the same text.
        line: dict[str, Any] = {"type": "span", "run_id": self.run_id, "time": end}
        line.update(kind="step", name=name, start=start, end=end, attrs=attrs)
        previous = self._document_end
        final = repr(end) if type(end) is float else None
        self._document_end = (end, final) if final is not None else None
        try:
            text = (
                _document_line_text(
                    self.run_id,
                    index,
                    status,
                    shown,
                    result,
                    start,
                    end,
                    self.segment,
                    summary_text if summary is not None else None,
                    previous[1] if previous is not None and previous[0] is start else None,
                    final,
                )
                if counts is None
                else None
            )
            if text is None:
                text = _SUMMARY_ENCODER.encode(line)
        except (TypeError, ValueError):  # a clock giving NaN, say: the general path
            return self.write({"type": "span", **{k: v for k, v in line.items() if k != "type"}})
        size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
        if size > SUMMARY_LINE_BYTES:
            text = _fitted(line, text)
        return self._emit(line, text)

    def segment_ended(self, status: str, *, spent_usd: float = 0.0, spent_tokens: int = 0) -> None:
        """Write the ``run_finished`` line of a segment whose steps the writer did not
        observe: one that ran no step (it stopped to wait for a decision, or was rejected),
        so the trace does not read as a crash, or a batch whose documents were written with
        :meth:`document`.

        Args:
            status: the run's status.
            spent_usd, spent_tokens: what the segment spent (a batch's budget), 0 for none.
        """
        self.write(
            {
                "type": "run_finished",
                "segment": self.segment,
                "status": status,
                "spent_usd": float(spent_usd),
                "spent_tokens": int(spent_tokens),
                "critical_path": [],
            }
        )

    def run_finished(self, result: RunResult, *, time: float | None = None) -> None:
        """Write one ``step`` span per step of ``result`` (by id) and the ``run_finished``
        line; the observer calls it at ``RunFinished``.

        Args:
            result: the run's outcome.
            time: the ``run_finished`` line's time (default ``result.ended_at``).
        """
        steps = result.steps
        known, given, spans = self._parents, self._args, self._spans
        run_start, run_end = result.started_at, result.ended_at
        ids = sorted(steps)
        # the critical path is worked out in the same pass while each step's parents among
        # the steps come before it (plans usually number them so): _RunPath
        path = _RunPath(steps)
        for step_id in ids:
            record = steps[step_id]
            parents = known.get(record.id)
            state = _span_state(record, parents, given.get(record.id))
            if spans.get(record.id) != state:  # as _step_span, its state made once
                self._step_span(record, run_start, run_end, state)
            if path.going:
                path.add(
                    step_id,
                    parents if step_id == record.id else known.get(step_id),
                    record.duration_s,
                )
        attempts = [attempt for record in steps.values() for attempt in record.attempt_log]
        self._write_ready(
            {
                "type": "run_finished",
                "time": result.ended_at if time is None else time,
                "segment": self.segment,
                "status": result.status,
                # the steps' own spend (a run whose budget also pays model calls counts
                # those in result.spent_*; they have llm_call spans of their own)
                "spent_usd": sum([attempt.cost_usd for attempt in attempts]),
                "spent_tokens": sum([attempt.tokens for attempt in attempts]),
                "critical_path": path.path() if path.going else _critical_path(ids, steps, known),
                # the worst reported ÷ reserved, when a provider reported more than a call
                # reserved (RunResult.usage_over_reservation)
                **(
                    {"usage_over_reservation": result.usage_over_reservation}
                    if result.usage_over_reservation is not None
                    else {}
                ),
            }
        )

    def _step_span(
        self,
        record: StepRecord,
        run_start: float | None,
        run_end: float | None,
        state: tuple[Any, ...] | None = None,
    ) -> None:
        """Write ``record``'s ``step`` span, unless the span written for it last showed the
        same (:func:`_span_state`, given as ``state`` when made already); its
        ``step_child`` spans the first time only. ``run_start``, ``run_end``: the segment's
        times, for a step with no time of its own.
        """
        if state is None:
            state = _span_state(record, self._parents.get(record.id), self._args.get(record.id))
        if self._spans.get(record.id) == state:
            return
        lines = self._step_lines()
        text = (
            self._span_text(record, run_start, run_end, lines, state) if lines is not None else None
        )
        if text is None:
            self._general_step_span(record, run_start, run_end, state)
        else:
            self._write_text(text)

    def _span_times(
        self, record: StepRecord, run_start: float | None, run_end: float | None
    ) -> tuple[bool, float, float]:
        """Whether ``record`` was restored, and its span's start and end."""
        # A step that succeeded without an attempt of this segment was restored from an
        # earlier one (``run_plan(completed=...)``): it is placed at the segment's start.
        restored = record.status == "succeeded" and not record.attempt_log
        if record.ended_at is not None:
            end = record.ended_at
        else:
            end = (run_start if restored else run_end) or 0.0
        start = record.started_at if record.started_at is not None else end
        return restored, start, end

    def _span_text(
        self,
        record: StepRecord,
        run_start: float | None,
        run_end: float | None,
        lines: StepLines,
        state: tuple[Any, ...] | None = None,
    ) -> str | None:
        """:meth:`_step_span`'s line as text assembled by ``lines``: ``""`` when the span
        written last showed the same (``state``: :func:`_span_state` of ``record``, when
        known), None when the general way must write it (step_child spans to write, a value
        ``lines`` cannot vouch for); nothing is recorded then."""
        if state is None:
            state = _span_state(record, self._parents.get(record.id), self._args.get(record.id))
            if self._spans.get(record.id) == state:
                return ""
        step_id, attempts = record.id, record.attempt_log
        if step_id not in self._children:
            for attempt in attempts:
                if attempt.children:
                    return None
        # as _span_times
        restored = not attempts and record.status == "succeeded"
        end = record.ended_at
        if end is None:
            end = (run_start if restored else run_end) or 0.0
        start = record.started_at
        if start is None:
            start = end
        try:
            result, result_text, compact = _bounded_text(record.result)
            text = lines.span(
                record,
                start,
                end,
                self._parents.get(step_id, []),
                self._args.get(step_id),
                result,
                restored,
                result_text,
                compact,
            )
        except ValueError:  # an int too long to write, say: the general way says so
            return None
        if text is not None:
            self._spans[step_id] = state
            self._children.add(step_id)
        return text

    def _general_step_span(
        self,
        record: StepRecord,
        run_start: float | None,
        run_end: float | None,
        state: tuple[Any, ...],
    ) -> None:
        """:meth:`_step_span` the general way, the attrs built, converted and masked whole
        (``state``: :func:`_span_state` of ``record``, a new one)."""
        self._spans[record.id] = state
        restored, start, end = self._span_times(record, run_start, run_end)
        result = _bounded(record.result)  # JSON-safe: converted once, not again with attrs
        self._write_step_span(record, start, end, restored, result)
        if record.id in self._children:
            return
        self._children.add(record.id)
        for attempt in record.attempt_log:
            for child in attempt.children:
                # what the attempt did inside (a model call, an agent's tool call): a span
                # of its own whose parent is the step
                self._span(
                    "step_child",
                    str(child.get("name", "")),
                    float(child.get("start", start)),
                    float(child.get("end", end)),
                    {
                        **dict(child.get("attrs", {})),
                        "child_kind": str(child.get("kind", "")),
                        "parent_step": record.id,
                        "attempt": attempt.number,
                        "segment": self.segment,
                    },
                )

    def _write_step_span(
        self, record: StepRecord, start: float, end: float, restored: bool, result: Any
    ) -> None:
        """Write ``record``'s ``step`` span the general way: its attrs built, converted and
        masked whole (``result``: its result, JSON-safe and bounded already)."""
        attempts = []
        for attempt in record.attempt_log:
            item: dict[str, Any] = {
                "attempt": attempt.number,
                "start": attempt.started_at,
                "end": attempt.ended_at,
                "status": attempt_status(attempt),
                "reason": attempt.reason,
                "error": attempt.error.as_dict() if attempt.error is not None else None,
            }
            if attempt.retry is not None:  # what followed: retried, reask, or why not
                item["retry"] = attempt.retry
            if attempt.children:  # its step_child spans follow the step span
                item["children"] = len(attempt.children)
            attempts.append(item)
        checks = [
            {
                "kind": outcome.kind,
                "passed": outcome.status != "fail",
                "status": outcome.status,
                "message": outcome.detail,
            }
            for outcome in record.checks
        ]
        attrs = {
            "step_id": record.id,
            "tool": record.tool,
            "status": record.status,
            "reason": record.reason,
            "detail": record.detail,
            "error": record.error.as_dict() if record.error is not None else None,
            "depends_on": self._parents.get(record.id, []),
            "attempts": attempts,
            "checks": checks,
            "args": self._args.get(record.id),
            "result": None,
            "superseded_by": record.superseded_by,
            "segment": self.segment,
            "restored": restored,
        }
        if self._redact is None or isinstance(self._redact, Redactor):
            clean = self._clean(attrs, owned=True)
            clean["result"] = self._redact(result) if self._redact is not None else result
        else:  # a redactor of the caller's: given the whole attrs, as always
            attrs["result"] = result
            clean = self._clean(attrs)
        self._span_of("step", f"step {record.id} {record.tool}", start, end, clean)


_LIVE: weakref.WeakSet[TraceWriter] = weakref.WeakSet()


def flush_traces(path: Path | str) -> None:
    """Write the lines that wait in every open :class:`TraceWriter` of this process on the
    trace file ``path`` (call it before reading the file; a writer that cannot write is
    left to report it where it writes)."""
    _flush_key(os.path.realpath(path), path)


def _flush_key(key: str, path: Path | str) -> None:
    """:func:`flush_traces` of the file whose real path is ``key``."""
    for writer in list(_LIVE):
        if writer._key != key or not writer._pending:
            continue
        try:
            writer.flush()
        except Exception as error:  # its own writes raise it where the run sees it
            logger.debug("trace %s: another writer's flush failed (%s)", path, error)


def _write_pending(lock: threading.Lock, pending: list[str], file: IO[str]) -> None:
    """Write ``pending`` to ``file`` (a writer dropped unclosed, or the interpreter's
    exit)."""
    with lock:
        if pending and not file.closed:
            with contextlib.suppress(Exception):
                file.write("".join(pending))
                file.flush()
            pending.clear()


def _critical_path(
    ids: Sequence[int], steps: Mapping[int, StepRecord], known: Mapping[int, Sequence[int]]
) -> list[int]:
    """The critical path of a run's steps (:func:`plandag.dag.graph.critical_path`'s answer
    over the graph of their parents among them, each weighted by its ``duration_s``, None
    counting 0), without building the graph: ``[]`` for a cycle (never breaks the trace).

    Args:
        ids: the steps' ids, sorted; steps: each step's record; known: each step's parents
            (a step without any may be missing).
    """
    # the ids' own order when every parent has a smaller id (plans usually number them so)
    found = parents_first_among({step_id: known.get(step_id, ()) for step_id in ids})
    if found is None:  # a cycle: the plan said otherwise
        return []
    order, parents = found
    durations = {step_id: float(steps[step_id].duration_s or 0.0) for step_id in ids}
    return longest_path(order, parents.__getitem__, durations)[0]


class _RunPath:
    """:func:`_critical_path` of a run's steps worked out one step at a time, steps given
    in the order of their ids, for as long as each step's parents among the steps come
    before it and no step finishes at NaN (:attr:`going`; else the caller asks
    :func:`_critical_path`): the same answer as :func:`plandag.dag.graph.longest_path`'s
    (a step finishes at its latest parent's finish, ties to the smallest parent id, plus
    its duration, None counting 0; the path ends at the smallest id among the steps
    finishing last), without building the order and the parents' mapping first.

    Args:
        steps: the run's steps by id (a parent that is not one of them is left out).
    """

    __slots__ = ("_end", "_finish", "_last", "_previous", "_steps", "going")

    def __init__(self, steps: Mapping[int, StepRecord]) -> None:
        self._steps = steps
        self._finish: dict[int, float] = {}
        self._previous: dict[int, int | None] = {}
        self._end: int | None = None
        self._last = 0.0
        self.going = True

    def add(self, step_id: int, parents: Sequence[int] | None, duration: float | None) -> None:
        """Add the step ``step_id`` (larger than every id added before) with its
        ``parents`` (None: none) and ``duration_s``."""
        finish = self._finish
        best, best_parent = 0.0, None
        for parent in parents or ():
            at = finish.get(parent)
            if at is None:
                if parent in self._steps:  # a parent after the step (or the step itself)
                    self.going = False
                    return
                continue  # not a step of the run: left out
            if best_parent is None or at > best or (at == best and parent < best_parent):
                best, best_parent = at, parent
        try:
            at = best + float(duration or 0.0)
        except (TypeError, ValueError):  # not a number: _critical_path says so
            self.going = False
            return
        if at != at:  # NaN: longest_path takes its own order from there
            self.going = False
            return
        finish[step_id] = at
        self._previous[step_id] = best_parent
        if self._end is None or at > self._last:
            self._last, self._end = at, step_id

    def path(self) -> list[int]:
        """The critical path of the steps added: their ids, first to last."""
        end = self._end
        if end is None:
            return []
        previous = self._previous
        path = [end]
        while (before := previous[path[-1]]) is not None:
            path.append(before)
        path.reverse()
        return path


def _span_state(record: StepRecord, parents: Any, args: Any) -> tuple[Any, ...]:
    """What a step's span shows, compared by value or by identity (a result, args): equal
    states give the same span. One flat tuple (a step's state is kept until the run ends);
    ``parents`` is held as it is: the writer replaces a step's list of parents, never
    changes it in place."""
    attempts = record.attempt_log
    if not attempts:
        last_ended, last_reason, last_error, last_retry, last_children = (None,) * 5
    else:
        last = attempts[-1]
        last_ended, last_reason, last_error, last_retry = (
            last.ended_at,
            last.reason,
            last.error,
            last.retry,
        )
        last_children = len(last.children)
    return (
        record.status,
        record.reason,
        record.detail,
        record.error,
        record.started_at,
        record.ended_at,
        parents,
        id(args),
        id(record.result),
        record.superseded_by,
        len(record.checks),
        len(attempts),
        last_ended,
        last_reason,
        last_error,
        last_retry,
        last_children,
    )


def _diagnostic_dict(diagnostic: Any) -> dict[str, Any]:
    if isinstance(diagnostic, Mapping):
        source: Mapping[str, Any] = diagnostic
    elif dataclasses.is_dataclass(diagnostic) and not isinstance(diagnostic, type):
        source = dataclasses.asdict(diagnostic)
    else:
        source = {"message": str(diagnostic)}
    return {
        "code": source.get("code"),
        "severity": source.get("severity", "error"),
        "step_id": source.get("step_id"),
        "message": source.get("message"),
    }
