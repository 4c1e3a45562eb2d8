"""Each step's estimate is what its own tool and arguments give, whichever of its tool's
steps came first: the figures of a tool without an estimate function are the same for each
of its steps, those of a tool with one follow each step's arguments; the estimates read as
a mapping of the steps in plan order, equal to one made of each step's own."""

from __future__ import annotations

import copy
import pickle
import random
from typing import Any

import pytest

from plandag.compiler import compile_plan
from plandag.scheduler.estimate import StepEstimate, _step_estimate, estimate_plan
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


def _random_plan(seed: int) -> tuple[Any, dict[str, float], tuple[int, ...]]:
    """A compiled plan of 40 steps of the four tools, measured figures and done steps."""
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
    return compiled, measured, done


@pytest.mark.parametrize("seed", range(5))
def test_each_steps_estimate_is_its_own(seed: int) -> None:
    compiled, measured, done = _random_plan(seed)
    estimate = estimate_plan(compiled, measured=measured, done=done)
    for step_id, compiled_step in compiled.steps.items():
        got = estimate.steps[step_id]
        if step_id in done:
            assert (got.cost_usd, got.seconds, got.source) == (0.0, 0.0, None)
        else:
            assert got == _step_estimate(compiled_step, measured, None)


@pytest.mark.parametrize("seed", range(3))
def test_the_estimates_read_as_a_mapping_of_each_steps_own(seed: int) -> None:
    compiled, measured, done = _random_plan(seed)
    steps = estimate_plan(compiled, measured=measured, done=done).steps
    own = {step_id: steps[step_id] for step_id in compiled.steps}
    assert all(isinstance(item, StepEstimate) for item in own.values())
    assert list(steps) == list(compiled.steps)  # plan order
    assert len(steps) == 40
    assert 1 in steps
    assert 41 not in steps
    assert "1" not in steps
    assert steps.get(41) is None
    with pytest.raises(KeyError):
        steps[41]
    assert dict(steps.items()) == own
    assert steps == own
    assert own == steps
    assert repr(steps) == repr(own)
    assert pickle.loads(pickle.dumps(steps)) == own
    assert copy.deepcopy(steps) == own
