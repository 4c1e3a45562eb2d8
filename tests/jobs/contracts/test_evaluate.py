"""Scoring contract records against CUAD-shaped labels: a small labelled example whose
precision and recall are computed by hand below, the edge cases, and the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from plandag.cli.commands import launcher
from plandag.errors import InputError
from plandag.jobs.contracts.evaluate import (
    evaluate_contract_files,
    evaluate_contracts,
    read_labels,
    read_records,
)

# -- the example ------------------------------------------------------------------------------


def _label(clauses: list[str], answer: str) -> dict[str, Any]:
    return {"clauses": clauses, "answer": answer}


def _field(quotes: list[str], answer: Any = None, rejected: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "type": "text",
        "values": [
            {"value": quote, "quote": quote, "start": 0, "end": len(quote)} for quote in quotes
        ],
        "answer": answer,
        "rejected": [{"quote": quote, "reason": "quote_not_found"} for quote in rejected],
    }


LABELS = [
    {
        "file": "alpha.txt",
        "labels": {
            "Governing Law": _label(
                ["This Agreement shall be governed by the laws of the State of New York."],
                "New York",
            ),
            "Anti-Assignment": _label(
                [
                    "Neither party may assign this Agreement without consent.",
                    "Any assignment in violation is void.",
                ],
                "Yes",
            ),
            "Agreement Date": _label(["January 11, 2018"], "1/11/18"),
            "Parties": _label(
                ["FreeCook", "Mitchell's Web Advance, PLC"],
                'FreeCook ("Client"); Mitchell\'s Web Advance, PLC ("Company")',
            ),
            "Expiration Date": _label([], "perpetual"),
            "Cap On Liability": _label([], "No"),
        },
    },
    {
        "file": "beta.txt",
        "labels": {
            "Governing Law": _label(["governed by the laws of the State of Delaware"], "Delaware"),
            "Anti-Assignment": _label([], "No"),
            "Agreement Date": _label(["August __, 2019"], "08/[]/2019"),
            "Parties": _label(
                ["Acme Corp.", "Beta LLC"], 'Acme Corp. ("Seller"); Beta LLC ("Buyer")'
            ),
            "Expiration Date": _label(["until December 31, 2020"], "12/31/20"),
            "Cap On Liability": _label(["liability shall not exceed the fees paid"], "Yes"),
        },
    },
    {
        "file": "gamma.txt",
        "labels": {"Anti-Assignment": _label(["No assignment without consent."], "Yes")},
    },
    {
        "file": "delta.txt",
        "labels": {"Governing Law": _label(["laws of California"], "California")},
    },
]

RECORDS = [
    {
        "file": "/data/alpha.txt",
        "status": "ok",
        "fields": {
            "Governing Law": _field(
                ["This Agreement shall be governed by the laws of the State of New York"],
                "State of New York",
            ),
            "Anti-Assignment": _field(
                ["Neither party may assign this Agreement", "The Supplier shall deliver the goods"],
                "Yes",
                rejected=("Assignment is prohibited",),
            ),
            "Agreement Date": _field(["January 11, 2018"], "2018-01-11"),
            "Parties": _field(
                ["FreeCook", "Mitchell's Web Advance, PLC"],
                [
                    {"name": "FreeCook", "role": "Client"},
                    {"name": "Mitchell's Web Advance PLC", "role": "Company"},
                ],
            ),
            "Expiration Date": _field(["shall continue indefinitely"], "2030-01-01"),
        },
        "errors": [],
    },
    {
        "file": "/data/beta.txt",
        "status": "check_failed",
        "fields": {
            "Governing Law": _field(
                ["This Agreement is governed by the laws of the State of Delaware"], "Delaware"
            ),
            "Anti-Assignment": _field([], "No"),
            "Agreement Date": _field(["August __, 2019"], None),
            "Parties": _field(
                [],
                [{"name": "ACME Corp", "role": "Seller"}, {"name": "Gamma Inc", "role": "Agent"}],
            ),
            "Expiration Date": _field(["until December 31, 2021"], "2021-12-31"),
            "Cap On Liability": _field(
                ["In no event shall liability exceed the fees paid under this Agreement"],
                "Yes",
                rejected=(
                    "Liability is capped at $1",
                    "Liability is unlimited",
                ),
            ),
        },
        "errors": [],
    },
    {
        "file": "contracts/delta.pdf",
        "status": "error",
        "fields": {},
        "errors": [{"code": "encrypted_pdf", "message": "the PDF is encrypted"}],
    },
    {
        "file": "extra/epsilon.txt",
        "status": "ok",
        "fields": {"Governing Law": _field(["x"], "x", rejected=("y",))},
        "errors": [],
    },
]

# Worked out by hand (CUAD's rule: a labelled clause is found by a quote with word Jaccard
# >= 0.5; tp = labelled clauses found, fp = quotes matching no labelled clause, or any quote
# where none is labelled, fn = labelled clauses not found):
#
# Clauses
#   Governing Law     alpha: same words, J = 1.0 -> tp 1.
#                     beta: label words {governed by the laws of state delaware} (7), quote adds
#                     {this agreement is} (10): J = 7/10 = 0.7 -> tp 1.
#                     delta: error record -> fn 1.                      tp 2 fp 0 fn 1
#   Anti-Assignment   alpha: "Neither party may assign this Agreement" vs clause 1: 6 of 8
#                     words, J = 0.75 -> found; clause 2 found by no quote -> fn 1; "The
#                     Supplier shall deliver the goods" matches nothing -> fp 1.
#                     beta: no clause, no quote. gamma: no record -> fn 1.  tp 1 fp 1 fn 2
#   Agreement Date    alpha J = 1.0, beta J = 1.0.                         tp 2 fp 0 fn 0
#   Parties           alpha: both clauses quoted -> tp 2; beta: no quote -> fn 2.
#                                                                          tp 2 fp 0 fn 2
#   Expiration Date   alpha: no clause, one quote -> fp 1; beta: {until december 31 2021}
#                     vs {until december 31 2020}: J = 3/5 = 0.6 -> tp 1.  tp 1 fp 1 fn 0
#   Cap On Liability  beta: label 7 words, quote 12 words, 6 shared: J = 6/13 = 0.46 < 0.5
#                     -> fn 1 and fp 1.                                    tp 0 fp 1 fn 1
#   all: tp 8, fp 3, fn 6 -> precision 8/11 = 0.727, recall 8/14 = 0.571.
#
# Answers
#   Governing Law     alpha "State of New York" = "New York"; beta "Delaware"; delta none
#                                                                          tp 2 fp 0 fn 1
#   Anti-Assignment   alpha Yes = Yes; beta No/No (not counted); gamma none  tp 1 fp 0 fn 1
#   Agreement Date    alpha 2018-01-11 = 1/11/18; beta "08/[]/2019" (2019-08), no answer
#                                                                          tp 1 fp 0 fn 1
#   Parties           alpha {freecook, mitchells web advance plc} both right -> tp 2;
#                     beta {acme corp, gamma inc} vs {acme corp, beta llc} -> tp 1 fp 1 fn 1
#                                                                          tp 3 fp 1 fn 1
#   Expiration Date   alpha 2030-01-01 vs "perpetual" -> fp 1 fn 1; beta 2021-12-31 vs 12/31/20
#                     -> fp 1 fn 1                                         tp 0 fp 2 fn 2
#   Cap On Liability  alpha No, no answer; beta Yes = Yes                  tp 1 fp 0 fn 0
#   all: tp 8, fp 3, fn 6 -> precision 8/11 = 0.727, recall 8/14 = 0.571.
#
# Rejected quotes: accepted 7 (alpha) + 4 (beta) + 1 (epsilon) = 12; rejected 1 + 2 + 1 = 4;
# rate 4/16 = 0.25.

HAND_CLAUSES = {
    "Governing Law": (2, 0, 1),
    "Anti-Assignment": (1, 1, 2),
    "Agreement Date": (2, 0, 0),
    "Parties": (2, 0, 2),
    "Expiration Date": (1, 1, 0),
    "Cap On Liability": (0, 1, 1),
}
HAND_ANSWERS = {
    "Governing Law": (2, 0, 1),
    "Anti-Assignment": (1, 0, 1),
    "Agreement Date": (1, 0, 1),
    "Parties": (3, 1, 1),
    "Expiration Date": (0, 2, 2),
    "Cap On Liability": (1, 0, 0),
}


def test_the_scores_are_those_computed_by_hand() -> None:
    evaluation = evaluate_contracts(RECORDS, LABELS)

    assert list(evaluation.categories) == list(HAND_CLAUSES)
    for category, (tp, fp, fn) in HAND_CLAUSES.items():
        counts = evaluation.categories[category].clauses
        assert (counts.tp, counts.fp, counts.fn) == (tp, fp, fn), category
    for category, (tp, fp, fn) in HAND_ANSWERS.items():
        counts = evaluation.categories[category].answers
        assert (counts.tp, counts.fp, counts.fn) == (tp, fp, fn), category

    anti = evaluation.categories["Anti-Assignment"].clauses
    assert anti.precision == pytest.approx(1 / 2)
    assert anti.recall == pytest.approx(1 / 3)
    assert anti.f1 == pytest.approx(0.4)
    cap = evaluation.categories["Cap On Liability"].clauses
    assert (cap.precision, cap.recall, cap.f1) == (0.0, 0.0, 0.0)
    assert evaluation.categories["Governing Law"].clauses.f1 == pytest.approx(0.8)

    assert evaluation.clauses.precision == pytest.approx(8 / 11)
    assert evaluation.clauses.recall == pytest.approx(8 / 14)
    assert evaluation.answers.precision == pytest.approx(8 / 11)
    assert evaluation.answers.recall == pytest.approx(8 / 14)
    parties = evaluation.categories["Parties"].answers
    assert (parties.precision, parties.recall) == (0.75, 0.75)

    assert (evaluation.accepted_quotes, evaluation.rejected_quotes) == (12, 4)
    assert evaluation.rejected_rate == 0.25
    assert evaluation.categories["Cap On Liability"].rejected == 2
    assert evaluation.categories["Anti-Assignment"].rejected == 1


def test_contracts_without_a_usable_record_are_listed_and_count_as_nothing_found() -> None:
    evaluation = evaluate_contracts(RECORDS, LABELS)

    assert evaluation.missing == ["gamma.txt"]
    assert evaluation.errored == {"delta.txt": ["encrypted_pdf"]}  # matched by stem (.pdf)
    assert evaluation.unlabelled == ["extra/epsilon.txt"]
    alone = evaluate_contracts([], LABELS[2:3])
    counts = alone.categories["Anti-Assignment"]
    assert (counts.clauses.tp, counts.clauses.fp, counts.clauses.fn) == (0, 0, 1)
    assert (counts.answers.tp, counts.answers.fp, counts.answers.fn) == (0, 0, 1)
    assert counts.clauses.precision is None
    assert counts.clauses.recall == 0.0


def test_an_error_record_scores_nothing_even_when_it_carries_fields() -> None:
    record = {
        "file": "delta.txt",
        "status": "error",
        "fields": {"Governing Law": _field(["laws of California"], "California")},
        "errors": [{"code": "unreadable", "message": "cannot read"}],
    }
    evaluation = evaluate_contracts([record], LABELS[3:4])

    law = evaluation.categories["Governing Law"]
    assert (law.clauses.tp, law.clauses.fn, law.answers.tp, law.answers.fn) == (0, 1, 0, 1)
    assert evaluation.errored == {"delta.txt": ["unreadable"]}
    assert evaluation.accepted_quotes == 0


def test_date_labels_that_do_not_parse_are_reported_apart_and_not_scored() -> None:
    labels = [
        {"file": "a.txt", "labels": {"Expiration Date": _label([], "upon completion")}},
        {"file": "b.txt", "labels": {"Expiration Date": _label([], "perpetual")}},
        {"file": "c.txt", "labels": {"Agreement Date": _label([], "08/[]/2019")}},
    ]
    answers = {"a.txt": ("Expiration Date", "2030-01-01"),
               "b.txt": ("Expiration Date", "until terminated"),
               "c.txt": ("Agreement Date", "2019-08")}  # fmt: skip
    records = [
        {"file": file, "status": "ok", "fields": {category: _field([], answer)}}
        for file, (category, answer) in answers.items()
    ]
    evaluation = evaluate_contracts(records, labels)

    assert [(item.file, item.category, item.answer) for item in evaluation.unscored] == [
        ("a.txt", "Expiration Date", "upon completion"),
    ]
    assert evaluation.categories["Expiration Date"].unscored == 1
    # a's answer 2030-01-01 for a label that does not parse is neither right nor wrong; b's
    # "until terminated" is CUAD's "perpetual"; c's month is the label's month
    expiration = evaluation.categories["Expiration Date"].answers
    assert (expiration.tp, expiration.fp, expiration.fn) == (1, 0, 0)
    agreement = evaluation.categories["Agreement Date"].answers
    assert (agreement.tp, agreement.fp, agreement.fn) == (1, 0, 0)


def test_empty_labels_make_every_quote_and_answer_extra() -> None:
    labels = [
        {
            "file": "a.txt",
            "labels": {"Governing Law": _label([], ""), "Audit Rights": _label([], "No")},
        }
    ]
    quiet = {"file": "a.txt", "status": "ok", "fields": {}, "errors": []}
    talkative = {
        "file": "a.txt",
        "status": "ok",
        "fields": {
            "Governing Law": _field(["laws of Texas"], "Texas"),
            "Audit Rights": _field(["may audit the books"], "Yes"),
        },
        "errors": [],
    }

    nothing = evaluate_contracts([quiet], labels)
    assert nothing.clauses.as_dict() == {
        "tp": 0,
        "fp": 0,
        "fn": 0,
        "precision": None,
        "recall": None,
        "f1": None,
    }
    assert nothing.answers.as_dict()["precision"] is None
    extra = evaluate_contracts([talkative], labels)
    assert (extra.clauses.tp, extra.clauses.fp, extra.clauses.fn) == (0, 2, 0)
    assert (extra.answers.tp, extra.answers.fp, extra.answers.fn) == (0, 2, 0)
    assert extra.categories["Audit Rights"].answer_kind == "yes_no"
    assert extra.clauses.precision == 0.0
    assert extra.clauses.recall is None


def test_no_labels_at_all_gives_no_score() -> None:
    evaluation = evaluate_contracts(RECORDS, [])

    assert evaluation.categories == {}
    assert evaluation.labelled == []
    assert evaluation.clauses.precision is None
    assert evaluation.unlabelled == [
        "/data/alpha.txt",
        "/data/beta.txt",
        "contracts/delta.pdf",
        "extra/epsilon.txt",
    ]
    assert evaluation.rejected_rate == 0.25  # quotes are counted with or without labels


# -- files and the command line ----------------------------------------------------------------


def _write(tmp_path: Path, records: list[Any], labels: list[Any]) -> tuple[Path, Path]:
    records_file = tmp_path / "records.jsonl"
    labels_file = tmp_path / "labels.jsonl"
    records_file.write_text("".join(json.dumps(item) + "\n" for item in records), "utf-8")
    labels_file.write_text("".join(json.dumps(item) + "\n" for item in labels), "utf-8")
    return records_file, labels_file


def test_eval_contracts_json_gives_the_hand_computed_scores(tmp_path: Path) -> None:
    records, labels = _write(tmp_path, RECORDS, LABELS)

    result = CliRunner().invoke(
        launcher, ["eval", "contracts", str(records), "--labels", str(labels), "--json"]
    )

    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["clauses"]["tp"] == 8
    assert document["clauses"]["precision"] == pytest.approx(8 / 11)
    assert document["answers"]["recall"] == pytest.approx(8 / 14)
    by_category = {row["category"]: row for row in document["categories"]}
    assert by_category["Anti-Assignment"]["clauses"]["recall"] == pytest.approx(1 / 3)
    assert by_category["Expiration Date"]["answer_kind"] == "date"
    assert document["contracts"] == {
        "labelled": 4,
        "scored_with_record": 2,
        "missing": ["gamma.txt"],
        "errored": [{"file": "delta.txt", "codes": ["encrypted_pdf"]}],
        "unlabelled": ["extra/epsilon.txt"],
    }
    assert document["quotes"] == {"accepted": 12, "rejected": 4, "rejected_rate": 0.25}
    assert document["unscored"] == []
    assert "confidence" in document["clause_scoring"]["not_computed"]


def test_eval_contracts_prints_tables(tmp_path: Path) -> None:
    records, labels = _write(tmp_path, RECORDS, LABELS)

    result = CliRunner().invoke(
        launcher, ["eval", "contracts", str(records), "--labels", str(labels)]
    )

    assert result.exit_code == 0, result.output
    clauses, answers = result.stdout.split("\nAnswers (a wrong answer counts as both")
    clause_rows = [" ".join(line.split()) for line in clauses.splitlines()]
    assert "category labelled quotes found stray P R F1" in clause_rows
    assert "Anti-Assignment 3 2 1 1 0.500 0.333 0.400" in clause_rows
    assert "all (micro) 14 8 3 0.727 0.571 0.640" in clause_rows
    answer_rows = [" ".join(line.split()) for line in answers.splitlines()]
    assert "category kind right extra missed P R F1 unscored" in answer_rows
    assert "Parties parties 3 1 1 0.750 0.750 0.750 0" in answer_rows
    assert "Expiration Date date 0 2 2 0.000 0.000 0.000 0" in answer_rows
    assert "rejected quotes: 4 of 16 (25.0%)" in result.stdout
    assert "  no record: gamma.txt" in result.stdout
    assert "  error record: delta.txt (encrypted_pdf)" in result.stdout
    assert "precision at 80% and 90% recall are not computed" in result.stdout


def test_unusable_files_exit_2_with_the_reason(tmp_path: Path) -> None:
    records, labels = _write(tmp_path, RECORDS, [])
    runner = CliRunner()

    empty = runner.invoke(launcher, ["eval", "contracts", str(records), "--labels", str(labels)])
    assert empty.exit_code == 2
    assert f"labels file {labels} labels no contract" in empty.output
    missing = runner.invoke(
        launcher, ["eval", "contracts", str(tmp_path / "nope.jsonl"), "--labels", str(labels)]
    )
    assert missing.exit_code == 2
    assert "cannot read records file" in missing.output
    labels.write_text('{"file": "a.txt", "labels": []}\n', "utf-8")
    malformed = runner.invoke(
        launcher, ["eval", "contracts", str(records), "--labels", str(labels)]
    )
    assert malformed.exit_code == 2
    assert f"{labels}:1: a label line is" in malformed.output
    shape = '{"clauses": [TEXT, ...], "answer": TEXT}}} (as in cuad_labels.jsonl)'
    assert shape in " ".join(malformed.output.split())  # the braces of the shape balance


def test_lines_that_are_not_records_are_listed_and_the_rest_scored(tmp_path: Path) -> None:
    records, labels = _write(tmp_path, RECORDS[:1], LABELS[:1])
    with records.open("a", encoding="utf-8") as out:
        out.write("{not json\n[1, 2]\n")

    evaluation = evaluate_contract_files(records, labels)

    assert [line for line, _ in evaluation.invalid_records] == [2, 3]
    assert evaluation.invalid_records[1][1] == 'not a record (a JSON object with a "file")'
    assert evaluation.categories["Agreement Date"].clauses.tp == 1


def test_reading_refuses_csv_records_and_twice_labelled_files(tmp_path: Path) -> None:
    csv = tmp_path / "records.csv"
    csv.write_text("file,status\n", "utf-8")
    with pytest.raises(InputError, match="is CSV; eval contracts reads the JSONL records"):
        read_records(csv)
    _, labels = _write(tmp_path, [], [LABELS[0], LABELS[0]])
    with pytest.raises(InputError, match=r"labels.jsonl:2: alpha.txt is labelled twice"):
        read_labels(labels)


# -- categories no record knows -------------------------------------------------------------

BOGUS_LABELS = [
    {
        "file": "alpha.txt",
        "labels": {
            **LABELS[0]["labels"],
            "Bogus Category": _label(["one clause", "another clause"], "Yes"),
            "Governing Lawe": _label(["laws of New York"], ""),
        },
    },
    {"file": "beta.txt", "labels": {"Bogus Category": _label(["third clause"], "")}},
]


def test_a_label_category_no_record_has_and_no_field_knows_is_listed_apart() -> None:
    evaluation = evaluate_contracts(RECORDS, BOGUS_LABELS)

    assert "Bogus Category" not in evaluation.categories
    assert "Governing Lawe" not in evaluation.categories
    assert [
        (item.category, item.contracts, item.clauses, item.nearest)
        for item in evaluation.unknown_categories
    ] == [("Bogus Category", 2, 3, None), ("Governing Lawe", 1, 1, "Governing Law")]
    # the unknown categories' clauses are not in the totals: alpha's 6 labelled clauses
    assert evaluation.clauses.tp + evaluation.clauses.fn == 6


def test_a_cuad_category_no_record_has_is_still_scored() -> None:
    labels = [{"file": "alpha.txt", "labels": {"Non-Compete": _label(["no competing"], "Yes")}}]
    evaluation = evaluate_contracts(RECORDS, labels)

    assert evaluation.unknown_categories == []
    non_compete = evaluation.categories["Non-Compete"]
    assert (non_compete.clauses.tp, non_compete.clauses.fn, non_compete.clauses.recall) == (0, 1, 0)


def test_unknown_label_categories_appear_in_the_table_and_the_json(tmp_path: Path) -> None:
    records, labels = _write(tmp_path, RECORDS, BOGUS_LABELS)
    runner = CliRunner()

    table = runner.invoke(launcher, ["eval", "contracts", str(records), "--labels", str(labels)])
    shown = runner.invoke(
        launcher, ["eval", "contracts", str(records), "--labels", str(labels), "--json"]
    )

    assert table.exit_code == 0, table.output
    assert (
        "label categories not scored (no record has them and they are not CUAD categories; "
        "check the labels' spelling or the --fields of the extraction):"
    ) in table.stdout
    assert "  Bogus Category: 2 contracts, 3 clauses" in table.stdout
    assert "  Governing Lawe: 1 contract, 1 clause (did you mean 'Governing Law'?)" in (
        table.stdout
    )
    rows = [" ".join(line.split()) for line in table.stdout.splitlines()]
    assert not any(row.startswith("Bogus Category ") for row in rows)
    assert shown.exit_code == 0, shown.output
    document = json.loads(shown.stdout)
    assert document["unknown_categories"] == [
        {"category": "Bogus Category", "contracts": 2, "clauses": 3, "nearest": None},
        {"category": "Governing Lawe", "contracts": 1, "clauses": 1, "nearest": "Governing Law"},
    ]
    assert "Bogus Category" not in {row["category"] for row in document["categories"]}


def test_the_scores_are_printed_whole_at_100_columns(tmp_path: Path) -> None:
    categories = {
        "Notice Period To Terminate Renewal": ("30 days", "30 days"),
        "Governing Law": ("New York", "New York"),
        "Parties": ('Acme Corp. ("Seller")', [{"name": "Acme Corp", "role": "Seller"}]),
    }
    labels = [
        {
            "file": "alpha.txt",
            "labels": {
                name: _label([name.lower()], label) for name, (label, _) in categories.items()
            },
        }
    ]
    record = {
        "file": "alpha.txt",
        "status": "ok",
        "fields": {
            name: _field([name.lower()], answer) for name, (_, answer) in categories.items()
        },
    }
    records, labels_file = _write(tmp_path, [record], labels)

    result = CliRunner().invoke(
        launcher,
        ["eval", "contracts", str(records), "--labels", str(labels_file)],
        env={"COLUMNS": "100"},
    )

    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout
    rows = [" ".join(line.split()) for line in result.stdout.splitlines()]
    assert "category kind right extra missed P R F1 unscored" in rows
    assert "Notice Period To Terminate Renewal 1 1 1 0 1.000 1.000 1.000" in rows
    # the longest name wraps rather than a figure being cut
    notice = [row for row in rows if row.startswith("Notice Period To Terminate")]
    assert notice == [
        "Notice Period To Terminate Renewal 1 1 1 0 1.000 1.000 1.000",
        "Notice Period To Terminate duration 1 0 0 1.000 1.000 1.000 0",
    ]
    assert "Parties parties 1 0 0 1.000 1.000 1.000 0" in rows
    assert "Governing Law jurisdiction 1 0 0 1.000 1.000 1.000 0" in rows
    assert "all (micro) 3 0 0 1.000 1.000 1.000 0" in rows
    tables = result.stdout.split("\ncontracts: ")[0]
    assert max(len(line) for line in tables.splitlines()) <= 100
