"""Exceptions raised by plandag.

Every exception plandag raises on purpose derives from :class:`PlandagError`, and each one
also subclasses the builtin it resembles, so ``except ValueError`` keeps working::

    PlandagError
    ├── PlanError(ValueError)          a plan does not compile; carries every Diagnostic
    ├── ToolDefinitionError(TypeError) a @tool function cannot become a tool
    ├── ToolLoadError(ImportError)     a --tools FILE.py could not be loaded
    ├── BoundaryError(PermissionError) a write target lies outside the run's write boundary
    ├── InputError(ValueError)         an input file or argument is unusable (CLI, extract)
    ├── PlanBudgetError(RuntimeError)  a replan patch would pass the plan-relative budget
    └── StepError                      a step attempt failed (raised by tools and checks)
        ├── TransientStepError         retrying may help: timeouts, 429, 5xx, resets
        │   ├── StepTimeoutError(TimeoutError)  the step ran past its timeout
        │   └── NotStartedError        failed before it could have any effect (refused)
        └── PermanentStepError         retrying will not help: bad input, 4xx, missing data
            ├── CheckFailedError       a success check rejected the step's result
            ├── DependencyDownError    the step's tool or HTTP host is down (circuit breaker)
            ├── InvalidOutputError     a model's reply does not fit its schema (one re-ask)
            └── BudgetRefusedError     a call was not sent: it would pass a cost or token cap

The scheduler decides retry versus prune by the *type* of a step's error, never by its
message (the distinction pydantic-ai draws between ``ModelRetry`` and terminal failures).
Exceptions that are not ours (``ValueError``, ``httpx.HTTPStatusError``...) are sorted by
:func:`classify_error`, a documented rule a run may replace (``run_plan(classify=...)``);
:func:`describe_failure` adds what the retry decision needs beyond the kind: the leaf to
report, whether the failure is known to precede any effect, and the server's Retry-After.
"""

from __future__ import annotations

import dataclasses
import email.utils
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from plandag.dag.diagnostics import Diagnostic

__all__ = [
    "BoundaryError",
    "BudgetRefusedError",
    "CheckFailedError",
    "Classifier",
    "DependencyDownError",
    "ErrorKind",
    "FailureInfo",
    "InputError",
    "InvalidOutputError",
    "NotStartedError",
    "PermanentStepError",
    "PlanBudgetError",
    "PlanError",
    "PlandagError",
    "StepError",
    "StepTimeoutError",
    "ToolDefinitionError",
    "ToolLoadError",
    "TransientStepError",
    "classify_error",
    "describe_failure",
    "error_message",
    "model_endpoint_failure",
    "parse_retry_after",
    "request_endpoint",
    "socket_error_words",
]

ErrorKind = Literal["transient", "permanent"]
"""``transient``: a later attempt may succeed; ``permanent``: it would fail the same way."""

Classifier = Callable[[BaseException], ErrorKind]
"""``classify(error) -> "transient" | "permanent"``; :func:`classify_error` is the default."""


class PlandagError(Exception):
    """Root of every exception plandag raises on purpose."""


class PlanError(PlandagError, ValueError):
    """A plan failed to compile.

    Attributes:
        diagnostics: every problem found, errors and warnings, in the order found. The
            compiler never stops at the first error, so a replanner can fix them all at once;
            past 100 it lists the first 100 and one summary (``diagnostics_omitted``)
            counting the rest.
        error_count: how many errors were found, listed or not (the summary not counted).
    """

    def __init__(
        self, diagnostics: Sequence[Diagnostic], *, error_count: int | None = None
    ) -> None:
        self.diagnostics: list[Diagnostic] = list(diagnostics)
        errors = [d for d in self.diagnostics if d.severity == "error"]
        self.error_count = len(errors) if error_count is None else error_count
        head = f"plan does not compile: {self.error_count} error(s)"
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


