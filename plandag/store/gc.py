"""Store upkeep: delete old runs, their traces, and the blobs nothing references any more.

:func:`collect_garbage` deletes every run whose last activity (``run.updated``) is older
than a cutoff, except runs in a state a person or a process may still act on
(:data:`PROTECTED_STATUSES`: ``running``, ``awaiting_approval``, ``escalated``), runs a
live process holds (:mod:`plandag.store.owner`: its recorded process id and start time),
and runs a keeper asks to keep. A *crashed* run (``running``, its process gone) counts as
ended: it is deleted like any other old run, and can then no longer be resumed (the report
lists such runs apart, :attr:`GcReport.crashed`). For each run it deletes every row that
names it (every table with a ``run_id`` column: run, plan_version, step, transition,
decision, llm_call, event, escalation, instruction, step_decision, and any table a later
migration adds; the ``document`` rows of an ``extract`` batch, whose ``batch_id`` is the run
id) and its trace file (``traces/RUN_ID.jsonl`` beside the database). Conversations (tables
``conversation`` and ``conversation_turn``) are never touched.

Blobs (``blobs/ab/abcdef....json``) are deleted by reference count: a blob file goes only
when no remaining row references its SHA-256 (``step.result_hash``, a ``{"blob": HASH}``
``step.args``, ``document.result_hash``, and any other ``result_hash`` column), no keeper
keeps it, and the file was not written or reused after the cutoff (a run in progress may
hold a reference it has not committed yet: :meth:`~plandag.store.store.Store.put_blob`
refreshes the file's time when it reuses it).

A later feature that keeps data registers a *keeper* with :func:`register_keeper`: a
callable given the open store that returns a :class:`Keep` (run ids and blob hashes gc must
leave alone). The runs that produced a version of the plan library (table ``library_plan``)
are kept whatever keepers are registered, as conversations are never touched.

Rows are deleted in one transaction per batch of runs (``BEGIN IMMEDIATE``), so a crash
leaves whole runs; files are deleted after their rows are committed, so a crash leaves at
worst an unreferenced file, which the next gc deletes. Each run is checked again inside its
batch's transaction, holding the database's write lock: a run that a process took meanwhile
(``plandag resume`` claims a run before it reads it) is left alone.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from plandag.store.owner import owner_alive
from plandag.store.store import Store

__all__ = [
    "PROTECTED_STATUSES",
    "GcReport",
    "Keep",
    "Keeper",
    "StoreSize",
    "collect_garbage",
    "parse_duration",
    "register_keeper",
    "registered_keepers",
    "store_size",
    "unregister_keeper",
]

PROTECTED_STATUSES: tuple[str, ...] = ("running", "awaiting_approval", "escalated")
"""Run states gc never deletes, however old: a process runs it, or it waits for a person
(ARCHITECTURE.md, "States and exit codes"). A ``running`` run whose process is gone
(crashed) is not protected: it counts as ended."""

BATCH_RUNS = 200
"""Runs deleted per transaction."""

_CONVERSATION_TABLES = frozenset({"conversation", "conversation_turn"})
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


@dataclasses.dataclass(frozen=True, slots=True)
class Keep:
    """What a keeper asks gc to leave alone.

    Attributes:
        run_ids: runs never deleted (with all their rows, trace and blobs).
        blob_hashes: SHA-256 hex digests of blob files never deleted.
    """

    run_ids: frozenset[str] = frozenset()
    blob_hashes: frozenset[str] = frozenset()


Keeper = Callable[[Store], Keep]
"""A callable given the open store (read it, don't write it) that returns a :class:`Keep`."""

_KEEPERS: list[Keeper] = []


def register_keeper(keeper: Keeper) -> Keeper:
    """Register ``keeper``: every later :func:`collect_garbage` calls it and keeps what it
    returns. Usable as a decorator; registering the same callable twice registers it once.

    Args:
        keeper: a callable ``(store) -> Keep``. An exception it raises stops gc before
            anything is deleted (what is kept must never be guessed).

    Returns:
        ``keeper`` itself.
    """
    if keeper not in _KEEPERS:
        _KEEPERS.append(keeper)
    return keeper


def unregister_keeper(keeper: Keeper) -> None:
    """Forget ``keeper`` (nothing when it was not registered)."""
    if keeper in _KEEPERS:
        _KEEPERS.remove(keeper)


def registered_keepers() -> tuple[Keeper, ...]:
    """The keepers registered, in registration order."""
    return tuple(_KEEPERS)


def parse_duration(text: str) -> float:
    """``text`` as seconds: a number and a unit, ``s``, ``m``, ``h``, ``d`` or ``w``
    (``3600s``, ``90m``, ``12h``, ``30d``, ``2w``).

    Raises:
        ValueError: not of that shape, or zero (what was given and an example).
    """
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(
            f"{text!r} is not a duration; give a number and a unit s, m, h, d or w "
            "(e.g. 30d, 12h, 90m, 3600s)"
        )
    seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if seconds <= 0:
        raise ValueError(f"{text!r}: the duration must be more than zero (e.g. 30d)")
    return seconds


@dataclasses.dataclass(frozen=True, slots=True)
class GcReport:
    """What :func:`collect_garbage` deleted (or, with ``dry_run``, would delete).

    Attributes:
        cutoff: runs last updated before this time qualify (seconds since the epoch).
        dry_run: nothing was deleted.
        run_ids: the runs deleted, oldest first.
        rows: rows deleted per table (tables with none left out).
        traces: trace files deleted.
        blobs: blob hashes whose files were deleted.
        bytes_freed: size of the trace and blob files deleted (the database file shrinks
            only with ``vacuum``), bytes.
        kept_protected: runs old enough but kept for their state (:data:`PROTECTED_STATUSES`)
            or because a live process holds them.
        kept_by_keepers: runs old enough but kept by a registered keeper.
        crashed: the runs among ``run_ids`` that had crashed (``running``, their process
            gone): once deleted they can no longer be resumed.
    """

    cutoff: float
    dry_run: bool
    run_ids: tuple[str, ...]
    rows: dict[str, int]
    traces: tuple[Path, ...]
    blobs: tuple[str, ...]
    bytes_freed: int
    kept_protected: tuple[str, ...]
    kept_by_keepers: tuple[str, ...]
    crashed: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        """The report as JSON-ready values (paths as text)."""
        return {
            "cutoff": self.cutoff,
            "dry_run": self.dry_run,
            "runs": list(self.run_ids),
            "rows": dict(self.rows),
            "traces": [str(path) for path in self.traces],
            "blobs": list(self.blobs),
            "bytes_freed": self.bytes_freed,
            "kept_protected": list(self.kept_protected),
            "kept_by_keepers": list(self.kept_by_keepers),
            "crashed": list(self.crashed),
        }


def _tables_with(store: Store, column: str) -> list[str]:
    tables = [
        row[0]
        for row in store.connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
        )
    ]
    found = []
    for table in tables:
        if table in _CONVERSATION_TABLES or table.startswith("sqlite_"):
            continue
        columns = {row[1] for row in store.connection.execute(f'PRAGMA table_info("{table}")')}
        if column in columns:
            found.append(table)
    return found


