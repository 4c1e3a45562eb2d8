"""A capital I with a dot (U+0130) in a secret's name: ``re.IGNORECASE`` reads it as ``i``
while ``str.lower`` breaks the word with a combining dot, so the cheap word tests must not
let such a text skip the rules that mask it."""

from __future__ import annotations

import json

from plandag.store.sealing import seal, sealed_json
from plandag.trace.redact import Redactor, may_hold_word, scrub_secrets

TEXT = "authorİzation: abcdefghijkl"


def test_the_rules_mask_it() -> None:
    assert scrub_secrets({"x": TEXT}) == {"x": "authorİzation: [secret]"}


def test_the_word_tests_do_not_skip_it() -> None:
    assert may_hold_word(TEXT, ["authorization"])
    assert not Redactor().keeps_json_text(json.dumps({"x": TEXT}, ensure_ascii=False))


def test_the_store_seals_it_as_seal_does() -> None:
    expected = json.dumps(seal({"x": TEXT}, {}), ensure_ascii=False, separators=(",", ":"))
    assert sealed_json({"x": TEXT}, {}) == expected
    assert "abcdefghijkl" not in sealed_json({"x": TEXT}, {})
