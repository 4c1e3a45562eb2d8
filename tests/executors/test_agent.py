"""The agent tool in real runs, with both providers: llm and agent steps in parallel
branches, a scoped tool list the model cannot step outside of, the agent's own caps, one
request per attempt with the conversation kept across attempts, children in the trace."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.checks.builtins import BUILTIN_CHECKS
from plandag.compiler import compile_plan
from plandag.executors import EXECUTOR_TOOLS, ModelAccess
from plandag.models import AnthropicClient, LLMClient, OpenAICompatibleClient
from plandag.scheduler import RunLimits, run_plan
from plandag.scheduler.result import RunResult
from plandag.testing import ChatCompletionsServer, MessagesServer, ScriptedResponse
from plandag.tools import tool
from plandag.tools.http import HTTP_TOOLS
from plandag.tools.registry import Registry
from plandag.trace import TraceWriter, load_trace

USAGE = {"input_tokens": 10, "output_tokens": 5}
calls: list[str] = []


@tool(inline=True)
def lookup(key: str) -> int:
    """The number filed under a key."""
    calls.append(f"lookup {key}")
    return {"a": 1, "b": 2}[key]


@tool(inline=True)
def secret(key: str) -> str:
    """A tool that is registered but never listed for the agent."""
    calls.append(f"secret {key}")
    return "s3cret"


@tool(effects="write", writes="path")
def write_note(path: str, text: str) -> str:
    """Write a note."""
    calls.append(f"write_note {path}")
    return path


def registry() -> Registry:
    return Registry([lookup, secret, write_note, *HTTP_TOOLS, *EXECUTOR_TOOLS], BUILTIN_CHECKS)


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    calls.clear()


@pytest.fixture(params=["anthropic", "openai"])
def server(request: pytest.FixtureRequest) -> Iterator[MessagesServer]:
    kind = MessagesServer if request.param == "anthropic" else ChatCompletionsServer
    with kind() as running:
        yield running


@pytest.fixture
async def client(server: MessagesServer) -> AsyncIterator[LLMClient]:
    made: LLMClient
    if isinstance(server, ChatCompletionsServer):
        made = OpenAICompatibleClient(server.url + "/v1", api_key=None)
    else:
        made = AnthropicClient(api_key="test", base_url=server.url)
    yield made
    await made.aclose()


def has_tool_result(body: dict[str, Any]) -> bool:
    """Whether the conversation already holds a tool's result (either wire format)."""
    for message in body["messages"]:
        if message.get("role") == "tool":
            return True
        content = message.get("content")
        if isinstance(content, list) and any(b.get("type") == "tool_result" for b in content):
            return True
    return False


def tool_names(body: dict[str, Any]) -> list[str]:
    return [item.get("name") or item["function"]["name"] for item in body.get("tools", [])]


async def run(
    document: dict[str, Any], client: LLMClient, *, retry: RetryPolicy | None = None, **kw: Any
) -> RunResult:
    compiled = compile_plan(document, registry())
    return await run_plan(
        compiled,
        models=ModelAccess(client, "claude-haiku-4-5", registry=registry()),
        retry=retry,
        limits=RunLimits(heartbeat_every=None),
        clock=VirtualClock(),
        **kw,
    )


def plan(*steps: dict[str, Any]) -> dict[str, Any]:
    numbered = [{"id": index, "depends_on": [], **item} for index, item in enumerate(steps, 1)]
    return {"version": 1, "goal": "test", "steps": numbered}


AGENT_STEP = {"tool": "agent", "args": {"task": "What is filed under a?", "tools": ["lookup"]}}


