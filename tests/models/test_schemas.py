"""Structured-output schemas: the checker of each provider's rules on known good and bad
schemas, the preparation of every kind of schema plandag sends, and the way back to the
caller's shape."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

import pytest
from pydantic import Field

from plandag.bench.workloads import WORKLOADS, World
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
from plandag.planner.schema import REFERENCE_PATTERN, plan_json_schema
from plandag.testing import MessagesServer
from plandag.tools import tool
from plandag.tools.registry import Registry, default_registry

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


# -- the plan's schema: one conversion for each provider ----------------------------------------

BOUNDS = frozenset(
    {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
    | {"minItems", "maxItems"}
)


@tool
def pick(
    items: Annotated[list[str], Field(min_length=2, max_length=9)],
    count: Annotated[int, Field(ge=1, le=20)] = 1,
    ratio: Annotated[float, Field(gt=0, lt=1, multiple_of=0.05)] = 0.5,
) -> list[str]:
    "Pick some items."
    return items[:count]


def bounded_registry() -> Registry:
    """The built-ins plus a tool whose arguments carry every kind of bound."""
    registry = default_registry(resolve_installed=False)
    registry.add_tool(pick)
    return registry


def plan_registries() -> dict[str, Registry]:
    return {
        "built-ins": default_registry(resolve_installed=False),
        "built-ins + NF-e": default_registry(["nfe"], resolve_installed=False),
        "movie8": WORKLOADS["movie8"].make_registry(World()),
        "bounded": bounded_registry(),
    }


def every_property_required(schema: Any) -> Any:
    """OpenAI's strict rule written plainly: every object lists all its properties as
    required, an optional one as a union with ``null``."""
    if isinstance(schema, list):
        return [every_property_required(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {key: every_property_required(value) for key, value in schema.items()}
    properties = result.get("properties")
    if result.get("type") == "object" and isinstance(properties, dict):
        required = set(result.get("required") or ())
        nullable = {}
        for name, value in properties.items():
            if name in required:
                nullable[name] = value
            elif list(value) == ["anyOf"]:
                branches = [item for item in value["anyOf"] if item != {"type": "null"}]
                nullable[name] = {"anyOf": [*branches, {"type": "null"}]}
            else:
                nullable[name] = {"anyOf": [value, {"type": "null"}]}
        result["properties"] = nullable
        result["required"] = list(properties)
    return result


def schema_nodes(schema: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every schema object in ``schema`` with its JSON Pointer (property maps and ``$defs``
    walked, their keys being names)."""
    if not isinstance(schema, dict):
        return []
    found = [(path, schema)]
    for key, value in schema.items():
        if key in ("properties", "$defs") and isinstance(value, dict):
            for name, sub in value.items():
                found += schema_nodes(sub, f"{path}/{key}/{name}")
        elif isinstance(value, dict):
            found += schema_nodes(value, f"{path}/{key}")
        elif isinstance(value, list):
            for index, sub in enumerate(value):
                found += schema_nodes(sub, f"{path}/{key}/{index}")
    return found


