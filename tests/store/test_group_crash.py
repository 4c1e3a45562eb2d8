"""SIGKILL at every point of a group of store writes.

A real ``plandag exec`` process runs a chain of twelve steps, two of them with effects (5
and 10, a tool that appends to an outside log once per idempotency key), the others
without. The store's writer thread is wrapped so that it reports every group it commits
(the transitions in it, to a side file) and, at the point under test, stops there and is
killed with SIGKILL:

* ``before_commit``: a group taken from the queue, nothing of it written;
* ``mid_group``: half of the group written inside its open transaction;
* ``after_commit``: right after a group committed;
* ``effect_started``: step 10 committed as started, its tool not run yet;
* ``effect_done``: step 10's tool ran (its effect is in the log), its end not recorded.

Afterwards the store opens and ``PRAGMA integrity_check`` says ``ok``, every transition of
every group reported committed is there, a torn group left nothing, and ``plandag resume``
finishes the run with each effect in the log exactly once.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from plandag.store import open_store
from tests.sigkill import kill_at_mark

TOOLS = '''
import os
import time
from pathlib import Path

from plandag.tools import ToolContext, tool

LOG = Path(os.environ["EFFECT_LOG"])
MARK = Path(os.environ["HANG_MARK"])


def _hang(point: str) -> None:
    if os.environ.get("KILL_AT") == point and not MARK.exists():
        MARK.write_text(point)
        time.sleep(60)  # killed here


@tool(inline=True)
def relay(label: str) -> str:
    """Return LABEL (no effect)."""
    return label


@tool(effects="write", idempotent=False)
def append_keyed(label: str, ctx: ToolContext) -> str:
    """Append LABEL to the log once per idempotency key (the outside system drops repeats)."""
    if label.endswith("s10"):
        _hang("effect_started")
    keys = [line.split()[0] for line in LOG.read_text().splitlines()] if LOG.exists() else []
    if ctx.idempotency_key not in keys:
        with LOG.open("a", encoding="utf-8") as log:
            log.write(f"{ctx.idempotency_key} {label}\\n")
            log.flush()
            os.fsync(log.fileno())
    if label.endswith("s10"):
        _hang("effect_done")
    return label
'''

CHILD = """
import json
import os
import sys
import time
from pathlib import Path

import plandag.store.writer as writer

KILL_AT = os.environ["KILL_AT"]
MARK = Path(os.environ["HANG_MARK"])
COMMITTED = Path(os.environ["COMMITTED_LOG"])
original = writer._commit


def _transitions(group):
    found = []
    for sql, args in group:
        if sql.startswith("INSERT INTO transition"):
            # (run, step, attempt, state, reason, time, segment); a transition without a
            # reason has its NULL in the statement, not among the parameters
            found.append([args[1], args[2], args[3], args[-2]])
    return found


def _hang():
    MARK.write_text(KILL_AT)
    time.sleep(60)  # killed here


