"""The cap of replans without progress is counted per failed subgraph: independent branches
that each fail once keep their own counts, a part that keeps failing stops the run, parts
that share a step share a count, and progress resets only its own part's count. The ledger
on its own, then the agent against the local Messages API server through the Anthropic SDK
(the order of failures set by the tools, never by timing)."""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any

import anyio
import networkx as nx
import pytest

from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.checks.builtins import BUILTIN_CHECKS
from plandag.models import AnthropicClient
from plandag.planner.agent import Agent, AgentResult
from plandag.planner.progress import ProgressLedger, failure_subgraph
from plandag.scheduler import RunLimits
from plandag.scheduler.session import SessionState, StepFailure
from plandag.testing import MessagesServer
from plandag.tools import tool
from plandag.tools.registry import Registry

MODEL = "claude-sonnet-4-6"
WAIT_S = 10.0  # the longest a gated tool waits for its signal (a failing test, not a hang)

signals: dict[str, anyio.Event] = {}


def signal(name: str) -> anyio.Event:
    """The event set when the gated step ``name`` starts."""
    return signals.setdefault(name, anyio.Event())


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    signals.clear()


# -- the ledger on its own ---------------------------------------------------------------------


def state(
    succeeded: tuple[int, ...] = (),
    failed: tuple[int, ...] = (),
    pruned: tuple[int, ...] = (),
    superseded: tuple[int, ...] = (),
) -> SessionState:
    failures = {key: StepFailure("tool_error", None, "down") for key in failed}
    return SessionState(
        succeeded=succeeded,
        failed=types.MappingProxyType(failures),
        pruned=pruned,
        cancelled=(),
        superseded=superseded,
        held=(),
        pending=(),
        running=(),
        stop_reason=None,
        sealed=True,
    )


def graph(*edges: tuple[int, int], nodes: tuple[int, ...] = ()) -> nx.DiGraph:
    made = nx.DiGraph()
    made.add_nodes_from(nodes)
    made.add_edges_from(edges)
    return made


def test_the_subgraph_of_a_failure_is_the_step_and_its_descendants() -> None:
    g = graph((1, 3), (2, 3), (3, 4), nodes=(5,))
    assert failure_subgraph(g, state(failed=(1,), pruned=(3, 4))) == {1, 3, 4}
    # the joiner asked: every step not superseded
    assert failure_subgraph(g, state(succeeded=(1, 2, 3, 4, 5))) == {1, 2, 3, 4, 5}
    assert failure_subgraph(g, state(succeeded=(2, 3, 4, 5), superseded=(1,))) == {2, 3, 4, 5}


def test_independent_failures_keep_their_own_counts() -> None:
    ledger = ProgressLedger(2)
    g = graph(nodes=(1, 2, 3))
    first = state(failed=(1,))
    assert ledger.count(g, first) == 0
    ledger.replanned(g, first, [4])
    g.add_node(4)
    second = state(failed=(2,))
    assert ledger.count(g, second) == 0  # another branch: a count of its own
    ledger.replanned(g, second, [5])
    g.add_node(5)
    third = state(failed=(3,))
    assert ledger.count(g, third) == 0
    assert len(ledger.subgraphs) == 2


def test_the_same_subgraph_failing_again_without_progress_counts_up() -> None:
    ledger = ProgressLedger(2)
    g = graph(nodes=(1,))
    ledger.replanned(g, state(failed=(1,)), [2])  # 2 replaces 1
    g.add_node(2)
    assert ledger.count(g, state(failed=(2,), superseded=(1,))) == 1
    ledger.replanned(g, state(failed=(2,), superseded=(1,)), [3])
    g.add_node(3)
    assert ledger.count(g, state(failed=(3,), superseded=(1, 2))) == 2  # at the cap


def test_progress_resets_only_its_own_subgraph() -> None:
    ledger = ProgressLedger(2)
    g = graph(nodes=(1, 2))
    ledger.replanned(g, state(failed=(1,)), [3])  # part A: 1, then 3
    ledger.replanned(g, state(failed=(2,)), [4])  # part B: 2, then 4
    g.add_nodes_from([3, 4])
    # 4 succeeded (B's progress), 3 failed: A counts up all the same
    now = state(succeeded=(4,), failed=(3,), superseded=(1, 2))
    assert ledger.count(g, now) == 1
    ledger.replanned(g, now, [5])
    g.add_node(5)
    assert ledger.count(g, state(succeeded=(4,), failed=(5,), superseded=(1, 2, 3))) == 2
    # a step of A that succeeds is A's progress
    ledger2 = ProgressLedger(2)
    g2 = graph((3, 4), nodes=(1,))
    ledger2.replanned(g2, state(failed=(1,)), [3, 4])
    assert ledger2.count(g2, state(succeeded=(3,), failed=(4,), superseded=(1,))) == 0


