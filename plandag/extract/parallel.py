"""Documents of a batch extracted in worker processes (``plandag extract nfe --workers N``).

How it works (the choices, and why):

- **Map, then reduce.** :class:`ChunkMapper` is an extractor for
  :func:`plandag.extract.nfe.batch.extract_batch`: the batch still decides the order, the
  reorder buffer, ``--resume``, the batch-wide checks (``unique_in_batch`` is a reduce over the
  records as they are written) and every write (output, store, trace) in the parent; the
  mapper only sends documents out and brings their records back. The output is therefore the
  same, byte for byte, as with ``--workers 1``.
- **A thin parent.** The batch hands the mapper whole chunks (:meth:`ChunkMapper.map_chunk`:
  one task and one wait per chunk, not per document), and each worker returns its records
  already encoded (:mod:`plandag.extract.nfe.encoded`: the output line, the store's text,
  the trace summary, what the batch counts), so that the parent's work per document is to
  append texts, written in groups.
- **Chunks.** Documents waiting for a worker are grouped into chunks of up to
  :data:`CHUNK_JOBS` x ``jobs`` documents (one task each, so a task's overhead is shared by
  several documents); a worker extracts a chunk's documents ``jobs`` at a time (``--jobs``
  stays the number of documents in flight per worker). Two chunks per worker are in flight,
  so a worker never waits for the parent.
- **Backends.** :class:`ProcessBackend` runs chunks in a
  :class:`concurrent.futures.ProcessPoolExecutor` (``forkserver`` context where the platform
  has it, else ``spawn``; workers read the files themselves). The Dask backend
  (:mod:`plandag.extract.cluster`) sends each document's bytes, so cluster workers need no
  shared filesystem.
- **One ledger, model repairs in the parent.** Workers never call a model. With
  ``--planner``, every chunk carries the repairs that worked so far in the parent
  (:meth:`~plandag.planner.repair.PlanRepairer.known_repairs`, in :class:`WorkerConfig`):
  a worker whose document fails the way one of them answers applies that repair itself,
  with no model call, exactly where ``--workers 1`` would reuse it (so the record, its
  ``repair`` note included, is the same; a reuse costs nothing). A worker that meets any
  other failure a repair would handle, or whose reused repair fails too, stops that
  document and says so; the parent then extracts it itself, with the batch's repairer and
  budget, so every model call is paid from the one budget the parent holds. Only the
  parent writes files: with ``--save-repairs`` a worker's repair returns the plan files,
  and the parent writes them.
- **Workers that cannot start.** When the main module is one worker processes cannot run
  again (a script read from standard input:
  :func:`~plandag.extract.main_guard.main_not_importable`), or the pool breaks before any
  worker has answered (each worker died while starting), the batch says why in one warning
  (logger ``plandag.extract``) and extracts in the parent process instead: the records are
  those of ``--workers 1``.
- **Nothing lost.** A worker process that dies (killed, out of memory) breaks the pool: the
  documents of every chunk in flight are sent again to a new pool, one document at a time
  (so a document that kills its worker takes no other with it again), each at most
  :data:`MAX_ATTEMPTS` times in all; a document still lost after that gets an error record (code
  ``internal_error``, which ``--resume`` extracts again), so every input ends as exactly one
  record or error row.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import json
import multiprocessing
import os
import pickle
import tempfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import anyio.to_thread

if TYPE_CHECKING:
    from plandag.extract.nfe.document import Extractor
    from plandag.planner.repair import KnownRepair, PlanRepairer
    from plandag.tools.boundary import WriteBoundary

__all__ = [
    "CHUNK_JOBS",
    "LOCAL",
    "MAX_ATTEMPTS",
    "Backend",
    "ChunkMapper",
    "ProcessBackend",
    "WorkerConfig",
    "default_workers",
    "extract_chunk",
    "run_packed",
    "unpack",
    "warm_up",
]

#: A chunk holds up to this many times ``jobs`` documents (a backend may say otherwise:
#: its ``chunk_jobs``).
CHUNK_JOBS = 8

#: Times a document is sent to a worker before it gets an ``internal_error`` record.
MAX_ATTEMPTS = 3

#: :meth:`ChunkMapper.map_chunk`'s answer for a document the parent extracts itself.
LOCAL = "local"

#: One document sent to a worker: its source (the path as the parent names it) and, for
#: workers without the parent's filesystem, its bytes (None: the worker reads the path).
Item = tuple[str, bytes | None]

#: What a worker returns for one document: ``("records", [record, ...])``, ``("repaired",
#: ([record, ...], [(file name, text), ...]))`` (a known repair applied, with the plan files
#: for the parent to write into ``--save-repairs``), ``("raise", exception)`` (the parent
#: turns it into an ``internal_error`` record as it would in process), or ``("parent",
#: None)`` (a model repair is needed: the parent extracts it).
Outcome = tuple[str, Any]


def default_workers() -> int:
    """The number of cores this process may use (``os.process_cpu_count()`` where Python
    has it, else the scheduler affinity, else ``os.cpu_count()``), at least 1."""
    counter = getattr(os, "process_cpu_count", None)
    if counter is not None:
        count = counter()
    elif hasattr(os, "sched_getaffinity"):
        count = len(os.sched_getaffinity(0))
    else:
        count = os.cpu_count()
    return max(1, count or 1)


@dataclass(frozen=True)
class WorkerConfig:
    """What a worker needs to extract documents as the parent would (picklable).

    Attributes:
        jobs: documents of a chunk extracted at once in the worker (``--jobs``).
        run_options: keyword arguments for each document's run (``retry``,
            ``max_concurrency``, ``limits``), without the budget (the parent's).
        write_boundary: where the documents' plans may write, or None (the output folder,
            given by the parent).
        probe_repairs: True when the parent has a repairer: a document whose run would ask
            the model for a repair is handed back to the parent instead.
        plan_text: a plan to run instead of the stored one (as
            :func:`~plandag.extract.nfe.document.extract_document` takes it), or None.
        model: the parent's repair model (the name a record's ``repair`` note carries).
        repairs: the parent's repairs that worked so far
            (:meth:`~plandag.planner.repair.PlanRepairer.known_repairs`): a worker applies
            one of these itself, with no model call, where the parent would reuse it.
        save_repairs: True when the parent saves repaired plans (``--save-repairs``): a
            worker that repairs a document returns the plan files for the parent to write.
        encode: True: each record is returned encoded
            (:func:`plandag.extract.nfe.encoded.encode_first`: its output line, its store
            text and what the batch counts, made here), so that the parent only writes
            texts; a record that cannot be encoded is returned as it is. False: records as
            dicts.
    """

    jobs: int = 1
    run_options: Mapping[str, Any] = field(default_factory=dict)
    write_boundary: WriteBoundary | None = None
    probe_repairs: bool = False
    plan_text: str | None = None
    model: str = ""
    repairs: tuple[KnownRepair, ...] = ()
    save_repairs: bool = False
    encode: bool = False


class _NeedsParent(Exception):
    """Raised in a worker where a model call would start: the parent extracts the document."""


class _NoModel:
    """The model client of a worker's replanner: never called (applying a known patch calls
    no model); a call hands the document back to the parent."""

    async def complete(self, *args: Any, **kwargs: Any) -> Any:
        raise _NeedsParent

    async def stream(self, *args: Any, **kwargs: Any) -> Any:
        raise _NeedsParent


class _RepairProbe:
    """Stands for the repairer in a worker (the shape
    :func:`plandag.planner.repair.run_with_repairs` reads): a failure one of the parent's
    known repairs answers gets that repair, applied here with no model call, as the parent
    would reuse it; any other lookup, and anything past it that could lead to a model call
    (the replan caps are read first), stops the document (:class:`_NeedsParent`)."""

    max_blocked: int | None = None
    total_replan_below: float | None = None
    reuse = True

    def __init__(self, registry: Any, model: str = "", repairs: Sequence[KnownRepair] = ()) -> None:
        self.registry = registry
        self.model = model
        self.repairs = tuple(repairs)

    def known(self, plan: str, replaced: tuple[int, ...], max_id: int) -> KnownRepair:
        for item in self.repairs:
            if (item.plan, item.replaced, item.max_id) == (plan, replaced, max_id):
                return item
        raise _NeedsParent

    def replanner(self, compiled: Any) -> Any:
        from plandag.planner.replanner import Replanner

        return Replanner(
            _NoModel(),  # type: ignore[arg-type]
            self.model,
            self.registry,
            read_only=compiled.read_only,
            write_boundary=compiled.write_boundary,
            http_allow=compiled.http_allow,
        )

    @property
    def max_replans(self) -> int:
        raise _NeedsParent

    @property
    def max_replans_without_progress(self) -> int:
        raise _NeedsParent

    def remember(self, item: Any) -> None:
        raise _NeedsParent

    async def ask(self, *args: Any, **kwargs: Any) -> Any:
        raise _NeedsParent


def _holds(error: BaseException, kind: type[BaseException]) -> bool:
    if isinstance(error, kind):
        return True
    if isinstance(error, BaseExceptionGroup):
        return any(_holds(inner, kind) for inner in error.exceptions)
    return False


def _portable(error: Exception) -> Exception:
    """The exception itself when it pickles, else a RuntimeError with its type and text."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")
    return error


