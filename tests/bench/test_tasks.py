"""The user's own tasks (``plandag bench --tasks``): reading the file line by line, the
answer a check sees, and both agents on each task against a local Messages API server."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from plandag.bench.tasks import Task, TaskLineError, answer_value, read_tasks, task_workloads
from plandag.bench.workloads import Question
from plandag.cli.bench_command import register
from plandag.executors.data import parse_data_blocks
from plandag.testing import MessagesServer, ScriptedResponse, system_text
from plandag.tools.registry import Registry

TOOLS = '''
from plandag.tools import tool

CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Peru": "Lima"}


@tool
def capital(country: str) -> str:
    """The capital city of a country, by the country's English name."""
    return CAPITALS[country]
'''

GOOD_LINES = [
    {"id": "france", "goal": "What is the capital of France? End with 'Answer: CITY'.",
     "expected": "Paris"},
    {"id": "japan", "goal": "What is the capital of Japan? End with 'Answer: CITY'.",
     "check": {"kind": "regex", "pattern": "Tok.o"}},
]  # fmt: skip


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)


def write_lines(path: Path, lines: list[Any]) -> Path:
    path.write_text(
        "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n",
        encoding="utf-8",
    )
    return path


# -- reading -------------------------------------------------------------------------------


def test_each_bad_line_is_an_error_with_its_number_and_the_rest_are_tasks(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "tasks.jsonl",
        [
            GOOD_LINES[0],
            "",
            "{not json",
            '["a list"]',
            {"goal": "  "},
            {"goal": "Where?", "expected": 1, "check": {"kind": "regex", "pattern": "x"}},
            {"goal": "Where?", "check": {"kind": "nope"}},
            {"goal": "Where?", "check": {"kind": "regex"}},
            {"goal": "Where?", "expected": 1, "answer": 2},
            {"id": "france", "goal": "Again?", "expected": 1},
            {"goal": "Written?", "check": {"kind": "file_exists", "path": "out/r.md"}},
            {"id": "bad id!", "goal": "Where?", "expected": 1},
            {"goal": "Where?", "expected": 1, "params": [1]},
        ],
    )
    tasks, errors = read_tasks(path)
    assert tasks == [
        Task(1, "france", GOOD_LINES[0]["goal"], {}, {"kind": "equals", "value": "Paris"}),
        Task(11, "line-11", "Written?", {}, {"kind": "file_exists", "path": "out/r.md"}),
    ]
    kinds = "equals, file_exists, jmespath, not_empty, regex, tolerance"
    assert [error.line for error in errors] == [3, 4, 5, 6, 7, 8, 9, 10, 12, 13]
    messages = [error.message for error in errors]
    assert messages[0].startswith("not JSON (Expecting property name enclosed in double quotes")
    assert messages[0].endswith("; write one JSON object per line")
    assert messages[1] == "a list, not an object; write one JSON object per line"
    assert messages[2] == 'no "goal": give the task as a non-empty string'
    assert messages[3] == (
        'give exactly one of "expected" (the right answer, any JSON value) and "check" (an '
        f'object with "kind": one of {kinds}, and that kind\'s fields)'
    )
    assert messages[4] == f"\"check\" has kind 'nope'; use one of {kinds}"
    assert (
        messages[5] == '"check" of kind regex: pattern: Field required (its fields: pattern, path)'
    )
    assert messages[6] == ("unknown field(s) answer; a task has id, goal, params, expected, check")
    assert messages[7] == "\"id\" 'france' is used by an earlier line"
    assert messages[8].startswith("\"id\" 'bad id!' is not a name")
    assert messages[9] == '"params" must be an object of NAME: value'
    assert TaskLineError(3, "x").format("tasks.jsonl") == "tasks.jsonl:3: x"


def test_the_answer_a_check_sees() -> None:
    assert answer_value("I looked it up.\nAnswer: 42.") == 42
    assert answer_value("Answer: Paris") == "Paris"
    assert answer_value("first Answer: 1\nthen Answer: [1, 2]") == [1, 2]
    assert answer_value("no marker, just text") == "no marker, just text"
    assert answer_value({"total": 3}) == {"total": 3}


def test_a_file_check_needs_the_file_written_during_that_run(tmp_path: Path) -> None:
    task = Task(1, "report", "Write it", {}, {"kind": "file_exists", "path": "r.md"})
    [workload] = task_workloads([task], Registry())
    [question] = workload.questions
    assert isinstance(question, Question)
    assert workload.prepare is not None
    workload.prepare(question)
    assert workload.verdict(question, "done") == (
        False,
        f"file_exists: file r.md does not exist ({tmp_path / 'r.md'})",
    )
    (tmp_path / "r.md").write_text("report", encoding="utf-8")
    assert workload.verdict(question, "done")[0] is True
    workload.prepare(question)  # the next agent starts with the file already there
    assert workload.verdict(question, "done") == (
        False,
        "file_exists: r.md was not written during this run",
    )


# -- both agents on each task ----------------------------------------------------------------


def country_of(body: dict[str, Any]) -> str:
    first = body["messages"][0]["content"]
    text = first if isinstance(first, str) else "".join(block["text"] for block in first)
    found = re.search(r"capital of (\w+)", text)
    assert found is not None
    return found.group(1)


def correct_model(body: dict[str, Any]) -> ScriptedResponse:
    """Plays a correct model for both agents: ReAct calls the tool, then answers; plandag's
    planner plans one call, its joiner answers from the step's result."""
    country = country_of(body)
    if body.get("tools"):
        results = [
            block
            for message in body["messages"]
            if isinstance(message["content"], list)
            for block in message["content"]
            if block.get("type") == "tool_result"
        ]
        if not results:
            return ScriptedResponse.tool_use("capital", {"country": country}, text="Look it up.")
        content = results[-1]["content"]
        text = content if isinstance(content, str) else "".join(b["text"] for b in content)
        return ScriptedResponse.text(f"Answer: {parse_data_blocks(text)[0].value}")
    if system_text(body).startswith("You are the joiner"):
        [block] = parse_data_blocks(body["messages"][-1]["content"])
        return ScriptedResponse.json(
            {"decision": {"action": "finish", "answer": f"Answer: {block.value}"}}
        )
    step = {"i": 1, "t": "capital", "a": {"country": f"{country}"}, "d": []}
    return ScriptedResponse.json({"g": f"capital of {country}", "s": [step]})


def bench_app() -> typer.Typer:
    app = typer.Typer(add_completion=False, rich_markup_mode=None)
    register(app)

    @app.command("other")
    def other() -> None:
        """Keeps typer from collapsing the app into its one command."""

    return app


def test_both_agents_run_each_task_and_a_bad_line_is_reported(tmp_path: Path) -> None:
    tasks = write_lines(
        tmp_path / "tasks.jsonl",
        [GOOD_LINES[0], "{oops", GOOD_LINES[1], {"id": "peru", "goal": "The capital of Peru?",
                                                  "expected": "Cusco"}],
    )  # fmt: skip
    tools = tmp_path / "tools.py"
    tools.write_text(TOOLS, encoding="utf-8")
    out = tmp_path / "out"
    with MessagesServer(default=correct_model) as server:
        result = CliRunner().invoke(
            bench_app(),
            [
                *("bench", "--tasks", str(tasks), "--tools", str(tools)),
                *("--base-url", server.url, "--out", str(out), "--no-prompt-cache"),
            ],
        )
        requests = server.message_requests
    assert result.exit_code == 1, result.output  # a bad line, and one wrong answer
    assert f"error: {tasks}:2: not JSON (" in result.output
    # three tasks: plandag plans and joins (2 calls), ReAct calls the tool and answers (2)
    assert len(requests) == 3 * 4
    assert {request.json["model"] for request in requests} == {"claude-sonnet-4-6"}
    offered = [request.json["tools"] for request in requests if "tools" in request.json]
    assert {tuple(tool["name"] for tool in tools) for tools in offered} == {("capital",)}
    text = (out / "RESULTS.md").read_text(encoding="utf-8")
    assert "# plandag vs sequential ReAct on tasks.jsonl" in text
    assert f"the Messages API at {server.url}" in text
    assert "| all tasks | plandag | 0% |" in text  # peru's expected answer is wrong
    assert "| france | plandag | 100% |" in text
    assert "| france | react | 100% |" in text
    assert "| japan | react | 100% |" in text
    assert "| peru | plandag | 0% |" in text
    assert '| france | plandag | 1 | off | yes | equals: the result equals "Paris" |' in text
    assert '| peru | react | 1 | off | no | equals: the result is "Lima", expected "Cusco" |' in (
        text
    )
    assert f"- unusable task line: {tasks}:2: not JSON (" in text


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--tasks", "t.jsonl"], "--tasks needs --tools FILE.py or --mcp SERVER: the tools"),
        (["--tasks", "t.jsonl", "--tools", "x.py"], "--tasks needs a model: --real"),
        (["movie8", "--tasks", "t.jsonl"], "give workload names or --tasks TASKS.jsonl"),
        (["--tools", "x.py"], "--tools goes with --tasks"),
    ],
)
def test_unusable_task_arguments(arguments: list[str], message: str) -> None:
    result = CliRunner().invoke(bench_app(), ["bench", *arguments])
    assert result.exit_code == 2
    assert message in result.output


def test_a_file_without_a_usable_task_is_refused(tmp_path: Path) -> None:
    tasks = write_lines(tmp_path / "t.jsonl", ["[]"])
    (tmp_path / "x.py").write_text(TOOLS, encoding="utf-8")
    result = CliRunner().invoke(
        bench_app(),
        ["bench", "--tasks", str(tasks), "--tools", "x.py", "--base-url", "http://127.0.0.1:9"],
    )
    assert result.exit_code == 2
    assert f"error: {tasks}:1: a list, not an object; write one JSON object per line" in (
        result.output
    )
    assert f"{tasks}: no usable task" in result.output


# -- tools with effects ------------------------------------------------------------------------

TOOLS_WITH_EFFECTS = '''
from pathlib import Path