def _library_runs(store: Store) -> set[str]:
    """The runs that produced a plan version of the plan library (``library_plan.source_run``,
    store schema version 5): kept whatever keepers are registered, so that a program calling
    :func:`collect_garbage` without importing :mod:`plandag.library` keeps them too."""
    if "library_plan" not in _tables_with(store, "source_run"):
        return set()
    rows = store.connection.execute(
        "SELECT DISTINCT source_run FROM library_plan WHERE source_run IS NOT NULL"
    )
    return {row[0] for row in rows}


def _verdict(status: str, pid: int | None, started: float | None) -> str:
    """What gc may do with an old run: ``kept`` (a live process holds it: it is
    ``running`` in that process; or its state is protected), ``crashed`` (``running``, its
    process gone: it counts as ended) or ``ended``."""
    if status == "running":
        return "kept" if owner_alive(pid, started) else "crashed"
    return "kept" if status in PROTECTED_STATUSES else "ended"


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _blob_references(store: Store, excluded: set[str]) -> set[str]:
    """Hashes referenced by rows of runs not in ``excluded``."""
    referenced: set[str] = set()
    for table in _tables_with(store, "result_hash"):
        owner = "run_id" if table != "document" else "batch_id"
        columns = {row[1] for row in store.connection.execute(f'PRAGMA table_info("{table}")')}
        if owner not in columns:
            owner = "NULL"
        rows = store.connection.execute(
            f'SELECT {owner}, result_hash FROM "{table}" WHERE result_hash IS NOT NULL'
        )
        referenced.update(digest for run_id, digest in rows if run_id not in excluded)
    rows = store.connection.execute("SELECT run_id, args FROM step WHERE args LIKE '{\"blob\":%'")
    for run_id, args in rows:
        if run_id in excluded:
            continue
        try:
            digest = json.loads(args).get("blob")
        except (ValueError, AttributeError):
            continue
        if isinstance(digest, str):
            referenced.add(digest)
    return referenced


