"""``plandag exec --max-seconds 1`` on a step that ignores cancellation exits at its
deadline with code 3, the run recorded ``timed_out`` and the step ``cancelled`` (a real
process: an inline tool blocking the event loop cannot be stopped from inside it)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

TOOLS = '''
import asyncio
import contextlib
import time

import anyio

from plandag import tool


@tool(inline=True)
def block(seconds: float) -> float:
    """Blocks the event loop."""
    time.sleep(seconds)
    return seconds


@tool
async def stubborn(seconds: float) -> float:
    """Swallows every cancellation."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with contextlib.suppress(BaseException):
            await anyio.sleep(0.05)
    return seconds


@tool
def threaded(seconds: float) -> float:
    """Blocks its worker thread."""
    time.sleep(seconds)
    return seconds


@tool
async def waits_on_thread(seconds: float) -> float:
    """Blocks in a thread and waits for it, ignoring every cancellation."""
    future = asyncio.get_running_loop().run_in_executor(None, time.sleep, seconds)
    while True:
        try:
            await asyncio.shield(future)
            return seconds
        except asyncio.CancelledError:
            continue
'''


@pytest.mark.parametrize("tool_name", ["block", "stubborn", "threaded", "waits_on_thread"])
def test_exec_exits_3_at_its_deadline_when_a_step_ignores_cancellation(
    tmp_path: Path, tool_name: str
) -> None:
    (tmp_path / "tools.py").write_text(TOOLS, encoding="utf-8")
    plan = {"steps": [{"id": 1, "tool": tool_name, "args": {"seconds": 60}}]}
    (tmp_path / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    store = tmp_path / "runs.sqlite3"
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "plandag",
            "exec",
            "plan.json",
            "--tools",
            "tools.py",
            "--max-seconds",
            "1",
            "--store",
            str(store),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=45,  # the step would hold it 60 s
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert time.monotonic() - started < 40
    with sqlite3.connect(store) as connection:
        runs = connection.execute("SELECT status FROM run").fetchall()
        steps = connection.execute("SELECT step_id, status, reason FROM step").fetchall()
    assert runs == [("timed_out",)]
    assert steps == [(1, "cancelled", "deadline")]


@pytest.mark.parametrize("tool_name", ["waits_on_thread", "block", "stubborn"])
def test_exec_json_prints_the_timed_out_result_when_a_step_ignores_cancellation(
    tmp_path: Path, tool_name: str
) -> None:
    (tmp_path / "tools.py").write_text(TOOLS, encoding="utf-8")
    plan = {
        "steps": [
            {"id": 1, "tool": tool_name, "args": {"seconds": 60}},
            {"id": 2, "tool": "threaded", "args": {"seconds": 0}, "depends_on": [1]},
        ]
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    store = tmp_path / "runs.sqlite3"
    command = ["exec", "plan.json", "--tools", "tools.py", "--max-seconds", "1", "--json"]
    done = subprocess.run(
        [sys.executable, "-m", "plandag", *command, "--store", str(store)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=45,  # the step would hold it 60 s
        check=False,
    )
    assert done.returncode == 3, done.stderr
    document = json.loads(done.stdout)
    assert document["status"] == "timed_out"
    assert document["stop_reason"] == "deadline"
    assert document["store"] == str(store)
    steps = {step["id"]: (step["status"], step["reason"]) for step in document["steps"]}
    assert steps == {1: ("cancelled", "deadline"), 2: ("skipped", "deadline")}
    with sqlite3.connect(store) as connection:
        runs = connection.execute("SELECT run_id, status FROM run").fetchall()
    assert runs == [(document["run_id"], "timed_out")]


APPROVE_TOOLS = '''
import time

from plandag import tool


@tool(inline=True, effects="write", writes="path")
def slow_write(path: str, seconds: float) -> str:
    """Blocks the event loop before it would write."""
    time.sleep(seconds)
    return path
'''


def test_approve_continues_under_the_stored_deadline_and_exits_3_when_a_step_ignores_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "tools.py").write_text(APPROVE_TOOLS, encoding="utf-8")
    plan = {"steps": [{"id": 1, "tool": "slow_write", "args": {"path": "a.txt", "seconds": 60}}]}
    (tmp_path / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    store = tmp_path / "runs.sqlite3"
    common = ["--store", str(store)]

    def plandag(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "plandag", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=45,  # the step would hold it 60 s
            check=False,
        )

    held = plandag(
        "exec", "plan.json", "--tools", "tools.py", "--max-seconds", "2", "--approve", "never",
        "--json", *common,
    )  # fmt: skip
    assert held.returncode == 4, held.stderr
    run_id = json.loads(held.stdout)["run_id"]
    started = time.monotonic()
    approved = plandag("approve", run_id, "--who", "ana", *common)
    assert approved.returncode == 3, approved.stderr
    assert time.monotonic() - started < 40
    assert "brakes: " in approved.stderr
    assert ", 2 s, " in approved.stderr  # the stored deadline, in the brakes line
    with sqlite3.connect(store) as connection:
        runs = connection.execute("SELECT status FROM run").fetchall()
        steps = connection.execute("SELECT step_id, status, reason FROM step").fetchall()
    assert runs == [("timed_out",)]
    assert steps == [(1, "cancelled", "deadline")]


def test_run_json_prints_the_timed_out_result_when_a_step_ignores_cancellation(
    tmp_path: Path,
) -> None:
    from plandag.testing import MessagesServer

    (tmp_path / "tools.py").write_text(TOOLS, encoding="utf-8")
    store = tmp_path / "runs.sqlite3"
    plan = {
        "g": "block the loop",
        "s": [
            {"i": 1, "t": "block", "a": {"seconds": 60}, "d": []},
            {"i": 2, "t": "threaded", "a": {"seconds": 0}, "d": [1]},
        ],
        "o": "<step_2_result>",
    }
    with MessagesServer() as server:
        server.push_json(plan)
        done = subprocess.run(
            [
                sys.executable, "-m", "plandag", "run", "block the loop", "--tools", "tools.py",
                "--base-url", server.url, "--max-seconds", "2", "--json", "--store", str(store),
            ],
            cwd=tmp_path,
            env={**os.environ, "ANTHROPIC_API_KEY": "test", "NO_PROXY": "127.0.0.1"},
            capture_output=True,
            text=True,
            timeout=45,  # the step would hold it 60 s
            check=False,
        )  # fmt: skip
    assert done.returncode == 3, done.stderr
    document = json.loads(done.stdout)
    assert document["status"] == "timed_out"
    assert document["stop_reason"] == "deadline"
    assert document["store"] == str(store)
    steps = {step["id"]: (step["status"], step["reason"]) for step in document["steps"]}
    assert steps == {1: ("cancelled", "deadline"), 2: ("skipped", "deadline")}
    assert document["answer"] is None
    assert [version["version"] for version in document["plan_versions"]] == [1]
    assert [step["tool"] for step in document["plan_versions"][0]["steps"]] == [
        "block",
        "threaded",
    ]
    with sqlite3.connect(store) as connection:
        runs = connection.execute("SELECT run_id, status FROM run").fetchall()
    assert runs == [(document["run_id"], "timed_out")]
