"""``plandag tell RUN_ID "TEXT"``: a person's input reaches a running ``plandag run`` through
the run store; the steps not started are replanned with the text, verbatim, and completed
steps are never run again. End to end: two processes and the local Messages API server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from plandag.cli import app
from plandag.store import open_store
from plandag.testing import MessagesServer

TOOLS = '''
import time
from pathlib import Path
from plandag import tool

CALLS = Path(__file__).with_name("calls.txt")


@tool
def quick(x: int) -> int:
    """Return x (each call is written to calls.txt)."""
    with CALLS.open("a", encoding="utf-8") as handle:
        handle.write(f"quick:{x}\\n")
    return x


@tool
async def slow(marker: str, release: str) -> int:
    """Touch the marker, then wait (at most 60 s) until the release file exists."""
    import anyio

    Path(marker).write_text("started", encoding="utf-8")
    for _ in range(6000):
        if Path(release).exists():
            return 5
        await anyio.sleep(0.01)
    raise TimeoutError("never released")
'''

TEXT = 'Don\'t wait for the slow part: use 7 instead; say "done" <now> & keep ü.'


def wait_until(predicate: Any, what: str, seconds: float = 30.0) -> None:
    """Wait (bounded) until ``predicate()`` holds."""
    for _ in range(int(seconds / 0.05)):
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"waited {seconds:g} s in vain for {what}")


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "store" / "runs.sqlite3"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tools.py").write_text(TOOLS, encoding="utf-8")
    return tmp_path


def test_tell_reaches_a_running_run_and_replans_the_steps_not_started(folder: Path) -> None:
    marker, release = folder / "marker", folder / "release"
    plan = {
        "g": "demo",
        "s": [
            {"i": 1, "t": "quick", "a": {"x": 1}, "d": []},
            {"i": 2, "t": "slow", "a": {"marker": f"{marker}", "release": f"{release}"}, "d": []},
            {"i": 3, "t": "quick", "a": {"x": "<step_2_result>"}, "d": [2]},
        ],
        "o": "<step_3_result>",
    }
    patch = {
        "g": "demo",
        "s": [{"i": 4, "t": "quick", "a": {"x": 7}, "d": []}],
        "o": "<step_4_result>",
    }
    env = {**os.environ, "ANTHROPIC_API_KEY": "test"}
    with MessagesServer() as server:
        server.push_json(plan)
        server.push_json(patch)
        command = [sys.executable, "-m", "plandag", "run", "demo", "--tools", "tools.py"]
        command += ["--base-url", server.url, "--json"]
        process = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            wait_until(marker.exists, "the slow step to start")
            with open_store(None) as store:
                [row] = store.runs()
            told = subprocess.run(
                [sys.executable, "-m", "plandag", "tell", row.run_id[:8], TEXT],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert told.returncode == 0, told.stderr
            wait_until(lambda: len(server.message_requests) == 2, "the replan request")
            wait_until(
                lambda: "quick:7" in (folder / "calls.txt").read_text(encoding="utf-8"),
                "the replanned step to run",
            )
            release.write_text("go", encoding="utf-8")
            stdout, stderr = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        request = server.message_requests[1].json
    assert process.returncode == 0, stderr
    assert "took the instruction" in told.stdout or "has not taken it" in told.stdout
    # the person's text, verbatim, in the replan request the server received
    content = request["messages"][0]["content"]
    assert f"- {TEXT}" in content
    result = json.loads(stdout)
    assert result["status"] == "succeeded"
    assert result["answer"] == 7
    steps = {step["id"]: (step["status"], step["reason"]) for step in result["steps"]}
    assert steps == {
        1: ("succeeded", None),
        2: ("succeeded", None),
        3: ("skipped", "replanned"),
        4: ("succeeded", None),
    }
    [replan] = result["replans"]
    assert (replan["trigger"], replan["strategy"], replan["withdrawn"]) == (
        "instruction",
        "partial",
        [3],
    )
    assert replan["instructions"] == [TEXT]
    assert [item["text"] for item in result["instructions"]] == [TEXT]
    # the completed step 1 ran once: never again after the replan
    calls = (folder / "calls.txt").read_text(encoding="utf-8").splitlines()
    assert calls == ["quick:1", "quick:7"]
    with open_store(None) as store:
        [instruction] = store.instructions(row.run_id)
    assert (instruction.text, instruction.new_goal) == (TEXT, False)
    assert instruction.consumed_at is not None

    # the run has ended: tell is refused, saying why
    late = CliRunner().invoke(app, ["tell", row.run_id, "one more thing"])
    assert late.exit_code == 2
    assert f"run {row.run_id} is succeeded, not running" in late.stderr


def test_tell_refuses_runs_that_cannot_take_it(folder: Path) -> None:
    with open_store(None) as store:
        store.create_run("escalated1", command="run", goal="g", params={}, options={})
        store.update_run("escalated1", status="escalated")
        store.create_run("exec1", command="exec", goal="g", params={}, options={})
        store.create_run(
            "repairs1",
            command="exec",
            goal="g",
            params={},
            options={"planner": {"planner": "anthropic", "model": "m", "base_url": None}},
        )
        store.create_run("done1", command="run", goal="g", params={}, options={})
        store.update_run("done1", status="succeeded")
        store.create_run("crashed1", command="run", goal="g", params={}, options={})
        store.update_run("crashed1", pid=2**22 + 12345)  # no such process
    runner = CliRunner()
    cases = {
        "escalated1": "run escalated1 is escalated, not running: an instruction reaches only "
        "a running run; `plandag resume escalated1 --instruction TEXT` goes on with your "
        "instruction",
        "exec1": "run exec1 is a `plandag exec` run: it has no planner to take an instruction;"
        " `tell` reaches runs started by `plandag run` (to change this one, stop it with "
        "Ctrl-C and run the changed plan)",
        "repairs1": "run repairs1 is a `plandag exec --planner` run: it runs a stored plan, "
        "and its planner only repairs steps that fail, taking no instructions; `tell` reaches "
        "runs started by `plandag run` (to change this one, stop it with Ctrl-C and run the "
        "changed plan)",
        "done1": "run done1 is succeeded, not running: an instruction reaches only a running "
        "run; it has ended: start a new `plandag run` with your text in the task",
        "crashed1": f"run crashed1 is recorded running, but its process {2**22 + 12345} is "
        "gone (it crashed); `plandag resume crashed1` continues it",
        "nosuchrun": "no run 'nosuchrun' in",
    }
    for run_id, message in cases.items():
        result = runner.invoke(app, ["tell", run_id, "go"])
        assert result.exit_code == 2, (run_id, result.output)
        assert message in " ".join(result.stderr.split()), (run_id, result.stderr)
    empty = runner.invoke(app, ["tell", "exec1", "  "])
    assert empty.exit_code == 2
    assert "TEXT is empty" in empty.stderr
    with open_store(None) as store:
        assert store.instructions("escalated1") == []
