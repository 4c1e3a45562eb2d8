"""Read-ahead of a worker's chunk: each file is advised before the chunk is extracted, and
advising never opens a pipe or a device nor fails on a bad path."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from plandag.extract import parallel
from plandag.extract.nfe import document as document_module
from plandag.extract.nfe.document import advise_read

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nfe"


def test_advise_read_leaves_pipes_missing_paths_and_folders_alone(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.xml"
    os.mkfifo(fifo)
    done = threading.Event()

    def advise_all() -> None:
        advise_read(fifo)  # opening a pipe for reading would wait for a writer
        advise_read(tmp_path / "missing.xml")
        advise_read(tmp_path)
        regular = tmp_path / "a.xml"
        regular.write_bytes(b"<a/>")
        advise_read(regular)
        done.set()

    worker = threading.Thread(target=advise_all, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert done.is_set()


def test_a_worker_advises_each_file_of_its_chunk_before_extracting_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    files = sorted(str(path) for path in EXAMPLES.glob("*.xml"))[:4]
    advised: list[str] = []
    extracted: list[str] = []
    monkeypatch.setattr(document_module, "advise_read", lambda path: advised.append(str(path)))
    real = parallel._extract_one

    async def spy(source: str, data: bytes | None, *rest: Any) -> Any:
        extracted.append(source)
        assert advised == files  # the whole chunk advised before its first document
        return await real(source, data, *rest)

    monkeypatch.setattr(parallel, "_extract_one", spy)
    items = [(path, None) for path in files] + [("given-as-bytes.xml", b"<a/>")]
    outcomes = parallel.extract_chunk(items, parallel.WorkerConfig())
    assert [kind for kind, _ in outcomes[:4]] == ["records"] * 4
    assert advised == files  # bytes given: nothing to read, nothing advised
    assert sorted(extracted) == sorted([*files, "given-as-bytes.xml"])