def _replace_text(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, list):
        return [_replace_text(item, old, new) for item in value]
    if isinstance(value, dict):
        return {key: _replace_text(item, old, new) for key, item in value.items()}
    return value


_registry: list[Any] = []
_boundaries: dict[bytes, Any] = {}


def _worker_registry() -> Any:
    if not _registry:
        from plandag.tools.registry import default_registry

        _registry.append(default_registry())
    return _registry[0]


def _same_boundary(boundary: WriteBoundary | None) -> WriteBoundary | None:
    """One boundary object per distinct boundary in this worker: each chunk arrives with its
    own unpickled copy, and the compiled plan is kept per boundary object
    (:func:`plandag.extract.nfe.document.extract_document`), so without this every chunk
    would compile the plan again."""
    if boundary is None:
        return None
    key = pickle.dumps(boundary)
    kept = _boundaries.get(key)
    if kept is None:
        if len(_boundaries) >= 8:
            _boundaries.pop(next(iter(_boundaries)))
        kept = _boundaries[key] = boundary
    return kept


async def _extract_one(
    source: str, data: bytes | None, config: WorkerConfig, boundary: WriteBoundary | None
) -> Outcome:
    from plandag.extract.nfe.document import extract_document, takes_bytes

    registry = _worker_registry()
    probe: Any = (
        _RepairProbe(registry, config.model, config.repairs) if config.probe_repairs else None
    )
    try:
        if (
            probe is None
            and data is not None
            and takes_bytes(registry, boundary, config.plan_text, len(data))
        ):
            # The plan reads its input in one step: that step takes the bytes as its result,
            # and the records name the parent's path as they would in the parent.
            records = await extract_document(
                Path(source),
                registry=registry,
                write_boundary=boundary,
                run_options=config.run_options,
                plan_text=config.plan_text,
                data=data,
            )
            return "records", records
        if data is None and not (config.save_repairs and config.repairs):
            records = await extract_document(
                Path(source),
                registry=registry,
                write_boundary=boundary,
                run_options=config.run_options,
                repairer=probe,
                plan_text=config.plan_text,
            )
            return "records", records
        # Otherwise a private folder: the input under its own name (written back as the
        # parent's path in the records) when it came as bytes, and the repaired plans a
        # known repair makes, which go back to the parent to write.
        with tempfile.TemporaryDirectory(prefix="plandag-doc-") as folder:
            local = Path(source)
            if data is not None:
                local = Path(folder, Path(source).name or "input")
                _write(local, data)
            saved = Path(folder, "repairs") if config.save_repairs else None
            records = await extract_document(
                local,
                registry=registry,
                write_boundary=boundary,
                run_options=config.run_options,
                repairer=probe,
                save_repairs=saved,
                plan_text=config.plan_text,
            )
            if str(local) != source:
                records = _replace_text(records, str(local), source)
            files = _saved_files(saved, str(local), source) if saved is not None else []
            if files:
                return "repaired", (records, files)
            return "records", records
    except Exception as error:
        if _holds(error, _NeedsParent):
            return "parent", None
        return "raise", _portable(error)


