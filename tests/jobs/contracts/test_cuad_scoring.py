"""``plandag eval contracts`` scores clauses as CUAD's own ``evaluate.py`` does: a hand-computed
example built from CUAD's rules, and the same counts as a direct port of CUAD's scoring
(``benchmarks/cuad_reference.py``) on the shared contracts extracted by the stand-in models
through both local provider servers."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from benchmarks.cuad_reference import reference_counts
from plandag.cli import app
from plandag.jobs.contracts.evaluate import evaluate_contracts
from plandag.jobs.words import quote_text_characters, quote_words
from plandag.testing import (
    AdversarialContractsModel,
    ChatCompletionsServer,
    MessagesServer,
    PerfectContractsModel,
)


def _field(quotes: list[str]) -> dict[str, Any]:
    values = [{"value": None, "quote": q, "start": 0, "end": len(q)} for q in quotes]
    return {"type": "clause", "values": values, "answer": None, "rejected": []}


LIABILITY = "Total liability\nshall not exceed\nthe fees paid"
LABELS = [
    {
        "file": "one.txt",
        "labels": {
            "Parties": {"clauses": ["Acme Corp.", "Seller", "Beta LLC"], "answer": ""},
            "Effective Date": {
                "clauses": [
                    "This Agreement takes effect upon signature.<omitted>December 22, 2014"
                ],
                "answer": "12/22/14",
            },
            "Anti-Assignment": {
                "clauses": ["Neither party may assign this Agreement without consent."],
                "answer": "Yes",
            },
            "Audit Rights": {"clauses": [], "answer": "No"},
            "Cap On Liability": {"clauses": [LIABILITY], "answer": "Yes"},
        },
    },
    {
        "file": "two.txt",
        "labels": {
            "Anti-Assignment": {"clauses": ["No assignment without consent."], "answer": "Yes"}
        },
    },
]
RECORDS = [
    {
        "file": "in/one.txt",
        "status": "ok",
        "fields": {
            "Parties": _field(['Acme Corp., a Delaware corporation (the "Seller")', "Beta"]),
            "Effective Date": _field(
                ["This Agreement takes effect upon signature.", "December 22, 2014"]
            ),
            "Anti-Assignment": _field(
                [
                    "Neither party may assign this Agreement without consent",
                    "Neither party may assign this Agreement without consent",
                    "The Supplier shall deliver the goods on time.",
                ]
            ),
            "Audit Rights": _field(
                [
                    "Buyer may audit the books of Seller once a year.",
                    "Records shall be kept for five years.",
                ]
            ),
            "Cap On Liability": _field(["Total liability shall not exceed the fees paid"]),
        },
    }
]

# Worked out by hand from CUAD's evaluate.py (get_jaccard: remove . , ; : then lowercase,
# "/" a space, split on single spaces; a match at Jaccard >= 0.5, or for Parties when the
# label is a substring of the prediction; compute_precision_recall: with labels, tp/fn per
# label and fp per prediction matching no label; without labels, fp per prediction):
#
#   Parties           "Acme Corp." and "Seller" are substrings of the first quote (their
#                     Jaccard with it is 2/7 and 0/7): tp 2; "Beta LLC" vs "Beta": {beta, llc}
#                     and {beta}, 1/2 = 0.5: tp 1; both quotes match a label.    tp 3 fp 0 fn 0
#   Effective Date    the label is two spans, each quoted exactly.               tp 2 fp 0 fn 0
#                     (scored whole it would be one clause: "signature<omitted>december" is
#                     one word, J with the first quote 5/9, the second quote matching nothing)
#   Anti-Assignment   one: the label found (the repeated quote is one prediction), the
#                     supplier sentence matches nothing -> fp 1; two: no record -> fn 1.
#                                                                                tp 1 fp 1 fn 1
#   Audit Rights      no label, two quotes: each a false positive.              tp 0 fp 2 fn 0
#   Cap On Liability  the label splits on single spaces into {total, liability\nshall, not,
#                     exceed\nthe, fees, paid}; the quote into 8 words; 4 shared of 10:
#                     J = 0.4 < 0.5 -> fn 1 and fp 1.                            tp 0 fp 1 fn 1
#   all: tp 6, fp 4, fn 2.
HAND = {
    "Parties": (3, 0, 0),
    "Effective Date": (2, 0, 0),
    "Anti-Assignment": (1, 1, 1),
    "Audit Rights": (0, 2, 0),
    "Cap On Liability": (0, 1, 1),
}


def test_the_clause_counts_are_cuads_computed_by_hand() -> None:
    evaluation = evaluate_contracts(RECORDS, LABELS)

    for category, counts in HAND.items():
        got = evaluation.categories[category].clauses
        assert (got.tp, got.fp, got.fn) == counts, category
    total = evaluation.clauses
    assert (total.tp, total.fp, total.fn) == (6, 4, 2)
    assert evaluation.categories["Effective Date"].labelled_clauses == 2
    assert evaluation.categories["Anti-Assignment"].quotes == 2  # the repeat counts once
    assert reference_counts(RECORDS, LABELS) == (6, 4, 2)


def test_eval_says_which_cuad_scores_need_confidences(tmp_path: Path) -> None:
    records, labels = tmp_path / "r.jsonl", tmp_path / "l.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    labels.write_text("".join(json.dumps(r) + "\n" for r in LABELS), encoding="utf-8")
    shown = CliRunner().invoke(app, ["eval", "contracts", str(records), "--labels", str(labels)])
    assert shown.exit_code == 0, shown.output
    assert "all (micro) 8 6 4 0.600 0.750 0.667" in [
        " ".join(line.split()) for line in shown.stdout.splitlines()
    ]
    assert (
        "CUAD's AUPR and precision at 80% and 90% recall are not computed: they rank "
        "predictions by a confidence score, which contract records do not carry."
    ) in shown.stdout


# -- the shared contracts, extracted by the stand-ins ------------------------------------------


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def labelled(contracts_dir: Path) -> tuple[Path, list[dict[str, Any]], list[Path]]:
    labels = contracts_dir / "cuad_labels.jsonl"
    rows = [json.loads(line) for line in labels.read_text(encoding="utf-8").splitlines()]
    return labels, rows, [contracts_dir / row["file"] for row in rows]


def _extract(arguments: list[str], out: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    result = CliRunner().invoke(
        app,
        ["extract", "contracts", *arguments, "-o", str(out), "--store", str(out.parent / "s.db")],
        env=env,
    )
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


@pytest.mark.slow
def test_the_perfect_model_scores_at_least_0_98_and_loses_no_genuine_quote(
    labelled: tuple[Path, list[dict[str, Any]], list[Path]], tmp_path: Path
) -> None:
    labels, rows, files = labelled
    model = PerfectContractsModel(labels)
    with MessagesServer(default=model) as server:
        records = _extract(
            [*map(str, files), "--base-url", server.url],
            tmp_path / "perfect.jsonl",
            {"ANTHROPIC_API_KEY": "local"},
        )
    assert [record["status"] for record in records] == ["ok"] * len(rows)
    assert [i for r in records for f in r["fields"].values() for i in f["rejected"]] == []
    clauses = evaluate_contracts(records, rows).clauses
    assert (clauses.tp, clauses.fp, clauses.fn) == reference_counts(records, rows)
    assert clauses.recall is not None
    assert clauses.recall >= 0.98
    assert clauses.precision is not None
    assert clauses.precision >= 0.98
    # the values read from their passages: a date the passage does not write is no value
    by_file = {Path(r["file"]).name: r["fields"] for r in records}
    scout = next(name for name in by_file if "SCOUTCAM" in name)
    expiration = by_file[scout]["Expiration Date"]
    assert [v.get("value_normalized") for v in expiration["values"]] == [False]
    trans = next(name for name in by_file if "TRANSMONTAIGNE" in name)
    assert by_file[trans]["Expiration Date"]["answer"] == "until terminated"
    assert by_file[trans]["Agreement Date"]["answer"] == "2019-08"


@pytest.mark.slow
def test_no_altered_answer_of_the_adversarial_model_is_accepted(
    labelled: tuple[Path, list[dict[str, Any]], list[Path]], tmp_path: Path
) -> None:
    labels, rows, files = labelled
    model = AdversarialContractsModel(labels, share=1.0, seed=3)
    with ChatCompletionsServer(default=model) as server:
        records = _extract(
            [*map(str, files), "--provider", "openai", "--base-url", server.url + "/v1",
             "--model", "qwen2.5:14b"],
            tmp_path / "adversarial.jsonl",
            {"OPENAI_API_KEY": ""},
        )  # fmt: skip
    kinds = Counter(alteration.kind for alteration in model.alterations)
    assert set(kinds) == {"changed_value", "fabricated_quote", "generic_quote", "shifted_offsets"}
    accepted = {
        (Path(r["file"]).name, name, value["quote"], json.dumps(value["value"]))
        for r in records
        for name, field in r["fields"].items()
        for value in field["values"]
    }
    quotes = {key[:3] for key in accepted}
    for alteration in model.alterations:
        key = (alteration.file, alteration.field, alteration.quote.strip())
        if alteration.kind == "changed_value":
            assert (*key, json.dumps(alteration.value)) not in accepted, alteration
        elif alteration.kind in ("fabricated_quote", "generic_quote"):
            assert key not in quotes, alteration
    texts = {path.name: path.read_text(encoding="utf-8") for path in files}
    for record in records:
        text = texts[Path(record["file"]).name]
        for field in record["fields"].values():
            for value in field["values"]:
                # offsets are plandag's own, never the shifted ones the model claimed
                assert " ".join(text[value["start"] : value["end"]].split()) == " ".join(
                    value["quote"].split()
                )
                if field["type"] in ("clause", "yes_no"):
                    assert len(quote_words(value["quote"])) >= 5
                    assert quote_text_characters(value["quote"]) >= 25
    assert {r["status"] for r in records} == {"check_failed"}
    clauses = evaluate_contracts(records, rows).clauses
    assert (clauses.tp, clauses.fp, clauses.fn) == reference_counts(records, rows)
