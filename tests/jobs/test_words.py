"""Words of a quote, counted alike for contract clauses and research citations: numbers and
section marks are not words."""

from __future__ import annotations

import pytest

from plandag.jobs.words import quote_text_characters, quote_words


@pytest.mark.parametrize(
    ("quote", "words"),
    [
        ("Section 4.2 applies", ["Section", "applies"]),
        ("Section 4.2(a) applies", ["Section", "applies"]),
        ("§ 12.3", []),
        ("¶ 7 and § 9(b)(iii)", ["and"]),
        ("(a) the Company; (iv) the Client", ["the", "Company", "the", "Client"]),
        ("b) Party A, ii. Party B", ["Party", "A", "Party", "B"]),
        ("$5,000 on the 10th day, 2% and 1,250.50", ["on", "the", "day", "and"]),
        ("R$ 5.000,00 de multa", ["de", "multa"]),
        ('non-compete of Party\'s "Affiliates"', ["non-compete", "of", "Party's", "Affiliates"]),
        ("EWSD 1, LLC, d/b/a/ SHI FARMS", ["EWSD", "LLC", "d/b/a/", "SHI", "FARMS"]),
        ("São Paulo/SP", ["São", "Paulo/SP"]),
        ("", []),
    ],
)  # fmt: skip
def test_numbers_and_section_marks_are_not_words(quote: str, words: list[str]) -> None:
    assert quote_words(quote) == words


def test_characters_of_text_are_the_words_joined_by_single_spaces() -> None:
    assert quote_text_characters("Section  4.2(a)\n applies.") == len("Section applies")
    assert quote_text_characters("12.3") == 0
