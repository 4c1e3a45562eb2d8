"""Plan-mode rules of a conversation, and its persistence (README, "Plan mode
for conversations")."""

from __future__ import annotations

import sqlite3

import pytest

from plandag import approval
from plandag.conversation import (
    ORIGINS,
    Conversation,
    ConversationError,
    ConversationStore,
    ConversationSummary,
    Origin,
    PendingDecision,
    PlanModeError,
    StaleDecisionError,
    Turn,
    allowed_registry,
    check_tool_allowed,
)
from plandag.dag.plan import Plan
from plandag.tools.registry import Registry

T0 = 1_700_000_000.0
DAY = 86_400.0
AUTOMATED: tuple[Origin, ...] = ("schedule", "event", "delegation", "pipeline", "api", "channel")
H1 = "1" * 64
H2 = "2" * 64


def test_origins_are_the_seven_of_the_issue() -> None:
    assert ("person", *AUTOMATED) == ORIGINS


# -- read-only tools -------------------------------------------------------------------------


def test_allowed_registry_keeps_only_tools_without_effects(registry: Registry) -> None:
    restricted = allowed_registry(registry)
    assert sorted(restricted.tools) == ["json_select", "read_file", "xml_select"]
    assert sorted(registry.tools) == ["json_select", "read_file", "write_json", "xml_select"]
    assert restricted.checks == registry.checks


def test_a_tool_with_effects_is_refused_in_plan_mode(registry: Registry) -> None:
    write_json = registry.tools["write_json"]
    with pytest.raises(PlanModeError) as caught:
        check_tool_allowed(write_json)
    assert caught.value.tool == "write_json"
    assert str(caught.value) == (
        "tool write_json has write effects and plan mode runs only tools without effects; "
        "approve the plan to run it, or disarm plan mode"
    )
    assert isinstance(caught.value, PermissionError)
    check_tool_allowed(registry.tools["read_file"])  # no error


def test_the_conversation_refuses_effects_only_while_armed(registry: Registry) -> None:
    write_json = registry.tools["write_json"]
    conversation = Conversation.new("person", T0)
    conversation.check_tool_allowed(write_json, T0)  # not armed: allowed
    assert conversation.registry_for(registry, T0) is registry
    conversation.arm(T0 + 1)
    with pytest.raises(PlanModeError):
        conversation.check_tool_allowed(write_json, T0 + 2)
    conversation.check_tool_allowed(registry.tools["read_file"], T0 + 2)
    assert sorted(conversation.registry_for(registry, T0 + 2).tools) == [
        "json_select",
        "read_file",
        "xml_select",
    ]
    conversation.disarm(T0 + 3)
    conversation.check_tool_allowed(write_json, T0 + 4)  # disarmed: allowed again


# -- arming and what keeps it armed ------------------------------------------------------------


@pytest.mark.parametrize("origin", AUTOMATED)
def test_a_conversation_of_an_automated_origin_can_never_be_armed(origin: Origin) -> None:
    conversation = Conversation.new(origin, T0)
    with pytest.raises(PlanModeError) as caught:
        conversation.arm(T0)
    assert str(caught.value) == (
        f"conversation {conversation.id} was started by {origin}, and only a conversation "
        "started by a person can enter plan mode"
    )
    assert conversation.turns == ()
    assert conversation.is_armed(T0) is False
    assert conversation.mode_for("person", T0) == "normal"


def test_arm_records_a_mode_turn_once() -> None:
    conversation = Conversation.new("person", T0)
    turn = conversation.arm(T0 + 5)
    assert turn == Turn(
        index=0,
        kind="mode",
        time=T0 + 5,
        text="plan mode armed",
        origin=None,
        mode="plan",
        data={"armed": True, "reason": None},
    )
    assert conversation.arm(T0 + 6) is None
    assert len(conversation.turns) == 1
    assert conversation.is_armed(T0 + 6) is True
    assert conversation.deadline() == T0 + 5 + DAY


