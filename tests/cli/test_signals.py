"""SIGINT and SIGTERM during `plandag exec` and `plandag extract` (exit codes 130, 143).

Each test runs ``python -m plandag`` in a local subprocess, waits (bounded) until the work
is under way, sends the signal and checks the exit code, the output and what was kept.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from plandag.cli.signals import Interruptible, exit_code_for_signal

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
WAIT_S = 30.0  # the longest any test waits for a child to get going or to exit

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

SLOW_TOOLS = '''
import time
from pathlib import Path

import anyio

from plandag import tool


@tool
async def quick(x: int) -> int:
    """Returns x at once."""
    return x


@tool
async def slow_async(marker: str, seconds: float) -> float:
    """Writes `marker`, then sleeps on the event loop (cancellable)."""
    Path(marker).write_text("started")
    await anyio.sleep(seconds)
    return seconds


@tool
def slow_sync(marker: str, seconds: float) -> float:
    """Writes `marker`, then blocks its worker thread."""
    Path(marker).write_text("started")
    time.sleep(seconds)
    return seconds


@tool
async def stubborn(marker: str, seconds: float) -> float:
    """Writes `marker`, then sleeps shielded from cancellation."""
    Path(marker).write_text("started")
    with anyio.CancelScope(shield=True):
        await anyio.sleep(seconds)
    return seconds


@tool(inline=True)
def blocks_the_loop(marker: str, seconds: float) -> float:
    """Writes `marker`, then blocks the event loop itself (a misuse of inline)."""
    Path(marker).write_text("started")
    time.sleep(seconds)
    return seconds
'''


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    """The children a test starts; any still running at the end is killed (by its pid)."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=WAIT_S)


def start(
    processes: list[subprocess.Popen[str]], folder: Path, *arguments: str
) -> subprocess.Popen[str]:
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *filter(None, [environment.get("PYTHONPATH")])]
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "plandag", *arguments],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
    )
    processes.append(process)
    return process


def wait_until(process: subprocess.Popen[str], ready: Any) -> None:
    """Poll ``ready()`` every 20 ms for at most WAIT_S seconds; fail if the child ends."""
    deadline = time.monotonic() + WAIT_S
    while not ready():
        if process.poll() is not None:
            out, err = process.communicate()
            pytest.fail(f"the child ended early ({process.returncode}): {err}{out}")
        if time.monotonic() > deadline:
            pytest.fail(f"the child was not ready within {WAIT_S} s")
        time.sleep(0.02)


def finish(process: subprocess.Popen[str]) -> tuple[int, str, str, float]:
    """Wait for the child to exit (at most WAIT_S): exit code, stdout, stderr, seconds."""
    began = time.monotonic()
    out, err = process.communicate(timeout=WAIT_S)
    return process.returncode, out, err, time.monotonic() - began


def three_step_plan(folder: Path, tool: str, marker: Path) -> Path:
    plan = {
        "steps": [
            {"id": 1, "tool": "quick", "args": {"x": 1}},
            {
                "id": 2,
                "tool": tool,
                "args": {"marker": str(marker), "seconds": 30},
                "depends_on": [1],
            },
            {"id": 3, "tool": "quick", "args": {"x": 3}, "depends_on": [2]},
        ]
    }
    path = folder / f"{tool}.json"
    path.write_text(json.dumps(plan), encoding="utf-8")
    return path


@pytest.fixture
def slow_tools(tmp_path: Path) -> Path:
    path = tmp_path / "slow.py"
    path.write_text(SLOW_TOOLS, encoding="utf-8")
    return path


# -- in process ------------------------------------------------------------------------


def test_exit_code_for_signal() -> None:
    assert exit_code_for_signal(signal.SIGINT) == 130
    assert exit_code_for_signal(signal.SIGTERM) == 143


def test_interruptible_returns_the_result_without_a_signal() -> None:
    async def work() -> int:
        return 42

    outcome = Interruptible(work).run()
    assert (outcome.result, outcome.signal) == (42, None)


def test_interruptible_raises_the_work_error_unwrapped() -> None:
    # The CLI catches InputError/OSError around run(): it must not come out as an
    # ExceptionGroup from the task group inside.
    async def work() -> int:
        raise ValueError("bad input")

    with pytest.raises(ValueError, match=r"^bad input$") as caught:
        Interruptible(work).run()
    assert type(caught.value) is ValueError
    assert str(caught.value) == "bad input"


def test_interruptible_restores_the_signal_handlers() -> None:
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}

    async def work() -> None:
        return None

    Interruptible(work).run()
    after = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    assert after == before


