"""Values normalised by type: dates ISO 8601, parties with roles, durations in months or days."""

from __future__ import annotations

from typing import Any

import pytest

from plandag.jobs.contracts.values import (
    InvalidValue,
    normalize_date,
    normalize_duration,
    normalize_number,
    normalize_parties,
    normalize_value,
    normalize_yes_no,
)


@pytest.mark.parametrize(
    ("given", "iso"),
    [
        ("2019-04-01", "2019-04-01"),
        ("2019-04-01T00:00:00Z", "2019-04-01"),
        ("April 1, 2019", "2019-04-01"),
        ("Apr. 1 2019", "2019-04-01"),
        ("January 27th, 2020", "2020-01-27"),
        ("1st April 2019", "2019-04-01"),
        ("22 December 2014", "2014-12-22"),
        ("1º de abril de 2019", "2019-04-01"),
        ("15 de março de 2021", "2021-03-15"),
        ("1/27/20", "2020-01-27"),
        ("27/01/2020", "2020-01-27"),
        ("4.4.2019", "2019-04-04"),
    ],
)
def test_dates_become_iso_8601(given: str, iso: str) -> None:
    assert normalize_date(given) == iso


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ("upon signature", "not a date"),
        ("08/[]/20x9", "not a date"),
        ("13/[]/2019", "not a month"),
        ("4/1/19", "ambiguous"),
        ("2019-02-30", "not a calendar date"),
        ("Smarch 3, 2020", "not a month name"),
        (20190401, "must be text"),
    ],
)
def test_non_dates_and_ambiguous_dates_are_refused(given: Any, why: str) -> None:
    with pytest.raises(InvalidValue, match=why):
        normalize_date(given)


@pytest.mark.parametrize(
    ("given", "form"),
    [
        ("08/[]/2019", "2019-08"),
        ("[]/08/2019", "2019-08"),
        ("August __, 2019", "2019-08"),
        ("August [ ], 2019", "2019-08"),
        ("August 2019", "2019-08"),
        ("agosto de 2019", "2019-08"),
        ("[●] de agosto de 2019", "2019-08"),
        ("2019-08", "2019-08"),
        ("[]/[]/2014", "2014"),
        ("____, 2014", "2014"),
        ("2014", "2014"),
        ("perpetual", "perpetual"),
        ("in perpetuity", "perpetual"),
        ("an indefinite term", "perpetual"),
        ("Indefinitely.", "perpetual"),
        ("prazo indeterminado", "perpetual"),
        ("until terminated", "until terminated"),
        ("Until terminated by the Parties", "until terminated"),
        ("until either party terminates it", "until terminated"),
        ("até a rescisão", "until terminated"),
        ("the 15th day of March, 2020", "2020-03-15"),
        ("October 1,1996", "1996-10-01"),
    ],
)
def test_dates_known_in_part_and_terms_without_end_have_defined_forms(
    given: str, form: str
) -> None:
    assert normalize_date(given) == form


def test_a_duration_without_end_has_the_same_forms() -> None:
    assert normalize_duration("perpetual") == "perpetual"
    assert normalize_duration("until terminated by either party") == "until terminated"
    assert normalize_duration("30 (thirty) days") == {"days": 30}
    assert normalize_duration("no mínimo, 30 (trinta) dias") == {"days": 30}


def test_parties_are_names_with_roles() -> None:
    assert normalize_parties('FreeCook ("Client")') == [{"name": "FreeCook", "role": "Client"}]
    assert normalize_parties({"name": " Cisco Systems, Inc. ", "role": "the “Cisco”"}) == [
        {"name": "Cisco Systems, Inc.", "role": "Cisco"}
    ]
    assert normalize_parties(
        [{"name": "Aduro Biotech, Inc"}, "IREYA B.V (hereinafter 'Consultant')"]
    ) == [
        {"name": "Aduro Biotech, Inc", "role": None},
        {"name": "IREYA B.V", "role": "Consultant"},
    ]
    with pytest.raises(InvalidValue, match="needs a name"):
        normalize_parties({"role": "Client"})


@pytest.mark.parametrize(
    ("given", "duration"),
    [
        ({"months": 12}, {"months": 12}),
        ({"years": 2}, {"months": 24}),
        ({"weeks": 2}, {"days": 14}),
        ("one (1) year", {"months": 12}),
        ("thirty (30) days", {"days": 30}),
        ("sixty days", {"days": 60}),
        ("successive 1 year terms", {"months": 12}),
        ("90 dias corridos", {"days": 90}),
        ("6 meses", {"months": 6}),
        ("2 anos", {"months": 24}),
        ("12 weeks", {"days": 84}),
    ],
)
def test_durations_become_months_or_days(given: Any, duration: dict[str, int]) -> None:
    assert normalize_duration(given) == duration


@pytest.mark.parametrize("given", ["soon", {"months": 1, "days": 2}, {"months": 1.5}, 12])
def test_unreadable_durations_are_refused(given: Any) -> None:
    with pytest.raises(InvalidValue):
        normalize_duration(given)


def test_numbers_and_yes_no() -> None:
    assert normalize_number("$1,250.50") == 1250.5
    assert normalize_number("R$ 1.250,50") == 1250.5
    assert normalize_number("10,000") == 10000
    assert normalize_number(7) == 7
    with pytest.raises(InvalidValue):
        normalize_number("many")
    assert normalize_yes_no("yes") == "Yes"
    assert normalize_yes_no("Não") == "No"
    with pytest.raises(InvalidValue):
        normalize_yes_no("maybe")


def test_clause_values_are_the_located_quote_and_text_is_collapsed() -> None:
    assert (
        normalize_value("clause", None, "The Company may terminate.")
        == "The Company may terminate."
    )
    assert normalize_value("text", "  State of\nDelaware ", "") == "State of Delaware"
    with pytest.raises(InvalidValue):
        normalize_value("text", None, "quote")
