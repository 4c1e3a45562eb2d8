"""HTTP tools: ``http_get`` and ``http_post`` on httpx (docs/tools.md).

Both send one request (plus, for GET, up to ``max_redirects`` redirects) and return an
:class:`HttpResponse`. What they guarantee:

* **time**: ``timeout`` seconds bound each phase (connect, write, read, pool) *and* the
  whole call, redirects and body included, so a server dripping one byte at a time cannot
  hold a step past it;
* **size**: the body is read as a stream and the call stops as soon as it passes
  ``max_bytes`` (a ``Content-Length`` above it is refused before reading); the limit
  applies to the decoded body (after gzip), so a compressed bomb is caught too;
* **redirects**: followed by ``http_get`` only, at most ``max_redirects``, http and https
  only; headers the caller gave are dropped when a redirect leaves the original origin
  (scheme, host, port), so an API key never reaches another host. ``http_post`` never
  follows a redirect: the write boundary was checked on the URL the plan named, and a
  redirect would send the body (307/308) or turn into a GET (301/302) somewhere else. A
  ``303 See Other`` after a POST means the effect happened: it is returned as the result,
  its ``Location`` in ``headers``. Any other redirect fails the step, permanently, with
  reason ``redirect_not_followed``;
* **the allow-list** (ARCHITECTURE.md, "Untrusted content"): inside a run, every request,
  each redirect hop included, goes only to a host of the step's ``ctx.http_allow`` (the
  configured ``http_allow`` globs and the hosts the approved plan lists: literal URLs of
  its steps); any other host fails the step before anything is sent, permanently, with
  reason ``host_not_allowed``. Both tools are ``egress`` (a GET leaks what its URL, query
  and headers carry) and ``taint_source`` (a response body comes from outside);
* **the write boundary**: ``http_post`` declares ``writes="url"``, so its URL must be on a
  host of the run's boundary (``--write-boundary https://api.example.com``), checked at
  compile time when literal and by the runner after references resolve;
* **status classification** (ARCHITECTURE.md, "Retry vs replan"; RFC 9110), by exception
  type, never by a response's truthiness:

  - a status below 400 (after GET redirects) is returned, never raised;
  - 429 → :class:`TransientStepError` with Retry-After and ``before_effect=True`` (RFC 6585:
    the server refused the request), reason ``http_429``;
  - 500-599 (529 "overloaded" included) → :class:`TransientStepError` with Retry-After,
    outcome unknown, reason ``http_500``... ``http_529``;
  - any other status >= 400 → :class:`PermanentStepError`, reason ``http_400``,
    ``http_404``... (the status itself);
  - connection refused, DNS failure → :class:`NotStartedError` (nothing was sent), reason
    ``connect_error``; a connect or pool timeout → :class:`NotStartedError`, reason
    ``connect_timeout``;
  - a read or write timeout, or the whole call past ``timeout`` →
    :class:`TransientStepError`, outcome unknown, reason ``timeout``;
  - a reset or broken connection after sending → :class:`TransientStepError`, outcome
    unknown, reason ``network_error``;
  - :class:`PermanentStepError` for a body past ``max_bytes`` (``too_large``), more than
    ``max_redirects`` redirects (``too_many_redirects``), a URL that is not http(s)
    (``invalid_url``), a JSON content type with a body that is not JSON (``invalid_json``),
    a body that cannot be decoded (``decoding_error``).

  The Retry-After value (seconds or an HTTP date, RFC 9110 10.2.3; ``retry-after-ms``
  first when present) becomes ``retry_after``; the runner waits at least that long, never
  past the run's deadline.

Tests replace the network with :func:`set_transport` / :func:`use_transport` (an
``httpx.MockTransport`` or any ``httpx.AsyncBaseTransport``). httpx is imported on first
use, so importing this module (and listing the tools) stays cheap.
"""

from __future__ import annotations

import contextlib
import functools
import json as json_module
import time
import urllib.parse
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypedDict

import anyio
from pydantic import Field

from plandag.allowlist import host_allowed
from plandag.errors import (
    NotStartedError,
    PermanentStepError,
    StepError,
    TransientStepError,
    parse_retry_after,
)
from plandag.tools.base import ToolContext, tool

if TYPE_CHECKING:
    import ssl

    import httpx

