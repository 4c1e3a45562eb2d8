"""CUAD's clause scoring written out again, apart from plandag, to check ``plandag eval
contracts`` against.

The rules are those of ``evaluate.py`` in the CUAD repository (github.com/TheAtticusProject/
cuad; Hendrycks et al., NeurIPS 2021), restated here from their description, in CUAD's own
frame: one question per contract and category (keyed ``"FILE__CATEGORY"``), whose answers
are the labelled texts and whose predictions are the predicted texts.

* Word Jaccard: strip ``.``, ``,``, ``;`` and ``:``; lowercase; ``/`` becomes a space; split
  on single spaces into sets; intersection over union.
* A prediction matches an answer at Jaccard >= 0.5, or, when the question's key names
  ``Parties``, when the answer occurs in the prediction.
* A question with no answer: each prediction is a false positive. Otherwise each answer is
  a true positive when a prediction matches it, else a false negative, and each prediction
  that matches no answer is a false positive.

Labels joined with ``<omitted>`` (as CUAD's ``master_clauses.csv`` writes several spans of
one answer) are split into their spans, which CUAD's question-answering data lists as
separate answers. Nothing here imports plandag.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

THRESHOLD = 0.5


def jaccard(answer: str, prediction: str) -> float:
    """Word Jaccard of two texts under CUAD's normalisation."""

    def words(text: str) -> set[str]:
        for mark in ".,;:":
            text = text.replace(mark, "")
        return set(text.lower().replace("/", " ").split(" "))

    left, right = words(answer), words(prediction)
    return len(left & right) / len(left | right)


def matches(answer: str, prediction: str, key: str) -> bool:
    """Whether ``prediction`` matches ``answer`` for the question ``key``."""
    if "Parties" in key and answer in prediction:
        return True
    return jaccard(answer, prediction) >= THRESHOLD


def count(
    answers_by_key: Mapping[str, list[str]], predictions_by_key: Mapping[str, list[str]]
) -> tuple[int, int, int]:
    """``(tp, fp, fn)`` over every question of ``answers_by_key``."""
    tp = fp = fn = 0
    for key, answers in answers_by_key.items():
        predictions = predictions_by_key.get(key, [])
        if not answers:
            fp += len(predictions)
            continue
        found = [any(matches(a, p, key) for p in predictions) for a in answers]
        tp += sum(found)
        fn += len(found) - sum(found)
        fp += sum(not any(matches(a, p, key) for a in answers) for p in predictions)
    return tp, fp, fn


def _record_for(records: Iterable[Mapping[str, Any]], name: str) -> Mapping[str, Any] | None:
    found = None
    for record in records:
        path = Path(str(record.get("file", "")))
        if path.name == name or path.stem == Path(name).stem:
            found = record
    return found


def questions(
    records: Iterable[Mapping[str, Any]], label_rows: Iterable[Mapping[str, Any]]
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """The answers and predictions of every question, from contract records and label
    lines: the answers are the labelled spans; the predictions the distinct non-empty
    quotes of the category's accepted values (none for a missing or an error record)."""
    records = list(records)
    answers: dict[str, list[str]] = {}
    predictions: dict[str, list[str]] = {}
    for row in label_rows:
        record = _record_for(records, str(row["file"]))
        fields = {} if record is None or record.get("status") == "error" else record.get("fields")
        for category, label in row["labels"].items():
            key = f"{row['file']}__{category}"
            answers[key] = [
                span.strip()
                for clause in label.get("clauses", [])
                for span in str(clause).split("<omitted>")
                if span.strip()
            ]
            field = (fields or {}).get(category) or {}
            quotes = [value.get("quote") for value in field.get("values") or []]
            predictions[key] = [q for q in dict.fromkeys(quotes) if isinstance(q, str) and q]
    return answers, predictions


def reference_counts(
    records: Iterable[Mapping[str, Any]], label_rows: Iterable[Mapping[str, Any]]
) -> tuple[int, int, int]:
    """``(tp, fp, fn)`` of contract records against label lines by CUAD's scoring."""
    answers, predictions = questions(records, label_rows)
    return count(answers, predictions)
