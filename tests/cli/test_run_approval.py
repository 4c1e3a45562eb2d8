"""``plandag run`` with effects and people in the loop, from the command line:
``--approve never`` saves the plan and exits 4; ``plandag reject --feedback`` from another
shell sends it back to the planner, the feedback verbatim in the revision request the local
Messages API server received; ``plandag approve`` runs the revised plan in the same run,
with the results found while planning kept; a stale ``--hash`` is refused; the trace shows
the whole story."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from plandag.cli import app
from plandag.store import open_store
from plandag.testing import MessagesServer

TOOLS_FILE = '''
import os
from pathlib import Path

from plandag import tool

LOG = Path(os.environ["PUBLISH_LOG"])


@tool
def lookup(name: str) -> dict:
    """Look a name up; returns its score."""
    with LOG.open("a", encoding="utf-8") as log:
        log.write(f"lookup {name}\\n")
    return {"name": name, "score": len(name)}


@tool(effects="write")
def publish(channel: str, text: str) -> str:
    """Publish TEXT on CHANNEL."""
    with LOG.open("a", encoding="utf-8") as log:
        log.write(f"publish {channel} {text}\\n")
    return f"published on {channel}"
'''

FEEDBACK = "Nada de blog público: publique só no canal #finance, por favor. (ref FB-2291)"


def plan(channel: str) -> dict[str, Any]:
    return {
        "g": "Score abc and publish it",
        "s": [
            {"i": 1, "t": "lookup", "a": {"name": "abc"}, "d": []},
            {
                "i": 2,
                "t": "publish",
                "a": {"channel": f"{channel}", "text": "score <step_1_result.score>"},
                "d": [1],
            },
        ],
        "o": "<step_2_result>",
    }


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    monkeypatch.setenv("PUBLISH_LOG", str(tmp_path / "effects.log"))
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "store" / "runs.sqlite3"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tools.py").write_text(TOOLS_FILE, encoding="utf-8")


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


def plandag(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def test_never_then_reject_with_feedback_then_approve(
    server: MessagesServer, tmp_path: Path
) -> None:
    server.push_json(plan("blog"))
    first = plandag(
        "run",
        "Score abc and publish it",
        "--tools",
        "tools.py",
        "--base-url",
        server.url,
        "--approve",
        "never",
        "--json",
    )
    assert first.exit_code == 4, first.output
    document = json.loads(first.stdout)
    assert document["status"] == "awaiting_approval"
    first_hash = document["approval"]["plan_hash"]
    log = tmp_path / "effects.log"
    # nothing with effects ran; the effect-free lookup ran while the decision was pending
    assert log.read_text().splitlines() == ["lookup abc"]

    listed = json.loads(plandag("runs", "--json").stdout)
    [row] = listed
    run_id = row["run_id"]
    assert row["status"] == "awaiting_approval"

    # another shell: reject, with feedback; the planner revises
    server.push_json(plan("finance"))
    rejected = plandag(
        "reject", run_id, "--feedback", FEEDBACK, "--hash", first_hash, "--who", "bob"
    )
    assert rejected.exit_code == 4, rejected.output
    assert len(server.message_requests) == 2
    [message] = server.message_requests[1].json["messages"]
    assert FEEDBACK in message["content"]  # verbatim, as the instruction for the revision
    assert "the instruction for this revision, in full" in message["content"]
    assert "revised plan version 2 awaits a decision" in rejected.stderr

    # approving the first plan's hash is refused: it is stale now
    stale = plandag("approve", run_id, "--hash", first_hash)
    assert stale.exit_code == 2
    assert "is not the plan awaiting a decision" in stale.stderr

    store = open_store(tmp_path / "store" / "runs.sqlite3")
    try:
        versions = store.plan_versions(run_id)
        assert [version.source for version in versions] == ["planner", "revision"]
        new_hash = versions[-1].hash
    finally:
        store.close()
    approved = plandag("approve", run_id, "--hash", new_hash, "--who", "ana", "--json")
    assert approved.exit_code == 0, approved.output
    assert json.loads(approved.stdout)["output"] == "published on finance"
    # the revision kept the lookup unchanged: its result was kept, it never ran again
    assert log.read_text().splitlines() == ["lookup abc", "publish finance score 3"]

    store = open_store(tmp_path / "store" / "runs.sqlite3")
    try:
        assert store.run(run_id).status == "succeeded"
        decisions = [(d.version, d.decision, d.who, d.feedback) for d in store.decisions(run_id)]
        assert decisions == [
            (1, "asked", None, None),
            (1, "rejected", "bob", FEEDBACK),
            (2, "asked", None, None),
            (2, "approved", "ana", None),
        ]
        assert store.plan_versions(run_id)[-1].approved_by == "ana"
    finally:
        store.close()

    trace = [
        json.loads(line)
        for line in (tmp_path / "store" / "traces" / f"{run_id}.jsonl").read_text().splitlines()
    ]
    approvals = [
        (line["attrs"]["decision"], line["attrs"].get("feedback"))
        for line in trace
        if line["type"] == "span" and line["kind"] == "approval"
    ]
    assert approvals == [
        ("asked", None),
        ("rejected", FEEDBACK),
        ("asked", None),
        ("approved", None),
    ]
    assert [line["command"] for line in trace if line["type"] == "run_started"] == [
        "run",
        "approve",
    ]
    assert any(line["type"] == "span" and line["kind"] == "llm_call" for line in trace)


def test_the_trace_of_a_run_holds_planning_llm_calls_replans_and_steps(
    server: MessagesServer, tmp_path: Path
) -> None:
    (tmp_path / "tools.py").write_text(
        TOOLS_FILE
        + '''

@tool
def broken(name: str) -> dict:
    """A service that is always down."""
    raise ValueError(f"service down for {name}")
''',
        encoding="utf-8",
    )
    server.push_json(
        {
            "g": "x",
            "s": [{"i": 1, "t": "broken", "a": {"name": "x"}, "d": []}],
            "o": "<step_1_result>",
        }
    )
    server.push_json(
        {
            "g": "x",
            "s": [{"i": 2, "t": "lookup", "a": {"name": "x"}, "d": []}],
            "o": "<step_2_result>",
        }
    )
    result = plandag(
        "run",
        "Score x",
        "--tools",
        "tools.py",
        "--base-url",
        server.url,
        "--retries",
        "0",
        "--json",
    )
    assert result.exit_code == 0, result.output
    run_id = json.loads(result.stdout)["run_id"]
    trace = [
        json.loads(line)
        for line in (tmp_path / "store" / "traces" / f"{run_id}.jsonl").read_text().splitlines()
    ]
    spans = [(line["kind"], line["attrs"]) for line in trace if line["type"] == "span"]
    kinds = [kind for kind, _ in spans]
    assert kinds.count("llm_call") == 2
    assert kinds.count("plan") == 1
    compiles = [(attrs["version"], attrs["ok"]) for kind, attrs in spans if kind == "compile"]
    assert compiles == [(1, True), (2, True)]  # the plan, then the replan's patch
    [replan] = [attrs for kind, attrs in spans if kind == "replan"]
    assert (replan["number"], replan["failed"], replan["new_steps"]) == (1, [1], [2])
    steps = {attrs["step_id"]: attrs["status"] for kind, attrs in spans if kind == "step"}
    assert steps == {1: "failed", 2: "succeeded"}
    store = open_store(tmp_path / "store" / "runs.sqlite3")
    try:
        assert [kind for _, kind, _ in store.events(run_id) if kind == "replan"] == ["replan"]
        assert store.run(run_id).status == "succeeded"
    finally:
        store.close()


def test_approve_from_another_folder_writes_where_the_plan_meant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    elsewhere = tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "plan.json").write_text(
        json.dumps(
            {
                "steps": [
                    {
                        "id": 1,
                        "tool": "write_json",
                        "args": {"path": "out/a.json", "data": {"x": 1}},
                    }
                ]
            }
        ),
        encoding="utf-8",
    )
    monkeypatch.chdir(project)
    first = plandag("exec", "plan.json", "--approve", "never", "--json")
    assert first.exit_code == 4, first.output
    run_id = json.loads(first.stdout)["run_id"]
    monkeypatch.chdir(elsewhere)
    approved = plandag("approve", run_id)
    assert approved.exit_code == 0, approved.output
    assert json.loads((project / "out" / "a.json").read_text()) == {"x": 1}
    assert not (elsewhere / "out").exists()


FLAKY_TOOLS = '''

from plandag.errors import PermanentStepError


@tool(effects="write")
def publish_flaky(channel: str) -> str:
    """Publish on CHANNEL; the service acts, then answers with an error."""
    with LOG.open("a", encoding="utf-8") as log:
        log.write(f"publish_flaky {channel}\\n")
    raise PermanentStepError(f"{channel}: the service answered 500 after posting")


@tool(effects="irreversible")
def announce(channel: str) -> str:
    """Announce on CHANNEL (cannot be undone)."""
    with LOG.open("a", encoding="utf-8") as log:
        log.write(f"announce {channel}\\n")
    return f"announced on {channel}"
'''


def test_approving_a_replanned_run_never_reruns_its_superseded_step(
    server: MessagesServer, tmp_path: Path
) -> None:
    (tmp_path / "tools.py").write_text(TOOLS_FILE + FLAKY_TOOLS, encoding="utf-8")
    server.push_json(
        {
            "g": "Publish the score",
            "s": [
                {"i": 1, "t": "lookup", "a": {"name": "abc"}, "d": []},
                {"i": 2, "t": "publish_flaky", "a": {"channel": "blog"}, "d": [1]},
            ],
            "o": "<step_2_result>",
        }
    )
    server.push_json(  # the replan: an irreversible step, which asks
        {
            "g": "Publish the score",
            "s": [{"i": 3, "t": "announce", "a": {"channel": "finance"}, "d": []}],
            "o": "<step_3_result>",
        }
    )
    first = plandag(
        "run",
        "Publish the score",
        "--tools",
        "tools.py",
        "--base-url",
        server.url,
        "--approve",
        "auto",
        "--retries",
        "0",
        "--json",
    )
    assert first.exit_code == 4, first.output
    run_id = json.loads(first.stdout)["run_id"]
    log = tmp_path / "effects.log"
    assert log.read_text().splitlines() == ["lookup abc", "publish_flaky blog"]

    approved = plandag("approve", run_id, "--json")
    assert approved.exit_code == 0, approved.output
    assert json.loads(approved.stdout)["output"] == "announced on finance"
    # the superseded step (its effect already happened once) never ran again
    assert log.read_text().splitlines() == [
        "lookup abc",
        "publish_flaky blog",
        "announce finance",
    ]
    store = open_store(tmp_path / "store" / "runs.sqlite3")
    try:
        steps = store.steps(run_id)
        assert (steps[2].status, steps[2].superseded_by, steps[2].attempts) == ("failed", [3], 1)
        assert store.run(run_id).status == "succeeded"
    finally:
        store.close()
