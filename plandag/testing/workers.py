"""Test helpers for worker processes: a chunk function that kills its own worker once.

Used to prove that a worker killed mid-batch loses nothing (see
:mod:`plandag.extract.parallel`); picklable by reference, so it runs in worker processes
and on Dask workers.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from pathlib import Path

from plandag.extract.parallel import Item, Outcome, WorkerConfig, extract_chunk

__all__ = ["kill_once"]


def kill_once(
    items: Sequence[Item], config: WorkerConfig, *, name: str, marker: str | None = None
) -> list[Outcome]:
    """Extract a chunk like :func:`~plandag.extract.parallel.extract_chunk`, except that the
    first worker to meet a document whose file name is ``name`` kills itself with SIGKILL
    (once per ``marker`` file, which it creates first; the marker's folder must be shared
    by the workers, as on one machine; every time without a marker).

    Args:
        items: the chunk's documents.
        config: how to extract.
        name: the file name that triggers the kill.
        marker: a file path; its existence means the kill already happened; None: kill
            every time.

    Returns:
        The chunk's outcomes (when this worker was not killed).
    """
    if any(Path(source).name == name for source, _ in items):
        if marker is None:
            os.kill(os.getpid(), signal.SIGKILL)
            return []  # not reached
        try:
            descriptor = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            pass
        else:
            os.close(descriptor)
            os.kill(os.getpid(), signal.SIGKILL)
    return extract_chunk(items, config)