def _saved_files(folder: Path, local: str, source: str) -> list[tuple[str, str]]:
    """The plan files a worker's repair wrote into ``folder`` (``(name, text)``, the plan
    before its sidecar, as :func:`plandag.planner.repair.save_repair` writes them), the
    sidecar's ``source`` naming the parent's path."""
    if not folder.is_dir():
        return []
    files = []
    for path in sorted(folder.iterdir()):  # NAME.HASH.json, then NAME.HASH.repair.json
        text = path.read_text("utf-8")
        if path.name.endswith(".repair.json") and local != source:
            from plandag.extract.names import display_name

            sidecar = _replace_text(json.loads(text), local, source)
            sidecar["source"] = display_name(source)
            text = json.dumps(sidecar, ensure_ascii=False, indent=2, default=str) + "\n"
        files.append((path.name, text))
    return files


def extract_chunk(items: Sequence[Item], config: WorkerConfig) -> list[Outcome]:
    """Extract a chunk of documents in a worker, ``config.jobs`` at a time.

    Args:
        items: ``(source, bytes or None)`` per document (None: read the file at ``source``).
        config: how to extract (see :class:`WorkerConfig`).

    Returns:
        One outcome per item, in order: ``("records", list)``, ``("repaired", (list,
        files))``, ``("raise", exception)`` or ``("parent", None)`` (a model repair is
        needed; the parent extracts the document); see :data:`Outcome`.
    """
    boundary = _same_boundary(config.write_boundary)
    from plandag.extract.nfe.document import advise_read

    # the kernel reads the chunk's files while its first documents are extracted, so that
    # the worker rarely waits for the disk
    for source, data in items:
        if data is None:
            advise_read(Path(source))

    async def run_all() -> list[Outcome]:
        outcomes: list[Outcome] = [("parent", None)] * len(items)
        limiter = anyio.CapacityLimiter(max(1, config.jobs))

        async def one(position: int, source: str, data: bytes | None) -> None:
            async with limiter:
                outcome = await _extract_one(source, data, config, boundary)
                outcomes[position] = _encoded(outcome) if config.encode else outcome

        async with anyio.create_task_group() as group:
            for position, (source, data) in enumerate(items):
                group.start_soon(one, position, source, data)
        return outcomes

    return anyio.run(run_all)


