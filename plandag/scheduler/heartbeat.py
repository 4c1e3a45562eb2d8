"""The heartbeat brake: a periodic structured event, stall detection, and a JSON Lines
writer for both (ARCHITECTURE.md, "Brakes", "Heartbeat").

:func:`monitor` runs beside a run's steps in its own task. Every ``every`` seconds it sends
a :class:`~plandag.scheduler.events.Heartbeat` to the observers; when no step has finished
for ``stall_after`` seconds it sends a :class:`~plandag.scheduler.events.Stall` (once per
stall) and, with ``stop_on_stall``, stops the run. The runner cancels it as soon as every
step has ended, so it never keeps a run alive.

The monitor paces itself with ``anyio.sleep`` (the event loop's clock) and reads elapsed
and idle times from the run's :class:`~plandag.brakes.clock.Clock`.

:class:`JsonlHeartbeatWriter` is an observer writing one JSON object per line: one at the
start, one per heartbeat and stall, one at the end (CLI ``--heartbeat FILE``).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import IO, Any, Protocol

import anyio

from plandag.brakes.clock import Clock
from plandag.scheduler import events

__all__ = ["JsonlHeartbeatWriter", "MonitoredRun", "monitor"]


class MonitoredRun(Protocol):
    """What :func:`monitor` needs from a run (the runner implements it)."""

    last_progress: float
    """Monotonic time (run's clock) a step last reached a terminal state, or the start."""
    paused: bool
    """The run waits for a person: no stall is reported (ARCHITECTURE.md, "People in the
    loop"); ``last_progress`` moves on by the time waited when the wait ends."""

    @property
    def waiting_for_slot(self) -> bool:
        """A model call of the run waits for a rate-limit slot: no stall is reported
        (:mod:`plandag.models.ratelimit`); ``last_progress`` moves on likewise."""
        ...

    def heartbeat(self) -> events.Heartbeat:
        """A heartbeat for now."""
        ...

    def stall(self, idle_s: float, stopping: bool) -> events.Stall:
        """A stall event for now."""
        ...

    def emit(self, event: events.Event) -> None:
        """Send ``event`` to the observers."""
        ...

    def stop(self, reason: str) -> None:
        """Stop the run: running steps end cancelled, others skipped, with ``reason``."""
        ...


async def monitor(
    run: MonitoredRun,
    *,
    clock: Clock,
    every: float | None,
    stall_after: float | None,
    stop_on_stall: bool,
    send: bool,
) -> None:
    """Send heartbeats and stall events for ``run`` until cancelled.

    Args:
        run: the run watched.
        clock: the run's clock (elapsed and idle times).
        every: seconds between heartbeats, or None for none.
        stall_after: seconds without a step finishing that make a stall, or None.
        stop_on_stall: stop the run (``run.stop("stalled")``) at the first stall.
        send: send the events to observers (False when there are none: the monitor then
            only acts on stalls).

    Returns when it stopped the run on a stall; otherwise runs until cancelled.
    """
    infinity = math.inf
    next_beat = clock.monotonic() + every if every is not None else infinity
    reported: float | None = None  # the last_progress value a stall was reported for
    while True:
        now = clock.monotonic()
        wake = next_beat
        waiting = run.paused or run.waiting_for_slot
        if stall_after is not None and waiting:
            wake = min(wake, now + min(stall_after, 1.0))  # look again once the wait ends
        elif stall_after is not None:
            if reported != run.last_progress:
                wake = min(wake, run.last_progress + stall_after)
            else:  # this stall was reported: look again later for the next one
                wake = min(wake, now + stall_after)
        if wake == infinity:
            await anyio.sleep_forever()
        await anyio.sleep(max(0.0, wake - now))
        now = clock.monotonic()
        if now >= next_beat and every is not None:
            if send:
                run.emit(run.heartbeat())
            next_beat += every
            if next_beat <= now:
                next_beat = now + every
        last = run.last_progress
        if (
            stall_after is not None
            and not (run.paused or run.waiting_for_slot)
            and reported != last
            and now - last >= stall_after
        ):
            reported = last
            if send:
                run.emit(run.stall(now - last, stop_on_stall))
            if stop_on_stall:
                run.stop("stalled")
                return


def _heartbeat_line(event: events.Heartbeat) -> dict[str, Any]:
    return {
        "event": "heartbeat",
        "run_id": event.run_id,
        "time": event.time,
        "elapsed_s": round(event.elapsed_s, 6),
        "total": event.total,
        "done": event.done,
        "succeeded": event.succeeded,
        "failed": event.failed,
        "skipped": event.skipped,
        "cancelled": event.cancelled,
        "running": event.running,
        "pending": event.pending,
        "spent_usd": event.spent_usd,
        "spent_tokens": event.spent_tokens,
        "running_steps": list(event.running_steps),
        "running_tools": list(event.running_tools),
    }


class JsonlHeartbeatWriter:
    """An observer writing a run's heartbeats to a JSON Lines file (CLI ``--heartbeat``).

    One JSON object per line, flushed at once (``tail -f`` shows it live), with an
    ``"event"`` key:

    * ``run_started``: ``run_id``, ``time``, ``step_count``;
    * ``heartbeat``: ``run_id``, ``time``, ``elapsed_s``, ``total``, ``done``,
      ``succeeded``, ``failed``, ``skipped``, ``cancelled``, ``running``, ``pending``,
      ``spent_usd``, ``spent_tokens``, ``running_steps``, ``running_tools``;
    * ``stall``: ``run_id``, ``time``, ``elapsed_s``, ``idle_s``, ``running_steps``,
      ``running_tools``, ``stopping``;
    * ``run_finished``: ``run_id``, ``time``, ``status``, ``stop_reason``, ``duration_s``,
      ``spent_usd``, ``spent_tokens``, ``steps`` (count per terminal state) and
      ``progress`` (:meth:`~plandag.scheduler.RunResult.progress`).

    Times are seconds (``time``: since the epoch). Other events are not written.

    Args:
        path: the file; its parent directory must exist.
        append: add to an existing file (default) rather than replace it.

    The file is opened at ``run_started`` and closed at ``run_finished``; an ``OSError``
    while writing is raised to the runner, which logs it once and goes on.
    """

    def __init__(self, path: str | os.PathLike[str], *, append: bool = True) -> None:
        self.path = Path(path)
        self.append = append
        self._file: IO[str] | None = None

    def write(self, line: dict[str, Any]) -> None:
        """Write ``line`` as one JSON line and flush (opens the file when needed)."""
        if self._file is None:
            self._file = self.path.open("a" if self.append else "w", encoding="utf-8")
        self._file.write(json.dumps(line, ensure_ascii=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Close the file if open."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def __call__(self, event: events.Event) -> None:
        """Write ``event`` when it is one of the four kinds above."""
        if isinstance(event, events.Heartbeat):
            self.write(_heartbeat_line(event))
        elif isinstance(event, events.Stall):
            self.write(
                {
                    "event": "stall",
                    "run_id": event.run_id,
                    "time": event.time,
                    "elapsed_s": round(event.elapsed_s, 6),
                    "idle_s": round(event.idle_s, 6),
                    "running_steps": list(event.running_steps),
                    "running_tools": list(event.running_tools),
                    "stopping": event.stopping,
                }
            )
        elif isinstance(event, events.RunStarted):
            if not self.append:
                self.close()
            self.write(
                {
                    "event": "run_started",
                    "run_id": event.run_id,
                    "time": event.time,
                    "step_count": event.step_count,
                }
            )
        elif isinstance(event, events.RunFinished):
            result = event.result
            counts: dict[str, int] = {}
            for record in result.steps.values():
                counts[record.status] = counts.get(record.status, 0) + 1
            try:
                self.write(
                    {
                        "event": "run_finished",
                        "run_id": event.run_id,
                        "time": event.time,
                        "status": result.status,
                        "stop_reason": result.stop_reason,
                        "duration_s": round(result.duration_s, 6),
                        "spent_usd": result.spent_usd,
                        "spent_tokens": result.spent_tokens,
                        "steps": dict(sorted(counts.items())),
                        "progress": result.progress(),
                    }
                )
            finally:
                self.close()