__all__ = [
    "HttpResponse",
    "http_get",
    "http_post",
    "set_transport",
    "use_transport",
]

Timeout = Annotated[float, Field(gt=0, allow_inf_nan=False)]
"""Seconds, > 0."""
MaxBytes = Annotated[int, Field(ge=0)]
"""Bytes of decoded body, >= 0."""
QueryParams = dict[str, str | int | float | bool]

_ERROR_SNIPPET_BYTES = 500
_TEXT_SUBTYPES = ("json", "xml", "javascript", "x-www-form-urlencoded", "csv", "yaml")


class HttpResponse(TypedDict):
    """What ``http_get`` and ``http_post`` return.

    Attributes:
        status: the HTTP status code (``200``).
        headers: the response headers, names lowercase; a repeated header's values joined
            with ``", "``.
        text: the body decoded (charset of the Content-Type, else UTF-8, undecodable bytes
            replaced) when the body is text: no Content-Type, ``text/*``, or an
            ``application/*`` type that is JSON, XML, JavaScript, CSV, YAML or a form
            (``+json``/``+xml`` suffixes included); None for other (binary) types.
        json: the body parsed as JSON when the Content-Type is JSON (``application/json``,
            ``*/*+json``) and the body is not empty; else None.
        url: the final URL, after redirects.
    """

    status: int
    headers: dict[str, str]
    text: str | None
    json: Any
    url: str


# -- the injectable transport ------------------------------------------------------------------

_transport: httpx.AsyncBaseTransport | None = None


def set_transport(transport: httpx.AsyncBaseTransport | None) -> httpx.AsyncBaseTransport | None:
    """Send every later request of the HTTP tools through ``transport`` (a test seam).

    Args:
        transport: an ``httpx.AsyncBaseTransport`` (``httpx.MockTransport(handler)``), or
            None for the network (the default).

    Returns:
        The transport in use before, to restore it.
    """
    global _transport
    previous, _transport = _transport, transport
    return previous


@contextlib.contextmanager
def use_transport(transport: httpx.AsyncBaseTransport | None) -> Iterator[None]:
    """:func:`set_transport` for the ``with`` block only; the previous one is restored."""
    previous = set_transport(transport)
    try:
        yield
    finally:
        set_transport(previous)


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """One default TLS context (certifi's roots), built once: building one per call costs
    milliseconds."""
    import httpx

    return httpx.create_ssl_context()


@contextlib.asynccontextmanager
async def _client(timeout_s: float) -> AsyncIterator[httpx.AsyncClient]:
    import httpx

    async with httpx.AsyncClient(
        transport=_transport,
        verify=_ssl_context(),
        timeout=httpx.Timeout(timeout_s),
        follow_redirects=False,
    ) as client:
        yield client


# -- classification ------------------------------------------------------------------------


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    default = {"http": 80, "https": 443}.get(url.scheme)
    return (url.scheme, url.host, url.port if url.port is not None else default)


def _check_url(url: str, method: str) -> None:
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme not in ("http", "https"):
        raise PermanentStepError(
            f"{method} {url!r}: not an http or https URL; give a full URL such as "
            "https://api.example.com/path",
            reason="invalid_url",
        )


def _check_host(url: httpx.URL, allow: tuple[str, ...] | None, where: str) -> None:
    """Refuse a request to a host outside the allow-list (None: no allow-list applies)."""
    if allow is None or host_allowed(url, allow):
        return
    listed = ", ".join(allow) if allow else "nothing"
    raise PermanentStepError(
        f"{where}: host {url.host}{f':{url.port}' if url.port else ''} is not on this run's "
        f"HTTP allow-list (allowed: {listed}); nothing was sent. Add the host with "
        "--http-allow HOST (or http_allow in plandag.toml), or name the URL literally in "
        "the plan so that its approval covers it",
        reason="host_not_allowed",
    )