def test_an_answer_to_the_planners_question_keeps_it_armed() -> None:
    conversation = Conversation.new("person", T0)
    conversation.arm(T0)
    conversation.add_message("clean up the reports folder", "person", T0 + 1)
    question = conversation.ask("Which folder: out/ or reports/?", T0 + 2, in_reply_to=1)
    assert conversation.open_question == question.index == 2
    answer = conversation.add_message("reports/", "person", T0 + 30)
    assert answer.kind == "answer"
    assert answer.mode == "plan"
    assert answer.data == {"question": 2}
    assert conversation.open_question is None
    assert conversation.is_armed(T0 + 30) is True


def test_a_rejection_with_feedback_keeps_it_armed_and_restarts_the_clock(plan: Plan) -> None:
    conversation = Conversation.new("person", T0)
    conversation.arm(T0)
    conversation.end_turn_with_plan(plan, H1, T0 + 10)
    assert conversation.pending == PendingDecision(turn=1, plan_hash=H1, shown_at=T0 + 10)
    feedback = "Write to out/summary.json instead, and keep the raw data.\nThanks!"
    decision = conversation.decide(
        approved=False, plan_hash=H1, now=T0 + 3600, feedback=feedback, who="ana"
    )
    assert decision.approved is False
    assert decision.feedback == feedback
    assert decision.plan == plan
    assert decision.turn.data == {
        "approved": False,
        "hash": H1,
        "feedback": feedback,
        "who": "ana",
        "plan_turn": 1,
    }
    assert conversation.is_armed(T0 + 3600) is True
    assert conversation.pending is None
    assert conversation.deadline() == T0 + 3600 + DAY
    assert conversation.end_reasons() == []


def test_an_approval_records_its_per_step_choices(plan: Plan) -> None:
    conversation = Conversation.new("person", T0)
    conversation.arm(T0)
    conversation.end_turn_with_plan(plan, H1, T0 + 10)
    with pytest.raises(ConversationError, match="the plan has no step 7"):
        conversation.decide(approved=True, plan_hash=H1, now=T0 + 20, reject_steps=[7])
    with pytest.raises(ConversationError, match=r"per-step choices .* come with an approval"):
        conversation.decide(
            approved=False, plan_hash=H1, now=T0 + 20, feedback="no", reject_steps=[2]
        )
    decision = conversation.decide(
        approved=True,
        plan_hash=H1,
        now=T0 + 20,
        who="ana",
        reject_steps=[2],
        edit_steps={1: {"path": "data/b.csv"}},
    )
    assert decision.turn.data == {
        "approved": True,
        "hash": H1,
        "feedback": None,
        "who": "ana",
        "plan_turn": 1,
        "reject_steps": [2],
        "edit_steps": {"1": {"path": "data/b.csv"}},
    }


def test_a_queued_message_keeps_it_armed(plan: Plan) -> None:
    conversation = Conversation.new("person", T0)
    conversation.arm(T0)
    conversation.end_turn_with_plan(plan, H1, T0 + 10)
    queued = conversation.add_message("also include last month", "person", T0 + 20, queued=True)
    assert queued.kind == "message"
    assert queued.mode == "plan"
    assert queued.data == {"queued": True, "history_only": False}
    assert conversation.queued_messages() == [queued]
    assert conversation.is_armed(T0 + 20) is True
    assert conversation.pending == PendingDecision(turn=1, plan_hash=H1, shown_at=T0 + 10)
    conversation.end_turn_with_plan(plan, H2, T0 + 30, in_reply_to=queued.index)
    assert conversation.queued_messages() == []
    assert conversation.is_armed(T0 + 30) is True


