"""The schema-following stand-in: every structured-output request, in either protocol,
gets a random instance of the schema it carries, whatever the prompt says."""

from __future__ import annotations

import json
import random
import re

import jsonschema
import pytest

from plandag.models import AnthropicClient, LLMRequest, OpenAICompatibleClient
from plandag.models.schemas import prepare_schema, strict_problems
from plandag.planner.schema import REFERENCE_PATTERN, plan_json_schema
from plandag.testing import ChatCompletionsServer, MessagesServer, SchemaFollower
from plandag.testing.schema_model import UnsupportedSchemaError, random_instance
from plandag.tools.registry import default_registry

SCHEMA = {
    "type": "object",
    "properties": {
        "n": {"type": "integer", "minimum": 3, "maximum": 5},
        "x": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "s": {"type": "string", "minLength": 2, "maxLength": 4},
        "k": {"enum": ["a", "b"]},
        "c": {"const": 7},
        "l": {"type": "array", "items": {"$ref": "#/$defs/item"}, "minItems": 1, "maxItems": 2},
        "u": {"anyOf": [{"type": "null"}, {"type": "boolean"}]},
        "m": {"type": "object", "additionalProperties": {"type": "integer"}},
        "r": {"type": "string", "pattern": r"^ab[0-9]{2}(x|yz)\.[^a-z]+$"},
    },
    "required": ["n", "x", "s", "k", "c", "l", "u", "m", "r"],
    "additionalProperties": False,
    "$defs": {"item": {"type": ["string", "integer"]}},
}


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)


def test_random_instances_validate_and_depend_on_the_seed_only() -> None:
    validator = jsonschema.Draft202012Validator(SCHEMA)
    first = [random_instance(SCHEMA, random.Random(5)) for _ in range(3)]
    assert first[0] == first[1] == first[2]
    rng = random.Random(9)
    for _ in range(300):
        validator.validate(random_instance(SCHEMA, rng))


def test_patterns_are_matched() -> None:
    rng = random.Random(2)
    for _ in range(200):
        assert re.match(
            REFERENCE_PATTERN,
            random_instance(
                {
                    "$ref": "#/$defs/r",
                    "$defs": {"r": {"type": "string", "pattern": REFERENCE_PATTERN}},
                },
                rng,
            ),
        )


def test_what_the_generator_does_not_cover_is_refused() -> None:
    with pytest.raises(UnsupportedSchemaError, match="pattern feature"):
        random_instance({"type": "string", "pattern": r"(a)\1"}, random.Random(0))
    with pytest.raises(UnsupportedSchemaError, match="no integer"):
        random_instance({"type": "integer", "minimum": 5, "maximum": 4}, random.Random(0))
    with pytest.raises(UnsupportedSchemaError, match="unresolvable"):
        random_instance({"$ref": "#/$defs/nope"}, random.Random(0))


@pytest.fixture
def plan_schema() -> dict[str, object]:
    return prepare_schema(
        plan_json_schema(default_registry(resolve_installed=False)), "anthropic"
    ).schema


@pytest.mark.anyio
async def test_the_messages_server_answers_with_an_instance_of_the_schema_sent(
    plan_schema: dict[str, object],
) -> None:
    follower = SchemaFollower(seed=3)
    with MessagesServer(default=follower) as server:
        client = AnthropicClient(api_key="test", base_url=server.url)
        try:
            for stream in (False, True):
                request = LLMRequest(
                    model="m",
                    messages=({"role": "user", "content": "ignore the schema and say hi"},),
                    max_tokens=4000,
                    json_schema=plan_schema,
                    schema_name="plandag_plan",
                )
                if stream:
                    async with client.stream(request) as streamed:
                        async for _ in streamed:
                            pass
                        response = await streamed.final_response()
                else:
                    response = await client.complete(request)
                jsonschema.validate(json.loads(response.text), plan_schema)
            plain = await client.complete(
                LLMRequest(model="m", messages=({"role": "user", "content": "hi"},), max_tokens=9)
            )
        finally:
            await client.aclose()
    assert plain.text == "ok"
    assert follower.answered == 2


@pytest.mark.anyio
async def test_the_chat_completions_server_answers_with_an_instance_of_the_schema_sent(
    plan_schema: dict[str, object],
) -> None:
    with ChatCompletionsServer(default=SchemaFollower(seed=4)) as server:
        client = OpenAICompatibleClient(server.url + "/v1", api_key="test")
        try:
            response = await client.complete(
                LLMRequest(
                    model="m",
                    messages=({"role": "user", "content": "anything"},),
                    max_tokens=4000,
                    json_schema=plan_schema,
                    schema_name="plandag_plan",
                )
            )
        finally:
            await client.aclose()
    jsonschema.validate(json.loads(response.text), plan_schema)
    [sent] = server.message_requests
    sent_schema = sent.json["response_format"]["json_schema"]["schema"]
    assert sent_schema == prepare_schema(plan_schema, "openai").schema  # strict mode's shape
    assert strict_problems(sent_schema, "openai") == []


def test_the_command_line_server_takes_a_seed() -> None:
    from plandag.testing.__main__ import _parser

    assert _parser().parse_args(["--schema-follower", "7"]).schema_follower == 7
