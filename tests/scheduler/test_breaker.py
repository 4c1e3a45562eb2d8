"""The circuit breaker per tool and per HTTP host: K failed steps in a row take a dependency
down; steps needing it then fail at once, without an attempt."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.checks import BUILTIN_CHECKS
from plandag.compiler import CompiledPlan, compile_plan
from plandag.errors import TransientStepError
from plandag.executors import ModelAccess
from plandag.models import AnthropicClient
from plandag.scheduler import RunLimits, events, run_plan, run_plan_sync
from plandag.scheduler.breaker import (
    CircuitBreaker,
    Dependency,
    counts_against_dependency,
    url_host,
)
from plandag.testing import MessagesServer
from plandag.tools.base import Tool, tool
from plandag.tools.http import http_get, use_transport
from plandag.tools.registry import Registry, default_registry
from tests.scheduler.down_during_backoff import plan_whose_tool_goes_down_during_a_backoff

calls: Counter[str] = Counter()


@tool
def broken(name: str) -> Any:
    """Always fails (the service behind it is down)."""
    calls[f"broken:{name}"] += 1
    raise ValueError(f"service down for {name}")


@tool
def fine(name: str) -> str:
    """Always works."""
    calls[f"fine:{name}"] += 1
    return name


@tool
def sometimes(name: str, fail: bool) -> str:
    """Fails when told to (the same tool succeeds otherwise)."""
    calls[f"sometimes:{name}"] += 1
    if fail:
        raise ValueError(f"failed on {name}")
    return name


@tool
def flaky(name: str) -> str:
    """Fails its first attempt for each name with a transient error, then works."""
    calls[f"flaky:{name}"] += 1
    if calls[f"flaky:{name}"] == 1:
        raise TransientStepError(f"hiccup on {name}")
    return name


@pytest.fixture(autouse=True)
def clean() -> None:
    calls.clear()


def compiled(steps: list[dict[str, Any]], *tools: Tool) -> CompiledPlan:
    registry = Registry([broken, fine, sometimes, flaky, http_get, *tools], BUILTIN_CHECKS)
    return compile_plan({"steps": steps}, registry)


def run(plan: CompiledPlan, **options: Any) -> Any:
    options.setdefault("max_concurrency", 1)  # one at a time: failures come in plan order
    options.setdefault("limits", RunLimits(heartbeat_every=None))
    return run_plan_sync(plan, **options)


def statuses(result: Any) -> dict[int, tuple[str, str | None, int]]:
    return {
        key: (record.status, record.reason, record.attempts)
        for key, record in sorted(result.steps.items())
    }


def test_three_failures_in_a_row_take_the_tool_down() -> None:
    plan = compiled(
        [{"id": n, "tool": "broken", "args": {"name": str(n)}} for n in range(1, 6)]
        + [{"id": 6, "tool": "fine", "args": {"name": "x"}}]
    )
    seen: list[events.Event] = []
    result = run(plan, observers=[seen.append])
    assert statuses(result) == {
        1: ("failed", "tool_error", 1),
        2: ("failed", "tool_error", 1),
        3: ("failed", "tool_error", 1),
        4: ("failed", "dependency_down", 0),
        5: ("failed", "dependency_down", 0),
        6: ("succeeded", None, 1),
    }
    assert calls == Counter({"broken:1": 1, "broken:2": 1, "broken:3": 1, "fine:x": 1})
    record = result.steps[4]
    assert record.error is not None
    assert record.error.type == "DependencyDownError"
    assert record.error.message == (
        "not attempted: tool broken is down: steps 1, 2, 3 failed in a row (last: "
        "tool_error: ValueError: service down for 3); the replanner is told to avoid it"
    )
    assert record.started_at is None
    assert [down.as_dict() | {"time": 0} for down in result.dependencies_down] == [
        {
            "kind": "tool",
            "name": "broken",
            "steps": [1, 2, 3],
            "detail": "tool_error: ValueError: service down for 3",
            "time": 0,
        }
    ]
    downs = [event for event in seen if isinstance(event, events.DependencyDown)]
    assert [(event.kind, event.name, event.step_ids) for event in downs] == [
        ("tool", "broken", (1, 2, 3))
    ]
    document = result.to_json_dict()
    assert document["dependencies_down"][0]["name"] == "broken"


def test_a_success_resets_the_count() -> None:
    plan = compiled(
        [
            {"id": 1, "tool": "sometimes", "args": {"name": "1", "fail": True}},
            {"id": 2, "tool": "sometimes", "args": {"name": "2", "fail": True}},
            {"id": 3, "tool": "sometimes", "args": {"name": "3", "fail": False}},
            {"id": 4, "tool": "sometimes", "args": {"name": "4", "fail": True}},
            {"id": 5, "tool": "sometimes", "args": {"name": "5", "fail": True}},
            {"id": 6, "tool": "sometimes", "args": {"name": "6", "fail": False}},
        ]
    )
    result = run(plan)
    assert statuses(result) == {
        1: ("failed", "tool_error", 1),
        2: ("failed", "tool_error", 1),
        3: ("succeeded", None, 1),
        4: ("failed", "tool_error", 1),
        5: ("failed", "tool_error", 1),
        6: ("succeeded", None, 1),
    }
    assert result.dependencies_down == ()


def test_steps_that_fail_once_then_succeed_on_a_retry_never_open_it() -> None:
    plan = compiled([{"id": n, "tool": "flaky", "args": {"name": str(n)}} for n in range(1, 6)])
    result = run(
        plan, retry=RetryPolicy(retries=1, base_delay=0.5, jitter=False), clock=VirtualClock()
    )
    assert result.status == "succeeded"
    assert [result.steps[n].attempts for n in range(1, 6)] == [2, 2, 2, 2, 2]
    assert result.dependencies_down == ()


def test_a_failure_counts_once_after_its_retries() -> None:
    """Two steps, each failing 3 attempts: 2 failures in a row, not 6."""
    plan = compiled([{"id": n, "tool": "broken", "args": {"name": str(n)}} for n in (1, 2)])

    @tool
    def always_transient(name: str) -> str:
        """Fails transiently every time."""
        raise TransientStepError(f"overloaded for {name}")

    plan = compiled(
        [{"id": n, "tool": "always_transient", "args": {"name": str(n)}} for n in (1, 2)],
        always_transient,
    )
    result = run(
        plan, retry=RetryPolicy(retries=2, base_delay=0.5, jitter=False), clock=VirtualClock()
    )
    assert [result.steps[n].attempts for n in (1, 2)] == [3, 3]
    assert result.dependencies_down == ()


def test_failures_that_blame_the_input_do_not_count() -> None:
    plan = compiled(
        [
            {
                "id": 1,
                "tool": "fine",
                "args": {"name": "a"},
                "check": [{"kind": "equals", "value": "b"}],
            }
            | {"id": n}
            for n in (1, 2, 3, 4)
        ]
    )
    result = run(plan)
    assert {record.reason for record in result.steps.values()} == {"check_failed"}
    assert result.dependencies_down == ()


def test_it_can_be_turned_off() -> None:
    plan = compiled([{"id": n, "tool": "broken", "args": {"name": str(n)}} for n in range(1, 6)])
    result = run(plan, limits=RunLimits(heartbeat_every=None, breaker_after=None))
    assert [result.steps[n].reason for n in range(1, 6)] == ["tool_error"] * 5
    assert result.dependencies_down == ()


def test_breaker_after_is_validated() -> None:
    with pytest.raises(ValueError, match="breaker_after must be >= 1 or None, not 0"):
        RunLimits(breaker_after=0)
    assert RunLimits().breaker_after == 3


def test_a_retry_is_not_made_once_the_dependency_is_down() -> None:
    """Step 1 keeps failing transiently (backoff 1 s) while steps 2-4 of the same tool fail
    permanently: the tool goes down and step 1's next retry is not made."""

    plan = plan_whose_tool_goes_down_during_a_backoff(calls)
    result = run(
        plan,
        max_concurrency=None,
        retry=RetryPolicy(retries=5, base_delay=1.0, jitter=False),
        clock=VirtualClock(),
    )
    assert calls["service:1"] == 1
    first = result.steps[1]
    assert (first.status, first.reason, first.attempts) == ("failed", "tool_error", 1)
    assert first.attempt_log[-1].retry == "dependency_down"
    assert first.detail is not None
    assert first.detail.endswith("(not retried: tool service is down)")


