"""The console over HTTP (Starlette's TestClient): the access token, CSRF, the person's name,
plan mode's box, the decision card (the cut notice), decisions, runs and the inbox."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio
import pytest
from starlette.testclient import TestClient

from plandag.conversation import ConversationStore, Turn, cut_notice
from plandag.dag.plan import Plan
from plandag.serve import create_app
from plandag.serve.security import SESSION_COOKIE, TOKEN_COOKIE, Session, SessionSigner
from plandag.store import open_store
from plandag.tools.registry import Registry
from tests.serve.conftest import (
    BASE,
    PUBLISH_PLAN,
    TOKEN,
    Clock,
    ScriptedPlanner,
    csrf_of,
    lookup_plan,
    make_config,
    signed_in,
)

WAIT_S = 10.0


def eventually(client: TestClient, path: str, found: Callable[[str], bool]) -> str:
    """GET ``path`` until ``found(page)`` (a background turn or run ends); the last page."""
    deadline = time.monotonic() + WAIT_S
    page = client.get(path).text
    while not found(page):
        assert time.monotonic() < deadline, f"{path} never showed what was expected:\n{page}"
        time.sleep(0.02)
        page = client.get(path).text
    return page


def card_hash(page: str) -> str:
    found = re.search(r'id="card" data-hash="([0-9a-f]{64})"', page)
    assert found is not None, "the page shows no decision card"
    return found.group(1)


def plan_box(page: str) -> str:
    found = re.search(r'<input type="checkbox" name="plan" id="plan"[^>]*>', page)
    assert found is not None, "the page has no Plan box"
    return found.group(0)


def start(client: TestClient, csrf: str, text: str = "score a", *, plan: bool = True) -> str:
    """Send the first message of a new conversation; return its page's path."""
    data = {"csrf": csrf, "text": text, "plan_box": "1"}
    if plan:
        data["plan"] = "on"
    response = client.post("/conversations", data=data, follow_redirects=False)
    assert response.status_code == 303
    return str(response.headers["location"])


def stored(tmp_path: Path, conversation_path: str) -> list[Turn]:
    with open_store(tmp_path / "runs.sqlite3") as store:
        conversation_id = conversation_path.rsplit("/", 1)[1]
        return list(ConversationStore(store.connection).load(conversation_id).turns)


# -- the access token -------------------------------------------------------------------------


def test_every_request_needs_the_token(console_client: TestClient) -> None:
    for path in ("/", "/conversations", "/runs", "/inbox", "/name", "/runs/events"):
        response = console_client.get(path, follow_redirects=False)
        assert response.status_code == 401, path
        assert "open the address `plandag serve` printed" in response.text
    assert console_client.get("/runs?token=wrong", follow_redirects=False).status_code == 401
    console_client.cookies.clear()
    console_client.cookies.set(TOKEN_COOKIE, "wrong")
    assert console_client.get("/runs", follow_redirects=False).status_code == 401
    posted = console_client.post("/conversations", data={"text": "x"}, follow_redirects=False)
    assert posted.status_code == 401