def _encoded(outcome: Outcome) -> Outcome:
    """``outcome`` with its records encoded (:func:`plandag.extract.nfe.encoded.encode_first`;
    a record that cannot be stays as it is)."""
    from plandag.extract.nfe.encoded import encode_first

    kind, value = outcome
    if kind == "records":
        return kind, [encode_first(record) or record for record in value]
    if kind == "repaired":
        records, files = value
        return kind, ([encode_first(record) or record for record in records], files)
    return outcome


def warm_up(config: WorkerConfig) -> None:
    """Make a worker ready before its first chunk: the registry built and the plan compiled
    for ``config``'s boundary (a process pool's initializer; on a cluster, run on every
    worker once), so that the first chunk costs what every other does."""
    from plandag.extract.nfe.document import takes_bytes

    takes_bytes(_worker_registry(), _same_boundary(config.write_boundary), config.plan_text, 0)
    if config.encode:  # what encoding a record needs, imported before the first chunk
        import plandag.store.sealing
        import plandag.trace.writer  # noqa: F401


#: The function a worker runs on a chunk (tests replace it to kill a worker mid-batch).
CHUNK_WORK: Callable[[Sequence[Item], WorkerConfig], list[Outcome]] = extract_chunk


def run_packed(
    work: Callable[[Sequence[Item], WorkerConfig], list[Outcome]],
    items: Sequence[Item],
    config: WorkerConfig | None,
) -> bytes:
    """What a backend runs in a worker: ``work(items, config)``'s outcomes as one pickle
    (highest protocol), which :func:`unpack` turns back into the outcomes in the parent.

    One ``bytes`` object travels back instead of a list of records: the process pool and
    Dask move it as it is, and Dask sizes it by its length instead of walking every record
    (each result is sized several times: stored, sent, counted).

    ``config`` None: the configuration the worker was started with (a pool's initializer,
    :func:`_start_worker`), which the parent then need not send with every chunk.

    Raises:
        Exception: whatever ``work`` raises (the chunk's error).
        RuntimeError: ``config`` is None in a worker started without one.
    """
    if config is None:
        if _started_config is None:
            raise RuntimeError("a chunk without its configuration in a worker started without one")
        config = _started_config
    return pickle.dumps(work(items, config), protocol=pickle.HIGHEST_PROTOCOL)


