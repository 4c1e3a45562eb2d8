"""The table of commands and the group that imports a command's module only when it runs.

``plandag --version`` and ``plandag --help`` import this module, typer and nothing else of
plandag's: the help lists each command with the one-line summary written in
:data:`COMMANDS`; a command's module (and what it imports: the compiler, the scheduler, the
model clients...) is imported when that command is invoked, or when its own ``--help`` is
asked for. A test keeps the table in step with the commands' docstrings.

A command module adds its commands to a typer app with ``register(app)``; the commands of
:mod:`plandag.cli.app` itself are those registered on its ``app``.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

__all__ = ["COMMANDS", "CommandEntry", "LazyGroup", "launcher", "main", "root_callback"]

HELP = "Compile an LLM's plan into a validated DAG and run it: parallel, checked, bounded."


@dataclasses.dataclass(frozen=True, slots=True)
class CommandEntry:
    """One command of the ``plandag`` app.

    Attributes:
        name: the command's name on the command line.
        module: the module that defines it (with ``register(app)``, or :mod:`plandag.cli.app`).
        summary: the first words (up to 76 characters) of the first paragraph of its
            docstring: ``--help`` shortens them as click shortens the docstring, to at most
            65 characters on its 80-column page, so the page is the same.
    """

    name: str
    module: str
    summary: str


_APP = "plandag.cli.app"
_STORE = "plandag.cli.store_command"
_TRACE = "plandag.cli.trace_command"

COMMANDS: tuple[CommandEntry, ...] = (
    CommandEntry("schema", _APP, "Print a JSON Schema: the plan format or the NF-e record."),
    CommandEntry(
        "check",
        _APP,
        "Compile a plan without running it; print every diagnostic like a compiler.",
    ),
    CommandEntry(
        "graph",
        _APP,
        "Print the plan's DAG as Mermaid text, its critical path (by step count)",
    ),
    CommandEntry("exec", _APP, "Compile and run a plan; print each step's outcome."),
    CommandEntry(
        "tools",
        _APP,
        "List the registered tools and check kinds (built-in, NF-e, and --tools",
    ),
    CommandEntry(
        "config",
        _APP,
        "Print the effective defaults of every brake and limit, and where each came",
    ),
    CommandEntry(
        "plan",
        "plandag.cli.plan_command",
        "Ask a model for a plan for TASK and write it; nothing is executed.",
    ),
    CommandEntry(
        "run",
        "plandag.cli.run_command",
        "Plan TASK with a model, run the plan, replan what fails, print the result.",
    ),
    CommandEntry(
        "research",
        "plandag.cli.research_command",
        "Research QUESTION over a folder of documents; write a report with checked",
    ),
    CommandEntry(
        "tell",
        "plandag.cli.tell_command",
        "Give a running `plandag run` new input: the steps it has not started are",
    ),
    CommandEntry(
        "library",
        "plandag.cli.library_command",
        "Plans that worked, kept by task type and reused with no model call.",
    ),
    CommandEntry(
        "stats",
        "plandag.cli.library_command",
        "Figures per task type: runs, plans run with no replan, replans per run,",
    ),
    CommandEntry(
        "bench",
        "plandag.cli.bench_command",
        "Run plandag and a sequential ReAct agent on the same workloads; compare.",
    ),
    CommandEntry(
        "runs",
        _STORE,
        "List the runs in the store, newest first, with their ids and states.",
    ),
    CommandEntry(
        "resume",
        _STORE,
        "Continue a crashed or interrupted run: completed steps never run again; a",
    ),
    CommandEntry(
        "approve",
        _STORE,
        "Approve the plan awaiting a decision and run it now, in the same run.",
    ),
    CommandEntry(
        "reject",
        _STORE,
        "Reject the plan awaiting a decision, with feedback for the planner (exit 4).",
    ),
    CommandEntry(
        "abandon",
        _STORE,
        "Close an escalated run for good: its state becomes abandoned (exit 1) and it",
    ),
    CommandEntry(
        "inbox",
        _STORE,
        "List the escalated runs waiting for a person, oldest first: why, since when,",
    ),
    CommandEntry(
        "trace",
        _TRACE,
        "Show a run's timeline: steps as bars over time, the critical path marked",
    ),
    CommandEntry(
        "diff",
        _TRACE,
        "Compare two runs: steps added, removed or changed, and their outcomes.",
    ),
    CommandEntry(
        "gc",
        "plandag.cli.gc_command",
        "Delete old runs, their traces and blobs nothing references (never running,",
    ),
    CommandEntry(
        "extract",
        "plandag.cli.extract_command",
        "Batch extraction jobs built on stored plans.",
    ),
    CommandEntry("eval", "plandag.cli.eval_command", "Score a job's records against labels."),
    CommandEntry(
        "serve",
        "plandag.cli.serve_command",
        "Serve the web console: conversations with plan mode, decision cards, runs,",
    ),
)
"""Every command, in the order ``--help`` lists them."""

_BY_NAME = {entry.name: entry for entry in COMMANDS}


def _module_commands(module_name: str) -> dict[str, Any]:
    """The click commands the module ``module_name`` defines, by name (imports it)."""
    from typer.main import get_group

    module = importlib.import_module(module_name)
    register = getattr(module, "register", None)
    if register is not None:
        holder = typer.Typer(rich_markup_mode=None)  # as the app: plain help, no panels
        register(holder)
        group = get_group(holder)
    else:
        group = get_group(module.app)
    return dict(group.commands)


class LazyGroup(TyperGroup):
    """A typer group whose commands listed in :data:`COMMANDS` are built on first use.

    ``--help`` lists them from the table without importing anything; invoking one (or its
    ``--help``) imports its module and builds it with typer. Commands registered directly
    on the app are served as usual.
    """

    def list_commands(self, ctx: Any) -> list[str]:
        """Every command name: the table's, then any registered directly."""
        names = [entry.name for entry in COMMANDS]
        return names + [name for name in self.commands if name not in _BY_NAME]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """The command ``cmd_name``, importing its module when needed (None if unknown)."""
        command = self.commands.get(cmd_name)
        if command is not None:
            return command
        entry = _BY_NAME.get(cmd_name)
        if entry is None:
            return None
        for name, loaded in _module_commands(entry.module).items():
            self.commands.setdefault(name, loaded)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The ``Commands`` section of ``--help``, from the table (nothing imported)."""
        from typer._click.utils import make_default_short_help

        rows: list[tuple[str, str]] = []
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        for name in names:
            entry = _BY_NAME.get(name)
            if entry is not None and name not in self.commands:
                rows.append((name, make_default_short_help(entry.summary, limit)))
                continue
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _version_callback(value: bool) -> None:
    """Print the version and exit (``plandag --version``)."""
    if value:
        from plandag import __version__

        sys.stdout.write(f"plandag {__version__}\n")
        raise typer.Exit()


def root_callback(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version_callback, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Compile an LLM's plan into a validated DAG and run it: parallel, checked, bounded."""
    # No secret reaches the terminal: standard output and error are masked while the
    # command runs, and put back after it (plandag.cli.secret_output).
    from plandag.cli.secret_output import mask_standard_streams

    before = mask_standard_streams()

    def put_back() -> None:
        sys.stdout, sys.stderr = before

    ctx.call_on_close(put_back)


launcher = typer.Typer(
    name="plandag",
    help=HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    cls=LazyGroup,
)
"""The app the ``plandag`` console script runs: every command is built on first use."""
launcher.callback()(root_callback)


def main() -> None:
    """Entry point of the ``plandag`` console script: run :data:`launcher`.

    API keys and authorization headers never reach a log line: a filter scrubs them from
    every record first (:func:`plandag.trace.redact.install_secret_filter`). A run store
    that fails (locked past its timeout, full, corrupt) exits 2 with the reason;
    Ctrl-C exits 130.
    """
    import sqlite3

    from plandag.trace.redact import install_secret_filter

    install_secret_filter()
    try:
        launcher()
    except sqlite3.Error as error:
        from rich.console import Console
        from rich.markup import escape

        Console(stderr=True, soft_wrap=True, highlight=False).print(
            f"[red]error:[/] the run store failed: {escape(str(error))}; another plandag may "
            "hold it (try again), or pick another with --store / PLANDAG_STORE",
            highlight=False,
        )
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(130) from None
