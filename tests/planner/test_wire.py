"""The wire format: lossless both ways, clear diagnostics for malformed data, and a schema
inside the Anthropic API's structured-output subset."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from anthropic.lib._parse._transform import transform_schema
from hypothesis import given, settings
from hypothesis import strategies as st

from plandag.compiler import load_plan
from plandag.dag.plan import Plan
from plandag.errors import PlanError
from plandag.planner.wire import (
    dumps_wire,
    from_wire,
    to_wire,
    wire_json_schema,
    wire_to_document,
)

ROOT = Path(__file__).resolve().parents[2]
STORED_PLANS = [
    ROOT / "plandag/extract/nfe/plan.json",
    ROOT / "examples/plans/invoice_total.json",
    ROOT / "examples/plans/words.json",
]


def errors_of(source: Any) -> list[str]:
    with pytest.raises(PlanError) as caught:
        from_wire(source)
    return [diagnostic.format() for diagnostic in caught.value.diagnostics]


# -- lossless --------------------------------------------------------------------------------


@pytest.mark.parametrize("path", STORED_PLANS, ids=lambda path: path.name)
def test_stored_plans_round_trip_exactly(path: Path) -> None:
    plan = load_plan(path.read_text(encoding="utf-8"))
    back = from_wire(dumps_wire(plan))
    assert back == plan
    assert back.model_dump() == plan.model_dump()
    for name, spec in plan.params.items():
        assert back.params[name].is_required == spec.is_required


def test_a_small_plan_in_wire_form_written_out() -> None:
    plan = Plan.model_validate(
        {
            "goal": "g",
            "params": {
                "input": {"type": "string", "description": "a file"},
                "n": {"type": "integer", "default": 3},
                "flag": {"type": "boolean", "default": None, "required": False},
            },
            "steps": [
                {"id": 1, "tool": "read_file", "args": {"path": "<param.input>"}},
                {
                    "id": 2,
                    "tool": "json_select",
                    "args": {"data": "<step_1_result>", "expr": "a=b", "limit": 2, "x": None},
                    "depends_on": [1],
                    "check": [{"kind": "not_empty"}, {"kind": "regex", "pattern": "[0-9]+"}],
                    "description": "pick",
                },
            ],
            "output": {"a": "<step_2_result>", "n": [1, 2.5, True]},
        }
    )
    assert to_wire(plan) == {
        "g": "g",
        "p": [
            {"n": "input", "t": "string", "h": "a file"},
            {"n": "n", "t": "integer", "v": "3"},
            {"n": "flag", "t": "boolean", "v": "null", "r": False},
        ],
        "s": [
            {"i": 1, "t": "read_file", "a": ["path=<param.input>"], "d": []},
            {
                "i": 2,
                "t": "json_select",
                "a": ["data=<step_1_result>", "expr=a=b", "limit:=2", "x:=null"],
                "d": [1],
                "c": [{"k": "not_empty"}, {"k": "regex", "a": ["pattern=[0-9]+"]}],
                "n": "pick",
            },
        ],
        "o": '{"a":"<step_2_result>","n":[1,2.5,true]}',
    }
    assert from_wire(to_wire(plan)) == plan
    assert from_wire(dumps_wire(plan).encode()) == plan


def test_strings_that_look_like_json_stay_strings() -> None:
    plan = Plan.model_validate(
        {"steps": [{"id": 1, "tool": "t", "args": {"a": "1", "b": "[1]", "c": "", "d": "x:=y"}}]}
    )
    wire = to_wire(plan)
    assert wire["s"][0]["a"] == ["a=1", "b=[1]", "c=", "d=x:=y"]
    assert from_wire(wire).steps[0].args == {"a": "1", "b": "[1]", "c": "", "d": "x:=y"}


def test_an_argument_name_the_assignments_cannot_express_is_refused() -> None:
    plan = Plan.model_validate({"steps": [{"id": 1, "tool": "t", "args": {"a=b": 1}}]})
    with pytest.raises(ValueError, match="step 1 args: the name 'a=b' holds '='"):
        to_wire(plan)


def test_nan_is_refused() -> None:
    plan = Plan.model_validate({"steps": [{"id": 1, "tool": "t", "args": {"x": float("nan")}}]})
    with pytest.raises(ValueError, match="JSON compliant"):
        to_wire(plan)


def test_the_reader_takes_objects_where_unambiguous() -> None:
    plan = from_wire(
        {
            "g": "g",
            "p": [{"n": "k", "t": "integer", "v": 5}],
            "s": [{"i": 1, "t": "t", "a": {"x": [1, 2]}, "d": []}],
            "o": {"x": "<step_1_result>"},
        }
    )
    assert plan.steps[0].args == {"x": [1, 2]}
    assert plan.output == {"x": "<step_1_result>"}
    assert plan.params["k"].default == 5


def test_missing_optional_fields_take_their_defaults() -> None:
    plan = from_wire({"s": [{"i": 1, "t": "t"}], "o": None})
    assert plan == Plan.model_validate({"steps": [{"id": 1, "tool": "t"}]})


# -- malformed wire data ---------------------------------------------------------------------


def test_text_that_is_not_json_is_invalid_json() -> None:
    assert errors_of('{"g": "x", "s": [') == [
        "plan: error[invalid_json]: the plan is not JSON: Expecting value: line 1 column 18 "
        "(char 17) (hint: answer with one JSON object in the wire format, nothing else)"
    ]


def test_every_wire_problem_is_reported_at_once() -> None:
    assert errors_of(
        {
            "g": 3,
            "steps": [],
            "s": [
                {"i": 1, "t": "a", "a": ["x=1", "x=2", "y:={", 4], "d": [], "z": 1},
                {"t": "b", "a": "x=1"},
                {"i": 3, "t": "c", "a": [], "c": [{"a": ["kind=x"]}, "not_empty"]},
                7,
            ],
            "o": "<step_1_result>",
        }
    ) == [
        "plan: error[invalid_schema]: wire field (top): unknown field(s) 'steps' "
        "(hint: the fields here are g, p, s, o)",
        "plan: error[invalid_schema]: wire field g: must be a string, not a number",
        "step 1: error[invalid_schema]: wire field s[0]: unknown field(s) 'z' "
        "(hint: the fields here are i, t, a, d, c, n)",
        "step 1: error[invalid_schema]: wire field s[0].a[1]: 'x' is assigned twice "
        "(hint: assign it once)",
        "step 1: error[invalid_schema]: wire field s[0].a[2]: the value of 'y' after ':=' is "
        "not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1)) "
        '(hint: write "y=TEXT" for a string, or valid JSON after ":=")',
        "step 1: error[invalid_schema]: wire field s[0].a[3]: a number is not an assignment "
        '(hint: write "NAME=TEXT" for a string, "NAME:=JSON" for any other value)',
        "plan: error[invalid_schema]: wire field s[1].i: is missing "
        "(hint: every step has a positive integer id)",
        "plan: error[invalid_schema]: wire field s[1].a: must be a list of assignments, not "
        'a string (hint: write ["NAME=TEXT", "NAME:=JSON"], [] for none)',
        'step 3: error[invalid_schema]: wire field s[2].c[0].a: holds "kind"; the kind goes '
        'in "k" (hint: remove it)',
        "step 3: error[invalid_schema]: wire field s[2].c[0].k: is missing "
        "(hint: name the check kind)",
        "step 3: error[invalid_schema]: wire field s[2].c[1]: a check must be an object, not "
        "a string",
        "plan: error[invalid_schema]: wire field s[3]: a step must be an object, not a number",
        "plan: error[invalid_schema]: wire field o: is not JSON text (Expecting value: line 1 "
        "column 1 (char 0)) (hint: write the value as JSON inside the string: "
        '"\\"<step_1_result>\\"" for a string, "{\\"total\\":\\"<step_2_result.vNF>\\"}" '
        "for an object)",
    ]


def test_params_problems() -> None:
    assert errors_of(
        {
            "s": [],
            "p": [{"n": "a", "t": "str"}, {"n": "a", "t": "string"}, {"t": "string"}, [], 1],
        }
    ) == [
        "plan: error[invalid_schema]: wire field p[0].t: 'str' is not a param type "
        "(hint: string, integer, number, boolean, object, array, any)",
        "plan: error[invalid_schema]: wire field p[1].n: param 'a' is declared twice",
        "plan: error[invalid_schema]: wire field p[2].n: must be the param's name, a "
        "non-empty string",
        "plan: error[invalid_schema]: wire field p[3]: must be an object, not an array",
        "plan: error[invalid_schema]: wire field p[4]: must be an object, not a number",
    ]


def test_shapes_outside_the_wire_layer_are_the_plan_models() -> None:
    assert errors_of({"s": [{"i": 0, "t": "a", "a": [], "d": []}]}) == [
        "plan: error[invalid_schema]: steps[0].id: Input should be greater than 0 "
        "(hint: see `plandag schema plan` for the expected shape)"
    ]


def test_a_top_level_that_is_not_an_object() -> None:
    assert errors_of("[1]") == [
        "plan: error[invalid_schema]: wire field (top): must be an object, not an array"
    ]
    assert errors_of({"g": "x"}) == [
        "plan: error[invalid_schema]: wire field s: is missing "
        '(hint: every plan has "s", the list of its steps)'
    ]


@settings(max_examples=150, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(
                st.sampled_from(["g", "p", "s", "o", "i", "t", "a", "d", "c", "n", "k"]),
                inner,
                max_size=5,
            )
        ),
        max_leaves=20,
    )
)
def test_any_json_gives_a_plan_or_a_plan_error(data: Any) -> None:
    with contextlib.suppress(PlanError):
        from_wire(json.dumps(data))


# -- the schema ------------------------------------------------------------------------------


@pytest.mark.parametrize("all_required", [False, True])
def test_the_schema_is_inside_the_anthropic_subset(all_required: bool) -> None:
    schema = wire_json_schema(tools=["add"], checks=["regex"], all_required=all_required)
    # the SDK's own transformation to the supported subset leaves it unchanged
    assert transform_schema(schema) == schema


def test_the_schema_written_out() -> None:
    assignments = {
        "type": "array",
        "items": {"type": "string"},
        "description": "NAME=TEXT for a string, NAME:=JSON for any other value",
    }
    assert wire_json_schema(tools=["add", "multiply"], checks=["regex"]) == {
        "type": "object",
        "properties": {
            "g": {"type": "string"},
            "p": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "n": {"type": "string"},
                        "t": {
                            "enum": [
                                "string",
                                "integer",
                                "number",
                                "boolean",
                                "object",
                                "array",
                                "any",
                            ]
                        },
                        "h": {"type": "string"},
                        "v": {"type": "string", "description": "JSON text of the default"},
                        "r": {"type": "boolean"},
                    },
                    "required": ["n", "t"],
                    "additionalProperties": False,
                },
            },
            "s": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "i": {"type": "integer", "description": "step id, positive, unique"},
                        "t": {"enum": ["add", "multiply"]},
                        "a": assignments,
                        "d": {"type": "array", "items": {"type": "integer"}},
                        "c": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {"k": {"enum": ["regex"]}, "a": assignments},
                                "required": ["k"],
                                "additionalProperties": False,
                            },
                        },
                        "n": {"type": "string"},
                    },
                    "required": ["i", "t", "a", "d"],
                    "additionalProperties": False,
                },
            },
            "o": {"type": "string", "description": "JSON text of the output"},
        },
        "required": ["g", "s"],
        "additionalProperties": False,
    }


def test_all_required_makes_optional_fields_nullable() -> None:
    schema = wire_json_schema(all_required=True)
    assert schema["required"] == ["g", "p", "s", "o"]
    assert schema["properties"]["o"] == {
        "anyOf": [{"type": "string", "description": "JSON text of the output"}, {"type": "null"}]
    }
    step = schema["properties"]["s"]["items"]
    assert step["required"] == ["i", "t", "a", "d", "c", "n"]
    assert step["properties"]["t"] == {"type": "string"}
    plan = from_wire(
        {
            "g": "x",
            "p": None,
            "s": [{"i": 1, "t": "a", "a": [], "d": [], "c": None, "n": None}],
            "o": None,
        }
    )
    assert plan == Plan.model_validate({"goal": "x", "steps": [{"id": 1, "tool": "a"}]})


def test_wire_to_document_gives_what_compile_plan_takes() -> None:
    assert wire_to_document('{"g":"x","s":[{"i":1,"t":"a","a":["k=v"],"d":[]}],"o":"1"}') == {
        "version": 1,
        "goal": "x",
        "steps": [{"id": 1, "tool": "a", "args": {"k": "v"}, "depends_on": []}],
        "output": 1,
    }