# -- HTTP hosts ---------------------------------------------------------------------------------


@pytest.fixture
def hosts() -> Iterator[Counter[str]]:
    """127.0.0.1:8001 answers 503; 127.0.0.1:8002 answers 200 (an httpx mock transport)."""
    requests: Counter[str] = Counter()

    def handler(request: httpx.Request) -> httpx.Response:
        requests[f"{request.url.host}:{request.url.port}"] += 1
        if request.url.port == 8001:
            return httpx.Response(503, text="down for maintenance")
        return httpx.Response(200, json={"ok": True})

    with use_transport(httpx.MockTransport(handler)):
        yield requests


def test_three_failures_take_the_host_down_not_the_tool(hosts: Counter[str]) -> None:
    plan = compiled(
        [
            {"id": n, "tool": "http_get", "args": {"url": f"http://127.0.0.1:8001/{n}"}}
            for n in (1, 2, 3, 4)
        ]
        + [{"id": 5, "tool": "http_get", "args": {"url": "http://127.0.0.1:8002/ok"}}]
    )
    result = run(plan)
    assert statuses(result) == {
        1: ("failed", "http_503", 1),
        2: ("failed", "http_503", 1),
        3: ("failed", "http_503", 1),
        4: ("failed", "dependency_down", 0),
        5: ("succeeded", None, 1),
    }
    assert hosts == Counter({"127.0.0.1:8001": 3, "127.0.0.1:8002": 1})
    assert [(down.dependency.kind, down.dependency.name) for down in result.dependencies_down] == [
        ("host", "127.0.0.1:8001")
    ]


