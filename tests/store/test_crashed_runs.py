"""A run whose process died is ``crashed`` (ARCHITECTURE.md, "States and exit codes"):
derived when the run is read, from the process id and start time recorded with it, never
stored; ``plandag runs``, ``inbox``, the console and the Python API show it; gc counts it as
ended and says it can no longer be resumed once deleted, and never deletes a run that a live
process holds, even while ``plandag resume`` is taking it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from plandag.serve.runs import run_rows
from plandag.store import Store, open_store
from plandag.store.gc import collect_garbage
from plandag.store.owner import owner_alive, process_started, this_process_started

DAY = 86400.0


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(tmp_path / "runs.sqlite3") as opened:
        yield opened


def _dead_pid() -> int:
    """The id of a process that has ended (and was reaped)."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return int(done.stdout)


def _running(store: Store, run_id: str, pid: int | None, started: float | None) -> None:
    store.create_run(run_id, command="exec", goal="g", params={}, options={})
    store.update_run(run_id, pid=pid, pid_started=started)


def test_a_run_whose_process_died_is_crashed_and_one_still_running_is_not(store: Store) -> None:
    _running(store, "mine", os.getpid(), this_process_started())
    _running(store, "dead", _dead_pid(), 1000.0)
    _running(store, "no-owner", None, None)
    rows = {row.run_id: row for row in store.runs()}
    assert {run_id: (row.status, row.state) for run_id, row in rows.items()} == {
        "mine": ("running", "running"),
        "dead": ("running", "crashed"),
        "no-owner": ("running", "crashed"),
    }
    assert rows["mine"].as_dict()["state"] == "running"
    assert [row.run_id for row in store.crashed_runs()] == ["dead", "no-owner"]
    store.update_run("dead", status="failed", pid=None)
    assert store.run("dead").state == "failed"  # only a running run can have crashed


def test_a_reused_process_id_is_not_the_runs_owner(store: Store) -> None:
    started = this_process_started()
    assert started is not None
    assert owner_alive(os.getpid(), started)
    assert not owner_alive(os.getpid(), started - 3600.0)  # the id, given to a new process
    _running(store, "reused", os.getpid(), started - 3600.0)
    assert store.run("reused").crashed


def test_a_start_time_read_across_a_boot_time_second_is_still_the_owners() -> None:
    # the boot time is whole seconds: a reading after it ticks over is a second (and a
    # float's rounding) later than the one recorded
    started = this_process_started()
    assert started is not None
    for apart in (1.0000005, -1.0000005, 1.5):
        assert owner_alive(os.getpid(), started + apart)


def test_a_new_run_records_its_process_and_start_time(store: Store) -> None:
    store.create_run("r", command="exec", goal="g", params={}, options={})
    row = store.run("r")
    assert (row.pid, row.pid_started) == (os.getpid(), this_process_started())
    store.update_run("r", status="succeeded", pid=None)
    assert (store.run("r").pid, store.run("r").pid_started) == (None, None)


def _age(store: Store, run_id: str) -> None:
    store.flush()
    store.connection.execute("UPDATE run SET updated = 100.0 WHERE run_id = ?", (run_id,))


def test_gc_deletes_an_old_crashed_run_and_keeps_one_a_live_process_holds(
    store: Store,
) -> None:
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _running(store, "held", holder.pid, process_started(holder.pid))
        _running(store, "crashed", _dead_pid(), 1000.0)
        _running(store, "reused", os.getpid(), (this_process_started() or 0.0) - 3600.0)
        for run_id in ("held", "crashed", "reused"):
            _age(store, run_id)
        report = collect_garbage(store, older_than_s=30 * DAY)
    finally:
        holder.kill()
        holder.wait(timeout=10)
    assert report.run_ids == ("crashed", "reused")
    assert report.crashed == ("crashed", "reused")
    assert report.kept_protected == ("held",)
    assert report.as_dict()["crashed"] == ["crashed", "reused"]
    assert [row.run_id for row in store.runs()] == ["held"]


def test_gc_says_a_crashed_run_can_no_longer_be_resumed(tmp_path: Path) -> None:
    from plandag.cli.app import app

    path = tmp_path / "runs.sqlite3"
    with open_store(path) as store:
        _running(store, "crashed-run", _dead_pid(), 1000.0)
        _age(store, "crashed-run")
    runner = CliRunner()
    dry = runner.invoke(app, ["gc", "--older-than", "30d", "--dry-run", "--store", str(path)])
    assert dry.exit_code == 0, dry.output
    assert "  crashed-run  (crashed)" in dry.stdout
    assert "1 of them crashed (their process died while running them): once deleted they " in (
        dry.stdout
    )
    done = runner.invoke(app, ["gc", "--older-than", "30d", "--store", str(path)])
    assert done.exit_code == 0, done.output
    assert "deleted 1 run" in done.stdout
    assert "they can no longer be resumed" in done.stdout
    with open_store(path) as store:
        assert store.runs() == []


