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
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from itsdangerous import BadSignature, URLSafeSerializer
from starlette.datastructures import URL
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = [
    "SESSION_COOKIE",
    "TOKEN_COOKIE",
    "Session",
    "SessionSigner",
    "TokenMiddleware",
    "check_csrf",
    "new_token",
    "valid_name",
]

TOKEN_COOKIE = "plandag_token"
"""The cookie holding the access token after the first visit."""
SESSION_COOKIE = "plandag_session"
"""The signed cookie holding the person's name and the CSRF value (a browser-session cookie)."""
NAME_MAX_CHARS = 80
"""The longest name the console records."""


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