def test_the_first_visit_with_the_token_sets_a_cookie_and_drops_it_from_the_address(
    console_client: TestClient,
) -> None:
    response = console_client.get(f"/runs?limit=5&token={TOKEN}", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/runs?limit=5"
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{TOKEN_COOKIE}={TOKEN};")
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    # The cookie carries it from now on: the name is asked next.
    follow = console_client.get("/runs", follow_redirects=False)
    assert follow.status_code == 303
    assert follow.headers["location"] == "/name?next=/runs"


# -- the person's name ---------------------------------------------------------------------------


def test_the_name_is_asked_once_and_shown(console_client: TestClient) -> None:
    console_client.get(f"/?token={TOKEN}", follow_redirects=False)
    asked = console_client.get("/inbox", follow_redirects=False)
    assert asked.headers["location"] == "/name?next=/inbox"
    page = console_client.get("/name?next=/inbox")
    assert 'id="name"' in page.text
    csrf = csrf_of(page.text)
    blank = console_client.post("/name", data={"csrf": csrf, "name": "  ", "next": "/inbox"})
    assert blank.status_code == 400
    assert "Give your name" in blank.text
    given = console_client.post(
        "/name",
        data={"csrf": csrf, "name": " Ana   Souza ", "next": "/inbox"},
        follow_redirects=False,
    )
    assert given.headers["location"] == "/inbox"
    inbox = console_client.get("/inbox", follow_redirects=False)
    assert inbox.status_code == 200
    assert '<span class="who" id="who">deciding as Ana Souza</span>' in inbox.text


def test_the_name_page_sends_back_only_to_a_local_page(console_client: TestClient) -> None:
    console_client.get(f"/?token={TOKEN}", follow_redirects=False)
    csrf = csrf_of(console_client.get("/name").text)
    for target in ("https://evil.example/", "//evil.example/x", "runs"):
        response = console_client.post(
            "/name", data={"csrf": csrf, "name": "Ana", "next": target}, follow_redirects=False
        )
        assert response.headers["location"] == "/conversations", target


def test_a_forged_session_cookie_is_no_session(console_client: TestClient) -> None:
    signed_in(console_client)
    forged = SessionSigner("another key").dumps(Session("csrf-value", "Mallory"))
    console_client.cookies.clear()
    console_client.cookies.set(TOKEN_COOKIE, TOKEN)
    console_client.cookies.set(SESSION_COOKIE, forged)
    response = console_client.get("/conversations", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"].startswith("/name?next=")


# -- CSRF -----------------------------------------------------------------------------------------


def test_every_form_is_refused_without_its_csrf_value(
    console_client: TestClient, planner: ScriptedPlanner
) -> None:
    csrf = signed_in(console_client)
    for path, data in [
        ("/conversations", {"text": "score a", "plan_box": "1", "plan": "on"}),
        ("/name", {"name": "Mallory", "next": "/inbox"}),
        ("/inbox/0123/abandon", {"reason": "x"}),
    ]:
        for given in ({}, {"csrf": "wrong"}):
            response = console_client.post(path, data={**data, **given}, follow_redirects=False)
            assert response.status_code == 403, (path, given)
            assert "CSRF token is missing or wrong" in response.text
    assert planner.calls == []
    assert console_client.get("/conversations").text.count('href="/conversations/') == 0
    assert "deciding as Ana Souza" in console_client.get("/conversations").text
    assert csrf  # the right value works: see the tests below


def test_the_pages_forms_all_carry_the_csrf_value(
    console_client: TestClient, planner: ScriptedPlanner
) -> None:
    planner.answers.append(PUBLISH_PLAN)
    csrf = signed_in(console_client)
    path = start(console_client, csrf)
    page = eventually(console_client, path, lambda text: 'id="card"' in text)
    forms = re.findall(r"<form\b.*?</form>", page, flags=re.S)
    assert len(forms) == 3  # approve, reject, the composer
    for form in forms:
        assert f'<input type="hidden" name="csrf" value="{csrf}">' in form


# -- plan mode's box ----------------------------------------------------------------------------


def test_the_plan_box_is_there_from_the_first_message_and_follows_the_persisted_state(
    console_client: TestClient, planner: ScriptedPlanner, tmp_path: Path
) -> None:
    planner.answers.append(lookup_plan("a"))
    csrf = signed_in(console_client)
    new = console_client.get("/conversations").text
    assert plan_box(new) == '<input type="checkbox" name="plan" id="plan" value="on">'
    path = start(console_client, csrf)
    page = eventually(console_client, path, lambda text: 'id="card"' in text)
    assert plan_box(page) == '<input type="checkbox" name="plan" id="plan" value="on" checked>'
    assert [turn.kind for turn in stored(tmp_path, path)] == ["mode", "message", "plan"]
    assert planner.calls == [("score a", 2, ("lookup",))]  # only tools without effects

    # Someone else opening it (another browser session, another name) sees it ticked.
    console_client.cookies.clear()
    signed_in(console_client, "Bruno")
    page = console_client.get(path).text
    assert "deciding as Bruno" in page
    assert "checked" in plan_box(page)


def test_unticking_ends_plan_mode(
    console_client: TestClient, planner: ScriptedPlanner, tmp_path: Path
) -> None:
    planner.answers.append(lookup_plan("a"))
    csrf = signed_in(console_client)
    path = start(console_client, csrf)
    eventually(console_client, path, lambda text: 'id="card"' in text)
    response = console_client.post(
        f"{path}/mode", data={"csrf": csrf, "plan_box": "1"}, follow_redirects=False
    )
    assert response.status_code == 303
    page = console_client.get(path).text
    assert 'id="card"' not in page
    assert "checked" not in plan_box(page)
    assert stored(tmp_path, path)[-1].data == {"armed": False, "reason": "disarmed"}


class GatedPlanner(ScriptedPlanner):
    """A scripted planner that waits until the test opens its gate (bounded)."""

    def __init__(self, *answers: Plan | str) -> None:
        super().__init__(*answers)
        self.gate = threading.Event()

    async def __call__(
        self, message: str, history: Sequence[Turn], runnable: Registry
    ) -> Plan | str:
        for _ in range(int(WAIT_S / 0.01)):
            if self.gate.is_set():
                break
            await anyio.sleep(0.01)
        return await super().__call__(message, history, runnable)


def test_while_a_turn_runs_the_box_is_disabled_and_a_message_is_queued_keeping_the_mode(
    tmp_path: Path,
) -> None:
    planner = GatedPlanner(lookup_plan("a"), lookup_plan("b"))
    app = create_app(make_config(tmp_path, planner), TOKEN)
    with TestClient(app, base_url=BASE) as client:
        csrf = signed_in(client)
        path = start(client, csrf)
        busy = client.get(path).text
        assert 'id="working"' in busy
        assert plan_box(busy).endswith(" checked disabled>")
        assert '<input type="hidden" name="plan_box" id="plan-box" value="1" disabled>' in busy
        # The disabled box sends nothing: the message is queued, the mode left as it is.
        queued = client.post(
            f"{path}/send", data={"csrf": csrf, "text": "and b too"}, follow_redirects=False
        )
        assert queued.status_code == 303
        page = client.get(path).text
        assert "(queued: handled after the turn running now)" in page
        planner.gate.set()
        page = eventually(
            client,
            path,
            lambda text: 'id="working"' not in text and text.count("The planner wrote") == 2,
        )
        assert plan_box(page) == '<input type="checkbox" name="plan" id="plan" value="on" checked>'
    assert [message for message, _, _ in planner.calls] == ["score a", "and b too"]
    turns = stored(tmp_path, path)
    assert [(turn.kind, turn.mode) for turn in turns] == [
        ("mode", "plan"),
        ("message", "plan"),
        ("message", "plan"),
        ("plan", "plan"),
        ("plan", "plan"),
    ]
    assert turns[2].data == {"queued": True, "history_only": False}
    assert [turn.data["in_reply_to"] for turn in turns[3:]] == [1, 2]


def test_only_a_persons_conversation_can_be_armed(
    console_client: TestClient, tmp_path: Path
) -> None:
    csrf = signed_in(console_client)
    with open_store(tmp_path / "runs.sqlite3") as store:
        conversation = ConversationStore(store.connection).create("schedule", time.time())
    path = f"/conversations/{conversation.id}"
    page = console_client.get(path).text
    assert plan_box(page) == '<input type="checkbox" name="plan" id="plan" value="on" disabled>'
    assert "Only a conversation started by a person can enter plan mode" in page
    armed = console_client.post(
        f"{path}/send",
        data={"csrf": csrf, "text": "x", "plan_box": "1", "plan": "on"},
        follow_redirects=False,
    )
    assert armed.status_code == 400
    assert "only a conversation started by a person can enter plan mode" in armed.text


def test_plan_mode_ends_after_24_hours_without_a_decision(
    console_client: TestClient, planner: ScriptedPlanner, clock: Clock, tmp_path: Path
) -> None:
    planner.answers.append(lookup_plan("a"))
    csrf = signed_in(console_client)
    path = start(console_client, csrf)
    eventually(console_client, path, lambda text: 'id="card"' in text)
    clock.now += 24 * 3600
    page = console_client.get(path).text
    assert 'id="card"' not in page
    assert "plan mode ended: expired (24 h without a decision)" in page
    assert "checked" not in plan_box(page)
    assert stored(tmp_path, path)[-1].data["reason"] == "expired"


def test_a_plan_whose_card_cannot_be_shown_ends_plan_mode(
    console_client: TestClient, planner: ScriptedPlanner, tmp_path: Path
) -> None:
    planner.answers.append(
        Plan.model_validate(
            {"goal": "x", "steps": [{"id": 1, "tool": "lookup", "args": {"nom": "a"}}]}
        )
    )
    csrf = signed_in(console_client)
    path = start(console_client, csrf)
    page = eventually(console_client, path, lambda text: 'id="error"' in text)
    assert "the plan cannot be shown for a decision: it does not compile" in page
    assert "plan mode ended: cannot_show_decision" in page
    assert stored(tmp_path, path)[-1].data == {"armed": False, "reason": "cannot_show_decision"}


# -- the decision card ------------------------------------------------------------------------


def test_the_card_shows_the_whole_plan(
    console_client: TestClient, planner: ScriptedPlanner
) -> None:
    planner.answers.append(PUBLISH_PLAN)
    csrf = signed_in(console_client)
    path = start(console_client, csrf)
    page = eventually(console_client, path, lambda text: 'id="card"' in text)
    digest = card_hash(page)
    rows = re.findall(r'<tr class="step" data-step="(\d+)">(.*?)</tr>', page, flags=re.S)
    assert [step for step, _ in rows] == ["1", "2"]
    cells = [re.findall(r"<td>(.*?)</td>", row, flags=re.S) for _, row in rows]
    assert cells[0][0:2] == ["1", "lookup"]
    assert cells[0][3] == "-"
    assert cells[1][3] == "1"  # by its reference to step 1's result
    assert cells[1][4] == '<span class="effects">WRITE</span>: blog'
    assert f'<code id="plan-hash">{digest}</code>' in page
    assert "<b>Estimate:</b> " in page
    assert f"Decision on plan {digest} (all 2 steps):" in page
    assert 'id="cut-notice"' not in page


def test_a_plan_too_large_is_cut_with_a_notice_and_the_decision_is_whole(
    tmp_path: Path,
) -> None:
    planner = ScriptedPlanner(lookup_plan("x", steps=40))
    app = create_app(make_config(tmp_path, planner, card_chars=600), TOKEN)
    with TestClient(app, base_url=BASE) as client:
        csrf = signed_in(client)
        path = start(client, csrf)
        page = eventually(client, path, lambda text: 'id="card"' in text)
    digest = card_hash(page)
    shown = re.findall(r'<tr class="step" data-step="(\d+)">', page)
    assert 0 < len(shown) < 40
    assert shown == [str(step) for step in range(1, len(shown) + 1)]
    notice = cut_notice(len(shown), 40, digest)
    assert notice.startswith(f"… plan cut: showing {len(shown)} of 40 steps; the decision covers")
    assert f'<p class="notice" id="cut-notice">{notice}</p>' in page
    assert f"Decision on plan {digest} (all 40 steps):" in page
    assert 'id="approve"' in page
    assert 'id="reject"' in page
    assert page.count(f'name="hash" value="{digest}"') == 2


def test_approve_runs_the_plan_in_the_same_conversation_and_records_who(
    console_client: TestClient, planner: ScriptedPlanner, tmp_path: Path
) -> None:
    planner.answers.append(PUBLISH_PLAN)
    csrf = signed_in(console_client)
    path = start(console_client, csrf)
    digest = card_hash(eventually(console_client, path, lambda text: 'id="card"' in text))
    stale = console_client.post(
        f"{path}/decide", data={"csrf": csrf, "hash": "0" * 64, "action": "approve"}
    )
    assert stale.status_code == 400
    assert "the plan waiting for a decision is" in stale.text
    console_client.post(f"{path}/decide", data={"csrf": csrf, "hash": digest, "action": "approve"})
    page = eventually(console_client, path, lambda text: "succeeded: " in text)
    run_id = re.findall(r'href="/runs/([0-9a-f]{16})"', page)[0]
    assert f"run {run_id}</a> succeeded: &#34;published on blog&#34;" in page
    turns = stored(tmp_path, path)
    assert [turn.kind for turn in turns] == [
        "mode",
        "message",
        "plan",
        "decision",
        "mode",
        "message",
        "message",
    ]
    assert turns[3].data == {
        "approved": True,
        "hash": digest,
        "feedback": None,
        "who": "Ana Souza",
        "plan_turn": 2,
    }
    assert [turn.origin for turn in turns[5:]] == ["pipeline", "pipeline"]
    with open_store(tmp_path / "runs.sqlite3") as store:
        assert store.run(run_id).command == "serve"
        assert [(row.decision, row.who) for row in store.decisions(run_id)] == [
            ("asked", None),
            ("approved", "Ana Souza"),
        ]


def test_per_step_reject_and_edit_make_the_plan_that_runs(
    console_client: TestClient, planner: ScriptedPlanner, tmp_path: Path
) -> None:
    planner.answers.append(lookup_plan("a", steps=3))
    csrf = signed_in(console_client)
    path = start(console_client, csrf)
    digest = card_hash(eventually(console_client, path, lambda text: 'id="card"' in text))
    bad = console_client.post(
        f"{path}/decide",
        data={"csrf": csrf, "hash": digest, "action": "approve", "step_1": "edit", "args_1": "[1]"},
    )
    assert bad.status_code == 400
    assert "step 1: the edited arguments must be a JSON object" in bad.text
    console_client.post(
        f"{path}/decide",
        data={
            "csrf": csrf,
            "hash": digest,
            "action": "approve",
            "step_1": "edit",
            "args_1": '{"name": "abcdefg"}',
            "step_2": "approve",
            "args_2": '{"name": "a2"}',
            "step_3": "reject",
        },
    )
    page = eventually(
        console_client, path, lambda text: "</a> succeeded" in text or "failed" in text
    )
    turns = stored(tmp_path, path)
    decision = next(turn for turn in turns if turn.kind == "decision")
    assert decision.data["reject_steps"] == [3]
    assert decision.data["edit_steps"] == {"1": {"name": "abcdefg"}}
    assert decision.data["who"] == "Ana Souza"
    run_id = re.findall(r'href="/runs/([0-9a-f]{16})"', page)[0]
    with open_store(tmp_path / "runs.sqlite3") as store:
        steps = store.steps(run_id)
        assert sorted(steps) == [1, 2]
        assert steps[1].result == {"name": "abcdefg", "score": 7}


def test_reject_sends_the_feedback_as_the_persons_message_and_keeps_plan_mode(
    console_client: TestClient, planner: ScriptedPlanner, tmp_path: Path
) -> None:
    feedback = "Use b, not a.\nAnd nothing public — FEEDBACK-42"
    planner.answers += [lookup_plan("a"), lookup_plan("b")]
    csrf = signed_in(console_client)
    path = start(console_client, csrf)
    first = card_hash(eventually(console_client, path, lambda text: 'id="card"' in text))
    blank = console_client.post(
        f"{path}/decide", data={"csrf": csrf, "hash": first, "action": "reject", "feedback": " "}
    )
    assert blank.status_code == 400
    console_client.post(
        f"{path}/decide",
        data={
            "csrf": csrf,
            "hash": first,
            "action": "reject",
            "feedback": feedback.replace("\n", "\r\n"),
        },
    )
    page = eventually(
        console_client, path, lambda text: 'id="card"' in text and card_hash(text) != first
    )
    assert "checked" in plan_box(page)
    assert [call[0] for call in planner.calls] == ["score a", feedback]
    turns = stored(tmp_path, path)
    assert [(turn.kind, turn.text) for turn in turns[3:5]] == [
        ("decision", f"plan {first[:12]} rejected"),
        ("message", feedback),
    ]
    assert turns[3].data["feedback"] == feedback
    assert turns[3].data["who"] == "Ana Souza"


# -- runs and the inbox --------------------------------------------------------------------------


@pytest.fixture
def escalated(tmp_path: Path) -> str:
    with open_store(tmp_path / "runs.sqlite3") as store:
        store.create_run(
            "e5ca1a7ed0000001", command="run", goal="total the invoices", params={}, options={}
        )
        store.add_plan_version(
            "e5ca1a7ed0000001", 1, lookup_plan().model_dump(mode="json"), "f" * 64, "planner"
        )
        store.update_run("e5ca1a7ed0000001", status="escalated", pid=None)
        store.add_escalation(
            "e5ca1a7ed0000001",
            "replan_caps",
            {"detail": "3 replans and still failing", "actions": {"approve": None}},
        )
    return "e5ca1a7ed0000001"


def test_the_inbox_lists_open_escalations_and_abandon_records_who(
    console_client: TestClient, escalated: str, tmp_path: Path
) -> None:
    csrf = signed_in(console_client)
    inbox = console_client.get("/inbox").text
    assert f'<section class="card escalation" data-run="{escalated}">' in inbox
    assert "replan_caps" in inbox
    assert "3 replans and still failing" in inbox
    assert f'action="/inbox/{escalated}/resume"' in inbox
    assert f'action="/inbox/{escalated}/abandon"' in inbox
    assert f'action="/inbox/{escalated}/approve"' not in inbox  # no unknown outcome here
    blank = console_client.post(f"/inbox/{escalated}/abandon", data={"csrf": csrf, "reason": ""})
    assert blank.status_code == 400
    done = console_client.post(
        f"/inbox/{escalated}/abandon",
        data={"csrf": csrf, "reason": "the supplier closed", "next": "/inbox"},
        follow_redirects=False,
    )
    assert done.headers["location"] == "/inbox"
    assert 'id="inbox-empty"' in console_client.get("/inbox").text
    with open_store(tmp_path / "runs.sqlite3") as store:
        assert store.run(escalated).status == "abandoned"
        [case] = store.escalations(run_id=escalated, status=None)
        assert (case.decision, case.who, case.note) == (
            "abandoned",
            "Ana Souza",
            "the supplier closed",
        )


def test_resume_runs_plandag_resume_with_the_instruction_and_the_name(
    tmp_path: Path, escalated: str
) -> None:
    spawned: list[list[str]] = []

    async def spawn(argv: Sequence[str]) -> tuple[int, str]:
        spawned.append(list(argv))
        return 0, ""

    config = make_config(tmp_path, None, spawn=spawn, plandag_command=("plandag",))
    with TestClient(create_app(config, TOKEN), base_url=BASE) as client:
        csrf = signed_in(client)
        client.post(
            f"/inbox/{escalated}/resume",
            data={
                "csrf": csrf,
                "instruction": "skip the\r\nbroken supplier",
                "next": f"/runs/{escalated}",
            },
        )
        page = eventually(client, f"/runs/{escalated}", lambda text: "exit code 0" in text)
    assert spawned == [
        [
            "plandag",
            "resume",
            escalated,
            "--instruction",
            "skip the\nbroken supplier",
            "--who",
            "Ana Souza",
            "--store",
            str(tmp_path / "runs.sqlite3"),
        ]
    ]
    assert "plandag resume ended with exit code 0" in page


def test_the_runs_list_and_a_runs_page(
    console_client: TestClient, planner: ScriptedPlanner, escalated: str
) -> None:
    planner.answers.append(lookup_plan("a", steps=2))
    csrf = signed_in(console_client)
    path = start(console_client, csrf)
    digest = card_hash(eventually(console_client, path, lambda text: 'id="card"' in text))
    console_client.post(f"{path}/decide", data={"csrf": csrf, "hash": digest, "action": "approve"})
    page = eventually(console_client, path, lambda text: "</a> succeeded" in text)
    run_id = re.findall(r'href="/runs/([0-9a-f]{16})"', page)[0]
    runs = console_client.get("/runs").text
    assert re.search(
        rf'<tr data-run="{run_id}">.*?<span class="status">succeeded</span>.*?'
        r'<progress max="2" value="2"></progress> 2/2',
        runs,
        flags=re.S,
    )
    assert f'<tr data-run="{escalated}">' in runs
    run = console_client.get(f"/runs/{run_id}").text
    assert '<span id="run-status" class="status">succeeded</span>' in run
    assert '<svg id="dag"' in run
    assert '<svg id="gantt"' in run
    assert '<table id="steps">' in run
    assert "s1[&#34;1. lookup&#34;]" in run  # the plan's Mermaid text, escaped
    assert "s1 --&gt; s2" in run
    escalated_page = console_client.get(f"/runs/{escalated}").text
    assert '<section class="card" id="escalation">' in escalated_page
    assert console_client.get("/runs/nope").status_code == 404


def test_an_extract_batch_shows_its_summary(console_client: TestClient, tmp_path: Path) -> None:
    signed_in(console_client)
    with open_store(tmp_path / "runs.sqlite3") as store:
        store.create_run(
            "ba7c400000000001",
            command="extract",
            goal="extract nfe: 3 input(s) into out.jsonl",
            params={"output": "out.jsonl", "inputs": 3},
            options={},
        )
        store.record_document("ba7c400000000001", 0, "a.xml", "ok", {"status": "ok", "checks": {}})
        store.record_document(
            "ba7c400000000001",
            1,
            "b.xml",
            "check_failed",
            {"status": "check_failed", "checks": {"total_matches": {"status": "fail"}}},
        )
        store.record_document(
            "ba7c400000000001",
            2,
            "c.xml",
            "error",
            {"status": "error", "errors": [{"code": "not_xml"}]},
        )
        store.update_run("ba7c400000000001", status="succeeded", pid=None)
    page = console_client.get("/runs/ba7c400000000001").text
    summary = re.search(r'<table id="batch-summary">(.*?)</table>', page, flags=re.S)
    assert summary is not None
    assert re.findall(r"<tr><th>(.*?)</th><td>(.*?)</td></tr>", summary.group(1)) == [
        ("documents recorded", "3"),
        ("records ok", "1"),
        ("records check_failed", "1"),
        ("records error", "1"),
        ("check failed: total_matches", "1"),
        ("error: not_xml", "1"),
    ]
    assert "3/3 documents done" in page


def test_the_runs_stream_sends_the_rows_as_a_server_sent_event(
    console_client: TestClient, escalated: str
) -> None:
    signed_in(console_client)
    with console_client.stream("GET", "/runs/events") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        body = "".join(response.iter_text())
    assert body.startswith("event: runs\r\ndata: ")
    assert f'data: <tr data-run="{escalated}">' in body
    assert body.count("event: runs") == 1  # then only when the rows change


def test_unarmed_a_plan_with_effects_waits_and_the_run_page_decides_on_it(
    tmp_path: Path,
) -> None:
    spawned: list[list[str]] = []

    async def spawn(argv: Sequence[str]) -> tuple[int, str]:
        spawned.append(list(argv))
        return 4, "run rejected\n"

    planner = ScriptedPlanner(PUBLISH_PLAN)
    config = make_config(tmp_path, planner, spawn=spawn, plandag_command=("plandag",))
    with TestClient(create_app(config, TOKEN), base_url=BASE) as client:
        csrf = signed_in(client)
        path = start(client, csrf, plan=False)
        page = eventually(client, path, lambda text: "awaiting_approval" in text)
        assert 'id="card"' not in page  # not armed: no decision card in the conversation
        run_id = re.findall(r'href="/runs/([0-9a-f]{16})"', page)[0]
        run = client.get(f"/runs/{run_id}").text
        assert '<section class="card" id="awaiting">' in run
        digest = re.findall(r'name="hash" value="([0-9a-f]{64})"', run)[0]
        blank = client.post(
            f"/runs/{run_id}/decide",
            data={"csrf": csrf, "hash": digest, "action": "reject", "feedback": ""},
        )
        assert blank.status_code == 400
        client.post(
            f"/runs/{run_id}/decide",
            data={"csrf": csrf, "hash": digest, "action": "reject", "feedback": "not the blog"},
        )
        eventually(client, f"/runs/{run_id}", lambda text: "exit code 4: run rejected" in text)
    assert spawned == [
        [
            "plandag",
            "reject",
            run_id,
            "--hash",
            digest,
            "--feedback",
            "not the blog",
            "--who",
            "Ana Souza",
            "--store",
            str(tmp_path / "runs.sqlite3"),
        ]
    ]
    with open_store(tmp_path / "runs.sqlite3") as store:
        assert store.run(run_id).status == "awaiting_approval"  # the command decides
        assert store.plan_versions(run_id)[-1].hash == digest


TOOLS_FILE = '''
from plandag import tool


@tool(effects="write", writes=lambda args: [args["path"]])
def save(path: str, text: str) -> str:
    """Write TEXT to PATH."""
    with open(path, "w", encoding="utf-8") as file:
        file.write(text)
    return path
'''


@pytest.mark.slow
def test_the_run_pages_approve_runs_plandag_approve_on_the_same_store(tmp_path: Path) -> None:
    from plandag.tools.registry import default_registry

    tools = tmp_path / "save_tools.py"
    tools.write_text(TOOLS_FILE, encoding="utf-8")
    registry = default_registry()
    registry.load_file(tools)
    plan = Plan.model_validate(
        {
            "goal": "save a note",
            "steps": [{"id": 1, "tool": "save", "args": {"path": "note.txt", "text": "hi"}}],
            "output": "<step_1_result>",
        }
    )
    config = make_config(tmp_path, ScriptedPlanner(plan), registry=registry, tools=(str(tools),))
    with TestClient(create_app(config, TOKEN), base_url=BASE) as client:
        csrf = signed_in(client)
        path = start(client, csrf, plan=False)
        page = eventually(client, path, lambda text: "awaiting_approval" in text)
        run_id = re.findall(r'href="/runs/([0-9a-f]{16})"', page)[0]
        run = client.get(f"/runs/{run_id}").text
        digest = re.findall(r'name="hash" value="([0-9a-f]{64})"', run)[0]
        client.post(
            f"/runs/{run_id}/decide", data={"csrf": csrf, "hash": digest, "action": "approve"}
        )
        deadline = time.monotonic() + 60
        while "plandag approve ended" not in (run := client.get(f"/runs/{run_id}").text):
            assert time.monotonic() < deadline, run
            time.sleep(0.1)
        assert "plandag approve ended with exit code 0" in run
        assert '<span id="run-status" class="status">succeeded</span>' in run
    assert (tmp_path / "note.txt").read_text(encoding="utf-8") == "hi"
    with open_store(tmp_path / "runs.sqlite3") as store:
        assert [(row.decision, row.who) for row in store.decisions(run_id)] == [
            ("asked", None),
            ("approved", "Ana Souza"),
        ]


def test_a_conversations_stream_sends_its_turns_and_state_only_when_they_change(
    console_client: TestClient, planner: ScriptedPlanner
) -> None:
    planner.answers.append(lookup_plan("a"))
    csrf = signed_in(console_client)
    path = start(console_client, csrf)
    page = eventually(console_client, path, lambda text: 'id="card"' in text)
    digest = re.findall(r"/events\?v=([0-9a-f]{16})", page)[0]
    with console_client.stream("GET", f"{path}/events") as response:
        fresh = "".join(response.iter_text())
    assert fresh.count("event: turns") == 1
    assert 'data: <section class="card" id="card"' in fresh
    assert 'event: state\r\ndata: {"busy": false, "armed": true, "can_arm": true}' in fresh
    # The page already shows these turns: the stream does not send them again.
    with console_client.stream("GET", f"{path}/events?v={digest}") as response:
        seen = "".join(response.iter_text())
    assert "event: turns" not in seen
    assert seen.count("event: state") == 1


def test_a_runs_page_stream_sends_its_live_part(console_client: TestClient, escalated: str) -> None:
    signed_in(console_client)
    with console_client.stream("GET", f"/runs/{escalated}/events") as response:
        body = "".join(response.iter_text())
    assert body.startswith("event: run\r\n")
    assert 'data: <p class="summary"><span id="run-status" class="status">escalated</span>' in body


def test_approve_in_the_inbox_runs_plandag_approve_with_the_hash_and_the_name(
    tmp_path: Path,
) -> None:
    with open_store(tmp_path / "runs.sqlite3") as store:
        store.create_run("0c0c0c0c0c0c0c0c", command="exec", goal="pay", params={}, options={})
        store.add_plan_version(
            "0c0c0c0c0c0c0c0c", 1, lookup_plan().model_dump(mode="json"), "e" * 64, "stored"
        )
        store.update_run("0c0c0c0c0c0c0c0c", status="escalated", pid=None)
        actions = {"approve": "plandag approve 0c0c0c0c0c0c0c0c --hash " + "e" * 64}
        store.add_escalation("0c0c0c0c0c0c0c0c", "unknown_outcome", {"actions": actions})
    spawned: list[list[str]] = []

    async def spawn(argv: Sequence[str]) -> tuple[int, str]:
        spawned.append(list(argv))
        return 0, ""

    config = make_config(tmp_path, None, spawn=spawn, plandag_command=("plandag",))
    with TestClient(create_app(config, TOKEN), base_url=BASE) as client:
        csrf = signed_in(client)
        inbox = client.get("/inbox").text
        assert 'action="/inbox/0c0c0c0c0c0c0c0c/approve"' in inbox
        assert f'name="hash" value="{"e" * 64}"' in inbox
        client.post("/inbox/0c0c0c0c0c0c0c0c/approve", data={"csrf": csrf, "hash": "e" * 64})
        eventually(client, "/inbox", lambda text: "plandag approve ended" in text)
    assert spawned == [
        [
            "plandag",
            "approve",
            "0c0c0c0c0c0c0c0c",
            "--hash",
            "e" * 64,
            "--who",
            "Ana Souza",
            "--store",
            str(tmp_path / "runs.sqlite3"),
        ]
    ]
