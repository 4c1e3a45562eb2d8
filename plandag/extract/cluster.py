"""Documents of a batch extracted on a Dask cluster (``plandag extract nfe --cluster``).

The same map as :mod:`plandag.extract.parallel` (the parent keeps the order, the batch-wide
checks, the budget, the model repairs and every write), with chunks of documents as Dask tasks:

- ``--cluster local`` starts, for the batch, a Dask scheduler and its workers on 127.0.0.1,
  each in a process of its own (:class:`LocalDaskProcesses`: Dask's own ``dask scheduler``
  and ``dask worker`` commands; worker processes of one thread each, no dashboard nor what
  only a dashboard shows: :data:`LOCAL_CLUSTER_CONFIG`), so that the command's process
  only submits chunks and receives their records (a ``distributed.LocalCluster`` would
  run the scheduler, and its nannies, in the command's own process). They are stopped when
  the batch ends, fails or is interrupted, and end by themselves when the command is
  killed (:mod:`plandag.extract.cluster_watch`). ``--cluster tcp://HOST:PORT`` connects
  to an existing scheduler (``dask scheduler`` / ``dask worker tcp://HOST:PORT``) and
  leaves it running.
- On an existing scheduler each document travels as its bytes: workers need no shared
  filesystem, only plandag installed (the same version). The local workers read the files
  themselves.
- Each chunk is one task submitted with ``retries=2``; when a worker dies, the scheduler
  runs its tasks again elsewhere, and a chunk the scheduler gives up on
  (``KilledWorker``) is sent again by the mapper, document by document, a bounded number
  of times (:data:`plandag.extract.parallel.MAX_ATTEMPTS`). Workers never call a model, so
  a recomputed chunk costs nothing from the budget; model repairs happen in the client,
  and the repairs that worked travel to the workers with each later chunk (in its
  :class:`~plandag.extract.parallel.WorkerConfig`), which apply them with no model call.

Needs the ``dask`` extra (``pip install 'plandag[dask]'``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from plandag.errors import InputError
from plandag.extract import parallel

__all__ = [
    "LOCAL_CLUSTER_CONFIG",
    "DaskBackend",
    "LocalDaskProcesses",
    "probe_scheduler",
    "scheduler_address",
]

logger = logging.getLogger("plandag.extract")

#: Seconds to wait for an existing scheduler to answer.
CONNECT_TIMEOUT = 10.0

#: The most bytes a Dask peer's first message (its handshake, about 60 bytes) may announce.
_HANDSHAKE_BYTES = 64 * 1024

_START_ONE = "start one with `dask scheduler` and workers with `dask worker tcp://HOST:8786`"


def scheduler_address(cluster: str) -> tuple[str, int]:
    """The host and port of a ``tcp://HOST:PORT`` scheduler address (an IPv6 host in
    brackets: ``tcp://[::1]:8786``).

    Raises:
        InputError: not of that shape: not a URL (an unclosed IPv6 bracket), no host, no
            port, a port outside 1-65535, or a path, query or user part (what was given and
            what to give).
    """
    shape = "give tcp://HOST:PORT, e.g. tcp://10.0.0.5:8786"
    try:
        parts = urllib.parse.urlsplit(cluster)
    except ValueError as error:  # an unclosed IPv6 bracket and the like
        raise InputError(f"--cluster {cluster}: {error}; {shape}") from None
    try:
        port = parts.port
    except ValueError:
        raise InputError(
            f"--cluster {cluster}: the port must be a number from 1 to 65535; {shape}"
        ) from None
    if parts.scheme != "tcp" or parts.path or parts.query or parts.fragment or parts.username:
        raise InputError(f"--cluster {cluster}: {shape}")
    if not parts.hostname:
        raise InputError(f"--cluster {cluster}: no host; {shape}")
    if port is None:
        raise InputError(f"--cluster {cluster}: no port; {shape} (8786 is Dask's default)")
    if not 1 <= port <= 65535:
        raise InputError(f"--cluster {cluster}: the port must be from 1 to 65535; {shape}")
    return parts.hostname, port


def _receive(connection: socket.socket, count: int, deadline: float) -> bytes:
    """Exactly ``count`` bytes from ``connection`` before ``deadline`` (``time.monotonic``).

    Raises:
        TimeoutError: the deadline passed first.
        EOFError: the peer closed the connection first.
    """
    data = bytearray()
    while len(data) < count:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        connection.settimeout(left)
        chunk = connection.recv(count - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return bytes(data)


def probe_scheduler(cluster: str, timeout: float) -> None:
    """Check within ``timeout`` seconds in all that a Dask scheduler listens at ``cluster``.

    A Dask peer speaks first: on a new connection it sends its handshake, one message
    framed as Dask's TCP transport frames every message (an 8-byte little-endian length,
    then that many bytes). The probe connects, reads that message and closes, so that a
    peer which refuses, never answers, or answers with something else (an SSH server's
    banner) is an error at once or after ``timeout``, never a wait without end (the Dask
    client itself waits for a handshake without a time limit).

    The address is *unreachable* when no byte ever comes back: the connection is refused,
    times out, has no route, or is accepted and then closed, reset or left silent (what a
    port forward, tunnel or proxy with nothing behind it does, and a server that waits for
    the client to speak first). It is *not a Dask scheduler* only when bytes come back that
    are not a Dask handshake.

    Args:
        cluster: ``tcp://HOST:PORT``.
        timeout: seconds for the connection and the handshake together.

    Raises:
        InputError: the address is malformed, the host unknown, the address unreachable,
            or what answered is not a Dask scheduler (what happened and what to do).
    """
    host, port = scheduler_address(cluster)
    deadline = time.monotonic() + timeout
    check = (
        f"check the address and that a Dask scheduler runs there (port 8786 by default) and "
        f"can be reached from here, or {_START_ONE}"
    )
    try:
        connection = socket.create_connection((host, port), timeout=timeout)
    except socket.gaierror as error:
        raise InputError(
            f"--cluster {cluster}: the host {host!r} is unknown ({error.strerror}); give the "
            "scheduler machine's name or address"
        ) from None
    except TimeoutError:
        raise InputError(
            f"--cluster {cluster}: unreachable: no answer to the connection within "
            f"{timeout:g} s (a firewall may drop it); {check}"
        ) from None
    except OSError as error:
        raise InputError(
            f"--cluster {cluster}: unreachable: the connection failed "
            f"({error.strerror or error}); {check}"
        ) from None
    with connection:
        received = 0
        try:
            first = _receive(connection, 1, deadline)  # the first byte: something answered
            received = 1
            (length,) = struct.unpack("<Q", first + _receive(connection, 7, deadline))
            if not 0 < length <= _HANDSHAKE_BYTES:
                raise ValueError(length)
            _receive(connection, length, deadline)
        except TimeoutError:
            if received:
                raise InputError(
                    f"--cluster {cluster}: the server there is not a Dask scheduler (its "
                    f"greeting did not arrive whole within {timeout:g} s); give the port of "
                    "`dask scheduler` (8786 by default)"
                ) from None
            raise InputError(
                f"--cluster {cluster}: unreachable: the connection opened but nothing "
                f"answered within {timeout:g} s (a Dask scheduler greets at once); {check}"
            ) from None
        except (EOFError, OSError) as error:
            if received:
                raise InputError(
                    f"--cluster {cluster}: the server there is not a Dask scheduler (it hung "
                    "up in the middle of its greeting); give the port of `dask scheduler` "
                    "(8786 by default)"
                ) from None
            how = "closed" if isinstance(error, EOFError) else "reset"
            raise InputError(
                f"--cluster {cluster}: unreachable: the connection was {how} before any "
                f"answer (a port forward, tunnel or proxy with nothing behind it?); {check}"
            ) from None
        except ValueError:
            raise InputError(
                f"--cluster {cluster}: the server there is not a Dask scheduler (it did not "
                "greet as one); give the port of `dask scheduler` (8786 by default)"
            ) from None


#: Dask settings of the cluster that ``--cluster local`` starts (given to its processes as
#: ``DASK_*`` environment variables), so that its cores extract documents rather than
#: measure themselves: idle, Dask's defaults cost about 13 % of a core (the scheduler and the
#: nannies 5 %, each worker 4 %), these about 1.5 %. Off: each worker's statistical
#: profiler (a stack sample every 10 ms, shown only on a dashboard). Less often: the event
#: loop's responsiveness tick (20 ms to 1 s; a blocked loop is still reported), the system
#: monitor's samples (500 ms to 5 s) and the nannies' memory monitor (100 ms to 500 ms; a
#: worker past its memory limit is still restarted). The keys are Dask's
#: (``distributed.yaml``); an existing scheduler (``tcp://``) keeps its own settings.
LOCAL_CLUSTER_CONFIG: dict[str, Any] = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.worker.memory.monitor-interval": "500ms",
}


#: Seconds ``--cluster local`` waits for its scheduler and workers to start.
LOCAL_START_TIMEOUT = 120.0
#: Seconds each of its processes has to end once asked, before it is killed.
LOCAL_STOP_TIMEOUT = 10.0


def _environment_name(key: str) -> str:
    """The ``DASK_*`` environment variable that sets the Dask setting ``key`` (Dask's rule:
    ``.`` as ``__``, upper case)."""
    return "DASK_" + key.replace(".", "__").replace("-", "_").upper()


class LocalDaskProcesses:
    """A Dask scheduler and ``workers`` worker processes on 127.0.0.1, none of them in this
    process: ``dask scheduler`` and ``dask worker --nworkers N --nthreads 1`` (a nanny per
    worker, which restarts a worker that dies), started with this Python.

    Each runs in a session of its own, so that Ctrl-C in the terminal reaches the command
    alone, which then stops them (:meth:`close`); each also ends by itself when the command
    ends without stopping them (:mod:`plandag.extract.cluster_watch`). Their logs go to a
    file in a temporary folder (removed by :meth:`close`), quoted in the error when they do
    not start.

    Args:
        workers: worker processes (>= 1).
        timeout: seconds to wait for the scheduler's address.

    Attributes:
        address: the scheduler's ``tcp://127.0.0.1:PORT``.
        processes: the scheduler's and the workers' ``subprocess.Popen``.

    Raises:
        InputError: the scheduler did not start (its log's last lines in the message).
    """

    def __init__(self, workers: int, *, timeout: float = LOCAL_START_TIMEOUT) -> None:
        self._folder = Path(tempfile.mkdtemp(prefix="plandag-dask-"))
        self.processes: list[subprocess.Popen[bytes]] = []
        self._log = (self._folder / "dask.log").open("ab")
        environment = dict(os.environ)
        for key, value in LOCAL_CLUSTER_CONFIG.items():
            environment[_environment_name(key)] = str(value)
        scheduler_file = self._folder / "scheduler.json"
        watch = "plandag.extract.cluster_watch"
        try:
            scheduler = ["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard"]
            scheduler += ["--scheduler-file", str(scheduler_file), "--preload", watch]
            self._start(scheduler, environment)
            self.address = self._scheduler_address(scheduler_file, timeout)
            worker = ["worker", self.address, "--nworkers", str(workers), "--nthreads", "1"]
            worker += ["--host", "127.0.0.1", "--no-dashboard", "--preload-nanny", watch]
            worker += ["--death-timeout", "60", "--local-directory", str(self._folder)]
            self._start(worker, environment)
        except BaseException:
            self.close()
            raise

    def _start(self, arguments: list[str], environment: dict[str, str]) -> None:
        self.processes.append(
            subprocess.Popen(
                [sys.executable, "-m", "dask", *arguments],
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=self._log,
                env=environment,
                start_new_session=True,
            )
        )

    def _scheduler_address(self, scheduler_file: Path, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        scheduler = self.processes[0]
        while time.monotonic() < deadline and scheduler.poll() is None:
            try:
                address = json.loads(scheduler_file.read_text("utf-8"))["address"]
            except (OSError, ValueError, KeyError, TypeError):
                time.sleep(0.05)
                continue
            return str(address)
        why = (
            f"it exited with code {scheduler.returncode}"
            if scheduler.poll() is not None
            else f"it gave no address within {timeout:g} s"
        )
        raise InputError(f"--cluster local: the Dask scheduler did not start ({why}){self._tail()}")

    def _tail(self) -> str:
        try:
            self._log.flush()
            lines = (self._folder / "dask.log").read_text("utf-8", "replace").splitlines()
        except OSError:
            return ""
        return ("; its log ends: " + " | ".join(lines[-5:])) if lines else ""

    def close(self, timeout: float = LOCAL_STOP_TIMEOUT, *, asked: bool = False) -> None:
        """Stop the workers and the scheduler and wait for them; then remove the temporary
        folder. Idempotent.

        Args:
            timeout: seconds each stage may take: with ``asked``, the processes' own end;
                then, for those still running, their end once sent SIGTERM (which Dask
                handles by closing cleanly); past that, each one's process group is killed.
            asked: the scheduler was already told to shut down with its workers
                (``Client.shutdown``): they are given ``timeout`` seconds to end first.
        """
        if asked:
            _wait_all(self.processes, timeout)
        for process in reversed(self.processes):
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.terminate()
        _wait_all(self.processes, timeout)
        for process in self.processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout)
        self.processes.clear()
        if not self._log.closed:
            self._log.close()
        shutil.rmtree(self._folder, ignore_errors=True)


def _wait_all(processes: Sequence[subprocess.Popen[bytes]], timeout: float) -> None:
    """Wait until every process has ended or ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(max(0.0, deadline - time.monotonic()))


class DaskBackend:
    """Chunks as tasks on a Dask cluster.

    Args:
        cluster: ``"local"`` (a scheduler and ``workers`` worker processes on 127.0.0.1,
            outside this process: :class:`LocalDaskProcesses`, stopped with the batch) or
            ``"tcp://HOST:PORT"`` (an existing scheduler).
        workers: the local cluster's worker processes (>= 1); for an existing scheduler,
            the expected count when it has no worker yet.
        config: what the chunks will need: every worker present is made ready for it
            (:func:`plandag.extract.parallel.warm_up`) before the first chunk, or None.

    Raises:
        InputError: ``cluster`` is neither ``local`` nor ``tcp://HOST:PORT``, the ``dask``
            extra is not installed, no Dask scheduler answers at the address within
            :data:`CONNECT_TIMEOUT` (:func:`probe_scheduler`), or the local cluster did
            not start within :data:`LOCAL_START_TIMEOUT`.

    Attributes:
        sends_bytes: True for an existing scheduler (each document travels as its bytes);
            False for the local cluster, whose workers read the files themselves.
    """

    sends_bytes = True
    #: a task costs the scheduler and the network more than a process pool's: bigger chunks
    chunk_jobs = 2 * parallel.CHUNK_JOBS

    def __init__(
        self, cluster: str, workers: int, config: parallel.WorkerConfig | None = None
    ) -> None:
        if cluster != "local" and not cluster.startswith("tcp://"):
            raise InputError(
                f"--cluster {cluster!r}: give 'local' (a Dask cluster on this machine) or the "
                "address of a running Dask scheduler, e.g. tcp://10.0.0.5:8786"
            )
        try:
            import distributed
        except ImportError as error:
            raise InputError(
                f"--cluster needs Dask's distributed package ({error}); install the extra: "
                "pip install 'plandag[dask]'"
            ) from None
        client_class: Any = distributed.Client
        self._local: LocalDaskProcesses | None = None
        if cluster == "local":
            self.sends_bytes = False  # the workers share this machine's files
            self._local = LocalDaskProcesses(workers)
            try:
                # records come back from the workers straight to this process, not
                # through the scheduler
                self.client: Any = client_class(
                    self._local.address, timeout=CONNECT_TIMEOUT, direct_to_workers=True
                )
                self.client.wait_for_workers(workers, timeout=LOCAL_START_TIMEOUT)
            except BaseException as error:
                tail = self._local._tail()
                self._close_local()
                if isinstance(error, Exception):
                    raise InputError(
                        f"--cluster local: the Dask workers did not start ({error}){tail}"
                    ) from None
                raise
        else:
            probe_scheduler(cluster, CONNECT_TIMEOUT)
            try:
                self.client = client_class(cluster, timeout=CONNECT_TIMEOUT)
            except Exception as error:  # whatever the client met, said in one sentence
                raise InputError(
                    f"--cluster {cluster}: no Dask scheduler answered ({error}); start one "
                    "with `dask scheduler` and workers with `dask worker tcp://HOST:8786`"
                ) from None
        known = len(self.client.scheduler_info().get("workers", {}))
        self.workers = max(1, known or workers)
        if not known and self._local is None:
            logger.warning(
                "--cluster %s: the scheduler has no worker yet; the documents wait until "
                "workers join (start them with `dask worker %s --nthreads 1`)",
                cluster,
                cluster,
            )
        if config is not None and known:
            # a failure shows again on the first chunk, as that chunk's outcome
            with contextlib.suppress(Exception):
                self.client.run(parallel.warm_up, config)

    def submit(self, items: Sequence[parallel.Item], config: parallel.WorkerConfig) -> Any:
        return self.client.submit(
            parallel.run_packed, parallel.CHUNK_WORK, list(items), config, retries=2, pure=False
        )

    def result(self, handle: Any) -> list[parallel.Outcome]:
        return parallel.unpack(handle.result())

    def lost(self, error: BaseException) -> bool:
        from distributed import KilledWorker

        return isinstance(error, KilledWorker)

    def renew(self, handle: Any) -> None:
        """Nothing to do: the scheduler replaces lost workers (the local cluster's nannies
        restart them)."""

    def close(self) -> None:
        """Disconnect; the local cluster's scheduler and workers are stopped and waited
        for (no process left behind)."""
        if self._local is not None:
            self._close_local()
            return
        self.client.close()

    def _close_local(self) -> None:
        client = getattr(self, "client", None)
        asked = False
        try:
            if client is not None:
                with contextlib.suppress(Exception):
                    # the scheduler stops its workers, then itself
                    client.shutdown()
                    asked = True
                with contextlib.suppress(Exception):
                    client.close()
        finally:
            if self._local is not None:
                self._local.close(asked=asked)
