"""Failures of a model call → plandag's step errors (the table in
:mod:`plandag.models.base`), shared by both clients.

Both official SDKs (``anthropic``, ``openai``) run on ``httpx2``: an HTTP status arrives as the
SDK's ``APIStatusError`` (its response's status, headers and message are read here), a
transport failure as its ``APIConnectionError`` / ``APITimeoutError`` whose ``__cause__``
is the ``httpx2`` exception (:func:`transport_failure` tells by it whether anything was
sent).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from plandag.errors import (
    NotStartedError,
    PermanentStepError,
    StepError,
    TransientStepError,
    parse_retry_after,
    request_endpoint,
    socket_error_words,
)
from plandag.models.base import stream_error_kind

_SNIPPET_CHARS = 300


def retry_after_of(headers: Mapping[str, str] | Any, now: float | None = None) -> float | None:
    """Seconds from ``retry-after-ms`` (first) or ``Retry-After`` (RFC 9110 10.2.3), or None.

    Args:
        headers: the response's headers (case-insensitive mapping with ``get``).
        now: wall-clock seconds since the epoch, for an HTTP date (default ``time.time()``).
    """
    if now is None:
        now = time.time()
    milliseconds = headers.get("retry-after-ms")
    if milliseconds is not None:
        parsed = parse_retry_after(str(milliseconds), now)
        if parsed is not None:
            return parsed / 1000
    value = headers.get("retry-after")
    return parse_retry_after(str(value), now) if value is not None else None


def snippet(text: str) -> str:
    """The start of an error body on one line, for a message ("" for an empty body)."""
    flat = " ".join(text.split())
    if len(flat) > _SNIPPET_CHARS:
        flat = flat[:_SNIPPET_CHARS] + "..."
    return f": {flat}" if flat else ""


def status_failure(
    status: int, headers: Mapping[str, str] | Any, body: str, where: str
) -> StepError:
    """The error an HTTP status >= 400 becomes.

    Args:
        status: the HTTP status.
        headers: the response headers (for Retry-After).
        body: the response body, as text (its start goes into the message).
        where: what was called, for the message (``anthropic POST /v1/messages``).

    Returns:
        429 → :class:`TransientStepError` with Retry-After and ``before_effect=True``;
        500-599 → :class:`TransientStepError` with Retry-After; any other →
        :class:`PermanentStepError`. The reason is ``http_<status>``.
    """
    message = f"{where}: HTTP {status}{snippet(body)}"
    reason = f"http_{status}"
    if status == 429:
        return TransientStepError(
            f"{message} (rate limited)",
            reason=reason,
            retry_after=retry_after_of(headers),
            before_effect=True,
        )
    if 500 <= status <= 599:
        return TransientStepError(message, reason=reason, retry_after=retry_after_of(headers))
    return PermanentStepError(
        f"{message}; the request itself was refused, a retry would fail the same way",
        reason=reason,
    )


def stream_event_failure(error_type: str | None, detail: str, where: str) -> StepError:
    """The error an ``error`` event arriving in the middle of a stream becomes.

    Args:
        error_type: the event's ``error.type`` (``overloaded_error``...), or None.
        detail: the event's message or body, for the message.
        where: what was called.

    Returns:
        :class:`TransientStepError` for the transient types
        (:data:`~plandag.models.base.TRANSIENT_STREAM_ERRORS`), else
        :class:`PermanentStepError`; the reason is the event's type (``stream_error`` when
        it has none).
    """
    reason = error_type or "stream_error"
    message = f"{where}: the stream stopped with an error event {reason}{snippet(detail)}"
    if stream_error_kind(error_type) == "transient":
        return TransientStepError(message, reason=reason)
    return PermanentStepError(message, reason=reason)


def transport_failure(error: BaseException, where: str) -> StepError:
    """The error an ``httpx2`` transport exception becomes.

    Args:
        error: the exception (an ``httpx2.TransportError``, the SDK's wrapper's cause), or
            the SDK's wrapper itself when it has no such cause.
        where: what was called.

    Returns:
        connect errors and connect/pool timeouts → :class:`NotStartedError`
        (``connect_error``/``connect_timeout``: nothing was sent); other timeouts →
        :class:`TransientStepError` (``timeout``); an unusable URL or request →
        :class:`PermanentStepError` (``invalid_url``/``invalid_request``); anything else →
        :class:`TransientStepError` (``network_error``).
    """
    import httpx2 as httpx

    endpoint = request_endpoint(error)
    the_endpoint = f"the model endpoint {endpoint}" if endpoint else "the model endpoint"
    if isinstance(error, httpx.ConnectTimeout | httpx.PoolTimeout):
        return NotStartedError(
            f"{where}: {the_endpoint} could not be reached: no connection within the "
            "timeout; nothing was sent",
            reason="connect_timeout",
        )
    if isinstance(error, httpx.ConnectError):
        cause = socket_error_words(error) or str(error)
        return NotStartedError(
            f"{where}: {the_endpoint} could not be reached: {cause}; nothing was sent; is the "
            "server up and the base URL right?",
            reason="connect_error",
        )
    if isinstance(error, httpx.TimeoutException):
        return TransientStepError(
            f"{where}: timed out after the request was sent ({type(error).__name__})",
            reason="timeout",
        )
    if isinstance(error, httpx.UnsupportedProtocol | httpx.InvalidURL):
        return PermanentStepError(f"{where}: unusable URL: {error}", reason="invalid_url")
    if isinstance(error, httpx.LocalProtocolError):
        return PermanentStepError(
            f"{where}: the request cannot be sent: {error}", reason="invalid_request"
        )
    return TransientStepError(
        f"{where}: the connection failed ({type(error).__name__}: {error})",
        reason="network_error",
    )
