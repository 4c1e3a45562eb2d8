"""``may_need_sealing_by_rules`` and cookie pairs: a text holding the word ``cookie`` in any
case needs sealing exactly when the cookie-pair expression matches somewhere in it, wherever
the pair is among the word's occurrences (a product named "COOKIES" first, a pair after it),
in short and long texts, and with letters that only a case-insensitive match folds."""

from __future__ import annotations

import json
import random

from plandag.store.sealing import _COOKIE_PAIR, _SEALING_WORDS, may_need_sealing_by_rules
from plandag.trace.redact import CASE_LOOKALIKES, LONG_TEXT, holds_url_password
from tests.trace.random_texts import texts_with_pieces

# pieces holding the word in some case, some of them pairs (the word, then quotes or blanks,
# then ":", "=" or ","), one with the Kelvin sign (U+212A, lowered to "k") for its k
_PIECES = (
    "COOKIES ",
    "cookie jar ",
    "Cookie: ",
    "cookie=",
    "COO\u212aIE = ",
    'cookie", ',
    "cookie\\t:",
    "cookiecookie ",
    "Biscoito/cookie de aveia ",
    "ção ",
)


def _expected(text: str) -> bool:
    lowered = text.lower()
    return (
        any(letter in text for letter in CASE_LOOKALIKES)
        or any(word in lowered for word in _SEALING_WORDS)
        or ("cookie" in lowered and _COOKIE_PAIR.search(text) is not None)
        or holds_url_password(text)
    )


def _texts(rng: random.Random) -> list[str]:
    return texts_with_pieces(
        rng,
        (40, LONG_TEXT - 200, LONG_TEXT + 100),
        60,
        lambda rng: rng.choices(_PIECES, k=rng.randint(1, 4)),
    )


def test_a_cookie_pair_anywhere_among_the_words_occurrences_is_found() -> None:
    rng = random.Random(7)
    pairs = 0
    for text in _texts(rng):
        document = json.dumps({"xProd": text}, ensure_ascii=False, separators=(",", ":"))
        expected = _expected(document)
        pairs += expected
        assert may_need_sealing_by_rules(document) is expected, document
    assert 0 < pairs < 180  # both answers were asked for


def test_the_pair_after_a_word_that_is_no_pair() -> None:
    for filler in ("", "x" * LONG_TEXT):
        assert may_need_sealing_by_rules(f'{{"a":"COOKIES and {filler} cookie: 1"}}')
        assert may_need_sealing_by_rules(f'{{"a":"cookies {filler}","COO\u212aIE":"x"}}')
        assert not may_need_sealing_by_rules(f'{{"a":"COOKIES and {filler} cookie jar"}}')
        # a dotless or dotted i spells the word for a case-insensitive match: always sealed
        assert may_need_sealing_by_rules(f'{{"a":"COOK\u0130E {filler}"}}')
        assert may_need_sealing_by_rules(f'{{"a":"cook\u0131e {filler}"}}')
