"""How documents travel to worker processes and back: workers ready before the first
document, a batch's duration without the workers' start and stop, and the hand-off of
chunks (in order, every outcome kind) the same as extracting in one process."""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from plandag.extract import mapper, parallel
from plandag.extract.nfe import batch
from plandag.extract.nfe.batch import expand_inputs, extract_batch
from plandag.extract.nfe.encoded import EncodedRecord
from plandag.tools.boundary import WriteBoundary

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nfe"


class _Clock:
    """A virtual ``time`` module for the batch: ``perf_counter`` and ``process_time`` move
    only when told."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.cpu = 50.0

    def perf_counter(self) -> float:
        return self.now

    def process_time(self) -> float:
        return self.cpu


class _InProcess:
    """A backend that runs each chunk in this process (where the batch waits for it);
    stopping it takes 500 virtual seconds (and 60 of CPU), starting it 7 (and 3 of CPU),
    each chunk's records 0.25 of CPU."""

    sends_bytes = False
    chunk_jobs = 2

    def __init__(self, clock: _Clock) -> None:
        self.workers = 2
        self.clock = clock
        self.closed = 0
        self.chunks: list[list[str]] = []
        clock.now += 7.0
        clock.cpu += 3.0

    def submit(self, items: Sequence[parallel.Item], config: parallel.WorkerConfig) -> Any:
        self.chunks.append([source for source, _ in items])
        return list(items), config

    def result(self, handle: Any) -> list[parallel.Outcome]:
        self.clock.cpu += 0.25
        return parallel.extract_chunk(*handle)  # in a thread of the batch, as a pool's wait

    def lost(self, error: BaseException) -> bool:
        return False

    def renew(self, handle: Any) -> None:
        pass

    def close(self) -> None:
        self.closed += 1
        self.clock.now += 500.0
        self.clock.cpu += 60.0


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "in"
    shutil.copytree(EXAMPLES, folder)
    shutil.copy(sorted(EXAMPLES.glob("nfelib_*.xml"))[0], folder / "zz-copy.xml")
    (folder / "notes.txt").write_text("not an invoice\n", encoding="utf-8")
    (folder / "empty.xml").write_bytes(b"")
    return folder


def _run(folder: Path, output: Path, **options: Any) -> Any:
    files, missing = expand_inputs([str(folder)])
    return anyio.run(functools.partial(extract_batch, files, output, missing=missing, **options))


def test_process_backend_workers_are_started_and_warmed_up_when_it_returns(
    tmp_path: Path,
) -> None:
    config = parallel.WorkerConfig(jobs=1, write_boundary=WriteBoundary([tmp_path]))
    backend = parallel.ProcessBackend(2, config)
    try:
        assert len(backend.started) == 2
        assert all(warm for _, warm in backend.started)
        first = sorted(EXAMPLES.glob("*.xml"))[0]
        outcomes = backend.result(backend.submit([(str(first), None)], config))
        assert [kind for kind, _ in outcomes] == ["records"]
    finally:
        backend.close()


def test_a_batch_duration_and_cpu_leave_out_starting_and_stopping_its_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = _Clock()
    monkeypatch.setattr(batch, "time", clock)
    backends: list[_InProcess] = []

    def open_mapper(**options: Any) -> parallel.ChunkMapper:
        backend = _InProcess(clock)
        backends.append(backend)
        config = parallel.WorkerConfig(
            jobs=options["jobs"], write_boundary=WriteBoundary([tmp_path])
        )
        return parallel.ChunkMapper(backend, config, options["local"], parallel.lost_record)

    monkeypatch.setattr(mapper, "open_mapper", open_mapper)
    summary = _run(_folder(tmp_path), tmp_path / "out.jsonl", workers=2, jobs=1)
    assert backends[0].closed == 1
    assert summary.start_seconds == 7.0
    assert summary.duration == 7.0  # the start, and nothing of the 500 s the stop took
    # the batch's own CPU: its chunks' records, neither the workers' start nor their stop
    assert summary.cpu_seconds == 0.25 * len(backends[0].chunks) > 0


class _Refusing(_InProcess):
    """A backend that cannot send anything (a closed client, an unpicklable argument)."""

    def submit(self, items: Sequence[parallel.Item], config: parallel.WorkerConfig) -> Any:
        raise RuntimeError("the cluster refused the task")


def test_a_chunk_the_backend_cannot_send_gives_error_rows_instead_of_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def open_mapper(**options: Any) -> parallel.ChunkMapper:
        config = parallel.WorkerConfig(jobs=1, write_boundary=WriteBoundary([tmp_path]))
        return parallel.ChunkMapper(
            _Refusing(_Clock()), config, options["local"], parallel.lost_record
        )

    monkeypatch.setattr(mapper, "open_mapper", open_mapper)
    folder = tmp_path / "in"
    shutil.copytree(EXAMPLES, folder)
    summary = _run(folder, tmp_path / "out.jsonl", workers=2, jobs=1)
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text("utf-8").splitlines()]
    assert len(rows) == summary.inputs == 7
    assert {row["errors"][0]["code"] for row in rows} == {"internal_error"}
    assert {row["errors"][0]["message"] for row in rows} == {
        "RuntimeError: the cluster refused the task"
    }


