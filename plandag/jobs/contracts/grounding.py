"""A value is accepted only when it can be read from its own quote, and a clause only on a
quote long enough to be evidence.

The quote here is the document's text at the offsets plandag found
(:func:`~plandag.jobs.contracts.evidence.locate_quote`), never the model's copy of it.
:func:`value_not_in_quote` says why a normalised value (:mod:`~plandag.jobs.contracts.values`)
is not held by its quote, by the field's type:

* ``date``: some date written in the quote, normalised the same way, is the value. Dates in
  the quote are read in every form :func:`~plandag.jobs.contracts.values.normalize_date`
  reads (``April 1, 2019``, ``the 1st day of April, 2019``, ``1º de abril de 2019``, ISO,
  numeric ``M/D/Y`` and ``D/M/Y``: an ambiguous one counts in both readings, ``August __,
  2019``, ``08/[]/2019``...); a full date also holds its month (``YYYY-MM``) and year
  (``YYYY``). ``"perpetual"`` needs a word of it in the quote (perpetual, perpetuity,
  indefinite, indefinitely, no fixed term, perpétuo, indeterminado); ``"until terminated"``
  needs ``until`` (or ``até``) followed within the sentence by a form of ``terminate``
  (``rescisão``, ``rescindido``...).
* ``duration``: some duration written in the quote (``one (1) year``, ``30 days``, ``6
  meses``), normalised the same way, is the value; ``"perpetual"`` and ``"until
  terminated"`` as for dates.
* ``number``: some number written in the quote is the value: ``1,250.50``, ``1.250,50``,
  ``$5,000``, ``2%``; a number whose separators read two ways (``1.250``) counts in both;
  number words up to twelve and the round ones (``thirty``, ``noventa``) count too.
* ``parties``: every party's name occurs in the quote; ``text``: the value occurs in it.
  Both compared as words (:func:`fold_words`): case, accents and whitespace folded, and
  punctuation read as a space, so ``Intellisense Solutions Inc`` is in ``Intellisense
  Solutions, Inc.``; a value must match whole words (``Cal`` is not in ``California``).
* ``yes_no`` and ``clause``: the quote is the evidence; it must pass the floor
  (:func:`clause_quote_too_short`).

A value that cannot be normalised is kept only when its quote holds it as given
(:func:`raw_not_in_quote`): text occurs in the quote as for ``text``; a number is one of
the quote's numbers; no value (null) claims nothing and is kept.

**The floor** (:data:`MIN_CLAUSE_WORDS`, :data:`MIN_CLAUSE_CHARACTERS`): a quote for a
``clause`` or ``yes_no`` field with fewer than 5 words or 25 characters of text, numbers
and section marks not counted (:func:`plandag.jobs.words.quote_words`), is not evidence of a
clause: ``"the Company"`` or ``"Section 12.3"`` occur in every contract. Names, dates and
other short values are not subject to it.
"""

from __future__ import annotations

import contextlib
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any, Final

from plandag.jobs.contracts.values import (
    _BLANK,
    _DURATION,
    _WORD_NUMBERS,
    PERPETUAL,
    UNTIL_TERMINATED,
    InvalidValue,
    normalize_date,
    normalize_duration,
    normalize_number,
)
from plandag.jobs.words import quote_text_characters, quote_words

__all__ = [
    "CLAUSE_FLOOR_TYPES",
    "MIN_CLAUSE_CHARACTERS",
    "MIN_CLAUSE_WORDS",
    "clause_quote_too_short",
    "dates_in",
    "durations_in",
    "fold_words",
    "numbers_in",
    "raw_not_in_quote",
    "text_in_quote",
    "value_not_in_quote",
]

MIN_CLAUSE_WORDS: Final = 5
"""Words a clause quote needs at least (numbers and section marks not counted)."""

MIN_CLAUSE_CHARACTERS: Final = 25
"""Characters of text a clause quote needs at least (its words joined by single spaces)."""

CLAUSE_FLOOR_TYPES: Final = frozenset({"clause", "yes_no"})
"""The field types whose quotes must pass the floor: a clause's passages, and the passage a
yes/no answer rests on."""


def clause_quote_too_short(quote: str) -> str | None:
    """Why ``quote`` is too short to be a clause's evidence, or None when it passes the floor
    (:data:`MIN_CLAUSE_WORDS` words and :data:`MIN_CLAUSE_CHARACTERS` characters of text)."""
    words = len(quote_words(quote))
    characters = quote_text_characters(quote)
    if words >= MIN_CLAUSE_WORDS and characters >= MIN_CLAUSE_CHARACTERS:
        return None
    return (
        f"{words} word(s) and {characters} character(s) of text; a clause's quote needs at "
        f"least {MIN_CLAUSE_WORDS} words and {MIN_CLAUSE_CHARACTERS} characters (numbers and "
        "section marks not counted): quote the sentence that makes the clause"
    )


