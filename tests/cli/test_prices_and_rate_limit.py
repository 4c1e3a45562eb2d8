"""The brakes line says where a run's prices come from (genai-prices, the configuration's
[prices], none), the configuration's prices override the catalogue's, --rpm and [rate_limit]
set the process's rate limit, and nothing reaches the network for a price."""

from __future__ import annotations

import importlib
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from plandag.cli.run_command import register
from plandag.models.pricing import DEFAULT_PRICES, catalogue_version, configure_prices
from plandag.models.ratelimit import RateLimit, configure_rate_limit, configured_rate_limit
from plandag.testing import ChatCompletionsServer, MessagesServer

TOOLS_FILE = '''
from plandag import tool


@tool
def lookup(name: str) -> dict:
    """Look a name up."""
    return {"name": name}
'''
PLAN = {"g": "look a up", "s": [{"i": 1, "t": "lookup", "a": {"name": "a"}, "d": []}]}


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "runs.db"))
    (tmp_path / "tools.py").write_text(TOOLS_FILE, encoding="utf-8")
    importlib.import_module("plandag.models.pricing")._said.clear()  # each test sees its warnings
    yield
    configure_prices(None)
    configure_rate_limit(None)


def invoke(args: list[str], env: dict[str, str]) -> Any:
    app = typer.Typer(add_completion=False, rich_markup_mode=None)
    register(app)

    @app.callback()
    def root() -> None:
        """plandag, for this test."""

    return CliRunner().invoke(app, ["run", *args], env=env)


def brakes(output: str) -> str:
    return next(line for line in output.splitlines() if line.startswith("brakes:"))


class Said(logging.Handler):
    """The model layer's warnings, taken on its own logger: whatever other tests did to the
    root logger's level or handlers, they reach this handler."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def said() -> Iterator[Said]:
    handler = Said()
    logger = logging.getLogger("plandag.models")
    level, disabled = logger.level, logger.disabled
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    logger.disabled = False
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)
    logger.disabled = disabled


def warnings_of(said: Said) -> str:
    return "\n".join(said.messages)


def test_a_claude_run_is_priced_by_genai_prices_and_says_so(said: Said) -> None:
    with MessagesServer() as server:
        server.push_json(PLAN)
        server.push_json({"decision": {"action": "finish", "answer": "a"}})
        result = invoke(
            ["look a up", "--tools", "tools.py", "--base-url", server.url],
            {"ANTHROPIC_API_KEY": "k"},
        )
    assert result.exit_code == 0, result.output
    line = brakes(result.output)
    assert f", prices genai-prices {catalogue_version()} — " in line
    # the local server is not Anthropic's own API: said once per model
    assert "is priced at anthropic's list price" in warnings_of(said)


def test_the_configurations_prices_override_the_catalogue(tmp_path: Path) -> None:
    (tmp_path / "plandag.toml").write_text(
        '[prices."claude-sonnet-4-6"]\ninput = 1.0\noutput = 2.0\n'
        '[prices."claude-haiku-4-5"]\ninput = 0.5\noutput = 1.0\n',
        encoding="utf-8",
    )
    with MessagesServer() as server:
        server.push_json(PLAN)
        server.push_json({"decision": {"action": "finish", "answer": "a"}})
        result = invoke(
            ["look a up", "--tools", "tools.py", "--base-url", server.url],
            {"ANTHROPIC_API_KEY": "k"},
        )
    assert result.exit_code == 0, result.output
    assert ", prices config — " in brakes(result.output)
    price = DEFAULT_PRICES.lookup("claude-sonnet-4-6")
    assert price is not None
    assert price.source == "config"
    assert "priced at anthropic's list price" not in result.output


def test_an_unknown_model_keeps_the_token_cap_with_a_warning(said: Said) -> None:
    with ChatCompletionsServer() as server:
        server.push_json(PLAN)
        server.push_json({"decision": {"action": "finish", "answer": "a"}})
        result = invoke(
            [
                "look a up",
                "--tools",
                "tools.py",
                "--provider",
                "openai",
                "--model",
                "my-local-model",
                "--base-url",
                server.url + "/v1",
            ],
            {},
        )
    assert result.exit_code == 0, result.output
    line = brakes(result.output)
    assert "200,000 tokens" in line
    assert ", prices none (token cap only) — " in line
    assert "no price for model my-local-model" in warnings_of(said)


def test_a_bad_price_entry_is_an_error_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "plandag.toml").write_text('[prices."m"]\ninput = 1\n', encoding="utf-8")
    result = invoke(["look a up", "--tools", "tools.py"], {"ANTHROPIC_API_KEY": "k"})
    assert result.exit_code == 2
    assert "plandag.toml [prices]: price of 'm': 'output' is missing" in result.output


def test_rpm_on_the_command_line_or_in_the_config_sets_the_rate_limit(tmp_path: Path) -> None:
    with MessagesServer() as server:
        server.push_json(PLAN)
        server.push_json({"decision": {"action": "finish", "answer": "a"}})
        result = invoke(
            [
                "look a up",
                "--tools",
                "tools.py",
                "--base-url",
                server.url,
                "--rpm",
                "50",
                "--tpm",
                "40000",
            ],
            {"ANTHROPIC_API_KEY": "k"},
        )
    assert result.exit_code == 0, result.output
    assert ", rate limit 50 rpm, 40,000 tpm per provider — " in brakes(result.output)
    assert configured_rate_limit() == RateLimit(rpm=50, tpm=40_000)
    (tmp_path / "plandag.toml").write_text("[rate_limit]\ntpm = 40000\n", encoding="utf-8")
    with MessagesServer() as server:
        server.push_json(PLAN)
        server.push_json({"decision": {"action": "finish", "answer": "a"}})
        result = invoke(  # a new store: no stored plan to route to
            ["look a up", "--tools", "tools.py", "--base-url", server.url],
            {"ANTHROPIC_API_KEY": "k", "PLANDAG_STORE": str(tmp_path / "second.db")},
        )
    assert result.exit_code == 0, result.output
    assert ", rate limit 40,000 tpm per provider — " in brakes(result.output)
    assert configured_rate_limit() == RateLimit(tpm=40_000)
    result = invoke(["look a up", "--tools", "tools.py", "--rpm", "0"], {"ANTHROPIC_API_KEY": "k"})
    assert result.exit_code == 2
    assert "rpm must be a finite number > 0" in result.output


def test_no_price_lookup_reaches_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every model of the catalogue priced with sockets refused: nothing is fetched."""
    from genai_prices import data_snapshot

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"a connection was attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    priced = 0
    for provider in data_snapshot.get_snapshot().providers:
        for model in provider.models[:3]:
            price = DEFAULT_PRICES.lookup(model.id, provider=provider.id)
            if price is not None:
                price.cost(_usage())
                priced += 1
    assert priced > 50
    assert not data_snapshot.get_snapshot().from_auto_update


def _usage() -> Any:
    from plandag.models import Usage

    return Usage(input_tokens=1000, output_tokens=100)
