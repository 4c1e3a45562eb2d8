"""The error tree and the transient/permanent rule (ARCHITECTURE.md, "Retry vs replan")."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from plandag.errors import (
    BoundaryError,
    CheckFailedError,
    FailureInfo,
    NotStartedError,
    PermanentStepError,
    PlandagError,
    StepError,
    StepTimeoutError,
    TransientStepError,
    classify_error,
    describe_failure,
    parse_retry_after,
)

NOW = 1_700_000_000.0  # Tue, 14 Nov 2023 22:13:20 GMT


def status_error(status: int, headers: dict[str, str] | None = None) -> httpx.HTTPStatusError:
    request = httpx.Request("GET", "https://api.example.test/items")
    response = httpx.Response(status, headers=headers, request=request)
    return httpx.HTTPStatusError(f"status {status}", request=request, response=response)


def test_tree() -> None:
    assert issubclass(NotStartedError, TransientStepError)
    assert issubclass(TransientStepError, StepError)
    assert issubclass(StepError, PlandagError)
    assert issubclass(StepTimeoutError, TimeoutError)
    assert issubclass(CheckFailedError, PermanentStepError)
    error = NotStartedError("connection refused by db:5432")
    assert error.before_effect is True
    assert error.retry_after is None
    assert error.reason == "tool_error"
    plain = TransientStepError("overloaded", retry_after=2.5, reason="overloaded")
    assert (plain.before_effect, plain.retry_after, plain.reason) == (False, 2.5, "overloaded")
    assert TransientStepError("x", before_effect=True).before_effect is True


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf")])
def test_retry_after_must_be_a_finite_delay(value: float) -> None:
    with pytest.raises(ValueError, match="retry_after must be a finite number >= 0"):
        TransientStepError("x", retry_after=value)


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (TransientStepError("busy"), "transient"),
        (StepTimeoutError("slow"), "transient"),
        (NotStartedError("refused"), "transient"),
        (PermanentStepError("bad input"), "permanent"),
        (CheckFailedError("regex", "no match"), "permanent"),
        (StepError("plain"), "permanent"),
        (TimeoutError(), "transient"),
        (ConnectionResetError(), "transient"),
        (ConnectionRefusedError(), "transient"),
        (BrokenPipeError(), "transient"),
        (httpx.ConnectError("refused"), "transient"),
        (httpx.ConnectTimeout("slow connect"), "transient"),
        (httpx.ReadTimeout("slow read"), "transient"),
        (httpx.RemoteProtocolError("peer closed"), "transient"),
        (httpx.UnsupportedProtocol("ftp://"), "permanent"),
        (httpx.LocalProtocolError("bad header"), "permanent"),
        (status_error(429), "transient"),
        (status_error(500), "transient"),
        (status_error(503), "transient"),
        (status_error(529), "transient"),
        (status_error(400), "permanent"),
        (status_error(404), "permanent"),
        (status_error(409), "permanent"),
        (ValueError("bad"), "permanent"),
        (KeyError("k"), "permanent"),
        (FileNotFoundError("a.xml"), "permanent"),
        (BoundaryError("outside", target="/etc/x"), "permanent"),
        (RuntimeError("bug"), "permanent"),
    ],
)
def test_classify_error(error: BaseException, kind: str) -> None:
    assert classify_error(error) == kind


def test_a_response_is_never_judged_by_its_truthiness() -> None:
    class FalsyResponse(httpx.Response):
        def __bool__(self) -> bool:
            return False

    request = httpx.Request("GET", "https://api.example.test/")
    response = FalsyResponse(503, headers={"Retry-After": "7"}, request=request)
    error = httpx.HTTPStatusError("503", request=request, response=response)
    assert classify_error(error) == "transient"
    info = describe_failure(error, now=NOW)
    assert info == FailureInfo("transient", error, before_effect=False, retry_after_s=7.0)


def test_before_effect() -> None:
    def before(error: BaseException) -> bool:
        info = describe_failure(error, now=NOW)
        assert info is not None
        return info.before_effect

    assert before(httpx.ConnectError("refused")) is True
    assert before(httpx.ConnectTimeout("no answer")) is True
    assert before(httpx.PoolTimeout("pool full")) is True
    assert before(ConnectionRefusedError()) is True
    assert before(NotStartedError("refused")) is True
    assert before(httpx.ReadTimeout("sent, no answer")) is False
    assert before(ConnectionResetError()) is False
    assert before(TimeoutError()) is False
    assert before(status_error(503)) is False


def test_retry_after_from_responses_and_errors() -> None:
    def wait(error: BaseException) -> float | None:
        info = describe_failure(error, now=NOW)
        assert info is not None
        return info.retry_after_s

    assert wait(status_error(429, {"Retry-After": "30"})) == 30.0
    assert wait(status_error(503, {"Retry-After": "Tue, 14 Nov 2023 22:14:20 GMT"})) == 60.0
    assert wait(status_error(429, {"retry-after-ms": "1500", "Retry-After": "2"})) == 1.5
    assert wait(status_error(429, {"Retry-After": "soon"})) is None
    assert wait(status_error(429)) is None
    assert wait(TransientStepError("busy", retry_after=4)) == 4.0
    assert wait(TimeoutError()) is None


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("120", 120.0),
        (" 3.5 ", 3.5),
        ("0", 0.0),
        ("-1", None),
        ("nan", None),
        ("", None),
        ("soon", None),
        ("Tue, 14 Nov 2023 22:14:20 GMT", 60.0),
        ("Tue, 14 Nov 2023 22:00:00 GMT", 0.0),
        ("Tue, 14 Nov 2023 22:14:20", None),  # no zone: not an HTTP date
    ],
)
def test_parse_retry_after(value: str, seconds: float | None) -> None:
    assert parse_retry_after(value, NOW) == seconds


def test_groups_are_unwrapped_to_their_real_leaf() -> None:
    bad = ValueError("bad input")
    late = TimeoutError("late")
    mixed = ExceptionGroup("steps", [late, ExceptionGroup("inner", [bad])])
    assert classify_error(mixed) == "permanent"
    info = describe_failure(mixed, now=NOW)
    assert info == FailureInfo("permanent", bad, before_effect=False, retry_after_s=None)

    refused = ConnectionRefusedError("refused")
    busy = TransientStepError("busy", retry_after=3, before_effect=True)
    transient = ExceptionGroup("steps", [refused, busy])
    info = describe_failure(transient, now=NOW)
    assert info == FailureInfo("transient", refused, before_effect=True, retry_after_s=3.0)


def test_cancellation_leaves_are_ignored() -> None:
    reset = ConnectionResetError("reset by peer")
    group = BaseExceptionGroup("task group", [asyncio.CancelledError(), reset])
    assert classify_error(group) == "transient"
    info = describe_failure(group, now=NOW)
    assert info == FailureInfo("transient", reset, before_effect=False, retry_after_s=None)
    only_cancelled = BaseExceptionGroup("task group", [asyncio.CancelledError()])
    assert classify_error(only_cancelled) == "permanent"
    assert describe_failure(only_cancelled, now=NOW) is None


def test_the_rule_can_be_replaced() -> None:
    def lenient(error: BaseException) -> Any:
        if isinstance(error, KeyError):
            return "transient"
        return classify_error(error)

    missing = KeyError("not there yet")
    info = describe_failure(missing, classify=lenient, now=NOW)
    assert info == FailureInfo("transient", missing, before_effect=False, retry_after_s=None)
    info = describe_failure(status_error(404), classify=lenient, now=NOW)
    assert info is not None
    assert info.kind == "permanent"


def test_a_mid_stream_overloaded_error_is_transient() -> None:
    """The SDK raises APIStatusError with status 200 for an `error` SSE event mid-stream."""
    import anthropic
    import httpx

    request = httpx.Request("POST", "http://127.0.0.1/v1/messages")
    response = httpx.Response(200, request=request)
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    error = anthropic.APIStatusError("Overloaded", response=response, body=body)
    assert getattr(error, "type", None) == "overloaded_error"
    assert classify_error(error) == "transient"
    invalid = {"type": "error", "error": {"type": "invalid_request_error", "message": "no"}}
    assert classify_error(anthropic.APIStatusError("no", response=response, body=invalid)) == (
        "permanent"
    )
