"""Input names that are not valid UTF-8, shown without losing them or crashing a writer.

On POSIX a file name is bytes. Python decodes a name that is not valid UTF-8 with
``surrogateescape`` (PEP 383): each undecodable byte ``0xNN`` becomes the lone surrogate
``U+DCNN``. Such a string opens the file, but no UTF-8 writer (a JSONL or CSV file, SQLite, a
trace, a terminal) accepts it. Every name a batch shows or records goes through
:func:`display_name`, which writes each undecodable byte as the four characters ``\\xNN``
(``b"bad\\xff.xml"`` → ``bad\\xff.xml``), the form Python's ``backslashreplace`` error handler
uses; a lone surrogate from elsewhere becomes ``\\uDNNN``. Valid names are left as they are.
The path itself, not its shown name, is what the batch opens.
"""

from __future__ import annotations

import os
import re
from typing import Any

__all__ = ["display_name", "escape_surrogates"]

_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte kept by surrogateescape
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}"


def display_name(path: str | os.PathLike[str]) -> str:
    """``path`` as text every UTF-8 writer accepts: undecodable bytes written ``\\xNN``.

    Args:
        path: a path as Python holds it (undecodable bytes as ``U+DC80``-``U+DCFF``).

    Returns:
        The same text when it holds no lone surrogate; otherwise each ``U+DCNN`` from
        ``surrogateescape`` as ``\\xNN`` and any other lone surrogate as ``\\uDNNN``.
    """
    text = os.fspath(path)
    return _SURROGATE.sub(_escape, text) if _SURROGATE.search(text) else text


def escape_surrogates(value: Any) -> Any:
    """``value`` with :func:`display_name` applied to every string in it, keys included.

    Args:
        value: JSON-like data (dicts, lists, tuples, strings, numbers...).

    Returns:
        The value itself when no string in it holds a lone surrogate (nothing is copied);
        otherwise a copy (tuples become lists) with those strings escaped.
    """
    if isinstance(value, str):
        return display_name(value)
    if isinstance(value, dict):
        items = [(escape_surrogates(key), escape_surrogates(item)) for key, item in value.items()]
        if all(
            k is key and i is item for (k, i), (key, item) in zip(items, value.items(), strict=True)
        ):
            return value
        return dict(items)
    if isinstance(value, list | tuple):
        escaped = [escape_surrogates(item) for item in value]
        if all(new is old for new, old in zip(escaped, value, strict=True)):
            return value
        return escaped
    return value
