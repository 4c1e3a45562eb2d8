"""Where a quote is in the document, computed by plandag, and the documented normalised match.

A model's quote is evidence only once plandag finds it in the text the model was given.
:func:`locate_quote` searches the chunk's span of the document:

1. **exact**: the quote (its surrounding whitespace stripped) occurs character for
   character: ``text[start:end] == quote``; ``match`` is ``"exact"``.
2. **normalized**: otherwise, the quote occurs once both sides are normalised by
   :func:`normalize_for_match`: every run of whitespace (spaces, tabs, line ends, page
   breaks, no-break spaces) is one space; letters are compared in lower case; typographic
   quotes are the plain ``'`` and ``"``; hyphens and dashes (``‐ ‑ ‒ – — ―``) are ``-``.
   The offsets are those of the document's characters that matched, so
   ``normalize_for_match(text[start:end]) == normalize_for_match(quote)``; ``match`` is
   ``"normalized"``.

Anything else (a paraphrase, a quote spliced from two places, a changed word or number, a
quote from outside the chunk) is not found: it is rejected, never a value. When the quote
occurs several times, the first occurrence in the chunk is taken.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

__all__ = ["Located", "MatchKind", "locate_quote", "normalize_for_match", "quote_matches"]

MatchKind = Literal["exact", "normalized"]

_FOLD = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201a": "'",
        "\u201b": "'",
        "\u2032": "'",
        "`": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
        "\u201f": '"',
        "\u2033": '"',
        "\u00ab": '"',
        "\u00bb": '"',
        "\u2010": "-",
        "\u2011": "-",
        "\u2012": "-",
        "\u2013": "-",
        "\u2014": "-",
        "\u2015": "-",
        "\u2212": "-",
    }
)


@dataclasses.dataclass(frozen=True, slots=True)
class Located:
    """A quote found in the document: ``[start, end)`` offsets into its text and how it
    matched (``exact`` or ``normalized``)."""

    start: int
    end: int
    match: MatchKind


def _fold_char(char: str) -> str:
    lowered = char.lower()
    if len(lowered) != 1:  # "İ".lower() is two characters: keep offsets one to one
        lowered = char
    return lowered.translate(_FOLD)


def _normalized_with_map(text: str, start: int, end: int) -> tuple[str, list[int]]:
    """``text[start:end]`` normalised, and for each of its characters the offset in ``text``
    of the character it came from (a run of whitespace maps to its first character)."""
    characters: list[str] = []
    offsets: list[int] = []
    in_space = False
    for offset in range(start, end):
        char = text[offset]
        if char.isspace():
            if not in_space:
                characters.append(" ")
                offsets.append(offset)
                in_space = True
            continue
        in_space = False
        characters.append(_fold_char(char))
        offsets.append(offset)
    return "".join(characters), offsets


def normalize_for_match(text: str) -> str:
    """``text`` as the normalised match compares it (see the module's docstring), with
    leading and trailing whitespace dropped."""
    return _normalized_with_map(text, 0, len(text))[0].strip(" ")


def locate_quote(text: str, quote: str, start: int = 0, end: int | None = None) -> Located | None:
    """Find ``quote`` in ``text[start:end]``.

    Args:
        text: the document's extracted text.
        quote: the quote as the model gave it.
        start, end: the span searched (a chunk); default the whole text.

    Returns:
        The first occurrence, exact if there is one, else normalised; None when the quote
        is empty or not there.
    """
    stop = len(text) if end is None else end
    needle = quote.strip()
    if not needle:
        return None
    found = text.find(needle, start, stop)
    if found >= 0:
        return Located(found, found + len(needle), "exact")
    target = normalize_for_match(needle)
    if not target:
        return None
    haystack, offsets = _normalized_with_map(text, start, stop)
    position = haystack.find(target)
    if position < 0:
        return None
    last = position + len(target) - 1
    return Located(offsets[position], offsets[last] + 1, "normalized")


def quote_matches(text: str, quote: str, start: int, end: int, match: str) -> bool:
    """Whether ``text[start:end]`` is ``quote`` under ``match``: ``exact`` requires
    ``text[start:end] == quote``; ``normalized`` requires equality after
    :func:`normalize_for_match`. Offsets out of range, or another ``match``, are False."""
    if not (0 <= start < end <= len(text)):
        return False
    piece = text[start:end]
    if match == "exact":
        return piece == quote
    if match == "normalized":
        return normalize_for_match(piece) == normalize_for_match(quote)
    return False
