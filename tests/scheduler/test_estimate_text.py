"""A plan estimate's JSON text, made entry by entry (``PlanEstimate.json_text``), is the
text ``json.dumps`` makes of ``as_json()``: the same characters, or the same refusal of a
figure that is NaN or an infinity; steps that share one tuple of figures (as
``estimate_plan`` makes them) are written as each step's own estimate."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plandag.scheduler.estimate import (
    ModelCallEstimate,
    PlanEstimate,
    StepEstimate,
    _StepEstimates,
)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


_NUMBERS = st.one_of(
    st.none(),
    st.sampled_from([0, 0.0, -0.0, 1, 1.0, True, False, 1e-05, 1e21, 0.05, 5e-324]),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
)
_TOOLS = st.one_of(
    st.sampled_from(["noop", "sleep_for", "llm", 'quo"te', "back\\slash", "tab\t", "ação"]),
    st.text(max_size=8),
)


@st.composite
def _estimates(
    draw: st.DrawFn, numbers: st.SearchStrategy[Any] = _NUMBERS, *, shared: bool = False
) -> PlanEstimate:
    step_ids = draw(st.lists(st.integers(min_value=1, max_value=400), max_size=40, unique=True))
    # few distinct entries, as in a plan: most steps share their tool and figures
    entries = draw(
        st.lists(
            st.tuples(_TOOLS, numbers, numbers, st.sampled_from([None, "measured", "declared"])),
            min_size=1,
            max_size=4,
        )
    )
    steps: Any = {step_id: draw(st.sampled_from(entries)) for step_id in step_ids}
    if shared:  # the steps of an entry hold the same tuple
        steps = _StepEstimates(steps)
    else:
        steps = {step_id: StepEstimate(step_id, *entry) for step_id, entry in steps.items()}
    calls = tuple(
        ModelCallEstimate(label, seconds, cost)
        for label, seconds, cost in draw(
            st.lists(st.tuples(st.text(max_size=6), numbers, numbers), max_size=2)
        )
    )
    return PlanEstimate(
        cost_usd=draw(numbers),
        seconds=draw(numbers),
        critical_path=tuple(draw(st.lists(st.sampled_from(step_ids or [1]), max_size=5))),
        inline_seconds=draw(numbers),
        unknown=tuple(sorted(step_ids[:3])),
        unknown_cost=tuple(sorted(step_ids[-2:])),
        calls=calls,
        steps=steps,
    )


@settings(max_examples=300, deadline=None)
@given(_estimates())
def test_the_text_is_what_json_dumps_makes_of_as_json(estimate: PlanEstimate) -> None:
    assert estimate.json_text() == _dumps(estimate.as_json())


@settings(max_examples=300, deadline=None)
@given(_estimates(shared=True))
def test_steps_sharing_their_figures_are_written_as_each_steps_own_estimate(
    estimate: PlanEstimate,
) -> None:
    own = dataclasses.replace(estimate, steps=dict(estimate.steps.items()))
    assert all(item.step_id == step_id for step_id, item in own.steps.items())
    assert estimate.json_text() == _dumps(own.as_json())
    assert estimate.as_json() == own.as_json()
    assert estimate == own
    assert own == estimate


@settings(max_examples=150, deadline=None)
@given(_estimates(st.one_of(_NUMBERS, st.sampled_from([math.nan, math.inf, -math.inf]))))
def test_a_figure_that_is_not_finite_is_refused_as_json_dumps_refuses_it(
    estimate: PlanEstimate,
) -> None:
    try:
        expected = _dumps(estimate.as_json())
    except ValueError:
        with pytest.raises(ValueError, match="Out of range float values"):
            estimate.json_text()
    else:
        assert estimate.json_text() == expected


def test_zeros_of_different_kinds_keep_their_own_text() -> None:
    steps = {
        1: StepEstimate(1, "t", 0.0, 0.0, "declared"),
        2: StepEstimate(2, "t", -0.0, 0, "declared"),
        3: StepEstimate(3, "t", 0, False, "declared"),
        4: StepEstimate(4, "t", 1, True, "declared"),
        5: StepEstimate(5, "t", 1.0, 1.0, "declared"),
    }
    estimate = PlanEstimate(cost_usd=0.0, seconds=None, steps=steps)
    text = estimate.json_text()
    assert text == _dumps(estimate.as_json())
    assert '"2":{"tool":"t","cost_usd":-0.0,"seconds":0,' in text
    assert '"3":{"tool":"t","cost_usd":0,"seconds":false,' in text