def commit(connection, group):
    transitions = _transitions(group)
    target = not MARK.exists() and any(
        step == 7 and state == "succeeded" for step, _, state, _ in transitions
    )
    if target and KILL_AT == "before_commit":
        _hang()
    if target and KILL_AT == "mid_group":
        connection.execute("BEGIN IMMEDIATE")
        for sql, args in group[: max(1, len(group) // 2)]:
            connection.execute(sql, args)
        _hang()
    original(connection, group)
    with COMMITTED.open("a", encoding="utf-8") as log:
        log.write(json.dumps(transitions) + "\\n")
    if target and KILL_AT == "after_commit":
        _hang()


writer._commit = commit

from plandag.cli import main

sys.argv = ["plandag", *sys.argv[1:]]
main()
"""

EFFECTS = (5, 10)
POINTS = ["before_commit", "mid_group", "after_commit", "effect_started", "effect_done"]


def _plan() -> dict[str, object]:
    steps = []
    for number in range(1, 13):
        label = f"s{number}" if number == 1 else f"<step_{number - 1}_result>+s{number}"
        steps.append(
            {
                "id": number,
                "tool": "append_keyed" if number in EFFECTS else "relay",
                "args": {"label": label},
                "depends_on": [number - 1] if number > 1 else [],
            }
        )
    return {"version": 1, "goal": "a chain", "steps": steps, "output": "<step_12_result>"}


def _integrity(path: Path) -> str:
    connection = sqlite3.connect(path)
    try:
        return str(connection.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        connection.close()


def _stored_transitions(path: Path) -> set[tuple[int, int, str, float]]:
    connection = sqlite3.connect(path)
    try:
        return {
            (row[0], row[1], row[2], row[3])
            for row in connection.execute("SELECT step_id, attempt, state, time FROM transition")
        }
    finally:
        connection.close()


def _kill_at(tmp_path: Path, point: str, child: str = CHILD) -> tuple[dict[str, str], Path]:
    """Run the chain in ``plandag exec`` started by ``child`` (a script that patches the
    store to stop at ``point``), SIGKILL it there; returns its environment and store path."""
    (tmp_path / "crash_tools.py").write_text(TOOLS, encoding="utf-8")
    (tmp_path / "child.py").write_text(child, encoding="utf-8")
    (tmp_path / "plan.json").write_text(json.dumps(_plan()), encoding="utf-8")
    database = tmp_path / "store" / "runs.sqlite3"
    env = dict(os.environ)
    env.update(
        {
            "PLANDAG_STORE": str(database),
            "EFFECT_LOG": str(tmp_path / "effects.log"),
            "HANG_MARK": str(tmp_path / "hanging"),
            "COMMITTED_LOG": str(tmp_path / "committed.jsonl"),
            "KILL_AT": point,
        }
    )
    process = subprocess.Popen(
        [
            sys.executable,
            "child.py",
            "exec",
            "plan.json",
            "--tools",
            "crash_tools.py",
            "--approve",
            "auto",
            "--retries",
            "0",
        ],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    kill_at_mark(process, tmp_path / "hanging", point)
    return env, database


@pytest.mark.timeout(180)
@pytest.mark.parametrize("point", POINTS)
def test_sigkill_anywhere_in_a_group_loses_nothing_committed_and_repeats_no_effect(
    tmp_path: Path, point: str
) -> None:
    env, database = _kill_at(tmp_path, point)

    assert _integrity(database) == "ok"
    stored = _stored_transitions(database)
    committed = [
        tuple(item)
        for line in (tmp_path / "committed.jsonl").read_text().splitlines()
        for item in json.loads(line)
    ]
    assert committed, "no group was committed before the kill"
    assert {(s, a, state, t) for s, a, state, t in committed} <= stored  # nothing lost
    if point in ("before_commit", "mid_group"):  # the group under way left nothing
        assert not any(step == 7 and state == "succeeded" for step, _, state, _ in stored)
    if point == "after_commit":
        assert any(step == 7 and state == "succeeded" for step, _, state, _ in stored)

    store = open_store(database)
    try:
        (run,) = store.runs()
        assert run.state == "crashed"
        steps = store.steps(run.run_id)
        assert steps[5].status == "succeeded"  # an effect's end is committed at once
        if point.startswith("effect_"):
            assert steps[10].status == "running"  # committed as started before its tool ran
    finally:
        store.close()

    log = tmp_path / "effects.log"
    before = log.read_text().splitlines()
    assert before == [f"{run.run_id}:5 s1+s2+s3+s4+s5"] + (
        [f"{run.run_id}:10 s1+s2+s3+s4+s5+s6+s7+s8+s9+s10"] if point == "effect_done" else []
    )

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
    chain = "+".join(f"s{number}" for number in range(1, 13))
    assert json.loads(resumed.stdout)["output"] == chain
    keys = [line.split()[0] for line in log.read_text().splitlines()]
    assert keys == [f"{run.run_id}:5", f"{run.run_id}:10"]  # each effect exactly once
    assert _integrity(database) == "ok"
    store = open_store(database)
    try:
        assert store.run(run.run_id).status == "succeeded"
        assert {row.status for row in store.steps(run.run_id).values()} == {"succeeded"}
    finally:
        store.close()
