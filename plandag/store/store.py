"""The run store: an embedded SQLite database of every run (docs/durable-runs.md).

What it holds, per run: the run (command, goal, params, the options needed to run it again,
status, spend), every plan version (hash, text, who approved it), every step (tool, state,
inputs, result, error, attempts, times) and every state transition, decisions, LLM calls
and events; per ``extract`` batch, one row per document. Large results live as files beside
the database (``blobs/ab/abcdef....json``), referenced by their SHA-256.

No secret is stored: JSON values are sealed (a secret environment variable's value kept as
its name, other credentials masked) and every text bound to a statement or written as a
blob is masked (:mod:`plandag.store.sealing`); ``resume`` and ``approve`` unseal what they
read back.

Durability (SQLite in WAL mode with ``synchronous=FULL``: a committed transaction survives
a crash, a torn one is rolled back — https://www.sqlite.org/wal.html): every write happens
inside a transaction, so a crash at any moment leaves a consistent store. Writes that may be
lost in a crash (transitions and results of steps without effects, events, documents) are
queued and committed in groups by a thread of the store's own, off the event loop, within
0.2 s (:meth:`Store.write` with ``durable=False``; :mod:`plandag.store.writer`). Plan
versions, decisions, escalations and the run's state are committed before the call returns,
after the queue (so the store never holds a later write without an earlier one; a run's
final state may instead be handed to the writer's thread, :meth:`Store.update_run_soon`,
and waited for before the run is reported ended); a step with
effects is committed as started before its tool is called and as ended as soon as it ends
(``durable=True``), so resume knows which effects may have happened. Every read commits the
queue first, so it sees every write made before it in this process.
The WAL is copied into the database (checkpointed) by the writer's connection only, as its
commits pass SQLite's 1,000 pages: a transaction of the caller's (a run's start) never
waits for a checkpoint.

The default database is ``$PLANDAG_STORE`` when set, else ``runs.sqlite3`` in the user's
data folder (``platformdirs.user_data_path("plandag")``: ``~/.local/share/plandag`` on
Linux).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import platformdirs

from plandag.errors import InputError
from plandag.scheduler.canonical import is_plain_json
from plandag.scheduler.estimate import MEASURED_LATEST_STEPS, MEASURED_MIN_RUNS
from plandag.scheduler.result import to_jsonable
from plandag.store.migrations import migrate
from plandag.store.owner import process_started, this_process_started
from plandag.store.sealing import (
    SecretMaskingConnection,
    scrubbed_text,
    seal,
    sealed_store_json_text,
    sealed_store_text,
)
from plandag.store.writer import (
    FLUSH_INTERVAL_S,
    GroupWriter,
    Item,
    Row,
    execute_rows,
    flush_writers,
    statement_table,
)
from plandag.surrogates import escape_json_text
from plandag.trace.redact import environment_secrets, scrub_secret_values

__all__ = [
    "BLOB_THRESHOLD_BYTES",
    "DecisionRow",
    "DocumentRow",
    "EscalationRow",
    "InstructionRow",
    "PlanVersionRow",
    "RunRow",
    "StepDecisionRow",
    "StepRow",
    "Store",
    "default_store_path",
    "open_store",
    "store_json",
]

BLOB_THRESHOLD_BYTES = 64 * 1024
"""Results whose JSON is larger than this are written as files beside the database."""


_LISTED = "INSERT OR IGNORE INTO tool_run (run_id, tool) VALUES (?, ?)"
"""Lists a run for a tool it succeeded in (:meth:`Store.write_steps`, ``tools``)."""

_STEP_STATE = (
    "UPDATE step SET status = ?1, attempts = COALESCE(?2, attempts), "
    "started_at = COALESCE(started_at, ?3), args = COALESCE(?4, args), "
    "reason = CASE WHEN ?5 THEN ?6 ELSE reason END, "
    "detail = CASE WHEN ?5 THEN ?7 ELSE detail END, "
    "ended_at = CASE WHEN ?5 THEN ?8 ELSE ended_at END, "
    "duration_s = CASE WHEN ?5 THEN ?9 ELSE duration_s END, "
    "result = CASE WHEN ?5 THEN ?10 ELSE result END, "
    "result_hash = CASE WHEN ?5 THEN ?11 ELSE result_hash END, "
    "error = CASE WHEN ?5 THEN ?12 ELSE error END, "
    "segment = ?13 WHERE run_id = ?14 AND step_id = ?15"
)
"""A step's start (``?5`` 0: state, attempt, start time, inputs) or end (``?5`` 1: state,
reason, detail, end time, duration, result, error): one statement for both, so the writer
commits a group's step rows in one ``executemany``."""
_STARTED = 0
_ENDED = 1
"""``?5`` of :data:`_STEP_STATE`."""
_UNREAD = 0
"""Bound for the parameters a row of :data:`_STEP_STATE` leaves unread (a start's
``?6``-``?12``): the sqlite3 module binds a number directly, where a None costs it a look-up
for an adapter."""
_STEP_RAN = (
    "UPDATE step SET status = ?1, attempts = COALESCE(?2, attempts), "
    "started_at = COALESCE(started_at, ?3), args = COALESCE(?4, args), reason = NULL, "
    "detail = NULL, ended_at = ?5, duration_s = ?6, result = ?7, result_hash = NULL, "
    "error = NULL, segment = ?8 WHERE run_id = ?9 AND step_id = ?10"
)
"""A step's start and end merged (:func:`_merged_step_rows`) when the end has no reason,
detail, result blob or error (a plain success): :data:`_STEP_STATE` with those columns set
to NULL in the statement, not bound (10 parameters instead of 15, no ``CASE``)."""


_START_EVENT = 0
_END_EVENT = 1
"""The first item of a step's start or end as the writer's queue holds it
(:meth:`Store.queue_step_start`: ``(0, run_id, step_id, attempt, at, args_text, segment)``;
:meth:`Store.queue_step_end`: ``(1, run_id, step_id, status, at, attempt, reason, detail,
duration_s, result, result_hash, error, segment)``): one flat tuple an event, which the
writer's thread turns into the step row's and the transition's statements
(:func:`_event_rows`), instead of two ``(sql, args)`` rows and their parameters made on the
event loop and kept alive in the queue."""


def _event_rows(event: tuple[Any, ...]) -> tuple[Row, Row]:
    """The rows of a queued step start or end: its :data:`_STEP_STATE` row and its
    transition, as they are written when nothing is merged."""
    if event[0] == _START_EVENT:
        _, run_id, step_id, attempt, at, args_text, segment = event
        return (
            (
                _STEP_STATE,
                (
                    "running",
                    attempt,
                    at,
                    args_text,
                    _STARTED,
                    _UNREAD,
                    _UNREAD,
                    _UNREAD,
                    _UNREAD,
                    _UNREAD,
                    _UNREAD,
                    _UNREAD,
                    segment,
                    run_id,
                    step_id,
                ),
            ),
            (_TRANSITION_PLAIN, (run_id, step_id, attempt, "running", at, segment)),
        )
    return _ended_rows(event, None, None, None)


def _ended_rows(
    event: tuple[Any, ...], attempts: Any, started_at: Any, args_text: Any
) -> tuple[Row, Row]:
    """A queued step end's :data:`_STEP_STATE` row, with ``attempts``, ``started_at`` and
    ``args_text`` as its start's (None: the columns are kept as they are), and its
    transition."""
    (_, run_id, step_id, status, at, attempt, reason, detail, duration_s) = event[:9]
    result, result_hash, error, segment = event[9:]
    return (
        (
            _STEP_STATE,
            (
                status,
                attempts,
                started_at,
                args_text,
                _ENDED,
                reason,
                detail,
                at,
                duration_s,
                result,
                result_hash,
                error,
                segment,
                run_id,
                step_id,
            ),
        ),
        (_TRANSITION_PLAIN, (run_id, step_id, attempt, status, at, segment))
        if reason is None
        else (_TRANSITION, (run_id, step_id, attempt, status, reason, at, segment)),
    )


def _step_rows(group: list[Item]) -> list[Row]:
    """``group`` with each queued step start or end as its two rows, in its place: every
    row written as it was queued (the writer's rows when nothing is merged)."""
    rows: list[Row] = []
    for item in group:
        if type(item[0]) is int:
            rows.extend(_event_rows(item))
        else:
            rows.append(item)
    return rows


