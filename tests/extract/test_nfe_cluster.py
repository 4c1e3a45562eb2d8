"""Documents extracted on a Dask cluster on loopback: the same output as in one process,
also when a worker is killed mid-batch."""

from __future__ import annotations

import functools
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from plandag.extract import parallel
from plandag.extract.nfe.batch import expand_inputs, extract_batch
from plandag.testing.workers import kill_once

distributed = pytest.importorskip("distributed")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nfe"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(120),
]


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    """A LocalCluster on 127.0.0.1: 2 worker processes, one thread each, no dashboard."""
    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",  # no dashboard (below); HTTP server on a free port
        scheduler_kwargs={"dashboard": False},
    )
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


def _corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "in"
    shutil.copytree(EXAMPLES, folder)
    shutil.copy(sorted(EXAMPLES.glob("nfelib_*.xml"))[0], folder / "zz-copy.xml")
    (folder / "notes.txt").write_text("not an invoice\n", encoding="utf-8")
    return folder


def _run(folder: Path, output: Path, **options: Any) -> Any:
    files, missing = expand_inputs([str(folder)])
    return anyio.run(functools.partial(extract_batch, files, output, missing=missing, **options))


def test_a_dask_cluster_writes_the_same_bytes_as_one_process(
    scheduler: str, tmp_path: Path
) -> None:
    folder = _corpus(tmp_path)
    one = _run(folder, tmp_path / "one.jsonl", workers=1)
    dask = _run(folder, tmp_path / "dask.jsonl", cluster=scheduler, jobs=2)
    assert (tmp_path / "dask.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    assert dask.by_status == one.by_status
    assert dask.inputs_with_record == dask.inputs == 9


def test_a_dask_worker_killed_mid_batch_loses_no_input(
    scheduler: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _corpus(tmp_path)
    _run(folder, tmp_path / "one.jsonl", workers=1)
    victim = sorted(EXAMPLES.glob("uninfe_*.xml"))[0].name
    marker = tmp_path / "killed"
    monkeypatch.setattr(
        parallel, "CHUNK_WORK", functools.partial(kill_once, name=victim, marker=str(marker))
    )
    summary = _run(folder, tmp_path / "dask.jsonl", cluster=scheduler, jobs=1)
    assert marker.exists()  # a Dask worker was SIGKILLed while holding a chunk
    assert (tmp_path / "dask.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    assert summary.inputs_with_record == summary.inputs == 9


def test_cluster_local_starts_and_closes_its_own_cluster(tmp_path: Path) -> None:
    folder = _corpus(tmp_path)
    _run(folder, tmp_path / "one.jsonl", workers=1)
    _run(folder, tmp_path / "local.jsonl", cluster="local", workers=2)
    assert (tmp_path / "local.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()


def _worker_settings() -> dict[str, Any]:
    import dask

    return {
        key: dask.config.get(key)
        for key in (
            "distributed.worker.profile.enabled",
            "distributed.admin.tick.interval",
            "distributed.admin.system-monitor.interval",
            "distributed.worker.memory.monitor-interval",
        )
    }


def test_cluster_local_workers_do_not_profile_themselves() -> None:
    from plandag.extract.cluster import DaskBackend

    before = _worker_settings()
    backend = DaskBackend("local", 2)
    try:
        seen = backend.client.run(_worker_settings)
    finally:
        backend.close()
    expected = {
        "distributed.worker.profile.enabled": False,
        "distributed.admin.tick.interval": "1s",
        "distributed.admin.system-monitor.interval": "5s",
        "distributed.worker.memory.monitor-interval": "500ms",
    }
    assert list(seen.values()) == [expected, expected]
    assert _worker_settings() == before  # this process's own settings are untouched
