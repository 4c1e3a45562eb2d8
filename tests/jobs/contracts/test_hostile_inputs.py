"""``extract contracts`` on hostile inputs: each is an error row for that input alone, in
bounded time and memory, and the batch goes on: a file past ``max_input_bytes``
(``too_large``), a ``.docx`` that unpacks past ``max_unpacked_bytes`` or lies about its
sizes, PDF bombs (``unreadable``), a text of more chunks than ``max_chunks``
(``too_many_chunks``), and planning that takes too long (``planning_timeout``; it runs off
the event loop, so ``--max-seconds`` and the other inputs go on meanwhile). The inputs are
made on the fly (:mod:`plandag.testing.hostile`); the ones at full size are marked slow."""

from __future__ import annotations

import inspect
import json
import re
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

import plandag.compiler
from plandag.brakes.budget import Budget
from plandag.cli import app
from plandag.executors import ModelAccess
from plandag.jobs.contracts import batch as contracts_batch
from plandag.jobs.contracts.batch import expand_contract_inputs, extract_contracts
from plandag.jobs.contracts.document import extract_contract, read_for_batch
from plandag.jobs.contracts.fields import FieldSpec
from plandag.jobs.contracts.text import ContractText, ReadStopped, read_contract
from plandag.models import AnthropicClient
from plandag.scheduler import RunLimits
from plandag.testing import MessagesServer, ScriptedResponse
from plandag.testing.hostile import docx_bomb, flate_bomb_pdf, large_text, page_tree_bomb_pdf

FIELDS = (FieldSpec("Governing Law", "Which law governs", "text", "a"),)
GOOD = "This Agreement is governed by the laws of the State of Delaware.\n"
MiB = 1024 * 1024


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)


def empty_fields(body: dict[str, Any]) -> ScriptedResponse:
    """A schema-only stand-in model: every field of the request's group, with no passage."""
    text = body["messages"][0]["content"]
    text = text if isinstance(text, str) else "".join(b["text"] for b in text)
    group = json.loads(text.rsplit("JSON Schema:\n", 1)[1])["properties"]["fields"]["required"]
    return ScriptedResponse.json({"fields": {name: [] for name in group}})


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer(default=empty_fields) as running:
        yield running


def batch(paths: list[Path], output: Path, server: MessagesServer, **options: Any) -> list[Any]:
    """Run the batch with the model of ``server``; its rows."""
    files, missing = expand_contract_inputs([str(path) for path in paths])

    async def main() -> None:
        client = AnthropicClient(api_key="test", base_url=server.url)
        try:
            await extract_contracts(
                files,
                output,
                fields=FIELDS,
                missing=missing,
                run_options={
                    "models": ModelAccess(client, "claude-haiku-4-5"),
                    "budget": Budget(20.0, 5_000_000),
                    "limits": RunLimits.lifted(),
                },
                **options,
            )
        finally:
            await client.aclose()

    anyio.run(main)
    return [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]


def code(row: dict[str, Any]) -> str:
    return str(row["errors"][0]["code"]) if row["errors"] else str(row["status"])


def test_the_python_api_has_the_limits_of_the_command_line_with_its_defaults() -> None:
    for function in (extract_contracts, extract_contract):
        parameters = inspect.signature(function).parameters
        defaults = {
            name: parameters[name].default
            for name in (
                "max_input_bytes",
                "max_unpacked_bytes",
                "max_chunks",
                "max_planning_seconds",
            )
        }
        assert defaults == {
            "max_input_bytes": 64 * MiB,
            "max_unpacked_bytes": 256 * MiB,
            "max_chunks": 100,
            "max_planning_seconds": 60.0,
        }
    parameters = inspect.signature(read_contract).parameters
    assert parameters["max_bytes"].default == 64 * MiB
    assert parameters["max_unpacked_bytes"].default == 256 * MiB


