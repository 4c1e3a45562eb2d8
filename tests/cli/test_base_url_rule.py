"""One rule for ``--base-url`` without ``--provider`` in every command that calls a model:
as ``plandag run``, the provider is anthropic (its Messages API at that URL, the key from
``ANTHROPIC_API_KEY``). ``exec`` is covered end to end in ``test_exec_model_steps.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from plandag.cli import app
from plandag.executors import access

URL = "http://127.0.0.1:9"


@pytest.fixture
def chosen(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple[str, str | None]]:
    """The (provider, base_url) each command builds its client with; the command stops
    there (exit 7), before any request."""
    calls: list[tuple[str, str | None]] = []

    def record(provider: str, base_url: str | None, key: str | None) -> Any:
        calls.append((provider, base_url))
        raise typer.Exit(7)

    # every command builds its model client through this one function
    monkeypatch.setattr(access, "provider_client", record)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "runs.sqlite3"))
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return calls


def invoke(args: list[str]) -> Any:
    return CliRunner().invoke(app, args, env={"ANTHROPIC_API_KEY": "test"})


def test_run_takes_base_url_without_provider_as_anthropic(
    chosen: list[tuple[str, str | None]],
) -> None:
    result = invoke(["run", "Say hello.", "--base-url", URL])
    assert result.exit_code == 7, result.output
    assert chosen == [("anthropic", URL)]


def test_extract_contracts_takes_base_url_without_provider_as_anthropic(
    chosen: list[tuple[str, str | None]], tmp_path: Path
) -> None:
    contract = tmp_path / "a.txt"
    contract.write_text("This Agreement is governed by the laws of Delaware.\n", "utf-8")
    result = invoke(["extract", "contracts", str(contract), "-o", "out.jsonl", "--base-url", URL])
    assert result.exit_code == 7, result.output
    assert chosen == [("anthropic", URL)]


def test_research_takes_base_url_without_provider_as_anthropic(
    chosen: list[tuple[str, str | None]], tmp_path: Path
) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text("# Tides\n\nThe moon raises the tides.\n", "utf-8")
    result = invoke(
        ["research", "What raises the tides?", "--corpus", str(corpus), "--base-url", URL]
    )
    assert result.exit_code == 7, result.output
    assert chosen == [("anthropic", URL)]


def test_serve_takes_base_url_without_provider_as_anthropic(
    chosen: list[tuple[str, str | None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda app, **options: None)
    result = invoke(["serve", "--base-url", URL])
    assert result.exit_code == 7, result.output
    assert chosen == [("anthropic", URL)]
