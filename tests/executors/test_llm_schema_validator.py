"""The llm tool's JSON Schema work per run: each distinct schema is checked against the
metaschema and its validator built once, however many steps share it; each reply is
validated once (by the model client or by the step, never both). Counted with the
``jsonschema`` library's own methods wrapped, in a run against the local Messages API
server."""

from __future__ import annotations

import importlib
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import anyio
import jsonschema
import pytest

from plandag.brakes.clock import VirtualClock
from plandag.compiler import compile_plan
from plandag.executors import ModelAccess
from plandag.models import AnthropicClient, OpenAICompatibleClient
from plandag.scheduler import RunLimits, run_plan
from plandag.testing import ChatCompletionsServer, MessagesServer, ScriptedResponse
from plandag.tools.registry import default_registry

TOTAL = {"type": "object", "properties": {"total": {"type": "number"}}, "required": ["total"]}
NAMES = {"type": "object", "properties": {"names": {"type": "array"}}, "required": ["names"]}


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Counts of ``check_schema`` (metaschema checks), replies validated, and the
    validator objects that validated them (keys ``validators used SCHEMA ID``), from an
    empty cache."""
    counts: Counter[str] = Counter()
    validator = jsonschema.Draft202012Validator
    check_schema = validator.check_schema.__func__  # type: ignore[attr-defined]
    iter_errors = validator.iter_errors
    meta = validator.META_SCHEMA

    def counted_check(cls: type, schema: Any, *args: Any, **kwargs: Any) -> None:
        counts["metaschema checks"] += 1
        check_schema(cls, schema, *args, **kwargs)

    def counted_iter(self: Any, instance: Any, *args: Any, **kwargs: Any) -> Any:
        if self.schema is not meta:  # a reply (the metaschema's own validator checks schemas)
            counts["replies validated"] += 1
            counts[f"validators used {json.dumps(self.schema, sort_keys=True)} {id(self)}"] += 1
        return iter_errors(self, instance, *args, **kwargs)

    monkeypatch.setattr(validator, "check_schema", classmethod(counted_check))
    monkeypatch.setattr(validator, "iter_errors", counted_iter)
    clear_cache()
    yield counts
    clear_cache()


def clear_cache() -> None:
    """Forget the validators built and the schemas checked so far (each test counts from
    none)."""
    for name, function in (
        ("plandag.executors.llm", "_validator_of"),  # the package's llm is the tool
        ("plandag.models.schemas", "_validator_of"),
    ):
        cached = getattr(importlib.import_module(name), function, None)
        if cached is not None:
            cached.cache_clear()


def reply(body: dict[str, Any]) -> ScriptedResponse:
    content = body["messages"][0]["content"]
    text = content if isinstance(content, str) else "".join(b["text"] for b in content)
    value: Any = {"names": ["a"]} if '"names"' in text else {"total": 3}
    return ScriptedResponse.json(value, usage={"input_tokens": 10, "output_tokens": 2})


def test_each_schema_is_checked_once_and_each_reply_validated_once(
    counted: Counter[str],
) -> None:
    steps = [
        {
            "id": number,
            "tool": "llm",
            "args": {"prompt": f"Part {number}", "schema": TOTAL if number <= 6 else NAMES},
            "depends_on": [],
        }
        for number in range(1, 9)
    ]
    document = {"version": 1, "goal": "schemas", "steps": steps, "output": None}

    async def main() -> Any:
        with MessagesServer(default=reply) as server:
            client = AnthropicClient(api_key="test", base_url=server.url)
            try:
                compiled = compile_plan(document, default_registry())
                return await run_plan(
                    compiled,
                    models=ModelAccess(client, "claude-haiku-4-5"),
                    limits=RunLimits(heartbeat_every=None),
                    clock=VirtualClock(),
                )
            finally:
                await client.aclose()

    result = anyio.run(main)
    assert result.status == "succeeded"
    assert [result.steps[n].result for n in range(1, 9)] == [{"total": 3}] * 6 + [
        {"names": ["a"]}
    ] * 2
    # two schemas: two metaschema checks, whether the step's arguments are validated when
    # the plan compiles, when the step starts, or by the tool itself; one validator each,
    # used for every reply of that schema
    assert counts_without_builds(counted) == {"metaschema checks": 2, "replies validated": 8}
    used = sorted(n for key, n in counted.items() if key.startswith("validators used"))
    assert used == [2, 6]


def test_a_reasked_reply_is_validated_once_more_with_the_same_validator(
    counted: Counter[str],
) -> None:
    async def main() -> Any:
        with MessagesServer() as server:
            server.push_json({"total": "three"})
            server.push_json({"total": 3})
            client = AnthropicClient(api_key="test", base_url=server.url)
            try:
                step = {"id": 1, "tool": "llm", "args": {"prompt": "Sum", "schema": TOTAL}}
                document = {"version": 1, "goal": "g", "steps": [step], "output": None}
                return await run_plan(
                    compile_plan(document, default_registry()),
                    models=ModelAccess(client, "claude-haiku-4-5"),
                    limits=RunLimits(heartbeat_every=None),
                    clock=VirtualClock(),
                )
            finally:
                await client.aclose()

    result = anyio.run(main)
    assert (result.status, result.steps[1].result, result.steps[1].attempts) == (
        "succeeded",
        {"total": 3},
        2,
    )
    assert counts_without_builds(counted) == {"metaschema checks": 1, "replies validated": 2}


@pytest.mark.parametrize(
    ("formats", "mode"),
    [
        (("json_schema", "json_object"), "strict"),
        (("json_object",), "json"),
        ((), "prompt"),
    ],
)
def test_each_reply_is_validated_once_in_every_structured_output_mode(
    counted: Counter[str], formats: tuple[str, ...], mode: str
) -> None:
    """Through the OpenAI-compatible server, whether it enforces the schema, speaks only
    JSON mode or neither (the schema stated in the prompt): an invalid reply, its re-ask
    and a valid reply in a Markdown fence, each validated once."""

    async def main() -> Any:
        with ChatCompletionsServer(response_formats=formats) as server:
            server.push_json({"total": "three"})
            server.push_text('```json\n{"total": 3}\n```')
            client = OpenAICompatibleClient(server.url + "/v1", api_key=None)
            try:
                step = {"id": 1, "tool": "llm", "args": {"prompt": "Sum", "schema": TOTAL}}
                document = {"version": 1, "goal": "g", "steps": [step], "output": None}
                result = await run_plan(
                    compile_plan(document, default_registry()),
                    models=ModelAccess(client, "local-model"),
                    limits=RunLimits(heartbeat_every=None),
                    clock=VirtualClock(),
                )
            finally:
                await client.aclose()
            sent = [request.json for request in server.message_requests]
        return result, sent

    result, sent = anyio.run(main)
    assert (result.status, result.steps[1].result, result.steps[1].attempts) == (
        "succeeded",
        {"total": 3},
        2,
    )
    asked = {None: "prompt", "json_object": "json", "json_schema": "strict"}
    last = sent[-1].get("response_format")
    assert asked[last["type"] if isinstance(last, dict) else None] == mode
    assert counts_without_builds(counted) == {"metaschema checks": 1, "replies validated": 2}


def counts_without_builds(counted: Counter[str]) -> dict[str, int]:
    return {key: n for key, n in counted.items() if not key.startswith("validators used")}
