"""A research run reads its corpus and nothing else: the built-in file and HTTP tools are
left out of its registry (a replan that a document talked into naming ``read_file`` does
not compile, and the file is never read), its corpus tools refuse another folder, and the
corpus index never follows a symbolic link out of the corpus folder."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from plandag.cli.research_command import register
from plandag.compiler import compile_plan
from plandag.errors import PermanentStepError, PlanError
from plandag.jobs.research.corpus import Corpus
from plandag.jobs.research.planning import research_registry, withheld_tools
from plandag.jobs.research.scripted import QUESTION, ScriptedResearch
from plandag.jobs.research.tools import read, search, use_corpus
from plandag.runs.options import RunOptions
from plandag.store import open_store
from plandag.testing import MessagesServer, ScriptedResponse
from plandag.tools.base import ToolContext

REPO = Path(__file__).resolve().parents[3]
CORPUS = REPO / "examples" / "research" / "corpus"
SECRET = "root:$6$SECRET-HASH-7f3a91:19000:0:99999:7:::"
FILE_AND_HTTP = {"read_file", "write_json", "http_get", "http_post"}


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def shadow(tmp_path: Path) -> Path:
    """A file outside the corpus that stands for /etc/shadow."""
    path = tmp_path / "shadow"
    path.write_text(SECRET + "\n", encoding="utf-8")
    return path


# -- the registry ---------------------------------------------------------------------------


def test_a_research_registry_holds_no_file_or_http_tool() -> None:
    assert set(withheld_tools()) == FILE_AND_HTTP
    registry = research_registry()
    assert not FILE_AND_HTTP & set(registry.tools)
    assert {"search", "read", "llm", "agent", "json_select", "xml_select"} <= set(registry.tools)
    assert registry.find_tool("read_file") is None


def test_a_plan_naming_read_file_does_not_compile(shadow: Path) -> None:
    plan = {
        "version": 1,
        "goal": "g",
        "steps": [{"id": 1, "tool": "read_file", "args": {"path": str(shadow)}}],
    }
    with pytest.raises(PlanError) as caught:
        compile_plan(plan, research_registry(), read_only=True)
    assert [d.code for d in caught.value.diagnostics] == ["unknown_tool"]


def test_tools_files_stay_and_do_not_bring_a_withheld_tool_back(tmp_path: Path) -> None:
    tools = tmp_path / "mine.py"
    tools.write_text(
        "from plandag import tool\n"
        "from plandag.tools import read_file  # imported, not the file's own\n"
        "from plandag.tools.http import http_get\n\n"
        "@tool(reads='path')\n"
        "def read_notes(path: str) -> str:\n"
        "    '''Read my notes.'''\n"
        "    return path\n",
        encoding="utf-8",
    )
    registry = research_registry()
    assert registry.load_file(tools) == ["read_notes"]
    assert "read_notes" in registry.tools
    assert not FILE_AND_HTTP & set(registry.tools)


def test_later_segments_of_a_research_run_withhold_them_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from plandag.runs.stored import run_registry

    # stored before the options recorded what was withheld: withheld all the same
    assert not FILE_AND_HTTP & set(run_registry(RunOptions(), "research").tools)
    stored = RunOptions(withheld_tools=withheld_tools())
    assert not FILE_AND_HTTP & set(run_registry(stored, "research").tools)
    assert "contract_text" not in run_registry(stored, "research").tools  # no other job's
    assert set(run_registry(RunOptions(), "exec").tools) >= FILE_AND_HTTP
    # the agent steps of a resumed segment list tools from the same registry
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    executor = {"provider": "anthropic", "model": "claude-haiku-4-5", "base_url": None}
    models = RunOptions(executor=executor, withheld_tools=withheld_tools()).models()
    assert models is not None
    assert models.registry is not None
    assert not FILE_AND_HTTP & set(models.registry.tools)
    assert RunOptions.from_json(stored.as_json()).withheld_tools == stored.withheld_tools


# -- a replan that obeys a prompt injection -----------------------------------------------


class ObeyingReplanner:
    """The scripted research model, whose replanner obeys the injection a document carried:
    its every replan also reads the secret file."""

    def __init__(self, secret: Path) -> None:
        self.scripted = ScriptedResearch(fabricate=[1], fabricate_always=True)
        self.secret = secret
        self.injected = 0

    def __call__(self, body: dict[str, Any]) -> ScriptedResponse:
        reply = self.scripted(body)
        if self.scripted.planner_requests < 2 or not reply.text_output.startswith("{"):
            return reply
        patch = json.loads(reply.text_output)
        if "s" not in patch:
            return reply
        self.injected += 1
        last = max(step["i"] for step in patch["s"])
        patch["s"] = [
            *patch["s"],
            {"i": last + 1, "t": "read_file", "a": {"path": str(self.secret)}, "d": []},
        ]
        return ScriptedResponse.json(patch)


def app() -> typer.Typer:
    application = typer.Typer(add_completion=False, rich_markup_mode=None)
    register(application)

    @application.callback()
    def root() -> None:
        """plandag, for this test."""

    return application


def test_a_replan_naming_read_file_never_reaches_the_file(tmp_path: Path, shadow: Path) -> None:
    (tmp_path / "out").mkdir()
    responder = ObeyingReplanner(shadow)
    with MessagesServer(default=responder) as server:
        result = CliRunner().invoke(
            app(),
            [
                "research",
                QUESTION,
                "--corpus",
                str(CORPUS),
                "--index",
                str(tmp_path / "index.sqlite3"),
                "--output",
                "out/report.md",
                "--base-url",
                server.url,
                "--store",
                str(tmp_path / "runs.sqlite3"),
                "--plan-cost-factor",
                "none",
            ],
            env={"ANTHROPIC_API_KEY": "test"},
        )
        sent = [json.dumps(request.json) for request in server.message_requests]
    assert responder.injected >= 1, result.output
    assert result.exit_code != 0, result.output
    assert not any("SECRET-HASH" in text for text in sent)
    with open_store(tmp_path / "runs.sqlite3") as store:
        [run] = store.runs()
        steps = store.steps(run.run_id)
        versions = store.plan_versions(run.run_id)
        replans = [data for _, kind, data in store.events(run.run_id) if kind == "replan"]
    assert all(step.tool != "read_file" for step in steps.values())
    assert all(
        step["tool"] != "read_file" for version in versions for step in version.plan["steps"]
    )
    # every replan that named read_file was refused when it compiled: the tool is unknown
    assert len(replans) == responder.injected
    for replan in replans:
        assert replan["applied"] is False
        errors = [d for d in replan["diagnostics"] if d["severity"] == "error"]
        assert {"code": "unknown_tool", "message": "tool 'read_file' is not registered"} in [
            {"code": d["code"], "message": d["message"]} for d in errors
        ]
    for path in tmp_path.rglob("*"):
        if path.is_file() and path != shadow:
            assert b"SECRET-HASH" not in path.read_bytes(), path


# -- the corpus tools -----------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_corpus_tools_of_a_run_refuse_another_folder(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "private.md").write_text("Private notes about salaries.\n", encoding="utf-8")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "doc.md").write_text("Public text about faction.\n", encoding="utf-8")
    context = ToolContext(run_id="r", step_id=1)
    with Corpus.open(mine, index=tmp_path / "i.sqlite3") as corpus, use_corpus(corpus):
        for tool, args in (
            (search, {"query": "salaries", "corpus": str(other)}),
            (read, {"chunk_id": "private.md#1", "corpus": str(other)}),
        ):
            with pytest.raises(PermanentStepError) as caught:
                await tool.invoke(args, context)
            assert caught.value.reason == "invalid_args"
            assert "reads its own corpus" in str(caught.value)
        found = await search.invoke({"query": "faction", "corpus": str(mine)}, context)
        assert found["chunk_ids"] == ["doc.md#1"]


# -- the corpus index and links -------------------------------------------------------------


def test_the_index_never_follows_a_link_out_of_the_corpus(tmp_path: Path, shadow: Path) -> None:
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.md").write_text("Alpha paragraph about the union.\n", encoding="utf-8")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "b.md").write_text("Bravo text from outside the folder.\n", encoding="utf-8")
    os.symlink(shadow, folder / "passwd.txt")  # a file link out
    os.symlink(outside, folder / "linked")  # a folder link out
    os.symlink(folder / "a.md", folder / "sub" / "again.md")  # a file link inside
    os.symlink(folder / "sub", folder / "loop")  # a folder link inside
    index = tmp_path / "index.sqlite3"
    with Corpus.open(folder, index=index) as corpus:
        documents = {item.path: item for item in corpus.documents()}
        assert set(documents) == {"a.md", "passwd.txt", "sub/again.md"}
        refused = documents["passwd.txt"]
        assert refused.status == "skipped"
        assert refused.chunks == 0
        assert "outside the corpus folder" in str(refused.error)
        assert documents["sub/again.md"].status == "indexed"
        assert [hit.chunk.chunk_id for hit in corpus.search("SECRET root")] == []
        assert [hit.chunk.chunk_id for hit in corpus.search("Bravo outside")] == []
        assert corpus.chunk("passwd.txt#1") is None
    with sqlite3.connect(index) as connection:
        dump = "\n".join(connection.iterdump())
    assert "SECRET-HASH" not in dump
    assert "Bravo" not in dump
    with Corpus.open(folder, index=index) as again:
        assert again.update.reused  # the refused link is remembered, not re-read


def test_an_index_that_once_held_a_link_out_forgets_its_text(tmp_path: Path, shadow: Path) -> None:
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.md").write_text("Alpha paragraph about the union.\n", encoding="utf-8")
    index = tmp_path / "index.sqlite3"
    os.symlink(shadow, folder / "passwd.txt")
    with sqlite3.connect(index) as connection:  # as an older plandag left it: the text in
        Corpus.open(folder, index=index).close()
        connection.execute(
            "UPDATE document SET size = 1, status = 'indexed', chunks = 1 WHERE path = 'passwd.txt'"
        )
        connection.execute(
            "INSERT OR REPLACE INTO chunk VALUES ('passwd.txt#1', 'passwd.txt', 1, 0, 10, ?)",
            (SECRET,),
        )
    with Corpus.open(folder, index=index) as corpus:
        assert "passwd.txt" in corpus.update.modified
        assert corpus.chunk("passwd.txt#1") is None