def unpack(packed: bytes) -> list[Outcome]:
    """The outcomes :func:`run_packed` pickled in a worker."""
    outcomes: list[Outcome] = pickle.loads(packed)
    return outcomes


class Backend(Protocol):
    """Where chunks run: a process pool here, a Dask cluster in :mod:`plandag.extract.cluster`."""

    #: workers (processes) that run chunks at once.
    workers: int
    #: True when workers need each document's bytes (no shared filesystem).
    sends_bytes: bool

    def submit(self, items: Sequence[Item], config: WorkerConfig) -> Any:
        """Start a chunk; return a handle for :meth:`result`."""

    def result(self, handle: Any) -> list[Outcome]:
        """Block until the chunk is done; raise :meth:`lost` errors when its worker died."""

    def lost(self, error: BaseException) -> bool:
        """Whether ``error`` means the chunk's worker was lost (then the chunk is sent again)."""

    def renew(self, handle: Any) -> None:
        """Make the backend usable again after ``handle``'s chunk was lost."""

    def close(self) -> None:
        """Stop the workers; chunks still queued are dropped."""


def _context() -> Any:
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" in methods:
        context = multiprocessing.get_context("forkserver")
        # imported once by the fork server, so that each worker starts warm
        context.set_forkserver_preload(
            [
                "plandag.extract.parallel",
                "plandag.extract.nfe.document",
                "plandag.extract.nfe.encoded",
                "plandag.scheduler",
                "plandag.store.sealing",
                "plandag.trace.writer",
            ]
        )
        return context
    return multiprocessing.get_context("spawn")


#: The configuration this worker process was started with (:func:`_start_worker`), or None.
_started_config: WorkerConfig | None = None


def _start_worker(config: WorkerConfig | None) -> None:
    """A pool worker's start: Ctrl-C (SIGINT, sent to the whole terminal group) is the
    parent's to handle (the worker goes on with its chunk until the parent stops the pool),
    the worker ends when the command ends (:func:`_end_with`), and it is made ready for
    ``config`` (:func:`warm_up`; a failure there shows again on the first chunk, where it
    becomes that chunk's outcome)."""
    import signal
    import threading

    global _started_config
    _started_config = config
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if parent is not None:  # ends with the command, even one killed with SIGKILL
        threading.Thread(target=_end_with, args=(parent,), daemon=True).start()
    if config is not None:
        with contextlib.suppress(Exception):
            warm_up(config)
    # what the worker made to start (modules, the registry, the compiled plan) lives as
    # long as it does: left out of the collector's passes over each document's objects
    gc.freeze()


def _end_with(parent: multiprocessing.process.BaseProcess) -> None:
    """Wait until the command that started this worker has ended, then end this worker.

    A pool worker otherwise waits for work forever once its command is killed with SIGKILL
    (or by the out-of-memory killer): nothing tells it, since the pool's own shutdown never
    ran. The parent's sentinel (:func:`multiprocessing.parent_process`) becomes ready when
    the command ends, however it ends.
    """
    parent.join()
    os._exit(1)


