"""Each step's estimate is what its own tool and arguments give, whichever of its tool's
steps came first: the figures of a tool without an estimate function are the same for each
of its steps, those of a tool with one follow each step's arguments."""

from __future__ import annotations

import random
from typing import Any

import pytest

from plandag.compiler import compile_plan
from plandag.scheduler.estimate import _step_estimate, estimate_plan
from plandag.tools import tool
from plandag.tools.registry import Registry


@tool(typical_seconds=0.5)
def declared(text: str = "") -> str:
    """Declares its time."""
    return text


@tool(effects="write", cost_estimate_usd=0.002)
def priced(text: str = "") -> str:
    """Declares its cost."""
    return text


@tool(effects="write")
def unknown(text: str = "") -> str:
    """Declares nothing, and has effects."""
    return text


def _by_length(args: Any) -> tuple[float | None, int]:
    return (len(str(args.get("text", ""))) * 0.001, 0)


@tool(estimate=_by_length, typical_seconds=1.0)
def sized(text: str = "") -> str:
    """Its cost follows its argument."""
    return text


@pytest.mark.parametrize("seed", range(5))
def test_each_steps_estimate_is_its_own(seed: int) -> None:
    rng = random.Random(seed)
    names = ["declared", "priced", "unknown", "sized", "measured_one"]
    steps = []
    for number in range(1, 41):
        name = rng.choice(names)
        steps.append(
            {
                "id": number,
                "tool": "declared" if name == "measured_one" else name,
                "args": {"text": "x" * rng.randint(0, 9)},
                "depends_on": rng.sample(range(1, number), min(number - 1, rng.randint(0, 2))),
            }
        )
    registry = Registry([declared, priced, unknown, sized])
    compiled = compile_plan({"steps": steps}, registry)
    measured = {"priced": 0.125} if seed % 2 else {}
    done = tuple(rng.sample(range(1, 41), 5))
    estimate = estimate_plan(compiled, measured=measured, done=done)
    for step_id, compiled_step in compiled.steps.items():
        got = estimate.steps[step_id]
        if step_id in done:
            assert (got.cost_usd, got.seconds, got.source) == (0.0, 0.0, None)
        else:
            assert got == _step_estimate(compiled_step, measured, None)
