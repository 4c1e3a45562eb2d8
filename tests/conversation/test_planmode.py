"""Showing a plan for decision, and planning turns in and out of plan mode."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from plandag import approval
from plandag.conversation import (
    Conversation,
    ConversationError,
    ConversationStore,
    Origin,
    Turn,
    cut_notice,
    plan_turn,
    render_for_decision,
)
from plandag.dag.plan import Plan
from plandag.tools.boundary import WriteBoundary
from plandag.tools.registry import Registry

T0 = 1_700_000_000.0
H = "ab" * 32
READ_ONLY = ["json_select", "read_file", "xml_select"]
EVERY_TOOL = ["json_select", "read_file", "write_json", "xml_select"]

DECISION_2 = (
    f"Decision on plan {H} (all 2 steps):\n"
    "  approve  run this plan, with its effects (plan mode ends)\n"
    "  reject   with feedback: the planner revises the plan (plan mode stays on)\n"
    "  disarm   leave plan mode without running anything"
)


def long_plan(count: int) -> Plan:
    return Plan.model_validate(
        {
            "goal": "read every file",
            "steps": [
                {"id": i, "tool": "read_file", "args": {"path": f"data/f{i:02}.txt"}}
                for i in range(1, count + 1)
            ],
        }
    )


# -- render_for_decision ---------------------------------------------------------------------


def test_a_plan_that_fits_is_shown_whole(plan: Plan, registry: Registry) -> None:
    shown = render_for_decision(plan, H, 10_000, registry=registry)
    assert shown.text == (
        "Plan (2 steps): copy the data into a report\n"
        '  1. read_file {"path": "<param.input>"}\n'
        '  2. write_json {"data": "<step_1_result>", "path": "out/report.json"} after 1'
        "  [WRITE: out/report.json]\n" + DECISION_2
    )
    assert shown.notice is None
    assert shown.cut is False
    assert (shown.shown_steps, shown.total_steps, shown.plan_hash) == (2, 2, H)


def test_a_plan_too_long_is_cut_with_a_notice_and_the_decision_whole() -> None:
    plan = long_plan(30)
    header = "Plan (30 steps): read every file"
    lines = [f'  {i}. read_file {{"path": "data/f{i:02}.txt"}}' for i in range(1, 31)]
    decision = render_for_decision(plan, H, 10_000).decision
    notice_10 = f"… plan cut: showing 10 of 30 steps; the decision covers all 30 steps, hash {H}"
    assert cut_notice(10, 30, H) == notice_10
    exactly_10 = "\n".join([header, *lines[:10], notice_10, decision])

    shown = render_for_decision(plan, H, len(exactly_10))
    assert shown.text == exactly_10
    assert shown.body == "\n".join([header, *lines[:10]])
    assert shown.notice == notice_10
    assert (shown.shown_steps, shown.total_steps, shown.cut) == (10, 30, True)
    assert shown.decision == (
        f"Decision on plan {H} (all 30 steps):\n"
        "  approve  run this plan, with its effects (plan mode ends)\n"
        "  reject   with feedback: the planner revises the plan (plan mode stays on)\n"
        "  disarm   leave plan mode without running anything"
    )

    one_less = render_for_decision(plan, H, len(exactly_10) - 1)
    assert one_less.shown_steps == 9
    assert one_less.notice == cut_notice(9, 30, H)
    assert one_less.decision == decision
    assert len(one_less.text) <= len(exactly_10) - 1

    whole = "\n".join([header, *lines, decision])
    assert render_for_decision(plan, H, len(whole)).text == whole
    # One character short of the whole plan: the notice (139 characters) takes the room of
    # four step lines (38 or 39 characters each, with their newline).
    assert len(cut_notice(26, 30, H)) == 139
    assert render_for_decision(plan, H, len(whole) - 1).shown_steps == 26


def test_the_decision_is_never_cut_even_past_the_limit() -> None:
    shown = render_for_decision(long_plan(30), H, 10)
    assert shown.body == ""
    assert shown.shown_steps == 0
    assert shown.notice == (
        f"… plan cut: showing 0 of 30 steps; the decision covers all 30 steps, hash {H}"
    )
    assert shown.text == shown.notice + "\n" + shown.decision
    assert shown.decision.startswith(f"Decision on plan {H} (all 30 steps):")
    assert len(shown.text) > 10


def test_a_negative_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="max_chars must be >= 0"):
        render_for_decision(long_plan(1), H, -1)


# -- plan_turn -------------------------------------------------------------------------------


class Planner:
    """Answers from a script; records what it was given."""

    def __init__(self, *answers: Plan | str) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, list[str], list[str]]] = []

    async def __call__(
        self, message: str, history: Sequence[Turn], runnable: Registry
    ) -> Plan | str:
        self.calls.append((message, [turn.kind for turn in history], sorted(runnable.tools)))
        return self.answers.pop(0)


async def never_called(message: str, history: Sequence[Turn], runnable: Registry) -> Plan | str:
    raise AssertionError("the planner must not be called")


@pytest.mark.anyio
async def test_a_plan_mode_turn_runs_read_only_tools_and_ends_with_a_plan(
    plan: Plan, registry: Registry, tmp_path: Path
) -> None:
    boundary = WriteBoundary.from_specs(["out/"], base=tmp_path)
    conversation = Conversation.new("person", T0)
    conversation.arm(T0)
    planner = Planner(plan)
    turn = await plan_turn(
        conversation,
        "copy data.csv into a report",
        planner,
        registry,
        T0 + 1,
        params={"input": "data.csv"},
        write_boundary=boundary,
    )
    assert planner.calls == [("copy data.csv into a report", ["mode", "message"], READ_ONLY)]
    digest = approval.plan_hash(plan, {"input": "data.csv"}, boundary)
    assert turn.kind == "plan"
    assert turn.mode == "plan"
    assert turn.data["hash"] == digest
    assert turn.data["pending"] is True
    assert turn.data["in_reply_to"] == 1
    assert turn.plan == plan
    assert conversation.pending is not None
    assert conversation.pending.plan_hash == digest
    assert conversation.is_armed(T0 + 1) is True


@pytest.mark.anyio
async def test_armed_across_a_question_its_answer_and_a_rejection(
    plan: Plan, registry: Registry, store: ConversationStore
) -> None:
    conversation = store.create("person", T0)
    conversation.arm(T0)
    planner = Planner("Which file?", plan, plan)
    question = await plan_turn(conversation, "make a report", planner, registry, T0 + 1)
    assert question.kind == "question"
    assert question.text == "Which file?"
    assert conversation.is_armed(T0 + 1) is True

    shown = await plan_turn(conversation, "data.csv", planner, registry, T0 + 60)
    assert conversation.turns[3].kind == "answer"
    assert conversation.turns[3].mode == "plan"
    assert shown.kind == "plan"
    assert conversation.is_armed(T0 + 60) is True

    conversation.decide(
        approved=False, plan_hash=shown.data["hash"], now=T0 + 120, feedback="not out/"
    )
    assert conversation.is_armed(T0 + 120) is True
    revised = await plan_turn(conversation, "revise it", planner, registry, T0 + 121)
    assert revised.data["pending"] is True
    assert [call[2] for call in planner.calls] == [READ_ONLY, READ_ONLY, READ_ONLY]
    assert store.load(conversation.id).turns == conversation.turns


@pytest.mark.anyio
async def test_a_queued_message_is_planned_in_plan_mode(plan: Plan, registry: Registry) -> None:
    conversation = Conversation.new("person", T0)
    conversation.arm(T0)
    await plan_turn(conversation, "first", Planner(plan), registry, T0 + 1)
    queued = conversation.add_message("and the second", "person", T0 + 2, queued=True)
    planner = Planner(plan)
    turn = await plan_turn(conversation, queued, planner, registry, T0 + 3)
    assert planner.calls == [("and the second", ["mode", "message", "plan", "message"], READ_ONLY)]
    assert turn.data["in_reply_to"] == queued.index
    assert turn.data["pending"] is True
    assert conversation.queued_messages() == []
    assert conversation.is_armed(T0 + 3) is True


@pytest.mark.anyio
@pytest.mark.parametrize("origin", ["schedule", "event", "delegation", "pipeline", "api"])
async def test_an_automated_message_in_an_armed_conversation_stays_history(
    origin: Origin, plan: Plan, registry: Registry
) -> None:
    conversation = Conversation.new("person", T0)
    conversation.arm(T0)
    await plan_turn(conversation, "plan it", Planner(plan), registry, T0 + 1)
    pending = conversation.pending
    turn = await plan_turn(conversation, "job done", never_called, registry, T0 + 2, origin=origin)
    assert turn.kind == "message"
    assert turn.origin == origin
    assert turn.mode == "normal"
    assert turn.data == {"queued": False, "history_only": True}
    assert conversation.pending == pending
    assert conversation.is_armed(T0 + 2) is True


@pytest.mark.anyio
async def test_an_automated_conversation_never_enters_plan_mode(
    plan: Plan, registry: Registry
) -> None:
    conversation = Conversation.new("channel", T0)
    planner = Planner(plan)
    turn = await plan_turn(
        conversation, "nightly export", planner, registry, T0 + 1, origin="channel"
    )
    assert planner.calls == [("nightly export", ["message"], EVERY_TOOL)]
    assert turn.kind == "plan"
    assert turn.mode == "normal"
    assert turn.data["pending"] is False
    assert conversation.pending is None
    assert conversation.is_armed(T0 + 1) is False


@pytest.mark.anyio
async def test_a_channel_that_cannot_show_a_decision_ends_plan_mode(
    plan: Plan, registry: Registry
) -> None:
    conversation = Conversation.new("person", T0)
    conversation.arm(T0)
    turn = await plan_turn(conversation, "do it", Planner(plan), registry, T0 + 1, can_show=False)
    assert turn.data["pending"] is False
    assert conversation.end_reasons() == ["cannot_show_decision"]
    assert conversation.is_armed(T0 + 1) is False


@pytest.mark.anyio
async def test_after_approval_the_next_turn_is_normal(plan: Plan, registry: Registry) -> None:
    conversation = Conversation.new("person", T0)
    conversation.arm(T0)
    shown = await plan_turn(conversation, "do it", Planner(plan), registry, T0 + 1)
    decision = conversation.decide(approved=True, plan_hash=shown.data["hash"], now=T0 + 2)
    assert decision.plan == plan
    planner = Planner(plan)
    after = await plan_turn(conversation, "and again", planner, registry, T0 + 3)
    assert planner.calls[0][2] == EVERY_TOOL
    assert after.mode == "normal"
    assert after.data["pending"] is False


@pytest.mark.anyio
async def test_a_turn_of_another_conversation_is_refused(plan: Plan, registry: Registry) -> None:
    one = Conversation.new("person", T0)
    other = Conversation.new("person", T0)
    foreign = other.add_message("hi", "person", T0 + 1)
    with pytest.raises(ConversationError, match="is not a turn of conversation"):
        await plan_turn(one, foreign, never_called, registry, T0 + 2)
    armed = one.arm(T0 + 3)
    assert armed is not None
    with pytest.raises(ConversationError, match="is a mode turn, not a message"):
        await plan_turn(one, armed, never_called, registry, T0 + 4)