def _ready() -> tuple[int, bool]:
    """A worker's answer once it has started: its process id, and whether it is warmed up
    (the registry built by :func:`warm_up`)."""
    return os.getpid(), bool(_registry)


class ProcessBackend:
    """Chunks in a :class:`~concurrent.futures.ProcessPoolExecutor` of ``workers`` processes
    (``forkserver`` start where available, else ``spawn``); a broken pool is replaced.

    The workers are started, and made ready, before the constructor returns (a pool starts
    its processes only when work arrives), so that their start is over before the first
    document is sent and a batch reports it apart (``start_seconds``).

    Args:
        workers: processes (>= 1).
        config: what the chunks will need, to make each worker ready as it starts
            (:func:`warm_up`), or None.
        start_timeout: seconds to wait for the workers to start; past that, the batch goes
            on and the workers still starting take their chunks when ready.

    Attributes:
        started: ``(process id, warmed up)`` of each worker that answered at the start.
        start_error: the pool's break when it broke before any worker answered (its
            workers died while starting), else None.
    """

    sends_bytes = False
    chunk_jobs = CHUNK_JOBS

    def __init__(
        self, workers: int, config: WorkerConfig | None = None, *, start_timeout: float = 120.0
    ) -> None:
        self.workers = workers
        self._config = config
        self._context = _context()
        self._pool = self._new_pool()
        self.started: list[tuple[int, bool]] = []
        self.start_error: BrokenProcessPool | None = None
        # one task per worker: each submission finds no idle worker and starts a process
        answers = [self._pool.submit(_ready) for _ in range(workers)]
        try:
            for answer in answers:
                self.started.append(answer.result(timeout=start_timeout))
        except BrokenProcessPool as error:
            if not self.started:  # no worker ever answered: the pool cannot start
                self.start_error = error
        except Exception:  # a failed start shows again on the first chunk
            pass

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=self._context,
            initializer=_start_worker,
            initargs=(self._config,),
        )

    def submit(self, items: Sequence[Item], config: WorkerConfig) -> Any:
        # the configuration every worker was started with is not pickled with each chunk
        # again (about 4.6 KB); a changed one (repairs learned since) travels with it
        sent = None if config is self._config else config
        try:
            return self._pool, self._pool.submit(run_packed, CHUNK_WORK, list(items), sent)
        except BrokenProcessPool:
            self.renew((self._pool, None))
            return self._pool, self._pool.submit(run_packed, CHUNK_WORK, list(items), sent)

    def result(self, handle: Any) -> list[Outcome]:
        future: Future[bytes] = handle[1]
        return unpack(future.result())

    def lost(self, error: BaseException) -> bool:
        return isinstance(error, BrokenProcessPool)

    def renew(self, handle: Any) -> None:
        if handle[0] is self._pool:  # the first chunk to see the break replaces the pool
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = self._new_pool()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


@dataclass
class _Slot:
    path: Path
    data: bytes | None = None
    attempts: int = 0
    outcome: Outcome | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    sent: bool = False


