"""environment_secrets is remembered while the environment stays the same, and read again as
soon as anything in it changes (a value, a name, one added or removed)."""

from __future__ import annotations

import os

import pytest

from plandag.store.sealing import sealed_json
from plandag.trace.redact import environment_secrets, scrub_secrets


def _ours(found: dict[str, str]) -> dict[str, str]:
    return {value: name for value, name in found.items() if name.startswith("PLANDAG_TEST_")}


def test_each_change_is_seen_at_the_next_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLANDAG_TEST_ONE_TOKEN", "first-value-1")
    assert _ours(environment_secrets()) == {"first-value-1": "PLANDAG_TEST_ONE_TOKEN"}
    assert _ours(environment_secrets()) == {"first-value-1": "PLANDAG_TEST_ONE_TOKEN"}
    # the same names, one value changed
    monkeypatch.setenv("PLANDAG_TEST_ONE_TOKEN", "second-value-2")
    assert _ours(environment_secrets()) == {"second-value-2": "PLANDAG_TEST_ONE_TOKEN"}
    # a name added
    monkeypatch.setenv("PLANDAG_TEST_TWO_PASSWORD", "a-longer-value-3")
    assert _ours(environment_secrets()) == {
        "a-longer-value-3": "PLANDAG_TEST_TWO_PASSWORD",
        "second-value-2": "PLANDAG_TEST_ONE_TOKEN",
    }
    # one removed and another added: as many variables as before
    monkeypatch.delenv("PLANDAG_TEST_ONE_TOKEN")
    monkeypatch.setenv("PLANDAG_TEST_THREE_SECRET", "third-value-4")
    assert _ours(environment_secrets()) == {
        "a-longer-value-3": "PLANDAG_TEST_TWO_PASSWORD",
        "third-value-4": "PLANDAG_TEST_THREE_SECRET",
    }
    # a name that is not a secret's, a value too short: never
    monkeypatch.setenv("PLANDAG_TEST_HOME", "not-a-secret-5")
    monkeypatch.setenv("PLANDAG_TEST_SHORT_TOKEN", "short")
    assert "not-a-secret-5" not in environment_secrets()
    assert "short" not in environment_secrets()


def test_the_answer_is_a_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLANDAG_TEST_ONE_TOKEN", "first-value-1")
    environment_secrets().clear()
    assert _ours(environment_secrets()) == {"first-value-1": "PLANDAG_TEST_ONE_TOKEN"}


def test_an_environment_that_is_a_plain_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "environ", {"PLANDAG_TEST_ONE_TOKEN": "plain-value-1"})
    assert environment_secrets() == {"plain-value-1": "PLANDAG_TEST_ONE_TOKEN"}
    os.environ["PLANDAG_TEST_ONE_TOKEN"] = "plain-value-2"
    assert environment_secrets() == {"plain-value-2": "PLANDAG_TEST_ONE_TOKEN"}


def test_a_secret_set_between_two_records_is_sealed_and_masked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    record = {"note": "pay with key-abcdef-123 today"}
    assert sealed_json(record) == '{"note":"pay with key-abcdef-123 today"}'
    monkeypatch.setenv("PLANDAG_TEST_PAY_API_KEY", "key-abcdef-123")
    assert sealed_json(record) == (
        '{"note":{"$env_text":["pay with ",{"$env":"PLANDAG_TEST_PAY_API_KEY"}," today"]}}'
    )
    assert scrub_secrets(record) == {"note": "pay with [secret] today"}
    monkeypatch.delenv("PLANDAG_TEST_PAY_API_KEY")
    assert sealed_json(record) == '{"note":"pay with key-abcdef-123 today"}'
