"""The HTTP allow-list: which hosts plandag's HTTP clients may reach.

A pattern is a host glob matched case-insensitively against a URL's host name with
:func:`fnmatch.fnmatchcase` semantics (``*`` any run of characters, ``?`` one character,
``[seq]`` a set), for example ``api.example.com``, ``*.example.org`` or ``127.0.0.1``. A
pattern with a port (``127.0.0.1:8080``) matches that port only; one without matches any
port. The patterns come from the configuration (``http_allow``) and from the hosts an
approved plan lists (ARCHITECTURE.md, "Untrusted content").
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

__all__ = ["host_allowed", "host_pattern", "pattern_problem", "pattern_refusal"]

_DEFAULT_PORTS = {"http": 80, "https": 443}


def _split(pattern: str) -> tuple[str, int | None]:
    pattern = pattern.strip().lower()
    if "://" in pattern:
        import httpx  # here, not at the top: the command line starts without it

        url = httpx.URL(pattern)
        return url.host, url.port
    if pattern.startswith("["):  # [::1] or [::1]:8080
        host, _, rest = pattern[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    host, sep, port = pattern.rpartition(":")
    if sep and port.isdigit() and ":" not in host:
        return host, int(port)
    return pattern, None


def pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` can never match a host, or None when it is a usable host glob.

    A pattern that holds a space, a path, query or user part, or a port that is not a
    number from 1 to 65535 (``127.0.0.1:*``; a pattern without a port matches any port)
    matches nothing, silently; configuration and command-line values are refused with
    this reason instead (:func:`pattern_refusal`).

    Args:
        pattern: a pattern of the module docstring's form (an ``http(s)://`` prefix and a
            trailing ``/`` are allowed, as in a URL of the host).

    Returns:
        The problem as a short phrase, or None.
    """
    text = pattern.strip()
    if not text:
        return "it is empty"
    if any(character.isspace() for character in text):
        return "it holds a space"
    _, sep, rest = text.partition("://")
    if not sep:
        rest = text
    rest = rest[:-1] if sep and rest.endswith("/") else rest
    if any(mark in rest for mark in "/?#@"):
        return "it has a path, query or user part ('/', '?', '#' or '@')"
    if rest.startswith("["):
        _, _, after = rest[1:].partition("]")
        port = after[1:] if after.startswith(":") else None
    else:
        host, colon, port_text = rest.rpartition(":")
        port = port_text if colon and ":" not in host else None
    if port is not None and not (port.isdigit() and 1 <= int(port) <= 65535):
        return f"its port {port!r} is not a number from 1 to 65535"
    return None


def pattern_refusal(pattern: str, where: str) -> str | None:
    """The error message for a pattern that can never match (:func:`pattern_problem`),
    naming where it was given (a file or ``--http-allow``) and what to give instead; None
    for a usable pattern."""
    problem = pattern_problem(pattern)
    if problem is None:
        return None
    hint = " (a pattern without a port matches any port)" if "port" in problem else ""
    return (
        f"{where}: http_allow {pattern!r} can never match a host: {problem}; give a host "
        f"glob such as api.example.com, *.example.org or 127.0.0.1:8080{hint}"
    )


def host_allowed(url: str | httpx.URL, patterns: Iterable[str]) -> bool:
    """Whether ``url``'s host (and port) matches one of ``patterns``.

    Args:
        url: an absolute ``http`` or ``https`` URL.
        patterns: host globs (see the module docstring); an empty iterable allows nothing.

    Returns:
        True when some pattern matches; False otherwise, and for a URL without a host.
    """
    import httpx

    parsed = url if isinstance(url, httpx.URL) else httpx.URL(url)
    host = parsed.host.lower().rstrip(".")
    if not host:
        return False
    port = parsed.port if parsed.port is not None else _DEFAULT_PORTS.get(parsed.scheme)
    for pattern in patterns:
        pattern_host, pattern_port = _split(pattern)
        if pattern_port is not None and pattern_port != port:
            continue
        if fnmatch.fnmatchcase(host, pattern_host.rstrip(".")):
            return True
    return False


def host_pattern(url: str | httpx.URL) -> str | None:
    """The exact pattern of ``url``'s host and port (``api.example.com:443``,
    ``[::1]:8080``): what a plan that names ``url`` literally lists.

    Returns:
        ``host:port`` (the scheme's default port when the URL gives none; IPv6 hosts in
        brackets), lowercase; None for a URL that is not http(s) or has no host.
    """
    import httpx

    try:
        parsed = url if isinstance(url, httpx.URL) else httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return None
    host = parsed.host.lower().rstrip(".")
    if parsed.scheme not in _DEFAULT_PORTS or not host:
        return None
    port = parsed.port if parsed.port is not None else _DEFAULT_PORTS[parsed.scheme]
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port}"
