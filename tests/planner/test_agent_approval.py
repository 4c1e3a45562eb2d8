"""The approval gate in the agent (ARCHITECTURE.md, "People in the loop"): a plan with effects waits
for a person; a rejection's feedback reaches the planner verbatim as the instruction for the
revision (asserted on the request the local Messages API server received); an irreversible step
asks even with ``auto``; ``never`` ends the run ``awaiting_approval``; a stale decision is
refused; time waiting for a person is not counted by the deadline."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from plandag.approval import ApprovalRequest, CallbackApprover, Decision, plan_hash
from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.checks.builtins import BUILTIN_CHECKS
from plandag.models import AnthropicClient
from plandag.planner.agent import Agent, AgentResult
from plandag.scheduler import RunLimits
from plandag.testing import MessagesServer
from plandag.tools import tool
from plandag.tools.boundary import WriteBoundary
from plandag.tools.registry import Registry

MODEL = "claude-sonnet-4-6"
calls: Counter[str] = Counter()
FEEDBACK = (
    "Não publique no blog público; use o canal interno #finance.\n"
    "E nada de valores acima de R$ 1.000,00 — FEEDBACK-7f3a"
)


@tool
def lookup(name: str) -> dict[str, Any]:
    """Look a name up; returns its score."""
    calls[f"lookup:{name}"] += 1
    return {"name": name, "score": len(name)}


@tool(effects="write")
def publish(channel: str, text: str) -> str:
    """Publish TEXT on CHANNEL."""
    calls[f"publish:{channel}"] += 1
    return f"published on {channel}"


@tool(effects="irreversible")
def wire_money(amount: float) -> str:
    """Send AMOUNT (cannot be undone)."""
    calls["wire_money"] += 1
    return f"sent {amount}"


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    calls.clear()


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


def plan_publishing(channel: str) -> dict[str, Any]:
    return {
        "g": "Score a and publish it",
        "s": [
            {"i": 1, "t": "lookup", "a": {"name": "a"}, "d": []},
            {
                "i": 2,
                "t": "publish",
                "a": {"channel": f"{channel}", "text": "score <step_1_result.score>"},
                "d": [1],
            },
        ],
        "o": "<step_2_result>",
    }


async def run_agent(server: MessagesServer, **options: Any) -> AgentResult:
    client = AnthropicClient(api_key="test", base_url=server.url)
    options.setdefault("limits", RunLimits(heartbeat_every=None))
    agent = Agent(
        client,
        MODEL,
        Registry([lookup, publish, wire_money], BUILTIN_CHECKS),
        retry=RetryPolicy(retries=0),
        clock=VirtualClock(),
        **options,
    )
    try:
        return await agent.run("Score a and publish it")
    finally:
        await client.aclose()


def answers(*decisions: tuple[bool, str]) -> tuple[CallbackApprover, list[ApprovalRequest]]:
    seen: list[ApprovalRequest] = []
    queue = list(decisions)

    def decide(request: ApprovalRequest) -> Decision:
        seen.append(request)
        approved, feedback = queue.pop(0)
        return Decision(approved, request.plan_hash, feedback=feedback, who="ana")

    return CallbackApprover(decide), seen


@pytest.mark.anyio
async def test_rejection_feedback_reaches_the_planner_verbatim(server: MessagesServer) -> None:
    server.push_json(plan_publishing("blog"))
    server.push_json(plan_publishing("finance"))
    approver, seen = answers((False, FEEDBACK), (True, ""))
    result = await run_agent(server, approve="ask", approver=approver)

    assert result.status == "succeeded"
    assert result.answer == "published on finance"
    assert calls["publish:blog"] == 0  # the rejected plan's effect never ran
    assert calls["publish:finance"] == 1
    assert result.revisions == (FEEDBACK,)
    assert [(d.approved, d.feedback) for d in result.decisions] == [(False, FEEDBACK), (True, "")]
    assert len(seen) == 2
    assert seen[0].effects == ((2, "publish", "write", ()),)

    requests = server.message_requests
    assert len(requests) == 2
    first = json.dumps(requests[0].body, ensure_ascii=False)
    assert "FEEDBACK-7f3a" not in first
    [message] = requests[1].body["messages"]
    revision = message["content"]
    # the feedback arrives whole, as the person wrote it
    assert FEEDBACK in revision
    assert (
        "The person's feedback on plan 1 (the instruction for this revision, in full):\n"
        + (FEEDBACK)
        in revision
    )
    assert '"channel": "blog"' in revision  # the rejected plan comes with it


@pytest.mark.anyio
async def test_rejections_past_the_cap_end_the_run_rejected(server: MessagesServer) -> None:
    for _ in range(2):
        server.push_json(plan_publishing("blog"))
    approver, _ = answers((False, "no"), (False, "still no"))
    result = await run_agent(server, approve="ask", approver=approver, max_revisions=1)
    assert result.status == "rejected"
    assert result.revisions == ("no",)
    assert calls["publish:blog"] == 0
    assert len(server.message_requests) == 2


@pytest.mark.anyio
async def test_never_ends_awaiting_approval_with_the_plan_hash(server: MessagesServer) -> None:
    server.push_json(plan_publishing("blog"))
    result = await run_agent(server, approve="never")
    assert result.status == "awaiting_approval"
    assert calls["publish:blog"] == 0
    # the pending approval held only the step with effects: the lookup ran to its end
    assert calls["lookup:a"] == 1
    assert result.run.steps[1].status == "succeeded"
    assert result.run.steps[1].result == {"name": "a", "score": 1}
    assert (result.run.steps[2].status, result.run.steps[2].reason) == ("skipped", "effects_held")
    assert result.approval is not None
    request = result.approval
    # the agent's default write boundary (the working directory) is part of the hash
    assert request.plan_hash == plan_hash(request.plan, {}, WriteBoundary.from_specs([Path.cwd()]))
    assert [step.tool for step in request.plan.steps] == ["lookup", "publish"]
    assert result.to_json_dict()["approval"]["plan_hash"] == request.plan_hash
    # the tools declare no typical duration: the estimate is unknown, and said so
    assert result.to_json_dict()["approval"]["estimate_text"] == (
        "estimated cost and time unknown: steps 1, 2 have no estimate"
    )


@pytest.mark.anyio
async def test_auto_approves_writes_but_asks_for_irreversible(server: MessagesServer) -> None:
    server.push_json(plan_publishing("blog"))
    approver, seen = answers()
    result = await run_agent(server, approve="auto", approver=approver)
    assert result.status == "succeeded"
    assert seen == []
    assert calls["publish:blog"] == 1

    server.push_json(
        {
            "g": "Pay",
            "s": [
                {"i": 1, "t": "lookup", "a": {"name": "abc"}, "d": []},
                {"i": 2, "t": "wire_money", "a": {"amount": "<step_1_result.score>"}, "d": [1]},
            ],
            "o": "<step_2_result>",
        }
    )
    approver, seen = answers((True, ""))
    result = await run_agent(server, approve="auto", approver=approver)
    assert result.status == "succeeded"
    assert len(seen) == 1
    assert seen[0].reason == "the plan has irreversible effects"
    assert calls["wire_money"] == 1


@pytest.mark.anyio
async def test_a_read_only_plan_never_asks(server: MessagesServer) -> None:
    server.push_json(
        {
            "g": "Score a",
            "s": [{"i": 1, "t": "lookup", "a": {"name": "a"}, "d": []}],
            "o": "<step_1_result>",
        }
    )
    approver, seen = answers()
    result = await run_agent(server, approve="ask", approver=approver)
    assert result.status == "succeeded"
    assert seen == []


@pytest.mark.anyio
async def test_a_decision_for_another_plan_is_refused(server: MessagesServer) -> None:
    server.push_json(plan_publishing("blog"))

    def stale(request: ApprovalRequest) -> Decision:
        return Decision(True, "0" * 64, who="ana")

    result = await run_agent(server, approve="ask", approver=CallbackApprover(stale))
    assert result.status == "awaiting_approval"
    assert result.error is not None
    assert result.error.type == "StaleDecisionError"
    assert calls["publish:blog"] == 0


@pytest.mark.anyio
async def test_time_waiting_for_a_person_is_not_counted_by_the_deadline(
    server: MessagesServer,
) -> None:
    server.push_json(plan_publishing("blog"))

    async def slow(request: ApprovalRequest) -> Decision:
        await anyio.sleep(1.2)  # past the whole run's cap of 0.8 s
        return Decision(True, request.plan_hash, who="ana")

    result = await run_agent(
        server,
        approve="ask",
        approver=CallbackApprover(slow),
        limits=RunLimits(max_seconds=0.8, heartbeat_every=None),
    )
    assert result.status == "succeeded"
    assert calls["publish:blog"] == 1


@pytest.mark.anyio
async def test_time_waiting_for_a_person_is_not_a_stall(server: MessagesServer) -> None:
    from plandag.scheduler.events import Stall

    server.push_json(plan_publishing("blog"))
    seen: list[object] = []

    async def slow(request: ApprovalRequest) -> Decision:
        await anyio.sleep(0.9)  # three times the stall threshold
        return Decision(True, request.plan_hash, who="ana")

    result = await run_agent(
        server,
        approve="ask",
        approver=CallbackApprover(slow),
        observers=[seen.append],
        limits=RunLimits(stall_after=0.3, stop_on_stall=True, heartbeat_every=None),
    )
    assert result.status == "succeeded"
    assert [event for event in seen if isinstance(event, Stall)] == []


@pytest.mark.anyio
async def test_an_edit_in_the_request_makes_a_new_version_approved_at_once(
    server: MessagesServer, tmp_path: Path
) -> None:
    server.push_json(plan_publishing("blog"))
    seen: list[ApprovalRequest] = []

    def edit(request: ApprovalRequest) -> Decision:
        seen.append(request)
        return Decision(True, request.plan_hash, who="ana", edit_steps={2: {"channel": "finance"}})

    result = await run_agent(server, approve="ask", approver=CallbackApprover(edit))
    assert result.status == "succeeded"
    assert result.answer == "published on finance"
    assert (calls["publish:blog"], calls["publish:finance"]) == (0, 1)
    assert len(seen) == 1  # decided in the same request
    [amendment] = result.amendments
    assert (amendment.version, amendment.new_version, amendment.who) == (1, 2, "ana")
    assert amendment.plan_hash == seen[0].plan_hash
    assert amendment.new_plan_hash != amendment.plan_hash
    assert [(step.step_id, step.decision) for step in amendment.steps] == [
        (1, "approved"),
        (2, "edited"),
    ]
    assert amendment.steps[1].args == {"channel": "finance", "text": "score <step_1_result.score>"}
    assert [plan.steps[1].args["channel"] for plan in result.plan_versions] == ["blog", "finance"]
    assert result.approval is not None
    assert result.approval.plan_hash == amendment.new_plan_hash

    # what plandag run stores of it: both versions, the decisions, one per step
    from plandag.runs.planned import record_agent_run
    from plandag.store import open_store

    store = open_store(tmp_path / "runs.sqlite3")
    try:
        store.create_run("r1", command="run", goal="g", params={}, options={})
        record_agent_run(store, None, "r1", result, write_boundary=None, params={})
        versions = store.plan_versions("r1")
        assert [(v.version, v.hash, v.source, v.approved_by) for v in versions] == [
            (1, amendment.plan_hash, "planner", None),
            (2, amendment.new_plan_hash, "amended", "ana"),
        ]
        assert [(d.version, d.decision, d.who) for d in store.decisions("r1")] == [
            (1, "amended", "ana"),
            (2, "approved", "ana"),
        ]
        assert [(d.version, d.step_id, d.decision) for d in store.step_decisions("r1")] == [
            (1, 1, "approved"),
            (1, 2, "edited"),
        ]
    finally:
        store.close()


@pytest.mark.anyio
async def test_a_rejected_step_is_dropped_and_replanned(server: MessagesServer) -> None:
    server.push_json(
        {
            "g": "Pay",
            "s": [
                {"i": 1, "t": "lookup", "a": {"name": "abc"}, "d": []},
                {"i": 2, "t": "wire_money", "a": {"amount": "<step_1_result.score>"}, "d": [1]},
                {
                    "i": 3,
                    "t": "publish",
                    "a": {"channel": "blog", "text": "<step_2_result>"},
                    "d": [2],
                },
            ],
            "o": "<step_3_result>",
        }
    )
    server.push_json(  # the replan of the rejected part: no money moves
        {
            "g": "Pay",
            "s": [{"i": 4, "t": "publish", "a": {"channel": "finance", "text": "to pay"}, "d": []}],
            "o": "<step_4_result>",
        }
    )
    answers_given: list[ApprovalRequest] = []

    def decide(request: ApprovalRequest) -> Decision:
        answers_given.append(request)
        if len(answers_given) == 1:
            return Decision(
                True, request.plan_hash, who="ana", reject_steps=(2,), feedback="no wires"
            )
        return Decision(True, request.plan_hash, who="ana")

    result = await run_agent(server, approve="ask", approver=CallbackApprover(decide))
    assert result.status == "succeeded"
    assert result.answer == "published on finance"
    assert calls["wire_money"] == 0
    assert calls["publish:blog"] == 0
    assert calls["lookup:abc"] == 1
    steps = result.run.steps
    assert (steps[2].status, steps[2].reason) == ("skipped", "rejected")
    assert steps[2].detail == "rejected by ana in the approval request: no wires"
    assert (steps[3].status, steps[3].reason) == ("skipped", "rejected")
    assert steps[3].detail == "upstream 2 was rejected"
    assert steps[2].superseded_by == [4]
    [amendment] = result.amendments
    assert [(step.step_id, step.decision) for step in amendment.steps] == [
        (1, "approved"),
        (2, "rejected"),
        (3, "dropped"),
    ]
    assert len(answers_given) == 2  # the replan with an effect asked again
    replan_prompt = json.dumps(server.message_requests[1].body, ensure_ascii=False)
    assert "no wires" in replan_prompt  # the replanner knows why the step was dropped