@pytest.mark.anyio
async def test_llm_and_agent_steps_in_parallel_branches(
    server: MessagesServer, client: LLMClient, tmp_path: Path
) -> None:
    def reply(body: dict[str, Any]) -> ScriptedResponse:
        if not body.get("tools"):
            return ScriptedResponse.text("plain answer", usage=USAGE)
        if has_tool_result(body):
            return ScriptedResponse.text("a is 1", usage=USAGE)
        return ScriptedResponse.tool_use("lookup", {"key": "a"}, text="Look it up.", usage=USAGE)

    server.default = reply
    writer = TraceWriter(tmp_path / "trace.jsonl", "r1")
    result = await run(
        plan({"tool": "llm", "args": {"prompt": "Say something"}}, AGENT_STEP),
        client,
        observers=[writer],
        run_id="r1",
    )
    writer.close()

    assert result.status == "succeeded"
    assert result.steps[1].result == "plain answer"
    answer = result.steps[2].result
    assert answer["answer"] == "a is 1"
    assert answer["turns"] == 2
    assert [(s["turn"], s["tool"], s["args"], s["result"]) for s in answer["steps"]] == [
        (1, "lookup", {"key": "a"}, 1)
    ]
    assert calls == ["lookup a"]
    # one request per model call: the llm step's, then the agent's two turns
    requests = server.message_requests
    assert len(requests) == 3
    assert sorted(tool_names(r.json) for r in requests) == [[], ["lookup"], ["lookup"]]
    # each call settled from its reported usage (15 tokens each)
    assert result.spent_tokens == 45
    assert [a.tokens for a in result.steps[2].attempt_log] == [30]
    children = result.steps[2].attempt_log[0].children
    assert [(c["kind"], c["name"].split(":")[0]) for c in children] == [
        ("llm_call", server_provider(server)),
        ("tool_call", "lookup"),
        ("llm_call", server_provider(server)),
    ]
    assert children[1]["attrs"]["args"] == {"key": "a"}
    assert children[0]["attrs"]["purpose"] == "agent turn 1"
    trace = load_trace(tmp_path / "trace.jsonl")
    assert [(c.kind, c.attempt) for c in trace.steps[2].children] == [
        ("llm_call", 1),
        ("tool_call", 1),
        ("llm_call", 1),
    ]
    assert [c.kind for c in trace.steps[1].children] == ["llm_call"]


def server_provider(server: MessagesServer) -> str:
    return "openai" if isinstance(server, ChatCompletionsServer) else "anthropic"


@pytest.mark.anyio
async def test_an_agent_cannot_call_a_tool_outside_its_list(
    server: MessagesServer, client: LLMClient
) -> None:
    server.push_tool_use("secret", {"key": "a"}, usage=USAGE)
    server.push_text("I may not read it.", usage=USAGE)
    result = await run(plan(AGENT_STEP), client)

    assert result.status == "succeeded"
    assert calls == []  # never run
    (step,) = result.steps[1].result["steps"]
    assert step["tool"] == "secret"
    assert step["error"].startswith("ToolNotAllowed: 'secret' is not in this agent's tool list")
    second = server.message_requests[1].json
    assert "secret" not in tool_names(second)
    assert "tool list (lookup); not run" in str(second["messages"][-1])
    child = result.steps[1].attempt_log[0].children[1]
    assert (child["kind"], child["name"], child["attrs"]["allowed"]) == (
        "tool_call",
        "secret",
        False,
    )


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("tools", "reason"),
    [
        (["http_get"], "tool_not_allowed"),
        (["agent"], "tool_not_allowed"),
    ],
)
async def test_a_tool_list_beyond_the_rules_fails_before_any_request(
    server: MessagesServer, client: LLMClient, tools: list[str], reason: str
) -> None:
    result = await run(plan({"tool": "agent", "args": {"task": "t", "tools": tools}}), client)
    record = result.steps[1]
    assert (record.status, record.reason) == ("failed", reason)
    assert server.message_requests == []


def test_a_literal_tool_list_naming_an_unregistered_tool_does_not_compile() -> None:
    from plandag.errors import PlanError

    step = {"tool": "agent", "args": {"task": "t", "tools": ["lookup", "lookups", "lookpu"]}}
    with pytest.raises(PlanError) as refused:
        compile_plan(plan(step), registry())
    assert refused.value.codes == ["unknown_tool", "unknown_tool"]
    first, second = refused.value.diagnostics
    assert (first.step_id, first.message) == (
        1,
        "args.tools[1]: tool 'lookups' is not registered (agent)",
    )
    assert second.message == "args.tools[2]: tool 'lookpu' is not registered (agent)"
    assert "did you mean lookup" in str(first.hint)


@pytest.mark.anyio
async def test_a_tool_list_by_reference_naming_an_unregistered_tool_fails_at_run_time(
    server: MessagesServer, client: LLMClient
) -> None:
    document = plan({"tool": "agent", "args": {"task": "t", "tools": "<param.tools>"}})
    document["params"] = {"tools": {"type": "array"}}
    compiled = compile_plan(document, registry(), params={"tools": ["lookup", "no_such_tool"]})
    result = await run_plan(
        compiled,
        models=ModelAccess(client, "claude-haiku-4-5", registry=registry()),
        limits=RunLimits(heartbeat_every=None),
        clock=VirtualClock(),
    )
    record = result.steps[1]
    assert (record.status, record.reason) == ("failed", "unknown_tool")
    assert server.message_requests == []


