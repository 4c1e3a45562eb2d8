"""Who may use the console, and who decided: the access token, the person's name, CSRF.

* **Access token.** ``plandag serve`` makes a random token (:func:`new_token`, 32 bytes from
  :mod:`secrets`) and prints the URL that carries it. Every request must carry it: the
  first visit as ``?token=...`` (the console then sets it as an ``HttpOnly``,
  ``SameSite=Strict`` cookie and redirects to the same address without it, so it leaves the
  address bar and the history), every later one in that cookie. A request without it, or
  with another, gets 401 and nothing else (:class:`TokenMiddleware`). Tokens are compared in
  constant time (:func:`secrets.compare_digest`).
* **The person's name.** The token says that a request may act, not who acts. The console
  asks for a name once per browser session (a cookie with no expiry: it ends when the
  browser does) and records it with every decision it takes (approve, reject, per-step
  choices, resume, approve, abandon).
* **CSRF.** Every form carries a hidden ``csrf`` field; a POST whose field is not the
  session's CSRF value is refused with 403 (:func:`check_csrf`). This is the signed
  double-submit pattern (OWASP CSRF Prevention Cheat Sheet, "Signed Double-Submit
  Cookie"): the session cookie holding the value is signed with :mod:`itsdangerous`
  under a key made at start, so a page of another site can neither read the value nor
  forge a cookie that holds one; the cookies are ``SameSite=Strict`` as well.
* **The Host header.** A page of another site can make its own name resolve to 127.0.0.1
  (DNS rebinding) and so reach a console on this machine from the person's browser; such a
  request names that site in its ``Host`` header. The console answers only requests naming
  ``127.0.0.1``, ``localhost``, ``[::1]`` or a name it was given (``--host``,
  ``--allow-host``); any other gets 400 (Starlette's ``TrustedHostMiddleware``; names are
  checked by :func:`host_patterns`).
* **Response headers.** Every response carries :data:`SECURITY_HEADERS`: no referrer is sent
  (a page address never leaves in a ``Referer``), no site may frame the console
  (clickjacking: ``X-Frame-Options: DENY`` and ``frame-ancestors 'none'``), and the
  Content-Security-Policy lets only the console's own script file run (``script-src
  'self'``: no inline script, no ``javascript:`` URL, no event attribute), so text that
  reaches a page from a plan or a model cannot run as script even if it escaped escaping
  (OWASP Secure Headers Project; :class:`SecurityHeadersMiddleware`).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import secrets
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlencode

from itsdangerous import BadSignature, URLSafeSerializer
from starlette.datastructures import URL
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "CONTENT_SECURITY_POLICY",
    "LOOPBACK_HOSTS",
    "SECURITY_HEADERS",
    "SESSION_COOKIE",
    "TOKEN_COOKIE",
    "SecurityHeadersMiddleware",
    "Session",
    "SessionSigner",
    "TokenMiddleware",
    "check_csrf",
    "host_patterns",
    "new_token",
    "valid_name",
]

TOKEN_COOKIE = "plandag_token"
"""The cookie holding the access token after the first visit."""
SESSION_COOKIE = "plandag_session"
"""The signed cookie holding the person's name and the CSRF value (a browser-session cookie)."""
NAME_MAX_CHARS = 80
"""The longest name the console records."""
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
"""The host names every console answers to (a request's ``Host`` without its port)."""
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",  # the console's script file only: nothing inline
        "style-src 'self' 'unsafe-inline'",  # the pages' style elements and the SVG charts
        "img-src 'self' data:",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
"""The Content-Security-Policy of every response (W3C Content Security Policy Level 3)."""
SECURITY_HEADERS: tuple[tuple[str, str], ...] = (
    ("Content-Security-Policy", CONTENT_SECURITY_POLICY),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
    ("X-Content-Type-Options", "nosniff"),
)
"""The headers every response of the console carries (:class:`SecurityHeadersMiddleware`)."""

