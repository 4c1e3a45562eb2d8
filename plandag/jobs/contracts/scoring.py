"""The matching rules of :mod:`plandag.jobs.contracts.evaluate`: CUAD's word Jaccard, and how
label answers (CUAD v1, The Atticus Project, CC BY 4.0) and record answers are normalised
before they are compared."""

from __future__ import annotations

import datetime
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

__all__ = [
    "jurisdiction",
    "normalise_name",
    "parse_duration",
    "parse_label_date",
    "party_names",
    "word_jaccard",
]

_REMOVED = str.maketrans({".": "", ",": "", ";": "", ":": "", "/": " "})


def word_jaccard(prediction: str, label: str) -> float:
    """Word Jaccard of two texts by CUAD's rule: drop ``. , ; :``, lowercase, split on
    whitespace and ``/``; the size of the words' intersection over their union.

    Returns:
        A number in [0, 1]; 0.0 when both texts have no word.
    """
    left = set(prediction.translate(_REMOVED).lower().split())
    right = set(label.translate(_REMOVED).lower().split())
    union = left | right
    return len(left & right) / len(union) if union else 0.0


_LABEL_DATE = re.compile(r"(\d{1,2})/(\d{1,2})/(\d{2}|\d{4})")


def parse_label_date(text: str) -> datetime.date | None:
    """The date a CUAD label writes as M/D/YY (or M/D/YYYY).

    Two-digit years follow POSIX ``strptime`` ``%y``: 69-99 are 1969-1999, 00-68 are
    2000-2068.

    Returns:
        The date, or None when ``text`` is not such a date ("perpetual", "08/[]/2019",
        "2/30/20").
    """
    found = _LABEL_DATE.fullmatch(text.strip())
    if found is None:
        return None
    month, day, year = (int(part) for part in found.groups())
    if len(found.group(3)) == 2:
        year += 1900 if year >= 69 else 2000
    try:
        return datetime.date(year, month, day)
    except ValueError:
        return None


def normalise_name(text: str) -> str:
    """``text`` lowercased, with punctuation (Unicode category P) and symbols dropped and
    whitespace collapsed: ``"Aduro Biotech, Inc."`` and ``"aduro biotech inc"`` are equal."""
    kept = "".join(
        " " if character.isspace() else character
        for character in unicodedata.normalize("NFKC", text).lower()
        if not unicodedata.category(character).startswith(("P", "S"))
    )
    return " ".join(kept.split())


_COLLECTIVE = re.compile(r"\b(each|individually|collectively)\b", re.IGNORECASE)


def party_names(answer: str) -> frozenset[str]:
    """The parties of a CUAD ``Parties`` answer, as normalised names.

    The answer lists parties separated by ``;``, each as a name followed by its role in
    parentheses (``FreeCook ("Client"); Mitchell's Web Advance, PLC ("Company")``): the name
    is the text before the parenthesis, or the whole part when there is none. A part whose
    parenthesis defines the parties collectively (``(each "Party," collectively
    "Parties")``) names no party of its own and is left out.

    Returns:
        The names, each through :func:`normalise_name`; empty ones are left out.
    """
    names = set()
    for part in answer.split(";"):
        name, _, role = part.partition("(")
        if role and _COLLECTIVE.search(role):
            continue
        normalised = normalise_name(name)
        if normalised:
            names.add(normalised)
    return frozenset(names)


_JURISDICTION_PREFIX = re.compile(r"^(?:(?:the|laws?|of|state|commonwealth|province)\s+)+")
_JURISDICTION_SUFFIX = re.compile(r"\s+laws?$")


def jurisdiction(text: str) -> str:
    """The jurisdiction named by a governing-law answer, normalised: :func:`normalise_name`
    then leading "the", "laws of", "state of", "commonwealth of", "province of" and a
    trailing "law" dropped (``"the State of New York"`` and ``"New York"`` are equal)."""
    name = _JURISDICTION_PREFIX.sub("", normalise_name(text))
    return _JURISDICTION_SUFFIX.sub("", name)


_NUMBER_WORDS = {
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
}
_DURATION = re.compile(
    r"\b(\d+|" + "|".join(_NUMBER_WORDS) + r")[\s-]*(year|month|week|day)s?\b", re.IGNORECASE
)
_DURATION_UNITS = {"year": ("months", 12), "month": ("months", 1), "week": ("days", 7)}


def parse_duration(value: Any) -> tuple[str, int] | None:
    """A duration as ``("months", n)`` or ``("days", n)``.

    Args:
        value: a label's text (the first "N year(s)/month(s)/week(s)/day(s)" in it, N in
            digits or a word up to twelve), or a record's ``{"months": n}`` / ``{"days": n}``.

    Returns:
        The unit and the count (years as 12 months, weeks as 7 days), or None when ``value``
        holds no duration ("perpetual").
    """
    if isinstance(value, Mapping):
        for unit in ("months", "days"):
            count = value.get(unit)
            if isinstance(count, int) and not isinstance(count, bool):
                return unit, count
        return None
    if not isinstance(value, str):
        return None
    found = _DURATION.search(value)
    if found is None:
        return None
    number, unit = found.group(1).lower(), found.group(2).lower()
    count = _NUMBER_WORDS[number] if number in _NUMBER_WORDS else int(number)
    name, factor = _DURATION_UNITS.get(unit, ("days", 1))
    return name, count * factor
