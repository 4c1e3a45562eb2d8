"""The matching rules of contract evaluation, on answers as CUAD v1 writes them (The Atticus
Project, CC BY 4.0)."""

from __future__ import annotations

import datetime

import pytest

from plandag.jobs.contracts.scoring import (
    cuad_jaccard,
    jurisdiction,
    normalise_name,
    parse_duration,
    parse_label_date,
    party_names,
)


def test_word_jaccard_follows_cuads_get_jaccard() -> None:
    # ". , ; :" removed, lowercased, "/" made a space, split on single spaces
    assert cuad_jaccard("Buyer/Seller: ACME, Inc.", "buyer seller acme inc") == 1.0
    assert cuad_jaccard("until December 31, 2021", "until December 31, 2020") == 3 / 5
    # two spaces make an empty word and a line end stays inside one, as str.split(" ")
    assert cuad_jaccard("a  b\nc", "a b c") == 1 / 5
    assert cuad_jaccard("", "") == 1.0
    assert cuad_jaccard("Term", "") == 0.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1/11/18", datetime.date(2018, 1, 11)),
        ("12/31/20", datetime.date(2020, 12, 31)),
        ("8/4/10", datetime.date(2010, 8, 4)),
        ("10/1/96", datetime.date(1996, 10, 1)),  # %y: 69-99 are the 1900s
        ("1/27/2020", datetime.date(2020, 1, 27)),
        (" 7/1/20 ", datetime.date(2020, 7, 1)),
        ("perpetual", None),
        ("08/[]/2019", None),
        ("2/30/20", None),
        ("", None),
    ],
)
def test_label_dates_parse_from_m_d_yy(text: str, expected: datetime.date | None) -> None:
    assert parse_label_date(text) == expected


def test_party_names_are_the_text_before_each_role() -> None:
    assert party_names('FreeCook ("Client"); Mitchell\'s Web Advance, PLC ("Company")') == {
        "freecook",
        "mitchells web advance plc",
    }
    assert party_names(
        'TransMontaigne Management Company, LLC ("EmployeeCo"); TLP Management Services, LLC '
        '("Operating Company"); (each "Party," collectively "Parties")'
    ) == {"transmontaigne management company llc", "tlp management services llc"}
    assert party_names(
        'EWSD 1, LLC, d/b/a SHI FARMS ("Shi Farms"); Gridiron BioNutrients ("Gridiron"); EWSD 1, '
        "LLC, d/b/a SHI FARMS and Gridiron BioNutrients (individually “a Party,” and "
        "collectively, “the Parties.”)"
    ) == {"ewsd 1 llc dba shi farms", "gridiron bionutrients"}
    assert party_names("Acme Corp; Beta LLC") == {"acme corp", "beta llc"}
    assert normalise_name("  Aduro   Biotech, Inc. ") == normalise_name("aduro biotech inc")


def test_jurisdictions_compare_by_name() -> None:
    assert jurisdiction("the State of New York") == "new york"
    assert jurisdiction("laws of the Commonwealth of Massachusetts") == "massachusetts"
    assert jurisdiction("People's Republic of China") == "peoples republic of china"
    assert jurisdiction("Delaware law") == "delaware"
    assert jurisdiction("California") != jurisdiction("Colorado")


def test_durations_in_months_or_days() -> None:
    assert parse_duration("successive 1 year") == ("months", 12)
    assert parse_duration("two years") == ("months", 24)
    assert parse_duration("90 days") == ("days", 90)
    assert parse_duration("6-month") == ("months", 6)
    assert parse_duration("2 weeks") == ("days", 14)
    assert parse_duration({"months": 12}) == ("months", 12)
    assert parse_duration({"days": 30}) == ("days", 30)
    assert parse_duration("perpetual") is None
    assert parse_duration({"years": 1}) is None
