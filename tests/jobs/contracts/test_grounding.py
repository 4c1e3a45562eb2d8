"""A value is accepted only when its own quote holds it; a clause only on a quote long enough
to be evidence; a value that cannot be normalised keeps its evidence."""

from __future__ import annotations

from typing import Any

import pytest

from plandag.jobs.contracts.tools import merge_field_replies, quote_exists

TEXT = (
    "SERVICES AGREEMENT\n\n"
    'This Agreement is entered into on the 1st day of April, 2019 (the "Effective Date") '
    'between Idan Maimon ("Maimon") and Intellisense Solutions, Inc., a Nevada corporation '
    '(the "Company"). The Company shall pay Maimon the sum of $5,000 per month.\n\n'
    "7. Term. This Agreement shall remain in effect until terminated by the Parties. "
    "Either party may terminate it on thirty (30) days' prior written notice.\n\n"
    "12.3(a) Assignment. Neither party may assign this Agreement without the prior written "
    "consent of the other party.\n\n"
    "14. Governing Law. This Agreement shall be governed by the laws of the State of "
    "California, without regard to its conflict of law principles. Foro: comarca de São "
    "Paulo/SP. Signed August __, 2019; the original schedule of 4/1/19 is replaced."
)


def merge(kind: str, items: list[dict[str, Any]], name: str = "F") -> dict[str, Any]:
    fields = merge_field_replies(
        TEXT,
        [{"index": 0, "start": 0, "end": len(TEXT)}],
        [{"name": name, "type": kind}],
        [{"chunk": 0, "reply": {"fields": {name: items}}}],
    )
    return fields[name]


def reasons(field: dict[str, Any]) -> list[str]:
    return [item["reason"] for item in field["rejected"]]


GOVERNING = "This Agreement shall be governed by the laws of the State of California"


def test_a_changed_value_with_a_genuine_quote_is_rejected_and_fails_the_check() -> None:
    field = merge("text", [{"quote": GOVERNING, "value": "Atlantis"}], "Governing Law")
    assert field["values"] == []
    assert field["answer"] is None
    assert field["rejected"] == [
        {
            "quote": GOVERNING,
            "reason": "value_not_in_quote",
            "detail": "the quote does not hold 'Atlantis'",
        }
    ]
    outcome = quote_exists.evaluate({"fields": {"Governing Law": field}}, {"text": TEXT})
    assert outcome.status == "fail"
    assert "1 value(s) their quote does not hold" in outcome.detail


@pytest.mark.parametrize(
    ("kind", "quote", "held", "changed"),
    [
        ("text", GOVERNING, "california", "Nevada"),
        ("text", GOVERNING, "State of  CALIFORNIA", "Cal"),
        ("text", "Foro: comarca de São Paulo/SP", "Comarca de Sao Paulo", "Comarca de Santos"),
        ("date", "the 1st day of April, 2019", "2019-04-01", "2019-04-02"),
        ("date", "the 1st day of April, 2019", "2019-04", "2020-04"),
        ("date", "Signed August __, 2019", "2019-08", "2019-08-01"),
        ("date", "the original schedule of 4/1/19", "2019-01-04", "2019-04-02"),
        ("date", "shall remain in effect until terminated by the Parties", "until terminated",
         "perpetual"),
        ("duration", "on thirty (30) days' prior written notice", {"days": 30}, {"days": 60}),
        ("duration", "remain in effect until terminated", "until terminated", {"months": 12}),
        ("number", "the sum of $5,000 per month", 5000, 50000),
        ("parties", 'Idan Maimon ("Maimon")', {"name": "IDAN  maimon", "role": "Maimon"},
         {"name": "Idan Maimon Jr.", "role": "Maimon"}),
        ("parties", "Intellisense Solutions, Inc., a Nevada corporation",
         {"name": "Intellisense Solutions Inc", "role": "Company"},
         {"name": "Atlantis Holdings, Inc.", "role": "Company"}),
    ],
)  # fmt: skip
def test_each_type_reads_its_value_from_the_quote(
    kind: str, quote: str, held: Any, changed: Any
) -> None:
    accepted = merge(kind, [{"quote": quote, "value": held}])
    assert reasons(accepted) == []
    assert len(accepted["values"]) == 1
    assert "value_normalized" not in accepted["values"][0]
    rejected = merge(kind, [{"quote": quote, "value": changed}])
    assert rejected["values"] == []
    assert reasons(rejected) == ["value_not_in_quote"]


