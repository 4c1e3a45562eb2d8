"""Documents of a batch extracted on a Dask cluster (``plandag extract nfe --cluster``).

The same map as :mod:`plandag.extract.parallel` (the parent keeps the order, the batch-wide
checks, the budget, the model repairs and every write), with chunks of documents as Dask tasks:

- ``--cluster local`` starts a ``distributed.LocalCluster`` on 127.0.0.1 (worker processes,
  one thread each, no dashboard nor what only a dashboard shows: :data:`LOCAL_CLUSTER_CONFIG`)
  for the batch; ``--cluster tcp://HOST:PORT`` connects to an
  existing scheduler (``dask scheduler`` / ``dask worker tcp://HOST:PORT``) and leaves it
  running.
- Each document travels as its bytes: workers need no shared filesystem, only plandag
  installed (the same version).
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
import logging
import socket
import struct
import time
import urllib.parse
from collections.abc import Sequence
from typing import Any

from plandag.errors import InputError
from plandag.extract import parallel

__all__ = ["LOCAL_CLUSTER_CONFIG", "DaskBackend", "probe_scheduler", "scheduler_address"]

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


#: Dask settings of the LocalCluster that ``--cluster local`` starts, so that its cores
#: extract documents rather than measure themselves: idle, Dask's defaults cost about 13 % of
#: a core (the command's process, which runs the scheduler and the nannies, 5 %, each worker
#: 4 %), these about 1.5 %. Off: each worker's statistical profiler (a stack sample every
#: 10 ms, shown only on a dashboard). Less often: the event loop's responsiveness tick (20 ms
#: to 1 s; a blocked loop is still reported), the system monitor's samples (500 ms to 5 s)
#: and the nannies' memory monitor (100 ms to 500 ms; a worker past its memory limit is
#: still restarted). The keys are Dask's (``distributed.yaml``); an existing scheduler
#: (``tcp://``) keeps its own settings.
LOCAL_CLUSTER_CONFIG: dict[str, Any] = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.worker.memory.monitor-interval": "500ms",
}


class DaskBackend:
    """Chunks as tasks on a Dask cluster.

    Args:
        cluster: ``"local"`` (a LocalCluster of ``workers`` processes on 127.0.0.1, closed
            with the batch) or ``"tcp://HOST:PORT"`` (an existing scheduler).
        workers: the LocalCluster's worker processes (>= 1); for an existing scheduler, the
            expected count when it has no worker yet.
        config: what the chunks will need: every worker present is made ready for it
            (:func:`plandag.extract.parallel.warm_up`) before the first chunk, or None.

    Raises:
        InputError: ``cluster`` is neither ``local`` nor ``tcp://HOST:PORT``, the ``dask``
            extra is not installed, or no Dask scheduler answers at the address within
            :data:`CONNECT_TIMEOUT` (:func:`probe_scheduler`).
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
        cluster_class: Any = distributed.LocalCluster
        self._local: Any = None
        if cluster == "local":
            import dask

            # read when the scheduler, nannies and workers are made (each worker gets the
            # nanny's copy), so the batch's own Dask settings stay as they were
            with dask.config.set(LOCAL_CLUSTER_CONFIG):
                self._local = cluster_class(
                    n_workers=workers,
                    threads_per_worker=1,
                    processes=True,
                    host="127.0.0.1",
                    # no dashboard; the scheduler's HTTP server (metrics) on a free loopback
                    # port: with None it takes :8787, shared by every LocalCluster
                    dashboard_address="127.0.0.1:0",
                    scheduler_kwargs={"dashboard": False},
                )
            # records come back from the workers straight to this process, not through the
            # scheduler (which a LocalCluster runs here too)
            self.client: Any = client_class(self._local, direct_to_workers=True)
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
        """Nothing to do: the scheduler replaces lost workers (a LocalCluster's nannies
        restart them)."""

    def close(self) -> None:
        self.client.close()
        if self._local is not None:
            self._local.close()
