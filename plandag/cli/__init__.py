"""The ``plandag`` command line.

``main`` (the console script) and ``plandag.cli.commands`` import typer and nothing else of
plandag's until a command runs; ``app`` (every command, for tests and embedding, from
:mod:`plandag.cli.app`) and ``EXIT_CODES`` (from :mod:`plandag.cli.common`) are imported on
first use.
"""

import sys
import types
import typing as _typing

from plandag.lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
    from plandag.cli.app import app as app
    from plandag.cli.common import EXIT_CODES as EXIT_CODES

__all__ = ["EXIT_CODES", "app", "main"]


def main() -> None:
    """Run the ``plandag`` command line (:func:`plandag.cli.commands.main`).

    ``plandag --version`` alone is answered here, before typer is imported.
    """
    if sys.argv[1:] == ["--version"]:
        from plandag import __version__

        sys.stdout.write(f"plandag {__version__}\n")
        return
    from plandag.cli.commands import main as run

    run()


class _Package(types.ModuleType):
    """This package, whose attribute ``app`` is the typer app, never the module
    :mod:`plandag.cli.app` that importing it would otherwise bind there (as an eager
    ``from plandag.cli.app import app`` would have rebound it)."""

    def __setattr__(self, name: str, value: object) -> None:
        if name == "app" and isinstance(value, types.ModuleType):
            return  # the submodule: ``app`` stays the typer app, loaded by __getattr__
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

if not _typing.TYPE_CHECKING:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {"EXIT_CODES": ("plandag.cli.common", "EXIT_CODES"), "app": ("plandag.cli.app", "app")},
    )
