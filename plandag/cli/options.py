"""Options and helpers shared by several commands, kept light: importing this module imports
typer and nothing of plandag's, so a command that needs them costs no start-up time."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

__all__ = ["EXIT_USAGE", "StoreOption", "fail"]

EXIT_USAGE = 2
"""Exit code for unusable arguments (ARCHITECTURE.md, "States and exit codes")."""

StoreOption = Annotated[
    Path | None,
    typer.Option(
        "--store",
        metavar="PATH",
        help="The run store (SQLite); default $PLANDAG_STORE, else the user's data folder.",
    ),
]


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print ``error: message`` on standard error and exit with ``code`` (default 2)."""
    sys.stderr.write(f"error: {message}\n")
    raise typer.Exit(code)