def test_a_packed_chunk_unpacks_to_the_outcomes_of_the_chunk(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    items: list[parallel.Item] = [
        (str(path), None) for path in sorted(folder.iterdir()) if path.is_file()
    ]
    config = parallel.WorkerConfig(jobs=2, write_boundary=WriteBoundary([tmp_path]))
    packed = parallel.run_packed(parallel.extract_chunk, items, config)
    assert isinstance(packed, bytes)
    outcomes = parallel.unpack(packed)
    assert outcomes == parallel.extract_chunk(items, config)
    assert [kind for kind, _ in outcomes] == ["records"] * len(items)
    sources = [records[0]["source"] for _, records in outcomes]
    assert sources == [source for source, _ in items]


def _forty_copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[_InProcess]]:
    """A folder of 40 copies of one shipped invoice (one key: every input after the first
    repeats it), and the in-process backends (chunks of up to 8) the batches run on from
    now on, one per batch."""
    folder = tmp_path / "in"
    folder.mkdir()
    example = sorted(EXAMPLES.glob("nfelib_*.xml"))[0]
    for number in range(40):
        shutil.copy(example, folder / f"{number:02}.xml")
    backends: list[_InProcess] = []

    def open_mapper(**options: Any) -> parallel.ChunkMapper:
        backend = _InProcess(_Clock())
        backend.chunk_jobs = 8
        backends.append(backend)
        config = parallel.WorkerConfig(jobs=1, write_boundary=WriteBoundary([tmp_path]))
        return parallel.ChunkMapper(
            backend, config, options["local"], parallel.lost_record, documents=40
        )

    monkeypatch.setattr(mapper, "open_mapper", open_mapper)
    return folder, backends


def test_the_last_chunks_of_a_batch_are_shared_out_between_the_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, backends = _forty_copies(tmp_path, monkeypatch)
    _run(folder, tmp_path / "one.jsonl", workers=1)
    _run(folder, tmp_path / "two.jsonl", workers=2, jobs=1)
    assert (tmp_path / "two.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    sizes = [len(chunk) for chunk in backends[0].chunks]
    assert sum(sizes) == 40
    assert sizes[0] == 8
    sent = 0
    for size in sizes:  # never more than the unsent documents shared out as 2 x 2 chunks
        assert size <= max(1, -(-(40 - sent) // 4))
        sent += size
    assert sizes[-1] <= 2


def test_a_chunk_is_full_size_while_enough_documents_are_left() -> None:
    backend = _InProcess(_Clock())
    backend.chunk_jobs = 8

    async def local(path: Path) -> list[dict[str, Any]]:
        return []

    config = parallel.WorkerConfig(jobs=2)
    mapper = parallel.ChunkMapper(backend, config, local, parallel.lost_record, documents=1000)
    assert mapper.chunk_now() == 16
    mapper._handed = 1000 - 64  # 64 left: 4 full chunks for 2 workers, two each
    assert mapper.chunk_now() == 16
    mapper._handed = 1000 - 40
    assert mapper.chunk_now() == 10
    mapper._handed = 1000 - 3
    assert mapper.chunk_now() == 1
    unknown = parallel.ChunkMapper(backend, config, local, parallel.lost_record)
    assert unknown.chunk_now() == 16


def test_the_inputs_of_a_chunk_are_written_together_and_groups_keep_their_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, backends = _forty_copies(tmp_path, monkeypatch)
    _run(folder, tmp_path / "one.jsonl", workers=1)
    progress: list[int] = []
    lines_at_flush: list[int] = []
    output = tmp_path / "two.jsonl"

    def on_flush() -> None:
        lines_at_flush.append(len(output.read_bytes().splitlines()))

    _run(
        folder,
        output,
        workers=2,
        jobs=1,
        on_progress=lambda done, total: progress.append(done),
        on_flush=on_flush,
        flush_records=5,
        flush_seconds=3600,
    )
    assert output.read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    # one call per run of inputs ready together, not one per input
    assert progress[0] == 0
    assert progress[-1] == 40
    assert len(progress) - 1 <= len(backends[0].chunks) < 40
    # a group is written once 5 records wait, after the input that makes them 5
    assert lines_at_flush[:8] == [5, 10, 15, 20, 25, 30, 35, 40]


def test_a_pool_sends_the_configuration_its_workers_started_with_only_when_it_changed(
    tmp_path: Path,
) -> None:
    config = parallel.WorkerConfig(jobs=1, write_boundary=WriteBoundary([tmp_path]), encode=True)
    changed = dataclasses.replace(config, encode=False)
    backend = parallel.ProcessBackend(1, config)
    sent: list[Any] = []
    pool_submit = backend._pool.submit

    def submit(function: Any, *args: Any) -> Any:
        sent.append(args[-1])
        return pool_submit(function, *args)

    backend._pool.submit = submit  # type: ignore[method-assign]
    first = sorted(EXAMPLES.glob("nfelib_*.xml"))[0]
    items: list[parallel.Item] = [(str(first), None)]
    try:
        started = backend.result(backend.submit(items, config))
        other = backend.result(backend.submit(items, changed))
    finally:
        backend.close()
    assert sent == [None, changed]  # the start's configuration is the worker's own already
    assert started == parallel.extract_chunk(items, config)
    assert other == parallel.extract_chunk(items, changed)
    assert [type(record) for _, records in started for record in records] == [EncodedRecord]
    assert [type(record) for _, records in other for record in records] == [dict]


def test_a_chunk_without_its_configuration_in_a_worker_started_without_one_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="without its configuration"):
        parallel.run_packed(parallel.extract_chunk, [], None)
