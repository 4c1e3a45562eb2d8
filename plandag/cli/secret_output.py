"""No secret on the terminal: every command's standard output and error are masked.

Commands print JSON documents, tables, answers and error messages from many places; rather
than trust each one, the CLI wraps ``sys.stdout`` and ``sys.stderr`` for the duration of a
command in a :class:`SecretMaskingStream`, which masks credential values in each piece of
text written (:func:`plandag.trace.redact.scrub_secret_values`: the environment's secret
values, ``sk-...`` keys, JSON Web Tokens, ``Bearer``/``Basic`` credentials), keeping JSON and
tables well formed. Values under secret-named keys (``Authorization``, ``x-api-key``) that
match none of those are masked where the documents are built
(:func:`plandag.trace.redact.scrub_secrets` on ``--json`` documents and on the values a run
table shows).
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from plandag.surrogates import has_surrogates
from plandag.trace.redact import environment_secrets, scrub_secret_values

__all__ = ["SecretMaskingStream", "mask_standard_streams"]


class SecretMaskingStream:
    """A text stream that masks credential values in what is written, then passes it on.

    Args:
        stream: the stream written to (``sys.stdout``, ``sys.stderr``).

    Each ``write`` is masked on its own (the environment's secret values are read at each
    write, so a variable set mid-command counts); every other attribute is the wrapped
    stream's. Rich, ``print`` and ``sys.stdout.write`` each write a whole rendering at once.
    A lone surrogate that reached the stream (text UTF-8 cannot encode,
    :mod:`plandag.surrogates`) is written as ``\\uDNNN``, as Python's ``backslashreplace``
    writes it, which JSON reads back: no write fails.
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        """Write ``text`` with credential values masked; returns ``len(text)`` as given."""
        masked = scrub_secret_values(text, tuple(environment_secrets()))
        if has_surrogates(masked):
            masked = masked.encode("utf-8", "backslashreplace").decode("utf-8")
        self.stream.write(masked)
        return len(text)

    def writelines(self, lines: Any) -> None:
        """Write each line, masked."""
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def mask_standard_streams() -> tuple[TextIO, TextIO]:
    """Wrap ``sys.stdout`` and ``sys.stderr`` in :class:`SecretMaskingStream` (once).

    Returns:
        The streams that were there before, for the caller to put back.
    """
    before = (sys.stdout, sys.stderr)
    if not isinstance(sys.stdout, SecretMaskingStream):
        sys.stdout = SecretMaskingStream(sys.stdout)
    if not isinstance(sys.stderr, SecretMaskingStream):
        sys.stderr = SecretMaskingStream(sys.stderr)
    return before