def test_subgraphs_that_share_a_step_share_one_count() -> None:
    ledger = ProgressLedger(2)
    g = graph((1, 3), (2, 3))
    ledger.replanned(g, state(failed=(1,), pruned=(3,)), [4, 5])
    g.add_edges_from([(4, 5), (2, 5)])  # 5 replaces 3: it still needs 2
    # 2 fails: its subgraph (2, 5) shares 5 with the first one
    second = state(failed=(2,), pruned=(5,), superseded=(1, 3))
    assert ledger.count(g, second) == 1
    ledger.replanned(g, second, [6])
    assert len(ledger.subgraphs) == 1
    assert ledger.subgraphs[0].steps == {1, 2, 3, 4, 5, 6}


def test_a_replan_without_failures_covers_the_whole_live_plan() -> None:
    ledger = ProgressLedger(2)
    g = graph((1, 2))
    joined = state(succeeded=(1, 2))
    assert ledger.count(g, joined) == 0
    ledger.replanned(g, joined, [3])
    g.add_node(3)
    assert ledger.count(g, state(succeeded=(1, 2), failed=(3,))) == 1


def test_an_instruction_adds_its_steps_without_counting() -> None:
    ledger = ProgressLedger(2)
    g = graph(nodes=(1,))
    ledger.replanned(g, state(failed=(1,)), [2])
    ledger.joined([2], [3])
    [only] = ledger.subgraphs
    assert (only.steps, only.without_progress, only.replans) == ({1, 2, 3}, 0, 1)
    ledger.joined([9], [10])  # steps of no failed part: nothing to join
    assert len(ledger.subgraphs) == 1
    with pytest.raises(ValueError, match="must be >= 1"):
        ProgressLedger(0)


# -- the agent ------------------------------------------------------------------------------------


@tool
def broken(name: str) -> dict[str, Any]:
    """A service that is always down."""
    raise ValueError(f"service down for {name}")


@tool
def lookup(name: str) -> dict[str, Any]:
    """Look a name up; returns its score."""
    return {"name": name, "score": len(name)}


@tool
async def gate(name: str, after: str, fail: bool) -> dict[str, Any]:
    """Wait until the gated step named ``after`` has started, then fail or return the
    name's score."""
    signal(name).set()
    with anyio.fail_after(WAIT_S):
        await signal(after).wait()
    if fail:
        raise ValueError(f"service down for {name}")
    return {"name": name, "score": len(name)}


@tool
def total(a: float, b: float) -> float:
    """Add two scores."""
    return a + b


def registry() -> Registry:
    return Registry([broken, lookup, gate, total], BUILTIN_CHECKS)


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


async def run_agent(server: MessagesServer, **options: Any) -> AgentResult:
    client = AnthropicClient(api_key="test", base_url=server.url)
    agent = Agent(
        client,
        MODEL,
        registry(),
        retry=RetryPolicy(retries=0),
        clock=VirtualClock(),
        **{"limits": RunLimits(heartbeat_every=None), "approve": "auto", **options},
    )
    try:
        return await agent.run("Score the names")
    finally:
        await client.aclose()


def step(i: int, tool_name: str, args: dict[str, Any], d: list[int]) -> dict[str, Any]:
    return {"i": i, "t": tool_name, "a": args, "d": d}


def gated(i: int, name: str, after: str, *, fail: bool) -> dict[str, Any]:
    return step(i, "gate", {"name": name, "after": after, "fail": fail}, [])


def output(**steps: int) -> dict[str, str]:
    """The output as a JSON template: each key the result of its step."""
    return {
        "json": "{"
        + ",".join(f'"{key}":"<step_{value}_result>"' for key, value in steps.items())
        + "}"
    }


