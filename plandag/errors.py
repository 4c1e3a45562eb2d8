"""Exceptions raised by plandag.

Every exception plandag raises on purpose derives from :class:`PlandagError`, and each one
also subclasses the builtin it resembles, so ``except ValueError`` keeps working::

    PlandagError
    ├── PlanError(ValueError)          a plan does not compile; carries every Diagnostic
    ├── ToolDefinitionError(TypeError) a @tool function cannot become a tool
    ├── ToolLoadError(ImportError)     a --tools FILE.py could not be loaded
    ├── BoundaryError(PermissionError) a write target lies outside the run's write boundary
    ├── InputError(ValueError)         an input file or argument is unusable (CLI, extract)
    └── StepError                      a step attempt failed (raised by tools and checks)
        ├── TransientStepError         retrying may help: timeouts, 429, 5xx, resets
        │   └── StepTimeoutError(TimeoutError)  the step ran past its timeout
        └── PermanentStepError         retrying will not help: bad input, 4xx, missing data
            └── CheckFailedError       a success check rejected the step's result

The scheduler decides retry versus prune by the *type* of a step's error, never by its
message (the distinction pydantic-ai draws between ``ModelRetry`` and terminal failures).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from plandag.compiler.diagnostics import Diagnostic

__all__ = [
    "BoundaryError",
    "CheckFailedError",
    "InputError",
    "PermanentStepError",
    "PlanError",
    "PlandagError",
    "StepError",
    "StepTimeoutError",
    "ToolDefinitionError",
    "ToolLoadError",
    "TransientStepError",
]


class PlandagError(Exception):
    """Root of every exception plandag raises on purpose."""


class PlanError(PlandagError, ValueError):
    """A plan failed to compile.

    Attributes:
        diagnostics: every problem found, errors and warnings, in the order found. The
            compiler never stops at the first error, so a replanner can fix them all at once.
    """

    def __init__(self, diagnostics: Sequence[Diagnostic]) -> None:
        self.diagnostics: list[Diagnostic] = list(diagnostics)
        errors = [d for d in self.diagnostics if d.severity == "error"]
        head = f"plan does not compile: {len(errors)} error(s)"
        lines = [head, *(d.format() for d in errors)]
        super().__init__("\n".join(lines))

    @property
    def codes(self) -> list[str]:
        """The codes of every error diagnostic, in order (warnings left out)."""
        return [d.code for d in self.diagnostics if d.severity == "error"]


class ToolDefinitionError(PlandagError, TypeError):
    """A function decorated with ``@tool`` cannot be turned into a tool (say, no type hints)."""


class ToolLoadError(PlandagError, ImportError):
    """A user's tools file (``--tools FILE.py``) could not be imported or registered."""


class BoundaryError(PlandagError, PermissionError):
    """A write target lies outside the run's write boundary.

    Attributes:
        target: the offending path or URL, as the tool was about to use it.
    """

    def __init__(self, message: str, *, target: str) -> None:
        super().__init__(message)
        self.target = target


class InputError(PlandagError, ValueError):
    """An input the user gave (a file, a path, a ``--param``) cannot be used."""


class StepError(PlandagError):
    """A step attempt failed. Tools raise a subclass to say whether a retry may help.

    Attributes:
        reason: a short stable reason code recorded on the step (``timeout``,
            ``check_failed``, ``tool_error``...).
    """

    reason: str = "tool_error"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason


class TransientStepError(StepError):
    """A failure that a later attempt may not repeat (timeout, HTTP 429/5xx, reset)."""


class PermanentStepError(StepError):
    """A failure that a retry would repeat (bad input, HTTP 4xx, missing resource)."""


class StepTimeoutError(TransientStepError, TimeoutError):
    """The step ran longer than its timeout; a late result, if any, is discarded."""

    reason = "timeout"


class CheckFailedError(PermanentStepError):
    """A success check rejected the step's result.

    Attributes:
        check: the kind of the failing check (``regex``, ``jmespath``...).
        detail: why it failed, in words a person can act on.
    """

    reason = "check_failed"

    def __init__(self, check: str, detail: str) -> None:
        super().__init__(f"check {check} failed: {detail}")
        self.check = check
        self.detail = detail
