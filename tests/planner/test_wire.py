"""The wire format: lossless both ways, clear diagnostics for malformed data, and a schema
inside the Anthropic API's structured-output subset."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal, NotRequired

import jsonschema
import pytest
from anthropic.lib._parse._transform import transform_schema
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from plandag.checks.builtins import BUILTIN_CHECKS
from plandag.compiler import load_plan
from plandag.dag.plan import Plan
from plandag.dag.references import REFERENCE_PATTERN as REFERENCE_PATTERN_GRAMMAR
from plandag.errors import PlanError
from plandag.models.schemas import prepare_schema
from plandag.planner.schema import REFERENCE_PATTERN, plan_json_schema
from plandag.planner.wire import dumps_wire, from_wire, to_wire, wire_to_document
from plandag.tools import tool
from plandag.tools.registry import Registry, default_registry

ROOT = Path(__file__).resolve().parents[2]
STORED_PLANS = [
    ROOT / "plandag/extract/nfe/plan.json",
    ROOT / "examples/plans/invoice_total.json",
    ROOT / "examples/plans/words.json",
]


REFERENCE = {"$ref": "#/$defs/ref"}
JSON_TEXT = {"$ref": "#/$defs/json"}
NULL = {"type": "null"}
BUILTIN_CHECK_NAMES = [definition.name for definition in BUILTIN_CHECKS]
HINT = (
    '(hint: write the value as JSON text: {"json": "[1, 2]"}, {"json": "{\\"a\\": '
    '\\"<step_1_result>\\"}"}, or give one reference as a plain string)'
)


class Window(TypedDict):
    start: int
    note: NotRequired[str | None]


class Span(TypedDict):
    start: int
    end: NotRequired[int]


@tool
def span(window: Span) -> int:
    "A span's length."
    return window.get("end", window["start"]) - window["start"]


class Tree(BaseModel):
    value: int
    children: list[Tree] = []


@tool
def add(a: float, b: float) -> float:
    "Add."
    return a + b


@tool
def multiply(a: float, b: float) -> float:
    "Multiply."
    return a * b


@tool
def pick(data: Any, key: str) -> Any:
    "Pick a key."
    return data[key]


@tool
def fetch(
    url: str,
    retries: Annotated[int, Field(ge=0, le=5)] = 1,
    headers: dict[str, str] | None = None,
    mode: Literal["get", "head"] = "get",
    tags: list[str] | None = None,
    window: Window | None = None,
    tree: Tree | None = None,
) -> str:
    "Fetch."
    return url


def registry_of(*tools: Any) -> Registry:
    return Registry(list(tools), BUILTIN_CHECKS)


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
            {"n": "n", "t": "integer", "v": 3},
            {"n": "flag", "t": "boolean", "v": {"json": "null"}, "r": False},
        ],
        "s": [
            {"i": 1, "t": "read_file", "a": {"path": "<param.input>"}, "d": []},
            {
                "i": 2,
                "t": "json_select",
                "a": {"data": "<step_1_result>", "expr": "a=b", "limit": 2, "x": None},
                "d": [1],
                "c": [{"k": "not_empty"}, {"k": "regex", "a": {"pattern": "[0-9]+"}}],
                "n": "pick",
            },
        ],
        "o": {"json": '{"a":"<step_2_result>","n":[1,2.5,true]}'},
    }
    assert from_wire(to_wire(plan)) == plan
    assert from_wire(dumps_wire(plan).encode()) == plan


def test_strings_that_look_like_json_stay_strings() -> None:
    plan = Plan.model_validate(
        {"steps": [{"id": 1, "tool": "t", "args": {"a": "1", "b": "[1]", "c": "", "d": "x:=y"}}]}
    )
    wire = to_wire(plan)
    assert wire["s"][0]["a"] == {"a": "1", "b": "[1]", "c": "", "d": "x:=y"}
    assert from_wire(wire).steps[0].args == {"a": "1", "b": "[1]", "c": "", "d": "x:=y"}


def test_with_the_registry_untyped_values_travel_as_json_text() -> None:
    registry = default_registry(resolve_installed=False)
    plan = Plan.model_validate(
        {
            "steps": [
                {
                    "id": 1,
                    "tool": "write_json",
                    "args": {"path": "out.json", "data": {"a": [1, "<step_2_result>"]}},
                },
                {"id": 2, "tool": "json_select", "args": {"data": "<param.x>", "expr": "a"}},
                {
                    "id": 3,
                    "tool": "http_get",
                    "args": {"url": "https://a.example/", "headers": {"A": "b"}, "timeout": 2},
                    "check": [{"kind": "equals", "value": {"ok": True}, "path": "status"}],
                },
            ],
            "output": "<step_1_result>",
        }
    )
    wire = to_wire(plan, registry)
    assert [step["a"] for step in wire["s"]] == [
        {"path": "out.json", "data": {"json": '{"a":[1,"<step_2_result>"]}'}},
        {"data": "<param.x>", "expr": "a"},
        {"url": "https://a.example/", "headers": {"json": '{"A":"b"}'}, "timeout": 2},
    ]
    assert wire["s"][2]["c"] == [
        {"k": "equals", "a": {"value": {"json": '{"ok":true}'}, "path": "status"}}
    ]
    assert wire["o"] == "<step_1_result>"
    assert from_wire(wire, registry) == plan
    assert from_wire(wire) == plan  # a wrapper reads the same without the registry
    jsonschema.validate(wire, plan_json_schema(registry))


def test_nan_is_refused() -> None:
    plan = Plan.model_validate({"steps": [{"id": 1, "tool": "t", "args": {"x": float("nan")}}]})
    with pytest.raises(ValueError, match="JSON compliant"):
        to_wire(plan)


def test_the_reader_takes_plain_objects_as_they_are() -> None:
    plan = from_wire(
        {
            "g": "g",
            "p": [{"n": "k", "t": "integer", "v": 5}, {"n": "m", "t": "object", "v": {"a": 1}}],
            "s": [{"i": 1, "t": "t", "a": {"x": [1, 2]}, "d": []}],
            "o": {"x": "<step_1_result>"},
        }
    )
    assert plan.steps[0].args == {"x": [1, 2]}
    assert plan.output == {"x": "<step_1_result>"}
    assert plan.params["k"].default == 5
    assert plan.params["m"].default == {"a": 1}


def test_json_text_is_read_at_any_depth_and_a_string_output_is_the_string() -> None:
    plan = from_wire(
        {
            "p": [{"n": "k", "t": "array", "v": {"json": "[1, 2]"}}],
            "s": [{"i": 1, "t": "t", "a": {"x": [{"json": "{}"}, {"y": {"json": "null"}}]}}],
            "o": "plain text",
        }
    )
    assert plan.steps[0].args == {"x": [{}, {"y": None}]}
    assert plan.params["k"].default == [1, 2]
    assert plan.output == "plain text"


def test_with_the_registry_a_null_leaves_out_an_argument_that_takes_none() -> None:
    registry = default_registry(resolve_installed=False)
    wire = {
        "g": "x",
        "s": [
            {
                "i": 1,
                "t": "write_json",
                "a": {"path": "a.json", "data": "<param.d>", "indent": None},
                "d": [],
                "c": [{"k": "file_exists", "a": {"path": "a.json", "non_empty": None}}],
            },
            {
                "i": 2,
                "t": "read_file",
                "a": {"path": "b", "encoding": None, "max_bytes": None},
                "d": [],
                "c": None,
                "n": None,
            },
        ],
        "p": None,
        "o": None,
    }
    steps = wire_to_document(wire, registry)["steps"]
    # indent takes None (it is "int | None"): kept; the others do not: left out
    assert steps[0]["args"] == {"path": "a.json", "data": "<param.d>", "indent": None}
    assert steps[0]["check"] == [{"kind": "file_exists", "path": "a.json"}]
    assert steps[1]["args"] == {"path": "b"}
    # at any depth of a typed object too
    nested = Registry([fetch], BUILTIN_CHECKS)
    [step] = wire_to_document(
        {
            "s": [
                {
                    "i": 1,
                    "t": "fetch",
                    "a": {"url": "u", "window": {"start": 1, "note": None}, "retries": None},
                }
            ]
        },
        nested,
    )["steps"]
    assert step["args"] == {"url": "u", "window": {"start": 1, "note": None}}
    [step] = wire_to_document(
        {"s": [{"i": 1, "t": "span", "a": {"window": {"start": 1, "end": None}}}]},
        Registry([span], BUILTIN_CHECKS),
    )["steps"]
    assert step["args"] == {"window": {"start": 1}}
    # without the registry nothing is dropped (the compiler then says why)
    assert wire_to_document(wire)["steps"][1]["args"] == {
        "path": "b",
        "encoding": None,
        "max_bytes": None,
    }


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
                {"i": 1, "t": "a", "a": ["x=1"], "d": [], "z": 1},
                {"t": "b", "a": "x=1"},
                {"i": 3, "t": "c", "a": {}, "c": [{"a": {"kind": "x"}}, "not_empty"]},
                7,
                {"i": 5, "t": "e", "a": {"x": {"json": "{nope"}, "y": [{"json": ""}]}},
            ],
            "o": {"json": "<step_1_result>"},
        }
    ) == [
        "plan: error[invalid_schema]: wire field (top): unknown field(s) 'steps' "
        "(hint: the fields here are g, p, s, o)",
        "plan: error[invalid_schema]: wire field g: must be a string, not a number",
        "step 1: error[invalid_schema]: wire field s[0]: unknown field(s) 'z' "
        "(hint: the fields here are i, t, a, d, c, n)",
        "step 1: error[invalid_schema]: wire field s[0].a: must be an object of arguments, not "
        'an array (hint: write {"NAME": value, ...}, {} for none)',
        "plan: error[invalid_schema]: wire field s[1].i: is missing "
        "(hint: every step has a positive integer id)",
        "plan: error[invalid_schema]: wire field s[1].a: must be an object of arguments, not "
        'a string (hint: write {"NAME": value, ...}, {} for none)',
        'step 3: error[invalid_schema]: wire field s[2].c[0].a: holds "kind"; the kind goes '
        'in "k" (hint: remove it)',
        "step 3: error[invalid_schema]: wire field s[2].c[0].k: is missing "
        "(hint: name the check kind)",
        "step 3: error[invalid_schema]: wire field s[2].c[1]: a check must be an object, not "
        "a string",
        "plan: error[invalid_schema]: wire field s[3]: a step must be an object, not a number",
        f"step 5: error[invalid_json_text]: wire field s[4].a.x.json: the text is not JSON "
        f"(Expecting property name enclosed in double quotes: line 1 column 2 (char 1)) {HINT}",
        f"step 5: error[invalid_json_text]: wire field s[4].a.y[0].json: the text is not JSON "
        f"(Expecting value: line 1 column 1 (char 0)) {HINT}",
        f"plan: error[invalid_json_text]: wire field o.json: the text is not JSON "
        f"(Expecting value: line 1 column 1 (char 0)) {HINT}",
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
    assert errors_of({"s": [{"i": 0, "t": "a", "a": {}, "d": []}]}) == [
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


def test_the_schema_is_inside_the_anthropic_subset_but_for_the_reference_pattern() -> None:
    schema = prepare_schema(
        plan_json_schema(default_registry(resolve_installed=False)), "anthropic"
    ).schema
    transformed = transform_schema(schema)
    # the SDK's own (conservative) transformation moves ``pattern`` into the description;
    # everything else it leaves unchanged
    assert transformed["$defs"]["ref"] == {
        "type": "string",
        "description": "{pattern: " + REFERENCE_PATTERN + "}",
    }
    transformed["$defs"]["ref"] = schema["$defs"]["ref"]
    param_name = transformed["properties"]["p"]["items"]["properties"]["n"]
    assert param_name == {"type": "string", "description": "{pattern: ^[^\\n]+$}"}
    transformed["properties"]["p"]["items"]["properties"]["n"] = schema["properties"]["p"]["items"][
        "properties"
    ]["n"]
    assert transformed == schema


def test_a_step_is_one_variant_per_tool_with_its_own_arguments() -> None:
    schema = plan_json_schema(registry_of(add, multiply, pick, fetch))
    variants = schema["properties"]["s"]["items"]["anyOf"]
    assert [variant["properties"]["t"] for variant in variants] == [
        {"const": "add"},
        {"const": "fetch"},
        {"const": "multiply"},
        {"const": "pick"},
    ]
    number_or_reference = {"anyOf": [{"type": "number"}, REFERENCE]}
    assert variants[0] == {
        "type": "object",
        "properties": {
            "i": {"type": "integer", "minimum": 1},
            "t": {"const": "add"},
            "a": {
                "type": "object",
                "properties": {"a": number_or_reference, "b": number_or_reference},
                "required": ["a", "b"],
                "additionalProperties": False,
            },
            "d": {"$ref": "#/$defs/ids"},
            "c": {"$ref": "#/$defs/checks"},
            "n": {"type": "string"},
        },
        "required": ["i", "t", "a", "d"],
        "additionalProperties": False,
    }
    assert variants[1]["properties"]["a"]["properties"] == {
        "url": {"type": "string"},
        "retries": {"anyOf": [{"type": "integer", "maximum": 5, "minimum": 0}, REFERENCE]},
        # optional with a null default: leaving it out gives null, so no null branch
        "headers": {"anyOf": [REFERENCE, JSON_TEXT]},
        "mode": {"anyOf": [{"enum": ["get", "head"]}, REFERENCE]},
        "tags": {"anyOf": [{"type": "array", "items": {"type": "string"}}, REFERENCE]},
        "window": {
            "anyOf": [
                {
                    "type": "object",
                    "properties": {
                        "start": {"anyOf": [{"type": "integer"}, REFERENCE]},
                        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                    },
                    "required": ["start"],
                    "additionalProperties": False,
                },
                REFERENCE,
            ]
        },
        "tree": {"anyOf": [REFERENCE, JSON_TEXT]},
    }
    assert variants[1]["properties"]["a"]["required"] == ["url"]
    assert variants[3]["properties"]["a"]["properties"]["data"] == {"anyOf": [REFERENCE, JSON_TEXT]}
    # Anthropic cannot enforce numeric constraints: they go in descriptions, the compiler
    # checks them
    loose = prepare_schema(plan_json_schema(registry_of(fetch)), "anthropic").schema
    step = loose["properties"]["s"]["items"]
    assert step["properties"]["i"] == {"type": "integer", "description": "{minimum: 1}"}
    assert step["properties"]["a"]["properties"]["retries"] == {
        "anyOf": [{"type": "integer", "description": "{maximum: 5, minimum: 0}"}, REFERENCE]
    }


def test_checks_params_and_output() -> None:
    schema = plan_json_schema(registry_of(add))
    checks = schema["$defs"]["check"]["anyOf"]
    assert [check["properties"]["k"] for check in checks] == [
        {"const": kind} for kind in sorted(BUILTIN_CHECK_NAMES)
    ]
    regex = next(check for check in checks if check["properties"]["k"] == {"const": "regex"})
    assert regex == {
        "type": "object",
        "properties": {
            "k": {"const": "regex"},
            "a": {
                "type": "object",
                "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}},
                "required": ["pattern"],
                "additionalProperties": False,
            },
        },
        "required": ["k", "a"],
        "additionalProperties": False,
    }
    not_empty = next(check for check in checks if check["properties"]["k"]["const"] == "not_empty")
    assert not_empty["required"] == ["k"]
    assert schema["properties"]["p"]["items"]["properties"]["v"] == {
        "anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}, JSON_TEXT]
    }
    assert schema["properties"]["o"] == {"anyOf": [REFERENCE, JSON_TEXT]}
    assert schema["$defs"]["json"] == {
        "type": "object",
        "properties": {"json": {"type": "string"}},
        "required": ["json"],
        "additionalProperties": False,
    }


def test_an_argument_naming_tools_is_an_array_of_the_registered_names() -> None:
    registry = default_registry(resolve_installed=False)
    schema = plan_json_schema(registry, tools=["agent"])
    [agent] = [schema["properties"]["s"]["items"]]
    assert agent["properties"]["a"]["properties"]["tools"] == {
        "anyOf": [{"type": "array", "items": {"enum": sorted(registry.tools)}}, REFERENCE]
    }


def test_the_reference_pattern_is_the_grammar() -> None:
    for text in ("<step_1_result>", "<step_12_result.a.0.b>", "<param.x>", "<param.x_1.y>"):
        assert re.match(REFERENCE_PATTERN, text), text
    for text in ("<step_0_result>", "<step_1_reslt>", "<param.1x>", "x <step_1_result>", "<>"):
        assert not re.match(REFERENCE_PATTERN, text), text
        assert not (REFERENCE_PATTERN_GRAMMAR.fullmatch(text) and text.startswith("<")), text


def test_strict_mode_gets_every_property_required_and_the_optional_ones_nullable() -> None:
    schema = prepare_schema(plan_json_schema(registry_of(fetch)), "openai").schema
    assert schema["required"] == ["g", "p", "s", "o"]
    assert schema["properties"]["o"] == {"anyOf": [REFERENCE, JSON_TEXT, {"type": "null"}]}
    step = schema["properties"]["s"]["items"]
    assert step["required"] == ["i", "t", "a", "d", "c", "n"]
    arguments = step["properties"]["a"]
    assert arguments["required"] == ["url", "retries", "headers", "mode", "tags", "window", "tree"]
    assert arguments["properties"]["url"] == {"type": "string"}
    assert arguments["properties"]["retries"] == {
        "anyOf": [{"type": "integer", "maximum": 5, "minimum": 0}, REFERENCE, NULL]
    }
    assert arguments["properties"]["headers"] == {"anyOf": [REFERENCE, JSON_TEXT, NULL]}
    plan = from_wire(
        {
            "g": "x",
            "p": None,
            "s": [{"i": 1, "t": "a", "a": {}, "d": [], "c": None, "n": None}],
            "o": None,
        }
    )
    assert plan == Plan.model_validate({"goal": "x", "steps": [{"id": 1, "tool": "a"}]})


def test_wire_to_document_gives_what_compile_plan_takes() -> None:
    assert wire_to_document(
        '{"g":"x","s":[{"i":1,"t":"a","a":{"k":"v"},"d":[]}],"o":{"json":"1"}}'
    ) == {
        "version": 1,
        "goal": "x",
        "steps": [{"id": 1, "tool": "a", "args": {"k": "v"}, "depends_on": []}],
        "output": 1,
    }