def _merged_step_rows(group: list[Item], *, narrow: bool = False) -> list[Row]:
    """``group`` with each step's start merged into its end when both are in it: one
    :data:`_STEP_STATE` row with the start's attempt, start time and inputs and the end's
    state, in the end's place (an update of the step's row costs SQLite more than the rest
    of the step's writes together). The same rows result: both set the state, the start
    sets only the attempt, the start time (when none is set) and the inputs, the end only
    its own columns; a start is merged only when no other write to the ``step`` table
    comes between the two (a start never moves past one). Each group is one transaction,
    so no reader ever saw the state between them. ``narrow``: a merged row whose end has
    no reason, detail, result blob or error is a :data:`_STEP_RAN` row (the same update).
    Queued step starts and ends (:data:`_START_EVENT`) become their rows here
    (:func:`_event_rows`), a merged start's without being made."""
    starts: dict[tuple[Any, Any], int] = {}
    merged: list[Any] = []
    append = merged.append
    dropped = False
    loose = 0  # queued starts placed in merged and not merged since
    for row in group:
        kind = row[0]
        if kind is _START_EVENT:
            starts[(row[1], row[2])] = len(merged)
            append(row)  # made a row at the end unless its end is merged into it
            append((_TRANSITION_PLAIN, (row[1], row[2], row[3], "running", row[4], row[6])))
            loose += 1
            continue
        if kind is _END_EVENT:
            (_, run_id, step_id, status, at, attempt, reason, detail, duration_s) = row[:9]
            result, result_hash, error, segment = row[9:]
            start = starts.pop((run_id, step_id), None)
            if start is None:
                merged.extend(_event_rows(row))
                continue
            begun = merged[start]
            merged[start] = None
            dropped = True
            loose -= 1
            attempts, started_at, args_text = begun[3], begun[4], begun[5]
            if (
                narrow
                and reason is None
                and detail is None
                and result_hash is None
                and error is None
            ):
                append(
                    (
                        _STEP_RAN,
                        (
                            status,
                            attempts,
                            started_at,
                            args_text,
                            at,
                            duration_s,
                            result,
                            segment,
                            run_id,
                            step_id,
                        ),
                    )
                )
                append((_TRANSITION_PLAIN, (run_id, step_id, attempt, status, at, segment)))
            else:
                merged.extend(_ended_rows(row, attempts, started_at, args_text))
            continue
        if starts and kind not in _TRANSITIONS and statement_table(kind) in ("step", None):
            starts.clear()  # another write of the step table: no start moves past it
        append(row)
    if loose:
        return [
            (_event_rows(item)[0] if item[0] is _START_EVENT else item)
            for item in merged
            if item is not None
        ]
    if not dropped:
        return merged if len(merged) != len(group) else group
    return [row for row in merged if row is not None]


_TRANSITION = (
    "INSERT INTO transition (run_id, step_id, attempt, state, reason, time, segment) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_TRANSITION_PLAIN = (
    "INSERT INTO transition (run_id, step_id, attempt, state, reason, time, segment) "
    "VALUES (?, ?, ?, ?, NULL, ?, ?)"
)
"""A transition without a reason (its NULL in the statement, not bound)."""
_TRANSITIONS = frozenset({_TRANSITION, _TRANSITION_PLAIN})
"""Statements that write no row of the ``step`` table (:func:`_merged_step_rows` merges a
start past them)."""


_USAGE_COLUMNS: tuple[tuple[str, bool], ...] = (
    ("requests", True),
    ("failed_requests", True),
    ("input_tokens", True),
    ("output_tokens", True),
    ("cost_usd", False),
)
"""The ``document`` table's usage columns, and whether each holds a whole number."""
_DOCUMENT_COLUMNS = (
    "batch_id, idx, input, status, record, result_hash, error, time, requests, "
    "failed_requests, input_tokens, output_tokens, cost_usd"
)


def _usage_number(usage: Mapping[str, Any] | None, key: str, whole: bool) -> int | float | None:
    """``usage[key]`` when it is a finite number >= 0 (an int for a count), else None."""
    value = usage.get(key) if usage is not None else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return int(value) if whole else float(value)


def default_store_path() -> Path:
    """``$PLANDAG_STORE`` when set and not empty, else ``runs.sqlite3`` in the user's data
    folder (``platformdirs.user_data_path("plandag")``)."""
    configured = os.environ.get("PLANDAG_STORE", "").strip()
    if configured:
        return Path(configured).expanduser()
    return platformdirs.user_data_path("plandag") / "runs.sqlite3"


def open_store(path: Path | str | None = None) -> Store:
    """Open (creating when needed) the run store at ``path`` (default
    :func:`default_store_path`).

    Raises:
        InputError: the file cannot be created or is not a plandag store (what, where, and
            to pick another with ``--store PATH`` or ``PLANDAG_STORE``).
    """
    return Store(Path(path) if path is not None else default_store_path())


def store_json(value: Any, *, jsonable: bool = False, text: str | None = None) -> str:
    """``value`` as the store's JSON text: sealed first (no secret; the rules are
    :mod:`plandag.store.sealing`'s), compact, UTF-8 kept, lone surrogates escaped
    (:func:`plandag.surrogates.escape_json_text`). Every JSON column is written so.

    Args:
        value: any value (converted by :func:`~plandag.scheduler.result.to_jsonable`).
        jsonable: ``value`` is JSON data already, as ``to_jsonable`` returns it (its
            output, or a value it returns unchanged): not converted again.
        text: with ``jsonable``, ``json.dumps(value, ensure_ascii=False,
            separators=(",", ":"), allow_nan=False)`` when the caller has it already
            (:func:`~plandag.scheduler.result.jsonable_result_text`), or None. It is
            checked and sealed as the text encoded here would be.
    """
    if value is None:  # texts too short for any rule (SHORTEST_SECRET_TEXT): as they are
        return "null"
    kind = type(value)
    if (kind is dict or kind is list) and not value:
        return "{}" if kind is dict else "[]"
    if not jsonable:
        value, text = to_jsonable(value), None
    try:
        # the same text, marked as checked: the masking connection does not scan it again
        return sealed_store_text(value, text=text)
    except (TypeError, ValueError):
        return escape_json_text(json.dumps(seal(value), ensure_ascii=False, separators=(",", ":")))


_dumps = store_json

_Row = tuple[str, tuple[Any, ...]]


def _run_row(
    run_id: str,
    command: str,
    goal: str | None,
    params: Mapping[str, Any],
    options: Mapping[str, Any],
    status: str,
    now: float,
) -> _Row:
    """The statement that records a new run held by this process (:meth:`Store.create_run`)."""
    return (
        "INSERT INTO run (run_id, created, updated, command, goal, status, params, "
        "options, pid, pid_started) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            run_id,
            now,
            now,
            command,
            goal,
            status,
            _dumps(dict(params)),
            _dumps(dict(options)),
            os.getpid(),
            this_process_started(),
        ),
    )


def _plan_version_rows(
    run_id: str,
    version: int,
    plan: Mapping[str, Any],
    plan_hash: str,
    source: str,
    estimate: Mapping[str, Any] | None,
    text: str | None,
    now: float,
    estimate_text: str | None = None,
) -> list[_Row]:
    """The statements that record a plan version and make it the run's current one
    (:meth:`Store.add_plan_version`); ``estimate_text``: ``store_json(estimate)`` when the
    caller made it already."""
    if estimate_text is None and estimate is not None:
        estimate_text = _record_json(estimate)
    return [
        (
            "INSERT INTO plan_version (run_id, version, hash, plan, source, created, "
            "estimate) VALUES (?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (run_id, version) DO UPDATE SET hash = excluded.hash, "
            "plan = excluded.plan, source = excluded.source, "
            "estimate = COALESCE(excluded.estimate, plan_version.estimate)",
            (
                run_id,
                version,
                plan_hash,
                text if text is not None else _record_json(plan),
                source,
                now,
                estimate_text,
            ),
        ),
        ("UPDATE run SET version = ?, updated = ? WHERE run_id = ?", (version, now, run_id)),
    ]


