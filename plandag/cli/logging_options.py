"""Log records of every command on standard error: the standard :mod:`logging` module, a Rich
handler, credentials masked, the level from ``-q``/``-v``/``-vv`` or ``PLANDAG_LOG``.

Every command takes ``-q``/``--quiet`` (errors only), ``-v``/``--verbose`` (``-v``
informational messages, ``-vv`` debugging ones too); without them the level is
``PLANDAG_LOG`` (``debug``, ``info``, ``warning`` or ``error``), else warnings
(:func:`log_level`). The options are added to each command as it is built
(:func:`add_verbosity`), so no command declares them itself.

While a command runs, one :class:`LogHandler` on the root logger writes the records at or
above that level to standard error, never to standard output, so ``--json`` documents stay
whole. Its :class:`~plandag.trace.redact.SecretFilter` masks credentials in each record
before it is formatted, and its console is a
:class:`~plandag.cli.secret_output.SecretMaskingConsole`, which masks what it lays out
again: an API key or an ``Authorization`` header logged by plandag, httpx or a provider's
SDK never reaches the terminal. The handler is removed and the root logger's level put back
when the command ends (:func:`start_logging`).
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from rich.logging import RichHandler
from rich.text import Text

from plandag.cli.options import QuietOption, VerboseOption
from plandag.cli.secret_output import SecretMaskingConsole
from plandag.trace.redact import SecretFilter

if TYPE_CHECKING:
    from rich.console import ConsoleRenderable
    from rich.traceback import Traceback

__all__ = [
    "ENVIRONMENT_VARIABLE",
    "LEVELS",
    "LogHandler",
    "add_verbosity",
    "log_level",
    "start_logging",
]

ENVIRONMENT_VARIABLE = "PLANDAG_LOG"
"""The environment variable naming the log level when no ``-q``/``-v`` is given."""

LEVELS: Mapping[str, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
"""The values ``PLANDAG_LOG`` takes (any case), and the :mod:`logging` level of each."""

QUIET_PARAMETER = "log_quiet"
VERBOSE_PARAMETER = "log_verbose"


class LogLevelError(ValueError):
    """``PLANDAG_LOG`` names no level, or ``-q`` and ``-v`` were given together."""


def log_level(quiet: bool, verbose: int, environ: Mapping[str, str] | None = None) -> int:
    """The log level of a command: ``-q`` ERROR, ``-v`` INFO, ``-vv`` (or more) DEBUG;
    without them ``PLANDAG_LOG`` (one of :data:`LEVELS`, any case; empty counts as unset),
    else WARNING. The flags win over the environment.

    Args:
        quiet: ``-q`` was given.
        verbose: how many times ``-v`` was given (0 or more).
        environ: the environment; default ``os.environ``.

    Returns:
        A :mod:`logging` level (``logging.ERROR``...).

    Raises:
        LogLevelError: ``-q`` together with ``-v``, or a ``PLANDAG_LOG`` that names no
            level (the message names the accepted values).
    """
    environ = os.environ if environ is None else environ
    named = environ.get(ENVIRONMENT_VARIABLE, "").strip()
    accepted = ", ".join(LEVELS)
    if named and named.lower() not in LEVELS:
        raise LogLevelError(
            f"{ENVIRONMENT_VARIABLE}={named!r} is not a log level; set it to one of "
            f"{accepted}, or unset it"
        )
    if quiet and verbose:
        raise LogLevelError("give -q (errors only) or -v (more), not both")
    if quiet:
        return logging.ERROR
    if verbose:
        return logging.INFO if verbose == 1 else logging.DEBUG
    if named:
        return LEVELS[named.lower()]
    return logging.WARNING


class LogHandler(RichHandler):
    """A ``rich.logging.RichHandler`` on standard error with credentials masked.

    On a terminal, Rich's layout (time, coloured level, message wrapped to the width).
    Elsewhere (a file, a pipe, a test), one line per record, unwrapped and without time:
    ``LEVEL logger.name: message``, so that lines stay whole for ``grep``. Each record is
    scrubbed by a :class:`~plandag.trace.redact.SecretFilter` before it is formatted, and
    the console masks credentials again as it lays the text out.

    Args:
        level: the lowest level written (a :mod:`logging` level).
    """

    def __init__(self, level: int = logging.NOTSET) -> None:
        super().__init__(
            level,
            console=SecretMaskingConsole(stderr=True, highlight=False),
            show_path=False,
            markup=False,
            rich_tracebacks=False,
            log_time_format="[%X]",
        )
        self.addFilter(SecretFilter())
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        # off a terminal, a record's line is written whole (rich would wrap it at 80)
        self.console.soft_wrap = not self.console.is_terminal

    def render(
        self,
        *,
        record: logging.LogRecord,
        traceback: Traceback | None,
        message_renderable: ConsoleRenderable,
    ) -> ConsoleRenderable:
        """Rich's layout on a terminal, else one plain line (no time, no wrapping)."""
        if self.console.is_terminal or not isinstance(message_renderable, Text):
            return super().render(
                record=record, traceback=traceback, message_renderable=message_renderable
            )
        line = Text(f"{record.levelname} ")
        line.append_text(message_renderable)
        return line


