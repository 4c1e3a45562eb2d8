"""Secrets are masked in one scan per text, each text once: the same result as the rules
applied one at a time (``tests/trace/reference_redact.py``), for less work."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import plandag.trace.redact as redact
from plandag.trace.redact import (
    SECRET_MASK,
    SHORTEST_SECRET_TEXT,
    Redactor,
    scrub_secret_text,
    scrub_secret_values,
    scrub_secrets,
)
from tests.trace import reference_redact as reference

_ALPHANUMERIC = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_TOKEN = st.text(alphabet=_ALPHANUMERIC + "-_.", min_size=0, max_size=40)
_SECRET_VALUE = st.text(alphabet=_ALPHANUMERIC, min_size=8, max_size=24)

# What the rules look for, and what they must leave alone, as pieces of text.
_FRAGMENTS = st.one_of(
    st.builds(lambda token: f"sk-ant-{token}", _TOKEN),
    st.builds(lambda token: f"sk-{token}", _TOKEN),
    st.builds(
        lambda a, b, c: f"eyJ{a}.eyJ{b}.{c}",
        _TOKEN,
        _TOKEN,
        _TOKEN,
    ),
    st.builds(
        lambda scheme, blank, token: f"{scheme}{blank}{token}",
        st.sampled_from(["Bearer", "bearer", "BASIC", "Basic", "baſic", "beaRer"]),
        st.sampled_from([" ", "\t", "  ", ""]),
        st.one_of(_TOKEN, st.sampled_from(["authentication", "password", "Token"])),
    ),
    st.builds(
        lambda name, separator, value: f"{name}{separator}{value}",
        st.sampled_from(
            [
                "token",
                "api_key",
                "X-Api-Key",
                "Authorization",
                "access-token",
                "client_secret",
                "password",
                "passwd",
                "ſecret",
                "cookie",
                "Set-Cookie",
                "input_tokens",
                "secretary",
            ]
        ),
        st.sampled_from(["=", ": ", '": "', "':'", '", "', "=", ":", " = "]),
        st.one_of(_TOKEN, st.just("[secret]"), st.just("Bearer abc")),
    ),
    st.builds(
        lambda user, password, host: f"https://{user}:{password}@{host}/path",
        st.text(alphabet=_ALPHANUMERIC + "=%", max_size=8),
        st.text(alphabet=_ALPHANUMERIC + ",;&@'", max_size=12),
        st.sampled_from(["example.test", "h", "a@b"]),
    ),
    st.text(alphabet=_ALPHANUMERIC + " \n\t:=,;&'\"[]{}()@/\\-_.ıſİK", max_size=30),
)


@st.composite
def _texts_with_secrets(draw: st.DrawFn) -> tuple[str, tuple[str, ...]]:
    environment = tuple(draw(st.lists(_SECRET_VALUE, max_size=3, unique=True)))
    pieces = draw(st.lists(st.one_of(_FRAGMENTS, st.sampled_from(environment or ("x",)))))
    separators = draw(
        st.lists(st.sampled_from(["", " ", "\n", ", ", "; ", "&", '"']), min_size=len(pieces))
    )
    text = "".join(piece + separator for piece, separator in zip(pieces, separators, strict=False))
    ordered = tuple(sorted(environment, key=lambda value: (-len(value), value)))
    return text, ordered


@given(_texts_with_secrets())
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_one_scan_masks_text_as_the_rules_one_at_a_time(case: tuple[str, tuple[str, ...]]) -> None:
    text, environment = case
    assert scrub_secret_text(text, environment) == reference.scrub_secret_text(text, environment)


@given(_texts_with_secrets())
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_one_scan_masks_values_as_the_rules_one_at_a_time(
    case: tuple[str, tuple[str, ...]],
) -> None:
    text, environment = case
    masked = scrub_secret_values(text, environment)
    assert masked == reference.scrub_secret_values(text, environment)


@given(_texts_with_secrets())
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_text_scrubbed_again_gives_the_same_answer(case: tuple[str, tuple[str, ...]]) -> None:
    text, environment = case
    first = scrub_secret_text(text, environment)
    assert scrub_secret_text(text, environment) == first  # remembered
    assert scrub_secret_text(first, environment) == reference.scrub_secret_text(first, environment)


@given(st.text(max_size=SHORTEST_SECRET_TEXT - 1))
@settings(max_examples=500, deadline=None)
def test_no_rule_changes_a_text_shorter_than_the_shortest_secret_text(text: str) -> None:
    assert reference.scrub_secret_text(text, ()) == text
    assert reference.scrub_secret_values(text, ()) == text


def test_the_shortest_secret_text_is_a_url_password_of_one_character() -> None:
    assert len("://:p@") == SHORTEST_SECRET_TEXT
    assert reference.scrub_secret_text("://:p@", ()) == f"://:{SECRET_MASK}@"
    assert scrub_secret_text("://:p@") == f"://:{SECRET_MASK}@"


@given(st.lists(st.text(alphabet=_ALPHANUMERIC, min_size=8, max_size=12), min_size=1))
@settings(max_examples=100, deadline=None)
def test_a_secret_value_is_masked_in_a_string_of_any_length(values: list[str]) -> None:
    value = values[0]
    assume(len(value) >= 8)
    assert scrub_secret_text(value, (value,)) == SECRET_MASK
    assert scrub_secret_values(f"a{value}b", (value,)) == f"a{SECRET_MASK}b"


@pytest.fixture
def secret_environment(monkeypatch: pytest.MonkeyPatch) -> str:
    value = "Zq8xWv3TnK2pLm7R"
    monkeypatch.setenv("PLANDAG_TEST_API_KEY", value)
    return value


def test_numbers_booleans_and_none_are_returned_as_they_are(secret_environment: str) -> None:
    digits = 1234567890123456789
    value: dict[str, Any] = {"count": digits, "ratio": 0.25, "ok": True, "none": None}
    scrubbed = scrub_secrets(value)
    assert scrubbed == value
    assert scrubbed["count"] is digits


def test_a_number_whose_digits_are_a_secret_value_stays_a_number(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PLANDAG_TEST_TOKEN", "1234567890123")
    assert scrub_secrets({"n": 1234567890123}) == {"n": 1234567890123}
    assert scrub_secrets({"n": "1234567890123"}) == {"n": SECRET_MASK}


def test_a_number_under_a_secret_named_key_is_still_masked() -> None:
    assert scrub_secrets({"password": 12345678, "pin_count": 3}) == {
        "password": SECRET_MASK,
        "pin_count": 3,
    }


def test_a_secret_value_is_masked_in_each_string_that_holds_it_whole(
    secret_environment: str,
) -> None:
    half = len(secret_environment) // 2
    value = {"whole": f"key {secret_environment}", "parts": [secret_environment[:half], "x"]}
    scrubbed = scrub_secrets(value)
    assert scrubbed["whole"] == f"key {SECRET_MASK}"
    assert scrubbed["parts"] == [secret_environment[:half], "x"]  # half a value is no value


def test_the_same_text_is_scanned_once(
    monkeypatch: pytest.MonkeyPatch, secret_environment: str
) -> None:
    seen: list[str] = []
    rules_in = redact._rules_in

    def counting(text: str, rules: int) -> int:
        seen.append(text)
        return rules_in(text, rules)

    monkeypatch.setattr(redact, "_rules_in", counting)
    text = "a result text that holds no credential at all, twice recorded"
    redactor = Redactor(personal=False)
    for _ in range(3):
        assert redactor({"note": text}) == {"note": text}
        assert scrub_secrets([text]) == [text]
    assert seen.count(text) == 1
    assert "note" not in seen  # a text shorter than any secret is not scanned either


def test_the_store_and_the_trace_scan_a_text_once(
    monkeypatch: pytest.MonkeyPatch, secret_environment: str
) -> None:
    from plandag.store.sealing import seal, sealed_json

    seen: list[str] = []
    rules_in = redact._rules_in

    def counting(text: str, rules: int) -> int:
        seen.append(text)
        return rules_in(text, rules)

    monkeypatch.setattr(redact, "_rules_in", counting)
    text = "the tool's answer, as recorded by the store: 42 rows, token count 7"
    assert seal({"answer": [text]}) == {"answer": [text]}
    assert Redactor()({"answer": [text]}) == {"answer": [text]}
    assert scrub_secrets(text) == text
    assert sealed_json({"answer": text, "x": "token: abc"}).startswith('{"answer":')
    assert seen.count(text) == 1


def test_a_remembered_text_is_masked_again_once_the_environment_holds_a_new_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = "connect with Hx72KdPq91Lz today"
    assert scrub_secrets(text) == text
    monkeypatch.setenv("PLANDAG_TEST_SECRET", "Hx72KdPq91Lz")
    assert scrub_secrets(text) == f"connect with {SECRET_MASK} today"
    assert Redactor()(text) == f"connect with {SECRET_MASK} today"


def test_a_long_text_is_masked_and_not_remembered(secret_environment: str) -> None:
    text = "x" * 5000 + f" token={secret_environment} " + "y" * 5000
    expected = "x" * 5000 + f" token={SECRET_MASK} " + "y" * 5000
    assert scrub_secrets(text) == expected
    assert scrub_secrets(text) == expected


def test_case_lookalike_letters_reach_the_case_insensitive_rules() -> None:
    assert scrub_secret_text("ſecret=hunter2x") == f"ſecret={SECRET_MASK}"
    assert scrub_secret_text("baſic dXNlcjpwYXNz") == f"baſic {SECRET_MASK}"
    assert scrub_secret_values("baſic dXNlcjpwYXNz") == f"baſic {SECRET_MASK}"


_KEYS = st.one_of(
    st.sampled_from(
        ["note", "token", "Authorization", "x-api-key", "input_tokens", "{urn:x}password", "id"]
    ),
    st.integers(min_value=0, max_value=3),
    _FRAGMENTS,
)
_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), _FRAGMENTS)
_NESTED = st.recursive(
    _LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(st.sampled_from(["Authorization", "Cookie", "accept"]), children),
        st.dictionaries(_KEYS, children, max_size=5),
    ),
    max_leaves=25,
)


def _same(first: Any, second: Any) -> bool:
    """``first == second``, a NaN equal to a NaN wherever it is (``==`` says a float NaN
    differs from itself, except inside a container holding the same object)."""
    if isinstance(first, float) and isinstance(second, float) and first != first:
        return second != second
    if isinstance(first, dict) and isinstance(second, dict):
        return first.keys() == second.keys() and all(_same(first[k], second[k]) for k in first)
    if isinstance(first, list | tuple) and isinstance(second, list | tuple):
        return (
            isinstance(first, list) == isinstance(second, list)
            and len(first) == len(second)
            and all(map(_same, first, second))
        )
    return bool(first == second)


def test_nan_is_the_same_as_nan_and_nothing_else() -> None:
    nan = float("nan")
    assert _same(nan, float("nan"))
    assert _same({"a": [nan]}, {"a": [float("nan")]})
    assert not _same(nan, 1.0)
    assert not _same(1.0, nan)
    assert not _same([nan], (nan,))
    assert not _same({"a": nan}, {"a": "nan"})
    assert not _same([1, nan], [1])


@given(_NESTED, st.lists(_SECRET_VALUE, max_size=2, unique=True))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(float("nan"), [])
def test_values_are_walked_as_one_item_at_a_time(value: Any, secrets: list[str]) -> None:
    environment = tuple(sorted(secrets, key=lambda secret: (-len(secret), secret)))
    walked = redact._Walk(secrets=True, personal=False, environment=environment).value(
        value, personal=False
    )
    assert _same(walked, reference.scrub_secrets(value, environment))


_PAIRS = st.builds(
    lambda name, item: [name, item],
    st.sampled_from(["Authorization", "Cookie", "accept"]),
    _LEAVES,
)
_PLAIN_NESTED = st.recursive(
    st.one_of(_LEAVES, _PAIRS),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(_KEYS, children, max_size=5)
    ),
    max_leaves=25,
)


@given(_PLAIN_NESTED, st.lists(_SECRET_VALUE, max_size=2, unique=True))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_value_kept_as_is_is_what_the_walk_and_the_conversion_give(
    value: Any, secrets: list[str]
) -> None:
    from plandag.scheduler.result import to_jsonable

    environment = tuple(sorted(secrets, key=lambda secret: (-len(secret), secret)))
    walked = redact._Walk(secrets=True, personal=False, environment=environment).value(
        value, personal=False
    )
    kept = redact._kept_as_is(value, redact._scrubber(environment), [redact._KEPT_ITEMS], 0)
    if kept:
        assert walked == value
        assert to_jsonable(value) == value
    elif walked == value and to_jsonable(value) == value and not _has_float(value):
        # only size, depth or a non-string key may send a plain value the long way
        assert not isinstance(value, dict | list) or _too_big_or_keyed(value)


def _has_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(_has_float(item) for item in value.values())
    if isinstance(value, list):
        return any(_has_float(item) for item in value)
    return False


def _too_big_or_keyed(value: Any, depth: int = 0) -> bool:
    if depth > redact._KEPT_DEPTH:
        return True
    if isinstance(value, dict):
        return any(not isinstance(key, str) for key in value) or any(
            _too_big_or_keyed(item, depth + 1) for item in value.values()
        )
    if isinstance(value, list):
        return any(_too_big_or_keyed(item, depth + 1) for item in value)
    return False


def test_a_redactor_keeps_a_plain_value_and_never_one_to_mask(monkeypatch: Any) -> None:
    monkeypatch.setenv("PLANDAG_TEST_SECRET", "Hx72KdPq91Lz")
    redactor = Redactor()
    assert redactor.kept_as_is({"step_id": 1, "tool": "noop_async", "reason": None})
    assert redactor.kept_as_is({"attempts": [{"start": 1.5, "error": None}], "token": None})
    assert not redactor.kept_as_is({"note": "key Hx72KdPq91Lz"})
    assert not redactor.kept_as_is({"token": "abc"})
    assert not redactor.kept_as_is({"headers": [["Authorization", "x"]]})
    assert not redactor.kept_as_is({"when": float("nan")})
    assert not redactor.kept_as_is({"pair": ("a", "b")})
    assert not redactor.kept_as_is({1: "a"})
    assert not Redactor(personal=True).kept_as_is({"step_id": 1})
    deep: Any = "x"
    for _ in range(redact._KEPT_DEPTH + 2):
        deep = [deep]
    assert not redactor.kept_as_is(deep)
    assert not redactor.kept_as_is(list(range(redact._KEPT_ITEMS + 1)))


def test_a_redactor_walks_alike_in_threads_and_after_pickling() -> None:
    import pickle
    import threading

    redactor = Redactor()
    value = {"note": "Bearer abcdefghijklmnopqrstuvwxyz", "n": [1, 2, {"token": "t"}]}
    expected = scrub_secrets(value)
    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(redactor(value))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert results == [expected] * 4
    assert pickle.loads(pickle.dumps(redactor))(value) == expected
