"""Every kind of request plandag sends (plan, streamed plan, replan, join, route, ``llm`` step,
``agent`` turn, token count) goes through the official SDK to the local server of its
provider, and the body the server received is validated against the SDK's own request type
(its TypedDicts through pydantic's ``TypeAdapter``, unknown keys refused at every level) and
its structured-output schema against the provider's rules."""

from __future__ import annotations

import json
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest
import typing_extensions

from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.checks.builtins import BUILTIN_CHECKS
from plandag.dag.plan import Plan
from plandag.executors import EXECUTOR_TOOLS
from plandag.library import PlanLibrary
from plandag.models import AnthropicClient, LLMClient, OpenAICompatibleClient
from plandag.models.schemas import strict_problems
from plandag.planner.agent import Agent, AgentResult
from plandag.planner.wire import dumps_wire
from plandag.scheduler import RunLimits
from plandag.store import Store, open_store
from plandag.testing import ChatCompletionsServer, MessagesServer, RecordedRequest, ScriptedResponse
from plandag.tools import tool
from plandag.tools.registry import Registry

MODEL = "claude-haiku-4-5"
USAGE = {"input_tokens": 40, "output_tokens": 10}
LLM_SCHEMA = {
    "type": "object",
    "properties": {
        "total": {"type": "number", "minimum": 0},
        "note": {"type": "string", "maxLength": 200},
        "extra": {"type": "object"},
    },
    "required": ["total"],
}


@tool
def lookup(key: str) -> int:
    """The number filed under a key."""
    return {"a": 1, "b": 2}.get(key, 0)


@tool
def broken(key: str) -> int:
    """A service that is always down."""
    raise ValueError(f"service down for {key}")


def registry() -> Registry:
    return Registry([lookup, broken, *EXECUTOR_TOOLS], BUILTIN_CHECKS)


def wire(document: dict[str, Any]) -> Any:
    plan = Plan.model_validate({"version": 1, "goal": "Sum a and b", **document})
    return json.loads(dumps_wire(plan, registry()))


PLAN = wire(
    {
        "steps": [
            {"id": 1, "tool": "llm", "args": {"prompt": "Add 2 and 3", "schema": LLM_SCHEMA}},
            {"id": 2, "tool": "agent", "args": {"task": "What is under a?", "tools": ["lookup"]}},
            {"id": 3, "tool": "broken", "args": {"key": "b"}},
        ]
    }
)
PATCH = wire({"steps": [{"id": 4, "tool": "lookup", "args": {"key": "b"}}]})


# -- the SDK's request types, with unknown keys refused --------------------------------------


def typed_dicts(root: Any) -> set[type]:
    """Every TypedDict reachable from ``root`` through its annotations."""
    found: set[type] = set()
    todo = [root]
    while todo:
        item = todo.pop()
        if typing_extensions.is_typeddict(item):
            if item in found:
                continue
            found.add(item)
            todo.extend(typing_extensions.get_type_hints(item, include_extras=True).values())
            continue
        todo.extend(arg for arg in typing_extensions.get_args(item) if not isinstance(arg, str))
    return found


