"""run_in_context awaits a coroutine as a task of its own made in a context would run it:
the same steps in the same context, the same result or error, what it sets kept in that
context, and what is thrown into the awaiting task (a cancellation) thrown into it."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from plandag.scheduler.overrun import run_in_context

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


async def body(log: list[Any], suspends: int, error: Exception | None) -> int:
    """Logs the variable before and after each of ``suspends`` suspensions, sets it, then
    returns the sum of 0..suspends-1 or raises ``error``."""
    log.append(VAR.get())
    VAR.set("set by the call")
    total = 0
    for number in range(suspends):
        await asyncio.sleep(0)
        log.append((number, VAR.get()))
        total += number
    if error is not None:
        raise error
    return total


async def waits_for_cancellation(log: list[Any], started: asyncio.Event) -> str:
    """Waits until cancelled, then returns (or, when told, goes on waiting once more)."""
    VAR.set("set before waiting")
    started.set()
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        log.append(("cancelled", VAR.get()))
        await asyncio.sleep(0)
        return "stopped"
    return "never"


def _outcome(make: Callable[[], Coroutine[Any, Any, Any]], own_task: bool) -> Any:
    """(result or error, the context's variable after, the caller's after)."""

    async def main() -> Any:
        VAR.set("the caller's")
        context = contextvars.copy_context()
        try:
            if own_task:
                result: Any = await asyncio.get_running_loop().create_task(make(), context=context)
            else:
                result = await run_in_context(make(), context)
        except Exception as error:
            result = (type(error), str(error))
        return result, context.run(VAR.get), VAR.get()

    return asyncio.run(main())


@pytest.mark.parametrize("suspends", [0, 1, 3])
@pytest.mark.parametrize("error", [None, ValueError("no")])
def test_a_call_runs_as_a_task_of_its_own_in_the_context(
    suspends: int, error: Exception | None
) -> None:
    logs: dict[bool, list[Any]] = {True: [], False: []}
    outcomes = {
        own: _outcome(lambda own=own: body(logs[own], suspends, error), own)
        for own in (True, False)
    }
    assert outcomes[False] == outcomes[True]
    assert logs[False] == logs[True]
    assert logs[False][0] == "the caller's"
    assert outcomes[False][1:] == ("set by the call", "the caller's")
    if error is None:
        assert outcomes[False][0] == sum(range(suspends))


def test_a_cancellation_of_the_awaiting_task_is_thrown_into_the_call() -> None:
    def run(own_task: bool) -> tuple[Any, list[Any]]:
        log: list[Any] = []

        async def main() -> Any:
            started = asyncio.Event()
            context = contextvars.copy_context()
            call = waits_for_cancellation(log, started)

            async def awaiting() -> Any:
                if own_task:
                    inner = asyncio.get_running_loop().create_task(call, context=context)
                    try:
                        return await asyncio.shield(inner)
                    except asyncio.CancelledError:
                        inner.cancel()
                        return await inner
                return await run_in_context(call, context)

            task = asyncio.get_running_loop().create_task(awaiting())
            await started.wait()
            task.cancel()
            return await task, context.run(VAR.get), VAR.get()

        return asyncio.run(main()), log

    assert run(False) == run(True)
    assert run(False) == (
        ("stopped", "set before waiting", "unset"),
        [("cancelled", "set before waiting")],
    )
