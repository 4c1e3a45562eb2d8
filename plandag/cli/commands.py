"""The table of commands and the group that imports a command's module only when it runs.

``plandag --version`` and ``plandag --help`` import this module, typer and nothing else of
plandag's: the help lists each command with the one-line summary written in
:data:`COMMANDS`; a command's module (and what it imports: the compiler, the scheduler, the
model clients...) is imported when that command is invoked, or when its own ``--help`` is
asked for. A test keeps the table in step with the commands' docstrings.

A command module adds its commands to a typer app with ``register(app)``; command modules
never import one another (what they share is in :mod:`plandag.cli.options`,
:mod:`plandag.cli.models_options` and :mod:`plandag.cli.common`), and
:mod:`plandag.cli.app` only assembles them.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

__all__ = [
    "COMMANDS",
    "CommandEntry",
    "LazyGroup",
    "launcher",
    "main",
    "refuse_words_not_utf8",
    "root_callback",
]

HELP = "Compile an LLM's plan into a validated DAG and run it: parallel, checked, bounded."


@dataclasses.dataclass(frozen=True, slots=True)
class CommandEntry:
    """One command of the ``plandag`` app.

    Attributes:
        name: the command's name on the command line.
        module: the module that defines it and adds it with ``register(app)``.
        summary: the first words (up to 76 characters) of the first paragraph of its
            docstring: ``--help`` shortens them as click shortens the docstring, to at most
            65 characters on its 80-column page, so the page is the same.
    """

    name: str
    module: str
    summary: str


_RUNS = "plandag.cli.runs_command"
_RESUME = "plandag.cli.resume_command"
_TRACE = "plandag.cli.trace_command"

COMMANDS: tuple[CommandEntry, ...] = (
    CommandEntry(
        "schema",
        "plandag.cli.check_command",
        "Print a JSON Schema: the plan format or the NF-e record.",
    ),
    CommandEntry(
        "check",
        "plandag.cli.check_command",
        "Compile a plan without running it; print every diagnostic like a compiler.",
    ),
    CommandEntry(
        "graph",
        "plandag.cli.check_command",
        "Print the plan's DAG as Mermaid text, its critical path (by step count)",
    ),
    CommandEntry(
        "exec", "plandag.cli.exec_command", "Compile and run a plan; print each step's outcome."
    ),
    CommandEntry(
        "tools",
        "plandag.cli.tools_command",
        "List the registered tools and check kinds (built-in, NF-e, and --tools",
    ),
    CommandEntry(
        "config",
        "plandag.cli.config_command",
        "Print the effective defaults of every brake and limit, and where each came",
    ),
    CommandEntry(
        "trust",
        "plandag.cli.trust_command",
        "Trust a project file: the MCP servers its [[mcp]] tables name may start.",
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
        _RUNS,
        "List the runs in the store, newest first, with their ids and states.",
    ),
    CommandEntry(
        "resume",
        _RESUME,
        "Continue a crashed or interrupted run: completed steps never run again; a",
    ),
    CommandEntry(
        "approve",
        _RESUME,
        "Approve the plan awaiting a decision and run it now, in the same run.",
    ),
    CommandEntry(
        "reject",
        _RESUME,
        "Reject the plan awaiting a decision, with feedback for the planner (exit 4).",
    ),
    CommandEntry(
        "abandon",
        _RESUME,
        "Close an escalated run for good: its state becomes abandoned (exit 1) and it",
    ),
    CommandEntry(
        "inbox",
        _RUNS,
        "List the escalated runs waiting for a person, and the crashed runs (their",
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
        "Delete old runs, their traces and blobs nothing references (never a run a live",
    ),
    CommandEntry(
        "extract",
        "plandag.cli.extract_group",
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
    """The click commands the module ``module_name`` adds with ``register(app)``, by name
    (imports it), each given ``-q`` and ``-v`` (:mod:`plandag.cli.logging_options`)."""
    from typer.main import get_group

    from plandag.cli.logging_options import add_verbosity

    module = importlib.import_module(module_name)
    holder = typer.Typer(rich_markup_mode=None)  # as the app: plain help, no panels
    module.register(holder)
    commands = dict(get_group(holder).commands)
    for command in commands.values():
        add_verbosity(command)  # -q and -v on every command, logging on stderr
    return commands


def _is_text(word: str) -> bool:
    """False for a word holding a lone surrogate: bytes of the command line that were not
    UTF-8 (Python keeps each as ``U+DCNN``, PEP 383), which no store, hash or writer takes."""
    try:
        word.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _command_of(group: TyperGroup, ctx: Any, words: list[str]) -> tuple[Any, int]:
    """The command ``words`` name (groups followed down) and the index of the first word
    after its name; ``(None, index)`` when the word at ``index`` names no command. The
    groups' own options are flags (``--help``, ``--version``) and take no value."""
    current: Any = group
    for index, word in enumerate(words):
        if word.startswith("-"):
            continue
        found = current.get_command(ctx, word) if _is_text(word) else None
        if found is None:
            return None, index
        if not isinstance(found, TyperGroup):
            return found, index + 1
        current = found
    return None, len(words)


