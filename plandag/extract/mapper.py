"""Which mapper a batch's documents go through (:func:`open_mapper`): worker processes on
this machine (:class:`~plandag.extract.parallel.ProcessBackend`), a Dask cluster
(:class:`~plandag.extract.cluster.DaskBackend`), or none (the parent extracts them itself).
The worker machinery is in :mod:`plandag.extract.parallel`; the Dask backend, which needs the
``dask`` extra only when it starts, in :mod:`plandag.extract.cluster`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from plandag.extract.cluster import DaskBackend
from plandag.extract.parallel import (
    Backend,
    ChunkMapper,
    ProcessBackend,
    WorkerConfig,
    default_workers,
    lost_record,
)
from plandag.tools.boundary import WriteBoundary

if TYPE_CHECKING:
    from plandag.extract.nfe.document import Extractor
    from plandag.planner.repair import PlanRepairer

__all__ = ["open_mapper"]

_logger = logging.getLogger("plandag.extract")


def _output_boundary(output: Path) -> WriteBoundary:
    return WriteBoundary([output.resolve().parent])


def open_mapper(
    *,
    workers: int | None,
    cluster: str | None,
    documents: int,
    jobs: int,
    run_options: Mapping[str, Any] | None,
    write_boundary: WriteBoundary | None,
    output: Path,
    repairs: bool,
    local: Extractor,
    repairer: PlanRepairer | None = None,
    save_repairs: Path | None = None,
) -> ChunkMapper | None:
    """The mapper for a batch, or None to extract in the parent process.

    Args:
        workers: worker processes (None: :func:`default_workers`); with ``cluster``, the
            local cluster's workers.
        cluster: ``"local"`` (a Dask cluster on 127.0.0.1), ``"tcp://HOST:PORT"`` (an
            existing Dask scheduler), or None (worker processes on this machine).
        documents: documents the batch will extract; no more processes than that start.
        jobs: documents in flight per worker (the chunk size).
        run_options: the batch's run options; the budget stays in the parent.
        write_boundary: where the documents' plans may write (None: ``output``'s folder, as
            in the parent).
        output: the batch's output file.
        repairs: whether the parent has a repairer (documents needing a model repair come
            back to it).
        local: the parent's own extractor.
        repairer: the parent's repairer, or None: its repairs that worked travel to the
            workers, which apply them with no model call (see :class:`ChunkMapper`).
        save_repairs: the folder ``local`` saves repaired plans into, or None.

    Returns:
        A :class:`ChunkMapper` (close its backend when the batch ends), or None when one
        process is enough (``workers`` 1, or at most one document) and no cluster is named,
        or when worker processes cannot start (a main module they cannot run again, or
        every worker dead while starting): then one warning on the ``plandag.extract``
        logger says why, and the batch extracts in the parent process.

    Raises:
        InputError: ``workers`` < 1, or a ``cluster`` that is neither ``local`` nor a
            ``tcp://`` address, or the ``dask`` extra missing, or the scheduler unreachable.
        RuntimeError: worker processes would run the main module again and start the batch
            again (:func:`plandag.extract.main_guard.refuse_unguarded_main`).
    """
    from plandag.errors import InputError
    from plandag.extract.main_guard import main_not_importable, refuse_unguarded_main

    if workers is not None and workers < 1:
        raise InputError(f"--workers must be at least 1, not {workers}")
    config = WorkerConfig(
        jobs=jobs,
        run_options={k: v for k, v in (run_options or {}).items() if k != "budget"},
        write_boundary=write_boundary or _output_boundary(output),
        probe_repairs=repairs,
        encode=True,
    )
    if cluster is not None:
        # a local cluster's processes run Dask's own commands, never this main module again
        backend: Backend = DaskBackend(cluster, workers or default_workers(), config)
    else:
        count = min(workers or default_workers(), documents)
        if count <= 1:
            return None
        unimportable = main_not_importable()
        if unimportable is not None:
            _logger.warning(
                "worker processes cannot start: each would run the main module %s again and "
                "it is not a file (a script read from standard input?); extracting in this "
                "process instead (run the script from a file to use %d workers)",
                unimportable,
                count,
            )
            return None
        refuse_unguarded_main()
        process_backend = ProcessBackend(count, config)
        if process_backend.start_error is not None:
            process_backend.close()
            _logger.warning(
                "worker processes cannot start: all %d died while starting (%s); extracting "
                "in this process instead",
                count,
                process_backend.start_error,
            )
            return None
        backend = process_backend
    return ChunkMapper(
        backend,
        config,
        local,
        lost_record,
        documents=documents,
        repairer=repairer,
        save_repairs=save_repairs,
    )
