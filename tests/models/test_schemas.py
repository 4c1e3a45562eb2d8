"""Structured-output schemas: the checker of each provider's rules on known good and bad
schemas, the preparation of every kind of schema plandag sends, and the way back to the
caller's shape."""

from __future__ import annotations

import json
from typing import Any

import pytest

from plandag.extract.nfe.record import nfe_record_json_schema
from plandag.jobs.contracts.fields import FIELD_TYPES, FieldSpec
from plandag.jobs.contracts.plan import group_schema
from plandag.library.routing import routing_schema
from plandag.models.schemas import (
    OPENAI_MAX_DEPTH,
    PreparedSchema,
    prepare_schema,
    strict_problems,
)
from plandag.planner.joiner import JOIN_SCHEMA
from plandag.planner.schema import plan_json_schema
from plandag.tools.registry import default_registry

PROVIDERS = ("openai", "anthropic")

# OpenAI's own examples of strict schemas ("Structured Outputs": a math tutor's steps, an
# optional value as a union with null, a recursive UI tree through $defs)
OPENAI_GOOD: list[dict[str, Any]] = [
    {
        "type": "object",
        "properties": {
            "steps": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "explanation": {"type": "string"},
                        "output": {"type": "string"},
                    },
                    "required": ["explanation", "output"],
                    "additionalProperties": False,
                },
            },
            "final_answer": {"type": "string"},
        },
        "required": ["steps", "final_answer"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {
            "location": {"type": "string", "description": "The city"},
            "unit": {"type": ["string", "null"], "enum": ["F", "C", None]},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "email": {"type": "string", "format": "email", "pattern": "^.+@.+$"},
        },
        "required": ["location", "unit", "age", "email"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {"root": {"$ref": "#/$defs/node"}},
        "required": ["root"],
        "additionalProperties": False,
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "label": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
                "required": ["label", "children"],
                "additionalProperties": False,
            }
        },
    },
]

OPENAI_BAD: list[tuple[dict[str, Any], str]] = [
    ({"type": "array", "items": {"type": "string"}}, "root must be an object"),
    (
        {"anyOf": [{"type": "object", "properties": {}, "additionalProperties": False}]},
        "root must be an object",
    ),
    (
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
        "additionalProperties must be false",
    ),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
            "required": ["a"],
            "additionalProperties": False,
        },
        "properties not required: b",
    ),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "string", "minLength": 2}},
            "required": ["a"],
            "additionalProperties": False,
        },
        "'minLength' is not supported",
    ),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "string", "default": "x"}},
            "required": ["a"],
            "additionalProperties": False,
        },
        "'default' is not supported",
    ),
    (
        {
            "type": "object",
            "properties": {"a": {"description": "anything"}},
            "required": ["a"],
            "additionalProperties": False,
        },
        "no type",
    ),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "object"}},
            "required": ["a"],
            "additionalProperties": False,
        },
        "/properties/a: additionalProperties must be false",
    ),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "array"}},
            "required": ["a"],
            "additionalProperties": False,
        },
        "an array needs an items schema",
    ),
    (
        {
            "type": "object",
            "properties": {"a": {"allOf": [{"type": "string"}]}},
            "required": ["a"],
            "additionalProperties": False,
        },
        "no type",
    ),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "string", "format": "uri"}},
            "required": ["a"],
            "additionalProperties": False,
        },
        "format 'uri' is not supported",
    ),
]

ANTHROPIC_BAD: list[tuple[dict[str, Any], str]] = [
    (
        {
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 1}},
            "additionalProperties": False,
        },
        "'minimum' is not supported",
    ),
    (
        {
            "type": "object",
            "properties": {"n": {"type": ["string", "null"]}},
            "additionalProperties": False,
        },
        "a list of types",
    ),
    (
        {
            "type": "object",
            "properties": {"tags": {"type": "array", "items": {"type": "string"}, "minItems": 2}},
            "additionalProperties": False,
        },
        "minItems above 1",
    ),
    (OPENAI_GOOD[2], "refers to itself"),
    ({"type": "object", "properties": {}}, "additionalProperties must be false"),
]