class ChunkMapper:
    """An extractor (``async (path) -> records``) that runs documents on a backend.

    Args:
        backend: where chunks run (:class:`ProcessBackend`, or the Dask one).
        config: what workers need (:class:`WorkerConfig`); a chunk holds up to
            ``backend.chunk_jobs`` (default :data:`CHUNK_JOBS`) x ``config.jobs`` documents.
        local: the parent's own extractor: used for documents that need a model repair
            (with the batch's repairer and budget) and for inputs the parent cannot read to
            send.
        lost_record: ``(path) -> records`` for a document lost :data:`MAX_ATTEMPTS` times.
        linger: seconds a partial chunk waits for more documents before it is sent.
        documents: the documents the batch may hand over, or None (unknown). Known, the
            last chunks are smaller (:meth:`chunk_now`), so that the workers finish
            together instead of one of them extracting a last full chunk alone.
        repairer: the batch's repairer (the one ``local`` uses), or None: each chunk
            carries the repairs that worked so far
            (:meth:`~plandag.planner.repair.PlanRepairer.known_repairs`), which the workers
            apply themselves.
        save_repairs: the folder ``local`` saves repaired plans into (``--save-repairs``),
            or None: the plan files of the repairs made in workers are written there.

    Attributes:
        capacity: documents in flight at most (two chunks per worker).
        resent: documents sent again after their worker was lost.
        handed_back: documents a worker handed back because they needed a model repair
            (the parent extracted them).
    """

    def __init__(
        self,
        backend: Backend,
        config: WorkerConfig,
        local: Extractor,
        lost_record: Callable[[Path], list[dict[str, Any]]],
        *,
        linger: float = 0.002,
        documents: int | None = None,
        repairer: PlanRepairer | None = None,
        save_repairs: Path | None = None,
    ) -> None:
        self.backend = backend
        self.repairer = repairer
        self.save_repairs = save_repairs
        self.handed_back = 0
        if repairer is not None:
            config = dataclasses.replace(
                config,
                probe_repairs=True,
                model=repairer.model,
                save_repairs=save_repairs is not None,
            )
        self.config = config
        self.chunk = getattr(backend, "chunk_jobs", CHUNK_JOBS) * max(1, config.jobs)
        self.capacity = 2 * self.chunk * max(1, backend.workers)
        self.local = local
        self.lost_record = lost_record
        self.linger = linger
        self.resent = 0
        self.documents = documents
        self._handed = 0
        self._pending: list[_Slot] = []
        self._quarantine = anyio.Lock()

    def chunk_now(self) -> int:
        """The size of the next chunk: ``chunk``, or, once fewer than ``2 x workers``
        chunks' worth of the batch's documents are left to send, those documents shared
        out as ``2 x workers`` chunks (rounded up, at least 1)."""
        if self.documents is None:
            return self.chunk
        return self.chunk_for(max(0, self.documents - self._handed) + len(self._pending))

    def chunk_for(self, left: int) -> int:
        """The size of the next chunk when ``left`` of the batch's documents are still to
        be sent: ``chunk``, or, once fewer than ``2 x workers`` chunks' worth are left,
        those shared out as ``2 x workers`` chunks (rounded up, at least 1)."""
        shares = 2 * max(1, self.backend.workers)
        return max(1, min(self.chunk, -(-left // shares)))

    async def __call__(self, path: Path) -> list[dict[str, Any]]:
        slot = _Slot(path)
        self._handed += 1
        if self.backend.sends_bytes:
            try:
                slot.data = _read(path)
            except OSError:
                return await self.local(path)  # the parent writes the error record it sees
        self._pending.append(slot)
        if len(self._pending) >= self.chunk_now():
            await self._send()
        elif len(self._pending) == 1:
            await anyio.sleep(self.linger)
            if not slot.sent:
                await self._send()
        await slot.done.wait()
        outcome: Outcome = slot.outcome if slot.outcome is not None else ("parent", None)
        kind, value = outcome
        if kind == "records":
            return list(value)
        if kind == "raise" and isinstance(value, BaseException):
            raise value
        if kind == "repaired":
            records, files = value
            if self.save_repairs is not None:  # a worker returns files only when asked
                for name, text in files:
                    _write_atomically(self.save_repairs, name, text)
            return list(records)
        if kind == "lost":
            return self.lost_record(path)
        self.handed_back += 1
        return await self.local(path)

    async def map_chunk(self, paths: Sequence[Path]) -> list[Any]:
        """Extract ``paths`` as one chunk (the batch's chunk driver: one task and one wait
        per chunk, not per document; size it with :meth:`chunk_for`).

        Returns:
            Per path, in order: its records (a list: dicts, or encoded records); the
            exception its extraction raised (the batch turns it into an
            ``internal_error`` record); or :data:`LOCAL` when the parent must extract it
            itself (with ``local``: a model repair is needed, or its bytes could not be
            read to send).
        """
        self._handed += len(paths)
        answers: list[Any] = [LOCAL] * len(paths)
        slots: list[tuple[int, _Slot]] = []
        done = anyio.Event()  # set for each slot as its outcome comes; nothing waits on it
        for position, path in enumerate(paths):
            slot = _Slot(path, sent=True, done=done)
            if self.backend.sends_bytes:
                try:
                    slot.data = _read(path)
                except OSError:
                    continue  # the parent writes the error record it sees
            slots.append((position, slot))
        if slots:
            await self._run([slot for _, slot in slots])
        for position, slot in slots:
            outcome: Outcome = slot.outcome if slot.outcome is not None else ("parent", None)
            kind, value = outcome
            if kind == "records":
                answers[position] = list(value)
            elif kind == "raise" and isinstance(value, BaseException):
                answers[position] = value
            elif kind == "repaired":
                records, files = value
                if self.save_repairs is not None:  # a worker returns files only when asked
                    for name, text in files:
                        _write_atomically(self.save_repairs, name, text)
                answers[position] = list(records)
            elif kind == "lost":
                answers[position] = self.lost_record(slot.path)
            else:
                self.handed_back += 1
        return answers

    def _config_now(self) -> WorkerConfig:
        """The worker config with the repairer's repairs that worked so far."""
        if self.repairer is not None:
            known = self.repairer.known_repairs()
            if len(known) != len(self.config.repairs):  # the list only grows
                self.config = dataclasses.replace(self.config, repairs=known)
        return self.config

    async def _send(self) -> None:
        slots, self._pending = self._pending[: self.chunk], self._pending[self.chunk :]
        for slot in slots:
            slot.sent = True
        await self._run(slots)

    async def _run(self, slots: list[_Slot]) -> None:
        """Run one chunk. When its worker is lost, its documents are sent again one at a
        time, alone in quarantine (one document in quarantine at once): a document that
        kills its worker then takes no other with it, and only its own losses count."""
        outcomes = await self._attempt(slots)
        if outcomes is None:
            for slot in slots:
                alone: list[Outcome] | None = None
                async with self._quarantine:
                    while alone is None and slot.attempts < MAX_ATTEMPTS:
                        self.resent += 1
                        alone = await self._attempt([slot])
                slot.outcome = alone[0] if alone is not None else ("lost", None)
                slot.done.set()
            return
        for slot, outcome in zip(slots, outcomes, strict=True):
            slot.outcome = outcome
            slot.done.set()

    async def _attempt(self, slots: list[_Slot]) -> list[Outcome] | None:
        """One try of a chunk: its outcomes, or None when its worker was lost."""
        items = [(str(slot.path), slot.data) for slot in slots]
        for slot in slots:
            slot.attempts += 1
        try:
            handle = self.backend.submit(items, self._config_now())
        except Exception as error:  # nothing was sent: each gets an internal_error record
            return [("raise", error)] * len(slots)
        try:
            outcomes: list[Outcome] = await anyio.to_thread.run_sync(
                functools.partial(self.backend.result, handle), abandon_on_cancel=True
            )
        except Exception as error:
            if not self.backend.lost(error):
                # each becomes an internal_error record, as in one process
                return [("raise", error)] * len(slots)
            self.backend.renew(handle)
            return None
        return outcomes


def _write_atomically(folder: Path, name: str, text: str) -> None:
    """``text`` as ``folder/name`` (UTF-8), written to a temporary file then renamed, as
    :func:`plandag.planner.repair.save_repair` writes it."""
    folder.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(temporary, folder / name)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _read(path: Path) -> bytes:
    from plandag.extract.nfe.document import read_regular_file

    return read_regular_file(path)


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def lost_record(path: Path) -> list[dict[str, Any]]:
    """The error record of a document whose worker was lost :data:`MAX_ATTEMPTS` times."""
    from plandag.extract.nfe.document import error_record, file_sha256

    sha = file_sha256(path)
    return [
        error_record(
            str(path),
            sha,
            "internal_error",
            f"{path}: the worker process extracting it was lost {MAX_ATTEMPTS} times (killed, "
            "or out of memory); run the same command with --resume to extract it again",
        )
    ]
