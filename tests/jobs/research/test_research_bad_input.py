"""``plandag research`` given bad input: each case stops before any model request with exit
2 and a message that says what was wrong, where, and what to do; never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from plandag.cli.research_command import register
from plandag.jobs.research.scripted import QUESTION, ScriptedResearch
from plandag.testing import MessagesServer

REPO = Path(__file__).resolve().parents[3]
CORPUS = REPO / "examples" / "research" / "corpus"


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "empty").mkdir()
    (tmp_path / "a-file").write_text("in the way\n", encoding="utf-8")
    unreadable = tmp_path / "unreadable"
    unreadable.mkdir()
    (unreadable / "noise.txt").write_bytes(bytes(range(256)) * 8)  # binary named .txt
    (unreadable / "broken.pdf").write_bytes(b"%PDF-1.4 not really")


def app() -> typer.Typer:
    application = typer.Typer(add_completion=False, rich_markup_mode=None)
    register(application)

    @application.callback()
    def root() -> None:
        """plandag, for this test."""

    return application


CASES: dict[str, tuple[list[str], str]] = {
    "missing corpus": (
        [QUESTION, "--corpus", "nowhere"],
        "error: corpus folder nowhere ({tmp}/nowhere) does not exist; give a folder of .md, "
        ".txt, .html or .pdf files",
    ),
    "corpus is a file": (
        [QUESTION, "--corpus", "a-file"],
        "error: corpus folder a-file ({tmp}/a-file) is a file, not a folder;",
    ),
    "empty corpus": (
        [QUESTION, "--corpus", "empty"],
        "error: corpus folder {tmp}/empty holds no .md, .txt, .html or .pdf file; add "
        "documents or give another folder",
    ),
    "only unreadable files": (
        [QUESTION, "--corpus", "unreadable"],
        "error: --corpus {tmp}/unreadable: no readable document (.md, .txt, .html, .pdf) with "
        "text; add documents to the folder (2 skipped, listed above)",
    ),
    "output blocked by a file": (
        [QUESTION, "--corpus", str(CORPUS), "--output", "a-file/report.md"],
        "error: --output a-file/report.md: its folder {tmp}/a-file cannot be created (a file "
        "is in the way); give --output a file in a folder you can write",
    ),
    "output is a folder": (
        [QUESTION, "--corpus", str(CORPUS), "--output", "out"],
        "error: --output out: out is a folder; give the report's file name",
    ),
    "index is a folder": (
        [QUESTION, "--corpus", str(CORPUS), "--index", "empty"],
        "error: the corpus index empty is a folder; give --index a file name",
    ),
    "empty question": (
        ["", "--corpus", str(CORPUS)],
        "error: give the research QUESTION (or --from-run RUN_ID to rebuild a report)",
    ),
    "blank question": (
        ["   ", "--corpus", str(CORPUS)],
        "error: give the research QUESTION (or --from-run RUN_ID to rebuild a report)",
    ),
    "unknown run": (
        ["--from-run", "0123abcd"],
        "error: --from-run 0123abcd: no run '0123abcd' in {tmp}/runs.sqlite3; `plandag runs` "
        "lists the runs there",
    ),
    "empty run id": (["--from-run", ""], "error: --from-run : a run id is empty"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_stops_with_a_clear_error_and_exit_2(tmp_path: Path, case: str) -> None:
    args, expected = CASES[case]
    with MessagesServer(default=ScriptedResearch()) as server:
        result = CliRunner().invoke(
            app(),
            [
                "research",
                *args,
                "--base-url",
                server.url,
                "--store",
                str(tmp_path / "runs.sqlite3"),
            ],
            env={"ANTHROPIC_API_KEY": "test"},
        )
        assert server.message_requests == []
    output = " ".join(result.output.split())
    assert result.exit_code == 2, output
    assert expected.format(tmp=tmp_path) in output
    assert "Traceback" not in output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_skipped_files_are_listed_with_their_reason(tmp_path: Path) -> None:
    with MessagesServer(default=ScriptedResearch()) as server:
        result = CliRunner().invoke(
            app(),
            ["research", QUESTION, "--corpus", "unreadable", "--base-url", server.url],
            env={"ANTHROPIC_API_KEY": "test"},
        )
    assert result.exit_code == 2
    assert "skipped noise.txt: not UTF-8 text (byte 128); convert it to UTF-8" in result.output
    assert "skipped broken.pdf: not readable as PDF: " in result.output
    assert not (tmp_path / "research.md").exists()