def test_runs_inbox_and_the_console_show_a_crashed_run(tmp_path: Path) -> None:
    from plandag.cli.app import app

    path = tmp_path / "runs.sqlite3"
    with open_store(path) as store:
        _running(store, "crashed-run", _dead_pid(), 1000.0)
        store.add_plan_version("crashed-run", 1, {"steps": []}, "hash-1", "planner")
        assert [row["status"] for row in run_rows(store)] == ["crashed"]
    runner = CliRunner()
    listed = runner.invoke(app, ["runs", "--json", "--store", str(path)])
    assert listed.exit_code == 0, listed.output
    [row] = json.loads(listed.stdout)
    assert (row["status"], row["state"], row["process_gone"]) == ("running", "crashed", True)
    inbox = runner.invoke(app, ["inbox", "--json", "--store", str(path)])
    assert inbox.exit_code == 0, inbox.output
    [item] = json.loads(inbox.stdout)
    assert (item["run_id"], item["reason"], item["plan_hash"]) == (
        "crashed-run",
        "crashed",
        "hash-1",
    )
    assert item["actions"]["resume"] == "plandag resume crashed-run"
    text = runner.invoke(app, ["inbox", "--store", str(path)])
    assert "run crashed-run  crashed" in text.stdout
    assert "do: plandag resume crashed-run" in text.stdout


TOOLS = """
import os
import time
from pathlib import Path

import anyio

from plandag import tool

if os.environ.get("IMPORT_MARK"):  # the resume reads its tools: it waits here for the test
    Path(os.environ["IMPORT_MARK"]).write_text("importing")
    deadline = time.monotonic() + 30
    while not Path(os.environ["GO"]).exists() and time.monotonic() < deadline:
        time.sleep(0.02)


@tool
def first(x: int) -> int:
    \"\"\"Return x.\"\"\"
    return x


@tool
async def second(x: int) -> int:
    \"\"\"Return x + 1; with HANG_MARK set, touch it and wait.\"\"\"
    if os.environ.get("HANG_MARK"):
        Path(os.environ["HANG_MARK"]).write_text("hanging")
        await anyio.sleep(30)
    return x + 1
"""


def _wait_for(path: Path, process: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + 30
    while not path.exists():
        assert process.poll() is None, process.communicate()[1]
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.02)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_gc_racing_resume_never_deletes_the_run_being_resumed(tmp_path: Path) -> None:
    (tmp_path / "tools.py").write_text(TOOLS, encoding="utf-8")
    plan = {
        "steps": [
            {"id": 1, "tool": "first", "args": {"x": 1}},
            {"id": 2, "tool": "second", "args": {"x": "<step_1_result>"}},
        ],
        "output": "<step_2_result>",
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    store_path = tmp_path / "runs.sqlite3"
    command = [sys.executable, "-m", "plandag"]
    store_option = ["--store", str(store_path)]
    env = {**os.environ, "HANG_MARK": str(tmp_path / "hanging")}
    first = subprocess.Popen(
        [*command, "exec", "plan.json", "--tools", "tools.py", *store_option],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for(tmp_path / "hanging", first, "step 2")
    first.send_signal(signal.SIGINT)
    first.communicate(timeout=30)
    assert first.returncode == 130
    with open_store(store_path) as store:
        [row] = store.runs()
        assert row.status == "interrupted"
    time.sleep(1.2)  # the run is now older than gc's cutoff below

    env = {**os.environ, "IMPORT_MARK": str(tmp_path / "importing"), "GO": str(tmp_path / "go")}
    resume = subprocess.Popen(
        [*command, "resume", row.run_id, "--json", *store_option],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(tmp_path / "importing", resume, "the resume reading the run's tools")
        gc = subprocess.run(
            [*command, "gc", "--older-than", "1s", "--json", *store_option],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        (tmp_path / "go").write_text("go")
        stdout, stderr = resume.communicate(timeout=60)
    finally:
        if resume.poll() is None:
            resume.kill()
            resume.communicate()
    assert gc.returncode == 0, gc.stderr
    assert json.loads(gc.stdout)["runs"] == []  # the run being resumed was kept
    assert resume.returncode == 0, stderr
    document = json.loads(stdout)
    assert (document["run_id"], document["status"], document["output"]) == (
        row.run_id,
        "succeeded",
        2,
    )
