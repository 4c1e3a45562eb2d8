"""A Dask preload module: the scheduler and worker processes that ``--cluster local`` starts
end when the command that started them ends, however it ends.

The command stops them itself when the batch ends, fails or is interrupted
(:class:`plandag.extract.cluster.LocalDaskProcesses`); a command killed with SIGKILL (or by
the out-of-memory killer) cannot. Loaded into each of them (``dask scheduler --preload``,
``dask worker --preload-nanny``; the preload interface:
https://docs.dask.org/en/stable/how-to/customize-initialization.html#preload-scripts), it
watches its parent process, and once that is gone (the process was handed to another
parent) it asks its own process to stop (SIGTERM, which Dask's command line handles by
closing cleanly), and ends it outright if that has not happened within
:data:`GRACE_SECONDS`. The worker processes a nanny started end with their nanny (Dask's
own rule).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

__all__ = ["GRACE_SECONDS", "POLL_SECONDS", "dask_setup"]

#: Seconds between two looks at the parent process.
POLL_SECONDS = 0.5
#: Seconds a process has to close cleanly once its parent is gone.
GRACE_SECONDS = 10.0

_started: list[threading.Thread] = []


def dask_setup(server: Any) -> None:
    """Start watching this process's parent (once per process, whatever the number of
    servers it hosts: ``dask worker --nworkers N`` hosts N nannies)."""
    if _started:
        return
    thread = threading.Thread(target=_watch, args=(os.getppid(),), daemon=True)
    _started.append(thread)
    thread.start()


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_SECONDS)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(GRACE_SECONDS)
    os._exit(1)
