"""Chunks: contiguous, covering the text exactly, cut at section and clause boundaries."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest

from plandag.jobs.contracts.chunks import Chunk, chunk_text
from plandag.jobs.contracts.text import read_contract


def _assert_cover(text: str, chunks: list[Chunk], max_chars: int) -> None:
    assert chunks[0].start == 0
    assert chunks[-1].end == len(text)
    for index, (before, after) in enumerate(itertools.pairwise(chunks)):
        assert before.end == after.start
        assert before.index == index
    assert all(0 < chunk.end - chunk.start <= max_chars for chunk in chunks)
    assert "".join(text[c.start : c.end] for c in chunks) == text


def test_a_short_text_is_one_chunk_and_an_empty_one_none() -> None:
    assert chunk_text("Short contract.", 100) == [Chunk(0, 0, 15)]
    assert chunk_text("", 100) == []


def test_cuts_go_before_section_headings() -> None:
    text = (
        "AGREEMENT\n\n"
        + "1. Term. "
        + "The term is one year. " * 5
        + "\n2. Payment. "
        + "Payment is due monthly. " * 5
        + "\n3. Law. Delaware governs."
    )
    chunks = chunk_text(text, 140)
    starts = [text[c.start : c.start + 3] for c in chunks]
    assert starts == ["AGR", "2. ", "3. "]
    _assert_cover(text, chunks, 140)


def test_without_headings_paragraphs_then_sentences_then_spaces_then_hard_cuts() -> None:
    paragraphs = "First paragraph sentence one. Sentence two.\n\nSecond paragraph here."
    chunks = chunk_text(paragraphs, 50)
    assert paragraphs[chunks[1].start :] == "Second paragraph here."
    sentences = "Alpha beta gamma delta. Epsilon zeta eta theta iota."
    chunks = chunk_text(sentences, 30)
    assert sentences[chunks[1].start :] == "Epsilon zeta eta theta iota."
    words = "alpha beta gamma delta epsilon"
    assert [words[c.start : c.end] for c in chunk_text(words, 12)] == [
        "alpha beta ",
        "gamma delta ",
        "epsilon",
    ]
    solid = "x" * 25
    assert [(c.start, c.end) for c in chunk_text(solid, 10)] == [(0, 10), (10, 20), (20, 25)]


def test_max_chars_below_two_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        chunk_text("abc", 1)


def test_a_300_page_pdf_is_chunked_with_every_character_accounted_for(
    make_pdf: Callable[..., Path],
) -> None:
    body = "The Supplier shall deliver the goods on time and in full."
    pages = [[f"Section {n}. Delivery terms", *[body] * 28] for n in range(1, 301)]
    path = make_pdf("long.pdf", pages)
    contract = read_contract(path)
    assert contract.pages == 300
    assert contract.text.count("\f") == 299
    chunks = chunk_text(contract.text, 16_000)
    _assert_cover(contract.text, chunks, 16_000)
    # each chunk holds as many whole pages as fit in 16,000 characters (9), cut at the next
    # page's section heading: 33 chunks of 9 pages and one of the last 3
    assert len(chunks) == 34
    assert all(contract.text.startswith("Section ", c.start) for c in chunks)
    assert [contract.text[c.start : c.end].count("Section ") for c in chunks] == [9] * 33 + [3]
