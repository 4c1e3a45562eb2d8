"""Terminal display for the CLI: live step progress and result tables (rich)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from plandag.compiler.diagnostics import Diagnostic
from plandag.scheduler.events import (
    Event,
    StepCancelled,
    StepFailed,
    StepSkipped,
    StepStarted,
    StepSucceeded,
)
from plandag.scheduler.result import RunResult

__all__ = ["StepProgress", "diagnostic_lines", "run_table"]

_STATUS_STYLE = {
    "succeeded": "green",
    "failed": "red",
    "skipped": "yellow",
    "cancelled": "magenta",
}


class StepProgress:
    """An observer that drives a rich progress bar: steps finished out of the total.

    Args:
        console: where to draw (the CLI draws on stderr so stdout stays clean for --json).
        total: number of steps in the plan.
        enabled: draw nothing when False (stderr is not a terminal).
    """

    def __init__(self, console: Console, total: int, *, enabled: bool = True) -> None:
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[running]}"),
            console=console,
            transient=True,
            disable=not enabled,
        )
        self.task = self.progress.add_task("steps", total=total, running="")
        self.running: dict[int, str] = {}

    def __enter__(self) -> StepProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.progress.stop()

    def __call__(self, event: Event) -> None:
        """Update the bar from a scheduler event."""
        if isinstance(event, StepStarted):
            self.running[event.step_id] = event.tool
        elif isinstance(event, StepSucceeded | StepFailed | StepSkipped | StepCancelled):
            self.running.pop(event.step_id, None)
            self.progress.advance(self.task)
        else:
            return
        names = ", ".join(f"{sid}:{tool}" for sid, tool in sorted(self.running.items())[:4])
        self.progress.update(self.task, running=f"running {names}" if names else "")


def _short(value: Any, width: int = 60) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def run_table(result: RunResult) -> Table:
    """One row per step: id, tool, status, attempts, seconds, and the result or reason."""
    table = Table(title=f"run {result.run_id}: {result.status}", title_justify="left")
    for column in ("step", "tool", "status", "attempts", "seconds", "result / reason"):
        table.add_column(column, overflow="fold")
    for step_id in sorted(result.steps):
        record = result.steps[step_id]
        style = _STATUS_STYLE.get(record.status, "")
        if record.status == "succeeded":
            outcome = _short(record.result)
        else:
            outcome = " ".join(
                part
                for part in (
                    record.reason or "",
                    record.detail or (record.error.message if record.error else ""),
                )
                if part
            )
        seconds = f"{record.duration_s:.3f}" if record.duration_s is not None else ""
        table.add_row(
            str(step_id),
            record.tool,
            f"[{style}]{record.status}[/]" if style else record.status,
            str(record.attempts),
            seconds,
            _short(outcome, 90),
        )
    return table


def diagnostic_lines(source: str, diagnostics: list[Diagnostic]) -> list[str]:
    """Compiler-style lines: ``PLAN.json: step 3: error[unknown_tool]: ... (hint: ...)``."""
    return [f"{source}: {diagnostic.format()}" for diagnostic in diagnostics]
