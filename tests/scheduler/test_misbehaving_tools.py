"""Tools that misbehave fail their own step only; the run always reports."""

from __future__ import annotations

import time

from plandag.compiler import compile_plan
from plandag.scheduler import run_plan_sync
from plandag.tools.base import tool
from plandag.tools.registry import Registry


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


@tool(inline=True, timeout=0.1)
def blocks_the_loop() -> int:
    """Blocks the event loop past its timeout."""
    time.sleep(0.3)
    return 1


@tool
def exits() -> int:
    """Calls sys.exit from inside a worker thread."""
    raise SystemExit(5)


@tool(inline=True)
def interrupts() -> int:
    """Raises KeyboardInterrupt itself."""
    raise KeyboardInterrupt


@tool
async def unprintable() -> int:
    """Raises an exception whose message cannot be formatted."""
    raise Unprintable


@tool
def fine() -> int:
    """Works."""
    return 42


def test_each_misbehaving_tool_fails_only_its_step() -> None:
    registry = Registry([blocks_the_loop, exits, interrupts, unprintable, fine])
    steps = [
        {"id": 1, "tool": "blocks_the_loop"},
        {"id": 2, "tool": "exits"},
        {"id": 3, "tool": "interrupts"},
        {"id": 4, "tool": "unprintable"},
        {"id": 5, "tool": "fine"},
    ]
    result = run_plan_sync(compile_plan({"steps": steps}, registry))
    outcome = {sid: (r.status, r.reason) for sid, r in result.steps.items()}
    assert outcome == {
        1: ("failed", "timeout"),
        2: ("failed", "tool_exit"),
        3: ("failed", "tool_exit"),
        4: ("failed", "tool_error"),
        5: ("succeeded", None),
    }
    assert result.steps[1].result is None
    assert result.steps[2].error is not None
    assert "SystemExit(5)" in result.steps[2].error.message
    assert result.steps[4].error is not None
    assert result.steps[4].error.type == "Unprintable"
    assert result.steps[5].result == 42
