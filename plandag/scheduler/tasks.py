"""The tasks of a run's steps: a task group lighter than anyio's, for steps on asyncio.

anyio's ``TaskGroup.start_soon`` gives every task a handle with a cancel scope and an event
of its own, a wrapping coroutine, a task state and a done callback; a fan-out of a thousand
steps pays that a thousand times. :class:`StepTasks` gives each task one cancel scope (the
anyio way of cancelling applies inside it: a shield a step holds is respected) and keeps
the rules of a task group the runner relies on:

* leaving its ``async with`` block waits until every task it started has ended;
* when the host (the task in that block) is cancelled — the run's cancel scope at a
  deadline or a stop, or a cancellation from outside — every task is cancelled the anyio
  way (a task started later too), the host waits for them all, then its cancellation goes
  on; :meth:`StepTasks.cancel` does the same at once, from anywhere;
* a task that raises (anything but its own cancellation) cancels the others, and the host
  raises a ``BaseExceptionGroup`` of the errors as it leaves; ``KeyboardInterrupt`` and
  ``SystemExit`` also go on to the event loop, as from any asyncio task;
* a task may run a call that ignores its cancellation (an async tool that swallows it, or
  holds a shield): while it runs one, the task names it in :attr:`StepTasks.calling`. Once
  the group was cancelled ``grace_s`` seconds ago and every task left is in such a call,
  the host abandons them (:func:`~plandag.scheduler.overrun.abandon`: they keep running,
  in :data:`~plandag.scheduler.overrun.ABANDONED`), hands the calls to
  :attr:`StepTasks.on_abandon` and leaves; a call that ends later finds itself gone from
  :attr:`StepTasks.calling` and drops its outcome (ARCHITECTURE.md, "Brakes": "the run
  stops at its deadline wherever it is").

Tasks are started in a copy of the caller's context, as asyncio and anyio start them. On
another event loop (trio), :func:`step_tasks` gives anyio's own task group.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import TaskGroup

from plandag.scheduler.overrun import GRACE_S, abandon

__all__ = ["StepTasks", "step_tasks"]

_RECHECK_S = 0.01
"""Past the grace period, while a task left is not in an abandonable call, the host looks
again this often (seconds): such a task ends soon (it is cancelled and waits on nothing
that ignores it)."""


def step_tasks() -> StepTasks | TaskGroup:
    """A :class:`StepTasks` on asyncio; anyio's task group on any other event loop."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # another event loop (trio)
        return anyio.create_task_group()
    return StepTasks(loop)


class StepTasks:
    """A task group for a run's steps (module docstring), used as ``async with``.

    Args:
        loop: the running asyncio event loop.
        grace_s: seconds a cancelled task in an abandonable call has to end.
    """

    __slots__ = (
        "_cancelled_at",
        "_errors",
        "_loop",
        "_next_key",
        "_scope_class",
        "_scopes",
        "_tasks",
        "_wake",
        "calling",
        "grace_s",
        "on_abandon",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, grace_s: float = GRACE_S) -> None:
        self._loop = loop
        self._scope_class = type(anyio.CancelScope())
        """The class of the cancel scopes anyio makes on this loop: each task makes its
        scope from it directly (``anyio.CancelScope()`` asks which event loop runs, each
        time)."""
        self.grace_s = grace_s
        self.calling: dict[Any, Any] = {}
        """The abandonable calls running in the group's tasks, one entry per task in such
        a call (the key and value are the caller's: what :attr:`on_abandon` needs)."""
        self.on_abandon: Callable[[dict[Any, Any]], None] | None = None
        """Called by the host with :attr:`calling` when it abandons their tasks (then
        :attr:`calling` is emptied)."""
        self._tasks: dict[int, asyncio.Task[None]] = {}
        """Tasks started and not yet ended, by a number of their own (held here: the event
        loop holds them weakly). A task ends by its number, not asking which task runs."""
        self._next_key = 0
        self._scopes: set[anyio.CancelScope] = set()
        """The cancel scope of each running task."""
        self._errors: list[BaseException] = []
        self._wake: asyncio.Future[None] | None = None
        """What the host waits on while tasks run (set when the last one ends)."""
        self._cancelled_at: float | None = None
        """When the group was first cancelled (the loop's clock), or None."""

    @property
    def cancelled(self) -> bool:
        """Whether the group was cancelled (its tasks are, and any started later)."""
        return self._cancelled_at is not None

    def start_soon(self, func: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Start ``func(*args)`` in a task of the group (it runs from the loop's next turn).

        Args:
            func: an async function.
            args: its positional arguments.
        """
        key = self._next_key
        self._next_key = key + 1
        self._tasks[key] = self._loop.create_task(self._run(func, args, key))

    def cancel(self) -> None:
        """Cancel every task of the group the anyio way, and every task started later."""
        if self._cancelled_at is None:
            self._cancelled_at = self._loop.time()
        for scope in list(self._scopes):
            scope.cancel()

    async def _run(
        self, func: Callable[..., Awaitable[Any]], args: tuple[Any, ...], key: int
    ) -> None:
        scopes = self._scopes
        try:
            with self._scope_class() as scope:
                scopes.add(scope)
                if self._cancelled_at is not None:
                    scope.cancel()
                try:
                    await func(*args)
                finally:
                    scopes.discard(scope)
        except (KeyboardInterrupt, SystemExit) as error:
            # on to the event loop, as from any task; the host raises it too (in its group)
            self._errors.append(error)
            self.cancel()
            task = asyncio.current_task()
            if task is not None:
                task.add_done_callback(_retrieve)
            raise
        except asyncio.CancelledError:
            self.cancel()  # cancelled natively (the loop shutting down): the others too
            raise
        except BaseException as error:
            self._errors.append(error)
            self.cancel()
        finally:
            tasks = self._tasks
            tasks.pop(key, None)  # gone already when the host abandoned it
            wake = self._wake
            if not tasks and wake is not None and not wake.done():
                wake.set_result(None)

    def _abandon(self) -> None:
        """Abandon the tasks left (each in an abandonable call) and hand their calls over."""
        tasks = self._tasks
        for task in tasks.values():
            abandon(task, self.grace_s)
        tasks.clear()
        calling = self.calling
        if self.on_abandon is not None:
            self.on_abandon(calling)
        calling.clear()

    async def __aenter__(self) -> StepTasks:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        cancelled: BaseException | None = None
        if exc is not None:
            self.cancel()  # the block itself failed or was cancelled: stop the tasks
        loop = self._loop
        tasks = self._tasks
        while tasks:
            wake = self._wake = loop.create_future()
            timer: asyncio.TimerHandle | None = None
            since = self._cancelled_at
            if since is not None:
                left = since + self.grace_s - loop.time()
                if left <= 0 and len(self.calling) >= len(tasks):
                    self._abandon()
                    break
                timer = loop.call_later(max(left, _RECHECK_S), _wake_up, wake)
            try:
                await wake
            except asyncio.CancelledError as error:
                if cancelled is None:
                    cancelled = error
                self.cancel()
            finally:
                if timer is not None:
                    timer.cancel()
        self._wake = None
        if self._errors:
            errors, self._errors = self._errors, []
            if exc is not None and not isinstance(exc, asyncio.CancelledError):
                errors.insert(0, exc)
            raise BaseExceptionGroup("unhandled errors in a step task", errors)
        if cancelled is not None and exc is None:
            raise cancelled
        return False


def _wake_up(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Mark the exception of a task that raised it on to the event loop as retrieved: the
    host raises it in its group."""
    if not task.cancelled():
        task.exception()
