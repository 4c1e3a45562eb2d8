"""A command-line word that is not valid UTF-8 (bytes Python keeps as lone surrogates) is
refused before anything runs: one line on stderr naming the option or argument, exit 2,
never a traceback. Every command, option and argument is taken from the typer app itself,
so a new one is covered without editing this file."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.core import TyperGroup
from typer.main import get_command
from typer.testing import CliRunner

from plandag.cli.app import app

BAD = os.fsdecode(b"bad\xff")
SHOWN = "bad\\xff"
ADVICE = "is not valid UTF-8 text; give it as UTF-8 (rename the file or folder if its name is not)"


def leaf_commands(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command of ``group`` that is not itself a group, with the words naming it."""
    for name in group.list_commands(None):
        command = group.get_command(None, name)
        if isinstance(command, TyperGroup):
            yield from leaf_commands(command, (*path, name))
        else:
            yield (*path, name), command


ROOT = get_command(app)
LEAVES = list(leaf_commands(ROOT))


def option_cases() -> Iterator[Any]:
    for path, command in LEAVES:
        for param in command.params:
            if param.param_type_name != "option" or param.is_flag or param.count:
                continue
            for option in param.opts:
                yield pytest.param(path, option, id=f"{' '.join(path)} {option}")


def argument_cases() -> Iterator[Any]:
    for path, command in LEAVES:
        arguments = [param for param in command.params if param.param_type_name == "argument"]
        for position, argument in enumerate(arguments):
            label = argument.metavar or argument.name.upper()
            yield pytest.param(path, position, label, id=f"{' '.join(path)} {label}")


@pytest.fixture(autouse=True)
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test runs in its own empty folder with its own run store."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "runs.sqlite3"))
    return tmp_path


def refused(words: list[str], label: str, shown: str = SHOWN) -> None:
    """``plandag WORDS`` exits 2 with the one line saying ``label 'shown'`` is not UTF-8."""
    result = CliRunner().invoke(app, words)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code == 2, (words, result.output)
    assert result.stdout == ""
    assert result.stderr == f"error: {label} '{shown}' {ADVICE}\n", words
    assert list(Path.cwd().iterdir()) == []  # nothing ran: no store, no output


def test_the_app_has_the_commands_options_and_arguments_the_walk_covers() -> None:
    names = {" ".join(path) for path, _ in LEAVES}
    assert {"run", "research", "library show", "serve", "extract nfe", "exec"} <= names
    assert len(list(option_cases())) > 200
    assert len(list(argument_cases())) > 20


@pytest.mark.parametrize(("path", "option"), list(option_cases()))
def test_every_option_refuses_a_value_that_is_not_utf8(path: tuple[str, ...], option: str) -> None:
    refused([*path, option, BAD], option)
    if option.startswith("--"):
        refused([*path, f"{option}={BAD}"], option)


@pytest.mark.parametrize(("path", "position", "label"), list(argument_cases()))
def test_every_argument_refuses_a_value_that_is_not_utf8(
    path: tuple[str, ...], position: int, label: str
) -> None:
    refused([*path, *["x"] * position, BAD], label)


def test_a_command_name_that_is_not_utf8_is_refused() -> None:
    refused([BAD], "the command")
    refused(["extract", BAD], "the command")


def test_an_option_name_that_is_not_utf8_is_refused() -> None:
    refused(["check", "plan.json", f"--{BAD}"], "the option", f"--{SHOWN}")


def test_a_lone_surrogate_not_from_bytes_is_refused_too() -> None:
    refused(["run", "\ud800"], "TASK", "\\ud800")


@pytest.mark.parametrize(
    ("words", "label"),
    [
        ([b"run", b"task \xff"], "TASK"),
        ([b"research", b"why \xff?"], "QUESTION"),
        ([b"library", b"show", b"name\xff"], "TASK_TYPE"),
        ([b"serve", b"--host", b"host\xff"], "--host"),
        (
            [b"extract", b"nfe", b"in", b"-o", b"o.jsonl", b"--cluster", b"tcp://\xff:8786"],
            "--cluster",
        ),
        ([b"exec", b"plan\xff.json"], "PLAN.json"),
    ],
    ids=["run", "research", "library-show", "serve-host", "extract-cluster", "exec"],
)
def test_the_console_script_refuses_bytes_that_are_not_utf8(
    tmp_path: Path, words: list[bytes], label: str
) -> None:
    env = {**os.environ, "PLANDAG_STORE": str(tmp_path / "runs.sqlite3")}
    done = subprocess.run(
        [sys.executable.encode(), b"-m", b"plandag", *words],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == b""
    [line] = done.stderr.decode("utf-8").splitlines()
    assert line.startswith(f"error: {label} '")
    assert "\\xff" in line
    assert line.endswith(ADVICE)
    assert not (tmp_path / "runs.sqlite3").exists()
