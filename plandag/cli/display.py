"""Terminal display for the CLI: live step progress and result tables (rich)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from plandag.dag.diagnostics import Diagnostic
from plandag.scheduler.result import RunResult, to_jsonable
from plandag.trace.redact import scrub_secrets

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from plandag.scheduler.events import Event

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
        self._console = console
        self._total = total
        self._enabled = enabled
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self.running: dict[int, str] = {}

    @property
    def progress(self) -> Progress:
        """The rich progress bar, made when first needed: a display that draws nothing
        (stderr is not a terminal) and is given no event never makes one."""
        return self._made()[0]

    @property
    def task(self) -> TaskID:
        """The bar's one task: the steps."""
        return self._made()[1]

    def _made(self) -> tuple[Progress, TaskID]:
        if self._progress is None or self._task is None:
            from rich.progress import (  # here: commands that draw no progress start faster
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                SpinnerColumn(),
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[running]}"),
                TextColumn("{task.fields[status]}"),
                console=self._console,
                transient=True,
                disable=not self._enabled,
            )
            self._task = self._progress.add_task("steps", total=self._total, running="", status="")
        return self._progress, self._task

    def __enter__(self) -> StepProgress:
        if self._enabled:  # a disabled bar's start and stop draw nothing
            self.progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Hide the bar while the terminal is used for something else (a person's
        decision), then show it again."""
        live = self._progress is not None and self._progress.live.is_started
        if live:
            self.progress.stop()
        try:
            yield
        finally:
            if live:
                self.progress.start()

    def __call__(self, event: Event) -> None:
        """Update the bar from a scheduler event (steps, heartbeats and stalls)."""
        # Imported here: `plandag check` prints diagnostics from this module and runs nothing.
        from plandag.scheduler.events import (
            Heartbeat,
            Stall,
            StepCancelled,
            StepFailed,
            StepSkipped,
            StepStarted,
            StepSucceeded,
        )

        if isinstance(event, Heartbeat):
            status = f"{event.failed} failed" if event.failed else ""
            if event.spent_usd or event.spent_tokens:
                status += f" spent ${event.spent_usd:.4f} / {event.spent_tokens} tokens"
            self.progress.update(self.task, status=status.strip())
            return
        if isinstance(event, Stall):
            self.progress.update(self.task, status=f"stalled {event.idle_s:.0f} s")
            return
        if isinstance(event, StepStarted):
            self.running[event.step_id] = event.tool
        elif isinstance(event, StepSucceeded | StepFailed | StepSkipped | StepCancelled):
            self.running.pop(event.step_id, None)
            self.progress.advance(self.task)
        else:
            return
        names = ", ".join(f"{sid}:{tool}" for sid, tool in sorted(self.running.items())[:4])
        self.progress.update(self.task, running=f"running {names}" if names else "")


def _short(value: Any, width: int) -> str:
    """``value`` as one line of compact JSON (strings as they are), cut to ``width``."""
    if isinstance(value, str):
        text = scrub_secrets(value)
    else:
        try:
            shown = scrub_secrets(to_jsonable(value))  # values under secret-named keys too
            text = json.dumps(shown, ensure_ascii=False, separators=(",", ":"))
        except (TypeError, ValueError):
            text = repr(value)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def run_table(result: RunResult, console_width: int = 100, status: str | None = None) -> Table:
    """One row per step: id, tool, status, attempts, seconds, and the result or reason.

    Results show as compact JSON (bytes as their size and SHA-256), cut to fit one line of
    a ``console_width``-column terminal; a failed step shows its reason code and its error
    message in full. ``status`` overrides the run's own in the title (an agent that gave up
    on a run whose steps all succeeded).
    """
    tool_width = max((len(record.tool) for record in result.steps.values()), default=4)
    # step, status, tries, seconds columns and the borders and padding of six columns
    width = max(20, console_width - tool_width - (4 + 9 + 7 + 7) - 19)
    title = f"run {result.run_id}: {status or result.status}"
    table = Table(title=title, title_justify="left")
    table.add_column("step", justify="right", no_wrap=True)
    table.add_column("tool", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("tries", justify="right", no_wrap=True)
    table.add_column("seconds", justify="right", no_wrap=True)
    table.add_column("result / reason", overflow="fold")
    for step_id in sorted(result.steps):
        record = result.steps[step_id]
        style = _STATUS_STYLE.get(record.status, "")
        if record.status == "succeeded":
            outcome = _short(record.result, width)
        else:
            message = record.error.message if record.error else record.detail
            outcome = " ".join(part for part in (record.reason or "", message or "") if part)
        seconds = f"{record.duration_s:.3f}" if record.duration_s is not None else ""
        table.add_row(
            str(step_id),
            record.tool,
            f"[{style}]{record.status}[/]" if style else record.status,
            str(record.attempts),
            seconds,
            escape(outcome),
        )
    return table


def diagnostic_lines(source: str, diagnostics: list[Diagnostic]) -> list[str]:
    """Compiler-style lines: ``PLAN.json: step 3: error[unknown_tool]: ... (hint: ...)``."""
    return [f"{source}: {diagnostic.format()}" for diagnostic in diagnostics]