# -- exec ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("signum", "tool"),
    [
        (signal.SIGINT, "slow_async"),
        (signal.SIGTERM, "slow_async"),
        (signal.SIGINT, "slow_sync"),
        (signal.SIGTERM, "slow_sync"),
    ],
    ids=["SIGINT-async", "SIGTERM-async", "SIGINT-sync-thread", "SIGTERM-sync-thread"],
)
def test_exec_signal_keeps_completed_work(
    processes: list[subprocess.Popen[str]],
    tmp_path: Path,
    slow_tools: Path,
    signum: signal.Signals,
    tool: str,
) -> None:
    marker = tmp_path / "started"
    plan = three_step_plan(tmp_path, tool, marker)
    process = start(processes, tmp_path, "exec", str(plan), "--json", "--tools", str(slow_tools))
    wait_until(process, marker.exists)
    process.send_signal(signum)
    code, out, err, seconds = finish(process)
    assert code == {signal.SIGINT: 130, signal.SIGTERM: 143}[signum], err
    assert seconds < 5.0
    assert f"{signum.name}: stopping; completed work is kept (send it again to exit at once)" in err
    run = json.loads(out)
    assert (run["status"], run["stop_reason"], run["output"]) == (
        "interrupted",
        "interrupted",
        None,
    )
    steps = [(s["id"], s["status"], s["reason"], s["attempts"], s["result"]) for s in run["steps"]]
    assert steps == [
        (1, "succeeded", None, 1, 1),
        (2, "cancelled", "interrupted", 1, None),
        (3, "skipped", "interrupted", 0, None),
    ]
    assert run["steps"][1]["detail"]
    assert run["steps"][2]["detail"]


def test_exec_signal_table_on_stderr(
    processes: list[subprocess.Popen[str]], tmp_path: Path, slow_tools: Path
) -> None:
    marker = tmp_path / "started"
    plan = three_step_plan(tmp_path, "slow_async", marker)
    process = start(processes, tmp_path, "exec", str(plan), "--tools", str(slow_tools))
    wait_until(process, marker.exists)
    process.send_signal(signal.SIGINT)
    code, out, err, _ = finish(process)
    assert code == 130
    assert "interrupted" in out
    assert "was running: steps 2\n" in err
    assert "stopped: interrupted\n" in err


@pytest.mark.parametrize("tool", ["stubborn", "blocks_the_loop"])
def test_exec_second_sigint_exits_at_once(
    processes: list[subprocess.Popen[str]], tmp_path: Path, slow_tools: Path, tool: str
) -> None:
    # stubborn ignores cancellation; blocks_the_loop keeps the event loop from seeing
    # any signal until it returns (30 s): the second SIGINT must still end the process.
    marker = tmp_path / "started"
    plan = three_step_plan(tmp_path, tool, marker)
    process = start(processes, tmp_path, "exec", str(plan), "--json", "--tools", str(slow_tools))
    wait_until(process, marker.exists)
    process.send_signal(signal.SIGINT)
    time.sleep(0.3)
    assert process.poll() is None  # the first signal did not stop it
    process.send_signal(signal.SIGINT)
    code, out, err, seconds = finish(process)
    assert code == 130
    assert seconds < 3.0
    assert out == ""
    assert err.endswith(
        "SIGINT: stopping; completed work is kept (send it again to exit at once)\n"
        "second signal: exiting at once\n"
    )


# -- extract ---------------------------------------------------------------------------


def many_invoices(folder: Path, count: int) -> Path:
    """``count`` hard links (copies when links fail) of one shipped invoice."""
    inputs = folder / "inputs"
    inputs.mkdir()
    original = inputs / "n0000.xml"
    shutil.copyfile(
        EXAMPLES / "nfe" / "nfelib_42210775277525000178550030000266631762885493-procNFe.xml",
        original,
    )
    for number in range(1, count):
        try:
            os.link(original, inputs / f"n{number:04}.xml")
        except OSError:
            shutil.copyfile(original, inputs / f"n{number:04}.xml")
    return inputs


def interrupted_extract(
    processes: list[subprocess.Popen[str]], tmp_path: Path
) -> tuple[int, str, list[dict[str, Any]], str]:
    inputs = many_invoices(tmp_path, 3000)  # ~1.5 ms each with --jobs 1: seconds in all
    output = tmp_path / "invoices.jsonl"
    process = start(
        processes, tmp_path, "extract", "nfe", str(inputs), "-o", str(output), "-j", "1"
    )
    wait_until(process, lambda: output.exists() and output.read_bytes().count(b"\n") >= 2)
    process.send_signal(signal.SIGTERM)
    code, out, err, seconds = finish(process)
    assert seconds < 5.0
    text = output.read_text(encoding="utf-8")
    assert text.endswith("\n")  # complete lines only
    return code, out, [json.loads(line) for line in text.splitlines()], err


def test_extract_sigterm_mid_batch_keeps_complete_records(
    processes: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    code, out, records, err = interrupted_extract(processes, tmp_path)
    assert code == 143, err
    assert out == ""
    match = re.search(r"stopped by SIGTERM after (\d+) of 3000 inputs; ", err)
    assert match is not None, err
    assert 2 <= len(records) < 3000
    assert int(match.group(1)) == len(records)
    # in input order, one record per input, the inputs before the first unfinished one
    names = [Path(record["source"]).name for record in records]
    assert names == [f"n{number:04}.xml" for number in range(len(records))]
    assert "run the same command with --resume to go on" in err


def test_extract_interrupted_output_is_self_consistent(
    processes: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    code, _, records, _ = interrupted_extract(processes, tmp_path)
    assert code == 143
    assert [record["checks"]["unique_in_batch"]["status"] for record in records] == ["fail"] * len(
        records
    )
