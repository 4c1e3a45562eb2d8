"""The write boundary: where a run may write (ARCHITECTURE.md, "Brakes").

A boundary is a set of rules of three kinds, built from the CLI's ``--write-boundary SPEC``
values by :meth:`WriteBoundary.from_specs`:

* **folders** (``out/``, ``/srv/data``, ``report.json``): a spec without a scheme and without
  glob characters. It allows itself and everything below it.
* **path globs** (``data/*.json``, ``runs/**/result.json``, ``tmp/*/``): a spec without a
  scheme holding ``*``, ``?`` or ``[``. Matched component by component against the target's
  resolved absolute path (see :class:`WriteBoundary` for the syntax).
* **hosts** (``https://api.example.com``, ``http://127.0.0.1:8080/v1``): a spec with a
  scheme (``name://``). A URL target must have the same scheme, host and port, and lie
  under the path prefix when the spec has one.

Path targets are checked against folders and globs only, URL targets against hosts only.
The compiler checks literal targets (:meth:`WriteBoundary.contains`); the runner checks the
resolved targets again just before a tool with ``writes`` runs (:meth:`WriteBoundary.check`).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import posixpath
import re
import urllib.parse
from collections.abc import Iterable, Sequence
from pathlib import Path

from plandag.errors import BoundaryError

__all__ = ["HostRule", "PathGlob", "WriteBoundary", "is_url"]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
_GLOB_CHARACTERS = re.compile(r"[*?\[]")
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
# A host name as DNS writes it (letters, digits, hyphens, dots), or a bracketed IPv6
# literal. Anything else (percent-escapes, backslashes, non-ASCII, "@") is refused, so the
# boundary and the HTTP client can never read a different host out of the same URL.
_HOST_NAME = re.compile(
    r"^[a-z0-9](?:[a-z0-9\-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9\-]*[a-z0-9])?)*$"
)
_IPV6_LITERAL = re.compile(r"^\[[0-9a-f:.]+\]$")
_FORBIDDEN_URL_CHARACTERS = re.compile(r"[\x00-\x20\x7f\\]")
_ENCODED_SEPARATORS = re.compile(r"%(?:2e|2f|5c)", re.IGNORECASE)


def is_url(target: str) -> bool:
    """True when ``target`` starts with a scheme and ``://`` (``https://...``): a URL.

    Anything else (``out/x.json``, ``C:x``, ``mailto:x``) is a path.
    """
    return _SCHEME.match(target) is not None


@dataclasses.dataclass(frozen=True, slots=True)
class _Origin:
    scheme: str
    host: str
    port: int | None
    path: str


def _parse_url(url: str) -> _Origin:
    """Split ``url`` into a normalised origin and path, or raise ValueError.

    Refused: characters a client may read differently (spaces, control characters,
    backslashes), user info (``user@host``), hosts that are not plain DNS names or bracketed
    IPv6 literals (percent-escapes, non-ASCII), bad ports.
    """
    if _FORBIDDEN_URL_CHARACTERS.search(url):
        raise ValueError("it holds spaces, control characters or backslashes")
    parts = urllib.parse.urlsplit(url)
    if "@" in parts.netloc:
        raise ValueError("it holds user info (user@host); pass credentials in headers instead")
    host = (parts.hostname or "").lower()
    if host.endswith(".") and not host.endswith(".."):
        host = host[:-1]  # "example.com." is the same DNS name as "example.com"
    if not (_HOST_NAME.match(host) or (_IPV6_LITERAL.match(f"[{host}]") and ":" in host)):
        raise ValueError(f"its host {parts.hostname or ''!r} is not a plain host name")
    port = parts.port  # raises ValueError for a port that is not a number in 0-65535
    scheme = parts.scheme.lower()
    return _Origin(
        scheme=scheme,
        host=f"[{host}]" if ":" in host else host,
        port=port if port is not None else _DEFAULT_PORTS.get(scheme),
        path=parts.path or "/",
    )


def _remove_dot_segments(path: str) -> str:
    """``path`` with ``.`` and ``..`` segments removed (RFC 3986, section 5.2.4)."""
    trailing = path.endswith(("/", "/.", "/.."))
    normal = posixpath.normpath("/" + path.lstrip("/"))
    normal = "/" + normal.lstrip("/")  # normpath keeps a leading "//"
    if trailing and normal != "/":
        normal += "/"
    return normal


@dataclasses.dataclass(frozen=True, slots=True)
class HostRule:
    """An allowed URL origin, with an optional path prefix.

    Attributes:
        scheme: lowercase scheme (``https``).
        host: lowercase host name without a trailing dot, or a bracketed IPv6 literal.
        port: the port; the scheme's default (80 for http and ws, 443 for https and wss)
            when the spec gives none; None for another scheme without a port.
        path: the path prefix, ``""`` for the whole host; else starts with ``/``.
    """

    scheme: str
    host: str
    port: int | None
    path: str = ""

    @classmethod
    def parse(cls, spec: str) -> HostRule:
        """Parse a host spec such as ``https://api.example.com`` or ``http://127.0.0.1:8080/v1``.

        Raises:
            ValueError: the spec has user info, a query or fragment, a host that is not a
                plain name, or a bad port.
        """
        try:
            origin = _parse_url(spec)
        except ValueError as error:
            raise ValueError(f"write boundary {spec!r} is not a usable host: {error}") from None
        parts = urllib.parse.urlsplit(spec)
        if parts.query or parts.fragment or spec.endswith(("?", "#")):
            raise ValueError(f"write boundary {spec!r}: a host spec takes no query or fragment")
        path = "" if origin.path == "/" else _remove_dot_segments(origin.path)
        return cls(origin.scheme, origin.host, origin.port, path)

    def allows(self, origin: _Origin) -> bool:
        """True when a parsed URL target falls under this rule."""
        if (origin.scheme, origin.host, origin.port) != (self.scheme, self.host, self.port):
            return False
        if not self.path:
            return True
        path = _remove_dot_segments(origin.path)
        prefix = self.path.rstrip("/")
        return path == prefix or path.startswith(prefix + "/")

    def __str__(self) -> str:
        default = _DEFAULT_PORTS.get(self.scheme)
        port = "" if self.port is None or self.port == default else f":{self.port}"
        return f"{self.scheme}://{self.host}{port}{self.path}"


def _match_components(pattern: Sequence[str], parts: Sequence[str]) -> bool:
    """Match path components against glob components (``**`` spans zero or more)."""
    memo: dict[tuple[int, int], bool] = {}

    def match(i: int, j: int) -> bool:
        key = (i, j)
        if key in memo:
            return memo[key]
        if i == len(pattern):
            found = j == len(parts)
        elif pattern[i] == "**":
            found = match(i + 1, j) or (j < len(parts) and match(i, j + 1))
        else:
            found = (
                j < len(parts) and fnmatch.fnmatchcase(parts[j], pattern[i]) and match(i + 1, j + 1)
            )
        memo[key] = found
        return found

    return match(0, 0)


@dataclasses.dataclass(frozen=True, slots=True)
class PathGlob:
    """An allowed path pattern, absolute and with its literal prefix resolved.

    Attributes:
        pattern: the absolute pattern (``/srv/out/*.json``), its literal leading folders
            resolved with ``os.path.realpath``.
        tree: the spec ended with ``/``: a match allows everything below it too.
    """

    pattern: str
    tree: bool = False

    def allows(self, real: Path) -> bool:
        """True when the resolved absolute path ``real`` matches (or, for a tree glob,
        lies below a match)."""
        components = self.pattern.split("/")[1:]
        parts = real.as_posix().split("/")[1:]
        if real.as_posix() == "/":
            parts = []
        if not self.tree:
            return _match_components(components, parts)
        return any(_match_components(components, parts[:end]) for end in range(len(parts), 0, -1))

    def __str__(self) -> str:
        return self.pattern + ("/" if self.tree else "")


class WriteBoundary:
    """Where a run may write: folders, path globs and URL hosts.

    Args:
        roots: allowed folders (paths or path-likes, taken literally: no globs); relative
            ones are taken against ``base``. A root allows itself and everything below it.
        base: the folder relative roots, globs and targets are resolved against (default:
            the working directory at construction time).
        globs: allowed path globs (syntax below); relative ones are taken against ``base``.
        hosts: allowed URL origins (``https://api.example.com``, ``http://127.0.0.1:8080``,
            ``https://api.example.com/v1``).

    Raises:
        ValueError: a host spec that cannot be parsed (see :meth:`HostRule.parse`).

    Rules for **path targets** (any target without ``scheme://``):

    1. the target is made absolute against ``base``; ``~`` is not expanded;
    2. it is resolved with ``os.path.realpath``: the symlinks of every existing prefix are
       followed (file and folder symlinks, dangling ones too) and ``..`` is applied to the
       real folder it names. So a link inside the boundary pointing outside, and a file not
       yet created below such a link, resolve outside and are refused;
    3. it is inside when the resolved path equals a root or lies below one, or matches a
       glob. Roots and the literal leading folders of globs are resolved the same way when
       the boundary is built, so ``/tmp`` and its real path compare equal;
    4. an empty target, or one holding a NUL character, is refused.

    **Glob syntax** (a spec holding ``*``, ``?`` or ``[``), matched case-sensitively one
    path component at a time with :func:`fnmatch.fnmatchcase`: ``*`` matches within one
    component (never across ``/``), ``?`` one character, ``[abc]``/``[!abc]`` a set, and a
    whole component ``**`` matches zero or more components. ``data/*.json`` allows
    ``data/a.json`` but not ``data/sub/a.json``; ``data/**/*.json`` allows both. A glob
    ending in ``/`` (``runs/*/``) allows every path below a match as well.

    Rules for **URL targets** (``scheme://...``), matched against hosts only:

    1. refused outright: user info (``http://allowed.com@evil.com``), spaces, control
       characters, backslashes, a host that is not a plain DNS name or bracketed IPv6
       literal (percent-escapes, non-ASCII), a bad port;
    2. scheme and host are compared lowercase, a trailing dot of the host dropped; the port
       is the URL's or the scheme's default (80 http, 443 https). Scheme, host and port must
       all equal a host rule's: ``http://allowed.com.evil.com``, ``https://`` for an
       ``http://`` rule, or another port are refused;
    3. a rule with a path prefix also needs the target's path, with ``.`` and ``..``
       segments removed (RFC 3986, 5.2.4), to equal the prefix or lie below it at a ``/``;
       a target path holding ``%2e``, ``%2f`` or ``%5c`` (encoded ``.``, ``/``, ``\\``) is
       refused under such a rule, since servers may decode them into separators;
    4. the query and fragment are ignored.

    :meth:`check` answers from the disk as it is at that moment; a folder swapped for a link
    right after is not seen. Writes made through :func:`plandag.tools.writing.open_for_write`
    or :func:`~plandag.tools.writing.write_atomic` (every built-in tool that writes files
    uses them) close that window: they open each folder of the path themselves, relative to
    the one before and without following links, follow a link only by reading it and opening
    its target the same way, and check the folder they actually reached, so the check and
    the write are one. The runner still checks the resolved targets before calling a tool,
    which also covers tools that write by other means. Case-insensitive file systems are
    compared case-sensitively.
    """

    def __init__(
        self,
        roots: Iterable[str | os.PathLike[str]] = (),
        base: str | os.PathLike[str] | None = None,
        *,
        globs: Iterable[str] = (),
        hosts: Iterable[str] = (),
    ) -> None:
        self.base = Path(base) if base is not None else Path.cwd()
        self.roots: list[Path] = [self._real(Path(root)) for root in roots]
        self.globs: list[PathGlob] = [self._glob(spec) for spec in globs]
        self.hosts: list[HostRule] = [HostRule.parse(spec) for spec in hosts]

    @classmethod
    def from_specs(
        cls, specs: Iterable[str | os.PathLike[str]], base: str | os.PathLike[str] | None = None
    ) -> WriteBoundary:
        """Build a boundary from ``--write-boundary`` values (the CLI's constructor).

        Args:
            specs: each one a host (``https://api.example.com``: has ``scheme://``), a path
                glob (holds ``*``, ``?`` or ``[``) or a folder (anything else; path-like
                objects are always folders).
            base: the folder relative specs and targets are resolved against (default: the
                working directory).

        Returns:
            The boundary; with no specs at all, one that allows nothing.

        Raises:
            ValueError: an empty spec, or a host spec that cannot be parsed.
        """
        roots: list[str | os.PathLike[str]] = []
        globs: list[str] = []
        hosts: list[str] = []
        for spec in specs:
            if not isinstance(spec, str):
                roots.append(spec)
            elif not spec.strip():
                raise ValueError("an empty --write-boundary value allows nothing; give a path")
            elif is_url(spec):
                hosts.append(spec)
            elif _GLOB_CHARACTERS.search(spec):
                globs.append(spec)
            else:
                roots.append(spec)
        return cls(roots, base, globs=globs, hosts=hosts)

    def _real(self, path: Path) -> Path:
        absolute = path if path.is_absolute() else self.base / path
        # realpath resolves symlinks of every existing prefix and normalises ``..``
        return Path(os.path.realpath(absolute))

    def _glob(self, spec: str) -> PathGlob:
        tree = spec.endswith(("/", os.sep))
        absolute = os.path.normpath(os.path.join(self.base, spec))
        components = absolute.split("/")
        literal = next(
            (index for index, part in enumerate(components) if _GLOB_CHARACTERS.search(part)),
            len(components),
        )
        prefix = os.path.realpath("/".join(components[:literal]) or "/")
        pattern = "/".join([prefix.rstrip("/"), *components[literal:]])
        return PathGlob(pattern if pattern.startswith("/") else "/" + pattern, tree)

    def resolve(self, target: str | os.PathLike[str]) -> Path:
        """The real absolute path the path ``target`` would write to (rules above).

        Raises:
            ValueError: the target holds a NUL character.
        """
        return self._real(Path(target))

    def contains(self, target: str | os.PathLike[str]) -> bool:
        """True when ``target`` (a path, or a URL with ``scheme://``) is inside the boundary.

        Never raises: a target that cannot be parsed or resolved is outside.
        """
        text = os.fspath(target)
        if not text or "\x00" in text:
            return False
        if isinstance(target, str) and is_url(target):
            try:
                origin = _parse_url(target)
            except ValueError:
                return False
            if _ENCODED_SEPARATORS.search(origin.path) and any(rule.path for rule in self.hosts):
                return False
            return any(rule.allows(origin) for rule in self.hosts)
        try:
            real = self.resolve(target)
        except (OSError, ValueError):
            return False
        return self.allows_real(real)

    def allows_real(self, real: Path) -> bool:
        """True when the real absolute path ``real`` (symlinks already resolved, no ``..``)
        equals a root, lies below one, or matches a glob. Reads nothing from the disk.

        :func:`plandag.tools.writing.open_for_write` calls it with the path it reached by
        opening each folder itself, so the answer is about the folder it writes into.
        """
        return any(real == root or root in real.parents for root in self.roots) or any(
            rule.allows(real) for rule in self.globs
        )

    def outside_error(
        self, target: str | os.PathLike[str], real: Path | str, *, step_id: int | None = None
    ) -> BoundaryError:
        """The error for a path ``target`` whose real location ``real`` lies outside.

        Args:
            target: the path as the tool was given it.
            real: where it resolves to.
            step_id: the step writing, named in the message.

        Returns:
            A :class:`BoundaryError` (not raised) naming the target, its real path, the
            boundary, and what to do.
        """
        where = f"step {step_id}: " if step_id is not None else ""
        text = os.fspath(target)
        return BoundaryError(
            f"{where}write target {text!r} resolves to {real}, outside the write boundary "
            f"({self.describe()}); write inside it or widen it with --write-boundary",
            target=text,
        )

    def check(self, target: str | os.PathLike[str], *, step_id: int | None = None) -> Path | str:
        """Return the resolved target, or raise when it lies outside the boundary.

        Args:
            target: a path or a URL, as the tool is about to use it.
            step_id: the step writing, named in the error.

        Returns:
            For a path, the real absolute :class:`~pathlib.Path`; for a URL, the URL as given.

        Raises:
            BoundaryError: the target escapes (by ``..``, an absolute path, a symlink, another
                host, port or scheme) or cannot be parsed.
        """
        is_path = not (isinstance(target, str) and is_url(target))
        text = os.fspath(target)
        if is_path and text and "\x00" not in text:
            # Resolved once: the answer and the path returned (or named) are the same one.
            try:
                real = self.resolve(target)
            except (OSError, ValueError) as error:  # a folder on it changed meanwhile
                where = f"step {step_id}: " if step_id is not None else ""
                raise BoundaryError(
                    f"{where}write target {text!r} could not be resolved while it was "
                    f"checked ({getattr(error, 'strerror', None) or error}): a folder on its "
                    "path changed; refused, as outside the write boundary",
                    target=text,
                ) from None
            if self.allows_real(real):
                return real
            raise self.outside_error(target, real, step_id=step_id)
        if self.contains(target):
            return text  # a URL (a path inside returned above)
        where = f"step {step_id}: " if step_id is not None else ""
        hint = "write inside it or widen it with --write-boundary"
        if not is_path:
            try:
                _parse_url(text)
            except ValueError as error:
                message = f"{where}write target {text!r} is refused: {error}"
            else:
                message = (
                    f"{where}write target {text!r} is not on an allowed host of the write "
                    f"boundary ({self.describe()}); {hint}"
                )
        else:
            message = f"{where}write target {text!r} is empty or holds a NUL character"
        raise BoundaryError(message, target=text)

    @property
    def specs(self) -> list[str]:
        """Every rule as a normalised spec string: roots, then globs, then hosts (stable, for
        display and for binding an approval to the boundary)."""
        return [
            *(str(root) for root in self.roots),
            *(str(rule) for rule in self.globs),
            *(str(rule) for rule in self.hosts),
        ]

    def describe(self) -> str:
        """The rules in words for messages: ``"/srv/out, https://api.example.com"`` or
        ``"nowhere"``."""
        return ", ".join(self.specs) or "nowhere"

    def __repr__(self) -> str:
        return f"WriteBoundary({self.specs!r})"
