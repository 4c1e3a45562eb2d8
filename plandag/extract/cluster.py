"""Documents of a batch extracted on a Dask cluster (``plandag extract nfe --cluster``).

The same map as :mod:`plandag.extract.parallel` (the parent keeps the order, the batch-wide
checks, the budget, the repairs and every write), with chunks of documents as Dask tasks:

- ``--cluster local`` starts a ``distributed.LocalCluster`` on 127.0.0.1 (worker processes,
  one thread each, no dashboard) for the batch; ``--cluster tcp://HOST:PORT`` connects to an
  existing scheduler (``dask scheduler`` / ``dask worker tcp://HOST:PORT``) and leaves it
  running.
- Each document travels as its bytes: workers need no shared filesystem, only plandag
  installed (the same version).
- Each chunk is one task submitted with ``retries=2``; when a worker dies, the scheduler
  runs its tasks again elsewhere, and a chunk the scheduler gives up on
  (``KilledWorker``) is sent again by the mapper, document by document, a bounded number
  of times (:data:`plandag.extract.parallel.MAX_ATTEMPTS`). Workers never call a model, so
  a recomputed chunk costs nothing from the budget; repairs happen in the client.

Needs the ``dask`` extra (``pip install 'plandag[dask]'``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from plandag.errors import InputError
from plandag.extract import parallel

__all__ = ["DaskBackend"]

#: Seconds to wait for an existing scheduler to answer.
CONNECT_TIMEOUT = 10.0


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
        InputError: ``cluster`` is neither ``local`` nor ``tcp://...``, the ``dask`` extra is
            not installed, or the scheduler does not answer within :data:`CONNECT_TIMEOUT`.
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
            try:
                self.client = client_class(cluster, timeout=CONNECT_TIMEOUT)
            except (OSError, TimeoutError) as error:
                raise InputError(
                    f"--cluster {cluster}: no Dask scheduler answered ({error}); start one "
                    "with `dask scheduler` and workers with `dask worker tcp://HOST:8786`"
                ) from None
        known = len(self.client.scheduler_info().get("workers", {}))
        self.workers = max(1, known or workers)
        if config is not None and known:
            # a failure shows again on the first chunk, as that chunk's outcome
            with contextlib.suppress(Exception):
                self.client.run(parallel.warm_up, config)

    def submit(self, items: Sequence[parallel.Item], config: parallel.WorkerConfig) -> Any:
        return self.client.submit(parallel.CHUNK_WORK, list(items), config, retries=2, pure=False)

    def result(self, handle: Any) -> list[parallel.Outcome]:
        outcomes: list[parallel.Outcome] = handle.result()
        return outcomes

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