def nested(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {
        "type": "object",
        "properties": {"leaf": {"type": "string"}},
        "required": ["leaf"],
        "additionalProperties": False,
    }
    for _ in range(depth - 1):
        node = {
            "type": "object",
            "properties": {"child": node},
            "required": ["child"],
            "additionalProperties": False,
        }
    return node


@pytest.mark.parametrize("schema", OPENAI_GOOD)
def test_openai_examples_pass_the_strict_rules(schema: dict[str, Any]) -> None:
    assert strict_problems(schema, "openai") == []


@pytest.mark.parametrize(("schema", "problem"), OPENAI_BAD)
def test_what_strict_mode_refuses_is_found(schema: dict[str, Any], problem: str) -> None:
    problems = strict_problems(schema, "openai")
    assert any(problem in line for line in problems), problems


@pytest.mark.parametrize(("schema", "problem"), ANTHROPIC_BAD)
def test_what_anthropic_refuses_is_found(schema: dict[str, Any], problem: str) -> None:
    problems = strict_problems(schema, "anthropic")
    assert any(problem in line for line in problems), problems


def test_size_limits_of_strict_mode() -> None:
    assert strict_problems(nested(OPENAI_MAX_DEPTH), "openai") == []
    deep = strict_problems(nested(OPENAI_MAX_DEPTH + 1), "openai")
    assert any("nested more than 10 levels" in line for line in deep)
    many = {
        "type": "object",
        "properties": {"pick": {"type": "string", "enum": [f"v{i}" for i in range(1001)]}},
        "required": ["pick"],
        "additionalProperties": False,
    }
    assert any("1001 enum values" in line for line in strict_problems(many, "openai"))


def contracts_schema() -> dict[str, Any]:
    specs = [
        FieldSpec(name=f"f_{kind}", type=kind, description="d", group="g") for kind in FIELD_TYPES
    ]
    return group_schema(specs)


LLM_STEP_SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"total": {"type": "number"}}, "required": ["total"]},
    {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": 5},
    {"type": "string", "enum": ["yes", "no"]},
    {"type": "object"},
    {},
    {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date"},
            "score": {"type": "integer", "minimum": 0, "maximum": 10, "default": 5},
            "meta": {"type": "object", "additionalProperties": {"type": "string"}},
            "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
            "kind": {"oneOf": [{"const": "a"}, {"const": "b"}]},
            "note": {"type": ["string", "null"], "maxLength": 100},
        },
        "required": ["when"],
    },
    {
        "definitions": {"item": {"type": "object", "properties": {"n": {"type": "integer"}}}},
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"$ref": "#/definitions/item"}}},
    },
]

SENT_SCHEMAS = {
    "contracts": contracts_schema(),
    "plan": plan_json_schema(default_registry()),
    "join": JOIN_SCHEMA,
    "routing": routing_schema([]),
    "nfe_record": nfe_record_json_schema(),
    **{f"llm_{index}": schema for index, schema in enumerate(LLM_STEP_SCHEMAS)},
    "recursive": OPENAI_GOOD[2],
}


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("name", sorted(SENT_SCHEMAS))
def test_every_schema_plandag_sends_is_prepared_to_the_rules(provider: str, name: str) -> None:
    prepared = prepare_schema(SENT_SCHEMAS[name], provider)  # type: ignore[arg-type]
    assert strict_problems(prepared.schema, provider) == []  # type: ignore[arg-type]
    assert prepared.original is SENT_SCHEMAS[name]


def test_the_contracts_schema_needs_the_preparation() -> None:
    """The contracts job's schema leaves properties optional and objects open: strict mode
    refuses it as written."""
    problems = strict_problems(contracts_schema(), "openai")
    assert any("additionalProperties must be false" in line for line in problems)
    assert any("properties not required" in line for line in problems)


def roundtrip(prepared: PreparedSchema, sent_answer: Any) -> tuple[Any, list[str]]:
    restored = prepared.restore(sent_answer)
    return restored, prepared.violations(restored)


