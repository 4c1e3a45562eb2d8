"""The secret rules applied one at a time, each a substitution of its own: the reference the
one-pass scrub of ``plandag.trace.redact`` is compared with (same rules, same masks)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from plandag.trace.redact import SECRET_MASK, environment_secrets, is_secret_key

_ANTHROPIC_KEY = re.compile(r"(?<![A-Za-z0-9])sk-ant-[A-Za-z0-9_-]{8,}")
_OPENAI_KEY = re.compile(r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_-]{20,}")
_JSON_WEB_TOKEN = re.compile(
    r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"
)
# RFC 7617 (Basic) and RFC 6750 (Bearer) credentials: the scheme, blanks, a token68.
_AUTH_SCHEME = re.compile(r"(?i)(?<![A-Za-z0-9_])(bearer|basic)([ \t]+)([A-Za-z0-9._~+/=-]{8,})")
# `name: value`, `name=value`, `"name": "value"`, `('name', 'value')` for secret names inside
# free text (header dumps, URLs' query strings, reprs). Cookies run to the end of the line.
_SECRET_NAMES = (
    r"(?:x-)?api[-_]?key|(?:proxy-)?authorization|(?:access|refresh|id|auth|session|api)[-_]token"
    r"|token|client[-_]secret|secret[-_]key|secret|password|passwd"
)
_KEY_VALUE = re.compile(
    r"(?i)(?<![A-Za-z0-9])(" + _SECRET_NAMES + r")"
    r"(['\"]?[ \t]*[:=][ \t]*['\"]?|['\"][ \t]*,[ \t]*['\"])"
    r"(?!\[secret\]|(?:bearer|basic)[ \t])([^\s'\",;&)}\]]+)"
)
# RFC 3986, 3.2.1: the userinfo of a URL, ``scheme://user:password@host``; the password is
# masked, the user name kept. As ``urllib.parse`` reads it, the user name runs to the first
# ``:`` and the password to the last ``@`` before the host. Neither holds what RFC 3986 never
# allows raw in a URL (blanks and other control characters, ``"\\<>{}|^```) nor ``[]``
# and the delimiters ``/?#``, so a match stops there: it never runs across the quotes of
# JSON or a table's border, and every character JSON escapes is among those, so a URL
# matches in a string value exactly when it matches in that value's JSON text. Linear time:
# each try starts at a ``://`` and the host after each ``@`` is read once (possessive).
_NEVER_IN_URL = r"\x00-\x20\x7f\"\\<>{}|^`"
_URL_PASSWORD = re.compile(
    r"(://[^" + _NEVER_IN_URL + r"/?#\[\]:]*:)"  # the scheme's end and the user name
    r"([^" + _NEVER_IN_URL + r"/?#\[\]]+)"  # the password, to ...
    r"(?=@[^" + _NEVER_IN_URL + r"/?#@]*+(?!@))"  # ... the last @ before the host
)
_COOKIE = re.compile(
    r"(?i)(?<![A-Za-z0-9])(set-cookie|cookie)(['\"]?[ \t]*[:=][ \t]*['\"]?)"
    r"(?!\[secret\])([^\r\n'\"]+)"
)


def holds_url_password(text: str) -> bool:
    """Whether ``text`` holds a URL with a password (``scheme://user:password@``) that the
    secret rules mask (a password already ``[secret]`` is not counted)."""
    return "://" in text and _URL_PASSWORD.search(text) is not None


def _mask_url_passwords(text: str) -> str:
    if "://" not in text:
        return text
    return _URL_PASSWORD.sub(lambda match: f"{match.group(1)}{SECRET_MASK}", text)


#: The letters that ``re.IGNORECASE`` matches with an ASCII letter but ``str.lower`` does not
#: turn into one (Python's ``re`` documentation: U+0131 and U+017F; U+0130 and U+212A lower
#: to text holding the ASCII letter). A text holding one may hold a word in any case.
CASE_LOOKALIKES = ("\u0131", "\u017f")


def may_hold_word(text: str, words: Iterable[str]) -> bool:
    """Whether ``text`` may hold one of ``words`` in any case, as a case-insensitive regular
    expression would find it: a cheap test (``str.lower`` and substring search) that lets a
    caller skip a costlier scan. Never a false negative; a text holding a letter that only
    ``re.IGNORECASE`` folds to ASCII (dotless i, long s) always answers True.

    Args:
        text: any text.
        words: lower-case ASCII words.
    """
    if any(letter in text for letter in CASE_LOOKALIKES):
        return True
    lowered = text.lower()
    return any(word in lowered for word in words)


_AUTH_WORDS = ("bearer", "basic")


def scrub_secret_values(text: str, environment: Iterable[str] | None = None) -> str:
    """``text`` with credential values masked as ``[secret]``, its structure left alone.

    Masks what is a credential by its value alone: the environment's secret values, Anthropic
    and OpenAI keys, JSON Web Tokens, ``Bearer``/``Basic`` credentials, and the password of
    a URL (``http://user:[secret]@host/``). Unlike
    :func:`scrub_secrets` it does not look for ``name: value`` pairs, so JSON, CSV or a
    table stays well formed; use it on text already rendered (command output, text stored
    as is).

    Args:
        text: any text.
        environment: the secret values to mask (default: :func:`environment_secrets`).

    Returns:
        The masked text (the same object when nothing matched).
    """
    values = tuple(environment_secrets() if environment is None else environment)
    for value in values:
        if value in text:
            text = text.replace(value, SECRET_MASK)
    if "sk-" in text:
        text = _ANTHROPIC_KEY.sub(SECRET_MASK, text)
        text = _OPENAI_KEY.sub(SECRET_MASK, text)
    if "eyJ" in text:
        text = _JSON_WEB_TOKEN.sub(SECRET_MASK, text)
    text = _mask_url_passwords(text)
    if not may_hold_word(text, _AUTH_WORDS):
        return text
    return _AUTH_SCHEME.sub(_mask_auth_scheme, text)


def scrub_secret_text(text: str, environment: Iterable[str] = ()) -> str:
    """``text`` masked by :func:`scrub_secrets`'s rules for strings, the environment given.

    Args:
        text: a string value (not JSON text: ``name: value`` pairs inside are masked too).
        environment: the secret values to mask wherever they appear (default: none; pass
            :func:`environment_secrets` keys to mask the environment's).

    Returns:
        The masked text.
    """
    return _scrub_secret_text(text, tuple(environment))


def _looks_like_credential(token: str) -> bool:
    """Whether the word after ``Bearer``/``Basic`` is a credential rather than prose."""
    if len(token) >= 24:
        return True
    if any(not char.isalpha() for char in token):
        return True
    return any(char.isupper() for char in token[1:])


def _mask_auth_scheme(match: re.Match[str]) -> str:
    if not _looks_like_credential(match.group(3)):
        return match.group(0)
    return f"{match.group(1)}{match.group(2)}{SECRET_MASK}"


# Every pattern below needs one of these words (in any case) or characters: a text without
# any is left as it is, unscanned.
_CREDENTIAL_WORDS = ("sk-", "eyj", "bearer", "basic")
_PAIR_CHARACTERS = (":", "=", ",")


def _scrub_secret_text(text: str, environment: tuple[str, ...]) -> str:
    for value in environment:
        if value in text:
            text = text.replace(value, SECRET_MASK)
    if not any(character in text for character in _PAIR_CHARACTERS) and not may_hold_word(
        text, _CREDENTIAL_WORDS
    ):
        return text
    if "sk-" in text:
        text = _ANTHROPIC_KEY.sub(SECRET_MASK, text)
        text = _OPENAI_KEY.sub(SECRET_MASK, text)
    if "eyJ" in text:
        text = _JSON_WEB_TOKEN.sub(SECRET_MASK, text)
    text = _mask_url_passwords(text)
    text = _AUTH_SCHEME.sub(_mask_auth_scheme, text)
    text = _KEY_VALUE.sub(lambda match: f"{match.group(1)}{match.group(2)}{SECRET_MASK}", text)
    return _COOKIE.sub(lambda match: f"{match.group(1)}{match.group(2)}{SECRET_MASK}", text)


def _local_name(key: str) -> str:
    if key.startswith("{"):
        key = key.rpartition("}")[2]
    return key.rpartition(":")[2]


def scrub_secrets(value: Any, environment: tuple[str, ...]) -> Any:
    """A copy of ``value`` with secrets masked, walked one item at a time (secret-named keys,
    header pairs, strings by :func:`_scrub_secret_text`, cycles cut)."""
    path: set[int] = set()

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return _scrub_secret_text(item, environment)
        if isinstance(item, Mapping | list | tuple):
            if id(item) in path:
                return "[cycle]"
            path.add(id(item))
            try:
                return mapping(item) if isinstance(item, Mapping) else sequence(item)
            finally:
                path.discard(id(item))
        return item

    def mapping(items: Mapping[Any, Any]) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        for key, item in items.items():
            new_key = _scrub_secret_text(key, environment) if isinstance(key, str) else key
            if new_key in result:
                new_key = f"{new_key}#{len(result)}"
            if isinstance(key, str) and item is not None and is_secret_key(key):
                result[new_key] = SECRET_MASK
            else:
                result[new_key] = walk(item)
        return result

    def sequence(items: Any) -> list[Any]:
        return [
            [item[0], SECRET_MASK]
            if isinstance(item, list | tuple)
            and len(item) == 2
            and isinstance(item[0], str)
            and item[1] is not None
            and is_secret_key(item[0])
            else walk(item)
            for item in items
        ]

    return walk(value)
