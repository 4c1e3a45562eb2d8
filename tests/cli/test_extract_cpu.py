"""``plandag extract nfe --json`` reports the CPU its own process spent over the batch's
documents (``cpu_seconds``): the batch, and the command's work on it before (expanding the
inputs) and after (the store and the trace closed), never the start or stop of workers."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from plandag.cli import app
from plandag.cli import extract_command as command_module
from plandag.extract.nfe import batch as batch_module

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nfe"


def test_the_summary_counts_the_commands_cpu_over_the_batch_and_nothing_around_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a virtual CPU clock, moved only by the wrapped pieces below
    cpu = [100.0]
    clock = SimpleNamespace(
        time=time.time, perf_counter=time.perf_counter, process_time=lambda: cpu[0]
    )
    monkeypatch.setattr(command_module, "time", clock)
    monkeypatch.setattr(batch_module, "time", clock)
    expand_inputs = batch_module.expand_inputs
    extract_batch = batch_module.extract_batch
    default_extractor = batch_module._default_extractor
    correct_documents = command_module._correct_documents

    def expanding(*args: Any, **kwargs: Any) -> Any:
        cpu[0] += 2.0  # counted: the inputs expanded
        return expand_inputs(*args, **kwargs)

    async def batch(*args: Any, **kwargs: Any) -> Any:
        cpu[0] += 300.0  # not counted: before the batch's start (as a worker's start)
        summary = await extract_batch(*args, **kwargs)
        cpu[0] += 1000.0  # not counted: after the file's last write (as a worker's stop)
        return summary

    def extractor(*args: Any, **kwargs: Any) -> Any:
        extract = default_extractor(*args, **kwargs)

        async def one(path: Path) -> Any:
            cpu[0] += 1.0  # counted: a document
            return await extract(path)

        return one

    def correcting(*args: Any, **kwargs: Any) -> None:
        cpu[0] += 4.0  # counted: the command's work after the batch
        correct_documents(*args, **kwargs)

    monkeypatch.setattr(batch_module, "expand_inputs", expanding)
    monkeypatch.setattr(batch_module, "extract_batch", batch)
    monkeypatch.setattr(batch_module, "_default_extractor", extractor)
    monkeypatch.setattr(command_module, "_correct_documents", correcting)
    inputs = sorted(str(path) for path in EXAMPLES.glob("*.xml"))[:3]
    result = CliRunner().invoke(
        app,
        [
            *("extract", "nfe", *inputs, "-o", str(tmp_path / "out.jsonl")),
            *("--store", str(tmp_path / "runs.sqlite3"), "--workers", "1", "--json"),
        ],
    )
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["inputs"] == 3
    assert summary["cpu_seconds"] == 2.0 + 3 * 1.0 + 4.0
