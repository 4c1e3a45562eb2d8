"""The deadline ends the run, even when a step ignores cancellation (ARCHITECTURE.md,
"Brakes": "the run stops at its deadline wherever it is").

At the wall-clock cap the runner cancels every running step. Three kinds of step can keep
a run past it, each handled here or in the runner:

* **a sync tool in a worker thread**: the wait for the thread is cancelled at once and the
  daemon thread abandoned (:func:`plandag.tools.base.run_in_daemon_thread`); it never keeps
  the process alive;
* **an async tool that swallows the cancellation** and goes on: the runner asks the tool to
  stop, waits :data:`GRACE_S`, then abandons the task it runs in (kept in
  :data:`ABANDONED`) so the run ends ``timed_out`` at the deadline with the step
  ``cancelled``. A run's step task is abandoned by the run's task group
  (:class:`plandag.scheduler.tasks.StepTasks`); a tool with a timeout, or a step of a
  session, is called through :class:`ToolCalls` (:func:`await_abandonable` for one call),
  whose call task is abandoned;
* **an inline tool that blocks the event loop** (``time.sleep`` in a tool declared
  ``inline=True``): nothing on the loop can run until it returns. When it does, its late
  result is discarded and the step recorded ``cancelled`` (never ``succeeded``,
  :meth:`plandag.scheduler.runner._Run.run_one_step`).

A library cannot end the process for its caller, so in Python :func:`plandag.run_plan`
returns once the blocking call returns. A command line can: it installs a
:class:`DeadlineGuard`, a daemon thread that watches every live run (:data:`LIVE_RUNS`);
when a run is still going :data:`GRACE_S` seconds after its deadline (time waiting for a
person left out, as for the cap itself), or an abandoned task still holds the process
(asyncio's shutdown would wait for it), the guard calls its ``on_overrun`` handler — the
CLI's records the run ``timed_out`` and its running steps ``cancelled`` (reason
``deadline``) in the run store through a connection of its own, prints one line (and,
with ``--json``, the run's result as the command would have printed it:
:meth:`GuardedRun.deadline_result`) and ends the process with ``os._exit(3)``: no cleanup
can run on a blocked loop, so the store is written and flushed first, and the exit code is
the one of a deadline stop.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
import types
import weakref
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import anyio

if TYPE_CHECKING:
    from plandag.scheduler.result import RunResult

__all__ = [
    "ABANDONED",
    "GRACE_S",
    "LIVE_RUNS",
    "DeadlineGuard",
    "GuardedRun",
    "ToolCalls",
    "abandon",
    "await_abandonable",
    "run_in_context",
]

logger = logging.getLogger("plandag.scheduler")

GRACE_S = 1.0
"""Seconds a step has to stop once cancelled at the deadline before it is abandoned (its
task) or the process is ended (by a command line's :class:`DeadlineGuard`)."""

ABANDONED: set[asyncio.Task[Any]] = set()
"""Tasks of async tools that ignored cancellation at a deadline and were left running."""


class GuardedRun(Protocol):
    """What a :class:`DeadlineGuard` reads from a run (the runner's ``_Run``): plain
    attributes, read from the guard's thread."""

    run_id: str
    deadline: float | None
    """The run's deadline on ``monotonic`` (moved on by time waiting for a person)."""
    paused: bool
    """The run waits for a person."""
    finished: bool
    """The run returned its result."""

    def monotonic(self) -> float:
        """Seconds on the run's monotonic clock."""
        ...

    def running_step_ids(self) -> Sequence[int]:
        """Ids of the steps running now."""
        ...

    def deadline_result(self) -> RunResult:
        """The run's result as a deadline stop leaves it (the one it returned, or its
        records as they stand with the running steps ``cancelled``)."""
        ...


LIVE_RUNS: weakref.WeakSet[Any] = weakref.WeakSet()
"""Runs with a wall-clock cap on the system clock, while they run (the runner adds and
removes them; a :class:`DeadlineGuard` watches them)."""


async def await_abandonable(coroutine: Coroutine[Any, Any, Any], grace_s: float = GRACE_S) -> Any:
    """Await an async tool's call so that a tool swallowing cancellation cannot hold the run
    (one call: :class:`ToolCalls` serves a run's calls).

    On asyncio, the call runs in a task of its own; when the caller is cancelled (the
    run's deadline, a stall, the tool's timeout, Ctrl-C), the task is cancelled and given
    ``grace_s`` seconds to end; a task still running then is abandoned (added to
    :data:`ABANDONED`, its late result or error dropped) and the cancellation goes on.
    On other event loops the call is awaited as it is.

    Args:
        coroutine: the tool's call (``tool.invoke(...)``).
        grace_s: seconds the cancelled call has to end.

    Returns:
        What the call returned.

    Raises:
        Whatever the call raises; the caller's cancellation.
    """
    calls = ToolCalls(grace_s)
    try:
        return await calls.call(coroutine)
    finally:
        calls.close()


class ToolCalls:
    """The async tool calls of one run, each awaited as :func:`await_abandonable` says:
    in a task other than the caller's, cancelled the anyio way when the caller is (so that
    a shield the tool holds is respected), abandoned when it has not ended ``grace_s``
    seconds later.

    The task that ran a call runs the next one too (one at a time), until a cancellation
    reaches it: a chain of steps makes one such task, not one per call. Each call still
    runs in a copy of its caller's context, as in a task of its own.

    Args:
        grace_s: seconds a cancelled call has to end.
    """

    def __init__(self, grace_s: float = GRACE_S) -> None:
        self.grace_s = grace_s
        self._idle: list[_CallTask] = []

    async def call(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        """Await ``coroutine`` (module docstring).

        Returns:
            What the call returned.

        Raises:
            Whatever the call raises; the caller's cancellation.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another event loop (trio)
            return await coroutine
        # The caller waits on a future of its own, which the call's task sets as the call
        # ends: awaiting that task would cancel it natively with the caller.
        waiter: asyncio.Future[None] = loop.create_future()
        idle = self._idle
        runner = idle.pop() if idle else None
        if runner is None or runner.task.done():
            runner = _CallTask(loop, coroutine, waiter)
        else:
            runner.job.set_result((coroutine, contextvars.copy_context(), waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            await runner.cancel(self.grace_s)
            raise
        value, error = runner.value, runner.error
        runner.value = runner.error = None
        if not runner.retired:
            idle.append(runner)
        if error is not None:
            raise error
        return value

    def close(self) -> None:
        """End the tasks waiting for a call (the run is over)."""
        idle, self._idle = self._idle, []
        for runner in idle:
            if not runner.job.done():
                runner.job.set_result(None)


class _CallTask:
    """A task running calls one at a time (:class:`ToolCalls`), from its first."""

    __slots__ = ("error", "job", "loop", "retired", "scope", "task", "value")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        coroutine: Coroutine[Any, Any, Any],
        waiter: asyncio.Future[None],
    ) -> None:
        self.loop = loop
        self.scope: anyio.CancelScope | None = None
        self.job: asyncio.Future[Any] = loop.create_future()
        """Set to the next call (coroutine, context, waiter), or None to end."""
        self.value: Any = None
        self.error: BaseException | None = None
        self.retired = False
        """No further call is given to it (it was cancelled, or a call raised more than
        an Exception)."""
        self.task = loop.create_task(self.serve(coroutine, waiter))

    async def serve(
        self, coroutine: Coroutine[Any, Any, Any], waiter: asyncio.Future[None]
    ) -> None:
        """Run the first call, then each call handed in ``job``, until told to end,
        cancelled, or retired."""
        # the first call runs in the task's own context: a copy of its caller's
        context: contextvars.Context | None = None
        with anyio.CancelScope() as scope:
            self.scope = scope
            while True:
                try:
                    if context is None:
                        self.value = await coroutine
                    else:
                        self.value = await run_in_context(coroutine, context)
                except Exception as error:
                    self.error = error
                except BaseException as error:
                    if self.retired:  # cancelled by cancel(): the scope takes it
                        raise
                    self.retired = True
                    self.error = error
                    if isinstance(error, KeyboardInterrupt | SystemExit):
                        if not waiter.done():
                            waiter.set_result(None)
                        raise  # on to the event loop, as from a task of its own
                if not waiter.done():
                    waiter.set_result(None)
                if self.retired:
                    return
                job = await self.job
                if job is None:
                    return
                coroutine, context, waiter = job
                self.job = self.loop.create_future()

    async def cancel(self, grace_s: float) -> None:
        """The caller was cancelled: cancel the call the anyio way (a shield the tool holds
        is respected) and wait up to ``grace_s`` seconds for it to end; a call still
        running then is abandoned (:data:`ABANDONED`)."""
        self.retired = True
        task = self.task
        if self.scope is not None:
            self.scope.cancel()
        else:
            task.cancel()  # it has not started: nothing of the tool's ran yet
        with anyio.CancelScope(shield=True):
            await asyncio.wait({task}, timeout=grace_s)
        if not task.done():
            abandon(task, grace_s)
        elif not task.cancelled():
            task.exception()  # retrieved: its outcome no longer matters
        self.value = self.error = None


def abandon(task: asyncio.Task[Any], grace_s: float) -> None:
    """Leave ``task`` running, cancelled ``grace_s`` seconds ago and still going: kept in
    :data:`ABANDONED` until it ends (its outcome then dropped), and a warning logged."""
    ABANDONED.add(task)
    task.add_done_callback(_forget)
    logger.warning(
        "a tool ignored its cancellation for %.3g s and was abandoned; its late result is dropped",
        grace_s,
    )


@types.coroutine
def run_in_context(coroutine: Coroutine[Any, Any, Any], context: contextvars.Context) -> Any:
    """Await ``coroutine`` with each of its steps run in ``context``, as a task of its own
    made in that context would run it (what it sets stays in ``context``)."""
    run = context.run
    try:
        yielded = run(coroutine.send, None)
    except StopIteration as stop:  # done without suspending, as most tool calls are
        return stop.value
    while True:
        try:
            value = yield yielded
        except BaseException as thrown:  # a cancellation (or anything) thrown into the task
            try:
                yielded = run(coroutine.throw, thrown)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                yielded = run(coroutine.send, value)
            except StopIteration as stop:
                return stop.value


def _forget(task: asyncio.Task[Any]) -> None:
    ABANDONED.discard(task)
    if not task.cancelled():
        task.exception()


class DeadlineGuard:
    """A daemon thread that ends the process when a run overruns its deadline (module
    docstring). Install it in a command line, not in a library.

    Args:
        on_overrun: called once, on the guard's thread, with the runs past their deadline
            (or every live run, when an abandoned task holds the process); it is expected
            to record them, report them (:meth:`GuardedRun.deadline_result`) and end the
            process (``os._exit``). Leaving the guard's ``with`` block waits for it.
        grace_s: seconds past a deadline before it acts.
        poll_s: seconds between two looks.
    """

    def __init__(
        self,
        on_overrun: Callable[[list[GuardedRun]], None],
        *,
        grace_s: float = GRACE_S,
        poll_s: float = 0.1,
    ) -> None:
        self.on_overrun = on_overrun
        self.grace_s = grace_s
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._acting = threading.Lock()
        """Held while ``on_overrun`` runs: leaving the guard waits for it (the handler
        ends the process), so that the command never reports the run beside it."""
        self._thread = threading.Thread(target=self._watch, name="plandag-deadline", daemon=True)
        self._seen: dict[str, GuardedRun] = {}
        self._abandoned_since: float | None = None

    def __enter__(self) -> DeadlineGuard:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        with self._acting:  # a handler already acting ends the process first
            pass

    def overrun(self) -> list[GuardedRun]:
        """The runs to act on now (empty when all is well)."""
        late: list[GuardedRun] = []
        for run in list(LIVE_RUNS):
            self._seen[run.run_id] = run
            deadline = run.deadline
            if (
                deadline is not None
                and not run.finished
                and not run.paused
                and run.monotonic() > deadline + self.grace_s
            ):
                late.append(run)
        if late:
            return late
        if ABANDONED:
            now = time.monotonic()
            if self._abandoned_since is None:
                self._abandoned_since = now
            elif now - self._abandoned_since > self.grace_s:
                return list(self._seen.values())
        else:
            self._abandoned_since = None
        return []

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            late = self.overrun()
            if late:
                with self._acting:
                    if self._stop.is_set():
                        return  # the command went on to report the run itself
                    self.on_overrun(late)
                return
