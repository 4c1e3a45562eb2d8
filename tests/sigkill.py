"""SIGKILL a child process at the point it marks.

The crash tests start a real ``plandag`` process whose code stops at a chosen point: it
writes a mark file there and sleeps. :func:`kill_at_mark` waits (bounded) for that file, kills
the process with SIGKILL, reaps it and checks that SIGKILL is what ended it.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path


def kill_at_mark(
    process: subprocess.Popen[bytes], mark: Path, point: str, *, seconds: float = 60.0
) -> None:
    """Wait until ``mark`` exists, then SIGKILL ``process`` and wait for it to end.

    Args:
        process: the child, started with ``stderr=subprocess.PIPE`` (its text is shown when it
            ends before reaching the point).
        mark: the file the child writes when it reaches the point.
        point: what the point is called, for the failure message.
        seconds: how long the child may take to reach the point.

    Raises:
        AssertionError: the child ended, or did not reach the point within ``seconds``, or
            something other than SIGKILL ended it.
    """
    try:
        deadline = time.monotonic() + seconds
        while not mark.exists():
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, f"the process never reached {point}"
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        if process.stderr is not None:
            process.stderr.close()
    assert process.returncode == -signal.SIGKILL