class PlanBudgetError(PlandagError, RuntimeError):
    """A replan patch was not added: its projected spend or time would pass the limits
    relative to the plan's estimate (ARCHITECTURE.md, "Brakes"). The run was stopped and
    ends ``escalated`` (reason ``plan_budget``); the message says by how much."""


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
    """A failure that a later attempt may not repeat (timeout, HTTP 429/5xx, reset).

    Args:
        message: what went wrong, where, and what to do.
        reason: a stable reason code (default ``tool_error``).
        retry_after: seconds the server asked to wait before the next attempt (its
            ``Retry-After``), or None. The runner waits at least this long, never past the
            run's deadline (it fails the step instead).
        before_effect: True when the failure is known to have happened before the tool
            could have any effect (connection refused, a check before sending); such a
            failure is retried even for tools that are not idempotent. Default: the class's
            ``before_effect`` (False here, True for :class:`NotStartedError`).

    Attributes:
        retry_after: as given.
        before_effect: as given.
    """

    retry_after: float | None = None
    before_effect: bool = False

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        retry_after: float | None = None,
        before_effect: bool | None = None,
    ) -> None:
        super().__init__(message, reason=reason)
        if retry_after is not None:
            if not math.isfinite(retry_after) or retry_after < 0:
                raise ValueError(f"retry_after must be a finite number >= 0, not {retry_after}")
            self.retry_after = float(retry_after)
        if before_effect is not None:
            self.before_effect = before_effect


class NotStartedError(TransientStepError):
    """A transient failure known to precede any effect of the tool.

    Raise it when nothing can have happened yet: the connection was refused, a
    precondition checked before sending failed for a reason that may pass. The runner may
    retry it even for a tool that is not idempotent (ARCHITECTURE.md, "Retry vs replan").
    """

    before_effect = True


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


class DependencyDownError(PermanentStepError):
    """The step was not attempted: a dependency it needs (its tool, or the host of its URL)
    failed too many steps in a row in this run (:mod:`plandag.scheduler.breaker`).

    Attributes:
        dependency: what is down, in words (``tool lookup``, ``host api.example.com``).
    """

    reason = "dependency_down"

    def __init__(self, message: str, *, dependency: str) -> None:
        super().__init__(message)
        self.dependency = dependency


class InvalidOutputError(PermanentStepError):
    """A model's reply did not validate against the JSON Schema the step asked for.

    With ``reask=True`` the runner makes one more attempt of the step at once, outside the
    retry policy and without a backoff (recorded as its own attempt, with ``retry`` =
    ``"reask"`` on the failed one); the tool then sends the validation errors back to the
    model (as the planner's repair does). A step re-asks at most once: a second
    ``InvalidOutputError`` ends it ``failed``, reason ``invalid_output``.

    Attributes:
        errors: the validation errors, one line each (``$.total: 'x' is not of type
            'number'``).
        reask: the runner should make the one re-ask attempt.
    """

    reason = "invalid_output"

    def __init__(self, message: str, *, errors: Sequence[str] = (), reask: bool = False) -> None:
        super().__init__(message)
        self.errors = tuple(errors)
        self.reask = reask


class BudgetRefusedError(PermanentStepError):
    """A call was not sent: its estimated cost would take the run past a cost or token cap.

    Raised by a model call's reservation (:func:`plandag.models.call_with_retries`,
    ``ToolContext.reserve``) before any request; reason ``budget``.

    Attributes:
        estimated_usd: the estimate that did not fit, US dollars.
        estimated_tokens: the estimated tokens that did not fit.
    """

    reason = "budget"

    def __init__(self, message: str, *, estimated_usd: float, estimated_tokens: int) -> None:
        super().__init__(message)
        self.estimated_usd = estimated_usd
        self.estimated_tokens = estimated_tokens


# -- classification --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class FailureInfo:
    """What the runner needs to decide about a failed attempt.

    Attributes:
        kind: ``transient`` or ``permanent`` (from the classifier in use).
        error: the exception to report on the step: the error itself, or for an exception
            group the real leaf (the first permanent leaf when there is one, else the first
            leaf), never the group.
        before_effect: the failure is known to precede any effect of the tool (see
            :class:`NotStartedError`); False means the outcome is unknown.
        retry_after_s: seconds the server asked to wait (Retry-After), or None.
    """

    kind: ErrorKind
    error: BaseException
    before_effect: bool
    retry_after_s: float | None


