"""``plandag serve`` on the command line: loopback by default, beyond it only when asked,
the address with its token printed at start (uvicorn's ``run`` replaced by a recorder)."""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Any

import pytest
import typer
import uvicorn
from typer.testing import CliRunner

from plandag.cli import serve_command
from plandag.cli.serve_command import check_can_listen, is_loopback, register
from plandag.serve import DEFAULT_HOST, DEFAULT_PORT, ConsoleConfig


def serve_app() -> typer.Typer:
    app = typer.Typer(add_completion=False, rich_markup_mode=None)
    register(app)

    @app.callback()
    def root() -> None:
        """plandag, for this test."""

    return app


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []

    def run(app: Any, **options: Any) -> None:
        calls.append({"app": app, **options})

    monkeypatch.setattr(uvicorn, "run", run)
    # the recorder binds nothing, so the ports these tests name need not be free
    monkeypatch.setattr(serve_command, "check_can_listen", lambda host, port: None)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    return calls


def invoke(*args: str, key: str | None = None) -> Any:
    env = {"ANTHROPIC_API_KEY": key} if key is not None else {}
    return CliRunner().invoke(serve_app(), ["serve", "--store", "runs.sqlite3", *args], env=env)


def test_it_listens_on_loopback_by_default_and_prints_the_address_with_a_token(
    started: list[dict[str, Any]],
) -> None:
    result = invoke(key="test")
    assert result.exit_code == 0, result.output
    [call] = started
    assert (call["host"], call["port"]) == ("127.0.0.1", 8765)
    assert (DEFAULT_HOST, DEFAULT_PORT) == ("127.0.0.1", 8765)
    found = re.search(
        r"^plandag console: http://127\.0\.0\.1:8765/\?token=([A-Za-z0-9_-]{43})$",
        result.stdout,
        flags=re.M,
    )
    assert found is not None, result.stdout
    assert "warning" not in result.stderr


def test_each_start_makes_a_new_token(started: list[dict[str, Any]]) -> None:
    tokens = {re.findall(r"token=(\S+)", invoke(key="test").stdout)[0] for _ in range(3)}
    assert len(tokens) == 3


def test_beyond_loopback_only_when_asked_and_with_a_warning(
    started: list[dict[str, Any]],
) -> None:
    result = invoke("--host", "0.0.0.0", "--port", "9000", key="test")
    assert result.exit_code == 0, result.output
    assert (started[0]["host"], started[0]["port"]) == ("0.0.0.0", 9000)
    assert "http://0.0.0.0:9000/?token=" in result.stdout
    assert "warning: listening on 0.0.0.0, beyond this machine" in result.stderr


def test_without_a_key_it_serves_without_a_planner(started: list[dict[str, Any]]) -> None:
    result = invoke()
    assert result.exit_code == 0, result.output
    assert "warning: no ANTHROPIC_API_KEY: conversations are recorded but not planned" in (
        result.stderr
    )
    console = started[0]["app"].state.console
    assert isinstance(console.config, ConsoleConfig)
    assert console.config.planner is None


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("192.168.1.10", False),
        ("::", False),
        ("example.org", False),
    ],
)
def test_is_loopback(host: str, expected: bool) -> None:
    assert is_loopback(host) is expected


def test_plan_mode_investigates_unless_told_not_to(started: list[dict[str, Any]]) -> None:
    invoke(key="test")
    invoke("--no-investigate", key="test")
    planners = [call["app"].state.console.config.planner for call in started]
    assert [planner.investigate for planner in planners] == [True, False]
    assert [planner.full_registry is not None for planner in planners] == [True, True]


def test_a_port_in_use_is_an_error_before_any_address_is_printed(
    started: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(serve_command, "check_can_listen", check_can_listen)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = invoke("--port", str(port), key="test")
    assert result.exit_code == 2, result.output
    assert started == []
    assert "plandag console:" not in result.stdout
    assert "token=" not in result.stdout
    assert result.stderr.startswith(f"error: cannot listen on 127.0.0.1:{port}: ")
    assert "choose another port with --port" in result.stderr


def test_a_host_that_is_not_an_address_of_this_machine_is_an_error(
    started: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(serve_command, "check_can_listen", check_can_listen)
    result = invoke("--host", "192.0.2.1", key="test")
    assert result.exit_code == 2, result.output
    assert started == []
    assert "token=" not in result.stdout
    assert result.stderr.startswith("error: cannot listen on 192.0.2.1:8765: ")


def test_a_free_port_can_be_listened_on() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    assert check_can_listen("127.0.0.1", port) is None


def answers(app: Any, host: str) -> int:
    """The status of a first visit naming ``host`` (400: not a name the console answers to)."""
    from starlette.testclient import TestClient

    return TestClient(app).get("/", headers={"host": host}, follow_redirects=False).status_code


def test_it_answers_only_to_loopback_its_host_and_the_names_allowed(
    started: list[dict[str, Any]],
) -> None:
    result = invoke(
        "--host", "0.0.0.0", "--allow-host", "console.lan", "--allow-host", "*.corp.example"
    )
    assert result.exit_code == 0, result.output
    app = started[0]["app"]
    for host in (
        "127.0.0.1:8765",
        "localhost",
        "0.0.0.0:8765",
        "console.lan:8765",
        "a.corp.example",
    ):
        assert answers(app, host) == 401, host  # past the Host check; the token is missing
    for host in ("evil.example", "console.lan.evil.example", "corp.example"):
        assert answers(app, host) == 400, host
    assert "a name given with --allow-host" in result.stderr


def test_by_default_only_loopback_names_are_answered(started: list[dict[str, Any]]) -> None:
    assert invoke().exit_code == 0
    app = started[0]["app"]
    assert [answers(app, host) for host in ("127.0.0.1", "localhost", "192.168.1.10")] == [
        401,
        401,
        400,
    ]


def test_an_ipv6_host_is_answered_in_brackets(started: list[dict[str, Any]]) -> None:
    assert invoke("--host", "::1").exit_code == 0
    assert answers(started[0]["app"], "[::1]:8765") == 401


def test_an_allowed_name_that_could_never_match_exits_2(started: list[dict[str, Any]]) -> None:
    result = invoke("--allow-host", "console.lan:8765")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --allow-host: allowed host 'console.lan:8765': give")
    assert started == []


def test_offline_it_plans_with_the_offline_model_and_says_so(
    started: list[dict[str, Any]],
) -> None:
    result = invoke("--offline")
    assert result.exit_code == 0, result.output
    assert "offline: no model is called" in result.stderr
    assert "warning: no ANTHROPIC_API_KEY" not in result.stderr
    assert started[0]["app"].state.console.config.planner is not None
    assert started[0]["app"].state.console.config.offline  # its runs are stored as offline