def _declare(
    connection: sqlite3.Connection,
    run_id: str,
    steps: Sequence[tuple[int, str, str]],
    segment: int,
) -> None:
    """Insert steps ``(step_id, tool, effects)`` as ``pending`` in the transaction under way
    (existing rows are kept: :meth:`Store.declare_steps`)."""
    execute_rows(
        connection,
        "INSERT OR IGNORE INTO step (run_id, step_id, tool, effects, segment) "
        "VALUES (?, ?, ?, ?, ?)",
        [(run_id, step_id, tool, effects, segment) for step_id, tool, effects in steps],
    )


def _record_json(value: Mapping[str, Any]) -> str:
    """:func:`store_json` of a mapping recorded once per run (a plan version, its estimate):
    written without converting it first when it is plain JSON data
    (:func:`~plandag.scheduler.canonical.is_plain_json`: ``to_jsonable`` would return an
    equal copy)."""
    value = dict(value)
    if value and is_plain_json(value):
        return sealed_store_text(value)
    return store_json(value)


@dataclasses.dataclass(frozen=True)
class RunRow:
    """A run as stored. ``status`` is ``running`` while a process runs it (or crashed
    doing so: :attr:`crashed`), else a run state of ARCHITECTURE.md. ``pid`` and
    ``pid_started``: the process running it and that process's start time (None when no
    process holds it; :mod:`plandag.store.owner`). Times: seconds since the epoch."""

    run_id: str
    created: float
    updated: float
    command: str
    goal: str | None
    status: str
    params: dict[str, Any]
    options: dict[str, Any]
    version: int
    segment: int
    pid: int | None
    spent_usd: float
    spent_tokens: int
    awaiting_since: float | None
    expires_at: float | None
    awaiting_reason: str | None
    detail: str | None
    pid_started: float | None = None

    @property
    def crashed(self) -> bool:
        """The run is ``running`` but no live process holds it: its process died (killed,
        crashed, the machine restarted) and ``plandag resume`` goes on with it. Derived
        each time it is read, from the recorded process id and start time (a process
        given the same id later is not its owner); never stored."""
        from plandag.store.owner import owner_alive

        return self.status == "running" and not owner_alive(self.pid, self.pid_started)

    @property
    def state(self) -> str:
        """The run's state as shown (``plandag runs``, the console): ``crashed`` for a run
        whose process died while running it (:attr:`crashed`), else :attr:`status`."""
        return "crashed" if self.crashed else self.status

    def as_dict(self) -> dict[str, Any]:
        """The row as a JSON-ready dict, with its :attr:`state`."""
        return {**dataclasses.asdict(self), "state": self.state}


@dataclasses.dataclass(frozen=True)
class PlanVersionRow:
    """One version of a run's plan: its hash (``plandag.approval.plan_hash``), the plan's
    JSON, where it came from (``stored``, ``library``, ``planner``, ``replan``, ``revision``,
    ``amended``), who approved it (None: not approved), when it was first shown to a
    person for a decision (None: never), and its estimate
    (:meth:`plandag.scheduler.estimate.PlanEstimate.as_json`: ``cost_usd``, ``seconds``,
    ``critical_path``, ``unknown``...; None when none was recorded)."""

    run_id: str
    version: int
    hash: str
    plan: dict[str, Any]
    source: str
    created: float
    approved_by: str | None
    approved_at: float | None
    shown_at: float | None = None
    estimate: dict[str, Any] | None = None


@dataclasses.dataclass(frozen=True)
class StepRow:
    """A step as stored: its last known state (``running`` after a crash means its outcome
    is unknown), resolved inputs, result and error."""

    run_id: str
    step_id: int
    tool: str
    effects: str
    status: str
    reason: str | None
    detail: str | None
    attempts: int
    started_at: float | None
    ended_at: float | None
    duration_s: float | None
    args: Any
    result: Any
    result_hash: str | None
    error: dict[str, Any] | None
    superseded_by: list[int] | None
    segment: int


@dataclasses.dataclass(frozen=True)
class DecisionRow:
    """An approval decision: ``approved``, ``rejected``, ``expired``, or ``asked``."""

    run_id: str
    version: int
    plan_hash: str
    decision: str
    who: str | None
    feedback: str | None
    time: float


@dataclasses.dataclass(frozen=True)
class EscalationRow:
    """A run handed to a person (ARCHITECTURE.md, "States"): why, the case as JSON
    (``context``: see :func:`plandag.escalation.escalation_context`), ``open`` until a
    person decides, then ``closed`` with the decision (``resumed``, ``approved`` or
    ``abandoned``), who took it, when (seconds since the epoch) and their note (the
    instruction or the reason)."""

    id: int
    run_id: str
    time: float
    reason: str
    context: dict[str, Any]
    status: str
    decision: str | None
    who: str | None
    decided_at: float | None
    note: str | None


@dataclasses.dataclass(frozen=True)
class StepDecisionRow:
    """A person's decision on one step of a plan version: ``approved``, ``edited`` (with
    the step's arguments after the edit), ``rejected``, or ``dropped`` (downstream of a
    rejected step)."""

    run_id: str
    version: int
    step_id: int
    decision: str
    args: Any
    who: str | None
    time: float


@dataclasses.dataclass(frozen=True)
class DocumentRow:
    """One document of an ``extract`` batch: its input path, status and record (or error),
    and what its model calls used (``usage``: ``{"requests", "failed_requests",
    "input_tokens", "output_tokens", "cost_usd"}``, None when not recorded: a job that
    makes no model call, or a row written before plandag recorded it)."""

    batch_id: str
    idx: int
    input: str
    status: str
    record: Any
    error: str | None
    time: float
    usage: dict[str, Any] | None = None


@dataclasses.dataclass(frozen=True)
class InstructionRow:
    """A person's instruction to a running run (``plandag tell``): its text verbatim, who
    gave it and when, whether it replaces the run's goal, and when the run took it (None:
    not yet). Times: seconds since the epoch."""

    id: int
    run_id: str
    time: float
    who: str | None
    text: str
    new_goal: bool
    consumed_at: float | None


