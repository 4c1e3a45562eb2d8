"""Clocks the runner reads and sleeps on; a virtual one makes backoff testable.

The runner takes its wall-clock times (``StepRecord.started_at``...), its monotonic
durations, the run's remaining time and its retry delays from a :class:`Clock`. Tests give it
a :class:`VirtualClock`, whose ``sleep`` returns at once and records how long it was asked
to wait, so a backoff sequence is asserted exactly without real sleeps (STYLE.md, "Tests":
an injectable clock instead of mocks).

What a clock does not drive: per-tool timeouts, the run's wall-clock cap and the heartbeat's
pacing are anyio cancel scopes and sleeps on the event loop's own clock.
"""

from __future__ import annotations

import time
from typing import Protocol

import anyio
import anyio.lowlevel

__all__ = ["Clock", "SystemClock", "VirtualClock"]


class Clock(Protocol):
    """What the runner needs from a clock."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (for durations and deadlines)."""
        ...

    def time(self) -> float:
        """Wall-clock seconds since the epoch (for records and HTTP dates)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (>= 0); cancellable like ``anyio.sleep``."""
        ...


class SystemClock:
    """The real clock: ``time.perf_counter``, ``time.time`` and ``anyio.sleep``."""

    def monotonic(self) -> float:
        """``time.perf_counter()``, seconds."""
        return time.perf_counter()

    def time(self) -> float:
        """``time.time()``, seconds since the epoch."""
        return time.time()

    async def sleep(self, seconds: float) -> None:
        """``await anyio.sleep(seconds)``."""
        await anyio.sleep(seconds)


class VirtualClock:
    """A clock for tests: ``sleep`` advances it instantly and records the request.

    Args:
        start: the initial wall-clock time, seconds since the epoch (default
            1_700_000_000.0, a fixed date so that HTTP-date arithmetic is repeatable).

    Attributes:
        sleeps: every ``sleep`` duration asked for, in order, seconds.

    ``sleep`` still yields to the event loop once (``anyio.lowlevel.checkpoint``), so it is
    cancellable and other tasks run, but no real time passes. Both ``time()`` and
    ``monotonic()`` advance by the slept amount; :meth:`advance` moves them by hand.
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._wall = start
        self._monotonic = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        """Virtual monotonic seconds (starts at 0.0)."""
        return self._monotonic

    def time(self) -> float:
        """Virtual seconds since the epoch."""
        return self._wall

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` (>= 0) without recording a sleep.

        Raises:
            ValueError: ``seconds`` is negative.
        """
        if seconds < 0:
            raise ValueError(f"a clock does not go back: advance({seconds})")
        self._wall += seconds
        self._monotonic += seconds

    async def sleep(self, seconds: float) -> None:
        """Record ``seconds``, advance the clock by it and yield once to the event loop."""
        self.sleeps.append(seconds)
        self.advance(max(0.0, seconds))
        await anyio.lowlevel.checkpoint()