def _what_is(group: TyperGroup, ctx: Any, words: list[str], index: int) -> str:
    """What the word at ``index`` is, as a person reads it on the command line: the option
    whose value it is (``--cluster``), the argument it fills (``TASK``), an option's name,
    or a command's name."""
    word = words[index]
    name, equals, _ = word.partition("=")
    if word.startswith("-") and equals and _is_text(name):
        return name
    command, start = _command_of(group, ctx, words)
    if index < start or command is None:
        return "the command"
    with_value = {
        option
        for param in command.params
        if param.param_type_name == "option" and not param.is_flag and not param.count
        for option in param.opts
    }
    arguments = [param for param in command.params if param.param_type_name == "argument"]
    position, value_of, positional_only = 0, None, False
    for at in range(start, index + 1):
        word = words[at]
        if value_of is not None:
            if at == index:
                return value_of
            value_of = None
        elif not positional_only and word == "--":
            positional_only = True
        elif not positional_only and word.startswith("-") and word != "-":
            if at == index:
                return "the option"
            if word in with_value:
                value_of = word
        elif at == index:
            if position < len(arguments):
                argument = arguments[position]
                return str(argument.metavar or (argument.name or "argument").upper())
            return "the argument"
        elif position < len(arguments) and arguments[position].nargs != -1:
            position += 1
    return "the argument"


def refuse_words_not_utf8(group: TyperGroup, ctx: Any, words: list[str]) -> None:
    """Exit 2 with one line on stderr when a word of the command line is not valid UTF-8.

    Every argument of every command is checked here, before any is parsed: a command that
    met such a word later would crash where it first encodes it (a store, a hash, a URL, a
    terminal). The line names the option or argument and shows the word with each
    undecodable byte as ``\\xNN``.

    Raises:
        typer.Exit: code 2, after the line is written.
    """
    for index, word in enumerate(words):
        if _is_text(word):
            continue
        from plandag.extract.names import display_name

        name, equals, value = word.partition("=")
        if word.startswith("-") and equals and _is_text(name):
            word = value  # --option=VALUE: the value is shown, after the option's name
        sys.stderr.write(
            f"error: {_what_is(group, ctx, words, index)} '{display_name(word)}' is not "
            "valid UTF-8 text; give it as UTF-8 (rename the file or folder if its name is "
            "not)\n"
        )
        raise typer.Exit(2)


class LazyGroup(TyperGroup):
    """A typer group whose commands listed in :data:`COMMANDS` are built on first use.

    ``--help`` lists them from the table without importing anything; invoking one (or its
    ``--help``) imports its module and builds it with typer. Commands registered directly
    on the app are served as usual. As the root of the command line, it refuses every
    word that is not valid UTF-8 before anything is parsed (:func:`refuse_words_not_utf8`).
    """

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Refuse words that are not UTF-8 (at the root), then parse as typer does."""
        if ctx.parent is None:
            refuse_words_not_utf8(self, ctx, args)
        return super().parse_args(ctx, args)

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

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        """The command ``args[0]`` names; an unknown name fails suggesting the nearest ones.

        Raises:
            UsageError: no command has that name ("No such command 'rnu'. Did you mean
                'run'?"), the suggestions drawn from every command, loaded or not.
        """
        from difflib import get_close_matches

        from typer._click.exceptions import UsageError

        try:
            return self._click_resolve_command(ctx, args)
        except UsageError as error:
            matches = get_close_matches(args[0], self.list_commands(ctx)) if args else []
            if matches and "Did you mean" not in error.message:
                suggestions = ", ".join(repr(match) for match in matches)
                error.message = f"{error.message.rstrip('.')}. Did you mean {suggestions}?"
            raise

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
    # What the command starts for its own length (the MCP servers of its registry) stops
    # when it ends, before the streams are put back.
    from plandag.cli.options import command_lifetime

    ctx.call_on_close(command_lifetime().close)


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
        from rich.markup import escape

        from plandag.cli.secret_output import SecretMaskingConsole

        SecretMaskingConsole(stderr=True, soft_wrap=True, highlight=False).print(
            f"[red]error:[/] the run store failed: {escape(str(error))}; another plandag may "
            "hold it (try again), or pick another with --store / PLANDAG_STORE",
            highlight=False,
        )
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(130) from None