def _transport_failure(error: Exception, method: str, url: str) -> StepError:
    """The :class:`StepError` an httpx error becomes (table in the module docstring)."""
    import httpx

    where = f"{method} {url}"
    if isinstance(error, httpx.ConnectTimeout | httpx.PoolTimeout):
        return NotStartedError(
            f"{where}: no connection within the timeout; nothing was sent",
            reason="connect_timeout",
        )
    if isinstance(error, httpx.ConnectError):
        return NotStartedError(
            f"{where}: cannot connect ({error}); nothing was sent; is the server up?",
            reason="connect_error",
        )
    if isinstance(error, httpx.TimeoutException):
        return TransientStepError(
            f"{where}: timed out after the request was sent ({type(error).__name__}); the "
            "server may have acted on it",
            reason="timeout",
        )
    if isinstance(error, httpx.DecodingError):
        return PermanentStepError(
            f"{where}: the body cannot be decoded: {error}", reason="decoding_error"
        )
    if isinstance(error, httpx.UnsupportedProtocol | httpx.InvalidURL):
        return PermanentStepError(f"{where}: unusable URL: {error}", reason="invalid_url")
    if isinstance(error, httpx.LocalProtocolError):
        return PermanentStepError(
            f"{where}: the request cannot be sent: {error}", reason="invalid_request"
        )
    return TransientStepError(
        f"{where}: the connection failed ({type(error).__name__}: {error}); the server may "
        "have acted on the request",
        reason="network_error",
    )


def _retry_after(headers: httpx.Headers) -> float | None:
    now = time.time()
    milliseconds = headers.get("retry-after-ms")
    if milliseconds is not None:
        parsed = parse_retry_after(milliseconds, now)
        if parsed is not None:
            return parsed / 1000
    value = headers.get("retry-after")
    return parse_retry_after(value, now) if value is not None else None


async def _read_limited(response: httpx.Response, limit: int, where: str) -> bytes:
    """The decoded body, or PermanentStepError ``too_large`` as soon as it passes ``limit``."""
    declared = response.headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise PermanentStepError(
            f"{where}: the body is {int(declared)} bytes (Content-Length), over max_bytes="
            f"{limit}; raise max_bytes or ask for less",
            reason="too_large",
        )
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise PermanentStepError(
                f"{where}: the body passed max_bytes={limit} bytes; reading stopped; raise "
                "max_bytes or ask for less",
                reason="too_large",
            )
        chunks.append(chunk)
    return b"".join(chunks)


async def _snippet(response: httpx.Response, limit: int) -> str:
    """The start of an error body (at most ``limit`` bytes) for a message; "" on failure."""
    import httpx

    data = b""
    try:
        async for chunk in response.aiter_bytes():
            data += chunk
            if len(data) >= limit:
                break
    except httpx.HTTPError:
        pass
    text = " ".join(data[:limit].decode("utf-8", errors="replace").split())
    return f": {text}" if text else ""


async def _status_failure(response: httpx.Response, where: str, max_bytes: int) -> StepError:
    """The error an HTTP status >= 400 becomes (table in the module docstring)."""
    status = response.status_code
    phrase = f" {response.reason_phrase}" if response.reason_phrase else ""
    body = await _snippet(response, min(max_bytes, _ERROR_SNIPPET_BYTES))
    message = f"{where}: HTTP {status}{phrase}{body}"
    reason = f"http_{status}"
    if status == 429:
        return TransientStepError(
            f"{message} (rate limited)",
            reason=reason,
            retry_after=_retry_after(response.headers),
            before_effect=True,
        )
    if 500 <= status <= 599:
        return TransientStepError(
            message, reason=reason, retry_after=_retry_after(response.headers)
        )
    return PermanentStepError(message, reason=reason)


def _is_text(media_type: str) -> bool:
    if not media_type:
        return True
    kind, _, subtype = media_type.partition("/")
    if kind == "text":
        return True
    return kind == "application" and (
        subtype in _TEXT_SUBTYPES or subtype.endswith(("+json", "+xml"))
    )


def _is_json(media_type: str) -> bool:
    _, _, subtype = media_type.partition("/")
    return subtype == "json" or subtype.endswith("+json")


def _decode(response: httpx.Response, body: bytes, where: str) -> HttpResponse:
    media_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
    text: str | None = None
    if _is_text(media_type):
        charset = response.charset_encoding or "utf-8"
        try:
            text = body.decode(charset, errors="replace")
        except LookupError:  # an unknown charset name
            text = body.decode("utf-8", errors="replace")
    parsed: Any = None
    if _is_json(media_type) and body.strip():
        try:
            parsed = json_module.loads(body)
        except (ValueError, UnicodeDecodeError) as error:
            raise PermanentStepError(
                f"{where}: the response says {media_type} but its body is not JSON: {error}",
                reason="invalid_json",
            ) from error
    return {
        "status": response.status_code,
        "headers": dict(response.headers.items()),
        "text": text,
        "json": parsed,
        "url": str(response.url),
    }