@pytest.mark.anyio
async def test_three_independent_branches_each_failing_once_are_each_replanned(
    server: MessagesServer,
) -> None:
    # a fails at once; b fails once a's replacement started (so after the first replan);
    # c once b's replacement started; the replacements succeed only once c's started: no
    # step succeeds between the three replans
    server.push_json(
        {
            "g": "Score",
            "s": [
                step(1, "broken", {"name": "a"}, []),
                gated(2, "b", "a2", fail=True),
                gated(3, "c", "b2", fail=True),
            ],
            "o": output(a=1, b=2, c=3),
        }
    )
    server.push_json(
        {"g": "Score", "s": [gated(4, "a2", "c2", fail=False)], "o": output(a=4, b=2, c=3)}
    )
    server.push_json(
        {"g": "Score", "s": [gated(5, "b2", "c2", fail=False)], "o": output(a=4, b=5, c=3)}
    )
    server.push_json(
        {"g": "Score", "s": [gated(6, "c2", "c2", fail=False)], "o": output(a=4, b=5, c=6)}
    )
    result = await run_agent(server)

    assert result.status == "succeeded", result.run.escalation_detail
    assert result.gave_up is None
    assert [(r.replaced, r.new_ids) for r in result.replans] == [
        ((1,), (4,)),
        ((2,), (5,)),
        ((3,), (6,)),
    ]
    assert result.answer == {
        "a": {"name": "a2", "score": 2},
        "b": {"name": "b2", "score": 2},
        "c": {"name": "c2", "score": 2},
    }


@pytest.mark.anyio
async def test_two_independent_branches_do_not_share_a_cap_of_one(server: MessagesServer) -> None:
    server.push_json(
        {
            "g": "Score",
            "s": [step(1, "broken", {"name": "a"}, []), gated(2, "b", "a2", fail=True)],
            "o": output(a=1, b=2),
        }
    )
    server.push_json({"g": "Score", "s": [gated(3, "a2", "b2", fail=False)], "o": output(a=3, b=2)})
    server.push_json({"g": "Score", "s": [gated(4, "b2", "b2", fail=False)], "o": output(a=3, b=4)})
    result = await run_agent(server, max_replans_without_progress=1)

    assert result.status == "succeeded", result.run.escalation_detail
    assert len(result.replans) == 2


@pytest.mark.anyio
async def test_the_same_subgraph_failing_twice_without_progress_escalates(
    server: MessagesServer,
) -> None:
    server.push_json({"g": "Score", "s": [step(1, "broken", {"name": "a"}, [])], "o": output(a=1)})
    server.push_json({"g": "Score", "s": [step(2, "broken", {"name": "a2"}, [])], "o": output(a=2)})
    server.push_json({"g": "Score", "s": [step(3, "broken", {"name": "a3"}, [])], "o": output(a=3)})
    server.push_json({"g": "Score", "s": [step(4, "lookup", {"name": "a4"}, [])], "o": output(a=4)})
    result = await run_agent(
        server, limits=RunLimits(heartbeat_every=None, breaker_after=None), max_blocked=None
    )

    assert len(server.message_requests) == 1 + 2  # the fourth answer is never asked for
    assert (result.status, result.gave_up) == ("escalated", "no_progress")
    assert result.run.escalation == "replan_caps"
    assert result.run.escalation_detail is not None
    assert result.run.escalation_detail.startswith(
        "2 replans in a row of the failing part of the plan completed none of its steps "
        "(the no-progress cap): step 3 failed"
    )


@pytest.mark.anyio
async def test_progress_in_another_branch_does_not_reset_the_count(
    server: MessagesServer,
) -> None:
    # a fails and is replanned (a2); b fails and is replanned (b2, which succeeds: b's
    # progress); a2 fails once b2 started, is replanned (a3), a3 fails: a's part was
    # replanned twice in a row without progress, whatever b did
    server.push_json(
        {
            "g": "Score",
            "s": [step(1, "broken", {"name": "a"}, []), gated(2, "b", "a2", fail=True)],
            "o": output(a=1, b=2),
        }
    )
    server.push_json({"g": "Score", "s": [gated(3, "a2", "b2", fail=True)], "o": output(a=3)})
    server.push_json({"g": "Score", "s": [gated(4, "b2", "b2", fail=False)], "o": output(a=3, b=4)})
    server.push_json({"g": "Score", "s": [step(5, "broken", {"name": "a3"}, [])], "o": output(a=5)})
    server.push_json({"g": "Score", "s": [step(6, "broken", {"name": "a4"}, [])], "o": output(a=6)})
    server.push_json({"g": "Score", "s": [step(7, "lookup", {"name": "a5"}, [])], "o": output(a=7)})
    result = await run_agent(
        server,
        limits=RunLimits(heartbeat_every=None, breaker_after=None),
        max_blocked=None,
        max_replans=5,
    )

    assert (result.status, result.gave_up) == ("escalated", "no_progress")
    assert [r.replaced for r in result.replans] == [(1,), (2,), (3,)]
    assert result.run.steps[4].status == "succeeded"
    assert result.run.steps[5].status == "failed"


