"""A plan file is a regular file of at most ``--max-plan-bytes`` (16 MiB by default): a pipe,
a device, a folder or a larger file is refused with the reason and exit 2, at once and
without reading more than the limit (``check``, ``graph``, ``exec``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from plandag.cli.app import app
from plandag.compiler import DEFAULT_MAX_PLAN_BYTES

PLAN = '{"steps": [{"id": 1, "tool": "json_select", "args": {"data": 1, "expr": "@"}}]}'
COMMANDS = [["check"], ["graph"], ["exec", "--approve", "never"]]
IDS = ["check", "graph", "exec"]

pytestmark = pytest.mark.timeout(30)  # a FIFO opened for reading would wait for ever


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "store" / "runs.sqlite3"))
    return work


def invoke(*words: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(words))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in result.output
    return result.exit_code, result.stderr


def refused(command: list[str], plan: str, says: str) -> None:
    code, stderr = invoke(*command, plan)
    assert code == 2, stderr
    [line] = stderr.splitlines()
    assert line == f"error: plan file {plan} {says}", line


def test_the_default_is_16_mib() -> None:
    assert DEFAULT_MAX_PLAN_BYTES == 16 * 1024 * 1024


def test_every_command_that_reads_a_plan_file_takes_max_plan_bytes() -> None:
    root = get_command(app)
    readers = []
    for name in root.list_commands(None):
        command = root.get_command(None, name)
        arguments = [p for p in getattr(command, "params", []) if p.param_type_name == "argument"]
        if any(argument.metavar == "PLAN.json" for argument in arguments):
            readers.append(name)
            options = {opt for p in command.params for opt in p.opts}
            assert "--max-plan-bytes" in options, name
    assert sorted(readers) == ["check", "exec", "graph"]


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_a_fifo_is_refused_at_once(folder: Path, command: list[str]) -> None:
    os.mkfifo(folder / "plan.json")
    refused(
        command,
        "plan.json",
        "is not a regular file (a FIFO); save the plan in a file and give its path",
    )


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_a_device_is_refused_without_reading_it(folder: Path, command: list[str]) -> None:
    refused(
        command,
        "/dev/zero",
        "is not a regular file (a character device); save the plan in a file and give its path",
    )


def test_a_folder_is_refused(folder: Path) -> None:
    (folder / "plans").mkdir()
    refused(["check"], "plans", "is a folder; give the path of a plan file inside it")


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_a_file_over_the_limit_is_refused_before_it_is_read(
    folder: Path, command: list[str]
) -> None:
    with open(folder / "plan.json", "wb") as sparse:  # a hole: no disk used, nothing read
        sparse.truncate(2**40)
    refused(
        command,
        "plan.json",
        f"has {2**40:,} bytes, more than the {DEFAULT_MAX_PLAN_BYTES:,} a plan may have; "
        "raise --max-plan-bytes (max_plan_bytes in the config) if it is really a plan",
    )


def test_a_plan_of_exactly_the_limit_compiles_and_one_byte_more_does_not(folder: Path) -> None:
    text = PLAN.encode()
    (folder / "plan.json").write_bytes(text + b" " * (DEFAULT_MAX_PLAN_BYTES - len(text)))
    code, stderr = invoke("check", "plan.json")
    assert code == 0, stderr
    with open(folder / "plan.json", "ab") as more:
        more.write(b" ")
    code, stderr = invoke("check", "plan.json")
    assert code == 2, stderr
    assert f"has {DEFAULT_MAX_PLAN_BYTES + 1:,} bytes, more than the" in stderr


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_max_plan_bytes_sets_the_limit(folder: Path, command: list[str]) -> None:
    (folder / "plan.json").write_text(PLAN, encoding="utf-8")
    size = len(PLAN)
    code, stderr = invoke(*command, "plan.json", "--max-plan-bytes", str(size - 1))
    assert code == 2, stderr
    assert f"has {size} bytes, more than the {size - 1} a plan may have" in stderr
    code, stderr = invoke(*command, "plan.json", "--max-plan-bytes", str(size))
    assert code == 0, stderr


def test_max_plan_bytes_comes_from_the_config_too(folder: Path) -> None:
    (folder / "plan.json").write_text(PLAN, encoding="utf-8")
    (folder / "plandag.toml").write_text("max_plan_bytes = 10\n", encoding="utf-8")
    code, stderr = invoke("check", "plan.json")
    assert code == 2, stderr
    assert f"has {len(PLAN)} bytes, more than the 10 a plan may have" in stderr


@pytest.mark.parametrize("value", ["0", "-1", "x", "none"])
def test_max_plan_bytes_must_be_a_whole_number_above_0(folder: Path, value: str) -> None:
    (folder / "plan.json").write_text(PLAN, encoding="utf-8")
    code, stderr = invoke("check", "plan.json", "--max-plan-bytes", value)
    assert code == 2, stderr
    assert "--max-plan-bytes" in stderr


def test_a_plan_that_is_not_utf8_is_still_refused_with_the_reason(folder: Path) -> None:
    (folder / "plan.json").write_bytes(b'{"steps": "\xff"}')
    code, stderr = invoke("check", "plan.json")
    assert code == 2, stderr
    assert stderr.startswith("error: cannot read plan file plan.json: 'utf-8' codec")


def test_a_missing_plan_file_is_named(folder: Path) -> None:
    refused(["check"], "nope.json", "does not exist")


def test_the_plan_is_read_as_before(folder: Path) -> None:
    (folder / "plan.json").write_bytes(b"\xef\xbb\xbf" + PLAN.encode())  # a byte order mark
    code, stderr = invoke("check", "plan.json")
    assert code == 0, stderr
    assert stderr.endswith("plan.json: ok, 1 step, 0 warnings\n")