from plandag.tools import tool


@tool(effects="write", writes="path")
def save(path: str, text: str) -> str:
    """Write text to a file."""
    Path(path).write_text(text, encoding="utf-8")
    return path


@tool(effects="irreversible")
def send(to: str, text: str) -> str:
    """Send a message."""
    return "sent"
'''

NOTE_TASK = {
    "id": "note",
    "goal": "Write the word hi to note.txt.",
    "check": {"kind": "file_exists", "path": "note.txt"},
}


def tools_file(tmp_path: Path, *, irreversible: bool) -> Path:
    text = TOOLS_WITH_EFFECTS
    if not irreversible:
        text = text[: text.index('@tool(effects="irreversible")')]
    path = tmp_path / "effects.py"
    path.write_text(text, encoding="utf-8")
    return path


def writing_model(body: dict[str, Any]) -> ScriptedResponse:
    """Plays a model that writes the note: ReAct first tries a path outside the folder,
    then note.txt, then answers; plandag's planner plans one save, its joiner finishes."""
    if body.get("tools"):
        calls = sum(
            1
            for message in body["messages"]
            if isinstance(message["content"], list)
            for block in message["content"]
            if block.get("type") == "tool_result"
        )
        if calls == 0:
            return ScriptedResponse.tool_use("save", {"path": "../escape.txt", "text": "hi"})
        if calls == 1:
            return ScriptedResponse.tool_use("save", {"path": "note.txt", "text": "hi"})
        return ScriptedResponse.text("Answer: written")
    if system_text(body).startswith("You are the joiner"):
        return ScriptedResponse.json({"decision": {"action": "finish", "answer": "Answer: ok"}})
    step = {"i": 1, "t": "save", "a": {"path": "note.txt", "text": "hi"}, "d": []}
    return ScriptedResponse.json({"g": "write the note", "s": [step]})


@pytest.mark.parametrize(
    ("irreversible", "approve", "message"),
    [
        (False, [], "tool save (write) has effects and the benchmark runs unattended"),
        (True, [], "tools save (write), send (irreversible) have effects"),
        (False, ["--approve", "ask"], "--approve 'ask': choose auto or never (nobody answers"),
        (True, ["--approve", "auto"], "tool send has irreversible effects, which need a person"),
    ],
)
def test_tools_with_effects_are_refused_with_the_tool_named_unless_approved(
    tmp_path: Path, irreversible: bool, approve: list[str], message: str
) -> None:
    tasks = write_lines(tmp_path / "t.jsonl", [NOTE_TASK])
    tools = tools_file(tmp_path, irreversible=irreversible)
    result = CliRunner().invoke(
        bench_app(),
        [
            *("bench", "--tasks", str(tasks), "--tools", str(tools)),
            *("--base-url", "http://127.0.0.1:9", *approve),
        ],
    )
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # a message, never a traceback
    [line] = [text for text in result.output.splitlines() if text.startswith("error:")]
    assert message in line
    assert "Traceback" not in result.output


def test_approve_auto_runs_writes_within_the_folder_for_both_agents(tmp_path: Path) -> None:
    tasks = write_lines(tmp_path / "t.jsonl", [NOTE_TASK])
    tools = tools_file(tmp_path, irreversible=False)
    with MessagesServer(default=writing_model) as server:
        result = CliRunner().invoke(
            bench_app(),
            [
                *("bench", "--tasks", str(tasks), "--tools", str(tools), "--approve", "auto"),
                *("--base-url", server.url, "--out", str(tmp_path / "out"), "--no-prompt-cache"),
            ],
        )
    requests = server.message_requests
    assert result.exit_code == 0, result.output
    text = (tmp_path / "out" / "RESULTS.md").read_text(encoding="utf-8")
    assert "| note | plandag | 100% |" in text
    assert "| note | react | 100% |" in text
    # ReAct's write outside the folder (the working one) was refused as an observation
    assert not (tmp_path.parent / "escape.txt").exists()
    observations = [
        block["content"]
        for request in requests
        if "tools" in request.json
        for message in request.json["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result" and block.get("is_error")
    ]
    assert any("outside the write boundary" in str(item) for item in observations), observations


def test_approve_never_runs_no_effect(tmp_path: Path) -> None:
    tasks = write_lines(tmp_path / "t.jsonl", [NOTE_TASK])
    tools = tools_file(tmp_path, irreversible=True)
    with MessagesServer(default=writing_model) as server:
        result = CliRunner().invoke(
            bench_app(),
            [
                *("bench", "--tasks", str(tasks), "--tools", str(tools), "--approve", "never"),
                *("--base-url", server.url, "--out", str(tmp_path / "out"), "--no-prompt-cache"),
            ],
        )
    assert result.exit_code == 1, result.output  # neither agent could write the note
    assert not (tmp_path / "note.txt").exists()
    assert not (tmp_path.parent / "escape.txt").exists()
    text = (tmp_path / "out" / "RESULTS.md").read_text(encoding="utf-8")
    assert "| note | plandag | 0% |" in text
    assert "| note | react | 0% |" in text
