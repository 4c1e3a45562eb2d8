"""``plandag extract``: the group of batch extraction jobs, each command defined in a
module of its own (``nfe``: :mod:`plandag.cli.extract_command`, ``contracts``:
:mod:`plandag.cli.contracts_command`) and added here."""

from __future__ import annotations

import typer

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add ``extract`` (its commands ``nfe`` and ``contracts``) to the ``plandag`` app."""
    from plandag.cli import contracts_command, extract_command

    group = typer.Typer(
        help="Batch extraction jobs built on stored plans.",
        no_args_is_help=True,
        rich_markup_mode=None,
    )
    extract_command.register(group)
    contracts_command.register(group)
    app.add_typer(group, name="extract")