class Store:
    """The run store (see the module docstring). Not thread-safe: use it from one thread
    (the event loop's); open another ``Store`` in another process. The writes that may wait
    are committed by a thread of the store's own (:class:`~plandag.store.writer.GroupWriter`).

    Args:
        path: the database file; its folder is created when missing.
        busy_timeout_s: how long a write waits for another process's lock before it fails
            (SQLite's busy timeout), seconds.
        flush_interval_s: the longest a queued write waits before it is committed, seconds
            (default 0.2: :data:`plandag.store.writer.FLUSH_INTERVAL_S`).

    Raises:
        InputError: the database cannot be opened or created there.
    """

    def __init__(
        self,
        path: Path,
        *,
        busy_timeout_s: float = 10.0,
        flush_interval_s: float = FLUSH_INTERVAL_S,
    ) -> None:
        self.path = path
        self.root = path.parent
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            # Every text bound to a statement is masked (SecretMaskingConnection); JSON
            # values are sealed before (_dumps): the database never holds a secret.
            self.connection = sqlite3.connect(
                path,
                timeout=busy_timeout_s,
                isolation_level=None,
                factory=SecretMaskingConnection,
            )
            self.connection.execute("PRAGMA journal_mode=WAL")
            self.connection.execute("PRAGMA synchronous=FULL")
            # the writer's connection checkpoints the WAL (SQLite's automatic checkpoint at
            # 1,000 pages, off the caller's thread): a transaction here never pays for one
            self.connection.execute("PRAGMA wal_autocheckpoint=0")
            migrate(self.connection)
        except (OSError, sqlite3.Error) as error:
            raise InputError(
                f"run store {path}: cannot open it ({error}); pick another file with "
                "--store PATH or the PLANDAG_STORE environment variable"
            ) from error
        self.writer = GroupWriter(
            path,
            busy_timeout_s=busy_timeout_s,
            interval_s=flush_interval_s,
            coalesce=functools.partial(_merged_step_rows, narrow=True),
            expand=_step_rows,
        )
        """The thread that commits the queued writes in groups."""

    # -- plumbing --------------------------------------------------------------------------

    def close(self) -> None:
        """Commit what is queued, stop the writer's thread and close the database.

        Raises:
            sqlite3.Error: the queued writes could not be committed (the database is closed
                all the same).
        """
        try:
            self.writer.close()
        finally:
            self.connection.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE`` … ``COMMIT``; rolled back on error),
        after every queued write is committed (:meth:`flush`: the store never holds a later
        write without an earlier one)."""
        self.writer.flush()
        connection = self.connection
        connection.execute("BEGIN IMMEDIATE")
        try:
            yield connection
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")

    def write(self, sql: str, args: tuple[Any, ...], *, durable: bool) -> None:
        """Run one write. ``durable``: committed (with everything queued before it) before
        this returns; otherwise queued for the writer's next group (committed within
        ``flush_interval_s``; lost in a crash before then)."""
        if durable:
            self.writer.commit(((sql, args),))
        else:
            self.writer.submit(sql, args)

    def writes(self, rows: Sequence[tuple[str, tuple[Any, ...]]], *, durable: bool) -> None:
        """:meth:`write` of several ``(sql, args)`` rows, in order, queued at once."""
        if durable:
            self.writer.commit(rows)
        else:
            self.writer.submit_many(rows)

    def flush(self, *, durable: bool = True) -> None:
        """Return once every queued write is committed (in one or more groups, each one
        transaction with ``synchronous=FULL``).

        Args:
            durable: kept for callers of an earlier version; every group is synced.

        Raises:
            sqlite3.Error: a commit failed (the database is locked past the busy timeout,
                the disk is full); the writes stay queued and are tried again.
        """
        del durable
        self.writer.flush()

    def _visible(self) -> None:
        """Before a read: commit what this store and the other stores of this process on
        the same database have queued, so the read sees it."""
        self.writer.flush()
        flush_writers(self.path, besides=self.writer)

    def trace_path(self, run_id: str) -> Path:
        """The run's trace file (``traces/RUN_ID.jsonl`` beside the database)."""
        return self.root / "traces" / f"{run_id}.jsonl"

    def put_blob(self, text: str) -> str:
        """Write ``text`` as a blob file (atomically, fsynced) and return its SHA-256.
        Credential values in it are masked first, as in the database."""
        data = escape_json_text(scrub_secret_values(text)).encode("utf-8")
        digest = hashlib.sha256(data).hexdigest()
        target = self.root / "blobs" / digest[:2] / f"{digest}.json"
        if target.exists():
            # Reused: refresh its time, so store upkeep (plandag.store.gc) sees it as recent
            # while the row that references it may still be queued.
            with contextlib.suppress(OSError):
                os.utime(target)
            return digest
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        return digest

    def get_blob(self, digest: str) -> str:
        """The text of blob ``digest``.

        Raises:
            InputError: the blob file is missing (the store was copied without ``blobs/``).
        """
        target = self.root / "blobs" / digest[:2] / f"{digest}.json"
        try:
            return target.read_text(encoding="utf-8")
        except OSError as error:
            raise InputError(
                f"run store {self.path}: result blob {digest} is missing ({error}); copy the "
                "blobs/ folder with the database"
            ) from error

    def _record_columns(
        self, record: Any, record_json: str | None = None
    ) -> tuple[str | None, str | None]:
        """:meth:`value_columns` of an ``extract`` record, without the :func:`to_jsonable`
        pass when the record is JSON data already (what ``json.dumps`` accepts with
        ``allow_nan=False``, as the record file's writer does); sealed either way.
        ``record_json``: the record's compact JSON text when the caller has it (see
        :meth:`record_document`)."""
        try:
            text = sealed_store_text(record, text=record_json)
        except (TypeError, ValueError):
            return self.value_columns(record)
        if len(text) > BLOB_THRESHOLD_BYTES:
            return None, self.put_blob(text)
        return text, None

    def value_columns(
        self, value: Any, *, jsonable: bool = False, text: str | None = None
    ) -> tuple[str | None, str | None]:
        """(inline JSON, blob hash): large values go to a blob file. ``jsonable`` and
        ``text``: as for :func:`store_json`."""
        text = _dumps(value, jsonable=jsonable, text=text)
        if len(text) > BLOB_THRESHOLD_BYTES:
            return None, self.put_blob(text)
        return text, None

    # -- runs ------------------------------------------------------------------------------

    def create_run(
        self,
        run_id: str,
        *,
        command: str,
        goal: str | None,
        params: Mapping[str, Any],
        options: Mapping[str, Any],
        status: str = "running",
    ) -> None:
        """Record a new run, held by this process (committed at once)."""
        self.write(
            *_run_row(run_id, command, goal, params, options, status, time.time()), durable=True
        )

    def create_run_with_plan(
        self,
        run_id: str,
        *,
        command: str,
        goal: str | None,
        params: Mapping[str, Any],
        options: Mapping[str, Any],
        plan: Mapping[str, Any],
        plan_hash: str,
        source: str,
        estimate: Mapping[str, Any] | None = None,
        text: str | None = None,
        steps: Sequence[tuple[int, str, str]] = (),
        estimate_text: str | None = None,
    ) -> None:
        """:meth:`create_run` (status ``running``), :meth:`add_plan_version` of its
        version 1 and :meth:`declare_steps` of ``steps`` (segment 0), in one transaction
        (committed at once: one sync of the disk instead of three; the run is never stored
        without its plan and its steps). Arguments as those methods take them;
        ``estimate_text``: ``store_json(estimate)`` when the caller made it already (it is
        stored as it is), or None."""
        now = time.time()
        rows = _plan_version_rows(
            run_id, 1, plan, plan_hash, source, estimate, text, now, estimate_text
        )
        with self.transaction() as connection:
            connection.execute(*_run_row(run_id, command, goal, params, options, "running", now))
            for row in rows:
                connection.execute(*row)
            if steps:
                _declare(connection, run_id, steps, 0)

    def update_run(self, run_id: str, **fields: Any) -> None:
        """Set columns of a run (``status``, ``segment``, ``spent_usd``, ``awaiting_since``,
        ``expires_at``, ``awaiting_reason``, ``detail``, ``pid``, ``version``, ``options``,
        ``params``), committed at once. Setting ``pid`` records that process's start time
        with it (None with None) unless ``pid_started`` is given too."""
        self.write(*self._run_update(run_id, fields), durable=True)

    def update_run_soon(self, run_id: str, **fields: Any) -> Callable[[], None]:
        """:meth:`update_run`, handed to the writer's thread to commit now (with every
        write queued before it, in one transaction) while the caller goes on.

        Returns:
            A function that returns once the update is committed, and raises
            :class:`sqlite3.Error` when its commit failed (the writes stay queued and are
            tried again, as :meth:`flush` says).

        Raises:
            ValueError: an unknown column.
            RuntimeError: the store is closed.
        """
        return self.writer.commit_soon((self._run_update(run_id, fields),))

    @staticmethod
    def _run_update(run_id: str, fields: dict[str, Any]) -> _Row:
        """The statement of :meth:`update_run`."""
        allowed = {
            "status",
            "segment",
            "spent_usd",
            "spent_tokens",
            "awaiting_since",
            "expires_at",
            "awaiting_reason",
            "detail",
            "pid",
            "pid_started",
            "version",
            "options",
            "params",
        }
        unknown = set(fields) - allowed
        if unknown:
            raise ValueError(f"unknown run columns: {sorted(unknown)}")
        for name in ("options", "params"):
            if name in fields:
                fields[name] = _dumps(dict(fields[name]))
        if "pid" in fields and "pid_started" not in fields:
            pid = fields["pid"]
            fields["pid_started"] = (
                None
                if pid is None
                else this_process_started()
                if pid == os.getpid()
                else process_started(pid)
            )
        columns = ", ".join(f"{name} = ?" for name in fields)
        return (
            f"UPDATE run SET {columns}, updated = ? WHERE run_id = ?",
            (*fields.values(), time.time(), run_id),
        )

    def claim_run(self, run_id: str, statuses: Sequence[str], pid: int | None) -> bool:
        """Atomically take run ``run_id`` for this process: set it ``running`` with
        ``pid`` when its state is one of ``statuses`` and its recorded process is still the
        one read by :meth:`run` (``pid``; a compare-and-swap, so of two processes that race
        to resume or approve the same run only one gets it).

        Args:
            run_id: the run.
            statuses: the states it may be taken from.
            pid: the process id :meth:`run` showed (None when none was recorded).

        Returns:
            True when this process took it; False when another did first or its state
            changed.
        """
        marks = ", ".join("?" for _ in statuses)
        with self.transaction() as connection:
            cursor = connection.execute(
                f"UPDATE run SET status = 'running', pid = ?, pid_started = ?, updated = ? "
                f"WHERE run_id = ? AND status IN ({marks}) AND pid IS ?",
                (os.getpid(), this_process_started(), time.time(), run_id, *statuses, pid),
            )
            return cursor.rowcount == 1

    def run(self, run_id: str, *, flush: bool = True) -> RunRow:
        """The run ``run_id`` (exact id).

        Args:
            run_id: the run.
            flush: commit the writes queued in this process first (:meth:`flush`); False
                reads the row as committed, which is the same row (a run's row is only
                written by writes committed at once: :meth:`create_run`,
                :meth:`update_run`...) without waiting for the queue.

        Raises:
            InputError: no such run.
        """
        if flush:
            self._visible()
        row = self.connection.execute("SELECT * FROM run WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            raise InputError(f"no run {run_id} in {self.path}; `plandag runs` lists the runs there")
        return self._run_row(row)

    @staticmethod
    def _run_row(row: Sequence[Any]) -> RunRow:
        values = list(row)
        values[6] = json.loads(values[6])
        values[7] = json.loads(values[7])
        return RunRow(*values)

    def runs(self, limit: int | None = None) -> list[RunRow]:
        """Every run, newest first (at most ``limit``)."""
        self._visible()
        sql = "SELECT * FROM run ORDER BY created DESC, rowid DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [self._run_row(row) for row in self.connection.execute(sql)]

    def crashed_runs(self) -> list[RunRow]:
        """The runs whose process died while running them (:attr:`RunRow.crashed`), oldest
        first: ``plandag resume`` goes on with each."""
        self._visible()
        rows = self.connection.execute(
            "SELECT * FROM run WHERE status = 'running' ORDER BY updated, rowid"
        )
        return [row for row in map(self._run_row, rows) if row.crashed]

    def resolve_run_id(self, text: str) -> str:
        """The run whose id is ``text`` or starts with it.

        Raises:
            InputError: no run matches, or the prefix matches several.
        """
        self._visible()
        text = text.strip()
        exact = self.connection.execute("SELECT run_id FROM run WHERE run_id = ?", (text,))
        if exact.fetchone() is not None:
            return text
        if not text:
            raise InputError("a run id is empty; `plandag runs` lists the runs")
        matches = [
            row[0]
            for row in self.connection.execute(
                "SELECT run_id FROM run WHERE substr(run_id, 1, ?) = ? ORDER BY run_id LIMIT 6",
                (len(text), text),
            )
        ]
        if not matches:
            raise InputError(
                f"no run {text!r} in {self.path}; `plandag runs` lists the runs there "
                "(another store: --store PATH or PLANDAG_STORE)"
            )
        if len(matches) > 1:
            shown = ", ".join(matches[:5]) + (", ..." if len(matches) > 5 else "")
            raise InputError(
                f"run id {text!r} is ambiguous in {self.path} ({shown}); give more characters"
            )
        return str(matches[0])

    # -- plan versions and decisions ---------------------------------------------------------

    def add_plan_version(
        self,
        run_id: str,
        version: int,
        plan: Mapping[str, Any],
        plan_hash: str,
        source: str,
        estimate: Mapping[str, Any] | None = None,
        *,
        text: str | None = None,
    ) -> None:
        """Record version ``version`` of the run's plan (committed at once) and make it the
        run's current version; ``estimate``: the plan's estimate as JSON
        (:meth:`plandag.scheduler.estimate.PlanEstimate.as_json`), or None; ``text``:
        ``store_json(plan)`` when the caller made it already (it is stored as it is), or
        None. A version recorded again (a run keeps each version as it compiles, then
        records it whole at its end) gets the new plan, hash and source, and keeps its
        estimate when none is given, its creation time, approval and the time it was
        shown."""
        now = time.time()
        with self.transaction() as connection:
            for row in _plan_version_rows(
                run_id, version, plan, plan_hash, source, estimate, text, now
            ):
                connection.execute(*row)

    def set_plan_estimate(self, run_id: str, version: int, estimate: Mapping[str, Any]) -> None:
        """Record the estimate of plan version ``version`` (committed at once), as JSON
        (:meth:`plandag.scheduler.estimate.PlanEstimate.as_json`)."""
        with self.transaction() as connection:
            connection.execute(
                "UPDATE plan_version SET estimate = ? WHERE run_id = ? AND version = ?",
                (_dumps(dict(estimate)), run_id, version),
            )

    def plan_versions(self, run_id: str) -> list[PlanVersionRow]:
        """Every plan version of the run, oldest first."""
        self._visible()
        rows = self.connection.execute(
            "SELECT run_id, version, hash, plan, source, created, approved_by, approved_at, "
            "shown_at, estimate FROM plan_version WHERE run_id = ? ORDER BY version",
            (run_id,),
        )
        return [
            PlanVersionRow(
                row[0],
                row[1],
                row[2],
                json.loads(row[3]),
                row[4],
                row[5],
                row[6],
                row[7],
                row[8],
                json.loads(row[9]) if row[9] is not None else None,
            )
            for row in rows
        ]

    def mark_shown(self, run_id: str, version: int, at: float | None = None) -> None:
        """Record that plan version ``version`` was shown to a person for a decision (the
        first time counts; committed at once)."""
        self.write(
            "UPDATE plan_version SET shown_at = COALESCE(shown_at, ?) "
            "WHERE run_id = ? AND version = ?",
            (time.time() if at is None else at, run_id, version),
            durable=True,
        )

    def shown_since_decision(self, run_id: str) -> list[PlanVersionRow]:
        """The plan versions shown to a person after the run's last decision (approved,
        rejected, amended or expired; ``asked`` is not a decision), oldest first: when
        there are several, a decision must name the one it is for by its hash."""
        decided = [
            decision.time for decision in self.decisions(run_id) if decision.decision != "asked"
        ]
        last = max(decided) if decided else None
        return [
            version
            for version in self.plan_versions(run_id)
            if version.shown_at is not None and (last is None or version.shown_at > last)
        ]

    def tool_durations(
        self,
        tools: Iterable[str] | None = None,
        *,
        min_runs: int = MEASURED_MIN_RUNS,
        latest: int = MEASURED_LATEST_STEPS,
    ) -> dict[str, float]:
        """Measured durations: per tool, the median ``duration_s`` of its latest ``latest``
        succeeded steps (latest by ``ended_at``, the time each ended), for tools that
        succeeded in at least ``min_runs`` distinct runs (ARCHITECTURE.md, "Brakes": the
        measured figure replaces the declared ``typical_seconds`` once there are 5 runs).

        The runs are counted over every stored succeeded step of the tool, not only the
        latest ``latest``: a tool with hundreds of steps a run is measured once it has
        succeeded in 5 runs, as a tool with one step a run is.

        Cost: per tool, at most ``min_runs`` rows of the list of runs each tool succeeded
        in (``tool_run``, schema migration 11: written as each run stops running) and at
        most ``latest`` entries of the index of succeeded steps' durations (migration 10)
        are read, newest first. Only when the runs listed and those of the latest entries
        are fewer than ``min_runs`` while there are ``latest`` entries (runs still running,
        or that crashed, hold older steps) are the tool's entries read again, oldest first,
        until ``min_runs`` distinct runs are found (at most the steps of its first
        ``min_runs`` runs). No stored step row is read, and the cost does not grow with the
        number of runs stored.

        Args:
            tools: the tool names wanted (None: every tool in the store).
            min_runs: distinct runs a tool must have succeeded in (default 5).
            latest: how many of its latest succeeded steps the median is taken over (a
                positive number; default 1,000).

        Returns:
            Seconds per tool name, in the order of the names; tools with fewer runs are left
            out.

        Raises:
            ValueError: ``latest`` is below 1.
        """
        self._visible()
        if latest < 1:
            raise ValueError(f"latest must be at least 1, not {latest}")
        # every query says the partial index's WHERE terms, or SQLite does not use it
        succeeded = "status = 'succeeded' AND duration_s IS NOT NULL"
        connection = self.connection
        if tools is None:
            # one seek in the index per tool, not a pass over its entries
            wanted = []
            row = connection.execute(
                f"SELECT tool FROM step WHERE {succeeded} ORDER BY tool LIMIT 1"
            ).fetchone()
            while row is not None:
                wanted.append(row[0])
                row = connection.execute(
                    f"SELECT tool FROM step WHERE tool > ? AND {succeeded} ORDER BY tool LIMIT 1",
                    row,
                ).fetchone()
        else:
            wanted = sorted(set(tools))
        latest_first = "ORDER BY ended_at DESC, duration_s DESC LIMIT ?"
        measured: dict[str, float] = {}
        for name in wanted:
            # every row there stands for succeeded steps of the tool in that run
            listed = connection.execute(
                "SELECT run_id FROM tool_run WHERE tool = ? LIMIT ?", (name, max(min_runs, 0))
            ).fetchall()
            if len(listed) >= min_runs:
                durations = connection.execute(
                    f"SELECT duration_s FROM step WHERE tool = ? AND {succeeded} {latest_first}",
                    (name, latest),
                ).fetchall()
                if durations:
                    measured[name] = statistics.median([float(row[0]) for row in durations])
                continue
            rows = connection.execute(
                f"SELECT duration_s, run_id FROM step WHERE tool = ? AND {succeeded} "
                f"{latest_first}",
                (name, latest),
            ).fetchall()
            if not rows:
                continue
            runs = len({row[1] for row in rows}.union(row[0] for row in listed))
            if runs < min_runs and len(rows) == latest:  # older steps may add runs
                (runs,) = connection.execute(
                    f"SELECT count(*) FROM (SELECT DISTINCT run_id FROM step WHERE tool = ? "
                    f"AND {succeeded} LIMIT ?)",
                    (name, min_runs),
                ).fetchone()
            if runs >= min_runs:
                measured[name] = statistics.median([float(row[0]) for row in rows])
        return measured

    def record_decision(
        self,
        run_id: str,
        version: int,
        plan_hash: str,
        decision: str,
        *,
        who: str | None = None,
        feedback: str | None = None,
    ) -> None:
        """Record a decision on plan version ``version`` (committed at once); an
        ``approved`` one also marks the version approved by ``who``. ``asked`` (a request
        made) marks the version shown (:meth:`mark_shown`) at that moment."""
        now = time.time()
        with self.transaction() as connection:
            connection.execute(
                "INSERT INTO decision (run_id, version, plan_hash, decision, who, feedback, "
                "time) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (run_id, version, plan_hash, decision, who, feedback, now),
            )
            if decision == "asked":
                connection.execute(
                    "UPDATE plan_version SET shown_at = COALESCE(shown_at, ?) "
                    "WHERE run_id = ? AND version = ?",
                    (now, run_id, version),
                )
            if decision == "approved":
                connection.execute(
                    "UPDATE plan_version SET approved_by = ?, approved_at = ? "
                    "WHERE run_id = ? AND version = ?",
                    (who or "unknown", now, run_id, version),
                )

    def record_step_decisions(
        self,
        run_id: str,
        version: int,
        decisions: Sequence[tuple[int, str, Any]],
        *,
        who: str | None,
    ) -> None:
        """Record the per-step decisions taken on plan version ``version`` (committed at
        once): ``(step_id, decision, args)`` with decision ``approved``, ``edited`` (args:
        the step's arguments after the edit), ``rejected`` or ``dropped`` (downstream of a
        rejected step)."""
        now = time.time()
        with self.transaction() as connection:
            connection.executemany(
                "INSERT INTO step_decision (run_id, version, step_id, decision, args, who, "
                "time) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        run_id,
                        version,
                        step_id,
                        decision,
                        _dumps(args) if args is not None else None,
                        who,
                        now,
                    )
                    for step_id, decision, args in decisions
                ],
            )

    def step_decisions(self, run_id: str) -> list[StepDecisionRow]:
        """Every per-step decision on the run, in the order taken."""
        self._visible()
        rows = self.connection.execute(
            "SELECT run_id, version, step_id, decision, args, who, time FROM step_decision "
            "WHERE run_id = ? ORDER BY id",
            (run_id,),
        )
        return [
            StepDecisionRow(
                row[0],
                row[1],
                row[2],
                row[3],
                json.loads(row[4]) if row[4] is not None else None,
                row[5],
                row[6],
            )
            for row in rows
        ]

    def decisions(self, run_id: str) -> list[DecisionRow]:
        """Every decision on the run, oldest first."""
        self._visible()
        rows = self.connection.execute(
            "SELECT run_id, version, plan_hash, decision, who, feedback, time FROM decision "
            "WHERE run_id = ? ORDER BY id",
            (run_id,),
        )
        return [DecisionRow(*row) for row in rows]

    # -- steps -----------------------------------------------------------------------------

    def declare_steps(
        self, run_id: str, steps: Sequence[tuple[int, str, str]], segment: int = 0
    ) -> None:
        """Record steps ``(step_id, tool, effects)`` as ``pending`` (existing rows are kept)."""
        with self.transaction() as connection:
            _declare(connection, run_id, steps, segment)

    def step_started(
        self,
        run_id: str,
        step_id: int,
        attempt: int,
        at: float,
        *,
        args: Any = None,
        args_jsonable: bool = False,
        segment: int = 0,
        durable: bool,
    ) -> None:
        """Record that attempt ``attempt`` of a step started (``durable``: committed before
        returning, so before the tool runs). ``args_jsonable``: ``args`` is JSON data
        already (:func:`store_json`'s ``jsonable``)."""
        self.queue_step_start(
            run_id, step_id, attempt, at, self.args_text(args, args_jsonable), segment, durable
        )

    def args_text(self, args: Any, jsonable: bool = False) -> str | None:
        """A step's inputs as the ``args`` column holds them: their JSON (:func:`store_json`),
        ``{"blob": HASH}`` for inputs written as a blob file, None for None. ``jsonable``:
        as for :func:`store_json`."""
        if args is None:
            return None
        if type(args) is dict and not args:
            return "{}"
        inline, digest = self.value_columns(args, jsonable=jsonable)
        return inline if inline is not None else json.dumps({"blob": digest})

    def queue_step_start(
        self,
        run_id: str,
        step_id: int,
        attempt: int,
        at: float,
        args_text: str | None,
        segment: int,
        durable: bool,
    ) -> None:
        """:meth:`step_started` with the inputs' column text made already
        (:meth:`args_text`): the step's row and its transition, queued (``durable``:
        committed before this returns)."""
        event = (_START_EVENT, run_id, step_id, attempt, at, args_text, segment)
        if durable:
            self.writer.commit((event,))
        else:
            self.writer.put(event)

    def step_ended(
        self,
        run_id: str,
        step_id: int,
        status: str,
        at: float,
        *,
        attempt: int = 0,
        reason: str | None = None,
        detail: str | None = None,
        duration_s: float | None = None,
        result: Any = None,
        result_jsonable: bool = False,
        error: Mapping[str, Any] | None = None,
        segment: int = 0,
        durable: bool,
    ) -> None:
        """Record a step's terminal state (with its result when it succeeded).
        ``result_jsonable``: ``result`` is JSON data already (:func:`store_json`'s
        ``jsonable``)."""
        inline, digest = (
            self.value_columns(result, jsonable=result_jsonable)
            if status == "succeeded"
            else (None, None)
        )
        self.queue_step_end(
            run_id,
            step_id,
            status,
            at,
            attempt,
            reason,
            detail,
            duration_s,
            inline,
            digest,
            _dumps(dict(error)) if error is not None else None,
            segment,
            durable,
        )

    def queue_step_end(
        self,
        run_id: str,
        step_id: int,
        status: str,
        at: float,
        attempt: int,
        reason: str | None,
        detail: str | None,
        duration_s: float | None,
        result: str | None,
        result_hash: str | None,
        error: str | None,
        segment: int,
        durable: bool,
    ) -> None:
        """:meth:`step_ended` with the result's columns (:meth:`value_columns`) and the
        error's JSON (:func:`store_json`) made already: the step's row and its transition,
        queued (``durable``: committed before this returns)."""
        event = (
            _END_EVENT,
            run_id,
            step_id,
            status,
            at,
            attempt,
            reason,
            detail,
            duration_s,
            result,
            result_hash,
            error,
            segment,
        )
        if durable:
            self.writer.commit((event,))
        else:
            self.writer.put(event)

    def write_steps(
        self,
        run_id: str,
        rows: Sequence[tuple[Any, ...]],
        segment: int = 0,
        *,
        durable: bool = True,
        tools: Iterable[str] = (),
    ) -> None:
        """Write steps' final states (a run's reconciliation at its end). Each row:
        ``(step_id, tool, effects, status, reason, detail, attempts, started_at, ended_at,
        duration_s, result JSON, result blob hash, error JSON, superseded_by JSON)``; a step
        that did not run in this segment keeps its segment.

        Args:
            run_id, rows, segment: as above.
            durable: True: in one transaction, committed before this returns; False: queued
                (:meth:`write`), committed with the next group or write committed at once.
            tools: names of tools with a succeeded step (its duration known) in the run, as
                the run ended: listed for the run, in the same transaction, as the runs
                :meth:`tool_durations` counts (the ``tool_run`` table; a run taken again, or
                one of its succeeded steps deleted, is no longer listed there).
        """
        writes: list[_Row] = []
        for row in rows:
            step_id, tool, effects, status = row[:4]
            writes.append(
                (
                    "INSERT OR IGNORE INTO step (run_id, step_id, tool, effects, segment) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (run_id, step_id, tool, effects, segment),
                )
            )
            writes.append(
                (
                    "UPDATE step SET status = ?, reason = ?, detail = ?, attempts = "
                    "CASE WHEN ? > 0 THEN ? ELSE attempts END, "
                    "started_at = COALESCE(?, started_at), ended_at = COALESCE(?, ended_at), "
                    "duration_s = COALESCE(?, duration_s), "
                    "result = CASE WHEN ? = 'succeeded' THEN ? ELSE result END, "
                    "result_hash = CASE WHEN ? = 'succeeded' THEN ? ELSE result_hash END, "
                    "error = ?, superseded_by = ? WHERE run_id = ? AND step_id = ?",
                    (
                        status,
                        row[4],
                        row[5],
                        row[6],
                        row[6],
                        row[7],
                        row[8],
                        row[9],
                        status,
                        row[10],
                        status,
                        row[11],
                        row[12],
                        row[13],
                        run_id,
                        step_id,
                    ),
                )
            )
        writes.extend((_LISTED, (run_id, tool)) for tool in tools)
        if not durable:
            self.writes(writes, durable=False)
            return
        with self.transaction() as connection:
            for write in writes:
                connection.execute(*write)

    def reset_steps(self, run_id: str, keep: Sequence[int] = ()) -> None:
        """Forget the run's step rows but those of ``keep`` (a revised plan replaces them;
        transitions stay as history). Committed at once."""
        with self.transaction() as connection:
            marks = ", ".join("?" for _ in keep)
            connection.execute(
                f"DELETE FROM step WHERE run_id = ? AND step_id NOT IN ({marks})",
                (run_id, *keep),
            )

    def discard_steps(self, run_id: str, step_ids: Sequence[int]) -> None:
        """Forget the rows of steps that left the run whole (a broken planner attempt's, or
        edited steps that run again; transitions stay as history): the writes queued before
        are committed first, then the rows are deleted at once (a step added again with
        the same id gets a fresh row)."""
        if not step_ids:
            return
        marks = ", ".join("?" for _ in step_ids)
        with self.transaction() as connection:
            connection.execute(
                f"DELETE FROM step WHERE run_id = ? AND step_id IN ({marks})",
                (run_id, *step_ids),
            )

    def supersede(self, run_id: str, step_id: int, superseded_by: Sequence[int]) -> None:
        """Record that a replan replaced step ``step_id``."""
        self.write(
            "UPDATE step SET superseded_by = ? WHERE run_id = ? AND step_id = ?",
            (json.dumps(sorted(superseded_by)), run_id, step_id),
            durable=False,
        )

    def steps(self, run_id: str) -> dict[int, StepRow]:
        """The run's steps by id, with results loaded (blobs read)."""
        self._visible()
        rows = self.connection.execute(
            "SELECT run_id, step_id, tool, effects, status, reason, detail, attempts, "
            "started_at, ended_at, duration_s, args, result, result_hash, error, "
            "superseded_by, segment FROM step WHERE run_id = ? ORDER BY step_id",
            (run_id,),
        )
        steps: dict[int, StepRow] = {}
        for row in rows:
            values = list(row)
            values[11] = json.loads(values[11]) if values[11] is not None else None
            if values[13] is not None:
                values[12] = json.loads(self.get_blob(values[13]))
            else:
                values[12] = json.loads(values[12]) if values[12] is not None else None
            values[14] = json.loads(values[14]) if values[14] is not None else None
            values[15] = json.loads(values[15]) if values[15] is not None else None
            steps[int(values[1])] = StepRow(*values)
        return steps

    def transitions(self, run_id: str) -> list[tuple[int, int, str, str | None, float, int]]:
        """Every transition ``(step_id, attempt, state, reason, time, segment)``, in order."""
        self._visible()
        return list(
            self.connection.execute(
                "SELECT step_id, attempt, state, reason, time, segment FROM transition "
                "WHERE run_id = ? ORDER BY id",
                (run_id,),
            )
        )

    # -- escalations -----------------------------------------------------------------------

    def add_escalation(
        self, run_id: str, reason: str, context: Mapping[str, Any], at: float | None = None
    ) -> int:
        """Record an open escalation of run ``run_id`` (committed at once, with everything
        queued before it) and return its id.

        Args:
            run_id: the run.
            reason: one of :data:`~plandag.scheduler.result.ESCALATION_REASONS`.
            context: the case (JSON-safe; secrets already masked).
            at: when (seconds since the epoch; default now).
        """
        with self.transaction() as connection:
            cursor = connection.execute(
                "INSERT INTO escalation (run_id, time, reason, context, status) "
                "VALUES (?, ?, ?, ?, 'open')",
                (run_id, time.time() if at is None else at, reason, _dumps(dict(context))),
            )
            return int(cursor.lastrowid or 0)

    def escalations(
        self, *, run_id: str | None = None, status: str | None = "open"
    ) -> list[EscalationRow]:
        """Escalations, oldest first: those in ``status`` (``open``, ``closed``; None:
        any), of run ``run_id`` only when given."""
        self._visible()
        where, args = [], []
        if status is not None:
            where.append("status = ?")
            args.append(status)
        if run_id is not None:
            where.append("run_id = ?")
            args.append(run_id)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        rows = self.connection.execute(
            "SELECT id, run_id, time, reason, context, status, decision, who, decided_at, note "
            f"FROM escalation{clause} ORDER BY time, id",
            tuple(args),
        )
        return [
            EscalationRow(row[0], row[1], row[2], row[3], json.loads(row[4]), *row[5:])
            for row in rows
        ]

    def close_escalations(
        self, run_id: str, decision: str, *, who: str, note: str | None = None
    ) -> int:
        """Close the run's open escalations with a person's ``decision`` (``resumed``,
        ``approved``, ``abandoned``), who took it, now, and their ``note``; committed at
        once. Returns how many were closed (0: none was open)."""
        with self.transaction() as connection:
            cursor = connection.execute(
                "UPDATE escalation SET status = 'closed', decision = ?, who = ?, "
                "decided_at = ?, note = ? WHERE run_id = ? AND status = 'open'",
                (decision, who, time.time(), note, run_id),
            )
            return int(cursor.rowcount)

    # -- calls, events, documents --------------------------------------------------------------

    def record_llm_call(self, run_id: str, purpose: str, record: Any) -> None:
        """Record one model call attempt (a :class:`~plandag.models.CallRecord`)."""
        usage = record.usage
        self.write(
            "INSERT INTO llm_call (run_id, purpose, provider, model, attempt, input_tokens, "
            "output_tokens, cost_usd, duration_s, time, error) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run_id,
                purpose,
                record.provider,
                record.model,
                record.attempt,
                usage.input_tokens
                + usage.cache_creation_input_tokens
                + usage.cache_read_input_tokens,
                usage.output_tokens,
                record.cost_usd,
                record.duration_s,
                record.started_at,
                record.error,
            ),
            durable=False,
        )

    def record_event(self, run_id: str, kind: str, data: Mapping[str, Any], at: float) -> None:
        """Record an event (heartbeat, stall, replan, ...), batched."""
        self.write(
            "INSERT INTO event (run_id, time, kind, data) VALUES (?, ?, ?, ?)",
            (run_id, at, kind, _dumps(dict(data))),
            durable=False,
        )

    def events(self, run_id: str) -> list[tuple[float, str, dict[str, Any]]]:
        """The run's events ``(time, kind, data)``, in order."""
        self._visible()
        rows = self.connection.execute(
            "SELECT time, kind, data FROM event WHERE run_id = ? ORDER BY id", (run_id,)
        )
        return [(row[0], row[1], json.loads(row[2])) for row in rows]

    def record_document(
        self,
        batch_id: str,
        idx: int,
        input_path: str,
        status: str,
        record: Any = None,
        error: str | None = None,
        *,
        record_json: str | None = None,
        usage: Mapping[str, Any] | None = None,
    ) -> None:
        """Record one document of an ``extract`` batch (one row per document), batched.

        Args:
            batch_id: the batch's run id; idx: the document's position (0-based).
            input_path: the input as shown; status: the record's status.
            record: the record (sealed before it is stored), or None.
            error: the error column's text, or None.
            record_json: ``json.dumps(record, ensure_ascii=False, separators=(",", ":"),
                allow_nan=False)`` when the caller made it already (the batch encodes each
                record once for its line and this text), else None; the stored text is
                the same either way.
            usage: what the document's model calls used (``requests``,
                ``failed_requests``, ``input_tokens``, ``output_tokens``: whole numbers;
                ``cost_usd``: US dollars), stored in columns of their own; None for a job
                that makes no model call.
        """
        inline, digest = (
            self._record_columns(record, record_json) if record is not None else (None, None)
        )
        counts = [_usage_number(usage, key, whole) for key, whole in _USAGE_COLUMNS]
        self.write(
            "INSERT OR REPLACE INTO document (batch_id, idx, input, status, record, "
            "result_hash, error, time, requests, failed_requests, input_tokens, "
            "output_tokens, cost_usd) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (batch_id, idx, input_path, status, inline, digest, error, time.time(), *counts),
            durable=False,
        )

    def record_document_texts(
        self,
        batch_id: str,
        documents: Iterable[tuple[int, str, str, str | None, bool, str | None]],
    ) -> None:
        """Record a group of documents of an ``extract`` batch: queued together (one
        statement in the writer's group, with whatever else is queued) and committed before
        this returns. The batch writes a group to its output file first, then here: a
        crash leaves committed rows that are the file's records at their places (the
        unique-in-batch corrections that follow the batch's end come after every group's
        rows are committed); a group left to the writer's next commit would let the end's
        corrections reach the file while the rows they correct still wait.

        Args:
            batch_id: the batch's run id.
            documents: per document ``(idx, input, status, record_json, sealing_rules,
                error)``: ``record_json`` is the record's compact JSON text
                (``json.dumps(record, ensure_ascii=False, separators=(",", ":"),
                allow_nan=False)``, made where the record was, a batch's worker) or None;
                ``sealing_rules`` is :func:`plandag.store.sealing.may_need_sealing_by_rules`
                of that text; the text is sealed here, under this process's environment
                (:func:`plandag.store.sealing.sealed_store_json_text`), and stored as
                :meth:`record_document` stores a record; ``error``: the error column's
                text, or None.

        Raises:
            sqlite3.Error: the commit failed (the rows stay queued and the next flush tries
                them again, as :meth:`flush` says).
        """
        self.record_document_texts_soon(batch_id, documents)()

    def record_document_texts_soon(
        self,
        batch_id: str,
        documents: Iterable[tuple[int, str, str, str | None, bool, str | None]],
    ) -> Callable[[], None]:
        """:meth:`record_document_texts` without waiting: the group is queued and the
        writer's thread commits it now while the caller goes on (a batch extracts its next
        documents meanwhile instead of waiting for the disk's sync).

        Args:
            batch_id, documents: as :meth:`record_document_texts`.

        Returns:
            A function that returns once the group is committed (at once when it is), and
            raises as :meth:`record_document_texts` does when that commit failed. A caller
            that rewrites the records it stored (a batch's unique-in-batch corrections)
            calls it first.
        """
        secrets = environment_secrets()
        now = time.time()
        nothing = (None,) * len(_USAGE_COLUMNS)
        # the batch's id and the few statuses repeat on every row: checked once
        known: dict[str, str] = {}

        def once(text: str) -> str:
            checked = known.get(text)
            if checked is None:
                checked = known[text] = scrubbed_text(text, secrets)
            return checked

        sql = (
            "INSERT OR REPLACE INTO document (batch_id, idx, input, status, record, "
            "result_hash, error, time, requests, failed_requests, input_tokens, "
            "output_tokens, cost_usd) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        rows: list[tuple[str, tuple[Any, ...]]] = []
        for idx, input_path, status, record_json, rules, error in documents:
            inline: str | None = None
            digest: str | None = None
            if record_json is not None:
                text = sealed_store_json_text(record_json, rules, secrets)
                if len(text) > BLOB_THRESHOLD_BYTES:
                    digest = self.put_blob(text)
                else:
                    inline = text
            row = (once(batch_id), idx, input_path, once(status), inline, digest, error, now)
            rows.append((sql, (*row, *nothing)))
        return self.writer.commit_soon(rows)

    def documents(self, batch_id: str) -> list[DocumentRow]:
        """The batch's documents in input order."""
        self._visible()
        rows = self.connection.execute(
            f"SELECT {_DOCUMENT_COLUMNS} FROM document WHERE batch_id = ? ORDER BY idx",
            (batch_id,),
        )
        return self._document_rows(rows)

    def _document_rows(self, rows: Iterable[Sequence[Any]]) -> list[DocumentRow]:
        """``document`` rows (:data:`_DOCUMENT_COLUMNS`) with each record decoded, from its
        blob when it has one."""
        documents = []
        for row in rows:
            if row[5] is not None:
                record = json.loads(self.get_blob(row[5]))
            else:
                record = json.loads(row[4]) if row[4] is not None else None
            counts = row[8:13]
            usage = (
                None
                if all(value is None for value in counts)
                else {key: value for (key, _), value in zip(_USAGE_COLUMNS, counts, strict=True)}
            )
            documents.append(
                DocumentRow(row[0], row[1], row[2], row[3], record, row[6], row[7], usage)
            )
        return documents

    def input_documents(self, input_path: str) -> list[DocumentRow]:
        """Every batch's documents of the input ``input_path`` (as recorded: the path as
        given), the latest recorded first."""
        self._visible()
        rows = self.connection.execute(
            f"SELECT {_DOCUMENT_COLUMNS} FROM document WHERE input = ? ORDER BY time DESC",
            (input_path,),
        )
        return self._document_rows(rows)

    # -- instructions from a person ----------------------------------------------------------

    def add_instruction(
        self, run_id: str, text: str, *, who: str | None = None, new_goal: bool = False
    ) -> int:
        """Record an instruction for run ``run_id`` (committed at once); the process running
        the run picks it up (:meth:`take_instructions`). Returns its id."""
        with self.transaction() as connection:
            cursor = connection.execute(
                "INSERT INTO instruction (run_id, time, who, text, new_goal) "
                "VALUES (?, ?, ?, ?, ?)",
                (run_id, time.time(), who, text, int(new_goal)),
            )
            return int(cursor.lastrowid or 0)

    def take_instructions(self, run_id: str) -> list[InstructionRow]:
        """The instructions for ``run_id`` not taken yet, oldest first, now marked taken
        (``consumed_at``), so each is taken once. A poll that finds none only reads (an
        indexed ``SELECT``, no write lock)."""
        self._visible()
        rows = self.connection.execute(
            "SELECT id, run_id, time, who, text, new_goal FROM instruction "
            "WHERE run_id = ? AND consumed_at IS NULL ORDER BY id",
            (run_id,),
        ).fetchall()
        if not rows:
            return []
        now = time.time()
        with self.transaction() as connection:
            connection.executemany(
                "UPDATE instruction SET consumed_at = ? WHERE id = ? AND consumed_at IS NULL",
                [(now, row[0]) for row in rows],
            )
        return [
            InstructionRow(row[0], row[1], row[2], row[3], row[4], bool(row[5]), now)
            for row in rows
        ]

    def instructions(self, run_id: str) -> list[InstructionRow]:
        """Every instruction given to ``run_id``, oldest first."""
        self._visible()
        rows = self.connection.execute(
            "SELECT id, run_id, time, who, text, new_goal, consumed_at FROM instruction "
            "WHERE run_id = ? ORDER BY id",
            (run_id,),
        )
        return [
            InstructionRow(row[0], row[1], row[2], row[3], row[4], bool(row[5]), row[6])
            for row in rows
        ]
