"""Options and helpers shared by several commands, kept light: importing this module imports
typer and nothing of plandag's, so a command that needs them costs no start-up time."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

if TYPE_CHECKING:
    from collections.abc import Iterable

    from plandag.tools.registry import Registry

__all__ = ["EXIT_USAGE", "StoreOption", "build_registry", "fail"]

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


def build_registry(
    tools: Iterable[Path] | None,
    *,
    applications: Iterable[str] = (),
    resolve_installed: bool = True,
) -> Registry:
    """The registry of a command: the built-in tools and checks, the installed
    ``applications`` of the job at hand, and each ``--tools`` entry: a ``.py`` file, or the
    name of an installed application (``--tools nfe``).

    Args:
        tools: the ``--tools`` entries, in order (repeats are loaded once).
        applications: entry-point names of the ``plandag.tools`` group to register.
        resolve_installed: find the tools of other installed applications when a plan names
            them (stored plans: ``check``, ``exec``, ``resume``); False where a model writes
            the plans from what it is shown (``run``, ``plan``).

    Raises:
        ToolLoadError: an entry is neither a loadable file nor an installed application.
    """
    from plandag.errors import ToolLoadError
    from plandag.tools.registry import default_registry, installed_applications

    registry = default_registry(applications, resolve_installed=resolve_installed)
    for entry in dict.fromkeys(tools or []):
        if entry.suffix == ".py" or entry.exists():
            registry.load_file(entry)
        elif str(entry) in installed_applications():
            registry.add_application(str(entry))
        else:
            installed = ", ".join(installed_applications()) or "none"
            raise ToolLoadError(
                f"--tools {entry}: no such file, and no installed application of that name "
                f"(installed: {installed}); give a .py file or an application's name"
            )
    return registry
