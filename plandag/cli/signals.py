"""Run async work so that SIGINT and SIGTERM stop it cleanly (ARCHITECTURE.md, "States
and exit codes").

The first signal cancels the work: a plan run then ends ``interrupted`` with every step in
a terminal state (completed results kept), and the caller prints what was and was not
done. A second signal exits at once with ``128 + signum`` (130 for SIGINT, 143 for SIGTERM).

The event loop sees a signal only when it gets control back, so a tool that blocks the loop
(a sync ``inline`` tool that sleeps) would delay both. A plain Python signal handler, which
runs between two bytecodes of the main thread even while the loop is blocked, therefore
counts the signals too: it prints the notice of the first at once and exits on the second.
It then hands the signal on to the handler it replaced (the loop's own), so the loop still
receives the first one and cancels the work.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Awaitable, Callable
from types import FrameType
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

    An exception ``work()`` raises comes out of :meth:`run` as itself, not wrapped in an
    ``ExceptionGroup``, so callers can catch ``InputError`` or ``OSError``.

    Attributes:
        result: what ``work()`` returned, or None when it was cancelled before returning.
        signal: the first signal received, or None.
    """

    def __init__(self, work: Callable[[], Awaitable[T]]) -> None:
        self.work = work
        self.result: T | None = None
        self.signal: int | None = None
        self._received = 0

    def _on_signal(self, signum: int, frame: FrameType | None, previous: object) -> None:
        """The plain Python handler: notice at once, exit on the second, then chain."""
        self._received += 1
        if self._received > 1:
            os.write(2, b"second signal: exiting at once\n")
            os._exit(exit_code_for_signal(signum))
        name = signal.Signals(signum).name
        notice = f"{name}: stopping; completed work is kept (send it again to exit at once)\n"
        os.write(2, notice.encode())
        if callable(previous):
            previous(signum, frame)

    def _install_counter(self) -> Callable[[], None]:
        """Put :meth:`_on_signal` in front of the loop's handlers; returns the undo."""
        installed: dict[int, tuple[object, object]] = {}
        for signum in _SIGNALS:
            previous = signal.getsignal(signum)

            def handler(number: int, frame: FrameType | None, previous: object = previous) -> None:
                self._on_signal(number, frame, previous)

            signal.signal(signum, handler)
            installed[signum] = (handler, previous)

        def restore() -> None:
            for signum, (handler, previous) in installed.items():
                if signal.getsignal(signum) is handler and previous is not None:
                    signal.signal(signum, previous)  # type: ignore[arg-type]

        return restore

    async def _watch(self, scope: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(*_SIGNALS) as received:
            restore = self._install_counter()
            try:
                async for signum in received:
                    if self.signal is not None:  # the counter exits first; a safety net
                        os._exit(exit_code_for_signal(signum))
                    self.signal = int(signum)
                    scope.cancel()
            finally:
                restore()

    async def _main(self) -> None:
        scope = anyio.CancelScope()
        error: Exception | None = None
        async with anyio.create_task_group() as group:
            # The watcher lives outside the work's scope, so it still sees a second signal.
            group.start_soon(self._watch, scope)
            try:
                with scope:
                    self.result = await self.work()
            except Exception as caught:  # raised below, outside the task group's wrapping
                error = caught
            group.cancel_scope.cancel()
        if error is not None:
            raise error

    def run(self) -> Interruptible[T]:
        """Run to the end or to the first signal; returns self.

        Raises:
            Exception: whatever ``work()`` raised, unwrapped.
        """
        anyio.run(self._main)
        return self