async def _exchange(
    method: Literal["GET", "POST"],
    url: str,
    *,
    headers: Mapping[str, str] | None,
    params: QueryParams | None,
    timeout_s: float,
    max_bytes: int,
    max_redirects: int,
    json: Any = None,
    data: dict[str, str] | str | None = None,
    allow: tuple[str, ...] | None = None,
) -> HttpResponse:
    """Send the request, follow GET redirects, read the body under the limits; every hop's
    host is checked against ``allow`` first."""
    import httpx

    _check_url(url, method)
    where = f"{method} {url}"
    with anyio.move_on_after(timeout_s) as scope:
        try:
            async with _client(timeout_s) as client:
                form = data if isinstance(data, dict) else None
                content = data if isinstance(data, str) else None
                request = client.build_request(
                    method,
                    url,
                    headers=dict(headers) if headers is not None else None,
                    params=params,
                    json=json,
                    data=form,
                    content=content,
                )
                _check_host(request.url, allow, where)
                first_origin = _origin(request.url)
                redirects = 0
                while True:
                    response = await client.send(request, stream=True, follow_redirects=False)
                    try:
                        next_request = response.next_request
                        if next_request is not None and method == "GET":
                            redirects += 1
                            if redirects > max_redirects:
                                raise PermanentStepError(
                                    f"{where}: more than max_redirects={max_redirects} "
                                    f"redirects (last to {next_request.url}); raise "
                                    "max_redirects or use the final URL",
                                    reason="too_many_redirects",
                                )
                            if next_request.url.scheme not in ("http", "https"):
                                raise PermanentStepError(
                                    f"{where}: redirected to {next_request.url}, not http(s)",
                                    reason="invalid_url",
                                )
                            _check_host(next_request.url, allow, where)
                            if _origin(next_request.url) != first_origin:
                                for name in headers or {}:
                                    next_request.headers.pop(name, None)
                            request = next_request
                            continue
                        if (
                            next_request is not None
                            and method == "POST"
                            and response.status_code != 303
                        ):
                            raise PermanentStepError(
                                f"{where}: HTTP {response.status_code} redirect to "
                                f"{next_request.url}, not followed for POST (the body would "
                                "go elsewhere than the URL the write boundary allowed); "
                                "post to the new URL directly",
                                reason="redirect_not_followed",
                            )
                        if response.status_code >= 400:
                            raise await _status_failure(response, where, max_bytes)
                        body = await _read_limited(response, max_bytes, where)
                        return _decode(response, body, where)
                    finally:
                        await response.aclose()
        except StepError:
            raise
        except (httpx.HTTPError, httpx.InvalidURL) as error:
            raise _transport_failure(error, method, url) from error
    assert scope.cancelled_caught
    raise TransientStepError(
        f"{where}: no complete response within timeout={timeout_s:g} s (redirects and body "
        "included); the server may have acted on the request",
        reason="timeout",
    )


# -- the tools -------------------------------------------------------------------------------

# typical_seconds: one request to a remote service over the internet (connection, TLS and a
# small body) typically takes a few hundred milliseconds; 0.5 s is declared for both tools
# (a local server answers in 0.2 ms, which says nothing of real hosts). The run store's
# measured median replaces it once the tool has run in 5 runs.