def _leaves(error: BaseException) -> Iterator[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from _leaves(inner)
    else:
        yield error


def _is_cancellation(error: BaseException) -> bool:
    """True for the cancellation exceptions of asyncio and trio (what anyio raises)."""
    asyncio = sys.modules.get("asyncio")
    if asyncio is not None and isinstance(error, asyncio.CancelledError):
        return True
    trio = sys.modules.get("trio")
    return trio is not None and isinstance(error, trio.Cancelled)


def _real_leaves(error: BaseException) -> list[BaseException]:
    return [leaf for leaf in _leaves(error) if not _is_cancellation(leaf)]


def _response_of(error: BaseException) -> Any:
    """The HTTP response an httpx or Anthropic SDK status error carries, else None."""
    httpx = sys.modules.get("httpx")
    if httpx is not None and isinstance(error, httpx.HTTPStatusError):
        return error.response
    anthropic = sys.modules.get("anthropic")
    if anthropic is not None and isinstance(error, anthropic.APIStatusError):
        return error.response
    return None


def _status_of(error: BaseException) -> int | None:
    response = _response_of(error)
    if response is None:  # never by truthiness: a Response may define __bool__
        return None
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


_TRANSIENT_API_ERROR_TYPES = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "timeout_error", "server_error"}
)
"""Anthropic API error types that a later attempt may not meet (Messages API errors)."""


def _single_kind(error: BaseException) -> ErrorKind:
    if isinstance(error, StepError):
        return "transient" if isinstance(error, TransientStepError) else "permanent"
    anthropic = sys.modules.get("anthropic")
    if (
        anthropic is not None
        and isinstance(error, anthropic.APIStatusError)
        and getattr(error, "type", None) in _TRANSIENT_API_ERROR_TYPES
    ):
        # An error event in the middle of a stream arrives with the stream's status, 200:
        # its error type, not the status, says what happened.
        return "transient"
    status = _status_of(error)
    if status is not None:
        return "transient" if status == 429 or 500 <= status <= 599 else "permanent"
    httpx = sys.modules.get("httpx")
    if httpx is not None and isinstance(error, httpx.TransportError):
        # A URL httpx cannot send, or a request it refuses to write, fails the same way again.
        if isinstance(error, httpx.UnsupportedProtocol | httpx.LocalProtocolError):
            return "permanent"
        return "transient"
    if anthropic is not None and isinstance(error, anthropic.APIConnectionError):
        return "transient"  # includes APITimeoutError
    if isinstance(error, TimeoutError | ConnectionError):
        return "transient"
    return "permanent"


