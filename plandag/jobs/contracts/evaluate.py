"""Score contract records against CUAD-shaped labels (``plandag eval contracts``).

Records are the JSONL lines ``plandag extract contracts`` writes, one per input file
(``{"file", "status", "fields": {CATEGORY: {"values": [{"quote", ...}], "answer",
"rejected"}}, "errors"}``). Labels are lines shaped like the CUAD v1 labels shipped with the
shared contracts (The Atticus Project, CUAD v1, CC BY 4.0)::

    {"file": "NAME.txt", "labels": {CATEGORY: {"clauses": [TEXT, ...], "answer": TEXT}}}

A record is matched to a label line by its file's name (``Path(record["file"]).name``), else
by its stem (a record of ``NAME.pdf`` for labels of ``NAME.txt``).

Two scores per category, each as true positives, false positives and false negatives summed
over the labelled contracts, with precision, recall and F1:

- **Clauses** (every category): CUAD's own scoring, ``compute_precision_recall`` and
  ``get_jaccard`` of ``evaluate.py`` in the CUAD repository, ported rule for rule in
  :mod:`plandag.jobs.contracts.scoring` (:func:`~plandag.jobs.contracts.scoring.cuad_counts`):
  the predictions are the accepted quotes of the category (each distinct text once); a
  label joined from spans with ``<omitted>`` is those spans; a prediction matches a label
  at word Jaccard >= 0.5, and for ``Parties`` also when the label is a substring of it. In
  a contract where the category has labels, each label is a true positive when some
  prediction matches it and a false negative otherwise, and each prediction that matches no
  label is a false positive; where it has none, each prediction is a false positive.
  CUAD's AUPR and precision at 80 % / 90 % recall need a confidence for each prediction,
  which records do not carry: they are not computed (:data:`NOT_COMPUTED`).
- **Answers** (by category kind, :data:`ANSWER_KINDS`): the record's normalised ``answer``
  against the label's ``answer``. Dates: the label's M/D/YY parsed (:func:`parse_label_date`)
  against the record's ISO 8601 date; a label known only to the month or the year (CUAD's
  ``08/[]/2019``) against the record's ``YYYY-MM`` or ``YYYY``; ``perpetual`` against the
  record's ``perpetual`` or ``until terminated``. Parties: sets of names, the text before a
  role in parentheses, normalised for case and punctuation (:func:`party_names`). Governing
  law: the jurisdiction's name (:func:`jurisdiction`). Durations: a number of months (years
  as 12) or days (weeks as 7), or ``perpetual``. Document name: the text, normalised. The
  yes/no clause categories: "Yes" is the positive answer. A right answer is a true
  positive; a wrong one is both a false positive and a false negative; an answer where the
  label is empty (or "No") is a false positive; no answer where the label has one is a
  false negative. A label that does not parse in its kind is reported apart and not scored.

A label category that no record read has among its fields and that is not a CUAD category
(a misspelling, or a field the extraction was not asked for) is not scored: scoring it would
report a recall of 0 for a field nobody extracted. It is listed apart
(:class:`UnknownCategory`, with the nearest known name), as unparseable labels are.

A labelled contract without a usable record (none in the file, or one with status
``error``) is scored as if nothing was extracted from it, and listed. The rate of rejected
quotes is over every record read: quotes in ``rejected`` over those plus accepted ones.
"""

from __future__ import annotations

import dataclasses
import datetime
import difflib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from plandag.errors import InputError
from plandag.jobs.contracts.fields import CUAD_FIELDS
from plandag.jobs.contracts.scoring import (
    CUAD_IOU_THRESH,
    cuad_counts,
    jurisdiction,
    label_spans,
    normalise_name,
    parse_duration,
    parse_label_date,
    party_names,
)
from plandag.jobs.contracts.values import PERPETUAL, UNTIL_TERMINATED, InvalidValue, normalize_date

