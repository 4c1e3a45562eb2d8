"""The escalation hooks: a command with the case on stdin, a POST to an allow-listed URL
(a local server on 127.0.0.1), a Python callback; a URL whose host the allow-list does not
name is refused before any connection."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from plandag.escalation import EscalationHooks, HookOutcome

from .conftest import Recorder

CASE: dict[str, Any] = {
    "run_id": "abc123",
    "status": "escalated",
    "reason": "replan_caps",
    "detail": "3 of 3 replans used",
    "goal": "Score x",
    "spend": {"usd": 0.0, "tokens": 120},
}


@pytest.fixture(autouse=True)
def no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)


def write_script(tmp_path: Path, body: str) -> list[str]:
    script = tmp_path / "hook.py"
    script.write_text(body, encoding="utf-8")
    return [sys.executable, str(script)]


@pytest.mark.anyio
async def test_the_command_gets_the_case_as_json_on_stdin(tmp_path: Path) -> None:
    received = tmp_path / "received.json"
    argv = write_script(
        tmp_path,
        "import sys, pathlib\n"
        f"pathlib.Path({str(received)!r}).write_bytes(sys.stdin.buffer.read())\n",
    )
    [outcome] = await EscalationHooks(command=argv).notify(CASE)
    assert outcome == HookOutcome(
        "command", True, f"escalation_command {argv[0]} exited with status 0"
    )
    assert json.loads(received.read_text(encoding="utf-8")) == CASE


@pytest.mark.anyio
async def test_a_command_that_fails_is_reported_not_raised(tmp_path: Path) -> None:
    argv = write_script(tmp_path, "import sys\nsys.stderr.write('pager down')\nsys.exit(3)\n")
    [outcome] = await EscalationHooks(command=argv).notify(CASE)
    assert outcome == HookOutcome(
        "command", False, f"escalation_command {argv[0]} exited with status 3: pager down"
    )


@pytest.mark.anyio
async def test_a_command_that_exits_without_reading_its_input_is_reported(
    tmp_path: Path,
) -> None:
    # A case larger than a pipe's buffer: writing it fails once the program has exited.
    large = {**CASE, "padding": "x" * 1_000_000}
    argv = write_script(tmp_path, "import sys\nsys.stderr.write('ignored the case')\nsys.exit(4)\n")
    [outcome] = await EscalationHooks(command=argv).notify(large)
    assert outcome == HookOutcome(
        "command", False, f"escalation_command {argv[0]} exited with status 4: ignored the case"
    )
    quiet = write_script(tmp_path, "pass\n")
    [outcome] = await EscalationHooks(command=quiet).notify(large)
    assert outcome.ok is True


@pytest.mark.anyio
async def test_a_command_past_its_timeout_is_stopped(tmp_path: Path) -> None:
    argv = write_script(tmp_path, "import time\ntime.sleep(30)\n")
    [outcome] = await EscalationHooks(command=argv, timeout_s=0.3).notify(CASE)
    assert outcome.ok is False
    assert outcome.detail == (
        f"escalation_command {argv[0]} did not end within 0.3 s and was stopped; make it "
        "quicker or raise escalation_timeout"
    )


@pytest.mark.anyio
async def test_a_missing_program_is_reported(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-program")
    [outcome] = await EscalationHooks(command=[missing]).notify(CASE)
    assert outcome.ok is False
    assert outcome.detail.startswith(f"escalation_command {missing} could not start (")


@pytest.mark.anyio
async def test_the_post_reaches_an_allowed_host(receiver: Recorder) -> None:
    hooks = EscalationHooks(url=receiver.url, http_allow=["127.0.0.1"])
    [outcome] = await hooks.notify(CASE)
    assert outcome == HookOutcome("url", True, "escalation_url POST to 127.0.0.1 answered 204")
    [(path, content_type, body)] = receiver.bodies
    assert (path, content_type) == ("/hooks/escalations", "application/json")
    assert json.loads(body) == CASE


@pytest.mark.anyio
async def test_the_post_is_refused_when_the_host_is_not_allowed(receiver: Recorder) -> None:
    port = receiver.server_address[1]
    hooks = EscalationHooks(url=receiver.url, http_allow=["api.example.com"])
    [outcome] = await hooks.notify(CASE)
    assert outcome == HookOutcome(
        "url",
        False,
        f"escalation_url refused: host 127.0.0.1:{port} is not in http_allow (which allows "
        "api.example.com); nothing was sent. Add it to http_allow in plandag.toml or "
        f'[tool.plandag] (http_allow = ["127.0.0.1:{port}"]) to send escalations there',
    )
    assert receiver.bodies == []
    [no_list] = await EscalationHooks(url=receiver.url).notify(CASE)
    assert "(which allows nothing)" in no_list.detail
    assert receiver.bodies == []


@pytest.mark.anyio
async def test_callbacks_sync_and_async_get_the_case() -> None:
    seen: list[dict[str, Any]] = []

    async def remember(case: dict[str, Any]) -> None:
        seen.append(case)

    [outcome] = await EscalationHooks(callback=seen.append).notify(CASE)
    [again] = await EscalationHooks(callback=remember).notify(CASE)
    assert (outcome, again) == (
        HookOutcome("callback", True, "on_escalation returned"),
        HookOutcome("callback", True, "on_escalation returned"),
    )
    assert seen == [CASE, CASE]


@pytest.mark.anyio
async def test_a_callback_that_raises_is_reported() -> None:
    def broken(case: dict[str, Any]) -> None:
        raise RuntimeError("pager down")

    [outcome] = await EscalationHooks(callback=broken).notify(CASE)
    assert outcome == HookOutcome(
        "callback", False, "on_escalation raised RuntimeError: pager down"
    )


def test_hooks_from_settings_split_the_command_line() -> None:
    hooks = EscalationHooks.from_settings(
        {
            "escalation_command": "notify-team --channel 'on call'",
            "escalation_url": None,
            "http_allow": None,
            "escalation_timeout": 2.5,
        }
    )
    assert (hooks.command, hooks.url, hooks.timeout_s) == (
        ["notify-team", "--channel", "on call"],
        None,
        2.5,
    )
    with pytest.raises(ValueError, match='escalation_command "\'unclosed"'):
        EscalationHooks.from_settings(
            {
                "escalation_command": "'unclosed",
                "escalation_url": None,
                "http_allow": None,
                "escalation_timeout": 1.0,
            }
        )