@pytest.mark.parametrize("origin", AUTOMATED)
def test_an_automated_message_in_an_armed_history_is_never_in_plan_mode(
    origin: Origin, plan: Plan
) -> None:
    conversation = Conversation.new("person", T0)
    conversation.arm(T0)
    conversation.end_turn_with_plan(plan, H1, T0 + 10)
    assert conversation.mode_for(origin, T0 + 20) == "normal"
    assert conversation.mode_for("person", T0 + 20) == "plan"
    landed = conversation.add_message("nightly job finished: 3 files", origin, T0 + 20)
    assert landed.kind == "message"
    assert landed.origin == origin
    assert landed.mode == "normal"
    assert landed.data == {"queued": False, "history_only": True}
    # It neither disarms, nor restarts the clock, nor replaces the pending plan...
    assert conversation.is_armed(T0 + 20) is True
    assert conversation.deadline() == T0 + DAY
    assert conversation.pending == PendingDecision(turn=1, plan_hash=H1, shown_at=T0 + 10)
    # ...and it cannot decide it.
    with pytest.raises(PlanModeError):
        conversation.decide(approved=True, plan_hash=H1, now=T0 + 21, origin=origin)
    assert conversation.is_armed(T0 + 21) is True


# -- how the mode ends --------------------------------------------------------------------------


def test_approval_ends_plan_mode_and_returns_the_plan(plan: Plan, registry: Registry) -> None:
    conversation = Conversation.new("person", T0)
    conversation.arm(T0)
    conversation.end_turn_with_plan(plan, H1, T0 + 10)
    decision = conversation.decide(approved=True, plan_hash=H1, now=T0 + 60, who="ana")
    assert decision.approved is True
    assert decision.plan == plan
    assert decision.plan_hash == H1
    assert conversation.is_armed(T0 + 60) is False
    assert conversation.end_reasons() == ["approved"]
    assert conversation.turns[-1] == Turn(
        index=3,
        kind="mode",
        time=T0 + 60,
        text="plan mode ended: approved",
        origin=None,
        mode="plan",
        data={"armed": False, "reason": "approved"},
    )
    conversation.check_tool_allowed(registry.tools["write_json"], T0 + 61)


def test_disarming_ends_plan_mode(plan: Plan) -> None:
    conversation = Conversation.new("person", T0)
    conversation.arm(T0)
    conversation.end_turn_with_plan(plan, H1, T0 + 10)
    ended = conversation.disarm(T0 + 20)
    assert ended is not None
    assert ended.data == {"armed": False, "reason": "disarmed"}
    assert conversation.is_armed(T0 + 20) is False
    assert conversation.pending is None
    assert conversation.disarm(T0 + 30) is None
    with pytest.raises(ConversationError):
        conversation.decide(approved=True, plan_hash=H1, now=T0 + 40)


def test_plan_mode_ends_when_no_decision_can_be_shown(plan: Plan) -> None:
    conversation = Conversation.new("person", T0)
    conversation.arm(T0)
    shown = conversation.end_turn_with_plan(plan, H1, T0 + 10, can_show=False)
    assert shown.kind == "plan"
    assert shown.data["pending"] is False
    assert shown.mode == "plan"
    assert conversation.turns[-1].data == {"armed": False, "reason": "cannot_show_decision"}
    assert conversation.turns[-1].time == T0 + 10
    assert conversation.is_armed(T0 + 10) is False
    assert conversation.pending is None
    assert conversation.end_reasons() == ["cannot_show_decision"]


def test_plan_mode_expires_after_24_hours_without_a_decision(plan: Plan) -> None:
    conversation = Conversation.new("person", T0)
    conversation.arm(T0)
    conversation.end_turn_with_plan(plan, H1, T0 + 10)
    # Messages do not restart the clock; only decisions do.
    conversation.add_message("still thinking", "person", T0 + DAY - 60)
    assert conversation.is_armed(T0 + DAY - 0.001) is True
    assert conversation.is_armed(T0 + DAY) is False
    assert conversation.mode_for("person", T0 + DAY) == "normal"
    with pytest.raises(ConversationError) as caught:
        conversation.decide(approved=True, plan_hash=H1, now=T0 + DAY + 5)
    assert "expired after 86400 s without a decision" in str(caught.value)
    assert conversation.turns[-1] == Turn(
        index=3,
        kind="mode",
        time=T0 + DAY,
        text="plan mode ended: expired (24 h without a decision)",
        origin=None,
        mode="plan",
        data={"armed": False, "reason": "expired", "detected_at": T0 + DAY + 5},
    )
    assert conversation.end_reasons() == ["expired"]
    assert conversation.pending is None
    assert conversation.expire_if_due(T0 + DAY + 6) is None  # recorded once


