"""The events made at every step keep every behavior of a frozen dataclass (their
``__init__`` sets the fields through the slots): positional and keyword arguments,
defaults, the errors for a missing or unknown argument, equality, hash, repr,
``dataclasses.replace``, pickling, and no assignment after construction."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from typing import Any

import pytest

from plandag.checks.base import CheckOutcome
from plandag.scheduler import events
from plandag.scheduler.result import StepErrorInfo, StepRecord

ERROR = StepErrorInfo("ValueError", "bad")
RECORD = StepRecord(3, "echo")
CHECK = CheckOutcome("not_empty", "pass", "ok")

MADE: list[tuple[type[Any], tuple[Any, ...]]] = [
    (events.StepStarted, ("r", 3, "echo", 1, 1.5, "none")),
    (events.StepSucceeded, ("r", 3, 0.25, 1.5, {"a": 1}, RECORD)),
    (events.StepFailed, ("r", 3, "tool_error", ERROR, 1.5, RECORD)),
    (events.StepRetrying, ("r", 3, 1, "tool_error", ERROR, 0.5, 1.5)),
    (events.StepSkipped, ("r", 3, "upstream_failed", "upstream 2 failed", 1.5)),
    (events.StepCancelled, ("r", 3, "deadline", 1.5, RECORD)),
    (events.CheckEvaluated, ("r", 3, CHECK, 1.5)),
]


@pytest.mark.parametrize(("cls", "values"), MADE, ids=[cls.__name__ for cls, _ in MADE])
def test_an_event_behaves_as_a_frozen_dataclass(cls: type[Any], values: tuple[Any, ...]) -> None:
    fields = dataclasses.fields(cls)
    names = [field.name for field in fields]
    assert len(values) == len(names)
    positional = cls(*values)
    keywords = cls(**dict(zip(names, values, strict=True)))
    assert [getattr(positional, name) for name in names] == list(values)
    assert positional == keywords
    assert hash(positional) == hash(keywords)
    assert repr(positional).startswith(f"{cls.__name__}(run_id='r', step_id=3")
    assert pickle.loads(pickle.dumps(positional)) == positional
    changed = dataclasses.replace(positional, step_id=4)
    assert changed.step_id == 4
    assert [getattr(changed, name) for name in names[2:]] == list(values[2:])
    with pytest.raises(dataclasses.FrozenInstanceError):
        positional.step_id = 5
    with pytest.raises(TypeError):
        cls(*values[:1])  # a required argument missing
    with pytest.raises(TypeError):
        cls(*values, unknown=1)
    required = [field.name for field in fields if field.default is dataclasses.MISSING]
    defaults = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
    made = cls(*values[: len(required)])
    assert {name: getattr(made, name) for name in defaults} == defaults
    assert list(inspect.signature(cls).parameters) == names


def test_a_field_with_a_default_factory_is_refused() -> None:
    with pytest.raises(TypeError, match="only plain fields"):

        @events._set_through_slots
        @dataclasses.dataclass(frozen=True, slots=True)
        class Bad:
            items: list[int] = dataclasses.field(default_factory=list)