__all__ = [
    "ANSWER_KINDS",
    "CLAUSE_JACCARD",
    "NOT_COMPUTED",
    "CategoryScore",
    "ContractsEvaluation",
    "Counts",
    "UnknownCategory",
    "UnscoredLabel",
    "evaluate_contract_files",
    "evaluate_contracts",
    "read_labels",
    "read_records",
]

CLAUSE_JACCARD = CUAD_IOU_THRESH
"""A quote finds a labelled clause at this word Jaccard or more (CUAD's ``IOU_THRESH``)."""

NOT_COMPUTED = (
    "CUAD's AUPR and precision at 80% and 90% recall are not computed: they rank predictions "
    "by a confidence score, which contract records do not carry"
)
"""Why the evaluation gives CUAD's clause counts, precision and recall but not its
threshold-swept scores."""

AnswerKind = Literal["date", "parties", "jurisdiction", "duration", "text", "yes_no"]

ANSWER_KINDS: dict[str, AnswerKind] = {
    "Document Name": "text",
    "Parties": "parties",
    "Agreement Date": "date",
    "Effective Date": "date",
    "Expiration Date": "date",
    "Renewal Term": "duration",
    "Notice Period To Terminate Renewal": "duration",
    "Governing Law": "jurisdiction",
}
"""How the answer of a CUAD category is compared; every other labelled category whose
answers are "Yes"/"No" is ``yes_no``, and a category with other answers has no answer
score (only its clauses are scored)."""


@dataclasses.dataclass(slots=True)
class Counts:
    """True positives, false positives and false negatives, and the scores they give."""

    tp: int = 0
    fp: int = 0
    fn: int = 0

    def add(self, other: Counts) -> None:
        """Add ``other``'s counts to these."""
        self.tp += other.tp
        self.fp += other.fp
        self.fn += other.fn

    @property
    def precision(self) -> float | None:
        """tp / (tp + fp), or None when both are 0."""
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        """tp / (tp + fn), or None when both are 0."""
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None

    @property
    def f1(self) -> float | None:
        """The harmonic mean of precision and recall, or None when either is None."""
        precision, recall = self.precision, self.recall
        if precision is None or recall is None:
            return None
        return 2 * precision * recall / (precision + recall) if precision + recall else 0.0

    def as_dict(self) -> dict[str, Any]:
        """The counts and the scores (None where undefined)."""
        return {
            "tp": self.tp,
            "fp": self.fp,
            "fn": self.fn,
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
        }


