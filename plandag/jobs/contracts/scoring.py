"""The matching rules of :mod:`plandag.jobs.contracts.evaluate`: CUAD's clause scoring, and how
label answers (CUAD v1, The Atticus Project, CC BY 4.0) and record answers are normalised
before they are compared.

**CUAD's clause scoring** is that of ``evaluate.py`` in the CUAD repository
(github.com/TheAtticusProject/cuad; Hendrycks et al., NeurIPS 2021), ported rule for rule:

* :func:`cuad_jaccard` is its ``get_jaccard``: remove ``.``, ``,``, ``;`` and ``:``,
  lowercase, turn ``/`` into a space, split on single spaces (``str.split(" ")``: two spaces
  give an empty word, a line end stays inside a word) into sets of words; the size of their
  intersection over the size of their union.
* :func:`cuad_match` is its match: Jaccard >= :data:`CUAD_IOU_THRESH` (``IOU_THRESH``), and
  for the ``Parties`` category also when the label is a substring of the prediction (case
  and spacing as written).
* :func:`cuad_counts` is its ``compute_precision_recall`` for one contract and category:
  predictions are the distinct non-empty texts; with no label, each prediction is a false
  positive; with labels, each label is a true positive when some prediction matches it and
  a false negative otherwise, and each prediction that matches no label is a false
  positive.
* :func:`label_spans`: a label that CUAD's ``master_clauses.csv`` joins from several
  spans with ``<omitted>`` is those spans, as they are separate answers in CUAD's own
  question-answering data.

CUAD's AUPR and precision at 80 % and 90 % recall sweep a confidence threshold over the
predictions; contract records carry no confidence, so they are not computed.
"""

from __future__ import annotations

import datetime
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

__all__ = [
    "CUAD_IOU_THRESH",
    "cuad_counts",
    "cuad_jaccard",
    "cuad_match",
    "jurisdiction",
    "label_spans",
    "normalise_name",
    "parse_duration",
    "parse_label_date",
    "party_names",
]

CUAD_IOU_THRESH = 0.5
"""A prediction matches a label at this word Jaccard or more (CUAD's ``IOU_THRESH``)."""

_CUAD_REMOVED = str.maketrans({".": "", ",": "", ";": "", ":": ""})


def cuad_jaccard(label: str, prediction: str) -> float:
    """CUAD's ``get_jaccard(gt, pred)`` (see the module's docstring).

    Returns:
        A number in [0, 1]; two texts that are both empty give 1.0, as in CUAD (each
        splits into the one empty word).
    """
    gt = label.translate(_CUAD_REMOVED).lower().replace("/", " ")
    pred = prediction.translate(_CUAD_REMOVED).lower().replace("/", " ")
    gt_words, pred_words = set(gt.split(" ")), set(pred.split(" "))
    return len(gt_words & pred_words) / len(gt_words | pred_words)


def cuad_match(label: str, prediction: str, *, substring: bool = False) -> bool:
    """Whether ``prediction`` matches ``label`` by CUAD's rule: :func:`cuad_jaccard` >=
    :data:`CUAD_IOU_THRESH`, or, with ``substring`` (the ``Parties`` category), ``label``
    occurring in ``prediction``."""
    if substring and label in prediction:
        return True
    return cuad_jaccard(label, prediction) >= CUAD_IOU_THRESH


def label_spans(clauses: list[str]) -> list[str]:
    """The labelled spans of a category's clauses: each clause split at ``<omitted>``, every
    span stripped, empty ones left out."""
    spans = []
    for clause in clauses:
        for span in clause.split("<omitted>"):
            if span.strip():
                spans.append(span.strip())
    return spans


def cuad_counts(
    labels: list[str], predictions: list[str], *, substring: bool = False
) -> tuple[int, int, int]:
    """CUAD's ``compute_precision_recall`` counts for one contract and one category.

    Args:
        labels: the labelled spans (:func:`label_spans`).
        predictions: the predicted texts (the accepted quotes); repeated and empty ones
            count once and never.
        substring: the ``Parties`` rule (:func:`cuad_match`).

    Returns:
        ``(tp, fp, fn)``.
    """
    preds = [text for text in dict.fromkeys(predictions) if text]
    if not labels:
        return 0, len(preds), 0
    tp = sum(
        any(cuad_match(label, pred, substring=substring) for pred in preds) for label in labels
    )
    fp = sum(
        not any(cuad_match(label, pred, substring=substring) for label in labels) for pred in preds
    )
    return tp, fp, len(labels) - tp


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
