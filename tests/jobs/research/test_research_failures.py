"""``plandag research`` says why no answer came through: a model endpoint that cannot be
reached (the planning fails) and branches whose every model call is refused, named in the
report, its JSON record and the command's summary line."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from plandag.cli import app
from plandag.jobs.research.scripted import QUESTION, ScriptedResearch
from plandag.testing import MessagesServer, ScriptedResponse

REPO = Path(__file__).resolve().parents[3]
CORPUS = REPO / "examples" / "research" / "corpus"


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port of 127.0.0.1 bound by no listener: a connection to it is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        yield int(held.getsockname()[1])


def research(tmp_path: Path, url: str, *more: str) -> Any:
    return CliRunner().invoke(
        app,
        [
            "research", QUESTION, "--corpus", str(CORPUS), "--index",
            str(tmp_path / "index.sqlite3"), "--output", str(tmp_path / "report.md"),
            "--base-url", url, "--store", str(tmp_path / "runs.sqlite3"), *more,
        ],
        env={"ANTHROPIC_API_KEY": "test"},
    )  # fmt: skip


def test_an_endpoint_that_cannot_be_reached_is_named_not_nothing_failed(
    tmp_path: Path, closed_port: int
) -> None:
    url = f"http://127.0.0.1:{closed_port}"
    result = research(tmp_path, url)
    assert result.exit_code == 1, result.output
    reason = f"the model endpoint {url} could not be reached: connection refused"
    record = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert record["failure"].startswith("planning failed: ")
    assert reason in record["failure"]
    counted = re.search(r"\((\d+) of (\d+) planning calls failed\)$", record["failure"])
    assert counted is not None
    assert counted.group(1) == counted.group(2) != "0"
    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "Nothing failed" not in markdown
    assert f"No answer came through: {record['failure']}." in markdown
    assert f"no answer came through: {record['failure']}" in result.stderr


def test_branches_whose_model_calls_are_refused_are_counted_with_the_reason(
    tmp_path: Path,
) -> None:
    scripted = ScriptedResearch()

    def reply(body: dict[str, Any]) -> ScriptedResponse:
        system = body.get("system")
        text = system if isinstance(system, str) else "".join(b["text"] for b in system or [])
        if "You are the planner of plandag" in text:
            return scripted(body)
        return ScriptedResponse.error(401, message="the key is not allowed here")

    with MessagesServer(default=reply) as server:
        result = research(tmp_path, server.url, "--retries", "0")
    assert result.exit_code in (1, 5), result.output
    record = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert "HTTP 401" in record["failure"]
    assert "the key is not allowed here" in record["failure"]
    assert record["failure"].endswith("(4 of 4 branches)")
    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert f"No answer came through: {record['failure']}." in markdown
    assert f"no answer came through: {record['failure']}" in result.stderr
