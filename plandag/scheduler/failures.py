"""How a step's failure is described on its record: the stable reason code
(:func:`reason_of`), a one-line detail for a person (:func:`detail_of`, :func:`one_line`),
and the error of a step not attempted because a dependency it needs is down
(:func:`down_error`; :mod:`plandag.scheduler.breaker`)."""

from __future__ import annotations

from pydantic import ValidationError

from plandag.dag.references import ReferenceResolutionError
from plandag.errors import (
    BoundaryError,
    CheckFailedError,
    DependencyDownError,
    StepError,
    error_message,
)
from plandag.scheduler.breaker import DownDependency

__all__ = ["detail_of", "down_error", "one_line", "reason_of"]

_DETAIL_CHARACTERS = 300


def one_line(text: str) -> str:
    """``text`` on one line (runs of white space as one space), cut to 300 characters: a
    step's ``detail``."""
    line = " ".join(text.split())
    if len(line) > _DETAIL_CHARACTERS:
        return line[: _DETAIL_CHARACTERS - 1] + "…"
    return line


def reason_of(error: BaseException) -> str:
    """The stable reason code recorded for a step that failed with ``error``."""
    if isinstance(error, StepError):
        return error.reason
    if isinstance(error, BoundaryError):
        return "write_outside_boundary"
    if isinstance(error, ValidationError):
        return "invalid_args"
    if isinstance(error, ReferenceResolutionError):
        return "reference_error"
    if isinstance(error, TimeoutError):
        return "timeout"
    return "tool_error"


def detail_of(error: BaseException) -> str:
    """A one-line summary of ``error`` for a person."""
    if isinstance(error, ValidationError):
        problems = [
            f"{'.'.join(str(part) for part in item['loc']) or '(args)'}: {item['msg']}"
            for item in error.errors()
        ]
        return one_line("invalid arguments: " + "; ".join(problems))
    if isinstance(error, CheckFailedError):
        return one_line(error_message(error))
    return one_line(f"{type(error).__name__}: {error_message(error)}")


def down_error(down: DownDependency) -> DependencyDownError:
    """The error of a step not attempted because ``down`` is down."""
    return DependencyDownError(
        f"not attempted: {down.describe()}; the replanner is told to avoid it",
        dependency=str(down.dependency),
    )
