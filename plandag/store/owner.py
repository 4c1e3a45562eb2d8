"""Which process holds a run (ARCHITECTURE.md, "States and exit codes").

The run store records, with a run that a process is running, that process's id and its
start time (seconds since the epoch). The run is held while that same process lives. The id
alone is not enough: once a process ends, the system may give its id to a new process,
which must not pass for the run's owner; the start time tells the two apart. A run
``running`` whose owner is gone *crashed* (killed, out of memory, the machine restarted):
that is derived each time the run is read (:attr:`plandag.store.RunRow.crashed`), never
stored, so it can never be out of date.

Start times come from psutil (``Process.create_time``), a maintained library that reads
them on Linux (``/proc/PID/stat``), macOS, Windows and the BSDs alike; reading ``/proc``
ourselves would cover Linux only. A process another user owns counts as alive (what gc must
never guess wrong about is a live owner). This process's own start time, which every run it
starts records, is read on Linux from ``/proc/self/stat`` and ``/proc/stat`` as psutil reads
it (the same figure, to the bit), so that a run need not import psutil.
"""

from __future__ import annotations

import functools
import os
import sys

__all__ = ["START_TOLERANCE_S", "owner_alive", "process_started", "this_process_started"]

START_TOLERANCE_S = 2.0
"""Seconds two readings of one process's start time may differ by: the system derives it
from the boot time, which Linux gives in whole seconds (``btime`` in ``/proc/stat``,
proc(5)) and clock adjustments move, so two readings of one process can be a second and a
hair apart; a process given a reused id starts later than that."""


def process_started(pid: int) -> float | None:
    """The start time of process ``pid``, seconds since the epoch; None when there is no
    such process (or it ended and only waits to be reaped) or its start time cannot be
    read."""
    import psutil

    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return float(process.create_time())
    except (psutil.Error, OSError, ValueError):
        return None


@functools.cache
def this_process_started() -> float | None:
    """The start time of this process (:func:`process_started` of ``os.getpid()``)."""
    started = _linux_started()
    return started if started is not None else process_started(os.getpid())


def _linux_started() -> float | None:
    """This process's start time from ``/proc`` (proc(5)): ``starttime``, the 22nd field of
    ``/proc/self/stat`` (clock ticks after boot), over the ticks per second, plus ``btime``
    of ``/proc/stat``, computed as psutil's ``Process.create_time`` does on Linux; None
    elsewhere or when either cannot be read."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        with open("/proc/self/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
        with open("/proc/stat", "rb") as system:
            boot = next(line for line in system if line.startswith(b"btime"))
        # fields[0] is the 3rd field (state): starttime, the 22nd, is fields[19]
        return float(fields[19]) / os.sysconf("SC_CLK_TCK") + float(boot.split()[1])
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def owner_alive(pid: int | None, started: float | None) -> bool:
    """Whether the process recorded as a run's owner still runs: process ``pid`` exists,
    has not ended, and started at ``started`` (within :data:`START_TOLERANCE_S`), so that a
    process given the same id later is not taken for it.

    Args:
        pid: the recorded process id, or None (no owner recorded).
        started: its recorded start time, seconds since the epoch; None for a run recorded
            without one (by an earlier plandag): the id alone then decides.

    Returns:
        True when that process runs (or exists but cannot be inspected); False otherwise.
    """
    if pid is None:
        return False
    import psutil

    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        if started is None:
            return True
        return abs(float(process.create_time()) - started) <= START_TOLERANCE_S
    except psutil.NoSuchProcess:
        return False
    except (psutil.Error, OSError):
        return True  # it exists, but another user's: never taken for gone
