"""Run async work so that SIGINT and SIGTERM stop it cleanly (issue 3, "Cancellation").

The first signal cancels the work: a plan run then ends ``interrupted`` with every step in
a terminal state (completed results kept), and the caller prints what was and was not
done. A second signal exits at once with ``128 + signum`` (130 for SIGINT, 143 for SIGTERM).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import anyio

__all__ = ["Interruptible", "exit_code_for_signal"]

T = TypeVar("T")

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def exit_code_for_signal(signum: int) -> int:
    """``128 + signum``: 130 for SIGINT, 143 for SIGTERM (the shell's convention)."""
    return 128 + signum


class Interruptible(Generic[T]):
    """Runs ``work()`` under a cancel scope that the first SIGINT/SIGTERM cancels.

    Attributes:
        result: what ``work()`` returned, or None when it was cancelled before returning.
        signal: the first signal received, or None.
    """

    def __init__(self, work: Callable[[], Awaitable[T]]) -> None:
        self.work = work
        self.result: T | None = None
        self.signal: int | None = None

    async def _watch(self, scope: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(*_SIGNALS) as received:
            async for signum in received:
                if self.signal is not None:
                    sys.stderr.write("second signal: exiting at once\n")
                    sys.stderr.flush()
                    os._exit(exit_code_for_signal(signum))
                self.signal = int(signum)
                sys.stderr.write(
                    f"{signal.Signals(signum).name}: stopping; completed work is kept "
                    "(send it again to exit at once)\n"
                )
                sys.stderr.flush()
                scope.cancel()

    async def _main(self) -> None:
        scope = anyio.CancelScope()
        async with anyio.create_task_group() as group:
            # The watcher lives outside the work's scope, so it still sees a second signal.
            group.start_soon(self._watch, scope)
            with scope:
                self.result = await self.work()
            group.cancel_scope.cancel()

    def run(self) -> Interruptible[T]:
        """Run to the end or to the first signal; returns self."""
        anyio.run(self._main)
        return self
