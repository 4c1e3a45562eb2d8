"""``Redactor.keeps_json_text`` tells from a value's JSON text alone whether masking keeps
the value: never True for a value the redactor changes, the environment's secret values
read again when the environment changes (a secret added mid-run counts from then on)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plandag.trace.redact import CASE_LOOKALIKES, Redactor

# environment secrets whose JSON form differs from the value (a quote, a backslash, a
# control character) and one that does not
SECRETS = {
    "JSON_TEXT_CHECK_API_KEY": "plain-secret-3c9e71",
    "JSON_TEXT_CHECK_TOKEN": 'quoted"secret\\value-88',
    "JSON_TEXT_CHECK_PASSWORD": "tab\tsecret-ünï-41",
}

_PIECES = [
    "plain",
    "ok",
    " ",
    "sk-ant-abcdefgh1234",
    "Bearer abcDEF123456789",
    "password=hunter22",
    "https://u:pw123456@h.example/x",
    "\u0131",
    "\u0130",
    '"',
    "\\",
    "\t",
    *SECRETS.values(),
    "plain-secret",
    "secret\\value",
]
texts = st.lists(st.sampled_from(_PIECES), max_size=4).map("".join)
values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), texts),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.one_of(st.just("x"), texts), inner)
    ),
    max_leaves=8,
)


@pytest.fixture(autouse=True)
def _secrets() -> Iterator[None]:
    previous = {name: os.environ.get(name) for name in SECRETS}
    os.environ.update(SECRETS)
    yield
    for name, value in previous.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _told_from_the_text(redactor: Redactor, text: str) -> bool:
    """The answer spelled out: no lookalike letter, no word, no URL password, and no
    environment secret value's JSON form in ``text``."""
    from plandag.trace import redact

    lowered = text.lower()
    return not (
        any(letter in text for letter in CASE_LOOKALIKES)
        or any(word in lowered for word in redact._JSON_TEXT_WORDS)
        or redact.holds_url_password(text)
        or any(
            json.dumps(value, ensure_ascii=False)[1:-1] in text
            for value in redact._environment_secrets()
        )
    )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=values)
def test_the_text_check_answers_as_spelled_out_and_never_for_a_changed_value(value: object) -> None:
    redactor = Redactor()
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    kept = redactor.keeps_json_text(text)
    assert kept == _told_from_the_text(redactor, text)
    if kept:
        assert redactor(value) == value
    assert redactor.keeps_json_text(text) == kept  # asked again: the same


def test_a_secret_added_to_the_environment_counts_from_then_on() -> None:
    redactor = Redactor()
    late = "late-json-value-6a0f7b"
    text = json.dumps({"said": f"it is {late}"}, ensure_ascii=False, separators=(",", ":"))
    assert redactor.keeps_json_text(text)
    os.environ["JSON_TEXT_CHECK_LATE_API_KEY"] = late
    try:
        assert not redactor.keeps_json_text(text)
        assert redactor({"said": f"it is {late}"}) == {"said": "it is [secret]"}
    finally:
        os.environ.pop("JSON_TEXT_CHECK_LATE_API_KEY")
    assert redactor.keeps_json_text(text)