def without_keywords(schema: Any, keywords: frozenset[str]) -> Any:
    """``schema`` without ``keywords`` in any schema object (property names kept)."""
    if isinstance(schema, list):
        return [without_keywords(item, keywords) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {}
    for key, value in schema.items():
        if key in ("properties", "$defs") and isinstance(value, dict):
            result[key] = {name: without_keywords(sub, keywords) for name, sub in value.items()}
        elif key not in keywords:
            result[key] = without_keywords(value, keywords)
    return result


@pytest.mark.parametrize("name", sorted(plan_registries()))
def test_openai_gets_every_plan_property_required_with_the_optional_ones_nullable(
    name: str,
) -> None:
    plan = plan_json_schema(plan_registries()[name])
    prepared = prepare_schema(plan, "openai")
    assert prepared.schema == prepare_schema(every_property_required(plan), "openai").schema
    assert prepared.moved == ()  # strict mode states every rule of the plan's schema
    assert strict_problems(prepared.schema, "openai") == []


@pytest.mark.parametrize("name", sorted(plan_registries()))
def test_anthropic_gets_the_plan_schema_with_its_bounds_in_descriptions(name: str) -> None:
    plan = plan_json_schema(plan_registries()[name])
    assert not [path for path, node in schema_nodes(plan) if "description" in node]
    prepared = prepare_schema(plan, "anthropic")
    assert strict_problems(prepared.schema, "anthropic") == []
    # the schema as sent is the plan's without its bounds, plus the descriptions stating them
    assert without_keywords(prepared.schema, frozenset({"description"})) == without_keywords(
        plan, BOUNDS
    )
    moved = {(path, keyword) for path, _, keyword in (m.partition(": ") for m in prepared.moved)}
    bounds = {
        (path or "/", keyword)
        for path, node in schema_nodes(plan)
        for keyword in node
        if keyword in BOUNDS
    }
    assert moved == bounds
    assert ("/properties/s/items/properties/i", "minimum") in bounds or any(
        path.endswith("/properties/i") for path, _ in bounds
    )  # a step id > 0, in every registry
    for path, node in schema_nodes(prepared.schema):
        if "description" in node:
            stated = re.fullmatch(r"\{(.*)\}", node["description"])
            assert stated is not None, path
            assert {item.split(":")[0] for item in stated.group(1).split(", ")} <= BOUNDS


def test_the_plan_bounds_anthropic_cannot_state_are_checked_on_the_answer() -> None:
    prepared = prepare_schema(plan_json_schema(bounded_registry(), tools=["pick"]), "anthropic")
    answer = {"g": "pick", "s": [{"i": 0, "t": "pick", "a": {"items": [], "count": 21}, "d": []}]}
    violations = prepared.violations(answer)
    assert "$.s[0].i: 0 is less than the minimum of 1" in violations
    # an argument also takes a reference: the union says which value broke it
    assert {line.split(":")[0] for line in violations} == {
        "$.s[0].i",
        "$.s[0].a.count",
        "$.s[0].a.items",
    }


ANTHROPIC_REFUSED_PATTERNS = [
    (r"^(?=.*\d)\w+$", "lookaround"),
    (r"^(?!tmp)\w+$", "lookaround"),
    (r"(?<=\$)\d+", "lookaround"),
    (r"(?<!-)\d+", "lookaround"),
    (r"^(a+)-\1$", "backreference"),
    (r"^(?P<w>\w+) (?P=w)$", "backreference"),
    (r"\bword\b", "word boundary"),
    (r"^\B.*$", "word boundary"),
    (r"^a{1,1000}$", "repetition"),
    (r"^\d{250}$", "repetition"),
    (r"^(unclosed$", "not a regular expression"),
]

ANTHROPIC_SIMPLE_PATTERNS = [
    REFERENCE_PATTERN,
    r"^[^\n]+$",
    r"^\d{3}-\d{4}$",
    r"^[a-z]{0,100}(\.[a-z]+)*$",
    r"^[\b]$",  # a backspace in a class, not a word boundary
    r"^\\b\\1$",  # escaped backslashes
    r"^(?:ab|cd)+\s?$",
]


def pattern_schema(pattern: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"s": {"type": "string", "pattern": pattern}},
        "required": ["s"],
        "additionalProperties": False,
    }


@pytest.mark.parametrize(("pattern", "why"), ANTHROPIC_REFUSED_PATTERNS)
def test_a_pattern_anthropic_refuses_is_found_and_moved_into_the_description(
    pattern: str, why: str
) -> None:
    schema = pattern_schema(pattern)
    problems = strict_problems(schema, "anthropic")
    assert any("pattern" in line and why in line for line in problems), problems
    prepared = prepare_schema(schema, "anthropic")
    assert strict_problems(prepared.schema, "anthropic") == []
    assert prepared.moved == ("/properties/s: pattern",)
    sent = prepared.schema["properties"]["s"]
    assert "pattern" not in sent
    assert json.dumps(pattern) in sent["description"]
    # OpenAI's strict mode takes the pattern as it is (when Python reads it)
    if why != "not a regular expression":
        assert prepare_schema(schema, "openai").schema["properties"]["s"]["pattern"] == pattern


@pytest.mark.parametrize("pattern", ANTHROPIC_SIMPLE_PATTERNS)
def test_a_simple_pattern_stays_for_anthropic(pattern: str) -> None:
    schema = pattern_schema(pattern)
    assert strict_problems(schema, "anthropic") == []
    prepared = prepare_schema(schema, "anthropic")
    assert prepared.schema["properties"]["s"] == {"type": "string", "pattern": pattern}
    assert prepared.moved == ()


def test_the_local_server_refuses_a_pattern_anthropic_refuses() -> None:
    import anthropic as sdk

    with MessagesServer() as server:
        client = sdk.Anthropic(api_key="test", base_url=server.url, max_retries=0)
        with pytest.raises(sdk.BadRequestError) as caught:
            client.messages.create(
                model="m",
                max_tokens=10,
                messages=[{"role": "user", "content": "hi"}],
                output_config={
                    "format": {"type": "json_schema", "schema": pattern_schema(r"\bx\b")}
                },
            )
        client.close()
    assert "word boundary" in str(caught.value)
