"""Documents extracted in worker processes and on a Dask cluster: the same output as in one
process, every input exactly one row even when a worker is killed mid-batch."""

from __future__ import annotations

import functools
import json
import os
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

from plandag.errors import InputError
from plandag.extract import parallel
from plandag.extract.nfe.batch import expand_inputs, extract_batch
from plandag.testing.workers import kill_once

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nfe"


def _corpus(tmp_path: Path) -> Path:
    """The shipped examples, the shared NF-e files when present, a copy of one example under
    another name (a duplicate chNFe), a text file and an empty file."""
    folder = tmp_path / "in"
    shutil.copytree(EXAMPLES, folder)
    shared = os.environ.get("PLANDAG_SHARED_NFE")
    if shared and Path(shared).is_dir():
        shutil.copytree(shared, folder / "shared")
    first = sorted(EXAMPLES.glob("nfelib_*.xml"))[0]
    shutil.copy(first, folder / "zz-copy-of-first.xml")
    (folder / "notes.txt").write_text("not an invoice\n", encoding="utf-8")
    (folder / "empty.xml").write_bytes(b"")
    return folder


def _run(folder: Path, output: Path, **options: Any) -> Any:
    files, missing = expand_inputs([str(folder)])
    return anyio.run(functools.partial(extract_batch, files, output, missing=missing, **options))


def _sources(output: Path) -> list[str]:
    return [json.loads(line)["source"] for line in output.read_text("utf-8").splitlines()]


def test_two_workers_write_the_same_bytes_as_one(tmp_path: Path) -> None:
    folder = _corpus(tmp_path)
    one = _run(folder, tmp_path / "one.jsonl", workers=1)
    two = _run(folder, tmp_path / "two.jsonl", workers=2, jobs=3)
    assert (tmp_path / "two.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    assert two.by_status == one.by_status
    assert two.failing_checks == one.failing_checks
    assert two.failing_checks["unique_in_batch"] >= 2  # at least the copy and its original
    assert two.inputs_with_record == two.inputs


def test_two_workers_write_the_same_csv_as_one(tmp_path: Path) -> None:
    folder = _corpus(tmp_path)
    _run(folder, tmp_path / "one.csv", workers=1)
    _run(folder, tmp_path / "two.csv", workers=2)
    assert (tmp_path / "two.csv").read_bytes() == (tmp_path / "one.csv").read_bytes()
    assert (tmp_path / "two.items.csv").read_bytes() == (tmp_path / "one.items.csv").read_bytes()


def test_a_worker_killed_mid_batch_loses_no_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _corpus(tmp_path)
    _run(folder, tmp_path / "one.jsonl", workers=1)
    victim = sorted(EXAMPLES.glob("uninfe_*.xml"))[0].name
    marker = tmp_path / "killed"
    monkeypatch.setattr(
        parallel, "CHUNK_WORK", functools.partial(kill_once, name=victim, marker=str(marker))
    )
    summary = _run(folder, tmp_path / "two.jsonl", workers=2, jobs=2)
    assert marker.exists()  # a worker was SIGKILLed while holding a chunk
    sources = _sources(tmp_path / "two.jsonl")
    files, _ = expand_inputs([str(folder)])
    assert sorted(set(sources)) == sorted(str(path) for path in files)
    assert summary.inputs_with_record == summary.inputs == len(files)
    # the lost documents were extracted again, correctly: the same file as in one process
    assert (tmp_path / "two.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()


def test_a_document_that_always_kills_its_worker_gets_one_error_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "in"
    shutil.copytree(EXAMPLES, folder)
    victim = sorted(EXAMPLES.glob("uninfe_*.xml"))[0].name

    monkeypatch.setattr(parallel, "MAX_ATTEMPTS", 2)
    monkeypatch.setattr(
        parallel,
        "CHUNK_WORK",
        functools.partial(kill_once, name=victim),
    )
    summary = _run(folder, tmp_path / "out.jsonl", workers=2, jobs=1)
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text("utf-8").splitlines()]
    victims = [row for row in rows if Path(row["source"]).name == victim]
    assert len(victims) == 1
    assert victims[0]["status"] == "error"
    assert victims[0]["errors"][0]["code"] == "internal_error"
    assert "worker process extracting it was lost 2 times" in victims[0]["errors"][0]["message"]
    others = [row for row in rows if Path(row["source"]).name != victim]
    assert all(
        row["status"] != "error" or row["errors"][0]["code"] != "internal_error" for row in others
    )
    assert summary.inputs_with_record == summary.inputs == 7


def test_resume_with_workers_gives_the_file_of_one_uninterrupted_run(tmp_path: Path) -> None:
    folder = _corpus(tmp_path)
    _run(folder, tmp_path / "one.jsonl", workers=1)
    files, missing = expand_inputs([str(folder)])
    partial = tmp_path / "two.jsonl"
    anyio.run(functools.partial(extract_batch, files[:4], partial, missing=missing, workers=2))
    summary = _run(folder, partial, workers=2, resume=True)
    assert summary.skipped_by_resume == 4
    assert partial.read_bytes() == (tmp_path / "one.jsonl").read_bytes()


def test_workers_below_one_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--workers must be at least 1, not 0"):
        _run(_corpus(tmp_path), tmp_path / "out.jsonl", workers=0)


def test_default_workers_is_the_cores_this_process_may_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "process_cpu_count", lambda: 6, raising=False)
    assert parallel.default_workers() == 6
    monkeypatch.setattr(os, "process_cpu_count", lambda: None, raising=False)
    assert parallel.default_workers() == 1


