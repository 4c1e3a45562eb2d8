"""Citations: quotes found in their chunks (exact or normalised), offsets computed in code,
unsupported claims fail the checks, the synthesis cites only quotes that passed."""

from __future__ import annotations

from pathlib import Path

import pytest

from plandag.jobs.research.citations import locate, verify_answer, verify_synthesis
from plandag.jobs.research.corpus import Chunk, Corpus
from plandag.jobs.research.tools import (
    citations_supported,
    read,
    search,
    synthesis_citations,
    use_corpus,
)

TEXT = (
    "Intro line.\n\nLiberty is to faction what air is to fire,\nan aliment without which it "
    "expires."
)
CHUNK = Chunk("doc.md#2", "doc.md", 2, 13, len(TEXT), TEXT[13:])


def lookup(chunk_id: str) -> Chunk | None:
    return CHUNK if chunk_id == CHUNK.chunk_id else None


def test_an_exact_quote_gets_offsets_into_the_document() -> None:
    outcome = locate("what air is to fire", CHUNK)
    assert (outcome.supported, outcome.match, outcome.start, outcome.end) == (
        True,
        "exact",
        35,
        54,
    )
    assert TEXT[35:54] == "what air is to fire"


def test_a_quote_differing_in_whitespace_and_case_is_normalised_and_reported() -> None:
    outcome = locate("FIRE, an   aliment without", CHUNK)
    assert (outcome.supported, outcome.match) == (True, "normalized")
    assert outcome.start is not None
    assert outcome.end is not None
    assert TEXT[outcome.start : outcome.end] == "fire,\nan aliment without"
    assert outcome.text == "fire,\nan aliment without"


def test_fabricated_short_and_unknown_citations_are_unsupported() -> None:
    answer = {
        "claims": [
            {"claim": "ok", "citations": [{"chunk_id": "doc.md#2", "quote": "air is to fire"}]},
            {
                "claim": "made up",
                "citations": [{"chunk_id": "doc.md#2", "quote": "water is to fire"}],
            },
            {"claim": "short", "citations": [{"chunk_id": "doc.md#2", "quote": "fire"}]},
            {
                "claim": "elsewhere",
                "citations": [{"chunk_id": "doc.md#9", "quote": "air is to fire"}],
            },
            {"claim": "bare", "citations": []},
        ]
    }
    verification = verify_answer(answer, lookup)
    assert [claim.supported for claim in verification.claims] == [True, False, False, False, False]
    assert [item.reason for item in verification.citations()] == [
        None,
        "quote_not_found",
        "quote_too_short",
        "unknown_chunk",
    ]
    assert not verification.supported
    assert "claim 2: quote_not_found for quote 'water is to fire'" in (
        verification.describe_failures()
    )
    assert "claim 5 (bare) has no citation" in verification.describe_failures()


def test_a_bare_list_of_claims_is_an_answer_and_a_string_is_not() -> None:
    claims = [{"claim": "c", "citations": [{"chunk_id": "doc.md#2", "quote": "air is to fire"}]}]
    assert verify_answer(claims, lookup).supported
    assert verify_answer({"claims": []}, lookup).supported
    assert verify_answer("air is to fire", lookup).problems == (
        "the answer is not a list of claims (got str)",
    )


def test_the_synthesis_may_cite_only_quotes_that_passed() -> None:
    answer = {
        "claims": [
            {"claim": "a", "citations": [{"chunk_id": "doc.md#2", "quote": "air is to fire"}]},
            {"claim": "b", "citations": [{"chunk_id": "doc.md#2", "quote": "fire is to air"}]},
        ]
    }
    good = {
        "answer": "Faction needs liberty.",
        "claims": [
            {"claim": "x", "citations": [{"chunk_id": "doc.md#2", "quote": "AIR is  to fire"}]}
        ],
    }
    assert verify_synthesis(good, [answer], lookup).supported
    # in the chunk, but no answer cited it: refused
    new_quote = {
        "answer": "t",
        "claims": [
            {
                "claim": "x",
                "citations": [{"chunk_id": "doc.md#2", "quote": "an aliment without which"}],
            }
        ],
    }
    outcome = verify_synthesis(new_quote, [answer], lookup)
    assert not outcome.supported
    assert [item.reason for item in outcome.citations()] == ["not_cited_in_answers"]
    # cited by an answer, but that citation itself failed: refused too
    failed_quote = {
        "answer": "t",
        "claims": [
            {"claim": "x", "citations": [{"chunk_id": "doc.md#2", "quote": "fire is to air"}]}
        ],
    }
    assert [
        item.reason for item in verify_synthesis(failed_quote, [answer], lookup).citations()
    ] == ["quote_not_found"]


def test_tools_and_checks_use_the_bound_corpus(tmp_path: Path) -> None:
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "doc.md").write_text(TEXT, encoding="utf-8")
    with Corpus.open(folder, index=tmp_path / "i.sqlite3") as corpus, use_corpus(corpus):
        found = search("liberty faction", k=2)
        assert found["chunk_ids"] == ["doc.md#1"]
        assert read(found["chunk_ids"])["chunks"][0]["text"] == TEXT
        good = {
            "claims": [
                {"claim": "c", "citations": [{"chunk_id": "doc.md#1", "quote": "air is to fire"}]}
            ]
        }
        bad = {
            "claims": [
                {"claim": "c", "citations": [{"chunk_id": "doc.md#1", "quote": "water is wet"}]}
            ]
        }
        assert citations_supported.evaluate(good, {}).status == "pass"
        outcome = citations_supported.evaluate(bad, {})
        assert outcome.status == "fail"
        assert "quote_not_found for quote 'water is wet' in chunk 'doc.md#1'" in outcome.detail
        synthesis = {"answer": "s", "claims": good["claims"]}
        assert synthesis_citations.evaluate(synthesis, {"answers": [good]}).status == "pass"
        assert synthesis_citations.evaluate(synthesis, {"answers": [bad]}).status == "fail"


def test_without_a_corpus_the_tools_say_what_to_pass() -> None:
    from plandag.errors import PermanentStepError

    with pytest.raises(PermanentStepError, match="plandag research QUESTION --corpus DIR"):
        search("anything")
    assert citations_supported.evaluate({"claims": []}, {}).status == "fail"


def test_a_section_number_is_not_two_words_of_a_citation() -> None:
    text = "Preamble.\n\nSection 4.2 applies to every member."
    chunk = Chunk("rules.md#1", "rules.md", 1, 0, len(text), text)
    # "Section 4.2 applies" is two words (the number is none), under the three a quote needs
    assert locate("Section 4.2 applies", chunk).reason == "quote_too_short"
    assert locate("§ 4.2(a), 12", chunk).reason == "quote_too_short"
    assert locate("Section 4.2 applies to", chunk).supported