def classify_error(error: BaseException) -> ErrorKind:
    """Say whether a later attempt may succeed where ``error`` failed (the default rule).

    The rule (ARCHITECTURE.md, "Execution", "Retry vs replan"):

    * :class:`TransientStepError` and subclasses → ``transient``; any other
      :class:`StepError` (:class:`PermanentStepError`, :class:`CheckFailedError`) →
      ``permanent``;
    * ``httpx.HTTPStatusError`` and the Anthropic SDK's ``APIStatusError``: status 429 or
      500-599 (529 "overloaded" included) → ``transient``, any other status → ``permanent``;
      an ``APIStatusError`` whose error type is ``overloaded_error``, ``api_error``,
      ``rate_limit_error``, ``timeout_error`` or ``server_error`` → ``transient`` whatever
      its status (an error event in the
      middle of a stream comes with status 200).
      The status is read from the response object, which is tested with ``is None``, never
      by truthiness;
    * ``httpx.TransportError`` (connect/read/write errors and timeouts, remote protocol
      errors, proxy errors) → ``transient``, except ``httpx.UnsupportedProtocol`` and
      ``httpx.LocalProtocolError`` (the request itself is unusable) → ``permanent``;
      the Anthropic SDK's ``APIConnectionError`` and ``APITimeoutError`` → ``transient``;
    * the builtins ``TimeoutError`` and ``ConnectionError`` (and subclasses: refused, reset,
      aborted, broken pipe) → ``transient``;
    * everything else (``ValueError``, ``KeyError``, ``FileNotFoundError``, pydantic's
      ``ValidationError``, :class:`BoundaryError`...) → ``permanent``;
    * an exception group is unwrapped: cancellation leaves are ignored; any permanent leaf
      makes the group ``permanent``; a group of transient leaves is ``transient``; a group
      of nothing but cancellations is ``permanent`` (there is nothing to retry).

    httpx and the Anthropic SDK are looked up in ``sys.modules`` only: an error of theirs
    cannot exist unless they were imported, so this module never imports them.

    A run may use another rule: ``run_plan(classify=my_rule)``, where ``my_rule(error)``
    returns ``"transient"`` or ``"permanent"`` and may call this function as its fallback.

    Args:
        error: the exception an attempt raised.

    Returns:
        ``"transient"`` or ``"permanent"``.
    """
    if isinstance(error, BaseExceptionGroup):
        leaves = _real_leaves(error)
        if not leaves or any(_single_kind(leaf) == "permanent" for leaf in leaves):
            return "permanent"
        return "transient"
    return _single_kind(error)


def parse_retry_after(value: str, now: float) -> float | None:
    """Seconds to wait from an HTTP ``Retry-After`` value (RFC 9110, section 10.2.3).

    Args:
        value: the header's value: a number of seconds (``"120"``) or an HTTP date
            (``"Wed, 21 Oct 2015 07:28:00 GMT"``).
        now: the current wall-clock time, seconds since the epoch (for a date).

    Returns:
        Seconds to wait, >= 0 (a date in the past gives 0.0), or None when the value is
        neither a number of seconds nor an HTTP date.
    """
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT
        return None
    return max(0.0, when.timestamp() - now)


def _retry_after_of(error: BaseException, now: float) -> float | None:
    if isinstance(error, TransientStepError):
        return error.retry_after
    response = _response_of(error)
    if response is None:
        return None
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    milliseconds = headers.get("retry-after-ms")  # the Anthropic and OpenAI APIs send it
    if milliseconds is not None:
        parsed = parse_retry_after(str(milliseconds), now)
        if parsed is not None:
            return parsed / 1000
    header = headers.get("retry-after")
    return parse_retry_after(str(header), now) if header is not None else None


def _before_effect(error: BaseException) -> bool:
    if isinstance(error, TransientStepError):
        return error.before_effect
    httpx = sys.modules.get("httpx")
    if httpx is not None and isinstance(
        error, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout
    ):
        return True  # no connection, so no request was sent
    return isinstance(error, ConnectionRefusedError)


def describe_failure(
    error: BaseException,
    *,
    classify: Classifier = classify_error,
    now: float | None = None,
) -> FailureInfo | None:
    """Everything the retry decision needs about ``error``.

    Args:
        error: what an attempt raised (an exception group is unwrapped, see
            :func:`classify_error`).
        classify: the classification rule in use (default :func:`classify_error`); it is
            given the error as raised (a group stays a group), then each leaf of a permanent
            group to find the leaf to report.
        now: wall-clock seconds since the epoch, to turn a Retry-After date into seconds
            (default: ``time.time()``).

    Returns:
        A :class:`FailureInfo`, or None when ``error`` is nothing but cancellation (an
        exception group of cancelled leaves): the caller should let the cancellation
        propagate.

    The failure is known to precede any effect only when every reported leaf is
    (``httpx.ConnectError``, ``httpx.ConnectTimeout``, ``httpx.PoolTimeout``,
    ``ConnectionRefusedError``, :class:`NotStartedError` or ``before_effect=True``).
    Retry-After is the longest one found among the leaves.
    """
    if now is None:
        now = time.time()
    if isinstance(error, BaseExceptionGroup):
        leaves = _real_leaves(error)
        if not leaves:
            return None
    else:
        leaves = [error]
    kind = classify(error)
    leaf = leaves[0]
    if kind == "permanent":
        leaf = next((item for item in leaves if classify(item) == "permanent"), leaf)
    waits = [wait for item in leaves if (wait := _retry_after_of(item, now)) is not None]
    return FailureInfo(
        kind=kind,
        error=leaf,
        before_effect=all(_before_effect(item) for item in leaves),
        retry_after_s=max(waits) if waits else None,
    )


