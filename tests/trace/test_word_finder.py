"""``word_finder``: whether a text, lowered, holds a word; a long text's answers kept for
the next caller asking about the same text, so the store's sealing rules and the trace's
``keeps_json_text`` answer as they do looking at the text alone."""

from __future__ import annotations

import json
import random

from plandag.store.sealing import _COOKIE_PAIR, _SEALING_WORDS, may_need_sealing_by_rules
from plandag.trace.redact import (
    _JSON_TEXT_WORDS,
    CASE_LOOKALIKES,
    Redactor,
    holds_url_password,
    word_finder,
)
from tests.trace.random_texts import texts_with_pieces

_WORDS = (*_JSON_TEXT_WORDS, "$env", "$literal", "api", "j", "nothing", "\u2028")


def _texts(rng: random.Random) -> list[str]:
    pieces = ["plain ", "Bearer ", "BASIC ", "sk-", "EyJ", "Cookie: ", "$ENV", "ção ", "\u0131"]
    return texts_with_pieces(
        rng, (10, 4095, 4096, 9000), 6, lambda rng: rng.sample(pieces, rng.randint(0, 2))
    )


def test_the_answers_are_the_lowered_texts_whatever_asks_in_between() -> None:
    rng = random.Random(3)
    texts = _texts(rng)
    for _ in range(400):
        text = rng.choice(texts)
        word = rng.choice(_WORDS)
        assert word_finder(text)(word) == (word in text.lower())


def test_the_store_and_the_trace_answer_as_from_the_text_alone() -> None:
    rng = random.Random(4)
    redactor = Redactor()
    for text in _texts(rng):
        document = json.dumps({"steps": [{"args": {"text": text}}]}, ensure_ascii=False)
        lowered = document.lower()
        keeps = not (
            any(letter in document for letter in CASE_LOOKALIKES)
            or any(word in lowered for word in _JSON_TEXT_WORDS)
            or holds_url_password(document)
        )
        sealing = (
            any(letter in document for letter in CASE_LOOKALIKES)
            or any(word in lowered for word in _SEALING_WORDS)
            or ("cookie" in lowered and _COOKIE_PAIR.search(document) is not None)
            or holds_url_password(document)
        )
        # asked in turn about the same text object, in either order
        assert redactor.keeps_json_text(document) == keeps
        assert may_need_sealing_by_rules(document) == sealing
        assert redactor.keeps_json_text(document) == keeps
        fresh = document.encode().decode()
        assert may_need_sealing_by_rules(fresh) == sealing
        assert redactor.keeps_json_text(fresh) == keeps
