"""Heartbeat and stall detection for a batch (``extract --heartbeat/--stall-after``).

A plan run has its own heartbeat (:mod:`plandag.scheduler.heartbeat`); a batch runs one
plan per document, so its heartbeat counts documents instead: inputs done, in flight and
waiting, records written, and seconds since the last input finished. The events go to a
JSON Lines file, one at the start, one every ``every`` seconds, one at the end, with an
``"event"`` key (``batch_started``, ``heartbeat``, ``stall``, ``batch_finished``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO, Any

import anyio

__all__ = ["BatchMonitor"]


class BatchMonitor:
    """Watches a batch's progress; writes heartbeats and reports stalls.

    Args:
        path: the JSON Lines file (appended to), or None to write nothing.
        every: seconds between heartbeats.
        stall_after: seconds without a finished input that make a stall, or None.
        stop_on_stall: cancel the batch (``scope``) at the first stall (ignored without
            ``stall_after``).

    Attributes:
        stalled: True once a stall stopped the batch.
    """

    def __init__(
        self,
        path: Path | None,
        *,
        every: float = 10.0,
        stall_after: float | None = None,
        stop_on_stall: bool = False,
    ) -> None:
        if every <= 0:
            raise ValueError(f"heartbeat_every must be > 0, not {every}")
        self.path = path
        self.every = every
        self.stall_after = stall_after
        self.stop_on_stall = stop_on_stall
        self.stalled = False
        self.done = 0
        self.total = 0
        self.started = time.monotonic()
        self.last_progress = self.started
        self._file: IO[str] | None = None

    def update(self, done: int, total: int) -> None:
        """Record progress: ``done`` inputs of ``total`` finished (``on_progress``)."""
        if done != self.done:
            self.last_progress = time.monotonic()
        self.done, self.total = done, total

    def _write(self, event: str, **fields: Any) -> None:
        if self.path is None:
            return
        if self._file is None:
            self._file = self.path.open("a", encoding="utf-8")
        now = time.monotonic()
        line = {
            "event": event,
            "time": time.time(),
            "elapsed_s": round(now - self.started, 3),
            "done": self.done,
            "total": self.total,
            "pending": max(self.total - self.done, 0),
            "idle_s": round(now - self.last_progress, 3),
            **fields,
        }
        self._file.write(json.dumps(line) + "\n")
        self._file.flush()

    async def watch(self, scope: anyio.CancelScope) -> None:
        """Run until cancelled: a heartbeat every ``every`` seconds; on a stall, an event
        and, with ``stop_on_stall``, ``scope.cancel()``."""
        self._write("batch_started")
        reported_stall = False
        step = min(self.every, self.stall_after or self.every) / 2
        next_beat = time.monotonic() + self.every
        while True:
            await anyio.sleep(step)
            now = time.monotonic()
            if now >= next_beat:
                self._write("heartbeat")
                next_beat = now + self.every
            idle = now - self.last_progress
            if self.stall_after is not None and idle >= self.stall_after:
                if not reported_stall:
                    self._write("stall", stopping=self.stop_on_stall)
                    reported_stall = True
                if self.stop_on_stall:
                    self.stalled = True
                    scope.cancel()
                    return
            else:
                reported_stall = False

    def close(self, status: str) -> None:
        """Write the ``batch_finished`` event with ``status`` and close the file."""
        self._write("batch_finished", status=status)
        if self._file is not None:
            self._file.close()
            self._file = None
