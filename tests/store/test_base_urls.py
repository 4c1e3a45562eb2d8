"""A model server's URL with a user and password is stored without them, and put back
from the URL given again or from the environment variable that held the password."""

from __future__ import annotations

import pytest

from plandag.errors import InputError
from plandag.runs.options import RunOptions
from plandag.store.base_urls import (
    CREDENTIALS_KEY,
    restored_model_options,
    split_userinfo,
    stored_model_options,
)

URL = "http://127.0.0.1:8000/v1"


def options(base_url: str | None) -> dict[str, object]:
    return {
        "tools": [],
        "planner": {"provider": "anthropic", "model": "m", "base_url": base_url},
        "executor": {"provider": "anthropic", "model": "m", "base_url": base_url},
    }


def test_split_userinfo() -> None:
    assert split_userinfo("http://alice:pw@127.0.0.1:8000/v1") == (URL, "alice:pw")
    assert split_userinfo("http://a@b:c@host/") == ("http://host/", "a@b:c")
    assert split_userinfo(URL) == (URL, None)
    assert split_userinfo("http://[::1") == ("http://[::1", None)  # not a URL Python splits


def test_the_store_keeps_the_url_without_user_and_password() -> None:
    stored = stored_model_options(options("http://alice:pw-123@127.0.0.1:8000/v1"), {})
    for name in ("planner", "executor"):
        assert stored[name]["base_url"] == URL
        assert stored[name][CREDENTIALS_KEY] == {"user": "alice", "secret_from": None}
    assert "pw-123" not in repr(stored)
    assert stored_model_options(options(URL), {}) == options(URL)
    assert stored_model_options(options(None), {}) == options(None)


def test_run_options_are_stored_so() -> None:
    run = RunOptions(executor={"provider": "anthropic", "base_url": "http://t0ken@h/"})
    assert run.as_json()["executor"] == {
        "provider": "anthropic",
        "base_url": "http://h/",
        CREDENTIALS_KEY: {"user": None, "secret_from": None},
    }
    assert run.executor is not None
    assert run.executor["base_url"] == "http://t0ken@h/"  # this segment still has it


def test_a_password_held_by_a_secret_variable_comes_back_from_the_environment() -> None:
    stored = stored_model_options(
        options("http://alice:proxy-pw-1@127.0.0.1:8000/v1"), {"proxy-pw-1": "PROXY_PASSWORD"}
    )
    assert stored["planner"][CREDENTIALS_KEY] == {
        "user": "alice",
        "secret_from": "PROXY_PASSWORD",
    }
    restored = restored_model_options(stored, environ={"PROXY_PASSWORD": "proxy-pw-1"})
    assert restored == options("http://alice:proxy-pw-1@127.0.0.1:8000/v1")
    with pytest.raises(InputError, match="set PROXY_PASSWORD to the same value"):
        restored_model_options(stored, run_id="r1", environ={})


def test_a_password_from_nowhere_is_asked_for() -> None:
    stored = stored_model_options(options("http://alice:pw@127.0.0.1:8000/v1"), {})
    with pytest.raises(InputError) as raised:
        restored_model_options(stored, run_id="r1", environ={})
    assert str(raised.value) == (
        f"run r1: its model server's URL {URL} was given with a user and password, which "
        "the run store does not keep; give them again: --base-url "
        "http://<user>:<password>@127.0.0.1:8000/v1"
    )
    again = "http://alice:pw@127.0.0.1:8000/v1/"
    assert restored_model_options(stored, again, environ={}) == options(again)


def test_the_url_given_again_must_be_the_runs() -> None:
    stored = stored_model_options(options("http://alice:pw@127.0.0.1:8000/v1"), {})
    with pytest.raises(InputError, match="is not the run's model server"):
        restored_model_options(stored, "http://alice:pw@127.0.0.1:9999/v1", environ={})
    with pytest.raises(InputError, match="calls its provider's own API"):
        restored_model_options(options(None), "http://alice:pw@127.0.0.1:8000/v1", environ={})
    # a run without credentials is given back as it is
    assert restored_model_options(options(URL), environ={}) == options(URL)


def test_a_variable_that_is_no_secrets_name_is_never_read() -> None:
    stored = options(URL)
    stored["executor"] = {
        "base_url": URL,
        CREDENTIALS_KEY: {"user": "alice", "secret_from": "HOME"},
    }
    with pytest.raises(InputError, match="'HOME', which is not a secret's name"):
        restored_model_options(stored, environ={"HOME": "/root"})
