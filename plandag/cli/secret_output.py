"""No secret on the terminal: every command's standard output and error are masked.

Commands print JSON documents, tables, answers and error messages from many places; rather
than trust each one, the CLI masks credential values
(:func:`plandag.trace.redact.scrub_secret_values`: the environment's secret values,
``sk-...`` keys, JSON Web Tokens, ``Bearer``/``Basic`` credentials, passwords in URLs) in
two places, keeping JSON and tables well formed:

* before layout: the CLI's consoles are :class:`SecretMaskingConsole`, which masks each
  text it is given before rich wraps it into lines, table cells and panels. A wrap can put
  a line break (and a table's border) between ``Bearer`` and its token, where no pattern
  sees a credential any more;
* per write, the second line of defence: ``sys.stdout`` and ``sys.stderr`` are wrapped for
  the duration of a command in a :class:`SecretMaskingStream`, which masks each piece of
  text written (``print``, ``sys.stdout.write``, JSON documents).

Values under secret-named keys (``Authorization``, ``x-api-key``) that match none of those
are masked where the documents are built (:func:`plandag.trace.redact.scrub_secrets` on
``--json`` documents and on the values a run table shows).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, TextIO

from rich.console import Console, ConsoleOptions, RenderableType
from rich.protocol import rich_cast
from rich.segment import Segment
from rich.text import Text

from plandag.surrogates import has_surrogates
from plandag.trace.redact import environment_secrets, scrub_secret_values

__all__ = ["SecretMaskingConsole", "SecretMaskingStream", "mask_standard_streams", "masked_text"]


def masked_text(text: Text) -> Text:
    """``text`` with credential values masked in its characters, before any layout.

    Args:
        text: a rich ``Text``.

    Returns:
        ``text`` itself when it holds no credential; else a copy with the same style and
        layout settings whose changed part (from the first masked character to the last)
        carries the text's base style only; the styles of the parts before and after are
        kept.
    """
    plain = text.plain
    masked = scrub_secret_values(plain, tuple(environment_secrets()))
    if masked == plain:
        return text
    limit = min(len(plain), len(masked))
    prefix = 0
    while prefix < limit and plain[prefix] == masked[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and plain[-1 - suffix] == masked[-1 - suffix]:
        suffix += 1
    result = text.blank_copy()
    result.append_text(text[:prefix])
    result.append(masked[prefix : len(masked) - suffix])
    result.append_text(text[len(plain) - suffix :])
    return result


class SecretMaskingConsole(Console):
    """A rich ``Console`` that masks credential values in every text before it lays it out.

    Takes the arguments of ``rich.console.Console``. Every string and ``Text`` rendered,
    at any depth (a table's cells and title, a panel's content, a progress bar's columns),
    goes through :func:`masked_text` first, so a token is masked whole whatever width the
    terminal has.
    """

    def render_str(self, text: str, **options: Any) -> Text:
        """``Console.render_str`` (a string made a ``Text``: markup, emoji, highlighting)
        with the result masked, so that measuring a table's columns sees the masked text."""
        return masked_text(super().render_str(text, **options))

    def render(
        self, renderable: RenderableType, options: ConsoleOptions | None = None
    ) -> Iterable[Segment]:
        """``Console.render`` of ``renderable`` with its text masked first."""
        renderable = rich_cast(renderable)
        if isinstance(renderable, Text):  # a string is masked as render_str makes it a Text
            renderable = masked_text(renderable)
        return super().render(renderable, options)


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