def _blob_files(store: Store) -> Iterable[tuple[str, Path]]:
    folder = store.root / "blobs"
    if not folder.is_dir():
        return []
    return sorted((path.stem, path) for path in folder.glob("??/*.json"))


def collect_garbage(
    store: Store,
    *,
    older_than_s: float,
    now: float | None = None,
    dry_run: bool = False,
    vacuum: bool = False,
    keepers: Iterable[Keeper] | None = None,
    batch_runs: int = BATCH_RUNS,
) -> GcReport:
    """Delete the runs last updated more than ``older_than_s`` seconds before ``now``,
    their rows, traces and the blobs no remaining row references (module docstring).

    Args:
        store: the open run store.
        older_than_s: age in seconds (``parse_duration("30d")``); more than zero.
        now: the current time, seconds since the epoch (default ``time.time()``).
        dry_run: delete nothing; the report says what would go.
        vacuum: ``VACUUM`` the database afterwards, so its file shrinks (rewrites it whole:
            slow on a large store, and needs as much free disk again).
        keepers: the keepers to ask (default: those registered with :func:`register_keeper`).
        batch_runs: runs deleted per transaction.

    Returns:
        A :class:`GcReport`.

    Raises:
        ValueError: ``older_than_s`` or ``batch_runs`` is not more than zero.
        sqlite3.Error: the database failed (the batch in progress is rolled back whole).
    """
    if older_than_s <= 0:
        raise ValueError(f"older_than_s must be more than zero seconds, not {older_than_s}")
    if batch_runs <= 0:
        raise ValueError(f"batch_runs must be at least 1, not {batch_runs}")
    cutoff = (time.time() if now is None else now) - older_than_s
    keep_runs: set[str] = set()
    keep_blobs: set[str] = set()
    for keeper in registered_keepers() if keepers is None else tuple(keepers):
        kept = keeper(store)
        keep_runs.update(kept.run_ids)
        keep_blobs.update(kept.blob_hashes)
    keep_runs.update(_library_runs(store))

    store.flush()
    old = store.connection.execute(
        "SELECT run_id, status, pid, pid_started FROM run WHERE updated < ? "
        "ORDER BY updated, run_id",
        (cutoff,),
    ).fetchall()
    protected: list[str] = []
    by_keepers: list[str] = []
    doomed: list[str] = []
    crashed: set[str] = set()
    for run_id, status, pid, started in old:
        verdict = _verdict(status, pid, started)
        if verdict == "kept":
            protected.append(run_id)
        elif run_id in keep_runs:
            by_keepers.append(run_id)
        else:
            doomed.append(run_id)
            if verdict == "crashed":
                crashed.add(run_id)

    owners = [(table, "run_id") for table in _tables_with(store, "run_id")]
    if "document" in _tables_with(store, "batch_id"):
        owners.append(("document", "batch_id"))
    rows: dict[str, int] = {}
    deleted: list[str] = []
    for batch in _chunks(doomed, batch_runs):
        if dry_run:
            marks = ", ".join("?" for _ in batch)
            for table, column in owners:
                count = store.connection.execute(
                    f'SELECT count(*) FROM "{table}" WHERE {column} IN ({marks})', batch
                ).fetchone()[0]
                rows[table] = rows.get(table, 0) + int(count)
            deleted.extend(batch)
            continue
        with store.transaction() as connection:
            # Checked again under the write lock: a process may have taken a run (resume,
            # approve) since it was read above.
            marks = ", ".join("?" for _ in batch)
            now_rows = connection.execute(
                f"SELECT run_id, status, pid, pid_started, updated FROM run "
                f"WHERE run_id IN ({marks})",
                batch,
            ).fetchall()
            still = {
                run_id: _verdict(status, pid, started)
                for run_id, status, pid, started, updated in now_rows
                if updated < cutoff
            }
            batch_now = [run_id for run_id in batch if still.get(run_id, "kept") != "kept"]
            protected.extend(
                run_id for run_id in batch if run_id in still and still[run_id] == "kept"
            )
            crashed.difference_update(run_id for run_id in batch if run_id not in batch_now)
            crashed.update(run_id for run_id in batch_now if still[run_id] == "crashed")
            if not batch_now:
                continue
            marks = ", ".join("?" for _ in batch_now)
            for table, column in owners:
                cursor = connection.execute(
                    f'DELETE FROM "{table}" WHERE {column} IN ({marks})', batch_now
                )
                rows[table] = rows.get(table, 0) + cursor.rowcount
            deleted.extend(batch_now)
    rows = {table: count for table, count in sorted(rows.items()) if count}
    doomed = deleted
    doomed_set = set(doomed)

    freed = 0
    traces = []
    for run_id in doomed:
        path = store.trace_path(run_id)
        try:
            size = path.stat().st_size
        except OSError:
            continue
        if not dry_run:
            path.unlink(missing_ok=True)
        traces.append(path)
        freed += size

    referenced = _blob_references(store, doomed_set if dry_run else set()) | keep_blobs
    blobs = []
    for digest, path in _blob_files(store):
        if digest in referenced:
            continue
        try:
            stat = path.stat()
        except OSError:
            continue
        if stat.st_mtime >= cutoff:  # written or reused lately: a run may not have committed
            continue
        if not dry_run:
            path.unlink(missing_ok=True)
        blobs.append(digest)
        freed += stat.st_size

    if vacuum and not dry_run:
        store.connection.execute("VACUUM")
    return GcReport(
        cutoff=cutoff,
        dry_run=dry_run,
        run_ids=tuple(doomed),
        rows=rows,
        traces=tuple(traces),
        blobs=tuple(blobs),
        bytes_freed=freed,
        kept_protected=tuple(protected),
        kept_by_keepers=tuple(by_keepers),
        crashed=tuple(run_id for run_id in doomed if run_id in crashed),
    )


