"""Ctrl-C during `plandag run`: the run's state is reported, exit 130."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from plandag.testing import MessagesServer

TOOLS = '''
from pathlib import Path
import anyio
from plandag import tool

@tool
async def quick(x: int) -> int:
    """Return x."""
    return x

@tool
async def slow(marker: str) -> int:
    """Touch the marker, then sleep."""
    Path(marker).write_text("started")
    await anyio.sleep(30)
    return 1
'''


def test_sigint_during_run_reports_the_state(tmp_path: Path) -> None:
    tools = tmp_path / "tools.py"
    tools.write_text(TOOLS, encoding="utf-8")
    marker = tmp_path / "marker"
    plan = {
        "g": "demo",
        "p": [],
        "s": [
            {"i": 1, "t": "quick", "a": {"x": 1}, "d": [], "c": [], "n": None},
            {"i": 2, "t": "slow", "a": {"marker": f"{marker}"}, "d": [1], "c": [], "n": None},
            {"i": 3, "t": "quick", "a": {"x": "<step_2_result>"}, "d": [2], "c": [], "n": None},
        ],
        "o": "<step_3_result>",
    }
    with MessagesServer() as server:
        server.push_json(plan)
        env = {**os.environ, "ANTHROPIC_API_KEY": "test"}
        command = [sys.executable, "-m", "plandag", "run", "demo", "--tools", str(tools)]
        command += ["--base-url", server.url, "--json"]
        process = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            deadline = time.monotonic() + 20
            while not marker.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert marker.exists(), "the slow step never started"
            process.send_signal(signal.SIGINT)
            stdout, stderr = process.communicate(timeout=15)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        assert len(server.message_requests) == 1
    assert process.returncode == 130, stderr
    result = json.loads(stdout)
    assert result["status"] == "interrupted"
    steps = {step["id"]: (step["status"], step["reason"]) for step in result["steps"]}
    assert steps == {
        1: ("succeeded", None),
        2: ("cancelled", "interrupted"),
        3: ("skipped", "interrupted"),
    }


def test_sigint_while_the_planner_writes_ends_interrupted(tmp_path: Path) -> None:
    tools = tmp_path / "tools.py"
    tools.write_text(TOOLS, encoding="utf-8")
    store = tmp_path / "store" / "runs.sqlite3"
    plan = {
        "g": "demo",
        "s": [{"i": 1, "t": "quick", "a": {"x": 1}, "d": []}],
        "o": "<step_1_result>",
    }
    with MessagesServer(ttft=30.0) as server:  # the plan never arrives before the signal
        server.push_json(plan)
        env = {**os.environ, "ANTHROPIC_API_KEY": "test", "PLANDAG_STORE": str(store)}
        command = [sys.executable, "-m", "plandag", "run", "demo", "--tools", str(tools)]
        command += ["--base-url", server.url, "--json"]
        process = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            deadline = time.monotonic() + 20
            while not server.message_requests and time.monotonic() < deadline:
                time.sleep(0.05)
            assert server.message_requests, "the planner was never asked"
            process.send_signal(signal.SIGINT)
            stdout, stderr = process.communicate(timeout=15)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert process.returncode == 130, stderr
    result = json.loads(stdout)
    assert result["status"] == "interrupted"
    assert result["answer"] is None
    assert result["steps"] == []
    from plandag.store import open_store

    opened = open_store(store)
    try:
        [row] = opened.runs()
        assert row.status == "interrupted"
    finally:
        opened.close()