def test_cli_workers_two_writes_what_workers_one_writes(tmp_path: Path) -> None:
    from plandag.cli import app

    folder = _corpus(tmp_path)
    runner = CliRunner()
    for count in ("1", "2"):
        result = runner.invoke(
            app,
            [
                "extract",
                "nfe",
                str(folder),
                "-o",
                str(tmp_path / f"w{count}.jsonl"),
                "--workers",
                count,
                "--store",
                str(tmp_path / f"store{count}.db"),
            ],
        )
        assert result.exit_code == 0, result.output
    assert (tmp_path / "w2.jsonl").read_bytes() == (tmp_path / "w1.jsonl").read_bytes()


def test_cli_refuses_an_unknown_cluster(tmp_path: Path) -> None:
    from plandag.cli import app

    result = CliRunner().invoke(
        app,
        [
            "extract",
            "nfe",
            str(EXAMPLES),
            "-o",
            str(tmp_path / "out.jsonl"),
            "--cluster",
            "somewhere",
            "--store",
            str(tmp_path / "store.db"),
        ],
    )
    assert result.exit_code == 2
    assert "--cluster 'somewhere': give 'local'" in result.output


def test_cli_workers_come_from_the_setting_and_are_recorded_with_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from plandag.cli import app
    from plandag.store import open_store

    monkeypatch.chdir(tmp_path)
    (tmp_path / "plandag.toml").write_text("[plandag]\nworkers = 2\n", encoding="utf-8")
    folder = _corpus(tmp_path)
    runner = CliRunner()
    stores = {"setting": tmp_path / "setting.db", "flag": tmp_path / "flag.db"}
    for name, extra in (("setting", []), ("flag", ["--workers", "1"])):
        result = runner.invoke(
            app,
            [
                *("extract", "nfe", str(folder), "-o", str(tmp_path / f"{name}.jsonl")),
                *("--store", str(stores[name]), *extra),
            ],
        )
        assert result.exit_code == 0, result.output
    assert (tmp_path / "flag.jsonl").read_bytes() == (tmp_path / "setting.jsonl").read_bytes()
    options = {}
    for name, path in stores.items():
        store = open_store(path)
        try:
            (run,) = store.runs()
            options[name] = run.options
        finally:
            store.close()
    assert options["setting"] == {
        "jobs": 4,
        "workers": 2,
        "cluster": None,
        "resume": False,
        "redact": False,
    }
    assert options["flag"]["workers"] == 1
