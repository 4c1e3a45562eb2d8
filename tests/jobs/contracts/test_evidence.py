"""Quotes located by plandag: exact, or the documented normalised match, or not found."""

from __future__ import annotations

from plandag.jobs.contracts.evidence import (
    Located,
    locate_quote,
    normalize_for_match,
    quote_matches,
)

TEXT = "SUPPLY  AGREEMENT\nThis Agreement is made on\nJanuary 27, 2020 by “Shi Farms” – the Seller."


def test_an_exact_quote_gets_its_offsets() -> None:
    found = locate_quote(TEXT, "This Agreement is made on")
    assert found == Located(18, 43, "exact")
    assert TEXT[18:43] == "This Agreement is made on"


def test_surrounding_whitespace_of_a_quote_is_ignored() -> None:
    assert locate_quote(TEXT, "  January 27, 2020 \n") == Located(44, 60, "exact")


def test_whitespace_case_quote_marks_and_dashes_match_normalized() -> None:
    found = locate_quote(
        TEXT, 'supply agreement this agreement is made on january 27, 2020 by "Shi Farms" - the'
    )
    assert found is not None
    assert found.match == "normalized"
    assert (found.start, found.end) == (0, 81)
    assert TEXT[found.end - 3 : found.end] == "the"


def test_a_changed_word_or_number_or_a_splice_is_not_found() -> None:
    assert locate_quote(TEXT, "January 28, 2020") is None
    assert locate_quote(TEXT, "This Agreement is entered into on") is None
    assert locate_quote(TEXT, "SUPPLY AGREEMENT the Seller") is None
    assert locate_quote(TEXT, "   ") is None


def test_the_search_stays_inside_the_span() -> None:
    assert locate_quote(TEXT, "SUPPLY", 1) is None
    assert locate_quote(TEXT, "the Seller", 0, 80) is None
    assert locate_quote(TEXT, "the Seller", 0, len(TEXT)) == Located(78, 88, "exact")


def test_the_first_occurrence_is_taken() -> None:
    assert locate_quote("a term; a term", "a term") == Located(0, 6, "exact")


def test_quote_matches_checks_offsets_under_the_match_kind() -> None:
    assert quote_matches(TEXT, "This Agreement is made on", 18, 43, "exact")
    assert not quote_matches(TEXT, "This Agreement is made on", 19, 44, "exact")
    assert quote_matches(TEXT, "supply agreement", 0, 17, "normalized")
    assert not quote_matches(TEXT, "supply agreement", 0, 17, "exact")
    assert not quote_matches(TEXT, "x", 5, 500, "exact")
    assert not quote_matches(TEXT, "SUPPLY", 0, 6, "fuzzy")


def test_normalize_for_match() -> None:
    assert normalize_for_match("  “Shi\u00a0Farms” —\tSeller\n") == '"shi farms" - seller'
