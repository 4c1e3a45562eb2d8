"""A run handed to a person on the command line: ``plandag run`` past its replan caps ends
escalated (exit 5), ``plandag inbox`` lists it, and a person resumes it with an instruction
(which reaches the replanner verbatim) or abandons it; ``--escalate never`` keeps gave_up.
Every model call goes to the local Messages API server."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from plandag.cli.app import app
from plandag.store import open_store
from plandag.testing import ChatCompletionsServer, MessagesServer

from .conftest import Recorder

TOOLS_FILE = '''
from plandag import tool


@tool
def lookup(name: str) -> dict:
    """Look a name up; returns its score."""
    return {"name": name, "score": len(name)}


@tool
def broken(name: str) -> dict:
    """A service that is always down."""
    raise ValueError(f"service down for {name}")
'''

INSTRUCTION = 'The "broken" service is retired for good: use lookup on name "x" instead.'


def step(i: int, tool_name: str, args: dict[str, Any], d: list[int]) -> dict[str, Any]:
    return {"i": i, "t": tool_name, "a": args, "d": d}


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "store" / "runs.sqlite3"))
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


@pytest.fixture
def tools(tmp_path: Path) -> Path:
    path = tmp_path / "scores.py"
    path.write_text(TOOLS_FILE, encoding="utf-8")
    return path


def plandag(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"ANTHROPIC_API_KEY": "test"})


def escalate_by_caps(server: MessagesServer, tools: Path, *more: str) -> Any:
    """A plan whose only step always fails, then two replans that fail the same way: the
    no-progress cap (2 replans in a row without a completed step) is hit."""
    server.push_json(
        {"g": "x", "s": [step(1, "broken", {"name": "x"}, [])], "o": "<step_1_result>"}
    )
    server.push_json(
        {"g": "x", "s": [step(2, "broken", {"name": "y"}, [])], "o": "<step_2_result>"}
    )
    server.push_json(
        {"g": "x", "s": [step(3, "broken", {"name": "z"}, [])], "o": "<step_3_result>"}
    )
    return plandag(
        "run", "Score x", "--tools", str(tools), "--base-url", server.url, "--retries", "0", *more
    )


def run_id_of(result: Any) -> str:
    return str(json.loads(result.stdout)["run_id"])


def test_replan_caps_escalate_exit_5_and_the_inbox_lists_the_run(
    server: MessagesServer, tools: Path
) -> None:
    result = escalate_by_caps(server, tools, "--json")
    assert result.exit_code == 5, result.output
    document = json.loads(result.stdout)
    assert (document["status"], document["escalation"]) == ("escalated", "replan_caps")
    run_id = document["run_id"]
    assert f"run {run_id} escalated to a person (replan_caps)" in result.stderr

    inbox = plandag("inbox", "--json")
    assert inbox.exit_code == 0, inbox.output
    [item] = json.loads(inbox.stdout)
    assert (item["run_id"], item["reason"], item["goal"]) == (run_id, "replan_caps", "Score x")
    assert item["detail"] == (
        "2 replans in a row of the failing part of the plan completed none of its steps (the "
        "no-progress cap): step 3 failed "
        "(tool_error: ValueError: service down for z)"
    )
    assert item["spend"]["tokens"] > 0
    assert item["actions"] == {
        "resume": f"plandag resume {run_id} --instruction TEXT",
        "approve": None,
        "abandon": f"plandag abandon {run_id} --reason TEXT",
    }
    text = plandag("inbox")
    assert f"run {run_id}  escalated" in text.stdout
    assert f"do: plandag resume {run_id} --instruction TEXT" in text.stdout
    assert f"plandag abandon {run_id} --reason TEXT" in text.stdout

    runs = plandag("runs", "--json")
    [row] = json.loads(runs.stdout)
    assert (row["run_id"], row["status"], row["escalation"]) == (run_id, "escalated", "replan_caps")
    table = CliRunner().invoke(app, ["runs"], env={"COLUMNS": "200"})
    assert "escalated (replan_caps)" in table.stdout

    store = open_store()
    try:
        [case] = store.escalations(run_id=run_id)
        context = case.context
        assert (context["reason"], context["goal"], context["command"]) == (
            "replan_caps",
            "Score x",
            "run",
        )
        assert [version["version"] for version in context["plan_versions"]] == [1, 2, 3]
        assert [(f["id"], f["status"], f["superseded_by"]) for f in context["failures"]] == [
            (1, "failed", [2]),
            (2, "failed", [3]),
            (3, "failed", None),
        ]
        assert context["failures"][2]["error"] == {
            "type": "ValueError",
            "message": "service down for z",
        }
        assert context["completed"] == []
        assert context["spend"]["tokens"] == store.run(run_id).spent_tokens
    finally:
        store.close()


def test_escalate_never_keeps_gave_up_exit_1_and_nothing_reaches_the_inbox(
    server: MessagesServer, tools: Path
) -> None:
    result = escalate_by_caps(server, tools, "--json", "--escalate", "never")
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["status"] == "gave_up"
    assert json.loads(plandag("inbox", "--json").stdout) == []


def test_the_escalate_setting_never_keeps_gave_up(
    server: MessagesServer, tools: Path, tmp_path: Path
) -> None:
    (tmp_path / "plandag.toml").write_text('escalate = "never"\n', encoding="utf-8")
    result = escalate_by_caps(server, tools, "--json")
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["status"] == "gave_up"


def test_resume_with_an_instruction_reaches_the_replanner_verbatim_and_succeeds(
    server: MessagesServer, tools: Path
) -> None:
    run_id = run_id_of(escalate_by_caps(server, tools, "--json"))
    server.clear_requests()
    # the replanner's patch follows the instruction: a new step above every id used (3)
    server.push_json(
        {"g": "x", "s": [step(4, "lookup", {"name": "x"}, [])], "o": "<step_4_result>"}
    )
    resumed = plandag("resume", run_id, "--instruction", INSTRUCTION, "--who", "maria", "--json")
    assert resumed.exit_code == 0, resumed.output
    document = json.loads(resumed.stdout)
    assert document["status"] == "succeeded"
    assert document["answer"] == {"name": "x", "score": 1}
    assert [(r["trigger"], r["applied"], r["new_ids"]) for r in document["replans"]] == [
        ("resume", True, [4])
    ]

    [request] = server.message_requests
    prompt = request.json["messages"][0]["content"]
    assert (
        "A person resumed the run with this instruction; follow it in this patch:\n"
        + INSTRUCTION
        + "\n"
    ) in prompt
    assert "service down for z" in prompt  # what failed before is shown
    assert "Every new step id must be greater than 3" in prompt

    assert json.loads(plandag("inbox", "--json").stdout) == []
    store = open_store()
    try:
        row = store.run(run_id)
        assert (row.status, row.segment) == ("succeeded", 1)
        [case] = store.escalations(run_id=run_id, status=None)
        assert (case.status, case.decision, case.who, case.note) == (
            "closed",
            "resumed",
            "maria",
            INSTRUCTION,
        )
        assert case.decided_at is not None
        assert case.decided_at >= case.time
        resumed_decisions = [d for d in store.decisions(run_id) if d.decision == "resumed"]
        assert [(d.who, d.feedback) for d in resumed_decisions] == [("maria", INSTRUCTION)]
        steps = store.steps(run_id)
        assert [(key, steps[key].status, steps[key].superseded_by) for key in sorted(steps)] == [
            (1, "failed", [2]),
            (2, "failed", [3]),
            (3, "failed", [4]),
            (4, "succeeded", None),
        ]
        assert [version.source for version in store.plan_versions(run_id)] == [
            "planner",
            "revision",
            "revision",
            "replan",
        ]
    finally:
        store.close()


def test_resume_whose_replans_hit_the_caps_again_escalates_again(
    server: MessagesServer, tools: Path
) -> None:
    run_id = run_id_of(escalate_by_caps(server, tools, "--json"))
    for number in (4, 5, 6):  # the instruction is not followed: it fails the same way
        server.push_json(
            {
                "g": "x",
                "s": [step(number, "broken", {"name": f"w{number}"}, [])],
                "o": f'"<step_{number}_result>"',
            }
        )
    again = plandag("resume", run_id, "--instruction", INSTRUCTION, "--json")
    assert again.exit_code == 5, again.output
    document = json.loads(again.stdout)
    assert (document["status"], document["escalation"]) == ("escalated", "replan_caps")
    assert [r["trigger"] for r in document["replans"]] == ["resume", "failure", "failure"]
    store = open_store()
    try:
        cases = store.escalations(run_id=run_id, status=None)
        assert [(case.status, case.decision) for case in cases] == [
            ("closed", "resumed"),
            ("open", None),
        ]
    finally:
        store.close()


def test_abandon_ends_the_run_abandoned_exit_1_and_empties_the_inbox(
    server: MessagesServer, tools: Path
) -> None:
    run_id = run_id_of(escalate_by_caps(server, tools, "--json"))
    result = plandag("abandon", run_id[:8], "--reason", "not worth more spend", "--who", "ana")
    assert result.exit_code == 1, result.output
    assert f"run {run_id} abandoned by ana: not worth more spend" in result.stderr
    assert json.loads(plandag("inbox", "--json").stdout) == []
    [row] = json.loads(plandag("runs", "--json").stdout)
    assert (row["status"], row["detail"]) == ("abandoned", "not worth more spend")
    store = open_store()
    try:
        [case] = store.escalations(run_id=run_id, status=None)
        assert (case.status, case.decision, case.who, case.note) == (
            "closed",
            "abandoned",
            "ana",
            "not worth more spend",
        )
        assert [(d.decision, d.who, d.feedback) for d in store.decisions(run_id)][-1] == (
            "abandoned",
            "ana",
            "not worth more spend",
        )
    finally:
        store.close()

    again = plandag("abandon", run_id, "--reason", "twice")
    assert again.exit_code == 2
    assert f"run {run_id} is abandoned, not escalated" in again.stderr
    resumed = plandag("resume", run_id, "--instruction", INSTRUCTION)
    assert resumed.exit_code == 2
    assert "not escalated: --instruction is for a run handed to a person" in resumed.stderr


def test_decisions_are_refused_on_runs_that_are_not_escalated(
    server: MessagesServer, tools: Path
) -> None:
    server.push_json(
        {"g": "x", "s": [step(1, "lookup", {"name": "a"}, [])], "o": "<step_1_result>"}
    )
    done = plandag("run", "Score a", "--tools", str(tools), "--base-url", server.url, "--json")
    assert done.exit_code == 0, done.output
    run_id = run_id_of(done)
    abandoned = plandag("abandon", run_id, "--reason", "no")
    assert abandoned.exit_code == 2
    assert (
        f"run {run_id} is succeeded, not escalated: `plandag abandon` applies only to an "
        "escalated run" in abandoned.stderr
    )
    instructed = plandag("resume", run_id, "--instruction", "go on")
    assert instructed.exit_code == 2
    assert f"run {run_id} is succeeded, not escalated" in instructed.stderr


def test_approve_is_refused_on_a_run_escalated_for_its_replan_caps(
    server: MessagesServer, tools: Path
) -> None:
    run_id = run_id_of(escalate_by_caps(server, tools, "--json"))
    store = open_store()
    try:
        digest = store.plan_versions(run_id)[-1].hash
    finally:
        store.close()
    result = plandag("approve", run_id, "--hash", digest)
    assert result.exit_code == 2
    assert (
        f"run {run_id} was escalated for replan_caps: `plandag approve` applies only where a "
        "step's outcome was unknown" in result.stderr
    )
    assert [item["run_id"] for item in json.loads(plandag("inbox", "--json").stdout)] == [run_id]


def test_exec_planner_past_its_caps_escalates_and_resumes_with_the_planner(
    server: MessagesServer, tools: Path, tmp_path: Path
) -> None:
    plan = tmp_path / "down.json"
    plan.write_text(
        json.dumps(
            {
                "version": 1,
                "goal": "Score x",
                "steps": [{"id": 1, "tool": "broken", "args": {"name": "x"}}],
                "output": "<step_1_result>",
            }
        ),
        encoding="utf-8",
    )
    for number in (2, 3):
        server.push_json(
            {
                "g": "Score x",
                "s": [step(number, "broken", {"name": f"x{number}"}, [])],
                "o": f'"<step_{number}_result>"',
            }
        )
    args = ["exec", str(plan), "--tools", str(tools), "--retries", "0"]
    result = plandag(*args, "--planner", "anthropic", "--base-url", server.url, "--json")
    assert result.exit_code == 5, result.output
    document = json.loads(result.stdout)
    assert (document["status"], document["escalation"]) == ("escalated", "replan_caps")
    [item] = json.loads(plandag("inbox", "--json").stdout)
    run_id = item["run_id"]
    assert item["command"] == "exec"

    server.clear_requests()
    server.push_json(
        {"g": "Score x", "s": [step(4, "lookup", {"name": "x"}, [])], "o": "<step_4_result>"}
    )
    resumed = plandag("resume", run_id, "--instruction", INSTRUCTION, "--json")
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["answer"] == {"name": "x", "score": 1}
    [request] = server.message_requests
    assert INSTRUCTION in request.json["messages"][0]["content"]


def test_the_configured_command_and_url_get_the_case(
    server: MessagesServer, tools: Path, tmp_path: Path, receiver: Recorder
) -> None:
    received = tmp_path / "case.json"
    script = tmp_path / "page_someone.py"
    script.write_text(
        "import sys, pathlib\n"
        f"pathlib.Path({str(received)!r}).write_bytes(sys.stdin.buffer.read())\n",
        encoding="utf-8",
    )
    (tmp_path / "plandag.toml").write_text(
        f"escalation_command = {json.dumps(f'{sys.executable} {script}')}\n"
        f"escalation_url = {json.dumps(receiver.url)}\n"
        'http_allow = ["127.0.0.1"]\n',
        encoding="utf-8",
    )
    run_id = run_id_of(escalate_by_caps(server, tools, "--json"))
    case = json.loads(received.read_text(encoding="utf-8"))
    assert (case["run_id"], case["reason"], case["goal"]) == (run_id, "replan_caps", "Score x")
    [(_, _, body)] = receiver.bodies
    assert json.loads(body) == case
    store = open_store()
    try:
        hooks = [data for _, kind, data in store.events(run_id) if kind == "escalation_hook"]
        assert [(hook["kind"], hook["ok"]) for hook in hooks] == [("command", True), ("url", True)]
    finally:
        store.close()


def test_a_url_outside_the_allow_list_is_refused_and_the_refusal_recorded(
    server: MessagesServer, tools: Path, tmp_path: Path, receiver: Recorder
) -> None:
    (tmp_path / "plandag.toml").write_text(
        f'escalation_url = {json.dumps(receiver.url)}\nhttp_allow = ["hooks.example.com"]\n',
        encoding="utf-8",
    )
    result = escalate_by_caps(server, tools, "--json")
    assert result.exit_code == 5, result.output
    run_id = run_id_of(result)
    assert receiver.bodies == []
    store = open_store()
    try:
        [hook] = [data for _, kind, data in store.events(run_id) if kind == "escalation_hook"]
        assert (hook["kind"], hook["ok"]) == ("url", False)
        assert hook["detail"].startswith(
            f"escalation_url refused: host 127.0.0.1:{receiver.server_address[1]} is not in "
            "http_allow (which allows hooks.example.com); nothing was sent."
        )
    finally:
        store.close()
    assert [item["run_id"] for item in json.loads(plandag("inbox", "--json").stdout)] == [run_id]


def test_a_hook_that_fails_is_told_to_the_person_running_the_command(
    server: MessagesServer, tools: Path, tmp_path: Path, receiver: Recorder
) -> None:
    port = receiver.server_address[1]
    (tmp_path / "plandag.toml").write_text(
        f"escalation_command = {json.dumps('no-such-program-for-hooks --page')}\n"
        f"escalation_url = {json.dumps(receiver.url)}\n",
        encoding="utf-8",
    )
    result = escalate_by_caps(server, tools)
    assert result.exit_code == 5, result.output
    assert receiver.bodies == []
    assert (
        "escalation_command no-such-program-for-hooks could not start (No such file or "
        "directory); check the program's path in escalation_command"
    ) in result.stderr
    assert (
        f"escalation_url refused: host 127.0.0.1:{port} is not in http_allow (which allows "
        "nothing); nothing was sent."
    ) in result.stderr


def test_a_first_plan_that_never_compiles_still_exits_2_and_is_not_escalated(
    server: MessagesServer, tools: Path
) -> None:
    for _ in range(3):  # the plan and its two repairs name a tool that does not exist
        server.push_json({"g": "x", "s": [step(1, "lookup_fast", {"name": "a"}, [])]})
    result = plandag("run", "Score a", "--tools", str(tools), "--base-url", server.url)
    assert result.exit_code == 2, result.output
    assert json.loads(plandag("inbox", "--json").stdout) == []
    [row] = json.loads(plandag("runs", "--json").stdout)
    assert row["status"] == "failed"


def test_resume_with_the_model_unreachable_keeps_the_case_open_and_another_endpoint_goes_on(
    tools: Path,
) -> None:
    with MessagesServer() as first:
        run_id = run_id_of(escalate_by_caps(first, tools, "--json"))
        down = first.url  # nothing listens there once the server stopped
    before = open_store()
    try:
        [case] = before.escalations(run_id=run_id)
        detail = before.run(run_id).detail
    finally:
        before.close()

    refused = plandag("resume", run_id, "--instruction", INSTRUCTION, "--who", "maria")
    assert refused.exit_code == 5, refused.output
    [line] = [item for item in refused.stderr.splitlines() if item.startswith("error:")]
    assert f"error: run {run_id}: the model endpoint {down} is unreachable (" in line
    assert "could not be reached: connection refused" in line, line
    assert "your instruction was not used and the run stays escalated" in line
    assert f"plandag resume {run_id} --instruction TEXT --base-url URL" in line
    as_json = plandag("resume", run_id, "--instruction", INSTRUCTION, "--json")
    assert as_json.exit_code == 5, as_json.output
    document = json.loads(as_json.stdout)
    assert (document["status"], document["instruction_used"]) == ("escalated", False)
    assert document["error"]["type"] == "NotStartedError"

    # the escalation is not used up: the same case is open, the run escalated as it was
    [item] = json.loads(plandag("inbox", "--json").stdout)
    assert (item["run_id"], item["reason"]) == (run_id, "replan_caps")
    store = open_store()
    try:
        row = store.run(run_id)
        assert (row.status, row.detail, row.pid) == ("escalated", detail, None)
        assert row.options["planner"]["base_url"] == down
        [still] = store.escalations(run_id=run_id, status=None)
        assert (still.id, still.status, still.decision) == (case.id, "open", None)
        assert not [d for d in store.decisions(run_id) if d.decision == "resumed"]
        errors = [
            error
            for (error,) in store.connection.execute(
                "SELECT error FROM llm_call WHERE run_id = ? AND error IS NOT NULL", (run_id,)
            )
        ]
        assert len(errors) == 2  # one call per attempt to resume (no retries), recorded
    finally:
        store.close()

    # pointed at another endpoint, the instruction is used and the run goes on
    with MessagesServer() as second:
        second.push_json(
            {"g": "x", "s": [step(4, "lookup", {"name": "x"}, [])], "o": "<step_4_result>"}
        )
        resumed = plandag(
            "resume", run_id, "--instruction", INSTRUCTION, "--base-url", second.url, "--json"
        )
        assert resumed.exit_code == 0, resumed.output
        assert json.loads(resumed.stdout)["answer"] == {"name": "x", "score": 1}
        [request] = second.message_requests
        assert INSTRUCTION in request.json["messages"][0]["content"]
    store = open_store()
    try:
        row = store.run(run_id)
        assert row.status == "succeeded"
        assert row.options["planner"]["base_url"] == second.url  # the run keeps it
        assert row.options["planner"]["model"] == "claude-sonnet-4-6"
        [closed] = store.escalations(run_id=run_id, status=None)
        assert (closed.status, closed.decision, closed.note) == ("closed", "resumed", INSTRUCTION)
    finally:
        store.close()
    assert json.loads(plandag("inbox", "--json").stdout) == []


def test_resume_endpoint_options_are_checked(server: MessagesServer, tools: Path) -> None:
    run_id = run_id_of(escalate_by_caps(server, tools, "--json"))
    bad = plandag("resume", run_id, "--instruction", INSTRUCTION, "--provider", "mistral")
    assert bad.exit_code == 2
    assert "--provider 'mistral': choose anthropic, openai or offline" in bad.stderr
    no_model = plandag("resume", run_id, "--instruction", INSTRUCTION, "--provider", "openai")
    assert no_model.exit_code == 2
    assert "--model is required with --provider openai" in no_model.stderr
    # a user and password go only to the run's own server, never to another one
    elsewhere = plandag(
        "resume", run_id, "--instruction", INSTRUCTION, "--base-url", "http://u:pw@127.0.0.1:1/"
    )
    assert elsewhere.exit_code == 2
    assert "a URL with a user and password is the run's own given again" in " ".join(
        elsewhere.stderr.split()
    )
    assert json.loads(plandag("inbox", "--json").stdout)[0]["run_id"] == run_id


def test_resume_points_the_run_at_another_provider_and_model(
    server: MessagesServer, tools: Path
) -> None:
    run_id = run_id_of(escalate_by_caps(server, tools, "--json"))
    asked = len(server.message_requests)
    with ChatCompletionsServer() as other:
        other.push_json(
            {"g": "x", "s": [step(4, "lookup", {"name": "x"}, [])], "o": "<step_4_result>"}
        )
        url = other.url + "/v1"
        resumed = CliRunner().invoke(
            app,
            [
                *("resume", run_id, "--instruction", INSTRUCTION, "--json"),
                *("--provider", "openai", "--model", "local-model", "--base-url", url),
            ],
            env={"OPENAI_API_KEY": "test"},
        )
        assert resumed.exit_code == 0, resumed.output
        assert json.loads(resumed.stdout)["answer"] == {"name": "x", "score": 1}
        [request] = other.message_requests
        assert request.json["model"] == "local-model"
        assert INSTRUCTION in "".join(str(item["content"]) for item in request.json["messages"])
    assert len(server.message_requests) == asked  # the run's first endpoint was not asked
    store = open_store()
    try:
        row = store.run(run_id)
        assert row.status == "succeeded"
        planner = row.options["planner"]
        assert (planner["provider"], planner["model"], planner["base_url"]) == (
            "openai",
            "local-model",
            url,
        )
    finally:
        store.close()
