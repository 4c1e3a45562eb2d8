"""Text that UTF-8 cannot encode, escaped in one defined way.

A Python ``str`` may hold *lone surrogates* (code points U+D800-U+DFFF), which are not
Unicode text: a file name or a command-line argument that was not valid UTF-8 (Python keeps
each undecodable byte ``0xNN`` as ``U+DCNN``, ``surrogateescape``, PEP 383), a file read
with the ``unicode_escape`` codec, a JSON document holding ``"\\ud800"`` (an HTTP body, a
model's reply), a tool that builds one. No UTF-8 writer takes them: SQLite, a JSONL trace, a
terminal all raise ``UnicodeEncodeError``.

Wherever plandag records or shows such a value, each lone surrogate is written as text:

* ``U+DC80``-``U+DCFF`` (an undecodable byte kept by ``surrogateescape``) as the four
  characters ``\\xNN``, the byte's value in lower-case hex (as Python's ``backslashreplace``
  writes a byte);
* any other (``U+D800``-``U+DC7F``, ``U+DD00``-``U+DFFF``) as the six characters ``\\uDNNN``,
  lower-case hex (as Python and JSON write the code point).

Each surrogate is escaped on its own, a high one followed by a low one too (a ``str``
holding such a pair as two code points is no more UTF-8 than one holding either alone).
Text without lone surrogates is never changed. A run's step whose result, error or check
messages were escaped says so in its ``detail`` (:data:`ESCAPED_NOTE`).
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "ESCAPED_NOTE",
    "escape_json_text",
    "escape_surrogates",
    "escape_text",
    "has_surrogates",
    "holds_surrogates",
]

ESCAPED_NOTE = "lone surrogates escaped as text (\\uDNNN, or \\xNN for an undecodable byte)"
"""The words a step's ``detail`` holds when a value of the step was escaped."""

_SURROGATE = re.compile("[\ud800-\udfff]")
_SEQUENCES = (list, tuple)


def has_surrogates(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate (a str UTF-8 cannot encode).

    ASCII text answers at once; other text is encoded once (faster than a search).
    """
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte kept by surrogateescape
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}"


def escape_text(text: str) -> str:
    """``text`` with each lone surrogate written as text (rules in the module docstring).

    Args:
        text: any str.

    Returns:
        The same object when it holds no lone surrogate; else the escaped copy.
    """
    return _SURROGATE.sub(_escape, text) if has_surrogates(text) else text


def holds_surrogates(value: Any) -> bool:
    """Whether a string of ``value`` (dicts' keys and values, lists, tuples, nested) holds
    a lone surrogate; other objects are not looked into. Nothing is copied."""
    kind = type(value)
    if kind is str:
        return not value.isascii() and has_surrogates(value)
    if kind is dict or isinstance(value, dict):
        for key, item in value.items():
            if type(key) is str and not key.isascii() and has_surrogates(key):
                return True
            if type(item) is str:
                if not item.isascii() and has_surrogates(item):
                    return True
            elif item is not None and holds_surrogates(item):
                return True
        return False
    if kind is list or kind is tuple or isinstance(value, _SEQUENCES):
        for item in value:
            if type(item) is str:
                if not item.isascii() and has_surrogates(item):
                    return True
            elif item is not None and holds_surrogates(item):
                return True
        return False
    if isinstance(value, str):
        return has_surrogates(value)
    return False


def escape_surrogates(value: Any) -> Any:
    """``value`` with :func:`escape_text` applied to every string in it, keys included.

    Args:
        value: JSON-like data (dicts, lists, tuples, strings, numbers...); other objects
            are kept as they are.

    Returns:
        The value itself when no string in it holds a lone surrogate (nothing is copied);
        otherwise a copy of the containers on the way to those strings (tuples among them
        become lists), the others shared.
    """
    if not holds_surrogates(value):
        return value
    return _escaped(value)


def _escaped(value: Any) -> Any:
    if isinstance(value, str):
        return escape_text(value)
    if isinstance(value, dict):
        return {
            (escape_text(key) if isinstance(key, str) else key): (
                _escaped(item) if holds_surrogates(item) else item
            )
            for key, item in value.items()
        }
    if isinstance(value, _SEQUENCES):
        return [_escaped(item) if holds_surrogates(item) else item for item in value]
    return value


def _escape_in_json(match: re.Match[str]) -> str:
    return json.dumps(_escape(match), ensure_ascii=False)[1:-1]


def escape_json_text(text: str) -> str:
    """JSON text (``json.dumps(..., ensure_ascii=False)``, which writes lone surrogates as
    they are) that decodes to the value with :func:`escape_text` applied to its strings.

    A lone surrogate in JSON text can only sit inside a string, where it is replaced by the
    JSON form of its escape (``\\\\ud800``, ``\\\\xff``).

    Args:
        text: JSON text.

    Returns:
        The same object when it holds no lone surrogate; else the escaped copy.
    """
    return _SURROGATE.sub(_escape_in_json, text) if has_surrogates(text) else text
