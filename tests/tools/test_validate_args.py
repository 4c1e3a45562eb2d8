"""Tool.validate_args: the dict validator gives what the args model gives, for any input."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import AfterValidator, BaseModel, ValidationError
from typing_extensions import TypedDict

from plandag.tools.base import Tool, dict_validator, tool
from plandag.tools.registry import default_registry


class Point(TypedDict):
    x: int
    y: int


class Box(BaseModel):
    width: float
    label: str = "box"


@tool
def plain(
    text: str,
    count: int,
    ratio: float = 0.5,
    flag: bool = False,
    names: list[str] | None = None,
    table: dict[str, str] | None = None,
    anything: Any = None,
) -> None:
    """Scalars, containers and Any."""


@tool
def aliased(json: str, schema: dict[str, Any] | None = None, copy: int = 0) -> None:
    """Arguments named like BaseModel attributes (stored under an alias)."""


@tool
def shaped(
    point: Point,
    box: Box,
    mode: Literal["fast", "slow"] = "fast",
    pair: tuple[int, str] | None = None,
    either: int | str = 0,
    nested: dict[str, list[int]] | None = None,
) -> None:
    """A TypedDict, a model, a Literal, a tuple, a union."""


@tool
def defaulted(items: list[int] = [1, 2], table: dict[str, int] = {"a": 1}) -> None:  # noqa: B006
    """Mutable defaults (pydantic copies them for each validation)."""


def _positive(value: int) -> int:
    if value <= 0:
        raise ValueError("must be > 0")
    return value


@tool
def validated(size: Annotated[int, AfterValidator(_positive)]) -> None:
    """A validator function of its own: validated by the model alone."""


TOOLS: list[Tool] = [plain, aliased, shaped, defaulted, validated]


def _model_values(tool_: Tool, args: dict[str, Any]) -> dict[str, Any]:
    """What validate_args returned before the dict validator: the model instance's fields."""
    model = tool_.args_model.model_validate(args)
    return {
        (field.alias or name): getattr(model, name)
        for name, field in tool_.args_model.model_fields.items()
    }


def _typed(value: Any) -> Any:
    """``value`` with every type written out, so that 1 and 1.0 and True differ."""
    if isinstance(value, dict):
        return ("dict", [(_typed(key), _typed(item)) for key, item in value.items()])
    if isinstance(value, list | tuple):
        return (type(value).__name__, [_typed(item) for item in value])
    if isinstance(value, BaseModel):
        return (type(value).__name__, _typed(value.__dict__))
    return (type(value).__name__, value)


def _outcome(call: Any) -> Any:
    """What ``call()`` returns (types written out) or the error it raises, comparable."""
    try:
        return ("values", _typed(call()))
    except ValidationError as error:
        return ("error", str(error), error.errors(include_context=False))


def _same(tool_: Tool, args: dict[str, Any]) -> None:
    expected = _outcome(lambda: _model_values(tool_, args))
    assert _outcome(lambda: tool_.validate_args(args)) == expected


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.sampled_from(["", "a", "1", "2.5", "true", "fast", "slow", "no"]),
    st.binary(max_size=2),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["a", "x", "y", "width", "label"]), inner, max_size=3),
    ),
    max_leaves=6,
)


def _arguments(tool_: Tool) -> st.SearchStrategy[dict[str, Any]]:
    names = [field.alias or name for name, field in tool_.args_model.model_fields.items()]
    return st.dictionaries(st.sampled_from([*names, "unknown"]), VALUES, max_size=len(names) + 1)


@pytest.mark.parametrize("tool_", TOOLS, ids=lambda tool_: tool_.name)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_random_arguments_validate_as_the_model_does(tool_: Tool, data: st.DataObject) -> None:
    _same(tool_, data.draw(_arguments(tool_)))


@pytest.mark.parametrize(
    ("tool_", "args"),
    [
        (plain, {"text": "t", "count": "3", "ratio": 1, "names": ["a"], "table": {"k": "v"}}),
        (plain, {"text": "t", "count": 1.0, "flag": "true", "anything": {"deep": [1]}}),
        (plain, {"text": 1, "count": 1}),
        (plain, {"count": 1, "extra": 1}),
        (aliased, {"json": "j", "schema": {"type": "object"}, "copy": "2"}),
        (aliased, {"json_argument": "j"}),
        (shaped, {"point": {"x": 1, "y": "2"}, "box": {"width": 2}, "pair": [1, "a"]}),
        (shaped, {"point": {"x": 1}, "box": Box(width=1.5), "mode": "slow", "either": "3"}),
        (shaped, {"point": {"x": 1, "y": 2}, "box": {"width": 1}, "nested": {"a": [1, "2"]}}),
        (defaulted, {}),
        (validated, {"size": 3}),
        (validated, {"size": 0}),
    ],
)
def test_written_out_arguments_validate_as_the_model_does(
    tool_: Tool, args: dict[str, Any]
) -> None:
    _same(tool_, args)


def test_containers_and_defaults_are_new_for_each_call() -> None:
    table = {"k": "v"}
    first = plain.validate_args({"text": "t", "count": 1, "table": table})
    second = plain.validate_args({"text": "t", "count": 1, "table": table})
    assert first["table"] == {"k": "v"}
    assert first["table"] is not table
    assert first["table"] is not second["table"]
    one, two = defaulted.validate_args({}), defaulted.validate_args({})
    assert one == {"items": [1, 2], "table": {"a": 1}}
    assert one["items"] is not two["items"]
    assert one["table"] is not two["table"]


def test_any_argument_is_passed_as_given() -> None:
    element = object()
    assert (
        plain.validate_args({"text": "t", "count": 1, "anything": element})["anything"] is element
    )


def test_only_plain_models_get_a_dict_validator() -> None:
    assert dict_validator(plain.args_model) is not None
    assert dict_validator(shaped.args_model) is not None
    assert dict_validator(validated.args_model) is None  # a validator function of its own
    assert dict_validator(Box) is not None


def test_every_registered_tool_validates_as_its_model_does() -> None:
    registry = default_registry()
    samples = [{}, {"xml": "<a/>", "paths": {"a": "b"}}, {"path": "a.xml", "encoding": "binary"}]
    for tool_ in registry.tools.values():
        for args in samples:
            _same(tool_, args)
