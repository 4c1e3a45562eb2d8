"""An input's status is read once from the expansion of the PATH arguments to the batch's
placing of it, and a file that changes after its status was read is still never waited on."""

from __future__ import annotations

import functools
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest

from plandag.extract import parallel
from plandag.extract.nfe.batch import BatchSummary, expand_inputs, extract_batch
from plandag.extract.nfe.document import error_record, file_sha256, read_regular_file

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nfe"


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    for path in sorted(EXAMPLES.glob("*.xml")):
        shutil.copy(path, folder / path.name)
    (folder / "notes.txt").write_text("not an invoice\n")
    os.mkfifo(folder / "pipe.xml")
    (folder / "dangling.xml").symlink_to(tmp_path / "nowhere")
    return folder


async def _stub(path: Path) -> list[dict[str, Any]]:
    """An extractor that reads nothing: one error record naming the path."""
    return [error_record(str(path), "", "stub", f"{path}: read by the stub")]


def _run(files: list[Path], output: Path, **options: Any) -> BatchSummary:
    return anyio.run(functools.partial(extract_batch, files, output, extractor=_stub, **options))


def _counting(monkeypatch: pytest.MonkeyPatch, names: set[str]) -> Counter[str]:
    """``os.stat`` counted for the paths in ``names``."""
    counts: Counter[str] = Counter()
    real = os.stat

    def stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        name = os.fspath(path)
        if name in names:
            counts[name] += 1
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    return counts


def test_each_input_status_is_read_once_from_the_expansion_to_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _folder(tmp_path)
    names = {os.fspath(path) for path in folder.iterdir()}
    files, missing = expand_inputs([str(folder)])
    assert missing == []
    _run(files, tmp_path / "plain.jsonl")  # the output without statuses, read as before

    counts = _counting(monkeypatch, names)
    statuses: dict[str, os.stat_result | None] = {}
    again, _ = expand_inputs([str(folder)], statuses=statuses)
    assert again == files
    assert set(statuses) == {os.fspath(path) for path in files}
    assert statuses[os.fspath(folder / "dangling.xml")] is None  # leads to no file
    _run(files, tmp_path / "once.jsonl", statuses=statuses)
    # every regular file once; what is not one is read again to say why (its error record)
    regular = {os.fspath(path) for path in files if path.suffix in (".xml", ".txt")} - {
        os.fspath(folder / "pipe.xml"),
        os.fspath(folder / "dangling.xml"),
    }
    assert {name: counts[name] for name in regular} == dict.fromkeys(regular, 1)
    assert (tmp_path / "once.jsonl").read_bytes() == (tmp_path / "plain.jsonl").read_bytes()

    counts.clear()
    _run(files, tmp_path / "batch-alone.jsonl")  # without statuses: the batch reads each once
    assert {name: counts[name] for name in regular} == dict.fromkeys(regular, 1)
    assert (tmp_path / "batch-alone.jsonl").read_bytes() == (tmp_path / "plain.jsonl").read_bytes()


def test_the_output_among_the_inputs_is_found_from_the_statuses_too(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    (folder / "pipe.xml").unlink()
    output = folder / "notes.txt"
    statuses: dict[str, os.stat_result | None] = {}
    files, _ = expand_inputs([str(folder)], statuses=statuses)
    with pytest.raises(Exception, match="is also an input"):
        _run(files, output, statuses=statuses)
    assert output.read_text() == "not an invoice\n"


def test_a_file_turned_into_a_pipe_after_its_status_was_read_is_never_waited_on(
    tmp_path: Path,
) -> None:
    folder = _folder(tmp_path)
    statuses: dict[str, os.stat_result | None] = {}
    files, _ = expand_inputs([str(folder)], statuses=statuses)
    turned = folder / "notes.txt"
    turned.unlink()
    os.mkfifo(turned)  # a regular file when its status was read, a pipe now

    async def batch() -> BatchSummary:
        with anyio.fail_after(60):
            return await extract_batch(
                files, tmp_path / "out.jsonl", resume=True, jobs=2, statuses=statuses, workers=1
            )

    summary = anyio.run(batch)
    assert summary.inputs_with_record == summary.inputs == len(files)
    assert file_sha256(turned) == ""
    with pytest.raises(OSError, match="not a regular file"):
        read_regular_file(turned)
    with pytest.raises(OSError, match="not a regular file"):
        parallel._read(turned)  # what a cluster's parent sends: never a pipe's bytes
    assert (
        read_regular_file(EXAMPLES / "brnfe_without_proc.xml")
        == (EXAMPLES / "brnfe_without_proc.xml").read_bytes()
    )
