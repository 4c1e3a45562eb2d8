"""A batch's command stopped the hard way: the store's grouped commits survive a SIGKILL of
the command (what was committed is readable, the database intact), and ``--cluster local``
leaves no process behind, whether the command ends, is interrupted (Ctrl-C) or is killed."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from plandag.store import open_store

pytestmark = [pytest.mark.skipif(sys.platform != "linux", reason="reads /proc"), pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nfe"


def _corpus(tmp_path: Path, copies: int) -> Path:
    folder = tmp_path / "in"
    for copy in range(copies):
        shutil.copytree(EXAMPLES, folder / f"{copy:03d}")
    return folder


def _command(folder: Path, tmp_path: Path, *options: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "plandag", "extract", "nfe", str(folder)]
    argv += ["-o", str(tmp_path / "out.jsonl"), "--store", str(tmp_path / "s.db"), *options]
    return subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, as a command in a terminal
    )


def _stored_rows(database: Path) -> int:
    try:
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
            return int(db.execute("SELECT count(*) FROM document").fetchone()[0])
    except sqlite3.Error:
        return 0


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return False


@pytest.mark.timeout(240)
@pytest.mark.parametrize("rows", [1, 150])
def test_a_command_killed_mid_batch_leaves_a_readable_store(tmp_path: Path, rows: int) -> None:
    folder = _corpus(tmp_path, 60)  # 420 documents
    command = _command(folder, tmp_path, "--workers", "1")
    try:
        deadline = time.monotonic() + 180
        while _stored_rows(tmp_path / "s.db") < rows and command.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        os.kill(command.pid, signal.SIGKILL)
    finally:
        command.wait(timeout=30)
    with contextlib.closing(sqlite3.connect(tmp_path / "s.db")) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    store = open_store(tmp_path / "s.db")
    try:
        (run,) = store.runs()
        documents = store.documents(run.run_id)
    finally:
        store.close()
    assert len(documents) >= rows
    lines = (tmp_path / "out.jsonl").read_text("utf-8").splitlines()
    # each group reaches the file before its rows are committed: every committed row is
    # readable and is the file's record at its place
    assert len(lines) >= len(documents)
    assert [row.idx for row in documents] == list(range(len(documents)))
    for row in documents:
        assert row.record == json.loads(lines[row.idx])


def _dask_processes(command: subprocess.Popen[bytes], count: int) -> list[int]:
    """The process ids of the local cluster's processes (scheduler, the worker command,
    its worker processes) once ``count`` of them run, waited for at most 120 s."""
    import psutil

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and command.poll() is None:
        with contextlib.suppress(psutil.Error):
            found = [
                child.pid
                for child in psutil.Process(command.pid).children(recursive=True)
                if child.is_running()
            ]
            if len(found) >= count:
                return found
        time.sleep(0.1)
    raise AssertionError(f"the local cluster's {count} processes did not all start")


def _command_line(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().decode("utf-8", "replace").split("\0")
    except OSError:
        return []


def _gone_within(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [pid for pid in pids if _alive(pid)]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("ending", ["finished", "SIGINT", "SIGKILL"])
def test_cluster_local_leaves_no_process_behind(tmp_path: Path, ending: str) -> None:
    pytest.importorskip("distributed")
    folder = _corpus(tmp_path, 30)
    command = _command(folder, tmp_path, "--cluster", "local", "--workers", "2")
    try:
        # the scheduler, `dask worker` (two nannies) and its two worker processes
        cluster = _dask_processes(command, 4)
        # the scheduler runs outside the command's process
        assert any(_command_line(pid)[1:4] == ["-m", "dask", "scheduler"] for pid in cluster)
        if ending == "finished":
            assert command.wait(timeout=240) == 0
            assert _gone_within(cluster, 0.5) == []  # stopped before the command ended
        elif ending == "SIGINT":
            os.killpg(command.pid, signal.SIGINT)  # what Ctrl-C in its terminal sends
            assert command.wait(timeout=120) == 130
            assert _gone_within(cluster, 0.5) == []
        else:
            os.kill(command.pid, signal.SIGKILL)
            command.wait(timeout=30)
            # each ends by itself once the command is gone (a look every 0.5 s, then up to
            # 10 s to close cleanly)
            assert _gone_within(cluster, 60) == []
    finally:
        if command.poll() is None:
            command.kill()
            command.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(command.pid, signal.SIGKILL)
