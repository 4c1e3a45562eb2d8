"""The ReAct baseline against the local Messages API server, through the real SDK."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.checks.builtins import BUILTIN_CHECKS
from plandag.errors import PermanentStepError
from plandag.executors.data import parse_data_blocks
from plandag.models import AnthropicClient
from plandag.planner.prompt import system_prompt
from plandag.react import (
    REACT_EXAMPLE,
    ReactAgent,
    react_system_prompt,
    tool_definitions,
    tool_description,
)
from plandag.scheduler.runner import RunLimits
from plandag.testing import MessagesServer, system_text
from plandag.tools import tool
from plandag.tools.boundary import WriteBoundary
from plandag.tools.registry import Registry

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@tool
async def search(query: str) -> dict[str, Any]:
    """Look a movie up; returns its year."""
    return {"query": query, "year": 1972}


@tool
def down(query: str) -> dict[str, Any]:
    """A service that is always down."""
    raise PermanentStepError("service down", reason="unavailable")


REGISTRY = Registry([search, down], BUILTIN_CHECKS)
USAGE = {"input_tokens": 100, "output_tokens": 10}


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


@pytest.fixture
async def client(server: MessagesServer) -> AsyncIterator[AnthropicClient]:
    made = AnthropicClient(api_key="test", base_url=server.url)
    yield made
    await made.aclose()


async def test_think_one_tool_observe_answer(
    server: MessagesServer, client: AnthropicClient
) -> None:
    server.push_tool_use(
        "search", {"query": "The Godfather"}, text="Thought: look it up", usage=USAGE
    )
    server.push_text("Thought: done.\nAnswer: 1972", usage=USAGE)
    result = await ReactAgent(client, "claude-sonnet-4-6", REGISTRY).run("When?")

    assert result.status == "succeeded"
    assert result.answer == "Thought: done.\nAnswer: 1972"
    assert len(result.steps) == 1
    step = result.steps[0]
    assert (step.number, step.thought, step.tool, dict(step.input)) == (
        1,
        "Thought: look it up",
        "search",
        {"query": "The Godfather"},
    )
    assert step.result == {"query": "The Godfather", "year": 1972}
    assert [call.attempt for call in result.llm_calls] == [1, 1]
    assert (result.input_tokens, result.output_tokens) == (200, 20)
    # claude-sonnet-4-6: $3 per million input tokens, $15 per million output tokens
    assert result.cost_usd == pytest.approx(2 * (100 * 3e-6 + 10 * 15e-6))

    first, second = (request.json for request in server.message_requests)
    assert system_text(first) == react_system_prompt()
    assert first["tools"] == tool_definitions(REGISTRY)
    assert first["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    task = "Task:\nWhen?\n\nThink, then call one tool; answer in text when you can.\n"
    # the prompt as ever; the conversation so far may be cached (its last block marked)
    assert first["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": task, "cache_control": {"type": "ephemeral"}}],
        }
    ]
    assert second["messages"][0] == {"role": "user", "content": task}
    assistant, observation = second["messages"][1:]
    assert assistant == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Thought: look it up"},
            {
                "type": "tool_use",
                "id": "toolu_local_000001_1",
                "name": "search",
                "input": {"query": "The Godfather"},
            },
        ],
    }
    [block] = observation["content"]
    assert block["type"] == "tool_result"
    assert block["tool_use_id"] == "toolu_local_000001_1"
    assert "is_error" not in block
    [data] = parse_data_blocks(block["content"])
    assert data.label == "search result"
    assert data.value == {"query": "The Godfather", "year": 1972}


async def test_a_failing_tool_is_an_error_observation(
    server: MessagesServer, client: AnthropicClient
) -> None:
    server.push_tool_use("down", {"query": "x"})
    server.push_tool_use("nope", {"query": "x"})
    server.push_text("Answer: unknown")
    result = await ReactAgent(client, "m", REGISTRY).run("Try.")

    assert result.status == "succeeded"
    assert [step.error for step in result.steps] == [
        "PermanentStepError: service down",
        "UnknownTool: no tool 'nope' (down, search)",
    ]
    second, third = (request.json for request in server.message_requests[1:])
    [failed] = second["messages"][-1]["content"]
    assert failed["is_error"] is True
    assert parse_data_blocks(failed["content"])[0].label == "down error"
    assert parse_data_blocks(third["messages"][-1]["content"][0]["content"])[0].value == (
        "UnknownTool: no tool 'nope' (down, search)"
    )


async def test_tool_descriptions_are_the_planners() -> None:
    prompt = system_prompt(REGISTRY)
    for definition in tool_definitions(REGISTRY):  # the same words, the planner's as signatures
        description = definition["description"].split("): ", 1)[1]
        assert f"- {definition['name']}(" in prompt
        assert f": {description}\n" in prompt
    assert tool_description(REGISTRY, "search") == (
        "(effects: none; returns dict[str, Any]): Look a movie up; returns its year."
    )
    assert REACT_EXAMPLE in react_system_prompt()


async def test_max_turns_gives_up(server: MessagesServer, client: AnthropicClient) -> None:
    for _ in range(2):
        server.push_tool_use("search", {"query": "again"})
    result = await ReactAgent(client, "m", REGISTRY, max_turns=2).run("Loop.")
    assert (result.status, result.answer, len(result.steps)) == ("gave_up", None, 2)
    assert result.error == "no answer after 2 turns"


async def test_transient_failures_are_retried(
    server: MessagesServer, client: AnthropicClient
) -> None:
    server.push_error(529)
    server.push_text("Answer: 1")
    agent = ReactAgent(client, "m", REGISTRY, retry=RetryPolicy(retries=2), clock=VirtualClock())
    result = await agent.run("Quick.")
    assert result.status == "succeeded"
    assert [(call.attempt, call.error_reason) for call in result.llm_calls] == [
        (1, "http_529"),
        (2, None),
    ]


async def test_the_budget_refuses_a_call(server: MessagesServer, client: AnthropicClient) -> None:
    limits = RunLimits(max_cost_usd=0.0001, heartbeat_every=None)
    result = await ReactAgent(client, "claude-sonnet-4-6", REGISTRY, limits=limits).run("Costly.")
    assert result.status == "budget_exceeded"
    assert result.llm_calls == ()
    assert server.message_requests == []


async def test_the_wall_clock_cap(server: MessagesServer, client: AnthropicClient) -> None:
    server.ttft = 5.0
    server.push_text("Answer: late")
    limits = RunLimits(max_seconds=0.2, heartbeat_every=None)
    with anyio.fail_after(3):
        result = await ReactAgent(client, "m", REGISTRY, limits=limits).run("Slow.")
    assert result.status == "timed_out"
    assert result.answer is None


async def test_read_only_refuses_effects(server: MessagesServer, client: AnthropicClient) -> None:
    @tool(effects="write", writes="path")
    def save(path: str) -> str:
        """Write a file."""
        raise AssertionError("never called")

    server.push_tool_use("save", {"path": "x"})
    server.push_text("Answer: refused")
    registry = Registry([save])
    result = await ReactAgent(client, "m", registry, read_only=True).run("Save.")
    assert result.steps[0].error == ("Refused: save has effects (write) and the run is read-only")


async def test_the_approval_modes_gate_effects(
    server: MessagesServer, client: AnthropicClient, tmp_path: Path
) -> None:
    written: list[str] = []

    @tool(effects="write", writes="path")
    def save(path: str) -> str:
        """Write a file."""
        written.append(path)
        return path

    @tool(effects="irreversible")
    def send(to: str) -> str:
        """Send a message."""
        raise AssertionError("never called")

    registry = Registry([save, send])
    boundary = WriteBoundary.from_specs([tmp_path])
    inside, outside = str(tmp_path / "a.txt"), str(tmp_path.parent / "b.txt")
    for name, given in (
        ("save", {"path": outside}),
        ("send", {"to": "x"}),
        ("save", {"path": inside}),
    ):
        server.push_tool_use(name, given)
    server.push_text("Answer: done")
    agent = ReactAgent(client, "m", registry, approve="auto", write_boundary=boundary)
    result = await agent.run("Save and send.")
    outside_error, send_error, inside_error = (step.error for step in result.steps)
    assert outside_error is not None
    assert outside_error.startswith("Refused: BoundaryError: ")
    assert send_error == (
        "Refused: send has effects (irreversible): an irreversible effect needs a person's "
        "approval and nobody approves in this run"
    )
    assert inside_error is None
    assert written == [inside]

    server.push_tool_use("save", {"path": inside})
    server.push_text("Answer: refused")
    never = await ReactAgent(client, "m", registry, approve="never").run("Save.")
    assert never.steps[0].error == (
        "Refused: save has effects (write): no effect is approved in this run"
    )
    assert written == [inside]
    with pytest.raises(ValueError, match="approve must be None, 'auto' or 'never'"):
        ReactAgent(client, "m", registry, approve="ask")  # type: ignore[arg-type]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="max_turns must be >= 1"):
        ReactAgent(AnthropicClient(api_key="k"), "m", REGISTRY, max_turns=0)