def test_expiry_is_configurable_and_counts_from_the_last_decision(plan: Plan) -> None:
    conversation = Conversation.new("person", T0, expiry_s=60.0)
    conversation.arm(T0)
    conversation.end_turn_with_plan(plan, H1, T0 + 10)
    conversation.decide(approved=False, plan_hash=H1, now=T0 + 50, feedback="smaller")
    assert conversation.is_armed(T0 + 109.999) is True
    assert conversation.is_armed(T0 + 110) is False
    later = conversation.add_message("hello?", "person", T0 + 500)
    assert later.mode == "normal"
    assert conversation.turns[-2].data["reason"] == "expired"
    assert conversation.turns[-2].time == T0 + 110


@pytest.mark.parametrize("expiry_s", [0.0, -1.0, float("inf"), float("nan")])
def test_a_bad_expiry_is_refused(expiry_s: float) -> None:
    with pytest.raises(ConversationError):
        Conversation.new("person", T0, expiry_s=expiry_s)


def test_a_decision_for_another_plan_version_is_refused(plan: Plan) -> None:
    conversation = Conversation.new("person", T0)
    conversation.arm(T0)
    conversation.end_turn_with_plan(plan, H1, T0 + 10)
    conversation.end_turn_with_plan(plan, H2, T0 + 20)  # the revision replaces it
    with pytest.raises(StaleDecisionError) as caught:
        conversation.decide(approved=True, plan_hash=H1, now=T0 + 30)
    assert isinstance(caught.value, approval.StaleDecisionError)
    assert (caught.value.expected, caught.value.given) == (H2, H1)
    assert conversation.is_armed(T0 + 30) is True
    assert conversation.decide(approved=True, plan_hash=H2, now=T0 + 31).approved is True


def test_deciding_with_no_plan_waiting_is_refused() -> None:
    conversation = Conversation.new("person", T0)
    conversation.arm(T0)
    with pytest.raises(ConversationError) as caught:
        conversation.decide(approved=True, plan_hash=H1, now=T0 + 1)
    assert str(caught.value) == (
        f"conversation {conversation.id} has no plan waiting for a decision"
    )


# -- persistence -----------------------------------------------------------------------------


def test_a_reloaded_conversation_behaves_identically(store: ConversationStore, plan: Plan) -> None:
    saved = store.create("person", T0)
    saved.arm(T0 + 1)
    saved.add_message("copy the data", "person", T0 + 2)
    saved.ask("Which input?", T0 + 3, in_reply_to=1)
    saved.add_message("data.csv", "person", T0 + 4)
    saved.end_turn_with_plan(plan, H1, T0 + 5, in_reply_to=3)
    saved.decide(approved=False, plan_hash=H1, now=T0 + 6, feedback="use out/")
    saved.add_message("cron: done", "schedule", T0 + 7)
    saved.end_turn_with_plan(plan, H2, T0 + 8)
    saved.add_message("one more thing", "person", T0 + 9, queued=True)

    loaded = store.load(saved.id)
    assert loaded.turns == saved.turns
    assert len(loaded.turns) == 9
    assert (loaded.id, loaded.origin, loaded.created, loaded.expiry_s) == (
        saved.id,
        "person",
        T0,
        DAY,
    )
    assert loaded.pending == saved.pending == PendingDecision(7, H2, T0 + 8)
    assert loaded.deadline() == saved.deadline() == T0 + 6 + DAY
    assert loaded.queued_messages() == saved.queued_messages() == [saved.turns[8]]
    for now in (T0 + 10, T0 + 6 + DAY - 0.5, T0 + 6 + DAY):
        assert loaded.is_armed(now) == saved.is_armed(now)
        assert loaded.mode_for("person", now) == saved.mode_for("person", now)
    # The plan comes back as the same plan, with the same hash.
    assert loaded.turns[7].plan == plan
    assert approval.plan_hash(loaded.turns[7].plan, {"input": "x"}) == approval.plan_hash(
        plan, {"input": "x"}
    )
    # The reloaded one goes on where the saved one stopped, and is saved in turn.
    decision = loaded.decide(approved=True, plan_hash=H2, now=T0 + 11)
    assert decision.plan == plan
    assert store.load(saved.id).end_reasons() == ["approved"]
    assert store.load(saved.id).is_armed(T0 + 12) is False