@dataclasses.dataclass(slots=True)
class CategoryScore:
    """The scores of one category.

    Attributes:
        category: its name, as in the labels.
        clauses: CUAD's clause counts (labelled spans found, quotes matching no span or
            given where none is labelled, spans missed).
        labelled_clauses: labelled spans of the scored contracts (``<omitted>`` split).
        quotes: distinct accepted quotes of the category in the scored contracts (CUAD's
            predictions).
        answer_kind: how answers are compared, or None when they are not.
        answers: the answer counts (zero when ``answer_kind`` is None).
        unscored: labels of the category that did not parse in its kind.
        rejected: rejected quotes of the category in every record read.
    """

    category: str
    clauses: Counts = dataclasses.field(default_factory=Counts)
    labelled_clauses: int = 0
    quotes: int = 0
    answer_kind: AnswerKind | None = None
    answers: Counts = dataclasses.field(default_factory=Counts)
    unscored: int = 0
    rejected: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The category's scores as JSON-ready data."""
        return {
            "category": self.category,
            "labelled_clauses": self.labelled_clauses,
            "quotes": self.quotes,
            "clauses": self.clauses.as_dict(),
            "answer_kind": self.answer_kind,
            "answers": self.answers.as_dict() if self.answer_kind is not None else None,
            "unscored": self.unscored,
            "rejected": self.rejected,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class UnscoredLabel:
    """A label answer that does not parse in its category's kind (reported, not scored)."""

    file: str
    category: str
    answer: str


@dataclasses.dataclass(frozen=True, slots=True)
class UnknownCategory:
    """A label category no record has and no CUAD category is (listed, not scored).

    Attributes:
        category: its name, as in the labels.
        contracts: label lines that have it.
        clauses: its labelled clauses over those lines.
        nearest: the closest category name the records or CUAD have (difflib ratio >= 0.8),
            or None.
    """

    category: str
    contracts: int
    clauses: int
    nearest: str | None


@dataclasses.dataclass(slots=True)
class ContractsEvaluation:
    """The result of :func:`evaluate_contracts`.

    Attributes:
        categories: scores by category, in the labels' order.
        labelled: the labelled contracts, in the labels' order.
        missing: labelled contracts that have no record.
        errored: labelled contracts whose record has status ``error``, with its error codes.
        unlabelled: files of records that no label line names.
        unscored: label answers that did not parse in their kind.
        unknown_categories: label categories no record has and no CUAD category is, in the
            labels' order (not scored).
        invalid_records: lines of the records that are not records (line number, reason).
        accepted_quotes: accepted quotes in every record read.
        rejected_quotes: rejected quotes in every record read.
    """

    categories: dict[str, CategoryScore] = dataclasses.field(default_factory=dict)
    labelled: list[str] = dataclasses.field(default_factory=list)
    missing: list[str] = dataclasses.field(default_factory=list)
    errored: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    unlabelled: list[str] = dataclasses.field(default_factory=list)
    unscored: list[UnscoredLabel] = dataclasses.field(default_factory=list)
    unknown_categories: list[UnknownCategory] = dataclasses.field(default_factory=list)
    invalid_records: list[tuple[int, str]] = dataclasses.field(default_factory=list)
    accepted_quotes: int = 0
    rejected_quotes: int = 0

    @property
    def clauses(self) -> Counts:
        """The clause counts over every category (micro-averaged)."""
        total = Counts()
        for score in self.categories.values():
            total.add(score.clauses)
        return total

    @property
    def answers(self) -> Counts:
        """The answer counts over every category with an answer kind (micro-averaged)."""
        total = Counts()
        for score in self.categories.values():
            total.add(score.answers)
        return total

    @property
    def rejected_rate(self) -> float | None:
        """Rejected quotes over all quotes (accepted and rejected), or None when none."""
        quotes = self.accepted_quotes + self.rejected_quotes
        return self.rejected_quotes / quotes if quotes else None

    def as_dict(self) -> dict[str, Any]:
        """The whole evaluation as JSON-ready data (``plandag eval contracts --json``)."""
        return {
            "contracts": {
                "labelled": len(self.labelled),
                "scored_with_record": len(self.labelled) - len(self.missing) - len(self.errored),
                "missing": list(self.missing),
                "errored": [{"file": file, "codes": codes} for file, codes in self.errored.items()],
                "unlabelled": list(self.unlabelled),
            },
            "categories": [score.as_dict() for score in self.categories.values()],
            "clauses": self.clauses.as_dict(),
            "clause_scoring": {"rules": "CUAD evaluate.py", "not_computed": NOT_COMPUTED},
            "answers": self.answers.as_dict(),
            "unscored": [dataclasses.asdict(item) for item in self.unscored],
            "unknown_categories": [dataclasses.asdict(item) for item in self.unknown_categories],
            "quotes": {
                "accepted": self.accepted_quotes,
                "rejected": self.rejected_quotes,
                "rejected_rate": self.rejected_rate,
            },
            "invalid_records": [
                {"line": line, "reason": reason} for line, reason in self.invalid_records
            ],
        }


# -- answers ------------------------------------------------------------------------------

_Unparsed = object()
"""A label that does not parse in its kind."""


def _label_answer(kind: AnswerKind, text: str) -> Any:
    """The label's answer in ``kind``: None when it is empty (or "No"), :data:`_Unparsed`
    when it does not parse."""
    text = text.strip()
    if not text:
        return None
    if kind == "yes_no":
        return {"yes": True, "no": None}.get(text.lower(), _Unparsed)
    if kind == "date":
        parsed = parse_label_date(text)
        if parsed is not None:
            return parsed
        return _partial(text)
    if kind == "parties":
        return party_names(text) or _Unparsed
    if kind == "duration":
        if text.lower() == PERPETUAL:
            return PERPETUAL
        return parse_duration(text) or _Unparsed
    if kind == "jurisdiction":
        return jurisdiction(text) or _Unparsed
    return normalise_name(text) or _Unparsed


def _partial(text: str) -> Any:
    """A label date known only to the month or the year (``08/[]/2019``) or ``perpetual``,
    in the records' form (``2019-08``, ``2019``, ``perpetual``), else :data:`_Unparsed`."""
    try:
        form = normalize_date(text)
    except InvalidValue:
        return _Unparsed
    if form == UNTIL_TERMINATED:
        return PERPETUAL
    return form if len(form) < 10 else _Unparsed


def _record_answer(kind: AnswerKind, value: Any) -> Any:
    """The record's answer in ``kind``: None for no answer; a value that does not parse
    stays as given (it then equals no label)."""
    if value is None or value == "" or value == []:
        return None
    if kind == "yes_no":
        return True if isinstance(value, str) and value.strip().lower() == "yes" else None
    if kind in ("date", "duration") and value in (PERPETUAL, UNTIL_TERMINATED):
        return PERPETUAL  # CUAD labels a term that runs until terminated "perpetual"
    if kind == "date":
        try:
            return datetime.date.fromisoformat(str(value))
        except ValueError:
            return value
    if kind == "parties":
        if isinstance(value, str):
            return party_names(value)
        names = (item.get("name") if isinstance(item, Mapping) else item for item in value)
        return frozenset(normalise_name(name) for name in names if isinstance(name, str)) - {""}
    if kind == "duration":
        return parse_duration(value) or value
    if kind == "jurisdiction":
        return jurisdiction(value) if isinstance(value, str) else value
    return normalise_name(value) if isinstance(value, str) else value


def _answer_counts(kind: AnswerKind, label: Any, predicted: Any) -> Counts:
    """The counts of one answer: sets of parties count per name, others once."""
    if kind == "parties":
        expected = label or frozenset()
        given = predicted if isinstance(predicted, frozenset) else frozenset()
        return Counts(len(expected & given), len(given - expected), len(expected - given))
    if label is None:
        return Counts(fp=int(predicted is not None))
    if predicted is None:
        return Counts(fn=1)
    return Counts(tp=1) if predicted == label else Counts(fp=1, fn=1)


def _kind_of(category: str, label_rows: Iterable[Mapping[str, Any]]) -> AnswerKind | None:
    if category in ANSWER_KINDS:
        return ANSWER_KINDS[category]
    answers = {
        str(row["labels"][category].get("answer", "")).strip().lower()
        for row in label_rows
        if category in row["labels"]
    }
    return "yes_no" if answers and answers <= {"yes", "no", ""} else None


# -- reading --------------------------------------------------------------------------------


def read_labels(path: str | Path) -> list[dict[str, Any]]:
    """The label lines of a CUAD-shaped labels file (module docstring).

    Raises:
        InputError: the file cannot be read, a line is not such an object (the line is
            named), or two lines label the same file.
    """
    file = Path(path)
    try:
        lines = file.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"cannot read labels file {file}: {error}") from error
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(f"{file}:{number}: not JSON ({error.msg})") from error
        labels = row.get("labels") if isinstance(row, dict) else None
        if (
            not isinstance(row, dict)
            or not isinstance(row.get("file"), str)
            or not isinstance(labels, dict)
            or not all(
                isinstance(value, dict) and isinstance(value.get("clauses", []), list)
                for value in labels.values()
            )
        ):
            raise InputError(
                f'{file}:{number}: a label line is {{"file": NAME, "labels": {{CATEGORY: '
                '{"clauses": [TEXT, ...], "answer": TEXT}}} (as in cuad_labels.jsonl)'
            )
        if row["file"] in seen:
            raise InputError(f"{file}:{number}: {row['file']} is labelled twice; keep one line")
        seen.add(row["file"])
        rows.append(row)
    return rows