def test_every_party_of_a_list_must_be_named_in_the_quote() -> None:
    quote = 'between Idan Maimon ("Maimon") and Intellisense Solutions, Inc.'
    both = [{"name": "Idan Maimon"}, {"name": "Intellisense Solutions, Inc."}]
    assert merge("parties", [{"quote": quote, "value": both}])["answer"] == [
        {"name": "Idan Maimon", "role": None},
        {"name": "Intellisense Solutions, Inc.", "role": None},
    ]
    one_invented = [{"name": "Idan Maimon"}, {"name": "Gamma LLC"}]
    field = merge("parties", [{"quote": quote, "value": one_invented}])
    assert reasons(field) == ["value_not_in_quote"]
    assert field["rejected"][0]["detail"] == "the quote does not name 'Gamma LLC'"


def test_generic_clause_quotes_under_the_floor_are_rejected_and_names_are_not() -> None:
    quotes = [
        "The Company",  # two words
        "Neither party may assign",  # four words
        "12.3(a) Assignment. Neither party may",  # the section number is no word: four
        "Neither party may assign this",  # five words, 25 characters: the floor
    ]
    field = merge("clause", [{"quote": quote, "value": None} for quote in quotes])
    assert reasons(field) == ["quote_too_short"] * 3
    assert [value["quote"] for value in field["values"]] == ["Neither party may assign this"]
    assert field["answer"] == "Yes"
    assert "5 words and 25 characters" in field["rejected"][0]["detail"]
    # a clause quote under the floor is not a fabrication: the check still passes
    outcome = quote_exists.evaluate({"fields": {"F": field}}, {"text": TEXT})
    assert outcome.status == "pass"
    # names, dates and other short values are not subject to the floor
    assert merge("parties", [{"quote": "Maimon", "value": {"name": "Maimon"}}])["values"]
    assert merge("date", [{"quote": "4/1/19", "value": "2019-04-01"}])["values"]
    assert merge("text", [{"quote": "California", "value": "California"}])["values"]


def test_a_yes_no_answer_needs_a_clause_quote() -> None:
    short = merge("yes_no", [{"quote": "assign", "value": "Yes"}])
    assert (short["answer"], reasons(short)) == (None, ["quote_too_short"])
    clause = "Neither party may assign this Agreement without the prior written consent"
    assert merge("yes_no", [{"quote": clause, "value": "Yes"}])["answer"] == "Yes"


def test_a_value_that_cannot_be_normalised_keeps_its_evidence() -> None:
    quote = "the original schedule of 4/1/19"
    field = merge("date", [{"quote": quote, "value": "4/1/19"}])  # day and month ambiguous
    (value,) = field["values"]
    start = TEXT.find(quote)
    assert value["value"] == "4/1/19"
    assert value["value_normalized"] is False
    assert "ambiguous" in value["detail"]
    assert (value["quote"], value["start"], value["end"]) == (quote, start, start + len(quote))
    assert field["rejected"] == []
    assert field["answer"] is None  # evidence, not an answer
    no_value = merge("date", [{"quote": "Neither party may assign this Agreement", "value": None}])
    assert no_value["values"][0]["value"] is None
    assert no_value["values"][0]["value_normalized"] is False
    outcome = quote_exists.evaluate({"fields": {"F": field, "G": no_value}}, {"text": TEXT})
    assert outcome.status == "pass"
    # the raw value must still be in its quote: an unreadable invention is rejected
    invented = merge("date", [{"quote": quote, "value": "sometime in Atlantis"}])
    assert (invented["values"], reasons(invented)) == ([], ["value_not_in_quote"])


def test_the_partial_and_open_ended_forms_are_values_with_their_evidence() -> None:
    month = merge("date", [{"quote": "Signed August __, 2019", "value": "08/[]/2019"}])
    assert month["answer"] == "2019-08"
    until = merge("date", [{"quote": TEXT[TEXT.find("This Agreement shall remain") :][:78],
                            "value": "until terminated"}])  # fmt: skip
    assert until["answer"] == "until terminated"


def test_the_check_catches_an_accepted_value_its_quote_does_not_hold() -> None:
    start = TEXT.find("California")
    forged = {
        "type": "text",
        "values": [
            {"value": "Nevada", "quote": "California", "start": start, "end": start + 10,
             "match": "exact"}
        ],
        "rejected": [],
    }  # fmt: skip
    outcome = quote_exists.evaluate({"fields": {"Governing Law": forged}}, {"text": TEXT})
    assert outcome.status == "fail"
    assert outcome.detail == "1 value(s) their quote does not hold: Governing Law: 'Nevada'"