def test_optional_properties_come_back_absent_when_the_model_writes_null() -> None:
    schema = {
        "type": "object",
        "properties": {
            "months": {"type": "integer"},
            "days": {"type": "integer"},
            "role": {"type": ["string", "null"]},
        },
    }
    prepared = prepare_schema(schema, "openai")
    sent = prepared.schema
    assert sent["required"] == ["months", "days", "role"]
    assert sent["properties"]["days"] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    restored, errors = roundtrip(prepared, {"months": 12, "days": None, "role": None})
    assert (restored, errors) == ({"months": 12, "role": None}, [])
    assert prepared.restore_text('{"months":12,"days":null,"role":null}') == (
        '{"months":12,"role":null}'
    )
    # Anthropic needs no reshaping for optional properties
    assert prepare_schema(schema, "anthropic").reshaped is False


def test_free_form_values_travel_as_json_text() -> None:
    schema = {
        "type": "object",
        "properties": {"meta": {"type": "object"}, "any": {}},
        "required": ["meta", "any"],
    }
    for provider in PROVIDERS:
        prepared = prepare_schema(schema, provider)  # type: ignore[arg-type]
        assert prepared.as_text == ("/properties/meta", "/properties/any")
        assert prepared.schema["properties"]["meta"]["type"] == "string"
        answer = {"meta": json.dumps({"a": [1, 2]}), "any": "3.5"}
        assert roundtrip(prepared, answer) == ({"meta": {"a": [1, 2]}, "any": 3.5}, [])


def test_a_root_that_is_not_an_object_is_wrapped_for_openai() -> None:
    prepared = prepare_schema({"type": "array", "items": {"type": "integer"}}, "openai")
    assert prepared.schema["required"] == ["value"]
    assert roundtrip(prepared, {"value": [1, 2]}) == ([1, 2], [])
    assert prepare_schema({"type": "string"}, "anthropic").schema == {"type": "string"}


def test_refused_keywords_move_into_the_description_and_are_checked_by_plandag() -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 1, "description": "count"}},
        "required": ["n"],
        "additionalProperties": False,
    }
    anthropic = prepare_schema(schema, "anthropic")
    assert anthropic.moved == ("/properties/n: minimum",)
    assert anthropic.schema["properties"]["n"] == {
        "type": "integer",
        "description": "count\n\n{minimum: 1}",
    }
    assert anthropic.violations({"n": 0}) == ["$.n: 0 is less than the minimum of 1"]
    openai = prepare_schema(schema, "openai")
    assert openai.moved == ()  # strict mode keeps numeric bounds
    assert openai.schema["properties"]["n"]["minimum"] == 1


def test_recursion_where_refused_goes_as_json_text() -> None:
    schema = OPENAI_GOOD[2]
    openai = prepare_schema(schema, "openai")
    assert openai.as_text == ()
    anthropic = prepare_schema(schema, "anthropic")
    assert anthropic.as_text == ("/$defs/node/properties/children/items",)
    tree = {"root": {"label": "a", "children": [{"label": "b", "children": []}]}}
    sent = {"root": {"label": "a", "children": [json.dumps({"label": "b", "children": []})]}}
    assert roundtrip(anthropic, sent) == (tree, [])
    assert roundtrip(openai, tree) == (tree, [])


def test_unions_restore_through_the_branch_the_answer_matches() -> None:
    schema = {
        "type": "object",
        "properties": {
            "shape": {
                "anyOf": [
                    {"type": "object", "properties": {"r": {"type": "number"}}, "required": []},
                    {
                        "type": "object",
                        "properties": {"w": {"type": "number"}, "h": {"type": "number"}},
                    },
                ]
            }
        },
        "required": ["shape"],
    }
    prepared = prepare_schema(schema, "openai")
    assert strict_problems(prepared.schema, "openai") == []
    assert roundtrip(prepared, {"shape": {"w": 2, "h": None}}) == ({"shape": {"w": 2}}, [])
    assert roundtrip(prepared, {"shape": {"r": None}}) == ({"shape": {}}, [])


def test_violations_of_the_callers_schema_are_reported() -> None:
    prepared = prepare_schema(
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}, "openai"
    )
    assert prepared.violations({}) == ["$: 'a' is a required property"]
    assert prepared.restore_text("not json") == "not json"


def test_unknown_provider_is_refused() -> None:
    with pytest.raises(ValueError, match="no schema rules for provider 'gemini'"):
        prepare_schema({"type": "object"}, "gemini")  # type: ignore[arg-type]