def read_records(path: str | Path) -> tuple[list[dict[str, Any]], list[tuple[int, str]]]:
    """The records of a JSONL records file, and the lines that are not records.

    Returns:
        ``(records, invalid)``: each JSON object with a string ``file``, in order; and
        ``(line number, reason)`` for every other non-blank line (the evaluation goes on).

    Raises:
        InputError: the file cannot be read (a CSV flattening cannot be scored: give the
            JSONL).
    """
    file = Path(path)
    if file.suffix.lower() == ".csv":
        raise InputError(
            f"{file} is CSV; eval contracts reads the JSONL records (extract contracts "
            "-o OUT.jsonl)"
        )
    try:
        lines = file.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"cannot read records file {file}: {error}") from error
    records: list[dict[str, Any]] = []
    invalid: list[tuple[int, str]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            invalid.append((number, f"not JSON ({error.msg})"))
            continue
        if not isinstance(record, dict) or not isinstance(record.get("file"), str):
            invalid.append((number, 'not a record (a JSON object with a "file")'))
            continue
        records.append(record)
    return records, invalid


# -- scoring --------------------------------------------------------------------------------


def _fields(record: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if record is None or record.get("status") == "error":
        return {}
    fields = record.get("fields")
    return fields if isinstance(fields, Mapping) else {}


def _quotes(field: Any, key: str) -> list[str]:
    items = field.get(key) if isinstance(field, Mapping) else None
    if not isinstance(items, list):
        return []
    return [
        item["quote"]
        for item in items
        if isinstance(item, Mapping) and isinstance(item.get("quote"), str)
    ]


def _match_records(
    records: list[Mapping[str, Any]], names: Iterable[str]
) -> tuple[dict[str, Mapping[str, Any]], list[str]]:
    """The record of each labelled name (by file name, else stem; the last record of a
    file wins), and the files of records no label names."""
    by_name: dict[str, Mapping[str, Any]] = {}
    by_stem: dict[str, Mapping[str, Any]] = {}
    for record in records:
        path = Path(str(record["file"]))
        by_name[path.name] = record
        by_stem[path.stem] = record
    matched: dict[str, Mapping[str, Any]] = {}
    names = list(names)
    for name in names:
        found = by_name.get(name) or by_stem.get(Path(name).stem)
        if found is not None:
            matched[name] = found
    labelled = set(names) | {Path(name).stem for name in names}
    unlabelled = [
        file
        for file in dict.fromkeys(str(record["file"]) for record in records)
        if Path(file).name not in labelled and Path(file).stem not in labelled
    ]
    return matched, unlabelled


def evaluate_contracts(
    records: Iterable[Mapping[str, Any]], labels: Iterable[Mapping[str, Any]]
) -> ContractsEvaluation:
    """Score contract records against label lines (module docstring for the rules).

    Args:
        records: contract records (``{"file", "status", "fields", "errors"}``).
        labels: label lines (``{"file", "labels": {CATEGORY: {"clauses", "answer"}}}``).

    Returns:
        The :class:`ContractsEvaluation`; with no label line, every count is 0 and every
        score None.
    """
    records = list(records)
    label_rows = list(labels)
    evaluation = ContractsEvaluation(labelled=[str(row["file"]) for row in label_rows])
    for row in label_rows:
        for category in row["labels"]:
            if category not in evaluation.categories:
                evaluation.categories[category] = CategoryScore(
                    category, answer_kind=_kind_of(category, label_rows)
                )
    evaluation.unknown_categories = _unknown_categories(records, label_rows)
    for unknown in evaluation.unknown_categories:
        del evaluation.categories[unknown.category]
    matched, evaluation.unlabelled = _match_records(records, evaluation.labelled)

    for record in records:
        for category, field in _fields(record).items():
            accepted, rejected = len(_quotes(field, "values")), len(_quotes(field, "rejected"))
            evaluation.accepted_quotes += accepted
            evaluation.rejected_quotes += rejected
            if category in evaluation.categories:
                evaluation.categories[category].rejected += rejected

    for row in label_rows:
        name = str(row["file"])
        labelled_record = matched.get(name)
        if labelled_record is None:
            evaluation.missing.append(name)
        elif labelled_record.get("status") == "error":
            errors = labelled_record.get("errors")
            evaluation.errored[name] = [
                str(error.get("code"))
                for error in (errors if isinstance(errors, list) else [])
                if isinstance(error, Mapping)
            ]
        fields = _fields(labelled_record)
        for category, label in row["labels"].items():
            if category not in evaluation.categories:
                continue  # an unknown category, listed apart
            score = evaluation.categories[category]
            field = fields.get(category)
            _score_clauses(score, [str(text) for text in label.get("clauses", [])], field)
            if score.answer_kind is None:
                continue
            expected = _label_answer(score.answer_kind, str(label.get("answer") or ""))
            if expected is _Unparsed:
                score.unscored += 1
                evaluation.unscored.append(UnscoredLabel(name, category, str(label["answer"])))
                continue
            answer = field.get("answer") if isinstance(field, Mapping) else None
            predicted = _record_answer(score.answer_kind, answer)
            score.answers.add(_answer_counts(score.answer_kind, expected, predicted))
    return evaluation


def _unknown_categories(
    records: list[Mapping[str, Any]], label_rows: list[Mapping[str, Any]]
) -> list[UnknownCategory]:
    """The label categories no record has among its fields (error records included) and
    that are not CUAD categories, with their counts and the nearest known name."""
    known: dict[str, None] = dict.fromkeys(spec.name for spec in CUAD_FIELDS)
    for record in records:
        fields = record.get("fields")
        if isinstance(fields, Mapping):
            known.update(dict.fromkeys(str(name) for name in fields))
    contracts: dict[str, int] = {}
    clauses: dict[str, int] = {}
    for row in label_rows:
        for category, label in row["labels"].items():
            if category in known:
                continue
            contracts[category] = contracts.get(category, 0) + 1
            texts = [str(text) for text in label.get("clauses", []) if str(text).strip()]
            clauses[category] = clauses.get(category, 0) + len(texts)
    unknown = []
    for category, count in contracts.items():
        near = difflib.get_close_matches(category, list(known), n=1, cutoff=0.8)
        unknown.append(UnknownCategory(category, count, clauses[category], next(iter(near), None)))
    return unknown


def _score_clauses(score: CategoryScore, clauses: list[str], field: Any) -> None:
    """Add one contract's clause counts for one category: CUAD's
    ``compute_precision_recall`` (:func:`~plandag.jobs.contracts.scoring.cuad_counts`)."""
    spans = label_spans(clauses)
    predictions = [quote for quote in dict.fromkeys(_quotes(field, "values")) if quote]
    score.labelled_clauses += len(spans)
    score.quotes += len(predictions)
    tp, fp, fn = cuad_counts(spans, predictions, substring=score.category == "Parties")
    score.clauses.add(Counts(tp=tp, fp=fp, fn=fn))


def evaluate_contract_files(
    records_path: str | Path, labels_path: str | Path
) -> ContractsEvaluation:
    """:func:`evaluate_contracts` on a JSONL records file and a labels file; lines of the
    records that are not records are listed in ``invalid_records``.

    Raises:
        InputError: a file cannot be read, or the labels are malformed
            (:func:`read_labels`, :func:`read_records`).
    """
    labels = read_labels(labels_path)
    records, invalid = read_records(records_path)
    evaluation = evaluate_contracts(records, labels)
    evaluation.invalid_records = invalid
    return evaluation
