"""Logging on the command line: ``-q``/``-v``/``-vv`` and ``PLANDAG_LOG`` on every command,
records on stderr only (never on stdout, never inside a ``--json`` document), credentials
masked in them."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from plandag.cli.commands import launcher
from plandag.cli.logging_options import (
    LEVELS,
    LogHandler,
    LogLevelError,
    log_level,
    start_logging,
)

SECRET_KEY = "sk-ant-api03-" + "Q" * 40
SECRET_VALUE = "s3cr3t-value-of-the-service-token"

TOOLS = """
import logging

from plandag import tool

log = logging.getLogger("plandag.tool")
log.error("an error line")
log.warning("a warning line")
log.info("an info line")
log.debug("a debug line")
log.warning("the key is %s and the token %s", {key!r}, {token!r})


@tool
def double(x: int) -> int:
    return 2 * x
"""


@pytest.fixture
def tools_file(tmp_path: Path) -> Path:
    path = tmp_path / "logging_tools.py"
    path.write_text(TOOLS.format(key=SECRET_KEY, token=SECRET_VALUE), encoding="utf-8")
    return path


def _invoke(args: list[str], env: dict[str, str] | None = None) -> Any:
    environment = {"PLANDAG_LOG": "", "MY_SERVICE_TOKEN": SECRET_VALUE, **(env or {})}
    return CliRunner().invoke(launcher, args, env=environment)


def _leaf_commands(command: Any, path: tuple[str, ...] = ()) -> list[tuple[str, Any]]:
    names = getattr(command, "list_commands", None)
    if names is None:
        return [(" ".join(path), command)]
    found: list[tuple[str, Any]] = []
    for name in names(None):
        sub = command.get_command(None, name)
        assert sub is not None, name
        found += _leaf_commands(sub, (*path, name))
    return found


def test_every_command_takes_quiet_and_verbose() -> None:
    import typer.main

    leaves = _leaf_commands(typer.main.get_group(launcher))
    assert len(leaves) > 25
    for name, command in leaves:
        options = {opt for param in command.params for opt in param.opts}
        assert {"-q", "--quiet", "-v", "--verbose"} <= options, name
        help_text = CliRunner().invoke(launcher, [*name.split(), "--help"]).output
        assert "-q, --quiet" in help_text, name
        assert "-v, --verbose" in help_text, name


@pytest.mark.parametrize(
    ("flags", "shown", "hidden"),
    [
        ([], ["an error line", "a warning line"], ["an info line", "a debug line"]),
        (["-q"], ["an error line"], ["a warning line", "an info line", "a debug line"]),
        (["-v"], ["a warning line", "an info line"], ["a debug line"]),
        (["-vv"], ["an info line", "a debug line"], []),
        (["--verbose", "--verbose"], ["a debug line"], []),
    ],
)
def test_the_flags_set_the_level_on_stderr_and_stdout_stays_json(
    tools_file: Path, flags: list[str], shown: list[str], hidden: list[str]
) -> None:
    result = _invoke(["tools", "--tools", str(tools_file), "--json", *flags])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)  # nothing but the document on stdout
    assert any(item["name"] == "double" for item in document["tools"])
    for line in shown:
        assert line in result.stderr
        assert line not in result.stdout
    for line in hidden:
        assert line not in result.stderr
        assert line not in result.stdout


def test_a_record_is_one_line_with_its_level_and_logger(tools_file: Path) -> None:
    result = _invoke(["tools", "--tools", str(tools_file), "-v"])
    assert result.exit_code == 0, result.output
    assert "INFO plandag.tool: an info line\n" in result.stderr
    assert "WARNING plandag.tool: a warning line\n" in result.stderr


def test_a_long_record_is_not_wrapped_off_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.setenv("COLUMNS", "80")
    stop = start_logging(logging.INFO)
    try:
        logging.getLogger("plandag.test_logging").info("word " * 40)
    finally:
        stop()
    assert stream.getvalue() == "INFO plandag.test_logging: " + "word " * 40 + "\n"


@pytest.mark.parametrize(("value", "line"), [("debug", "a debug line"), ("INFO", "an info line")])
def test_plandag_log_sets_the_level(tools_file: Path, value: str, line: str) -> None:
    result = _invoke(["tools", "--tools", str(tools_file), "--json"], {"PLANDAG_LOG": value})
    assert result.exit_code == 0, result.output
    assert line in result.stderr
    json.loads(result.stdout)


def test_a_flag_wins_over_plandag_log(tools_file: Path) -> None:
    result = _invoke(["tools", "--tools", str(tools_file), "-q"], {"PLANDAG_LOG": "debug"})
    assert result.exit_code == 0, result.output
    assert "a warning line" not in result.stderr
    assert "a debug line" not in result.stderr


def test_an_unknown_plandag_log_is_one_line_exit_2_naming_the_values(tools_file: Path) -> None:
    result = _invoke(["tools", "--tools", str(tools_file)], {"PLANDAG_LOG": "loud"})
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        "error: PLANDAG_LOG='loud' is not a log level; set it to one of debug, info, warning, "
        "error, or unset it\n"
    )


def test_quiet_and_verbose_together_are_refused(tools_file: Path) -> None:
    result = _invoke(["tools", "--tools", str(tools_file), "-q", "-v"])
    assert result.exit_code == 2
    assert result.stderr == "error: give -q (errors only) or -v (more), not both\n"


def test_a_secret_in_a_log_message_is_masked(tools_file: Path) -> None:
    result = _invoke(["tools", "--tools", str(tools_file), "--json"])
    assert result.exit_code == 0, result.output
    assert "the key is" in result.stderr
    assert SECRET_KEY not in result.stderr
    assert SECRET_VALUE not in result.stderr
    assert SECRET_KEY[:16] not in result.stderr


def test_the_handler_masks_secrets_on_a_plain_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """The handler itself masks: no masking stream stands between it and stderr here."""
    monkeypatch.setenv("MY_SERVICE_TOKEN", SECRET_VALUE)
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    stop = start_logging(logging.INFO)
    try:
        logger = logging.getLogger("plandag.test_logging")
        logger.info("calling with Authorization: Bearer %s", "abcdefghijklmnopqrstuvwxyz012345")
        logger.warning("key=%s token=%s", SECRET_KEY, SECRET_VALUE)
        try:
            raise RuntimeError(f"failed with {SECRET_KEY}")
        except RuntimeError:
            logger.exception("a call failed")
    finally:
        stop()
    written = stream.getvalue()
    assert "calling with" in written
    assert "a call failed" in written
    assert "RuntimeError" in written
    for secret in ("abcdefghijklmnopqrstuvwxyz012345", SECRET_KEY, SECRET_VALUE):
        assert secret not in written


def test_logging_stops_with_the_command(tools_file: Path) -> None:
    root = logging.getLogger()
    level = root.level
    result = _invoke(["tools", "--tools", str(tools_file), "-vv"])
    assert result.exit_code == 0, result.output
    assert not [handler for handler in root.handlers if isinstance(handler, LogHandler)]
    assert root.level == level


def test_the_root_level_is_lowered_never_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    root = logging.getLogger()
    monkeypatch.setattr(root, "level", logging.DEBUG)
    stop = start_logging(logging.ERROR)
    try:
        assert root.level == logging.DEBUG  # the embedding program's records still flow
        handlers = [handler for handler in root.handlers if isinstance(handler, LogHandler)]
        assert [handler.level for handler in handlers] == [logging.ERROR]
    finally:
        stop()


def test_log_level() -> None:
    assert log_level(False, 0, {}) == logging.WARNING
    assert log_level(True, 0, {}) == logging.ERROR
    assert log_level(False, 1, {}) == logging.INFO
    assert log_level(False, 3, {}) == logging.DEBUG
    assert log_level(False, 0, {"PLANDAG_LOG": " Error "}) == logging.ERROR
    assert log_level(False, 0, {"PLANDAG_LOG": ""}) == logging.WARNING
    assert log_level(False, 1, {"PLANDAG_LOG": "error"}) == logging.INFO
    assert set(LEVELS) == {"debug", "info", "warning", "error"}
    with pytest.raises(LogLevelError, match="debug, info, warning, error"):
        log_level(True, 0, {"PLANDAG_LOG": "verbose"})


def test_the_console_script_logs_on_stderr_only(tools_file: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "plandag", "tools", "--tools", str(tools_file), "--json", "-vv"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "MY_SERVICE_TOKEN": SECRET_VALUE},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    json.loads(done.stdout)
    assert "DEBUG plandag.tool: a debug line" in done.stderr
    assert SECRET_KEY not in done.stderr
    assert SECRET_VALUE not in done.stderr