def test_a_host_from_a_reference_is_resolved(hosts: Counter[str]) -> None:
    plan = compiled(
        [
            {"id": 1, "tool": "fine", "args": {"name": "http://127.0.0.1:8001/from-a-step"}},
        ]
        + [
            {"id": n, "tool": "http_get", "args": {"url": f"http://127.0.0.1:8001/{n}"}}
            for n in (2, 3, 4)
        ]
        + [{"id": 5, "tool": "http_get", "args": {"url": "<step_1_result>"}, "depends_on": [1]}]
    )
    result = run(plan)
    assert (result.steps[5].status, result.steps[5].reason) == ("failed", "dependency_down")
    assert hosts == Counter({"127.0.0.1:8001": 3})


def test_the_rule_of_what_counts() -> None:
    assert counts_against_dependency("tool_error")
    assert counts_against_dependency("timeout")
    assert counts_against_dependency("http_503")
    assert counts_against_dependency("http_429")
    assert counts_against_dependency("connect_error")
    assert not counts_against_dependency("http_404")
    assert not counts_against_dependency("check_failed")
    assert not counts_against_dependency("invalid_args")
    assert not counts_against_dependency("dependency_down")
    assert url_host("https://API.example.com/x?y=1") == "api.example.com"
    assert url_host("http://127.0.0.1:8080/") == "127.0.0.1:8080"
    assert url_host("ftp://example.com/") is None
    assert url_host("not a url") is None
    assert url_host(3) is None


def test_the_breaker_counts_in_a_row() -> None:
    breaker = CircuitBreaker(2)
    lookup = (Dependency("tool", "lookup"),)
    assert breaker.failed(1, lookup, "tool_error", "a", 0.0) == []
    breaker.succeeded(lookup)
    assert breaker.failed(2, lookup, "tool_error", "b", 1.0) == []
    opened = breaker.failed(3, lookup, "timeout", "c", 2.0)
    assert [(down.failed_steps, down.detail) for down in opened] == [((2, 3), "timeout: c")]
    assert breaker.blocking(lookup) is opened[0]
    assert breaker.failed(4, lookup, "tool_error", "d", 3.0) == []  # already down
    with pytest.raises(ValueError, match="breaker_after must be >= 1 or None, not 0"):
        CircuitBreaker(0)


def test_calls_the_budget_refused_do_not_take_the_model_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Four llm steps whose calls the token cap refuses (nothing sent): each is refused by
    the budget on its own; the breaker never opens, so no step fails dependency_down and
    a replanner is never told that the model is down."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)

    async def scenario() -> Any:
        with MessagesServer() as server:
            client = AnthropicClient(api_key="test", base_url=server.url)
            try:
                plan = compile_plan(
                    {
                        "steps": [
                            {"id": n, "tool": "llm", "args": {"prompt": f"Say {n}"}}
                            for n in range(1, 5)
                        ]
                    },
                    default_registry(),
                )
                return (
                    await run_plan(
                        plan,
                        models=ModelAccess(client, "claude-haiku-4-5"),
                        max_concurrency=1,
                        limits=RunLimits(heartbeat_every=None, max_tokens=500),
                        clock=VirtualClock(),
                    ),
                    len(server.message_requests),
                )
            finally:
                await client.aclose()

    result, requests = anyio.run(scenario)
    assert requests == 0  # every call refused before sending
    assert result.status == "budget_exceeded"
    assert {
        key: (record.status, record.reason) for key, record in result.steps.items()
    } == dict.fromkeys(range(1, 5), ("failed", "budget"))
    assert result.dependencies_down == ()
    assert not counts_against_dependency("budget")
    assert not counts_against_dependency("agent_budget")


def test_agent_steps_their_own_cap_refused_do_not_take_the_agent_tool_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Four agent steps whose own token cap refuses their first turn (nothing sent, the
    run's budget untouched): each is refused with agent_budget; the breaker never opens,
    so the fourth is refused by its own cap too, not failed as dependency_down."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)

    async def scenario() -> Any:
        with MessagesServer() as server:
            client = AnthropicClient(api_key="test", base_url=server.url)
            try:
                registry = default_registry()
                plan = compile_plan(
                    {
                        "steps": [
                            {
                                "id": n,
                                "tool": "agent",
                                "args": {
                                    "task": f"Read note {n}",
                                    "tools": ["read_file"],
                                    "max_tokens": 200,
                                },
                            }
                            for n in range(1, 5)
                        ]
                    },
                    registry,
                )
                return (
                    await run_plan(
                        plan,
                        models=ModelAccess(client, "claude-haiku-4-5", registry=registry),
                        max_concurrency=1,
                        limits=RunLimits(heartbeat_every=None),
                        clock=VirtualClock(),
                    ),
                    len(server.message_requests),
                )
            finally:
                await client.aclose()

    result, requests = anyio.run(scenario)
    assert requests == 0  # every turn refused by its step's own cap before sending
    assert {
        key: (record.status, record.reason) for key, record in result.steps.items()
    } == dict.fromkeys(range(1, 5), ("failed", "agent_budget"))
    assert result.dependencies_down == ()
    assert result.status == "failed"  # the run's own caps never refused a call
