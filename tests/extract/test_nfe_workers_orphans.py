"""Worker processes end with the command: when the command is killed (SIGKILL, the kernel's
out-of-memory killer), its idle workers do not stay behind waiting for work forever."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = [pytest.mark.skipif(sys.platform != "linux", reason="reads /proc"), pytest.mark.slow]

PARENT = textwrap.dedent(
    """
    import os, sys, time
    from plandag.extract.parallel import ProcessBackend

    backend = ProcessBackend(2)
    pool = backend._pool
    futures = [pool.submit(os.getpid) for _ in range(8)]
    [future.result() for future in futures]
    print(" ".join(str(pid) for pid in pool._processes), flush=True)
    time.sleep(600)
    """
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return False


@pytest.mark.timeout(60)
def test_workers_end_when_the_command_is_killed() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert parent.stdout is not None
        workers = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(workers) == 2
        assert all(_alive(pid) for pid in workers)

        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)

        deadline = time.monotonic() + 20  # bounded: each worker checks about once a second
        while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [pid for pid in workers if _alive(pid)] == []
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(timeout=10)
        if parent.stdout is not None:
            parent.stdout.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)  # whatever the session still holds