@dataclasses.dataclass(frozen=True, slots=True)
class StoreSize:
    """The size of a run store on disk.

    Attributes:
        database_bytes: the database file with its WAL and shared-memory files, bytes.
        blob_bytes: every blob file, bytes.
        trace_bytes: every trace file, bytes.
        documents: ``document`` rows (documents of ``extract`` batches).
        bytes_per_document: (database + blobs) / documents, bytes; None with no document.
    """

    database_bytes: int
    blob_bytes: int
    trace_bytes: int
    documents: int
    bytes_per_document: float | None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def store_size(store: Store) -> StoreSize:
    """Measure ``store``: database and blob bytes, trace bytes, documents, and bytes per
    document ((database + WAL + blobs) / documents; traces counted apart). Queued writes are
    committed first, so the figures include them."""
    store.flush()
    database = sum(
        _size(Path(f"{store.path}{suffix}")) for suffix in ("", "-wal", "-shm", "-journal")
    )
    blobs = sum(_size(path) for _, path in _blob_files(store))
    traces_folder = store.root / "traces"
    traces = (
        sum(_size(path) for path in traces_folder.glob("*.jsonl")) if traces_folder.is_dir() else 0
    )
    documents = int(store.connection.execute("SELECT count(*) FROM document").fetchone()[0])
    per_document = (database + blobs) / documents if documents else None
    return StoreSize(database, blobs, traces, documents, per_document)
