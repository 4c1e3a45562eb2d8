"""A plan whose tool goes down while a step waits for its retry.

Step 1 fails transiently (the retry policy's backoff applies) while steps 2-4, of the same
tool, fail for good: three failures in a row take the tool down (the breaker's default),
so step 1's retry is not made after its backoff.
"""

from __future__ import annotations

from collections import Counter

from plandag.checks import BUILTIN_CHECKS
from plandag.compiler import CompiledPlan, compile_plan
from plandag.errors import TransientStepError
from plandag.tools.base import tool
from plandag.tools.registry import Registry


def plan_whose_tool_goes_down_during_a_backoff(calls: Counter[str]) -> CompiledPlan:
    """Steps 1-4 of the tool ``service``: step 1 raises TransientStepError, steps 2-4
    ValueError. Each call of step N adds one to ``calls["service:N"]``."""

    @tool
    async def service(name: str, transient: bool) -> str:
        """Fails, transiently or not."""
        calls[f"service:{name}"] += 1
        if transient:
            raise TransientStepError(f"busy for {name}")
        raise ValueError(f"gone for {name}")

    steps = [{"id": 1, "tool": "service", "args": {"name": "1", "transient": True}}] + [
        {"id": n, "tool": "service", "args": {"name": str(n), "transient": False}}
        for n in (2, 3, 4)
    ]
    return compile_plan({"steps": steps}, Registry([service], BUILTIN_CHECKS))
