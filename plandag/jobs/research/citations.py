"""Citations checked in code: every quote must occur in the chunk it names
(docs/guides/research.md).

An answer is a list of claims, each with its citations (:data:`ANSWER_SCHEMA`)::

    {"claims": [{"claim": "...", "citations": [{"chunk_id": "federalist-10.md#3",
                                                "quote": "exact words from the chunk"}]}]}

(a bare list of claims is read the same). A quote is found in its chunk **exactly**, or
else after **normalisation** (runs of whitespace made one space, both sides lower-cased),
and the match says which (``exact`` or ``normalized``). Its ``[start, end)`` offsets into
the document's extracted text are computed here, from the chunk's own offset and where
the quote was found — never taken from the model. A quote of fewer than
:data:`MIN_QUOTE_WORDS` words (counted by :func:`plandag.jobs.words.quote_words`: numbers
and section marks are not words, so ``Section 4.2`` is one), a chunk id the corpus does not
hold and a quote that is not in its chunk are unsupported, and so is a claim without a
citation: one unsupported claim fails the answer's check (``citations_supported``), so its
branch is replanned.

The synthesis (:data:`SYNTHESIS_SCHEMA`: ``{"answer": "...", "claims": [...]}``) may only
cite quotes that passed in the subquestion answers it is given (same chunk, same quote
after normalisation); its check (``synthesis_citations``) fails otherwise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Literal

from plandag.jobs.research.corpus import Chunk
from plandag.jobs.words import quote_words

__all__ = [
    "ANSWER_SCHEMA",
    "MIN_QUOTE_WORDS",
    "SYNTHESIS_SCHEMA",
    "AnswerVerification",
    "CitationOutcome",
    "ClaimOutcome",
    "Match",
    "claims_of",
    "locate",
    "normalize",
    "verify_answer",
    "verify_synthesis",
]

Match = Literal["exact", "normalized"]
ChunkLookup = Callable[[str], Chunk | None]

MIN_QUOTE_WORDS: Final = 3
"""A quote of fewer words (:func:`plandag.jobs.words.quote_words`) proves nothing (``"the"``
occurs in every chunk)."""

_CITATION: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "chunk_id": {"type": "string", "description": "the id of a chunk you were given"},
        "quote": {
            "type": "string",
            "description": "words copied exactly from that chunk that support the claim",
        },
    },
    "required": ["chunk_id", "quote"],
    "additionalProperties": False,
}
_CLAIM: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "claim": {"type": "string"},
        "citations": {"type": "array", "items": _CITATION, "minItems": 1},
    },
    "required": ["claim", "citations"],
    "additionalProperties": False,
}

ANSWER_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {"claims": {"type": "array", "items": _CLAIM}},
    "required": ["claims"],
    "additionalProperties": False,
}
"""JSON Schema of a subquestion's answer (the ``llm`` step's ``schema``)."""

SYNTHESIS_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "claims": {"type": "array", "items": _CLAIM}},
    "required": ["answer", "claims"],
    "additionalProperties": False,
}
"""JSON Schema of the synthesis: the answer in prose and the claims it rests on."""


def _normalized_with_map(text: str) -> tuple[str, list[int]]:
    """``text`` with whitespace runs made one space and lower-cased, and for each of its
    characters the offset in ``text`` it came from."""
    characters: list[str] = []
    origin: list[int] = []
    in_space = False
    for offset, character in enumerate(text):
        if character.isspace():
            if not in_space and characters:
                characters.append(" ")
                origin.append(offset)
            in_space = True
            continue
        in_space = False
        for lowered in character.lower():
            characters.append(lowered)
            origin.append(offset)
    while characters and characters[-1] == " ":
        characters.pop()
        origin.pop()
    return "".join(characters), origin


def normalize(text: str) -> str:
    """``text`` with every run of whitespace made one space, trimmed, lower-cased."""
    return _normalized_with_map(text)[0]


@dataclasses.dataclass(frozen=True, slots=True)
class CitationOutcome:
    """One citation, checked.

    Attributes:
        chunk_id: the chunk the model named.
        quote: the quote as the model wrote it.
        supported: found in the chunk.
        match: ``exact`` or ``normalized`` (None when not found).
        document: the chunk's document (None for an unknown chunk).
        start: ``[start, end)`` of the quote in the document's extracted text, computed
            by plandag (None when not found).
        end: see ``start``.
        text: the document's text at ``[start, end)`` (differs from ``quote`` in
            whitespace or case when ``match`` is ``normalized``).
        reason: why it is unsupported: ``unknown_chunk``, ``quote_not_found``,
            ``quote_too_short``, ``not_a_citation`` or ``not_cited_in_answers``; None
            when supported.
    """

    chunk_id: str
    quote: str
    supported: bool
    match: Match | None = None
    document: str | None = None
    start: int | None = None
    end: int | None = None
    text: str | None = None
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The outcome as a JSON-ready dict."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimOutcome:
    """One claim and its checked citations; ``supported`` when it has at least one
    citation and every citation is supported."""

    claim: str
    citations: tuple[CitationOutcome, ...]

    @property
    def supported(self) -> bool:
        """At least one citation, and every one found in its chunk."""
        return bool(self.citations) and all(item.supported for item in self.citations)

    def as_dict(self) -> dict[str, Any]:
        """``{"claim", "supported", "citations": [...]}``."""
        return {
            "claim": self.claim,
            "supported": self.supported,
            "citations": [item.as_dict() for item in self.citations],
        }


@dataclasses.dataclass(frozen=True, slots=True)
class AnswerVerification:
    """Every claim of an answer, checked; ``problems`` are shape errors (not a list of
    claims...)."""

    claims: tuple[ClaimOutcome, ...]
    problems: tuple[str, ...] = ()

    @property
    def supported(self) -> bool:
        """No shape problem and every claim supported."""
        return not self.problems and all(claim.supported for claim in self.claims)

    def citations(self) -> list[CitationOutcome]:
        """Every citation of every claim, in order."""
        return [item for claim in self.claims for item in claim.citations]

    def describe_failures(self, limit: int = 5) -> str:
        """The first ``limit`` problems in words: which claim, which chunk, why."""
        lines = list(self.problems)
        for number, claim in enumerate(self.claims, start=1):
            if not claim.citations:
                lines.append(f"claim {number} ({_short(claim.claim)}) has no citation")
            for item in claim.citations:
                if not item.supported:
                    lines.append(
                        f"claim {number}: {item.reason} for quote {_short(item.quote)!r} in "
                        f"chunk {item.chunk_id!r}"
                    )
        shown = lines[:limit]
        if len(lines) > limit:
            shown.append(f"and {len(lines) - limit} more")
        return "; ".join(shown)


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def locate(quote: str, chunk: Chunk) -> CitationOutcome:
    """Find ``quote`` in ``chunk``: exactly, else after normalisation (module docstring).

    Returns:
        A supported outcome with its match and document offsets (the first occurrence), or
        an unsupported one with reason ``quote_too_short`` or ``quote_not_found``.
    """
    if len(quote_words(quote)) < MIN_QUOTE_WORDS:
        return CitationOutcome(
            chunk.chunk_id, quote, False, document=chunk.document, reason="quote_too_short"
        )
    position = chunk.text.find(quote)
    if position >= 0:
        start = chunk.start + position
        return CitationOutcome(
            chunk.chunk_id,
            quote,
            True,
            "exact",
            chunk.document,
            start,
            start + len(quote),
            quote,
        )
    wanted = normalize(quote)
    haystack, origin = _normalized_with_map(chunk.text)
    position = haystack.find(wanted) if wanted else -1
    if position < 0:
        return CitationOutcome(
            chunk.chunk_id, quote, False, document=chunk.document, reason="quote_not_found"
        )
    first = origin[position]
    last = origin[position + len(wanted) - 1] + 1
    return CitationOutcome(
        chunk.chunk_id,
        quote,
        True,
        "normalized",
        chunk.document,
        chunk.start + first,
        chunk.start + last,
        chunk.text[first:last],
    )


def claims_of(answer: Any) -> tuple[list[Any], list[str]]:
    """The claims of an answer (``{"claims": [...]}`` or a bare list) and shape problems."""
    if isinstance(answer, Mapping):
        answer = answer.get("claims")
    if not isinstance(answer, list):
        return [], [f"the answer is not a list of claims (got {type(answer).__name__})"]
    return answer, []


def _check_claims(
    claims: Iterable[Any], lookup: ChunkLookup
) -> tuple[list[ClaimOutcome], list[str]]:
    outcomes: list[ClaimOutcome] = []
    problems: list[str] = []
    for number, item in enumerate(claims, start=1):
        if not isinstance(item, Mapping) or not isinstance(item.get("claim"), str):
            problems.append(f"claim {number} is not an object with a text 'claim'")
            continue
        citations = item.get("citations")
        checked: list[CitationOutcome] = []
        for citation in citations if isinstance(citations, list) else []:
            chunk_id = citation.get("chunk_id") if isinstance(citation, Mapping) else None
            quote = citation.get("quote") if isinstance(citation, Mapping) else None
            if not isinstance(chunk_id, str) or not isinstance(quote, str):
                checked.append(
                    CitationOutcome(str(chunk_id), str(quote), False, reason="not_a_citation")
                )
                continue
            chunk = lookup(chunk_id)
            if chunk is None:
                checked.append(CitationOutcome(chunk_id, quote, False, reason="unknown_chunk"))
                continue
            checked.append(locate(quote, chunk))
        outcomes.append(ClaimOutcome(item["claim"], tuple(checked)))
    return outcomes, problems


def verify_answer(answer: Any, lookup: ChunkLookup) -> AnswerVerification:
    """Check every citation of a subquestion's answer against the chunks.

    Args:
        answer: the ``llm`` step's result (:data:`ANSWER_SCHEMA`, or a bare list of claims).
        lookup: the chunk of an id, or None (``Corpus.chunk``, or the chunks a run read).

    Returns:
        Each claim with its checked citations; ``supported`` is the check's verdict.
    """
    claims, problems = claims_of(answer)
    outcomes, more = _check_claims(claims, lookup)
    return AnswerVerification(tuple(outcomes), tuple(problems + more))


def verify_synthesis(
    synthesis: Any, answers: Iterable[Any], lookup: ChunkLookup
) -> AnswerVerification:
    """Check the synthesis: each of its citations found in its chunk *and* among the
    citations that passed in ``answers`` (same chunk id, same normalised quote).

    Args:
        synthesis: the synthesis step's result (:data:`SYNTHESIS_SCHEMA`).
        answers: the subquestion answers it draws on (each re-checked here: only their
            supported citations count as passed).
        lookup: as for :func:`verify_answer`.

    Returns:
        Each synthesis claim checked; a citation found in its chunk but not among the
        passed ones is unsupported with reason ``not_cited_in_answers``.
    """
    passed: set[tuple[str, str]] = set()
    for answer in answers:
        for item in verify_answer(answer, lookup).citations():
            if item.supported:
                passed.add((item.chunk_id, normalize(item.quote)))
    problems: list[str] = []
    if isinstance(synthesis, Mapping) and not isinstance(synthesis.get("answer"), str):
        problems.append("the synthesis has no text 'answer'")
    claims, shape = claims_of(synthesis)
    outcomes, more = _check_claims(claims, lookup)
    checked: list[ClaimOutcome] = []
    for claim in outcomes:
        items = tuple(
            item
            if not item.supported or (item.chunk_id, normalize(item.quote)) in passed
            else dataclasses.replace(
                item,
                supported=False,
                match=None,
                start=None,
                end=None,
                text=None,
                reason="not_cited_in_answers",
            )
            for item in claim.citations
        )
        checked.append(ClaimOutcome(claim.claim, items))
    return AnswerVerification(tuple(checked), tuple(problems + shape + more))