@pytest.mark.anyio
async def test_failures_whose_subgraphs_share_a_step_share_one_count(
    server: MessagesServer,
) -> None:
    # 3 needs 1 and 2; 1 fails (3 pruned), its patch's 5 still needs 2; 2 fails (5
    # pruned): the second failure's part shares step 5 with the first's, so they count
    # together; the next failure in it is the second replan in a row without progress
    server.push_json(
        {
            "g": "Score",
            "s": [
                step(1, "broken", {"name": "a"}, []),
                gated(2, "b", "a2", fail=True),
                step(
                    3, "total", {"a": "<step_1_result.score>", "b": "<step_2_result.score>"}, [1, 2]
                ),
            ],
            "o": "<step_3_result>",
        }
    )
    server.push_json(
        {
            "g": "Score",
            "s": [
                gated(4, "a2", "b2", fail=True),
                step(
                    5, "total", {"a": "<step_4_result.score>", "b": "<step_2_result.score>"}, [4, 2]
                ),
            ],
            "o": "<step_5_result>",
        }
    )
    server.push_json(
        {
            "g": "Score",
            "s": [
                gated(6, "b2", "b2", fail=True),
                step(7, "total", {"a": 1, "b": "<step_6_result.score>"}, [6]),
            ],
            "o": "<step_7_result>",
        }
    )
    server.push_json({"g": "Score", "s": [step(8, "lookup", {"name": "c"}, [])], "o": output(c=8)})
    result = await run_agent(server, limits=RunLimits(heartbeat_every=None, breaker_after=None))

    assert (result.status, result.gave_up) == ("escalated", "no_progress")
    assert [r.replaced for r in result.replans] == [(1, 3), (2, 5)]
    assert len(server.message_requests) == 1 + 2


@pytest.mark.anyio
async def test_the_run_wide_cap_of_three_replans_stays(server: MessagesServer) -> None:
    # four independent branches, each failing once after the previous one's replacement
    # started: each part's own count stays at 0, but the fourth replan would be the run's
    # fourth, so the run is handed to a person with the max_replans cap
    server.push_json(
        {
            "g": "Score",
            "s": [
                step(1, "broken", {"name": "a"}, []),
                gated(2, "b", "a2", fail=True),
                gated(3, "c", "b2", fail=True),
                gated(4, "d", "c2", fail=True),
            ],
            "o": output(a=1, b=2, c=3, d=4),
        }
    )
    server.push_json(
        {"g": "Score", "s": [gated(5, "a2", "a2", fail=False)], "o": output(a=5, b=2, c=3, d=4)}
    )
    server.push_json(
        {"g": "Score", "s": [gated(6, "b2", "b2", fail=False)], "o": output(a=5, b=6, c=3, d=4)}
    )
    server.push_json(
        {"g": "Score", "s": [gated(7, "c2", "c2", fail=False)], "o": output(a=5, b=6, c=7, d=4)}
    )
    server.push_json(
        {"g": "Score", "s": [gated(8, "d2", "d2", fail=False)], "o": output(a=5, b=6, c=7, d=8)}
    )
    result = await run_agent(server, limits=RunLimits(heartbeat_every=None, breaker_after=None))

    assert (result.status, result.gave_up) == ("escalated", "max_replans")
    assert result.run.escalation == "replan_caps"
    assert [r.replaced for r in result.replans] == [(1,), (2,), (3,)]
    assert len(server.message_requests) == 1 + 3  # the fifth answer is never asked for
    assert [result.run.steps[key].status for key in (5, 6, 7)] == ["succeeded"] * 3
