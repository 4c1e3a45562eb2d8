"""The ``plandag`` command line (typer): :data:`app` assembles every command, each defined
in a module of its own and imported when it runs (:data:`plandag.cli.commands.COMMANDS`,
:class:`~plandag.cli.commands.LazyGroup`); :data:`EXIT_CODES` gives the exit code of each
run state (ARCHITECTURE.md, "States and exit codes")."""

from __future__ import annotations

import typer

from plandag.cli.commands import LazyGroup, root_callback
from plandag.cli.common import EXIT_CODES

__all__ = ["EXIT_CODES", "app", "main"]

app = typer.Typer(
    name="plandag",
    help="Compile an LLM's plan into a validated DAG and run it: parallel, checked, bounded.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    cls=LazyGroup,  # every command's module is imported when the command is invoked
)
"""Every command of the ``plandag`` command line (for tests and embedding)."""
app.callback()(root_callback)


def main() -> None:
    """Entry point of the ``plandag`` console script (:func:`plandag.cli.commands.main`)."""
    from plandag.cli.commands import main as run

    run()
