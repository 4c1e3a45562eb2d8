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
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from plandag.store.sealing import SecretMaskingConnection

__all__ = [
    "FLUSH_INTERVAL_S",
    "GROUP_ROWS",
    "IDLE_SECONDS",
    "GroupWriter",
    "Item",
    "Row",
    "execute_rows",
    "flush_writers",
    "statement_table",
]

logger = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 0.2
"""A queued write is committed at most this many seconds after it was queued."""
GROUP_ROWS = 2048
"""A group is committed as soon as this many queued items wait (a row, or a step's start or
end: a run of ~1,000 steps without effects; each commit rewrites the pages it touches, so
fewer, larger groups cost less CPU; a write that must be committed at once waits for a
group under way, ~20 ms at most)."""
IDLE_SECONDS = 5.0
"""The thread ends after this long with nothing to write (the next write starts another),
so a store left open holds no thread."""

Row = tuple[str, tuple[Any, ...]]
"""A write: an SQL statement and its parameters."""
Item = tuple[Any, ...]
"""What the queue holds: a :data:`Row`, or an item the writer's ``coalesce`` or ``expand``
turns into rows (:class:`GroupWriter`)."""


class _Barrier:
    """A flush's place in the queue: resolved once every write queued before it is
    committed, or a try to commit them failed (``error``). Waited on through a lock held
    from the start and released by the writer's thread (cheaper to make than an event)."""

    __slots__ = ("_latch", "done", "error")

    def __init__(self) -> None:
        self._latch = threading.Lock()
        self._latch.acquire()
        self.done = False
        self.error: BaseException | None = None

    def resolve(self, error: BaseException | None = None) -> None:
        """Answer the flush (once)."""
        self.error = error
        self.done = True
        self._latch.release()

    def wait(self, timeout: float) -> bool:
        """Whether it was resolved within ``timeout`` seconds."""
        if self._latch.acquire(timeout=timeout):
            self._latch.release()
            return True
        return self.done


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
        coalesce: rewrites a group's rows before they are written, into rows with the same
            effect (the store merges a step's start and end queued in one group into one
            update); None writes them as they were queued.
        expand: when ``coalesce`` is None, turns a group's queued items into the rows they
            stand for (items :meth:`put` queued that are not ``(sql, args)`` rows: the
            store's step starts and ends); ``coalesce`` does it when it is given.

    The thread starts with the first write and ends at :meth:`close`, at the
    interpreter's exit (after a last flush), or after :data:`IDLE_SECONDS` with nothing to
    write (the next write starts another). Thread-safe: a write is handed over by appending
    it to a deque (atomic in CPython), without a lock; the thread is woken only for the
    first write of a group, a full group, a flush or the close.
    """

    def __init__(
        self,
        path: Path,
        *,
        busy_timeout_s: float = 10.0,
        interval_s: float = FLUSH_INTERVAL_S,
        max_rows: int = GROUP_ROWS,
        clock: Callable[[], float] = time.monotonic,
        coalesce: Callable[[list[Item]], list[Row]] | None = None,
        expand: Callable[[list[Item]], list[Row]] | None = None,
    ) -> None:
        if interval_s <= 0 or max_rows < 1:
            raise ValueError("interval_s must be > 0 and max_rows >= 1")
        self.path = path
        self.key = os.path.realpath(path)
        self.busy_timeout_s = busy_timeout_s
        self.interval_s = interval_s
        self.max_rows = max_rows
        self.clock = clock
        self.coalesce = coalesce
        self.expand = expand
        self.groups = 0
        """Groups committed so far."""
        self._queue: deque[Item | _Barrier] = deque()
        self._since: float | None = None  # when the oldest queued write was queued
        self._taken = 0  # writes the thread took from the queue and has not committed yet
        self._barriers = 0  # flushes waiting in the queue
        self._wake = threading.Event()
        self._asleep = False  # the thread waits for a first write (submit wakes it)
        self._lock = threading.Lock()  # the thread's start and end, flushes
        self._error: BaseException | None = None
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
        self.put((sql, args))

    def put(self, item: Item) -> None:
        """Queue one item as it is: an ``(sql, args)`` row (:meth:`submit`), or an item the
        writer's ``coalesce`` or ``expand`` turns into rows.

        Raises:
            RuntimeError: the writer is closed.
        """
        if self._closing:
            raise RuntimeError(f"run store {self.path}: the group writer is closed")
        queue = self._queue
        if not queue:
            self._since = self.clock()
        queue.append(item)
        if self._thread is not None and not self._asleep and len(queue) < self.max_rows:
            return  # the thread is up and will take it with its group
        self._queued(len(queue))

    def submit_many(self, rows: Sequence[Row]) -> None:
        """:meth:`submit` every ``(sql, args)`` of ``rows``, in order, at once."""
        if self._closing:
            raise RuntimeError(f"run store {self.path}: the group writer is closed")
        queue = self._queue
        if not queue:
            self._since = self.clock()
        queue.extend(rows)
        if self._thread is not None and not self._asleep and len(queue) < self.max_rows:
            return  # the thread is up and will take them with its group
        self._queued(len(queue))

    def _queued(self, waiting: int) -> None:
        """After a write was appended: start the thread, or wake it for a first write or a
        full group."""
        if self._thread is None:
            with self._lock:
                if self._thread is None and not self._closed:
                    self._start()
                    return
        if self._asleep or (waiting >= self.max_rows and not self._wake.is_set()):
            self._asleep = False
            self._wake.set()  # once: setting it takes the event's lock

    def flush(self) -> None:
        """Return once every write queued before this call is committed.

        Raises:
            sqlite3.Error: (or whatever else the commit raised) a try to commit them failed
                while this call waited; the writes stay queued, in order, and are tried
                again.
        """
        if not self._queue and not self._taken:
            return
        self._wait_for(())

    def commit(self, rows: Sequence[Item]) -> None:
        """Queue ``rows`` (as :meth:`submit_many`) and return once they are committed, with
        every write queued before them (the thread is woken once, for the flush).

        Raises:
            RuntimeError: the writer is closed.
            sqlite3.Error: as :meth:`flush`.
        """
        if self._closing:
            raise RuntimeError(f"run store {self.path}: the group writer is closed")
        self._wait_for(rows)

    def commit_soon(self, rows: Sequence[Item]) -> Callable[[], None]:
        """Queue ``rows`` (as :meth:`submit_many`) and have the thread commit them now, with
        every write queued before them, without waiting: the caller goes on while the
        thread writes and syncs the disk.

        Returns:
            A function that returns once they are committed (at once when they are), and
            raises as :meth:`commit` does when that commit failed.

        Raises:
            RuntimeError: the writer is closed.
        """
        if self._closing:
            raise RuntimeError(f"run store {self.path}: the group writer is closed")
        barrier = self._barrier_after(rows)
        return lambda: self._await(barrier)

    def _wait_for(self, rows: Sequence[Item]) -> None:
        """Queue ``rows`` and a barrier after them; wait until the barrier is resolved."""
        self._await(self._barrier_after(rows))

    def _barrier_after(self, rows: Sequence[Item]) -> _Barrier:
        """Queue ``rows`` and a barrier after them, and wake the thread for it."""
        barrier = _Barrier()
        with self._lock:
            queue = self._queue
            if rows:
                if not queue:
                    self._since = self.clock()
                queue.extend(rows)
            self._barriers += 1
            queue.append(barrier)
            if self._thread is None and not self._closed:
                self._start()
        self._asleep = False
        self._wake.set()
        return barrier

    def _await(self, barrier: _Barrier) -> None:
        """Wait until ``barrier`` is resolved; raise the error of the commit that resolved
        it, or why it never will be (the thread stopped)."""
        while not barrier.wait(1.0):
            thread = self._thread
            if (thread is None or not thread.is_alive()) and not barrier.done:
                self._drop(barrier)
                if self._error is not None:
                    raise self._error
                raise RuntimeError(
                    f"run store {self.path}: the group writer stopped with "
                    f"{self.pending} writes not committed"
                )
        if barrier.error is not None:
            raise barrier.error

    def _drop(self, barrier: _Barrier) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._queue.remove(barrier)
            self._barriers -= 1

    def due(self) -> float | None:
        """The :attr:`clock` time by which the queued writes will be committed (None:
        nothing is queued)."""
        since = self._since
        if since is None:
            return None if not self.pending else self.clock() + self.interval_s
        return since + self.interval_s

    @property
    def pending(self) -> int:
        """Writes queued and not committed yet."""
        queued = len(self._queue)
        if queued and self._barriers:
            queued = sum(1 for item in list(self._queue) if type(item) is not _Barrier)
        return queued + self._taken

    @property
    def error(self) -> BaseException | None:
        """The error of the last try to commit, when it failed (None once one succeeds)."""
        return self._error

    def wake(self) -> None:
        """Have the thread look at :attr:`clock` again (after a test moved a fake clock)."""
        self._wake.set()

    def close(self) -> None:
        """Commit what is queued, stop the thread and close its connection.

        Raises:
            sqlite3.Error: (or whatever else the commit raised) the last writes could not be
                committed; they are lost, and the error says so. Closing again does nothing.
        """
        with self._lock:
            if self._closed:
                return
            self._closing = True
            thread = self._thread
        self._wake.set()
        if thread is not None:
            thread.join()
        with self._lock:
            self._closed = True
            lost = self.pending
            error = self._error
        _LIVE.discard(self)
        if lost:
            if error is not None:
                raise error
            raise RuntimeError(f"run store {self.path}: {lost} writes were not committed")

    # -- the thread's side -------------------------------------------------------------------

    def _start(self) -> None:
        """Start the thread (with :attr:`_lock` held)."""
        self._thread = threading.Thread(
            target=self._run, name=f"plandag-store-writer {self.path.name}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        try:
            connection = self._connect()
        except BaseException as error:  # the rows stay queued; flush and close raise it
            self._error = error
            with self._lock:
                self._thread = None  # the next write starts another
                self._resolve_barriers(error)
            return
        try:
            self._loop(connection)
        finally:
            connection.close()

    def _resolve_barriers(self, error: BaseException) -> None:
        """Answer every flush waiting in the queue with ``error`` (with :attr:`_lock`
        held); the writes stay queued."""
        if not self._barriers:
            return
        kept: list[Item | _Barrier] = []
        queue = self._queue
        for _ in range(len(queue)):
            item = queue.popleft()
            if type(item) is _Barrier:
                self._barriers -= 1
                item.resolve(error)
            else:
                kept.append(item)
        queue.extendleft(reversed(kept))

    def _wait(self) -> bool:
        """Wait until a group is due; False: end the thread (closing with nothing queued,
        or idle for :data:`IDLE_SECONDS`)."""
        queue = self._queue
        idle_since = time.monotonic()
        wake = self._wake
        while True:
            wake.clear()
            if queue:
                if self._closing or self._barriers or len(queue) >= self.max_rows:
                    return True
                since = self._since
                if since is None:
                    since = self._since = self.clock()
                timeout = since + self.interval_s - self.clock()
                if timeout <= 0:
                    return True
                wake.wait(max(timeout, 0.001))  # a fake clock that does not move: no spin
                continue
            if self._closing:
                return False
            if time.monotonic() - idle_since >= IDLE_SECONDS:
                with self._lock:
                    self._thread = None  # the next write starts another
                    if not queue and not self._closing:
                        return False
                    self._thread = threading.current_thread()
                continue
            self._asleep = True
            if not queue:
                wake.wait(IDLE_SECONDS)
            self._asleep = False

    def _loop(self, connection: sqlite3.Connection) -> None:
        queue = self._queue
        while self._wait():
            count = len(queue)
            self._taken = count
            self._since = None
            group: list[Item] = []
            barriers: list[_Barrier] = []
            if not self._barriers:  # read after count: a flush among them is counted
                popleft = queue.popleft
                group = [popleft() for _ in range(count)]  # type: ignore[misc]
            else:
                for _ in range(count):
                    item = queue.popleft()
                    if type(item) is _Barrier:
                        barriers.append(item)
                    else:
                        group.append(item)  # type: ignore[arg-type]
            if barriers:
                with self._lock:
                    self._barriers -= len(barriers)
            self._taken = len(group)
            closing = self._closing
            try:
                if group:
                    rewrite = self.coalesce or self.expand
                    _commit(connection, group if rewrite is None else rewrite(group))
            except BaseException as error:
                queue.extendleft(reversed(group))  # tried again, before what came after
                self._taken = 0
                self._since = self.clock()
                self._error = error
                for barrier in barriers:
                    barrier.resolve(error)
                if closing:  # close() raises it; nothing retries after the last try
                    return
                logger.warning(
                    "run store %s: %d writes could not be committed (%s); tried again",
                    self.path,
                    len(group),
                    error,
                )
                continue
            self._taken = 0
            if group:
                self.groups += 1
            self._error = None
            for barrier in barriers:
                barrier.resolve()

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
    reading of the environment's secrets by the masking connection; :func:`_batches`), or,
    for an ``INSERT`` of one row of values, :data:`VALUES_ROWS` rows at a time in one
    statement of that many rows of values (:func:`_values_rows`)."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        for sql, rows in _batches(group):
            execute_rows(connection, sql, rows)
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


def execute_rows(connection: sqlite3.Connection, sql: str, rows: Sequence[Sequence[Any]]) -> None:
    """Run ``sql`` once for each of ``rows`` (its parameters), in order: one ``execute``
    for one row, an ``INSERT`` of one row of values :data:`VALUES_ROWS` rows at a time in
    one statement of that many rows of values (:func:`_values_rows`), else one
    ``executemany``."""
    if len(rows) == 1:
        connection.execute(sql, rows[0])
        return
    many = _values_rows(sql, len(rows))
    if many is None:
        connection.executemany(sql, rows)
        return
    statement, size = many
    whole = len(rows) - len(rows) % size
    if isinstance(connection, SecretMaskingConnection):  # its texts checked by column
        for start in range(0, whole, size):
            connection.execute_values(statement, rows[start : start + size])  # type: ignore[arg-type]
    else:
        for start in range(0, whole, size):
            connection.execute(
                statement, [item for row in rows[start : start + size] for item in row]
            )
    if whole < len(rows):
        connection.executemany(sql, rows[whole:])


VALUES_ROWS = 64
"""Rows of values an ``INSERT`` of many rows writes in one statement at most."""
_PARAMETERS = 999
"""The most parameters one statement binds (SQLite's SQLITE_MAX_VARIABLE_NUMBER before
3.32.0)."""
_ONE_ROW = re.compile(
    r"^(\s*INSERT(?:\s+OR\s+\w+)?\s+INTO\s+\"?\w+\"?\s*\([^()]*\)\s*VALUES\s*)"
    r"(\(\s*(?:\?|NULL)(?:\s*,\s*(?:\?|NULL))*\s*\))\s*$",
    re.I,
)


@functools.lru_cache(maxsize=64)
def _many_rows(sql: str) -> tuple[str, int] | None:
    """``sql`` rewritten to insert several rows of values at once, and that many rows; None
    when ``sql`` is not an ``INSERT`` of one row of plain ``?`` parameters and ``NULL``s
    (or has too many parameters for more than one row)."""
    found = _ONE_ROW.match(sql)
    if found is None:
        return None
    values = found.group(2)
    size = min(VALUES_ROWS, _PARAMETERS // max(values.count("?"), 1))
    if size < 2:
        return None
    return found.group(1) + ", ".join([values] * size), size


def _values_rows(sql: str, rows: int) -> tuple[str, int] | None:
    """:func:`_many_rows` of ``sql`` when ``rows`` rows fill at least one statement of
    them. Rows of values inserted in one statement are inserted one after the other, in
    order, as by one statement each (https://www.sqlite.org/lang_insert.html); the
    statement runs once instead of once per row (the sqlite3 module also lets go of the
    interpreter lock once per statement run)."""
    if rows < 2:
        return None
    many = _many_rows(sql)
    return many if many is not None and rows >= many[1] else None


_TABLE = re.compile(r"^\s*(?:INSERT(?:\s+OR\s+\w+)?\s+INTO|UPDATE|DELETE\s+FROM)\s+\"?(\w+)", re.I)


@functools.lru_cache(maxsize=256)
def statement_table(sql: str) -> str | None:
    """The table a write statement changes, lower-case (None: not one this can tell)."""
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
    tables: dict[str, str | None] = {}  # statement -> its table
    for sql, args in group:
        try:
            table = tables[sql]
        except KeyError:
            table = tables[sql] = statement_table(sql)
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