def test_an_expiry_found_after_reloading_is_recorded_and_kept(
    store: ConversationStore, plan: Plan
) -> None:
    saved = store.create("person", T0, expiry_s=3600.0)
    saved.arm(T0)
    saved.end_turn_with_plan(plan, H1, T0 + 1)
    loaded = store.load(saved.id)
    assert loaded.expiry_s == 3600.0
    assert loaded.is_armed(T0 + 3599) is True
    ended = loaded.expire_if_due(T0 + 7200)
    assert ended is not None
    assert ended.time == T0 + 3600
    again = store.load(saved.id)
    assert again.end_reasons() == ["expired"]
    assert again.pending is None
    assert again.turns == loaded.turns


def test_list_shows_conversations_most_recent_first(store: ConversationStore) -> None:
    first = store.create("person", T0, id="first")
    second = store.create("schedule", T0 + 10, id="second")
    first.add_message("hello", "person", T0 + 20)
    assert store.list() == [
        ConversationSummary("first", "person", T0, 1, T0 + 20),
        ConversationSummary("second", "schedule", T0 + 10, 0, T0 + 10),
    ]
    assert store.list(origin="schedule") == [
        ConversationSummary("second", "schedule", T0 + 10, 0, T0 + 10)
    ]
    assert second.turns == ()
    with pytest.raises(ConversationError):
        store.create("person", T0, id="first")
    with pytest.raises(ConversationError):
        store.load("nope")


def test_a_failed_write_leaves_no_half_change(
    store: ConversationStore, connection: sqlite3.Connection, plan: Plan
) -> None:
    conversation = store.create("person", T0)
    conversation.arm(T0)
    conversation.end_turn_with_plan(plan, H1, T0 + 1)
    # The approval records two turns (decision, end of plan mode); fail on the second.
    connection.execute(
        "CREATE TRIGGER crash BEFORE INSERT ON conversation_turn "
        "WHEN NEW.kind = 'mode' BEGIN SELECT RAISE(ABORT, 'crash'); END"
    )
    with pytest.raises(sqlite3.IntegrityError):
        conversation.decide(approved=True, plan_hash=H1, now=T0 + 2)
    assert [turn.kind for turn in store.load(conversation.id).turns] == ["mode", "plan"]
    assert [turn.kind for turn in conversation.turns] == ["mode", "plan"]
    assert conversation.pending == PendingDecision(1, H1, T0 + 1)
    connection.execute("DROP TRIGGER crash")
    assert conversation.decide(approved=True, plan_hash=H1, now=T0 + 3).approved is True
    assert [turn.kind for turn in store.load(conversation.id).turns] == [
        "mode",
        "plan",
        "decision",
        "mode",
    ]


def test_a_second_writer_is_refused(store: ConversationStore) -> None:
    one = store.create("person", T0)
    other = store.load(one.id)
    one.add_message("first", "person", T0 + 1)
    with pytest.raises(ConversationError) as caught:
        other.add_message("second", "person", T0 + 2)
    assert str(caught.value) == (
        f"conversation {one.id} has 1 stored turns, not 0: another writer changed it; load it again"
    )
    assert other.turns == ()
    assert [turn.text for turn in store.load(one.id).turns] == ["first"]


def test_writes_inside_the_callers_transaction_use_a_savepoint(
    connection: sqlite3.Connection,
) -> None:
    connection.execute("CREATE TABLE IF NOT EXISTS run (id TEXT)")
    connection.commit()
    connection.execute("INSERT INTO run VALUES ('r1')")  # opens the caller's transaction
    assert connection.in_transaction
    store = ConversationStore(connection)
    conversation = store.create("person", T0)
    conversation.add_message("hi", "person", T0 + 1)
    assert connection.in_transaction  # left for the caller to commit
    connection.rollback()
    assert ConversationStore(connection).list() == []
