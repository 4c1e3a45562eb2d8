"""The live progress display follows steps, heartbeats and stalls."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
from rich.console import Console

from plandag.cli.display import StepProgress, run_table
from plandag.compiler import compile_plan
from plandag.scheduler import run_plan_sync
from plandag.scheduler.events import Heartbeat, Stall, StepStarted, StepSucceeded
from plandag.tools import default_registry


def fields(progress: StepProgress) -> dict[str, object]:
    return dict(progress.progress.tasks[0].fields) | {
        "completed": progress.progress.tasks[0].completed
    }


def test_progress_follows_steps_heartbeats_and_stalls() -> None:
    progress = StepProgress(Console(file=io.StringIO()), total=3, enabled=False)
    progress(StepStarted("r", 1, "fetch", 1, 0.0))
    progress(StepStarted("r", 2, "parse", 1, 0.0))
    assert fields(progress)["running"] == "running 1:fetch, 2:parse"
    progress(StepSucceeded("r", 1, 0.5, 0.5))
    assert fields(progress) == {"running": "running 2:parse", "status": "", "completed": 1}
    progress(Heartbeat("r", 10.0, 3, 1, 1, 0, 0, 1, 0, 0.25, 120, (2,), ("parse",), 10.0))
    assert fields(progress)["status"] == "1 failed spent $0.2500 / 120 tokens"
    progress(Stall("r", 70.0, 60.0, (2,), ("parse",), False, 70.0))
    assert fields(progress)["status"] == "stalled 60 s"


def test_the_run_table_masks_a_secret_before_it_can_be_wrapped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A value is masked before the table lays it out: no piece of the secret survives a
    narrow column's line breaks."""
    secret = "wrapped-SECRET-0123456789abcdefghij"
    monkeypatch.setenv("DISPLAY_TEST_TOKEN", secret)
    step = {"id": 1, "tool": "json_select", "args": {"data": {"k": secret}, "expr": "k"}}
    result = run_plan_sync(compile_plan({"steps": [step]}, default_registry()))
    assert result.steps[1].result == secret
    out = io.StringIO()
    Console(file=out, width=80).print(run_table(result, console_width=80))
    text = out.getvalue()
    assert "[secret]" in text
    assert not any(secret[i : i + 8] in text for i in range(len(secret) - 7))


def test_a_bar_that_draws_nothing_is_not_given_the_events() -> None:
    from plandag.cli import common

    compiled = compile_plan(
        {"steps": [{"id": 1, "tool": "json_select", "args": {"data": {"k": 1}, "expr": "k"}}]},
        default_registry(),
    )
    assert not common.stderr.is_terminal  # pytest captures stderr
    progress, observers = common.progress_observers(compiled, common.command_settings({}))
    assert progress not in observers
    with progress:
        run_plan_sync(compiled, observers=observers)


_QUIET_DISPLAY = """
import io, json, sys
from rich.console import Console
from plandag.cli.display import StepProgress
progress = StepProgress(Console(file=io.StringIO()), total=3, enabled=False)
with progress:
    with progress.paused():
        pass
print(json.dumps(sorted(sys.modules)))
"""


def test_a_display_that_draws_nothing_and_is_given_no_event_makes_no_bar() -> None:
    """Off a terminal ``exec`` does not pay for rich's progress bar before its first step:
    checked through ``sys.modules`` in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", _QUIET_DISPLAY],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "rich.progress" not in json.loads(done.stdout.strip().splitlines()[-1])