@pytest.mark.anyio
async def test_the_agent_stops_at_its_own_turn_cap(
    server: MessagesServer, client: LLMClient
) -> None:
    server.default = lambda body: ScriptedResponse.tool_use("lookup", {"key": "b"}, usage=USAGE)
    step = {"tool": "agent", "args": {"task": "loop", "tools": ["lookup"], "max_turns": 2}}
    result = await run(plan(step), client)
    record = result.steps[1]
    assert (record.status, record.reason) == ("failed", "agent_max_turns")
    assert len(server.message_requests) == 2
    assert calls == ["lookup b", "lookup b"]
    assert result.spent_tokens == 30


@pytest.mark.anyio
async def test_the_agent_stops_at_its_own_token_cap_before_sending(
    server: MessagesServer, client: LLMClient
) -> None:
    step = {"tool": "agent", "args": {"task": "t", "tools": ["lookup"], "max_tokens": 200}}
    result = await run(plan(step), client)
    record = result.steps[1]
    assert (record.status, record.reason) == ("failed", "agent_budget")
    assert record.error is not None
    assert "agent turn 1: call not sent: its estimated" in record.error.message
    assert "past its cap of 200 tokens" in record.error.message
    assert server.message_requests == []
    assert result.status == "failed"  # the run's own budget was never refused


@pytest.mark.anyio
async def test_a_failed_turn_is_retried_by_the_run_policy_and_the_agent_goes_on(
    server: MessagesServer, client: LLMClient
) -> None:
    server.push_tool_use("lookup", {"key": "a"}, usage=USAGE)
    server.push_error(529)
    server.push_text("a is 1", usage=USAGE)
    result = await run(
        plan(AGENT_STEP), client, retry=RetryPolicy(retries=1, base_delay=0.1, jitter=False)
    )
    record = result.steps[1]
    assert result.status == "succeeded"
    assert record.attempts == 2
    assert [a.reason for a in record.attempt_log] == ["http_529", None]
    assert record.result["answer"] == "a is 1"
    assert calls == ["lookup a"]  # not called again by the second attempt
    assert len(server.message_requests) == 3
    last = server.message_requests[2].json
    assert has_tool_result(last)  # the second attempt went on from the failed turn


@pytest.mark.anyio
async def test_listed_tools_with_effects_make_the_step_need_approval(
    server: MessagesServer, client: LLMClient, tmp_path: Path
) -> None:
    from plandag.approval import ApprovalRequiredError
    from plandag.errors import PlanError

    step = {"tool": "agent", "args": {"task": "note it", "tools": ["lookup", "write_note"]}}
    compiled = compile_plan(plan(step), registry())
    assert compiled.steps[1].tool.effects == "write"  # the most of its listed tools
    assert compiled.steps[1].tool.idempotent is False
    with pytest.raises(PlanError) as refused:
        compile_plan(plan(step), registry(), read_only=True)
    assert refused.value.codes == ["effects_in_read_only"]
    with pytest.raises(ApprovalRequiredError):
        await run(plan(step), client)
    assert server.message_requests == []
    # approved, the agent may call the write tool it lists
    server.push_tool_use("write_note", {"path": str(tmp_path / "n.txt"), "text": "hi"})
    server.push_text("noted", usage=USAGE)
    result = await run(plan(step), client, approve="auto", write_boundary=None)
    assert result.status == "succeeded", result.steps[1].error
    assert calls == [f"write_note {tmp_path / 'n.txt'}"]


@pytest.mark.anyio
async def test_a_tool_list_given_by_reference_may_name_only_effect_free_tools(
    server: MessagesServer, client: LLMClient
) -> None:
    document = plan({"tool": "agent", "args": {"task": "t", "tools": "<param.tools>"}})
    document["params"] = {"tools": {"type": "array"}}
    compiled = compile_plan(document, registry(), params={"tools": ["write_note"]})
    assert compiled.steps[1].tool.effects == "none"
    result = await run_plan(
        compiled,
        models=ModelAccess(client, "claude-haiku-4-5", registry=registry()),
        limits=RunLimits(heartbeat_every=None),
        clock=VirtualClock(),
    )
    record = result.steps[1]
    assert (record.status, record.reason) == ("failed", "tool_not_allowed")
    assert record.error is not None
    assert "beyond what this step was compiled and approved with ('none')" in (record.error.message)
    assert server.message_requests == []