@tool(effects="none", egress=True, taint_source=True, reaches="url", typical_seconds=0.5)
async def http_get(
    url: str,
    headers: dict[str, str] | None = None,
    params: QueryParams | None = None,
    timeout: Timeout = 30.0,  # noqa: ASYNC109 (the plan's argument; enforced inside)
    max_bytes: MaxBytes = 10_000_000,
    max_redirects: Annotated[int, Field(ge=0, le=20)] = 5,
    *,
    ctx: ToolContext,
) -> HttpResponse:
    """Fetch a URL with HTTP GET and return its status, headers, text and parsed JSON.

    Redirects are followed (at most ``max_redirects``, http and https only; the caller's
    headers are dropped on a redirect to another origin). Every hop's host must be on the
    run's HTTP allow-list (``ctx.http_allow``). Rules, limits and the error table:
    :mod:`plandag.tools.http`.

    Args:
        url: an ``http://`` or ``https://`` URL.
        headers: request headers (name → value).
        params: query parameters added to the URL (name → value).
        timeout: seconds for each phase and for the whole call, redirects and body
            included (default 30).
        max_bytes: the largest body accepted, in bytes after decoding (default 10 MB).
        max_redirects: redirects followed at most (0-20, default 5).

    Returns:
        :class:`HttpResponse`: ``{"status", "headers", "text", "json", "url"}``.

    Raises:
        TransientStepError: 429, 5xx, a timeout or a broken connection (retried by the
            runner); :class:`NotStartedError` when no connection could be made.
        PermanentStepError: other 4xx (reason ``http_404``...), ``too_large``,
            ``too_many_redirects``, ``invalid_url``, ``invalid_json``,
            ``host_not_allowed``.
    """
    return await _exchange(
        "GET",
        url,
        headers=headers,
        params=params,
        timeout_s=timeout,
        max_bytes=max_bytes,
        max_redirects=max_redirects,
        allow=ctx.http_allow,
    )


@tool(
    effects="write",
    idempotent=False,
    writes="url",
    egress=True,
    taint_source=True,
    reaches="url",
    typical_seconds=0.5,
)
async def http_post(
    url: str,
    json: Any = None,
    data: dict[str, str] | str | None = None,
    headers: dict[str, str] | None = None,
    params: QueryParams | None = None,
    timeout: Timeout = 30.0,  # noqa: ASYNC109 (the plan's argument; enforced inside)
    max_bytes: MaxBytes = 10_000_000,
    *,
    ctx: ToolContext,
) -> HttpResponse:
    """Send an HTTP POST to a URL on a host of the run's write boundary; return the reply.

    The URL must be inside the write boundary (``--write-boundary https://host``), checked
    when the plan compiles if it is literal and again before sending once references are
    resolved. Redirects are not followed (a ``303 See Other`` is returned as the result;
    other redirects fail with reason ``redirect_not_followed``). Not idempotent: after a
    failure whose outcome is unknown (a read timeout, a 5xx) the runner does not send it
    again; a refused connection or a 429 is retried. An ``Idempotency-Key`` header of
    ``run_id:step_id`` is added unless ``headers`` has one, so a server that honours it
    drops a repeat. Limits and the error table: :mod:`plandag.tools.http`.

    Args:
        url: an ``http://`` or ``https://`` URL.
        json: a JSON body (sent as ``application/json``). At most one of ``json``/``data``.
        data: a form (name → value, sent urlencoded) or a raw text body.
        headers: request headers (name → value).
        params: query parameters added to the URL.
        timeout: seconds for each phase and for the whole call (default 30).
        max_bytes: the largest response body accepted, in bytes (default 10 MB).

    Returns:
        :class:`HttpResponse`: ``{"status", "headers", "text", "json", "url"}``.

    Raises:
        TransientStepError: 429 (before any effect), 5xx, a timeout or a broken
            connection; :class:`NotStartedError` when no connection could be made.
        PermanentStepError: other 4xx (reason ``http_400``...), ``invalid_args`` (both
            ``json`` and ``data``), ``redirect_not_followed``, ``too_large``,
            ``invalid_url``, ``invalid_json``, ``host_not_allowed`` (the host is not on
            the run's HTTP allow-list: nothing was sent).
    """
    if json is not None and data is not None:
        raise PermanentStepError(f"POST {url}: give json or data, not both", reason="invalid_args")
    sent = dict(headers or {})
    if not any(name.lower() == "idempotency-key" for name in sent):
        sent["Idempotency-Key"] = ctx.idempotency_key
    return await _exchange(
        "POST",
        url,
        headers=sent,
        params=params,
        timeout_s=timeout,
        max_bytes=max_bytes,
        max_redirects=0,
        json=json,
        data=data,
        allow=ctx.http_allow,
    )


HTTP_TOOLS = [http_get, http_post]
"""The HTTP tools, registered by :func:`plandag.tools.registry.default_registry`."""
