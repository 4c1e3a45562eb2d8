"""``plandag extract nfe`` leaves what it made before its batch out of the garbage
collector's passes while the batch runs, and puts it back after, however the batch ends."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from plandag.cli import app
from plandag.cli.batch import start_up_frozen
from plandag.extract.nfe import batch as batch_module

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nfe"


def test_the_start_up_is_frozen_inside_and_put_back_after_also_on_an_error() -> None:
    assert gc.get_freeze_count() == 0
    with start_up_frozen():
        assert gc.get_freeze_count() > 1000  # the modules and classes imported so far
    assert gc.get_freeze_count() == 0
    with pytest.raises(RuntimeError), start_up_frozen():
        raise RuntimeError("the batch failed")
    assert gc.get_freeze_count() == 0


def test_the_batch_runs_with_the_start_up_frozen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []
    extract_batch = batch_module.extract_batch

    async def watching(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.get_freeze_count())
        return await extract_batch(*args, **kwargs)

    monkeypatch.setattr(batch_module, "extract_batch", watching)
    inputs = sorted(str(path) for path in EXAMPLES.glob("*.xml"))[:3]
    result = CliRunner().invoke(
        app,
        [
            *("extract", "nfe", *inputs, "-o", str(tmp_path / "out.jsonl")),
            *("--store", str(tmp_path / "runs.sqlite3"), "--workers", "1"),
        ],
    )
    assert result.exit_code == 0, result.stderr
    assert len(seen) == 1
    assert seen[0] > 1000
    assert gc.get_freeze_count() == 0
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 3