def test_each_limit_is_a_row_for_its_input_and_the_batch_goes_on(
    tmp_path: Path, server: MessagesServer
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.txt").write_text(GOOD, encoding="utf-8")
    (folder / "b.txt").write_text(GOOD * 400, encoding="utf-8")  # 26,000 bytes
    docx_bomb(folder / "c.docx", 3 * MiB)
    large_text(folder / "d.md", 3000)
    rows = batch(
        [folder],
        tmp_path / "out.jsonl",
        server,
        max_input_bytes=20_000,
        max_unpacked_bytes=2 * MiB,
        max_chunks=2,
        chunk_chars=1000,
    )
    assert [(Path(row["file"]).name, code(row)) for row in rows] == [
        ("a.txt", "ok"),
        ("b.txt", "too_large"),
        ("c.docx", "too_large"),
        ("d.md", "too_many_chunks"),
    ]
    assert rows[1]["errors"][0]["message"] == (
        f"{folder / 'b.txt'}: 26,000 bytes, more than the 20,000 an input may have "
        "(--max-input-bytes); split it, or raise the limit"
    )
    assert "declares 3,1" in rows[2]["errors"][0]["message"]
    assert "(--max-unpacked-bytes)" in rows[2]["errors"][0]["message"]
    assert rows[3]["errors"][0]["message"] == (
        f"{folder / 'd.md'}: its text runs past 2,000 characters, more than the chunks a "
        "contract may have (--max-chunks) hold at --chunk-chars each; split the document, or "
        "raise --max-chunks or --chunk-chars"
    )
    # only the good contract reached the model
    assert len(server.message_requests) == 1


def test_the_limits_lifted_with_none(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_text(GOOD * 100, encoding="utf-8")
    read = read_for_batch(path, max_bytes=100)
    assert isinstance(read, dict)
    assert read["errors"][0]["code"] == "too_large"
    assert isinstance(read_for_batch(path, max_bytes=None), ContractText)


def test_a_docx_that_lies_about_its_size_is_stopped_where_it_said_it_would_end(
    tmp_path: Path,
) -> None:
    path = docx_bomb(tmp_path / "liar.docx", 24 * MiB, declared=1000)
    tracemalloc.start()
    try:
        read = read_for_batch(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(read, dict)
    assert code(read) == "unreadable"
    assert "unpacks to more than the 1,000 bytes it declares" in read["errors"][0]["message"]
    assert peak < 8 * MiB  # a piece at a time, never the 24 MiB it holds


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_one_megabyte_docx_holding_400_mb_of_xml_is_too_large(tmp_path: Path) -> None:
    path = docx_bomb(tmp_path / "bomb.docx", 400_000_000)
    assert path.stat().st_size < 2 * MiB
    tracemalloc.start()
    try:
        read = read_for_batch(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(read, dict)
    assert code(read) == "too_large"
    assert re.search(r"declares 400,\d{3},\d{3} bytes unpacked", read["errors"][0]["message"])
    assert peak < 16 * MiB  # the sizes were read; nothing was parsed


def test_pdf_bombs_are_unreadable(tmp_path: Path, server: MessagesServer) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.txt").write_text(GOOD, encoding="utf-8")
    flate_bomb_pdf(folder / "flate.pdf", 100 * MiB)  # past pypdf's 75 MB for one stream
    page_tree_bomb_pdf(folder / "tree.pdf", 200_000)
    rows = batch([folder], tmp_path / "out.jsonl", server)
    assert [(Path(row["file"]).name, code(row)) for row in rows] == [
        ("a.txt", "ok"),
        ("flate.pdf", "unreadable"),
        ("tree.pdf", "unreadable"),
    ]
    assert "LimitReachedError" in rows[1]["errors"][0]["message"]
    assert "LimitReachedError" in rows[2]["errors"][0]["message"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_1_gib_flate_stream_is_unreadable_in_bounded_memory(tmp_path: Path) -> None:
    path = flate_bomb_pdf(tmp_path / "flate.pdf", 1 << 30)
    tracemalloc.start()
    try:
        read = read_for_batch(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(read, dict)
    assert code(read) == "unreadable"
    assert peak < 512 * MiB  # pypdf stops inflating at 75 MB


def test_reading_stops_once_the_text_passes_what_the_chunks_may_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pypdf import PageObject

    path = page_tree_bomb_pdf(tmp_path / "pages.pdf", 5000)  # 5,000 pages of "Page"
    calls = [0]
    real = PageObject.extract_text

    def counted(self: Any, *args: Any, **kwargs: Any) -> str:
        calls[0] += 1
        return str(real(self, *args, **kwargs))

    monkeypatch.setattr(PageObject, "extract_text", counted)
    read = read_for_batch(path, max_chars=200)
    assert isinstance(read, dict)
    assert code(read) == "too_many_chunks"
    assert calls[0] < 50  # not the 5,000 pages
    stop = threading.Event()
    stop.set()
    with pytest.raises(ReadStopped):
        read_for_batch(path, stop=stop)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_50_mb_text_is_too_many_chunks_before_it_is_chunked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: MessagesServer
) -> None:
    path = large_text(tmp_path / "big.txt", 50_000_000)
    chunked: list[int] = []
    real = contracts_batch.extract_contract.__globals__["chunk_text"]

    def spy(text: str, *args: Any) -> Any:
        chunked.append(len(text))
        return real(text, *args)

    monkeypatch.setitem(contracts_batch.extract_contract.__globals__, "chunk_text", spy)
    rows = batch([path], tmp_path / "out.jsonl", server)
    assert [code(row) for row in rows] == ["too_many_chunks"]
    assert chunked == []
    assert server.message_requests == []


class BlockedCompile:
    """``compile_plan`` that blocks, for the documents whose text holds ``marker``, until
    released (at most 10 s), as compiling a huge plan would."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.release = threading.Event()
        self.real: Callable[..., Any] = plandag.compiler.compile_plan
        self.blocked = 0

    def __call__(self, plan: Any, *args: Any, **kwargs: Any) -> Any:
        if self.marker in json.dumps(kwargs.get("params") or {})[:100_000]:
            self.blocked += 1
            if not self.release.wait(10):
                raise RuntimeError("compile_plan was never released")
        return self.real(plan, *args, **kwargs)


def test_planning_runs_off_the_event_loop_and_times_out_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: MessagesServer
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.txt").write_text("SLOW-TO-PLAN " + GOOD, encoding="utf-8")
    (folder / "b.txt").write_text(GOOD, encoding="utf-8")
    blocked = BlockedCompile("SLOW-TO-PLAN")
    monkeypatch.setattr(plandag.compiler, "compile_plan", blocked)
    try:
        # 5 s: ample for reading (in a thread too); the blocked compile waits 10 s
        rows = batch([folder], tmp_path / "out.jsonl", server, jobs=2, max_planning_seconds=5)
    finally:
        blocked.release.set()
    assert blocked.blocked == 1
    assert [(Path(row["file"]).name, code(row)) for row in rows] == [
        ("a.txt", "planning_timeout"),
        ("b.txt", "ok"),
    ]
    assert rows[0]["errors"][0]["message"] == (
        f"{folder / 'a.txt'}: reading, chunking and planning it took more than 5 s "
        "(--max-planning-seconds); nothing was sent to the model. Split the document, or "
        "raise the limit"
    )
    assert rows[0]["text_sha256"]  # its text was read
    assert len(server.message_requests) == 1  # the other contract's one group


def test_max_seconds_stops_a_batch_while_it_plans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: MessagesServer
) -> None:
    path = tmp_path / "a.txt"
    path.write_text("SLOW-TO-PLAN " + GOOD, encoding="utf-8")
    blocked = BlockedCompile("SLOW-TO-PLAN")
    monkeypatch.setattr(plandag.compiler, "compile_plan", blocked)
    output = tmp_path / "out.jsonl"
    try:
        result = CliRunner().invoke(
            app,
            [
                "extract", "contracts", str(path), "-o", str(output), "--base-url", server.url,
                "--store", str(tmp_path / "runs.sqlite3"), "--max-seconds", "3",
                "--max-planning-seconds", "none",
            ],
            env={"ANTHROPIC_API_KEY": "test"},
        )  # fmt: skip
    finally:
        blocked.release.set()
    assert blocked.blocked == 1
    assert result.exit_code == 3, result.output
    assert "stopped by --max-seconds 3 after 0 of 1 inputs" in result.output
    assert output.read_text(encoding="utf-8") == ""  # no row: --resume extracts it again


def test_the_command_line_limits(tmp_path: Path, server: MessagesServer) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.txt").write_text(GOOD, encoding="utf-8")
    (folder / "b.txt").write_text(GOOD * 400, encoding="utf-8")
    docx_bomb(folder / "c.docx", 3 * MiB)
    large_text(folder / "d.md", 3000)
    output = tmp_path / "out.jsonl"

    def run(paths: list[Path], *limits: str) -> list[str]:
        result = CliRunner().invoke(
            app,
            [
                "extract", "contracts", *map(str, paths), "-o", str(output),
                "--base-url", server.url, "--store", str(tmp_path / "runs.sqlite3"), *limits,
            ],
            env={"ANTHROPIC_API_KEY": "test"},
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        rows = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
        return [code(row) for row in rows]

    assert run(
        [folder], "--max-input-bytes", "20000", "--max-unpacked-bytes", "2000000",
        "--max-chunks", "2", "--chunk-chars", "1000",
    ) == ["ok", "too_large", "too_large", "too_many_chunks"]  # fmt: skip
    assert run([folder / "b.txt"], "--max-input-bytes", "none") == ["ok"]
    assert run([folder / "d.md"], "--max-chunks", "none", "--chunk-chars", "1000") == ["ok"]
    refused = CliRunner().invoke(
        app,
        ["extract", "contracts", str(folder), "-o", str(output), "--max-chunks", "0"],
        env={"ANTHROPIC_API_KEY": "test"},
    )
    assert refused.exit_code == 2
    assert "--max-chunks" in refused.output
