"""SIGKILL in the transactions that start and end a durable run.

A real ``plandag exec`` process runs the chain of ``test_group_crash`` (twelve steps, 5 and
10 with effects, appended to an outside log once per idempotency key) and is killed with
SIGKILL:

* ``run_start``: inside the transaction that records the run, its plan version and its
  steps, after the run's row and its plan were written, before its steps;
* ``end_before_commit``: the run's last group (the last steps' rows and the run's final
  state) taken from the queue, nothing of it written;
* ``end_mid_group``: half of that group written inside its open transaction.

Afterwards the store opens and ``PRAGMA integrity_check`` says ``ok``; a run killed as it
started is not in the store at all (nothing of it, not a run without its steps) and did
nothing; a run killed as it ended is ``crashed`` with every effect in the log once, and
``plandag resume`` finishes it without repeating either.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from plandag.store import open_store
from tests.store import test_group_crash as group_crash
from tests.store.test_group_crash import _integrity

CHILD = """
import os
import sys
import time
from pathlib import Path

import plandag.store.store as run_store
import plandag.store.writer as writer

KILL_AT = os.environ["KILL_AT"]
MARK = Path(os.environ["HANG_MARK"])
commit_group = writer._commit
declare = run_store._declare


def _hang():
    MARK.write_text(KILL_AT)
    time.sleep(60)  # killed here


def declare_steps(connection, run_id, steps, segment):
    if KILL_AT == "run_start" and not MARK.exists():
        _hang()
    declare(connection, run_id, steps, segment)


def commit(connection, group):
    final = any(
        sql.startswith("UPDATE run SET status") and "succeeded" in args for sql, args in group
    )
    if final and not MARK.exists() and KILL_AT == "end_before_commit":
        _hang()
    if final and not MARK.exists() and KILL_AT == "end_mid_group":
        connection.execute("BEGIN IMMEDIATE")
        for sql, args in group[: max(1, len(group) // 2)]:
            connection.execute(sql, args)
        _hang()
    commit_group(connection, group)


run_store._declare = declare_steps
writer._commit = commit

from plandag.cli import main

sys.argv = ["plandag", *sys.argv[1:]]
main()
"""


@pytest.mark.timeout(120)
def test_a_run_killed_as_it_starts_is_not_stored_and_did_nothing(tmp_path: Path) -> None:
    _, database = group_crash._kill_at(tmp_path, "run_start", CHILD)
    assert _integrity(database) == "ok"
    store = open_store(database)
    try:
        assert store.runs() == []  # the run and its plan went with its steps
    finally:
        store.close()
    assert not (tmp_path / "effects.log").exists()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("point", ["end_before_commit", "end_mid_group"])
def test_a_run_killed_as_it_ends_is_resumed_without_repeating_an_effect(
    tmp_path: Path, point: str
) -> None:
    env, database = group_crash._kill_at(tmp_path, point, CHILD)
    assert _integrity(database) == "ok"
    store = open_store(database)
    try:
        (run,) = store.runs()
        assert run.state == "crashed"
        steps = store.steps(run.run_id)
        assert sorted(steps) == list(range(1, 13))
        assert steps[5].status == steps[10].status == "succeeded"  # committed at once
    finally:
        store.close()
    log = tmp_path / "effects.log"
    keys = [f"{run.run_id}:5", f"{run.run_id}:10"]
    assert [line.split()[0] for line in log.read_text().splitlines()] == keys

    resumed = subprocess.run(
        [sys.executable, "-m", "plandag", "resume", run.run_id, "--json"],
        env={**env, "KILL_AT": ""},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["output"] == "+".join(f"s{n}" for n in range(1, 13))
    assert [line.split()[0] for line in log.read_text().splitlines()] == keys  # once each
    assert _integrity(database) == "ok"
    store = open_store(database)
    try:
        assert store.run(run.run_id).status == "succeeded"
        assert {row.status for row in store.steps(run.run_id).values()} == {"succeeded"}
    finally:
        store.close()
