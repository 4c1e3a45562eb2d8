"""Long contracts cut into chunks on section and clause boundaries, every character kept.

A chunk is a ``[start, end)`` span of the extracted text. The chunks of a text are
contiguous and cover it exactly: the first starts at 0, each starts where the one before
ended, the last ends at ``len(text)``, so every character belongs to exactly one chunk and
an offset inside a chunk plus the chunk's ``start`` is an offset into the document.

Where a cut goes (:func:`chunk_text`): a text no longer than ``max_chars`` is one chunk.
Otherwise each cut is placed in the second half of the window of ``max_chars`` characters
after the previous cut, at the best boundary found there, the latest of its kind:

1. the start of a heading line: a section or clause heading (``ARTICLE``, ``Section 4``,
   ``CLÁUSULA``, ``Exhibit``, ``Annex``...), a numbered clause (``12.``, ``12.3``, ``(a)``),
   a Markdown heading (``#``);
2. a paragraph break (after a blank line) or a PDF page break (form feed);
3. a line end;
4. the end of a sentence (after ``.``, ``;``, ``:``, ``?`` or ``!`` and the spaces after it);
5. the end of a run of whitespace;
6. nowhere better: a hard cut at ``max_chars``.
"""

from __future__ import annotations

import bisect
import dataclasses
import re

__all__ = ["DEFAULT_CHUNK_CHARS", "Chunk", "chunk_text"]

DEFAULT_CHUNK_CHARS = 16_000
"""Characters per chunk at most: about 4,000 tokens at four characters a token, far
inside a small model's context, and long enough that a clause rarely straddles a cut."""

_HEADING = re.compile(
    r"^[ \t*#_>]*(?:"
    r"(?:article|section|clause|cl[áa]usula|cap[íi]tulo|chapter|schedule|exhibit|annex|anexo|"
    r"appendix|ap[êe]ndice|part|se[çc][ãa]o|t[íi]tulo)\b"
    r"|#{1,6}\s"
    r"|\d{1,3}(?:\.\d{1,3})*\.?[ \t]+\S"
    r"|\([a-z0-9]{1,4}\)[ \t]"
    r"|[IVXLC]{1,6}\.[ \t]"
    r")",
    re.IGNORECASE | re.MULTILINE,
)
_PARAGRAPH = re.compile(r"\n[ \t\r]*\n\s*|\f\s*")
_LINE = re.compile(r"\n")
_SENTENCE = re.compile(r"[.;:?!][\"'”’)\]]*\s+")
_SPACE = re.compile(r"\s+")


@dataclasses.dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk: the span ``[start, end)`` of the document's text.

    Attributes:
        index: 0-based position among the document's chunks.
        start: offset of its first character in the document's text.
        end: offset just past its last character.
    """

    index: int
    start: int
    end: int

    def as_dict(self, text: str) -> dict[str, int | str]:
        """``{"index", "start", "end", "text"}`` with the chunk's own text cut from ``text``."""
        return {
            "index": self.index,
            "start": self.start,
            "end": self.end,
            "text": text[self.start : self.end],
        }


def _boundaries(text: str) -> list[list[int]]:
    """Cut positions by preference (best first), each list sorted."""
    headings = [m.start() for m in _HEADING.finditer(text) if m.start() > 0]
    paragraphs = [m.end() for m in _PARAGRAPH.finditer(text)]
    lines = [m.end() for m in _LINE.finditer(text)]
    sentences = [m.end() for m in _SENTENCE.finditer(text)]
    spaces = [m.end() for m in _SPACE.finditer(text)]
    return [headings, paragraphs, lines, sentences, spaces]


def _latest(positions: list[int], low: int, high: int) -> int | None:
    """The largest position in ``[low, high]``, or None."""
    index = bisect.bisect_right(positions, high)
    if index and positions[index - 1] >= low:
        return positions[index - 1]
    return None


def chunk_text(text: str, max_chars: int = DEFAULT_CHUNK_CHARS) -> list[Chunk]:
    """Cut ``text`` into contiguous chunks of at most ``max_chars`` characters.

    Args:
        text: the document's extracted text.
        max_chars: the most characters a chunk holds (>= 2).

    Returns:
        The chunks in text order; together they cover ``text`` exactly (see the module's
        docstring for where cuts go). An empty text gives no chunk.

    Raises:
        ValueError: ``max_chars`` is below 2.
    """
    if max_chars < 2:
        raise ValueError(f"max_chars must be at least 2, not {max_chars}")
    if not text:
        return []
    kinds = _boundaries(text) if len(text) > max_chars else []
    chunks: list[Chunk] = []
    start = 0
    while len(text) - start > max_chars:
        low, high = start + max_chars // 2, start + max_chars
        cut = next(
            (found for kind in kinds if (found := _latest(kind, low, high)) is not None), high
        )
        chunks.append(Chunk(len(chunks), start, cut))
        start = cut
    chunks.append(Chunk(len(chunks), start, len(text)))
    return chunks
