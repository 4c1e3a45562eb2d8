"""Words of a quote, counted the same way wherever a quote must be long enough to be evidence
(a contract's clause quotes, a research answer's citations).

A quote is split on whitespace into tokens; the punctuation around a token (quote marks,
parentheses, commas, a final full stop) is dropped. A token is a **word** when it holds a
letter and is not a number or a section mark:

* numbers do not count: ``12``, ``4.2``, ``1,250.00``, ``$5,000``, ``R$``, ordinals such
  as ``10th``, ``1st``, ``2º``;
* section marks do not count: ``§``, ``¶``, a section number with its subdivisions
  (``4.2(a)``, ``12(b)(iii)``), and an enumerator (``(a)``, ``(iv)``, ``b)``, ``ii.``);
* anything else with a letter is one word, whatever joins it: ``non-compete``,
  ``Party's``, ``d/b/a``.

So ``Section 4.2(a)`` is one word, not three, and ``§ 12`` is none. The **characters of
text** of a quote are those of its words joined by single spaces (numbers, section marks,
punctuation around tokens and runs of whitespace not counted).
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["quote_text_characters", "quote_words"]

_AROUND: Final = "\"'“”‘’«»()[]{}<>.,;:!?*_…"
_LETTER: Final = re.compile(r"[^\W\d_]")
_NUMBER: Final = re.compile(
    r"(?:R\$|[$€£¥])*[+-]?\d[\d.,/\-]*(?:st|nd|rd|th|º|ª|°|o|a|%)?", re.IGNORECASE
)
_CURRENCY: Final = re.compile(r"(?:R\$|US\$|[$€£¥])+")
_SECTION: Final = re.compile(
    r"(?:§+|¶+)?\d+(?:[.\-]\d+)*\.?(?:\([a-z0-9]{1,4}\))+|"  # 4.2(a), 12(b)(iii)
    r"\(?(?:[a-z]|[ivxlc]{1,6}|\d{1,3})\)|"  # (a), (iv), b), 3)
    r"(?:[a-z]|[ivxlc]{1,6})\.",  # a., iv.
    re.IGNORECASE,
)


def _word(token: str) -> str | None:
    """The token as a word, or None when it is a number, a section mark or no word."""
    token = token.rstrip(",;:")
    if _SECTION.fullmatch(token) or _NUMBER.fullmatch(token) or _CURRENCY.fullmatch(token):
        return None
    stripped = token.strip(_AROUND)
    if not stripped or _LETTER.search(stripped) is None:
        return None
    if _SECTION.fullmatch(stripped) or _NUMBER.fullmatch(stripped):
        return None
    return stripped


def quote_words(text: str) -> list[str]:
    """The words of ``text`` (see the module's docstring), in order.

    Args:
        text: a quote (any text).

    Returns:
        The words, each without the punctuation around it; [] for a text with none.
    """
    words = []
    for token in text.split():
        word = _word(token)
        if word is not None:
            words.append(word)
    return words


def quote_text_characters(text: str) -> int:
    """The characters of text of ``text``: its words (:func:`quote_words`) joined by single
    spaces, counted; 0 for a text with no word."""
    return len(" ".join(quote_words(text)))
