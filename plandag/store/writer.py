"""The run store's group writer: writes that may wait are committed in groups by a thread of
their own, off the event loop.

A :class:`GroupWriter` owns one thread and that thread's own SQLite connection (masking
secrets like the store's: :class:`~plandag.store.sealing.SecretMaskingConnection`). Writes
are queued with :meth:`GroupWriter.submit` and committed in the order they were queued, a
group at a time: one ``BEGIN IMMEDIATE`` … ``COMMIT`` per group, consecutive rows of one
statement in one ``executemany``, with ``synchronous=FULL`` (in WAL mode a committed group
survives a crash and a power loss; a group torn by a crash is rolled back whole:
https://www.sqlite.org/wal.html). A group is committed

* at the latest ``interval_s`` seconds after its oldest row was queued (0.2 s by default:
  the web console reads the store while a run goes on),
* as soon as ``max_rows`` rows wait,
* and whenever :meth:`GroupWriter.flush` asks: a write that must be committed before the
  run goes on (a plan version, a decision, a step with effects starting) flushes the
  queue first, so the store never holds a later write without an earlier one.

A commit that fails keeps its rows queued, in order, for the next try (every
``interval_s``, or the next flush); :meth:`GroupWriter.flush` and :meth:`GroupWriter.close`
raise that error: a failed write is never lost silently.

Readers in the same process see every write queued before they read: the store flushes the
writers of its database (:func:`flush_writers`) before it reads.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import re
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from plandag.store.sealing import SecretMaskingConnection

__all__ = ["FLUSH_INTERVAL_S", "GROUP_ROWS", "IDLE_SECONDS", "GroupWriter", "flush_writers"]

logger = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 0.2
"""A queued write is committed at most this many seconds after it was queued."""
GROUP_ROWS = 512
"""A group is committed as soon as this many writes wait."""
IDLE_SECONDS = 5.0
"""The thread ends after this long with nothing to write (the next write starts another),
so a store left open holds no thread."""

Row = tuple[str, tuple[Any, ...]]
"""A write: an SQL statement and its parameters."""


class GroupWriter:
    """Commit queued writes in groups, from a thread that owns its own connection.

    Args:
        path: the SQLite database (its schema made already: :func:`plandag.store.migrations.
            migrate`).
        busy_timeout_s: how long a group's commit waits for another connection's lock
            before it fails (SQLite's busy timeout), seconds.
        interval_s: the longest a queued write waits before its group is committed, seconds
            (default :data:`FLUSH_INTERVAL_S`).
        max_rows: a group is committed as soon as this many writes wait (default
            :data:`GROUP_ROWS`).
        clock: the clock ``interval_s`` is measured on (seconds, monotonic); tests pass a
            fake one and :meth:`wake` the thread after moving it.

    The thread starts with the first write and ends at :meth:`close`, at the
    interpreter's exit (after a last flush), or after :data:`IDLE_SECONDS` with nothing to
    write (the next write starts another). Thread-safe.
    """

    def __init__(
        self,
        path: Path,
        *,
        busy_timeout_s: float = 10.0,
        interval_s: float = FLUSH_INTERVAL_S,
        max_rows: int = GROUP_ROWS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval_s <= 0 or max_rows < 1:
            raise ValueError("interval_s must be > 0 and max_rows >= 1")
        self.path = path
        self.key = os.path.realpath(path)
        self.busy_timeout_s = busy_timeout_s
        self.interval_s = interval_s
        self.max_rows = max_rows
        self.clock = clock
        self.groups = 0
        """Groups committed so far."""
        self._condition = threading.Condition(threading.Lock())
        self._pending: list[Row] = []
        self._since: float | None = None  # when the oldest pending write was queued
        self._submitted = 0
        self._committed = 0
        self._failures = 0
        self._error: BaseException | None = None
        self._wanted = False  # a flush waits for the pending writes
        self._closing = False
        self._closed = False
        self._thread: threading.Thread | None = None
        _LIVE.add(self)

    # -- the caller's side -------------------------------------------------------------------

    def submit(self, sql: str, args: tuple[Any, ...]) -> None:
        """Queue one write (committed with its group; see the module docstring).

        Raises:
            RuntimeError: the writer is closed.
        """
        with self._condition:
            if self._closing:
                raise RuntimeError(f"run store {self.path}: the group writer is closed")
            first = not self._pending
            if first:
                self._since = self.clock()
            self._pending.append((sql, args))
            self._submitted += 1
            if self._thread is None:
                self._start()
            elif first or len(self._pending) >= self.max_rows:
                self._condition.notify_all()  # the thread sets its deadline, or commits

    def submit_many(self, rows: Sequence[Row]) -> None:
        """:meth:`submit` every ``(sql, args)`` of ``rows``, in order, at once."""
        with self._condition:
            if self._closing:
                raise RuntimeError(f"run store {self.path}: the group writer is closed")
            first = not self._pending
            if first:
                self._since = self.clock()
            self._pending.extend(rows)
            self._submitted += len(rows)
            if self._thread is None:
                self._start()
            elif first or len(self._pending) >= self.max_rows:
                self._condition.notify_all()  # the thread sets its deadline, or commits

    def flush(self) -> None:
        """Return once every write queued before this call is committed.

        Raises:
            sqlite3.Error: (or whatever else the commit raised) a try to commit them failed
                while this call waited; the writes stay queued, in order, and are tried
                again.
        """
        with self._condition:
            target = self._submitted
            failures = self._failures
            while self._committed < target:
                if self._failures > failures and self._error is not None:
                    raise self._error
                thread = self._thread
                if thread is None or not thread.is_alive():
                    if self._error is not None:
                        raise self._error
                    raise RuntimeError(
                        f"run store {self.path}: the group writer stopped with "
                        f"{target - self._committed} writes not committed"
                    )
                self._wanted = True
                self._condition.notify_all()
                self._condition.wait(1.0)

    def due(self) -> float | None:
        """The :attr:`clock` time by which the queued writes will be committed (None:
        nothing is queued)."""
        with self._condition:
            return None if self._since is None else self._since + self.interval_s

    @property
    def pending(self) -> int:
        """Writes queued and not committed yet."""
        with self._condition:
            return self._submitted - self._committed

    @property
    def error(self) -> BaseException | None:
        """The error of the last try to commit, when it failed (None once one succeeds)."""
        with self._condition:
            return self._error

    def wake(self) -> None:
        """Have the thread look at :attr:`clock` again (after a test moved a fake clock)."""
        with self._condition:
            self._condition.notify_all()

    def close(self) -> None:
        """Commit what is queued, stop the thread and close its connection.

        Raises:
            sqlite3.Error: (or whatever else the commit raised) the last writes could not be
                committed; they are lost, and the error says so. Closing again does nothing.
        """
        with self._condition:
            if self._closed:
                return
            self._closing = True
            self._condition.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()
        with self._condition:
            self._closed = True
            lost = self._submitted - self._committed
            error = self._error
        _LIVE.discard(self)
        if lost:
            if error is not None:
                raise error
            raise RuntimeError(f"run store {self.path}: {lost} writes were not committed")

    # -- the thread's side -------------------------------------------------------------------

    def _start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name=f"plandag-store-writer {self.path.name}", daemon=True
        )
        self._thread.start()

    def _ready(self) -> bool:
        if not self._pending:
            return False
        if self._closing or self._wanted or len(self._pending) >= self.max_rows:
            return True
        return self._since is not None and self.clock() >= self._since + self.interval_s

    def _run(self) -> None:
        try:
            connection = self._connect()
        except BaseException as error:  # the rows stay queued; flush and close raise it
            with self._condition:
                self._error = error
                self._failures += 1
                self._thread = None  # the next write starts another
                self._condition.notify_all()
            return
        try:
            self._loop(connection)
        finally:
            connection.close()

    def _loop(self, connection: sqlite3.Connection) -> None:
        while True:
            idle_since = time.monotonic()
            with self._condition:
                while not self._ready():
                    if self._closing and not self._pending:
                        return
                    if not self._pending:
                        if time.monotonic() - idle_since >= IDLE_SECONDS:
                            self._thread = None  # the next write starts another
                            return
                        self._condition.wait(IDLE_SECONDS)
                        continue
                    timeout = None
                    if self._since is not None:
                        timeout = max(0.0, self._since + self.interval_s - self.clock())
                        # a fake clock that does not move must not make this spin
                        timeout = max(timeout, 0.001)
                    self._condition.wait(timeout)
                group = self._pending
                since = self._since
                self._pending = []
                self._since = None
                self._wanted = False
                closing = self._closing
            try:
                _commit(connection, group)
            except BaseException as error:
                with self._condition:
                    self._pending[:0] = group  # tried again, before what came after
                    self._since = since if closing else self.clock()
                    self._error = error
                    self._failures += 1
                    self._condition.notify_all()
                if closing:  # close() raises it; nothing retries after the last try
                    return
                logger.warning(
                    "run store %s: %d writes could not be committed (%s); tried again",
                    self.path,
                    len(group),
                    error,
                )
                continue
            with self._condition:
                self._committed += len(group)
                self.groups += 1
                self._error = None
                self._condition.notify_all()

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(
            self.path,
            timeout=self.busy_timeout_s,
            isolation_level=None,
            factory=SecretMaskingConnection,
        )
        try:
            connection.execute("PRAGMA synchronous=FULL")
        except BaseException:
            connection.close()
            raise
        return connection


def _commit(connection: sqlite3.Connection, group: Sequence[Row]) -> None:
    """Write ``group`` in one transaction, a statement's rows in one ``executemany`` (one
    reading of the environment's secrets by the masking connection; :func:`_batches`)."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        for sql, rows in _batches(group):
            if len(rows) == 1:
                connection.execute(sql, rows[0])
            else:
                connection.executemany(sql, rows)
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


_TABLE = re.compile(r"^\s*(?:INSERT(?:\s+OR\s+\w+)?\s+INTO|UPDATE|DELETE\s+FROM)\s+\"?(\w+)", re.I)


@functools.lru_cache(maxsize=256)
def _table(sql: str) -> str | None:
    """The table a write statement changes (None: not one this can tell)."""
    found = _TABLE.match(sql)
    return found.group(1).lower() if found is not None else None


def _batches(group: Sequence[Row]) -> list[tuple[str, list[tuple[Any, ...]]]]:
    """``group``'s rows gathered by statement, with the same effect as running them in
    order: a row joins the earlier batch of its statement only when no batch begun since
    changes the same table (writes to different tables commute: a step's row and its
    transitions are written alternately, and run as two ``executemany``); a statement whose
    table is unknown starts a batch of its own and is never moved past."""
    batches: list[tuple[str, list[tuple[Any, ...]]]] = []
    open_batch: dict[str, int] = {}  # statement -> index of the batch it may join
    last_of_table: dict[str | None, int] = {}  # table -> index of its latest batch
    for sql, args in group:
        table = _table(sql)
        index = open_batch.get(sql)
        if (
            index is not None
            and table is not None
            and last_of_table.get(table, -1) <= index
            and last_of_table.get(None, -1) < index
        ):
            batches[index][1].append(args)
            continue
        batches.append((sql, [args]))
        index = len(batches) - 1
        open_batch[sql] = index
        last_of_table[table] = index
    return batches


_LIVE: weakref.WeakSet[GroupWriter] = weakref.WeakSet()


def flush_writers(path: Path, *, besides: GroupWriter | None = None) -> None:
    """Flush every open writer of this process on the database ``path`` but ``besides``
    (a run's writes become visible to another store object reading the same database, as
    the web console does). A writer whose commit fails is left to report it to its own
    store; this only logs it."""
    key = os.path.realpath(path)
    for writer in list(_LIVE):
        if writer is besides or writer.key != key or not writer.pending:
            continue
        try:
            writer.flush()
        except Exception as error:  # its own store raises it where the run sees it
            logger.debug("run store %s: another writer's flush failed (%s)", path, error)


@atexit.register
def _flush_at_exit() -> None:
    """Commit what open writers hold before the interpreter stops their threads."""
    for writer in list(_LIVE):
        with contextlib.suppress(Exception):
            writer.close()
