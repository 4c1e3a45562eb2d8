"""A ``plandag run`` killed with SIGKILL is resumed (README, "Durable runs", **Resume**).

Each plan version a run makes (its first plan and every replan) is in the run store before
any of its steps starts, so ``plandag resume`` finds the plan of a process that died at any
point: it finishes the run, and no completed step with effects runs again. The model is the
local Messages API server; the tool appends to an effect log once per idempotency key (the
"outside system" drops a repeat), and a second log counts every call of the tool.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from plandag.store import open_store
from plandag.testing import MessagesServer
from tests.sigkill import kill_at_mark

TOOLS = '''
import os
import time
from pathlib import Path

from plandag.tools import ToolContext, tool

LOG = Path(os.environ["EFFECT_LOG"])
CALLS = Path(os.environ["CALL_LOG"])
MARK = Path(os.environ["HANG_MARK"])


def _write(path: Path, line: str) -> None:
    with path.open("a", encoding="utf-8") as log:
        log.write(line + "\\n")
        log.flush()
        os.fsync(log.fileno())


@tool(effects="write", idempotent=False)
def append_keyed(label: str, ctx: ToolContext) -> str:
    """Append LABEL to the log once per idempotency key (the outside system drops repeats)."""
    _write(CALLS, label)
    keys = [line.split()[0] for line in LOG.read_text().splitlines()] if LOG.exists() else []
    if ctx.idempotency_key not in keys:
        _write(LOG, f"{ctx.idempotency_key} {label}")
    if label == os.environ.get("HANG_AT") and not MARK.exists():
        MARK.write_text("hanging")
        time.sleep(60)  # killed here
    return label


@tool
def broken(label: str) -> str:
    """A service that is down."""
    raise ValueError(f"service down for {label}")
'''


def _step(i: int, tool: str, label: str, depends_on: list[int]) -> dict[str, Any]:
    return {"i": i, "t": tool, "a": {"label": label}, "d": depends_on}


def _chain(length: int) -> dict[str, Any]:
    """A chain of effects: step N appends ``s1+...+sN``."""
    steps = [_step(1, "append_keyed", "s1", [])]
    steps += [
        _step(n, "append_keyed", f"<step_{n - 1}_result>+s{n}", [n - 1])
        for n in range(2, length + 1)
    ]
    return {"g": "a chain of effects", "s": steps, "o": {"json": f'"<step_{length}_result>"'}}


FAILING_PLAN = {
    "g": "a chain of effects",
    "s": [
        _step(1, "append_keyed", "s1", []),
        _step(2, "broken", "<step_1_result>", [1]),
        _step(3, "append_keyed", "<step_2_result>+s3", [2]),
    ],
    "o": {"json": '"<step_3_result>"'},
}
REPLAN = {
    "g": "a chain of effects",
    "s": [
        _step(4, "append_keyed", "<step_1_result>+r4", [1]),
        _step(5, "append_keyed", "<step_4_result>+r5", [4]),
    ],
    "o": {"json": '"<step_5_result>"'},
}

# (replies the model gives, the label whose call is killed, the output the run must end with)
KILLS: list[tuple[list[dict[str, Any]], str, str]] = [
    ([_chain(5)], "s1+s2", "s1+s2+s3+s4+s5"),
    ([_chain(5)], "s1+s2+s3", "s1+s2+s3+s4+s5"),
    ([_chain(5)], "s1+s2+s3+s4", "s1+s2+s3+s4+s5"),
    ([_chain(5)], "s1+s2+s3+s4+s5", "s1+s2+s3+s4+s5"),
    ([FAILING_PLAN, REPLAN], "s1+r4+r5", "s1+r4+r5"),  # in the replan's plan version
]


def _kill_and_resume(
    tmp_path: Path, server: MessagesServer, replies: list[dict[str, Any]], hang_at: str
) -> tuple[str, dict[str, Any], Path]:
    """Run ``plandag run``, SIGKILL it while the call of ``hang_at`` hangs (after its
    effect), resume it; returns the run id, the resume's exit code and JSON, the folder."""
    (tmp_path / "effect_tools.py").write_text(TOOLS, encoding="utf-8")
    env = {
        **os.environ,
        "ANTHROPIC_API_KEY": "test",
        "PLANDAG_STORE": str(tmp_path / "store" / "runs.sqlite3"),
        "EFFECT_LOG": str(tmp_path / "effects.log"),
        "CALL_LOG": str(tmp_path / "calls.log"),
        "HANG_MARK": str(tmp_path / "hanging"),
        "HANG_AT": hang_at,
    }
    for reply in replies:
        server.push_json(reply)
    options = ["--base-url", server.url, "--approve", "auto", "--retries", "0"]
    process = subprocess.Popen(
        [sys.executable, "-m", "plandag", "run", "chain", "--tools", "effect_tools.py", *options],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    kill_at_mark(process, tmp_path / "hanging", hang_at, seconds=30)
    store = open_store(env["PLANDAG_STORE"])
    try:
        (run,) = store.runs()
        assert run.state == "crashed"  # derived: its process is gone
    finally:
        store.close()
    resumed = subprocess.run(
        [sys.executable, "-m", "plandag", "resume", run.run_id, "--json"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    document = json.loads(resumed.stdout) if resumed.stdout.strip() else {}
    document["exit_code"] = resumed.returncode
    document["stderr"] = resumed.stderr[-500:]
    return run.run_id, document, tmp_path


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_sigkilled_runs_are_resumed_without_running_a_completed_effect_again(
    tmp_path: Path,
) -> None:
    outcomes = []
    with MessagesServer() as server:
        for number, (replies, hang_at, output) in enumerate(KILLS, start=1):
            folder = tmp_path / f"kill{number}"
            folder.mkdir()
            run_id, document, _ = _kill_and_resume(folder, server, replies, hang_at)
            effects = (folder / "effects.log").read_text(encoding="utf-8").splitlines()
            calls = Counter((folder / "calls.log").read_text(encoding="utf-8").splitlines())
            keys = [line.split()[0] for line in effects]
            resumed = (
                document["exit_code"] == 0
                and document.get("status") == "succeeded"
                and document.get("output") == output
                and document.get("run_id") == run_id
                and len(keys) == len(set(keys))  # every effect once
                # the killed call ran again (keyed); no completed one did
                and calls[hang_at] == 2
                and all(count == 1 for label, count in calls.items() if label != hang_at)
            )
            outcomes.append((hang_at, resumed, document.get("status"), document["stderr"]))
    resumed_count = sum(1 for _, resumed, _, _ in outcomes if resumed)
    assert resumed_count == len(KILLS), f"run kills resumed: {resumed_count} of 5: {outcomes}"