def fold_words(text: str) -> str:
    """``text`` as words are compared: accents dropped (NFKD, combining marks removed), case
    folded, every character that is not a letter or a digit a space, runs of spaces one,
    trimmed: ``"São  Paulo/SP"`` → ``"sao paulo sp"``."""
    decomposed = unicodedata.normalize("NFKD", text)
    kept = "".join(
        character if character.isalnum() else " "
        for character in decomposed.casefold()
        if not unicodedata.combining(character)
    )
    return " ".join(kept.split())


def text_in_quote(value: str, quote: str) -> bool:
    """Whether ``value`` occurs in ``quote`` as whole words (:func:`fold_words` on both);
    a value with no letter or digit occurs nowhere."""
    wanted = fold_words(value)
    return bool(wanted) and f" {wanted} " in f" {fold_words(quote)} "


# -- dates ----------------------------------------------------------------------------------

_MONTH_WORD = r"[^\W\d_]{3,9}\.?"
_DATE_PATTERNS: Final = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        r"\b\d{4}-\d{1,2}-\d{1,2}\b",
        rf"\b(?:the\s+)?\d{{1,2}}(?:st|nd|rd|th|º|°|o)?\s+(?:day\s+of\s+|de\s+|of\s+)?"
        rf"{_MONTH_WORD},?\s+(?:de\s+)?\d{{4}}\b",
        rf"\b{_MONTH_WORD}\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s*\d{{4}}\b",
        rf"\b{_MONTH_WORD}(?:\s+{_BLANK})?,?\s+(?:de\s+)?\d{{4}}\b",
        rf"{_BLANK}\s+(?:day\s+of\s+|de\s+|of\s+)?{_MONTH_WORD},?\s+(?:de\s+)?\d{{4}}\b",
        rf"(?<![\d.])(?:\d{{1,2}}|{_BLANK})[/.-](?:\d{{1,2}}|{_BLANK})[/.-](?:\d{{4}}|\d{{2}})(?!\d)",
        r"\b\d{4}-\d{1,2}\b",
        r"(?<![\d.,/-])(?:1[89]|20)\d\d(?![\d/-])",
    )
)
_NUMERIC: Final = re.compile(r"(\d{1,2})[/.-](\d{1,2})[/.-](\d{4}|\d{2})")
_PERPETUAL_MARK: Final = re.compile(
    r"\b(?:perpetual(?:ly)?|perpetuity|indefinite(?:ly)?|perp[ée]tu[oa]s?|"
    r"indeterminad[oa]|no\s+fixed\s+(?:term|end))\b",
    re.IGNORECASE,
)
_UNTIL_TERMINATED_MARK: Final = re.compile(
    r"\b(?:until|till)\b[^.;]{0,120}?\bterminat|"
    r"\bat[ée]\b[^.;]{0,120}?\b(?:rescis[ãa]o|rescindid|resilid|denunciad|t[ée]rmino)",
    re.IGNORECASE,
)


def _ends_in(text: str) -> set[str]:
    """:data:`~plandag.jobs.contracts.values.PERPETUAL` and
    :data:`~plandag.jobs.contracts.values.UNTIL_TERMINATED` when ``text`` says so."""
    found = set()
    if _PERPETUAL_MARK.search(text):
        found.add(PERPETUAL)
    if _UNTIL_TERMINATED_MARK.search(text):
        found.add(UNTIL_TERMINATED)
    return found


def _iso(year: int, month: int, day: int) -> str | None:
    try:
        return normalize_date(f"{year:04d}-{month:02d}-{day:02d}")
    except InvalidValue:
        return None


def dates_in(text: str) -> set[str]:
    """Every date written in ``text``, normalised (``YYYY-MM-DD``, ``YYYY-MM``, ``YYYY``),
    each full date with its month and year, an ambiguous numeric date in both readings, and
    ``"perpetual"`` / ``"until terminated"`` when the text says so."""
    flat = " ".join(text.split())
    found: set[str] = set()
    for pattern in _DATE_PATTERNS:
        for match in pattern.finditer(flat):
            written = match.group(0)
            numeric = _NUMERIC.fullmatch(written)
            if numeric is not None:  # both readings; normalize_date refuses ambiguous ones
                first, second, year = (int(part) for part in numeric.groups())
                if len(numeric.group(3)) == 2:
                    year += 2000 if year < 69 else 1900
                readings = {_iso(year, first, second), _iso(year, second, first)}
                found.update(reading for reading in readings if reading is not None)
                continue
            try:
                found.add(normalize_date(written))
            except InvalidValue:
                continue
    for date in list(found):
        if re.fullmatch(r"\d{4}-\d\d(?:-\d\d)?", date):
            found.update((date[:7], date[:4]))
    return found | _ends_in(flat)


