"""Streaming dispatch: the wire scanner, and steps starting before the plan has arrived,
through the real Anthropic SDK streaming from the local Messages API server."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from plandag.brakes.clock import Clock, VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.checks.builtins import BUILTIN_CHECKS
from plandag.executors.data import parse_data_blocks
from plandag.models import AnthropicClient
from plandag.planner.agent import Agent, AgentResult
from plandag.planner.streaming import WireStepScanner
from plandag.scheduler import RunLimits, events
from plandag.testing import MessagesServer
from plandag.tools import tool
from plandag.tools.boundary import WriteBoundary
from plandag.tools.registry import Registry

MODEL = "claude-sonnet-4-6"
tool_calls: Counter[str] = Counter()
started_at: dict[str, float] = {}


@tool
def lookup(name: str) -> dict[str, Any]:
    """Look a name up."""
    tool_calls[f"lookup:{name}"] += 1
    started_at.setdefault(f"lookup:{name}", time.time())
    return {"name": name, "score": len(name)}


@tool
async def slow_lookup(name: str) -> dict[str, Any]:
    """Look a name up, slowly (2 s)."""
    tool_calls[f"slow_lookup:{name}"] += 1
    await anyio.sleep(2.0)
    return {"name": name, "score": len(name)}


@tool
def total(a: float, b: float) -> float:
    """Add two scores."""
    tool_calls["total"] += 1
    return a + b


@tool
def broken(name: str) -> dict[str, Any]:
    """A service that is always down (fails at once, permanently)."""
    tool_calls[f"broken:{name}"] += 1
    raise ValueError(f"service down for {name}")


@tool(effects="write", writes="path")
def save(path: str, data: str) -> str:
    """Write text to a file."""
    tool_calls["save"] += 1
    started_at["save"] = time.time()
    Path(path).write_text(data, encoding="utf-8")
    return path


def registry() -> Registry:
    return Registry([lookup, slow_lookup, broken, total, save], BUILTIN_CHECKS)


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    tool_calls.clear()
    started_at.clear()


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


async def run_agent(
    server: MessagesServer, *, clock: Clock | None = None, **options: Any
) -> AgentResult:
    client = AnthropicClient(api_key="test", base_url=server.url)
    agent = Agent(
        client,
        MODEL,
        registry(),
        stream=True,
        retry=RetryPolicy(retries=2, base_delay=0.5, jitter=False),
        clock=clock,
        limits=RunLimits(heartbeat_every=None),
        **{"approve": "auto", **options},  # the registry has a tool that writes
    )
    try:
        return await agent.run("Score a and b")
    finally:
        await client.aclose()


def step(i: int, tool_name: str, args: dict[str, Any], d: list[int]) -> dict[str, Any]:
    return {"i": i, "t": tool_name, "a": args, "d": d}


PLAN = {
    "g": "Score a and b",
    "s": [
        step(1, "lookup", {"name": "a"}, []),
        step(2, "lookup", {"name": "bb"}, []),
        step(3, "total", {"a": "<step_1_result.score>", "b": "<step_2_result.score>"}, [1, 2]),
    ],
    "o": "<step_3_result>",
}
PLAN_TEXT = json.dumps(PLAN, separators=(",", ":"))


# -- the scanner -------------------------------------------------------------------------------


def feed_all(text: str, size: int) -> tuple[list[tuple[int, Any]], WireStepScanner]:
    scanner = WireStepScanner()
    found = []
    for offset in range(0, len(text), size):
        for item in scanner.feed(text[offset : offset + size]):
            found.append((offset + size, item))
    return found, scanner


def test_the_scanner_hands_over_each_step_when_its_object_closes() -> None:
    found, scanner = feed_all(PLAN_TEXT, 1)
    assert [item for _, item in found] == PLAN["s"]
    # each step is handed over at the character that closes it, not later
    ends = [PLAN_TEXT.index(json.dumps(s, separators=(",", ":"))) for s in PLAN["s"]]
    lengths = [len(json.dumps(s, separators=(",", ":"))) for s in PLAN["s"]]
    assert [at for at, _ in found] == [
        end + length for end, length in zip(ends, lengths, strict=True)
    ]
    assert scanner.steps_closed is True
    assert scanner.text == PLAN_TEXT


def test_the_scanner_ignores_braces_in_strings_and_other_arrays() -> None:
    text = (
        '{"g":"a } ] tricky \\" goal [","p":[{"n":"x","t":"string"}],'
        '"s":[{"i":1,"t":"lookup","a":{"name":"}{\\"]"},"d":[]},'
        '{"i":2,"t":"total","a":{"a":{"k":[1,2]},"b":1},"d":[1],'
        '"c":[{"k":"not_empty"}]}],"o":"{\\"s\\":[{}]}"}'
    )
    found, scanner = feed_all(text, 7)
    assert [item for _, item in found] == [
        {"i": 1, "t": "lookup", "a": {"name": '}{"]'}, "d": []},
        {
            "i": 2,
            "t": "total",
            "a": {"a": {"k": [1, 2]}, "b": 1},
            "d": [1],
            "c": [{"k": "not_empty"}],
        },
    ]
    assert scanner.steps_closed is True


def test_the_scanner_sees_an_unfinished_step_as_not_ready() -> None:
    scanner = WireStepScanner()
    assert scanner.feed('{"g":"x","s":[{"i":1,"t":"lookup","a":{"name":"a"},"d":[]') == []
    assert scanner.steps_closed is False
    assert scanner.feed("},") == [{"i": 1, "t": "lookup", "a": {"name": "a"}, "d": []}]
    scanner.reset()
    assert scanner.text == ""
    assert scanner.feed('{"s":[{"i":2,"t":"lookup","d":[]}]}') == [{"i": 2, "t": "lookup", "d": []}]


# -- streaming dispatch ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_first_tool_starts_before_the_plan_has_ended(
    server: MessagesServer, tmp_path: Path
) -> None:
    # a write step early in the plan: held until the whole plan has compiled
    plan = {
        "g": "Score a and b, save it",
        "s": [
            step(1, "lookup", {"name": "a"}, []),
            step(2, "save", {"path": f"{tmp_path / 'note.txt'}", "data": "started"}, []),
            step(3, "lookup", {"name": "bb"}, []),
            step(4, "total", {"a": "<step_1_result.score>", "b": "<step_3_result.score>"}, [1, 3]),
        ],
        "o": "<step_4_result>",
    }
    server.tokens_per_second = 100.0  # ~100 tokens: about a second
    server.ttft = 0.05
    server.push_json(plan)
    result = await run_agent(server, write_boundary=WriteBoundary.from_specs([str(tmp_path)]))

    assert result.status == "succeeded"
    assert result.answer == 3.0
    [call] = result.llm_calls
    assert call.streamed is True
    # wall-clock stamps only: the session may open well before the call on a loaded machine
    stream_ended = call.started_at + call.duration_s
    assert result.first_tool_start_s is not None
    # the first lookup is the plan's first step: it starts while most of the plan is unsent
    assert started_at["lookup:a"] < stream_ended - 0.3
    # the step with effects never starts before the whole plan compiled and was released
    assert started_at["save"] >= stream_ended - 0.005
    assert (tmp_path / "note.txt").read_text(encoding="utf-8") == "started"
    assert len(server.message_requests) == 1
    assert server.message_requests[0].json["stream"] is True


@pytest.mark.anyio
async def test_a_streamed_plan_cut_at_max_tokens_fails_and_stops_its_started_steps(
    server: MessagesServer,
) -> None:
    cut = '{"g":"x","s":[{"i":1,"t":"slow_lookup","a":{"name":"a"},"d":[]},{"i":2,"t":"look'
    server.tokens_per_second = 400.0
    server.push_max_tokens(cut, usage={"output_tokens": 30})
    result = await run_agent(server)

    assert result.status == "failed"
    assert result.error is not None
    assert result.error.type == "TruncatedResponseError"
    assert "cut off at max_tokens" in result.error.message
    assert result.answer is None
    assert result.run.output is None
    assert result.plan is None  # never a shorter plan
    # the step that had started is cancelled; nothing else was ever added
    assert sorted(result.run.steps) == [1]
    assert result.run.steps[1].status == "cancelled"
    assert tool_calls == Counter({"slow_lookup:a": 1})
    assert len(server.message_requests) == 1


@pytest.mark.anyio
async def test_a_mid_stream_overloaded_event_is_retried_and_the_broken_attempt_discarded(
    server: MessagesServer,
) -> None:
    server.tokens_per_second = 200.0  # step 1 ends well before the stream breaks
    server.push_stream_error_after(len('{"g":"Score a and b","s":[') + 60, text=PLAN_TEXT)
    server.push_json(PLAN)
    clock = VirtualClock()
    seen: list[events.Event] = []
    result = await run_agent(server, clock=clock, observers=[seen.append])

    assert result.status == "succeeded"
    assert result.answer == 3.0
    assert clock.sleeps == [0.5]
    assert [record.error_reason for record in result.llm_calls] == ["overloaded_error", None]
    assert len(server.message_requests) == 2
    # step 1 ran during the broken stream; that attempt was discarded whole, so the retried
    # plan ran it again as if first (its result was not reused)
    assert tool_calls == Counter({"lookup:a": 2, "lookup:bb": 1, "total": 1})
    [discarded] = [event for event in seen if isinstance(event, events.StepsDiscarded)]
    assert discarded.step_ids == (1,)
    assert sorted(result.run.steps) == [1, 2, 3]
    assert {key: record.status for key, record in result.run.steps.items()} == {
        1: "succeeded",
        2: "succeeded",
        3: "succeeded",
    }


BROKEN = {
    "g": "Score a and b",
    "s": [
        step(1, "lookup", {"name": "a"}, []),
        step(2, "slow_lookup", {"name": "zz"}, []),
        step(4, "save", {"path": "broken.txt", "data": "<step_1_result.name>"}, [1]),
        step(3, "total", {"a": "<step_1_result.score>", "b": "<step_2_result.score>"}, [1, 2]),
    ],
    "o": "<step_3_result>",
}
RETRIED = {
    "g": "Score a and b",
    "s": [
        step(1, "lookup", {"name": "ccc"}, []),
        step(2, "lookup", {"name": "bb"}, []),
        step(3, "total", {"a": "<step_1_result.score>", "b": "<step_2_result.score>"}, [1, 2]),
        step(4, "save", {"path": "kept.txt", "data": "<step_1_result.name>"}, [1]),
    ],
    "o": "<step_3_result>",
}


@pytest.mark.anyio
async def test_a_planner_attempt_broken_mid_stream_is_discarded_whole(
    server: MessagesServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    broken_text = json.dumps(BROKEN, separators=(",", ":"))
    cut = broken_text.index('{"i":3')  # steps 1, 2 and 4 have arrived; 3 has not
    server.tokens_per_second = 200.0  # step 1 ends and step 2 is running when it breaks
    server.push_stream_error_after(cut, text=broken_text)
    server.push_json(RETRIED)
    seen: list[events.Event] = []
    result = await run_agent(server, clock=VirtualClock(), observers=[seen.append])

    assert result.status == "succeeded"
    assert result.answer == 5.0  # 3 ("ccc") + 2 ("bb"): nothing of the broken attempt
    assert result.run.steps[1].result == {"name": "ccc", "score": 3}
    # the retried plan's steps all ran; the broken attempt's lookup ran once, its slow
    # step was cancelled, and its step with effects never started
    assert tool_calls == Counter(
        {"lookup:a": 1, "slow_lookup:zz": 1, "lookup:ccc": 1, "lookup:bb": 1, "total": 1, "save": 1}
    )
    assert not (tmp_path / "broken.txt").exists()
    assert (tmp_path / "kept.txt").read_text(encoding="utf-8") == "ccc"
    cancelled = [event for event in seen if isinstance(event, events.StepCancelled)]
    assert [(event.step_id, event.reason) for event in cancelled] == [(2, "discarded")]
    [discarded] = [event for event in seen if isinstance(event, events.StepsDiscarded)]
    assert discarded.step_ids == (1, 2, 4)
    assert {key: record.status for key, record in result.run.steps.items()} == {
        1: "succeeded",
        2: "succeeded",
        3: "succeeded",
        4: "succeeded",
    }
    assert result.run.steps[2].tool == "lookup"


@pytest.mark.anyio
async def test_a_streamed_repair_keeps_the_steps_already_accepted(
    server: MessagesServer,
) -> None:
    bad = {
        "g": "Score a and b",
        "s": [
            step(1, "lookup", {"name": "a"}, []),
            step(2, "lookup_fast", {"name": "bb"}, []),
            step(3, "total", {"a": "<step_1_result.score>", "b": "<step_2_result.score>"}, [1, 2]),
        ],
        "o": "<step_3_result>",
    }
    server.push_json(bad)
    server.push_json(PLAN)
    result = await run_agent(server)

    assert result.status == "succeeded"
    assert result.answer == 3.0
    assert result.plan is not None
    assert [attempt.compiled for attempt in result.plan.attempts] == [False, True]
    assert tool_calls == Counter({"lookup:a": 1, "lookup:bb": 1, "total": 1})
    repair = server.message_requests[1].json["messages"][2]["content"]
    [block] = parse_data_blocks(repair)
    assert "error[unknown_tool]: tool 'lookup_fast' is not registered" in block.value
    assert repair.endswith(
        "Steps 1 were accepted and may already be running: keep each of them exactly as it "
        "was (same id, tool, arguments, dependencies and checks)."
    )


@pytest.mark.anyio
async def test_a_repair_that_changes_an_accepted_step_is_refused(server: MessagesServer) -> None:
    bad = {"g": "x", "s": [step(1, "lookup", {"name": "a"}, []), step(2, "nope", {}, [])]}
    changed = {"g": "x", "s": [step(1, "lookup", {"name": "z"}, [])], "o": "<step_1_result>"}
    server.push_json(bad)
    server.push_json(changed)
    server.push_json(changed)
    result = await run_agent(server)

    assert result.status == "failed"
    assert result.plan_did_not_compile is True
    assert [(d.code, d.step_id) for d in result.diagnostics] == [("duplicate_step_id", 1)]
    assert tool_calls == Counter({"lookup:a": 1})  # the changed step never ran
    assert len(server.message_requests) == 3


@pytest.mark.anyio
async def test_a_step_written_before_the_steps_it_needs_waits_for_them(
    server: MessagesServer,
) -> None:
    plan = {
        "g": "Score a and b",
        "s": [PLAN["s"][2], PLAN["s"][0], PLAN["s"][1]],  # total first, then its inputs
        "o": "<step_3_result>",
    }
    server.push_json(plan)
    result = await run_agent(server)
    assert result.status == "succeeded"
    assert result.answer == 3.0
    assert result.plan is not None
    assert [attempt.compiled for attempt in result.plan.attempts] == [True]
    assert tool_calls == Counter({"lookup:a": 1, "lookup:bb": 1, "total": 1})


@pytest.mark.anyio
async def test_a_step_arriving_after_its_upstream_failed_is_pruned_and_replanned(
    server: MessagesServer,
) -> None:
    # step 1 fails at once; the stream is slow enough (about 0.4 s between the two steps'
    # closing braces) that step 2, which needs step 1, arrives after the failure
    plan = {
        "g": "Score b",
        "s": [
            step(1, "broken", {"name": "b"}, []),
            step(2, "total", {"a": "<step_1_result.score>", "b": 1}, [1]),
        ],
        "o": "<step_2_result>",
    }
    patch = {
        "g": "Score b",
        "s": [
            step(3, "lookup", {"name": "b"}, []),
            step(4, "total", {"a": "<step_3_result.score>", "b": 1}, [3]),
        ],
        "o": "<step_4_result>",
    }
    server.tokens_per_second = 40.0
    server.push_json(plan)
    server.push_json(patch)
    seen: list[events.Event] = []

    def observe(event: events.Event) -> None:
        seen.append(event)
        if isinstance(event, events.StepSkipped):
            server.tokens_per_second = None  # the replan request is not paced

    result = await run_agent(server, observers=[observe])

    assert result.plan_did_not_compile is False
    assert result.error is None
    assert result.status == "succeeded"
    assert result.answer == 2.0
    # the scenario really happened: step 1 failed before step 2 joined the run
    order = [
        (type(event).__name__, getattr(event, "step_id", getattr(event, "step_ids", None)))
        for event in seen
        if isinstance(event, events.StepFailed | events.StepsAdded | events.StepSkipped)
    ]
    assert order[:4] == [
        ("StepsAdded", (1,)),
        ("StepFailed", 1),
        ("StepsAdded", (2,)),
        ("StepSkipped", 2),
    ]
    skipped = next(e for e in seen if isinstance(e, events.StepSkipped) and e.step_id == 2)
    assert (skipped.reason, skipped.detail) == ("upstream_failed", "upstream 1 failed")
    assert result.plan is not None
    assert [attempt.compiled for attempt in result.plan.attempts] == [True]
    steps = result.run.steps
    assert [
        (key, steps[key].status, steps[key].reason, steps[key].detail, steps[key].superseded_by)
        for key in sorted(steps)
    ] == [
        (1, "failed", "tool_error", "ValueError: service down for b", [3, 4]),
        (2, "skipped", "upstream_failed", "upstream 1 failed", [3, 4]),
        (3, "succeeded", None, None, None),
        (4, "succeeded", None, None, None),
    ]
    # the replanner, once, with the failure and the pruned step to replace
    [replan] = result.replans
    assert (replan.trigger, replan.replaced, replan.new_ids, replan.applied) == (
        "failure",
        (1, 2),
        (3, 4),
        True,
    )
    assert len(server.message_requests) == 2
    replan_prompt = server.message_requests[1].json["messages"][0]["content"]
    assert "step 2 (total): upstream 1 failed" in replan_prompt
    assert tool_calls == Counter({"broken:b": 1, "lookup:b": 1, "total": 1})