def error_message(error: BaseException) -> str:
    """``str(error)``, or a placeholder when the exception's ``__str__`` itself fails.

    A tool's exception is user code; formatting it must never break the run that records it.
    """
    try:
        return str(error)
    except Exception as failure:
        return f"<the message of {type(error).__name__} could not be formatted: {failure!r}>"


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error``, its causes and contexts, and the members of any exception group among
    them, each once, outermost first."""
    pending = [error]
    seen: set[int] = set()
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                pending.append(linked)


def _origin_of(error: BaseException) -> str | None:
    """``scheme://host[:port]`` of the request one HTTP client's exception carries (the
    ``request.url`` of an httpx or SDK error), or None."""
    try:
        request = getattr(error, "request", None)  # httpx raises RuntimeError when unset
        url = getattr(request, "url", None)
    except Exception:
        return None
    scheme, host = getattr(url, "scheme", None), getattr(url, "host", None)
    if not isinstance(scheme, str) or not isinstance(host, str) or not scheme or not host:
        return None
    port = getattr(url, "port", None)
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}" + (f":{port}" if isinstance(port, int) else "")


def socket_error_words(error: BaseException) -> str | None:
    """The operating system's words for the innermost socket error chained to ``error``
    (its ``errno`` through :func:`os.strerror`, lower case: ``connection refused``; a
    name lookup's own text: ``name or service not known``), or None when there is none."""
    import os
    import socket

    found: str | None = None
    for item in _chain(error):
        if isinstance(item, socket.gaierror) and len(item.args) > 1:
            found = str(item.args[1]).lower()
        elif isinstance(item, OSError) and isinstance(item.errno, int) and item.errno > 0:
            found = os.strerror(item.errno).lower()
    return found


def request_endpoint(error: BaseException) -> str | None:
    """``scheme://host[:port]`` of the HTTP request ``error`` or an exception chained to
    it carries (the ``request.url`` of an httpx or SDK error), or None."""
    return next((o for item in _chain(error) if (o := _origin_of(item)) is not None), None)


def model_endpoint_failure(error: BaseException) -> str | None:
    """A model call's failure in a person's words, naming the endpoint: ``the model
    endpoint http://127.0.0.1:8765 could not be reached: connection refused``.

    Read from the :class:`StepError` a model client raised (its ``reason``:
    ``connect_error``, ``connect_timeout``, ``timeout``, ``network_error``, ``http_NNN``)
    and the exceptions chained to it (the HTTP client's, whose ``request.url`` gives the
    endpoint, and the socket error under it, whose ``errno`` gives the system's words).

    Args:
        error: what the model call raised.

    Returns:
        The sentence, or None when ``error`` is not one of those failures (a refusal, an
        unusable reply, a cap).
    """
    step_error = next((item for item in _chain(error) if isinstance(item, StepError)), None)
    if step_error is None:
        return None
    reason = step_error.reason
    origin = request_endpoint(error)
    endpoint = f"the model endpoint {origin}" if origin is not None else "the model endpoint"
    if reason == "connect_error":
        cause = socket_error_words(error)
        return f"{endpoint} could not be reached" + (f": {cause}" if cause else "")
    if reason == "connect_timeout":
        return f"{endpoint} could not be reached: no connection within the timeout"
    if reason == "timeout":
        return f"{endpoint} did not answer in time"
    if reason == "network_error":
        cause = socket_error_words(error)
        return f"{endpoint} dropped the connection" + (f": {cause}" if cause else "")
    if reason.startswith("http_") and reason[5:].isdigit():
        return f"{endpoint} answered HTTP {reason[5:]}"
    return None