# -- durations and numbers ----------------------------------------------------------------


def durations_in(text: str) -> list[dict[str, int] | str]:
    """Every duration written in ``text``, normalised (``{"months": n}`` or ``{"days": n}``),
    and ``"perpetual"`` / ``"until terminated"`` when the text says so."""
    flat = " ".join(text.lower().split())
    found: list[dict[str, int] | str] = []
    for match in _DURATION.finditer(flat):
        try:
            found.append(normalize_duration(match.group(0)))
        except InvalidValue:
            continue
    found.extend(sorted(_ends_in(flat)))
    return found


_NUMBER_TOKEN: Final = re.compile(r"-?\d[\d.,]*\d|-?\d")
_GROUNDING_WORDS: Final = {
    word: number
    for word, number in _WORD_NUMBERS.items()
    if word not in ("a", "an", "um", "uma")  # articles, not numbers, in a quote
}


def numbers_in(text: str) -> list[float]:
    """Every number written in ``text``: digits with their separators, read both ways when
    they allow two readings (``1.250`` is 1.25 or 1250), and number words
    (``thirty``, ``noventa``; not the articles ``a``, ``an``, ``um``, ``uma``)."""
    found: list[float] = []
    for match in _NUMBER_TOKEN.finditer(text):
        token = match.group(0)
        readings = {token.replace(",", ""), token.replace(".", "").replace(",", ".")}
        with contextlib.suppress(InvalidValue):
            readings.add(str(normalize_number(token)))
        for reading in readings:
            try:
                found.append(float(reading))
            except ValueError:
                continue
    for word in re.findall(r"[^\W\d_]+(?:-[^\W\d_]+)?", text.lower()):
        if word in _GROUNDING_WORDS:
            found.append(float(_GROUNDING_WORDS[word]))
    return found


def _number_in(number: float, quote: str) -> bool:
    return any(math.isclose(number, found, rel_tol=1e-9) for found in numbers_in(quote))


# -- values -----------------------------------------------------------------------------------


def _shown(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 60 else text[:59] + "…"


def value_not_in_quote(kind: str, value: Any, quote: str) -> str | None:
    """Why the normalised ``value`` of a field of type ``kind`` cannot be read from
    ``quote`` (see the module's docstring), or None when it can.

    Args:
        kind: the field's type (:data:`~plandag.jobs.contracts.fields.FIELD_TYPES`).
        value: the value as :func:`~plandag.jobs.contracts.values.normalize_value` gave it
            (a party list of one is its one party).
        quote: the document's text at the quote's offsets.

    Returns:
        A sentence for the rejected quote's ``detail``, or None.
    """
    if kind in ("clause", "yes_no"):
        return None
    if kind == "date":
        if value in dates_in(quote):
            return None
        return f"the quote does not state the date {_shown(value)!r}"
    if kind == "duration":
        if value in durations_in(quote):
            return None
        return f"the quote does not state the duration {_shown(value)!r}"
    if kind == "number":
        if isinstance(value, int | float) and _number_in(float(value), quote):
            return None
        return f"the quote does not state the number {_shown(value)!r}"
    if kind == "parties":
        parties = value if isinstance(value, list) else [value]
        missing = [
            str(party.get("name"))
            for party in parties
            if not isinstance(party, Mapping) or not text_in_quote(str(party.get("name")), quote)
        ]
        if not missing:
            return None
        return f"the quote does not name {', '.join(map(repr, missing))}"
    if isinstance(value, str) and text_in_quote(value, quote):
        return None
    return f"the quote does not hold {_shown(value)!r}"


def _leaves(value: Any) -> Iterable[Any]:
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    elif value is not None:
        yield value


def raw_not_in_quote(value: Any, quote: str) -> str | None:
    """Why a value that could not be normalised is not held by ``quote`` as given, or None
    when it is: no value (None) claims nothing; text must occur in the quote as words
    (:func:`text_in_quote`); a number must be one of its numbers; every text and number in
    a mapping or a list must. ``True``/``False`` are never held."""
    for leaf in _leaves(value):
        if isinstance(leaf, bool):
            return f"{leaf!r} is not read from a quote"
        if isinstance(leaf, int | float):
            if not _number_in(float(leaf), quote):
                return f"the quote does not state the number {_shown(leaf)!r}"
        elif not text_in_quote(str(leaf), quote):
            return f"the quote does not hold {_shown(leaf)!r}"
    return None
