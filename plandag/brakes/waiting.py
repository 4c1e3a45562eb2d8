"""Waits that are not stalls: a context in which a wait for a rate-limit slot is reported.

A run's stall detector (:mod:`plandag.scheduler.heartbeat`) reports a stall when no step has
finished for a while. Time a model call spends waiting for a slot of the process's rate
limit (:mod:`plandag.models.ratelimit`) is throttling chosen on purpose, not a run that is
stuck, so it is left out, as the time a person takes to decide is. The runner makes itself
the :class:`WaitObserver` of the context its steps run in (:func:`observe_waits`); the
limiter tells the observer of the current context (:func:`current_observer`) when a wait
starts and ends. Tasks and threads started inside copy the context, so a step's calls and
a sync tool's calls alike are seen.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Protocol

__all__ = ["WaitObserver", "current_observer", "observe_waits"]


class WaitObserver(Protocol):
    """Told when a call of its context starts and stops waiting for a slot."""

    def slot_wait_started(self) -> None:
        """A call began to wait."""
        ...

    def slot_wait_ended(self) -> None:
        """That call has its slot (or stopped waiting)."""
        ...


_observer: contextvars.ContextVar[WaitObserver | None] = contextvars.ContextVar(
    "plandag_slot_wait_observer", default=None
)


@contextlib.contextmanager
def observe_waits(observer: WaitObserver) -> Iterator[None]:
    """Within the block (and the tasks and threads it starts), waits for a slot are
    reported to ``observer``."""
    token = _observer.set(observer)
    try:
        yield
    finally:
        _observer.reset(token)


def current_observer() -> WaitObserver | None:
    """The observer of the current context, or None."""
    return _observer.get()
