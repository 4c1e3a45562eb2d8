"""Every command that shows what an offline run made says it was made offline: ``exec``,
``run``, ``plan`` (its plan file too), ``runs``, ``inbox``, ``trace``, in their human output
and ``--json``; an offline plan never enters the plan library a model's run is routed to."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from plandag.cli.app import app
from plandag.library import PlanLibrary
from plandag.runs.options import RunOptions
from plandag.store import open_store
from plandag.testing import MessagesServer

REPO = Path(__file__).resolve().parents[2]
TEXT_TOOLS = REPO / "examples" / "tools" / "text_tools.py"
MODEL_STEPS = REPO / "examples" / "plans" / "model_steps.json"
NOTES = "The hive holds many frames. Bees make honey in summer. The queen lays eggs in spring.\n"
TASK = "Count the words of notes.txt"
LABEL = "offline (offline-extractive)"
# the plan a model writes for TASK, in the planner's wire format
MODEL_PLAN = {
    "g": TASK,
    "s": [
        {"i": 1, "t": "read_file", "a": {"path": "notes.txt"}, "d": []},
        {"i": 2, "t": "word_count", "a": {"text": "<step_1_result>"}, "d": [1]},
    ],
    "o": {"json": '{"words":"<step_2_result>"}'},
}


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "runs.sqlite3"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text(NOTES)


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


def invoke(*args: str, key: str | None = None) -> Any:
    env = {"ANTHROPIC_API_KEY": key} if key is not None else {}
    return CliRunner().invoke(app, list(args), env=env)


def exec_offline(*more: str) -> Any:
    return invoke("exec", str(MODEL_STEPS), "--param", "page=notes.txt", "--offline", *more)


def only_run_id() -> str:
    listed = invoke("runs", "--json")
    assert listed.exit_code == 0, listed.output
    (row,) = json.loads(listed.stdout)
    return str(row["run_id"])


def test_exec_json_says_offline() -> None:
    result = exec_offline("--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["offline"] is True


def test_exec_summary_line_says_offline() -> None:
    result = exec_offline()
    assert result.exit_code == 0, result.output
    (summary,) = [line for line in result.stderr.splitlines() if line.startswith("run ")]
    assert "(succeeded)" in summary
    assert LABEL in summary


def test_runs_trace_and_the_stored_options_say_an_exec_ran_offline(tmp_path: Path) -> None:
    assert exec_offline().exit_code == 0
    run_id = only_run_id()
    (row,) = json.loads(invoke("runs", "--json").stdout)
    assert row["offline"] is True
    table = invoke("runs")
    assert "(offline)" in table.stdout
    store = open_store(tmp_path / "runs.sqlite3")
    try:
        options = store.run(run_id).options
    finally:
        store.close()
    assert options["executor"]["provider"] == "offline"
    assert RunOptions.from_json(options).offline
    traced = invoke("trace", run_id, "--json")
    assert traced.exit_code == 0, traced.output
    assert json.loads(traced.stdout)["offline"] is True
    shown = invoke("trace", run_id)
    assert shown.exit_code == 0, shown.output
    assert LABEL in shown.stdout
    page = invoke("trace", run_id, "--html", "trace.html")
    assert page.exit_code == 0, page.output
    assert LABEL in (tmp_path / "trace.html").read_text()


def test_a_model_run_is_not_labelled_offline(server: MessagesServer) -> None:
    server.push_json(MODEL_PLAN)
    result = invoke(
        "run", TASK, "--tools", str(TEXT_TOOLS), "--base-url", server.url, "--json", key="test"
    )
    assert result.exit_code == 0, result.output
    assert "offline" not in json.loads(result.stdout)
    (row,) = json.loads(invoke("runs", "--json").stdout)
    assert row["offline"] is False
    assert json.loads(invoke("trace", row["run_id"], "--json").stdout)["offline"] is False


def test_run_offline_says_so_in_runs_and_trace() -> None:
    result = invoke("run", TASK, "--offline", "--tools", str(TEXT_TOOLS), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["offline"] is True
    (row,) = json.loads(invoke("runs", "--json").stdout)
    assert row["offline"] is True
    assert "(offline)" in invoke("runs").stdout
    assert json.loads(invoke("trace", row["run_id"], "--json").stdout)["offline"] is True


def test_the_plan_file_written_offline_carries_the_mark(tmp_path: Path) -> None:
    result = invoke("plan", TASK, "--offline", "--tools", str(TEXT_TOOLS), "-o", "plan.json")
    assert result.exit_code == 0, result.output
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["goal"].startswith("[offline plan: offline-extractive, not a model's] ")
    checked = invoke("check", "plan.json", "--tools", str(TEXT_TOOLS))
    assert checked.exit_code == 0, checked.output
    ran = invoke("exec", "plan.json", "--tools", str(TEXT_TOOLS), "--offline", "--json")
    assert ran.exit_code == 0, ran.output
    (row,) = json.loads(invoke("runs", "--json").stdout)
    assert row["goal"].startswith("[offline plan")


def test_plan_json_shows_the_marked_plan(tmp_path: Path) -> None:
    result = invoke(
        "plan", TASK, "--offline", "--tools", str(TEXT_TOOLS), "-o", "plan.json", "--json"
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["offline"] is True
    assert document["plan"] == json.loads((tmp_path / "plan.json").read_text())


def test_an_offline_run_feeds_no_plan_to_a_later_model_run(
    server: MessagesServer, tmp_path: Path
) -> None:
    offline = invoke("run", TASK, "--offline", "--tools", str(TEXT_TOOLS))
    assert offline.exit_code == 0, offline.output
    assert "library: saved" not in offline.stderr
    assert "library: not used offline" in offline.stderr
    store = open_store(tmp_path / "runs.sqlite3")
    try:
        assert PlanLibrary(store).task_types() == []
    finally:
        store.close()
    server.push_json(MODEL_PLAN)
    model = invoke("run", TASK, "--tools", str(TEXT_TOOLS), "--base-url", server.url, key="test")
    assert model.exit_code == 0, model.output
    assert len(server.message_requests) == 1  # planned by the model: no routing call
    assert "library: routed to" not in model.stderr
    assert "library: reused" not in model.stderr


def test_an_offline_run_leaves_a_model_runs_plan_alone(
    server: MessagesServer, tmp_path: Path
) -> None:
    server.push_json(MODEL_PLAN)
    model = invoke("run", TASK, "--tools", str(TEXT_TOOLS), "--base-url", server.url, key="test")
    assert model.exit_code == 0, model.output
    assert "library: saved" in model.stderr
    store = open_store(tmp_path / "runs.sqlite3")
    try:
        before = PlanLibrary(store).task_types()
    finally:
        store.close()
    offline = invoke("run", TASK, "--offline", "--tools", str(TEXT_TOOLS))
    assert offline.exit_code == 0, offline.output
    assert "library: routed to" not in offline.stderr
    assert "library: reused" not in offline.stderr
    store = open_store(tmp_path / "runs.sqlite3")
    try:
        assert PlanLibrary(store).task_types() == before  # no use counted, nothing saved
    finally:
        store.close()


def test_task_type_is_refused_offline() -> None:
    result = invoke("run", TASK, "--offline", "--tools", str(TEXT_TOOLS), "--task-type", "count")
    assert result.exit_code == 2
    assert "the plan library is not used offline" in result.stderr


def stored_offline_run(tmp_path: Path, status: str) -> str:
    options = RunOptions(
        executor={
            "provider": "offline",
            "model": None,
            "base_url": None,
            "executor_model": None,
        }
    )
    store = open_store(tmp_path / "runs.sqlite3")
    try:
        store.create_run(
            "0123456789abcdef",
            command="exec",
            goal="summarise a page",
            params={},
            options=options.as_json(),
            status=status,
        )
        store.update_run("0123456789abcdef", pid=os.getpid(), pid_started=1.0)
    finally:
        store.close()
    return "0123456789abcdef"


def test_resume_names_every_provider_it_accepts(tmp_path: Path) -> None:
    assert exec_offline().exit_code == 0
    run_id = only_run_id()
    store = open_store(tmp_path / "runs.sqlite3")
    try:
        store.update_run(run_id, status="interrupted", pid=None)
    finally:
        store.close()
    result = invoke("resume", run_id, "--provider", "bogus")
    assert result.exit_code == 2
    assert "--provider 'bogus': choose anthropic, openai or offline" in result.stderr


def test_inbox_says_a_crashed_run_ran_offline(tmp_path: Path) -> None:
    run_id = stored_offline_run(tmp_path, status="running")  # its process is gone
    listed = invoke("inbox", "--json")
    assert listed.exit_code == 0, listed.output
    (item,) = json.loads(listed.stdout)
    assert item["run_id"] == run_id
    assert item["offline"] is True
    shown = invoke("inbox")
    assert LABEL in shown.stdout


def test_ran_offline_reads_the_planner_or_the_model_steps() -> None:
    from plandag.runs.options import ran_offline

    assert ran_offline({"planner": {"provider": "offline"}, "executor": None})
    assert ran_offline({"planner": None, "executor": {"provider": "offline"}})
    assert not ran_offline({"planner": {"provider": "anthropic"}, "executor": None})
    assert not ran_offline({})
    assert not ran_offline(None)


BEES = {
    "winter.md": "Honey bees survive the winter in a cluster. They eat the honey they stored.\n",
    "keeping.md": "A beekeeper should leave enough honey in the hive for the bees to eat.\n",
}


def test_research_offline_says_so_in_its_summary_json_and_runs(tmp_path: Path) -> None:
    corpus = tmp_path / "bees"
    corpus.mkdir()
    for name, text in BEES.items():
        (corpus / name).write_text(text)
    common = ("--corpus", str(corpus), "--index", str(tmp_path / "index.sqlite3"), "--offline")
    question = "How do honey bees survive the winter?"
    shown = invoke("research", question, *common, "--output", "out/a.md")
    assert shown.exit_code == 0, shown.output
    (summary,) = [line for line in shown.stderr.splitlines() if line.startswith("succeeded:")]
    assert LABEL in summary
    as_json = invoke("research", question, *common, "--output", "out/b.md", "--json")
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout)["offline"] is True
    assert json.loads((tmp_path / "out" / "b.json").read_text())["offline"] is True
    rows = json.loads(invoke("runs", "--json").stdout)
    assert [row["offline"] for row in rows] == [True, True]


LEASE = (
    "This Lease is made January 15, 2024 between Northwind Rentals Ltd. and Harbor Bakery "
    "LLC. The laws of the State of Oregon govern this Agreement.\n"
)


def test_extract_contracts_offline_says_so_in_its_summary_json_and_runs(tmp_path: Path) -> None:
    (tmp_path / "lease.txt").write_text(LEASE)
    shown = invoke("extract", "contracts", "lease.txt", "--offline", "-o", "a.jsonl")
    assert shown.exit_code == 0, shown.output
    assert "records written to a.jsonl; offline (offline-extractive)" in shown.stdout
    as_json = invoke("extract", "contracts", "lease.txt", "--offline", "-o", "b.jsonl", "--json")
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout)["offline"] is True
    (record,) = [json.loads(line) for line in (tmp_path / "b.jsonl").read_text().splitlines()]
    assert record["offline"] is True
    rows = json.loads(invoke("runs", "--json").stdout)
    assert [row["offline"] for row in rows] == [True, True]
