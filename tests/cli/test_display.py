"""The live progress display follows steps, heartbeats and stalls."""

from __future__ import annotations

import io

from rich.console import Console

from plandag.cli.display import StepProgress
from plandag.scheduler.events import Heartbeat, Stall, StepStarted, StepSucceeded


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