_HOST_NAME = re.compile(r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*")


def new_token() -> str:
    """A new access token: 32 random bytes, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(32)


@dataclasses.dataclass(frozen=True, slots=True)
class Session:
    """A browser session: the CSRF value of its forms, and the person's name once given.

    Attributes:
        csrf: random URL-safe text; every form of the session carries it.
        name: the name the person gave, or None before they gave one.
    """

    csrf: str
    name: str | None = None


class SessionSigner:
    """Signs and reads the session cookie (:mod:`itsdangerous`, HMAC over the JSON).

    Args:
        secret: the signing key (default: 32 random bytes made now, so a restart of the
            console asks for the name again).
    """

    def __init__(self, secret: str | None = None) -> None:
        self._serializer = URLSafeSerializer(secret or secrets.token_urlsafe(32), "session")

    def dumps(self, session: Session) -> str:
        """The cookie value for ``session``."""
        return str(self._serializer.dumps({"csrf": session.csrf, "name": session.name}))

    def loads(self, value: str | None) -> Session | None:
        """The session in a cookie value, or None when missing, tampered with or malformed."""
        if not value:
            return None
        try:
            data = self._serializer.loads(value)
        except BadSignature:
            return None
        if not isinstance(data, Mapping) or not isinstance(data.get("csrf"), str):
            return None
        name = data.get("name")
        return Session(data["csrf"], name if isinstance(name, str) and name else None)

    def session(self, request: Request) -> Session | None:
        """The request's session, or None."""
        return self.loads(request.cookies.get(SESSION_COOKIE))

    def set(self, response: Response, session: Session) -> None:
        """Set ``session`` as the response's session cookie (no expiry: it lasts as long
        as the browser session)."""
        response.set_cookie(
            SESSION_COOKIE, self.dumps(session), httponly=True, samesite="strict", path="/"
        )


def valid_name(text: str) -> str | None:
    """The name to record for ``text``: stripped, inner runs of whitespace made one space;
    None when empty or longer than :data:`NAME_MAX_CHARS` characters."""
    name = " ".join(text.split())
    if not name or len(name) > NAME_MAX_CHARS:
        return None
    return name


def check_csrf(session: Session | None, form: Mapping[str, Any]) -> bool:
    """Whether a submitted form carries its session's CSRF value (constant-time compare).

    Args:
        session: the request's session (None: no session, refused).
        form: the submitted fields.
    """
    given = form.get("csrf")
    if session is None or not isinstance(given, str):
        return False
    return secrets.compare_digest(given.encode(), session.csrf.encode())


class TokenMiddleware:
    """ASGI middleware: only requests carrying the access token reach the app.

    ``?token=T`` with the right token sets the token cookie and redirects (303) to the same
    address without ``token``; a request with the right cookie goes through; any other
    gets ``401 Unauthorized`` with a sentence saying to open the address ``plandag serve``
    printed.

    Args:
        app: the ASGI app behind it.
        token: the access token.
    """

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    def _matches(self, given: str | None) -> bool:
        return given is not None and secrets.compare_digest(given.encode(), self.token.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        given = request.query_params.get("token")
        if given is not None and self._matches(given):
            rest = [(key, value) for key, value in request.query_params.multi_items()]
            rest = [(key, value) for key, value in rest if key != "token"]
            target = URL(scope=scope).replace(query=urlencode(rest))
            response: Response = RedirectResponse(
                target.path + (f"?{target.query}" if target.query else ""), status_code=303
            )
            response.set_cookie(
                TOKEN_COOKIE, self.token, httponly=True, samesite="strict", path="/"
            )
            await response(scope, receive, send)
            return
        if self._matches(request.cookies.get(TOKEN_COOKIE)):
            await self.app(scope, receive, send)
            return
        response = PlainTextResponse(
            "401 Unauthorized: this plandag console needs its access token; open the address "
            "`plandag serve` printed when it started (it ends with ?token=...)\n",
            status_code=401,
        )
        await response(scope, receive, send)


def host_patterns(names: Iterable[str]) -> list[str]:
    """The host names a console answers to: :data:`LOOPBACK_HOSTS` and ``names``, as
    Starlette's ``TrustedHostMiddleware`` compares them (lower case, an IPv6 address in
    brackets), without repeats.

    Args:
        names: host names or addresses (``console.example.org``, ``10.0.0.5``, ``::1``,
            ``0.0.0.0``), or a pattern ``*.example.org`` for every name under a domain;
            ``*`` alone answers to any name (no Host check).

    Returns:
        The patterns, the loopback names first.

    Raises:
        ValueError: a name that no ``Host`` header could match: empty, with a port, a URL,
            or a ``*`` anywhere but at the start of ``*.domain`` (what to give instead).
    """
    patterns = list(LOOPBACK_HOSTS)
    for given in names:
        name = given.strip().lower()
        if not name:
            raise ValueError("an allowed host name is empty; give a name such as console.lan")
        try:
            address = ipaddress.ip_address(name.strip("[]"))
        except ValueError:
            address = None
        if address is not None:
            name = f"[{address.compressed}]" if address.version == 6 else address.compressed
        elif name == "*":
            pass
        else:
            bare = name[2:] if name.startswith("*.") else name
            if "*" in bare:
                raise ValueError(
                    f"allowed host {given!r}: '*' may only start a pattern, as in *.example.org"
                )
            if ":" in bare and "/" not in bare and bare.rsplit(":", 1)[1].isdigit():
                raise ValueError(
                    f"allowed host {given!r}: give the name without a port (requests for any "
                    "port of an allowed name are answered)"
                )
            if not _HOST_NAME.fullmatch(bare.rstrip(".")):
                raise ValueError(
                    f"allowed host {given!r} is not a host name; give a name such as "
                    "console.example.org or an address such as 10.0.0.5"
                )
        if name not in patterns:
            patterns.append(name)
    return patterns


class SecurityHeadersMiddleware:
    """ASGI middleware: every HTTP response gets :data:`SECURITY_HEADERS` (a header the app
    set itself is replaced).

    Args:
        app: the ASGI app behind it.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._names = {name.lower().encode("latin-1") for name, _ in SECURITY_HEADERS}
        self._headers = [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in SECURITY_HEADERS
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [
                    (name, value)
                    for name, value in message.get("headers", [])
                    if name.lower() not in self._names
                ]
                message = {**message, "headers": [*kept, *self._headers]}
            await send(message)

        await self.app(scope, receive, send_with_headers)
