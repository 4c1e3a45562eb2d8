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

from plandag.surrogates import escape_surrogates, escape_text

__all__ = ["display_name", "escape_surrogates"]


def display_name(path: str | os.PathLike[str]) -> str:
    """``path`` as text every UTF-8 writer accepts: undecodable bytes written ``\\xNN``.

    Args:
        path: a path as Python holds it (undecodable bytes as ``U+DC80``-``U+DCFF``).

    Returns:
        The same text when it holds no lone surrogate; otherwise each ``U+DCNN`` from
        ``surrogateescape`` as ``\\xNN`` and any other lone surrogate as ``\\uDNNN``
        (:func:`plandag.surrogates.escape_text`).
    """
    return escape_text(os.fspath(path))