def start_logging(level: int) -> Callable[[], None]:
    """Write the log records at or above ``level`` to standard error while a command runs.

    A :class:`LogHandler` at ``level`` goes on the root logger (replacing one a previous
    command left), and the root logger's level is lowered to ``level`` when it is above it
    (it is never raised: a program that embeds the CLI keeps the records it asked for).

    Args:
        level: a :mod:`logging` level (:func:`log_level`).

    Returns:
        A function that removes the handler and puts the root logger's level back.
    """
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, LogHandler):
            root.removeHandler(handler)
    handler = LogHandler(level)
    before = root.level
    root.addHandler(handler)
    if root.getEffectiveLevel() > level:
        root.setLevel(level)

    def stop() -> None:
        root.removeHandler(handler)
        root.setLevel(before)

    return stop


def _verbosity_parameters() -> list[Any]:
    """The click parameters of ``-q`` and ``-v`` (:mod:`plandag.cli.options`), as typer
    builds them."""
    import typer
    from typer.main import get_command

    holder = typer.Typer(rich_markup_mode=None, add_completion=False)

    @holder.command()
    def probe(log_quiet: QuietOption = False, log_verbose: VerboseOption = 0) -> None:
        """Only its parameters are used."""

    return list(get_command(holder).params)


def add_verbosity(command: Any) -> None:
    """Give a click command (and each command of a group, at any depth) ``-q`` and ``-v``.

    The options are added to the command's parameters, and its callback is wrapped: the
    wrapper takes their values out, sets the log level (:func:`log_level`;
    ``PLANDAG_LOG`` naming no level: one line on standard error, exit 2), runs the command
    with logging on standard error (:func:`start_logging`) and stops logging after it.
    A command that has them already is left as it is.

    Args:
        command: a click command or group, as ``typer.main.get_group`` builds it.
    """
    for sub in getattr(command, "commands", {}).values():
        add_verbosity(sub)
    callback = getattr(command, "callback", None)
    if callback is None or hasattr(command, "commands"):
        return
    if any(param.name == VERBOSE_PARAMETER for param in command.params):
        return
    command.params.extend(_verbosity_parameters())

    @functools.wraps(callback)
    def with_logging(*args: Any, **kwargs: Any) -> Any:
        quiet = bool(kwargs.pop(QUIET_PARAMETER, False))
        verbose = int(kwargs.pop(VERBOSE_PARAMETER, 0) or 0)
        try:
            level = log_level(quiet, verbose)
        except LogLevelError as error:
            import typer

            sys.stderr.write(f"error: {error}\n")
            raise typer.Exit(2) from None
        stop = start_logging(level)
        try:
            return callback(*args, **kwargs)
        finally:
            stop()

    command.callback = with_logging
