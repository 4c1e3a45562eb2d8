"""A server that refuses a structured-output mode: the client asks again in the next mode
(strict schema, then JSON mode, then the schema in the prompt), remembers it for the rest of
its life, says it once on stderr, and validates the answers itself; a schema refused as too
large is sent narrower first. Against the local servers of ``plandag.testing``, through the
official SDKs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from plandag.models import AnthropicClient, LLMRequest, OpenAICompatibleClient
from plandag.models.schemas import strict_problems
from plandag.testing import ChatCompletionsServer, MessagesServer

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "total": {"type": "number", "minimum": 0},
        "note": {"type": "string"},
    },
    "required": ["total"],
}
NARROW: dict[str, Any] = {
    "type": "object",
    "properties": {"total": {"type": "number", "minimum": 0}},
    "required": ["total"],
}


def request(*, narrower: tuple[dict[str, Any], ...] = (), stream: bool = False) -> LLMRequest:
    return LLMRequest(
        model="local-model",
        system="You add numbers.",
        messages=[{"role": "user", "content": "2 + 3"}],
        max_tokens=200,
        json_schema=SCHEMA,
        schema_name="sum",
        narrower_schemas=narrower,
    )


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def formats(server: ChatCompletionsServer) -> list[Any]:
    return [
        (body.get("response_format") or {}).get("type")
        for body in (r.json for r in server.message_requests)
    ]


@pytest.mark.anyio
@pytest.mark.usefixtures("clean_environment")
async def test_a_server_without_strict_schemas_gets_json_mode_said_once_on_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with ChatCompletionsServer(response_formats=("json_object",)) as server:
        server.push_json({"total": 5})
        server.push_json({"total": -1})
        async with OpenAICompatibleClient(server.url + "/v1") as client:
            first = await client.complete(request())
            second = await client.complete(request())
        assert formats(server) == ["json_schema", "json_object", "json_object"]
        refused, fallback, remembered = (r.json for r in server.message_requests)
    assert strict_problems(refused["response_format"]["json_schema"]["schema"]) == []
    system = fallback["messages"][0]
    assert system["role"] == "system"
    assert system["content"].startswith("You add numbers.\n\nAnswer with one JSON value")
    assert json.dumps(SCHEMA["properties"]["total"]["minimum"]) in system["content"]
    assert remembered["messages"] == fallback["messages"]
    assert (first.text, first.schema_mode, first.schema_errors) == ('{"total":5}', "json", ())
    assert second.schema_errors == ("$.total: -1 is less than the minimum of 0",)
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1
    assert said[0].startswith(f"openai {server.url}/v1: the server refused a strict JSON schema")
    assert "plain JSON (response_format json_object)" in said[0]


@pytest.mark.anyio
@pytest.mark.usefixtures("clean_environment")
async def test_a_server_without_any_response_format_gets_the_schema_in_the_prompt() -> None:
    notices: list[str] = []
    with ChatCompletionsServer(response_formats=()) as server:
        server.push_json({"total": 5, "note": "sum"})
        server.push_json({"total": 6})
        async with OpenAICompatibleClient(server.url + "/v1", notice=notices.append) as client:
            first = await client.complete(request())
            async with client.stream(request()) as stream:
                deltas = [piece async for piece in stream]
                second = await stream.final_response()
        assert formats(server) == ["json_schema", "json_object", None, None]
    assert len(notices) == 2
    assert "JSON with the schema stated in the system prompt" in notices[1]
    assert (first.schema_mode, first.schema_errors) == ("prompt", ())
    assert "".join(deltas) == second.text == '{"total":6}'
    assert second.schema_mode == "prompt"


@pytest.mark.anyio
@pytest.mark.usefixtures("clean_environment")
async def test_a_strict_server_gets_the_prepared_schema_and_nulls_become_absent() -> None:
    notices: list[str] = []
    with ChatCompletionsServer() as server:
        server.push_json({"total": 5, "note": None})
        client = OpenAICompatibleClient(server.url + "/v1", notice=notices.append)
        async with client, client.stream(request()) as stream:
            deltas = [piece async for piece in stream]
            response = await stream.final_response()
        [sent] = (r.json for r in server.message_requests)
    spec = sent["response_format"]["json_schema"]
    assert (spec["name"], spec["strict"]) == ("sum", True)
    assert spec["schema"]["required"] == ["total", "note"]
    assert "".join(deltas) == '{"total":5,"note":null}'  # as the model wrote it
    assert response.text == '{"total":5}'  # as the caller's schema has it
    assert (response.schema_mode, response.schema_errors) == ("strict", ())
    assert notices == []


@pytest.mark.anyio
@pytest.mark.usefixtures("clean_environment")
async def test_a_schema_refused_as_too_large_is_sent_narrower_and_remembered() -> None:
    notices: list[str] = []
    full_size = len(json.dumps(strict_schema_of(SCHEMA), separators=(",", ":")))
    with ChatCompletionsServer(max_schema_bytes=full_size - 1) as server:
        for _ in range(2):
            server.push_json({"total": 5})
        async with OpenAICompatibleClient(server.url + "/v1", notice=notices.append) as client:
            first = await client.complete(request(narrower=(NARROW,)))
            second = await client.complete(request(narrower=(NARROW,)))
        sent = [r.json["response_format"]["json_schema"]["schema"] for r in server.message_requests]
    assert [sorted(schema["properties"]) for schema in sent] == [
        ["note", "total"],
        ["total"],
        ["total"],
    ]
    assert first.schema_mode == second.schema_mode == "strict"
    assert len(notices) == 1
    assert "refused a strict JSON schema as too large" in notices[0]


@pytest.mark.anyio
@pytest.mark.usefixtures("clean_environment")
async def test_too_large_with_nothing_narrower_falls_back_for_that_schema_only() -> None:
    notices: list[str] = []
    full_size = len(json.dumps(strict_schema_of(SCHEMA), separators=(",", ":")))
    small = LLMRequest(
        model="local-model",
        messages=[{"role": "user", "content": "x"}],
        max_tokens=50,
        json_schema=NARROW,
    )
    with ChatCompletionsServer(max_schema_bytes=full_size - 1) as server:
        for _ in range(3):
            server.push_json({"total": 1})
        async with OpenAICompatibleClient(server.url + "/v1", notice=notices.append) as client:
            big = await client.complete(request())
            narrow = await client.complete(small)
            again = await client.complete(request())
        assert formats(server) == ["json_schema", "json_object", "json_schema", "json_object"]
    assert (big.schema_mode, narrow.schema_mode, again.schema_mode) == ("json", "strict", "json")
    assert len(notices) == 1


@pytest.mark.anyio
async def test_anthropic_refusing_the_output_format_gets_the_schema_in_the_prompt() -> None:
    notices: list[str] = []
    with MessagesServer(max_schema_bytes=10) as server:
        server.push_json({"total": 5})
        server.push_json({"total": 7})
        async with AnthropicClient(
            api_key="test", base_url=server.url, notice=notices.append
        ) as client:
            first = await client.complete(request())
            async with client.stream(request()) as stream:
                second = await stream.final_response()
        sent = [r.json for r in server.message_requests]
    assert ["output_config" in body for body in sent] == [True, False, False]
    assert "Answer with one JSON value" in sent[1]["system"][0]["text"]
    assert (first.schema_mode, first.text) == ("prompt", '{"total":5}')
    assert (second.schema_mode, second.schema_errors) == ("prompt", ())
    assert len(notices) == 1
    assert "too large" in notices[0]


@pytest.mark.anyio
@pytest.mark.usefixtures("clean_environment")
async def test_a_refusal_that_is_not_about_the_schema_is_raised() -> None:
    from plandag.errors import PermanentStepError

    with ChatCompletionsServer() as server:
        server.push_error(400, "invalid_request_error", message="messages: too many images")
        async with OpenAICompatibleClient(server.url + "/v1", notice=print) as client:
            with pytest.raises(PermanentStepError) as caught:
                await client.complete(request())
        assert formats(server) == ["json_schema"]
    assert caught.value.reason == "http_400"
    assert client.schema_modes.mode == "strict"


def strict_schema_of(schema: dict[str, Any]) -> dict[str, Any]:
    from plandag.models.schemas import prepare_schema

    return prepare_schema(schema, "openai").schema


@pytest.mark.anyio
@pytest.mark.usefixtures("clean_environment")
async def test_a_caller_that_narrows_itself_gets_the_too_large_refusal() -> None:
    from dataclasses import replace

    from plandag.errors import PermanentStepError

    notices: list[str] = []
    full_size = len(json.dumps(strict_schema_of(SCHEMA), separators=(",", ":")))
    with ChatCompletionsServer(max_schema_bytes=full_size - 1) as server:
        async with OpenAICompatibleClient(server.url + "/v1", notice=notices.append) as client:
            with pytest.raises(PermanentStepError) as caught:
                await client.complete(replace(request(), raise_if_too_large=True))
        assert formats(server) == ["json_schema"]
    assert caught.value.reason == "http_400"
    assert "too large" in str(caught.value)
    assert (notices, client.schema_modes.mode) == ([], "strict")