def forced(value: Any) -> Any:
    """A validated value with pydantic's lazy iterators read (each item validated)."""
    if isinstance(value, dict):
        return {key: forced(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [forced(item) for item in value]
    if type(value).__name__ == "ValidatorIterator":
        return [forced(item) for item in value]
    return value


@pytest.fixture
def sdk_types(monkeypatch: pytest.MonkeyPatch) -> dict[str, pydantic.TypeAdapter[Any]]:
    """Adapters of the SDKs' request types whose TypedDicts refuse unknown keys."""
    import anthropic.types
    import openai.types.chat

    roots = {
        "/v1/messages": anthropic.types.MessageCreateParams,
        "/v1/messages/count_tokens": anthropic.types.MessageCountTokensParams,
        "/v1/chat/completions": openai.types.chat.CompletionCreateParams,
    }
    for root in roots.values():
        for typed in typed_dicts(root):
            monkeypatch.setattr(
                typed,
                "__pydantic_config__",
                pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=True),
                raising=False,
            )
    return {path: pydantic.TypeAdapter(root) for path, root in roots.items()}


def test_the_checker_refuses_what_the_sdk_types_do_not_have(
    sdk_types: dict[str, pydantic.TypeAdapter[Any]],
) -> None:
    adapter = sdk_types["/v1/chat/completions"]
    good = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    forced(adapter.validate_python(good))
    with pytest.raises(pydantic.ValidationError, match="Extra inputs are not permitted"):
        forced(adapter.validate_python({**good, "max_token": 5}))
    with pytest.raises(pydantic.ValidationError):
        forced(adapter.validate_python({**good, "messages": [{"role": "user", "content": 5}]}))
    with pytest.raises(pydantic.ValidationError, match="Extra inputs are not permitted"):
        forced(
            sdk_types["/v1/messages"].validate_python(
                {
                    "model": "m",
                    "max_tokens": 5,
                    "messages": [{"role": "user", "content": "hi"}],
                    "temperature_": 0,
                }
            )
        )


# -- the flows ---------------------------------------------------------------------------------


def schema_of(body: dict[str, Any]) -> dict[str, Any] | None:
    output = (body.get("output_config") or {}).get("format") or {}
    if isinstance(output.get("schema"), dict):
        return dict(output["schema"])
    response_format = body.get("response_format") or {}
    schema = (response_format.get("json_schema") or {}).get("schema")
    return dict(schema) if isinstance(schema, dict) else None


def kind_of(body: dict[str, Any]) -> str:
    if body.get("tools"):
        return "agent"
    properties = (schema_of(body) or {}).get("properties", {})
    if {"g", "s"} <= set(properties):
        return "plan"
    if "decision" in properties:
        return "join"
    if "route" in properties:
        return "route"
    return "llm"


def has_tool_result(body: dict[str, Any]) -> bool:
    for message in body["messages"]:
        content = message.get("content")
        if message.get("role") == "tool" or (
            isinstance(content, list) and any(b.get("type") == "tool_result" for b in content)
        ):
            return True
    return False


class Responder:
    """Answers each request by its kind, and labels the requests in order."""

    def __init__(self) -> None:
        self.plans = 0
        self.labels: list[str] = []

    def __call__(self, body: dict[str, Any]) -> ScriptedResponse:
        kind = kind_of(body)
        if kind == "plan":
            self.plans += 1
            label = "stream" if body.get("stream") else "plan" if self.plans == 1 else "replan"
            self.labels.append(label)
            return ScriptedResponse.json(PLAN if self.plans == 1 else PATCH, usage=USAGE)
        self.labels.append(kind)
        if kind == "join":
            return ScriptedResponse.json({"decision": {"action": "finish", "answer": "5"}})
        if kind == "route":
            route = {"task_type": "sum_ab", "new": False, "params": {}}
            return ScriptedResponse.json({"route": route})
        if kind == "agent":
            if has_tool_result(body):
                return ScriptedResponse.text("a is 1", usage=USAGE)
            return ScriptedResponse.tool_use("lookup", {"key": "a"}, usage=USAGE)
        return ScriptedResponse.json({"total": 5, "note": "sum"}, usage=USAGE)


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture(params=["anthropic", "openai"])
def server(request: pytest.FixtureRequest) -> Iterator[MessagesServer]:
    kind = MessagesServer if request.param == "anthropic" else ChatCompletionsServer
    with kind() as running:
        yield running


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(tmp_path / "runs.sqlite3") as opened:
        yield opened


def client_for(server: MessagesServer, notices: list[str]) -> LLMClient:
    if isinstance(server, ChatCompletionsServer):
        return OpenAICompatibleClient(server.url + "/v1", notice=notices.append)
    return AnthropicClient(api_key="test", base_url=server.url, notice=notices.append)


async def run_agent(
    server: MessagesServer, goal: str, notices: list[str], **options: Any
) -> AgentResult:
    client = client_for(server, notices)
    task_type = options.pop("task_type", None)
    agent = Agent(
        client,
        MODEL,
        registry(),
        limits=RunLimits(heartbeat_every=None),
        retry=RetryPolicy(retries=0),
        clock=VirtualClock(),
        approve="auto",
        **options,
    )
    try:
        if task_type is not None or "library" in options:
            return await agent.run(goal, task_type=task_type)
        return await agent.run(goal)
    finally:
        await client.aclose()


@pytest.mark.anyio
async def test_every_request_plandag_sends_conforms_to_the_sdk_types(
    server: MessagesServer,
    store: Store,
    sdk_types: dict[str, pydantic.TypeAdapter[Any]],
) -> None:
    responder = Responder()
    server.default = responder
    notices: list[str] = []
    library = PlanLibrary(store)
    first = await run_agent(server, "Sum a and b", notices, library=library, task_type="sum_ab")
    routed = await run_agent(server, "Sum a and b again", notices, library=library)
    responder.plans = 0
    streamed = await run_agent(server, "Sum a and b", notices, stream=True)
    assert (first.status, routed.status, streamed.status) == ("succeeded",) * 3

    anthropic = not isinstance(server, ChatCompletionsServer)
    kinds = set(responder.labels)
    expected = {"plan", "stream", "replan", "join", "route", "llm", "agent"}
    assert expected <= kinds, responder.labels
    counted = [r for r in server.requests if r.path.endswith("/count_tokens")]
    assert bool(counted) is anthropic  # only Anthropic has a token-counting endpoint

    checked = 0
    for recorded in server.requests:
        check_request(recorded, sdk_types, "anthropic" if anthropic else "openai")
        checked += 1
    assert checked == len(server.requests) > len(expected)
    assert notices == []  # no mode was refused: every schema was accepted as sent


def check_request(
    recorded: RecordedRequest,
    sdk_types: dict[str, pydantic.TypeAdapter[Any]],
    provider: typing.Literal["anthropic", "openai"],
) -> None:
    body = recorded.json
    assert isinstance(body, dict)
    path = recorded.path.split("?")[0]
    try:
        forced(sdk_types[path].validate_python(body))
    except pydantic.ValidationError as error:  # pragma: no cover - the failure's message
        raise AssertionError(
            f"{path} {kind_of(body)}: {error}\n{json.dumps(body)[:2000]}"
        ) from None
    schema = schema_of(body)
    if schema is None:
        return
    if provider == "openai":
        assert body["response_format"]["json_schema"]["strict"] is True
    assert strict_problems(schema, provider) == [], (kind_of(body), schema)
