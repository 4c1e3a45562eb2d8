"""Start-up: `plandag --version` and `--help` import no part of plandag that does work, and
`plandag check` none that plans or calls a model. Checked through ``sys.modules`` in a fresh
interpreter (deterministic), not by timing."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from typer._click.utils import make_default_short_help
from typer.testing import CliRunner

from plandag.cli.app import app
from plandag.cli.commands import COMMANDS, launcher

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HEAVY = (
    "anthropic",
    "anyio",
    "httpx",
    "lxml",
    "networkx",
    "openai",
    "plandag.compiler",
    "plandag.planner",
    "plandag.scheduler",
    "plandag.store",
    "pydantic",
    "rich",
)
_PROBE = """
import json, sys
sys.argv = ["plandag", *json.loads(sys.argv[1])]
import plandag.cli
try:
    plandag.cli.main()
except SystemExit as stop:
    assert stop.code in (0, 2, None), stop.code  # no arguments: the help, exit 2
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def _modules_after(*args: str) -> set[str]:
    """The modules a fresh interpreter has imported once ``plandag ARGS`` has run."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(list(args))],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def _loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return [name for name in names if name in modules]


def test_version_imports_nothing_heavy_not_even_typer() -> None:
    modules = _modules_after("--version")
    assert _loaded(modules, (*HEAVY, "typer")) == []
    assert sorted(name for name in modules if name.startswith("plandag")) == [
        "plandag",
        "plandag.cli",
        "plandag.lazy",
    ]


def test_help_imports_typer_and_no_command() -> None:
    for args in (("--help",), ()):
        modules = _modules_after(*args)
        assert "typer" in modules
        assert _loaded(modules, HEAVY) == []
        assert not any(name.endswith("_command") for name in modules), args
        assert "plandag.cli.app" not in modules


def test_check_imports_neither_the_planner_nor_the_store_nor_http() -> None:
    modules = _modules_after(
        "check",
        str(EXAMPLES / "plans" / "words.json"),
        "--tools",
        str(EXAMPLES / "tools" / "text_tools.py"),
    )
    assert "plandag.compiler" in modules
    assert (
        _loaded(modules, ("anthropic", "openai", "httpx", "plandag.planner", "plandag.store")) == []
    )
    assert "plandag.cli.run_command" not in modules
    assert "plandag.cli.exec_command" not in modules


APPLICATION_LOADING = (
    "importlib.metadata",
    "plandag.tools.registry",
    "plandag.extract",
    "plandag.jobs",
)


def test_help_and_version_resolve_no_application_entry_point() -> None:
    for args in (("--help",), ("--version",)):
        modules = _modules_after(*args)
        assert _loaded(modules, APPLICATION_LOADING) == [], args
    modules = _modules_after("eval", "--help")  # typer reads package metadata for its own help
    assert _loaded(modules, APPLICATION_LOADING[1:]) == []


def test_check_imports_nothing_that_only_running_needs() -> None:
    modules = _modules_after(
        "check",
        str(EXAMPLES / "plans" / "words.json"),
        "--tools",
        str(EXAMPLES / "tools" / "text_tools.py"),
    )
    assert "plandag.scheduler.estimate" in modules  # the estimate is printed
    assert (
        _loaded(
            modules,
            (
                "networkx",
                "lxml",
                "regex",
                "asyncio",
                "plandag.scheduler.runner",
                "plandag.scheduler.session",
                "plandag.scheduler.events",
            ),
        )
        == []
    )


def test_check_of_a_plan_without_application_tools_loads_no_application() -> None:
    modules = _modules_after(
        "check",
        str(EXAMPLES / "plans" / "words.json"),
        "--tools",
        str(EXAMPLES / "tools" / "text_tools.py"),
    )
    assert "plandag.tools.registry" in modules
    assert [name for name in modules if name.startswith(("plandag.extract", "plandag.jobs"))] == []


def _first_paragraph(text: str | None) -> str:
    return " ".join(inspect.cleandoc(text or "").split("\n\n")[0].split())


def test_the_table_lists_every_command_with_the_start_of_its_help() -> None:
    group = typer.main.get_group(app)
    names = group.list_commands(None)  # type: ignore[arg-type]
    assert names == [entry.name for entry in COMMANDS]
    for entry in COMMANDS:
        command = group.get_command(None, entry.name)  # type: ignore[arg-type]
        assert command is not None, entry.name
        paragraph = _first_paragraph(command.help)
        hint = f"update the summary of {entry.name!r} in plandag/cli/commands.py COMMANDS"
        assert paragraph.startswith(entry.summary), hint
        assert entry.summary == paragraph or len(entry.summary) >= 66, hint
        for limit in (45, 65):  # the page is the same as click's from the docstring
            assert make_default_short_help(entry.summary, limit) == command.get_short_help_str(
                limit
            ), hint
        callback = command.callback
        if callback is not None and entry.name != "extract":
            assert callback.__module__ == entry.module, entry.name


def test_help_lists_every_command_from_the_table() -> None:
    result = CliRunner().invoke(launcher, ["--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    lines = result.output.split("Commands:\n", 1)[1].splitlines()
    assert [line.split()[0] for line in lines if line.strip()] == [entry.name for entry in COMMANDS]
    assert "  gc        Delete old runs, their traces and blobs" in result.output


def test_a_command_of_the_launcher_runs_and_an_unknown_one_is_refused() -> None:
    runner = CliRunner()
    shown = runner.invoke(launcher, ["schema", "plan"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["title"]
    unknown = runner.invoke(launcher, ["nope"])
    assert unknown.exit_code == 2
    assert "No such command 'nope'" in unknown.output
    nested = runner.invoke(launcher, ["extract", "--help"])
    assert nested.exit_code == 0
    assert "nfe" in nested.output


def test_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "plandag", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout == "plandag 0.1.0\n"
    via_typer = CliRunner().invoke(launcher, ["--version"])
    assert via_typer.stdout == "plandag 0.1.0\n"


@pytest.mark.parametrize(
    ("typed", "suggested"),
    [
        (["rnu", "task"], "Did you mean 'run'?"),
        (["exce", "plan.json"], "Did you mean 'exec'?"),
        (["library", "aprove", "x"], "Did you mean 'approve'?"),
        (["extract", "nfee", "a.xml"], "Did you mean 'nfe'?"),
    ],
)
def test_a_mistyped_command_is_refused_with_the_nearest_names(
    typed: list[str], suggested: str
) -> None:
    refused = CliRunner().invoke(launcher, typed)
    assert refused.exit_code == 2
    assert f"No such command '{typed[-2]}'. {suggested}" in refused.output


def test_a_name_near_no_command_gets_no_suggestion() -> None:
    refused = CliRunner().invoke(launcher, ["xyzzy"])
    assert refused.exit_code == 2
    assert "No such command 'xyzzy'." in refused.output
    assert "Did you mean" not in refused.output
