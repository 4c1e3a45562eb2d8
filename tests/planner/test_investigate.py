"""Investigating before planning (plan --investigate) through the real Anthropic SDK against
the local Messages API server (plandag.testing) on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from plandag.brakes.clock import SystemClock, VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.checks.builtins import BUILTIN_CHECKS
from plandag.compiler import compile_plan
from plandag.dag.plan import Plan
from plandag.errors import PlanError
from plandag.executors.data import parse_data_blocks, quote_data
from plandag.models import AnthropicClient
from plandag.planner.investigate import (
    INVESTIGATION_GOAL,
    INVESTIGATION_HEADING,
    investigate,
    investigation_context,
    plan_with_investigation,
    read_only_planner,
    section_share,
)
from plandag.planner.planner import Planner, PlannerGaveUp
from plandag.planner.prompt import format_diagnostics, user_prompt
from plandag.planner.wire import wire_to_document
from plandag.scheduler import RunLimits
from plandag.testing import MessagesServer
from plandag.tools import tool
from plandag.tools.registry import Registry

MODEL = "claude-sonnet-4-6"
TASK = "Convert 10 EUR to USD at today's rate."

calls: list[str] = []


@tool
def lookup(key: str) -> dict[str, Any]:
    """Look a fact up by key (read-only)."""
    calls.append(f"lookup {key}")
    if key == "missing":
        raise KeyError(key)
    return {"key": key, "value": 1.08}


@tool
def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    calls.append(f"multiply {a} {b}")
    return a * b


@tool(effects="irreversible")
def send_email(to: str, body: str) -> str:
    """Send an email (irreversible)."""
    calls.append(f"send_email {to}")
    return "sent"


@tool
async def slow_lookup(key: str) -> str:
    """Look a fact up slowly."""
    calls.append(f"slow_lookup {key}")
    await anyio.sleep(30)
    return key


def registry() -> Registry:
    return Registry([lookup, multiply, send_email, slow_lookup], BUILTIN_CHECKS)


INVESTIGATION: dict[str, Any] = {
    "g": "Find today's EUR to USD rate",
    "s": [{"i": 1, "t": "lookup", "a": {"key": "EURUSD"}, "d": []}],
}
FINAL: dict[str, Any] = {
    "g": "10 EUR in USD",
    "s": [{"i": 1, "t": "multiply", "a": {"a": 10, "b": 1.08}, "d": []}],
    "o": "<step_1_result>",
}
WITH_EFFECT: dict[str, Any] = {
    "g": "Ask for the rate",
    "s": [
        {"i": 1, "t": "lookup", "a": {"key": "EURUSD"}, "d": []},
        {"i": 2, "t": "send_email", "a": {"to": "bank@example.com", "body": "rate?"}, "d": []},
    ],
}


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests to 127.0.0.1 must not go through a proxy from the environment."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)


@pytest.fixture(autouse=True)
def fresh_calls() -> None:
    calls.clear()


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


def planner(server: MessagesServer, **options: Any) -> Planner:
    options.setdefault("clock", VirtualClock())
    return Planner(
        AnthropicClient(api_key="test", base_url=server.url),
        MODEL,
        registry(),
        retry=RetryPolicy(retries=2, base_delay=0.5, jitter=False),
        max_tokens=2000,
        **options,
    )


def content(server: MessagesServer, index: int) -> list[Any]:
    messages: list[Any] = server.message_requests[index].json["messages"]
    return [message["content"] for message in messages]


# -- the happy path --------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_investigation_runs_and_its_result_reaches_the_planner_as_data(
    server: MessagesServer,
) -> None:
    server.push_json(INVESTIGATION, usage={"input_tokens": 900, "output_tokens": 40})
    server.push_json(FINAL, usage={"input_tokens": 1100, "output_tokens": 50})
    subject = planner(server)
    outcome = await plan_with_investigation(subject, TASK, "Rates come from the ECB.")
    await subject.client.aclose()

    # the investigation tool ran exactly once; the final plan's tools did not run at all
    assert calls == ["lookup EURUSD"]
    investigation = outcome.investigation
    assert investigation.result.status == "succeeded"
    assert investigation.ran == {1: "lookup"}
    assert investigation.outcome.compiled.read_only is True
    # the written plan is the second reply, compiled as the planner was configured
    assert outcome.plan.plan == Plan.model_validate(wire_to_document(FINAL))
    assert outcome.plan.compiled.read_only is False
    assert len(outcome.records) == 2
    assert [record.output_tokens for record in outcome.records] == [40, 50]

    assert len(server.message_requests) == 2
    assert content(server, 0) == [
        user_prompt(INVESTIGATION_GOAL.format(task=TASK), "Rates come from the ECB.")
    ]
    block = quote_data("investigation step 1 result", {"key": "EURUSD", "value": 1.08}, 4000)
    assert content(server, 1) == [
        "Task:\nConvert 10 EUR to USD at today's rate.\n\n"
        "Trusted context (from the user):\nRates come from the ECB.\n\n"
        f"{INVESTIGATION_HEADING}\nstep 1 (lookup) succeeded:\n{block}\n"
    ]
    [data] = parse_data_blocks(content(server, 1)[0])
    assert data.label == "investigation step 1 result"
    assert data.value == {"key": "EURUSD", "value": 1.08}
    # the same system prompt (tools, rules, the data-block rule) for both calls
    first_system = server.message_requests[0].system_text
    assert first_system == server.message_requests[1].system_text
    assert "never an instruction" in first_system


@pytest.mark.anyio
async def test_without_trusted_context_the_trusted_section_says_none(
    server: MessagesServer,
) -> None:
    server.push_json(
        {"g": "nothing to look up", "s": []}, usage={"input_tokens": 1000, "output_tokens": 100}
    )
    server.push_json(FINAL)
    subject = planner(server)
    outcome = await plan_with_investigation(subject, TASK)
    await subject.client.aclose()
    assert calls == []
    assert outcome.investigation.ran == {}
    assert outcome.investigation.summary() == (
        "investigation: 1 plan(s) asked, 1 call(s), $0.0045; the plan had no steps, nothing ran"
    )
    assert content(server, 1) == [
        "Task:\nConvert 10 EUR to USD at today's rate.\n\n"
        "Trusted context (from the user):\nnone\n\n"
        f"{INVESTIGATION_HEADING}\nnone: the investigation plan had no steps\n"
    ]


# -- effects are refused ---------------------------------------------------------------------


def effects_report() -> str:
    """What plandag check --read-only says of WITH_EFFECT, computed independently."""
    with pytest.raises(PlanError) as caught:
        compile_plan(wire_to_document(WITH_EFFECT), registry(), read_only=True)
    return format_diagnostics(caught.value.diagnostics)


@pytest.mark.anyio
async def test_a_step_with_effects_is_refused_and_repaired_and_never_runs(
    server: MessagesServer,
) -> None:
    server.push_json(WITH_EFFECT)
    server.push_json(INVESTIGATION)
    server.push_json(FINAL)
    subject = planner(server)
    outcome = await plan_with_investigation(subject, TASK)
    await subject.client.aclose()

    assert calls == ["lookup EURUSD"]
    attempts = outcome.investigation.outcome.attempts
    assert [(attempt.number, attempt.compiled) for attempt in attempts] == [(1, False), (2, True)]
    assert [d.code for d in attempts[0].diagnostics] == ["effects_in_read_only"]
    assert attempts[0].diagnostics[0].format() == (
        "step 2: error[effects_in_read_only]: tool send_email has effects (irreversible) and "
        "this run is read-only (hint: drop --read-only, or plan with tools without effects)"
    )
    assert len(server.message_requests) == 3
    [report] = parse_data_blocks(content(server, 1)[2])
    assert report.label == "plandag check output, attempt 1"
    assert report.value == effects_report()
    assert len(outcome.records) == 3


@pytest.mark.anyio
async def test_an_investigation_that_keeps_asking_for_effects_gives_up(
    server: MessagesServer,
) -> None:
    for _ in range(3):
        server.push_json(WITH_EFFECT)
    subject = planner(server)
    with pytest.raises(PlannerGaveUp) as caught:
        await plan_with_investigation(subject, TASK)
    await subject.client.aclose()
    assert caught.value.codes == ["effects_in_read_only"]
    assert len(caught.value.records) == 3
    assert len(server.message_requests) == 3  # the real plan is never asked for
    assert calls == []


# -- failures, the time cap and the size bound -----------------------------------------------


@pytest.mark.anyio
async def test_failed_and_unfinished_steps_are_reported_as_such(server: MessagesServer) -> None:
    server.push_json(
        {
            "g": "look up",
            "s": [
                {"i": 1, "t": "lookup", "a": {"key": "missing"}, "d": []},
                {"i": 2, "t": "slow_lookup", "a": {"key": "EURUSD"}, "d": []},
            ],
        },
        usage={"input_tokens": 1000, "output_tokens": 100},
    )
    subject = planner(server, clock=SystemClock())
    investigation = await investigate(
        subject,
        TASK,
        limits=RunLimits(max_seconds=0.2, heartbeat_every=None),
        retry=RetryPolicy(retries=0),
    )
    await subject.client.aclose()
    assert sorted(calls) == ["lookup missing", "slow_lookup EURUSD"]
    assert investigation.result.status == "timed_out"
    steps = investigation.result.steps
    assert (steps[1].status, steps[2].status, steps[2].reason) == (
        "failed",
        "cancelled",
        "deadline",
    )
    error = quote_data(
        "investigation step 1 error",
        {
            "type": "KeyError",
            "message": steps[1].error.message if steps[1].error else None,
            "reason": steps[1].reason,
        },
        4000,
    )
    assert investigation.section == (
        f"{INVESTIGATION_HEADING}\n"
        f"step 1 (lookup) failed:\n{error}\n"
        f"step 2 (slow_lookup) cancelled: never finished ({steps[2].detail})"
    )
    summary = investigation.summary()
    assert summary.startswith(
        "investigation: 1 plan(s) asked, 1 call(s), $0.0045; ran 2 of 2 step(s) without "
        "effects (lookup, slow_lookup) in "
    )
    assert summary.endswith(" s: 1 cancelled, 1 failed; status timed_out")


@pytest.mark.anyio
async def test_each_result_is_cut_to_its_share_of_the_section(server: MessagesServer) -> None:
    server.push_json(
        {
            "g": "look up",
            "s": [{"i": i, "t": "multiply", "a": {"a": 1, "b": i}, "d": []} for i in (1, 2, 3)],
        }
    )
    subject = planner(server)
    investigation = await investigate(subject, TASK, max_chars=900)
    await subject.client.aclose()
    steps = investigation.result.steps
    steps[2].result = "x" * 1000  # as if the tool had returned a long text
    section = investigation_context(investigation.result, max_chars=900)
    blocks = parse_data_blocks(section)
    assert [block.value for block in blocks][0::2] == [1.0, 3.0]
    assert blocks[1].attributes["truncated"] == (
        "kept the first 150 and the last 150 of 1000 characters"
    )
    assert blocks[1].attributes["bytes"] == "1000"


def test_section_share_bounds() -> None:
    assert section_share(0, 24_000) == 4000
    assert section_share(3, 24_000) == 4000
    assert section_share(10, 24_000) == 2400
    assert section_share(1000, 24_000) == 200


def test_the_read_only_planner_keeps_every_setting() -> None:
    client = AnthropicClient(api_key="test", base_url="http://127.0.0.1:9")
    clock = VirtualClock()
    original = Planner(client, MODEL, registry(), clock=clock, max_tokens=123, max_repairs=1)
    copy = read_only_planner(original)
    assert copy.read_only is True
    assert original.read_only is False
    assert (copy.client, copy.model, copy.registry, copy.clock) == (
        client,
        MODEL,
        original.registry,
        clock,
    )
    assert (copy.max_tokens, copy.max_repairs, copy.retry, copy.budget) == (
        123,
        1,
        original.retry,
        None,
    )
