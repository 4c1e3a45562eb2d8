"""Retries: backoff delays, what is retried and what not, per-step counters."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import httpx
import pytest

from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryDecision, RetryPolicy
from plandag.compiler import CompiledPlan, compile_plan
from plandag.errors import FailureInfo, NotStartedError, PermanentStepError, TransientStepError
from plandag.scheduler import RunLimits, events, run_plan_sync
from plandag.tools.base import Tool, ToolContext, tool
from plandag.tools.registry import Registry

NO_JITTER = RetryPolicy(retries=2, base_delay=0.5, jitter=False)


def compiled(steps: list[dict[str, Any]], *tools: Tool) -> CompiledPlan:
    return compile_plan({"steps": steps}, Registry(list(tools)))


def status_error(status: int, headers: dict[str, str] | None = None) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "https://api.example.test/v1/items")
    response = httpx.Response(status, headers=headers, request=request)
    return httpx.HTTPStatusError(f"HTTP {status}", request=request, response=response)


def scripted(*outcomes: BaseException | str, **options: Any) -> tuple[Tool, list[str]]:
    """A tool that raises or returns ``outcomes`` in turn, per step key; calls are logged."""
    calls: list[str] = []
    remaining: dict[str, list[BaseException | str]] = {}

    @tool(name="scripted", **options)
    def scripted_tool(key: str) -> str:
        calls.append(key)
        queue = remaining.setdefault(key, list(outcomes))
        outcome = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return scripted_tool, calls


# -- the policy alone ------------------------------------------------------------------------


def test_backoff_is_capped_exponential() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=3.0, jitter=False)
    assert [policy.backoff(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]
    assert policy.backoff(10_000) == 3.0


def test_full_jitter_is_repeatable_with_a_seed() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=30.0, random=random.Random(7))
    # random.Random(7).random() draws 0.32383276483316237, 0.15084917392450192,
    # 0.6509344730398537; the caps are 1, 2 and 4 seconds.
    assert [policy.backoff(n) for n in (1, 2, 3)] == [
        0.32383276483316237,
        0.30169834784900384,
        2.6037378921594148,
    ]


def test_decide() -> None:
    transient = FailureInfo("transient", TimeoutError(), before_effect=False, retry_after_s=None)
    permanent = FailureInfo("permanent", ValueError(), before_effect=False, retry_after_s=None)
    refused = FailureInfo("transient", NotStartedError("x"), before_effect=True, retry_after_s=None)
    policy = NO_JITTER

    def decide(failure: FailureInfo, **options: Any) -> RetryDecision:
        arguments: dict[str, Any] = {
            "attempts": 1,
            "waited_s": 0.0,
            "idempotent": True,
            "remaining_s": None,
        }
        arguments.update(options)
        return policy.decide(failure, **arguments)

    assert decide(transient) == RetryDecision(True, delay_s=0.5)
    assert decide(transient, attempts=2) == RetryDecision(True, delay_s=1.0)
    assert decide(transient, attempts=3).stop == "retries_exhausted"
    assert decide(permanent).stop == "permanent"
    assert decide(transient, idempotent=False).stop == "not_idempotent"
    assert decide(refused, idempotent=False) == RetryDecision(True, delay_s=0.5)
    assert decide(transient, waited_s=119.8).stop == "max_total_delay"
    assert decide(transient, remaining_s=0.4).stop == "deadline"
    assert decide(transient, remaining_s=0.6) == RetryDecision(True, delay_s=0.5)


@pytest.mark.parametrize(
    "options",
    [{"retries": -1}, {"base_delay": -0.1}, {"max_delay": float("inf")}, {"max_total_delay": -1}],
)
def test_policy_refuses_bad_numbers(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="must be"):
        RetryPolicy(**options)


# -- in a run --------------------------------------------------------------------------------


def test_transient_error_retried_with_the_right_delays_then_success() -> None:
    flaky, calls = scripted(TransientStepError("busy"), TimeoutError("slow"), "done")
    clock = VirtualClock()
    seen: list[events.Event] = []
    result = run_plan_sync(
        compiled([{"id": 1, "tool": "scripted", "args": {"key": "a"}}], flaky),
        retry=NO_JITTER,
        clock=clock,
        observers=[seen.append],
    )
    record = result.steps[1]
    assert result.status == "succeeded"
    assert record.result == "done"
    assert clock.sleeps == [0.5, 1.0]
    assert calls == ["a", "a", "a"]
    assert record.attempts == 3
    log = record.attempt_log
    assert [attempt.number for attempt in log] == [1, 2, 3]
    assert [attempt.delay_before_s for attempt in log] == [0.0, 0.5, 1.0]
    assert [attempt.retry for attempt in log] == ["retried", "retried", None]
    assert [attempt.kind for attempt in log] == ["transient", "transient", None]
    assert [attempt.reason for attempt in log] == ["tool_error", "timeout", None]
    assert [(a.error.type, a.error.message) for a in log if a.error is not None] == [
        ("TransientStepError", "busy"),
        ("TimeoutError", "slow"),
    ]
    assert [attempt.started_at for attempt in log] == [
        1_700_000_000.0,
        1_700_000_000.5,
        1_700_000_001.5,
    ]
    assert record.duration_s == 1.5
    retrying = [event for event in seen if isinstance(event, events.StepRetrying)]
    assert [(event.attempt, event.delay_s, event.reason) for event in retrying] == [
        (1, 0.5, "tool_error"),
        (2, 1.0, "timeout"),
    ]
    started = [event.attempt for event in seen if isinstance(event, events.StepStarted)]
    assert started == [1, 2, 3]


def test_seeded_jitter_gives_the_drawn_delays() -> None:
    flaky, _ = scripted(TimeoutError(), TimeoutError(), "ok")
    clock = VirtualClock()
    policy = RetryPolicy(retries=2, base_delay=1.0, random=random.Random(7))
    result = run_plan_sync(
        compiled([{"id": 1, "tool": "scripted", "args": {"key": "a"}}], flaky),
        retry=policy,
        clock=clock,
    )
    assert result.succeeded
    assert clock.sleeps == [0.32383276483316237, 0.30169834784900384]


def test_retries_exhausted() -> None:
    flaky, calls = scripted(TransientStepError("still busy"))
    clock = VirtualClock()
    result = run_plan_sync(
        compiled(
            [
                {"id": 1, "tool": "scripted", "args": {"key": "a"}},
                {"id": 2, "tool": "scripted", "args": {"key": "b"}, "depends_on": [1]},
            ],
            flaky,
        ),
        retry=NO_JITTER,
        clock=clock,
    )
    record = result.steps[1]
    assert result.status == "failed"
    assert (record.status, record.attempts, calls) == ("failed", 3, ["a", "a", "a"])
    assert record.detail == (
        "TransientStepError: still busy (gave up after 3 attempt(s) (2 retries))"
    )
    assert [attempt.retry for attempt in record.attempt_log] == [
        "retried",
        "retried",
        "retries_exhausted",
    ]
    assert result.steps[2].reason == "upstream_failed"


def test_permanent_error_is_not_retried() -> None:
    broken, calls = scripted(PermanentStepError("no such invoice", reason="not_found"))
    clock = VirtualClock()
    result = run_plan_sync(
        compiled([{"id": 1, "tool": "scripted", "args": {"key": "a"}}], broken),
        retry=NO_JITTER,
        clock=clock,
    )
    record = result.steps[1]
    assert (record.status, record.reason, record.attempts) == ("failed", "not_found", 1)
    assert record.detail == "PermanentStepError: no such invoice"
    assert record.attempt_log[0].retry == "permanent"
    assert calls == ["a"]
    assert clock.sleeps == []


def test_404_is_not_retried_and_503_is() -> None:
    @tool
    def fetch(path: str) -> str:
        attempts[path] += 1
        if path == "/missing":
            raise status_error(404)
        if attempts[path] == 1:
            raise status_error(503)
        return "body"

    attempts: Counter[str] = Counter()
    clock = VirtualClock()
    result = run_plan_sync(
        compiled(
            [
                {"id": 1, "tool": "fetch", "args": {"path": "/missing"}},
                {"id": 2, "tool": "fetch", "args": {"path": "/flaky"}},
            ],
            fetch,
        ),
        retry=NO_JITTER,
        clock=clock,
    )
    missing, flaky = result.steps[1], result.steps[2]
    assert (missing.status, missing.attempts) == ("failed", 1)
    assert missing.error is not None
    assert (missing.error.type, missing.error.message) == ("HTTPStatusError", "HTTP 404")
    assert missing.attempt_log[0].retry == "permanent"
    assert (flaky.status, flaky.attempts, flaky.result) == ("succeeded", 2, "body")
    assert attempts == Counter({"/missing": 1, "/flaky": 2})
    assert clock.sleeps == [0.5]


def test_non_idempotent_tool_is_not_retried_after_an_ambiguous_failure() -> None:
    effects: list[str] = []

    @tool(effects="write", idempotent=False)
    def send_payment(invoice: str) -> str:
        effects.append(invoice)  # the effect happens...
        raise ConnectionResetError("connection reset while reading the reply")  # ...then this

    clock = VirtualClock()
    result = run_plan_sync(
        compiled([{"id": 1, "tool": "send_payment", "args": {"invoice": "A-1"}}], send_payment),
        approve="auto",
        retry=NO_JITTER,
        clock=clock,
    )
    record = result.steps[1]
    assert effects == ["A-1"]
    assert (record.status, record.attempts) == ("failed", 1)
    assert record.attempt_log[0].retry == "not_idempotent"
    assert record.detail == (
        "ConnectionResetError: connection reset while reading the reply (not retried: the "
        "tool is not idempotent and the failure may have happened after it acted)"
    )
    assert clock.sleeps == []


def test_failure_known_to_precede_any_effect_is_retried_for_any_tool() -> None:
    effects: list[str] = []
    refusals = [NotStartedError("queue full, nothing sent"), ConnectionRefusedError("refused")]

    @tool(effects="write", idempotent=False)
    def send_payment(invoice: str) -> str:
        if refusals:
            raise refusals.pop(0)
        effects.append(invoice)
        return "sent"

    clock = VirtualClock()
    result = run_plan_sync(
        compiled([{"id": 1, "tool": "send_payment", "args": {"invoice": "A-1"}}], send_payment),
        approve="auto",
        retry=NO_JITTER,
        clock=clock,
    )
    assert result.succeeded
    assert effects == ["A-1"]
    assert result.steps[1].attempts == 3
    assert clock.sleeps == [0.5, 1.0]


def test_retry_after_is_honoured_within_the_remaining_time() -> None:
    limited, _ = scripted(status_error(429, {"Retry-After": "3"}), "ok")
    clock = VirtualClock()
    result = run_plan_sync(
        compiled([{"id": 1, "tool": "scripted", "args": {"key": "a"}}], limited),
        retry=NO_JITTER,
        clock=clock,
        limits=RunLimits(max_seconds=60),
    )
    assert result.succeeded
    assert clock.sleeps == [3.0]


def test_retry_after_as_an_http_date() -> None:
    # VirtualClock starts at 1_700_000_000 = Tue, 14 Nov 2023 22:13:20 GMT.
    limited, _ = scripted(status_error(503, {"Retry-After": "Tue, 14 Nov 2023 22:13:45 GMT"}), "ok")
    clock = VirtualClock()
    result = run_plan_sync(
        compiled([{"id": 1, "tool": "scripted", "args": {"key": "a"}}], limited),
        retry=NO_JITTER,
        clock=clock,
    )
    assert result.succeeded
    assert clock.sleeps == [25.0]


def test_retry_after_longer_than_the_remaining_time_is_not_waited() -> None:
    limited, calls = scripted(status_error(429, {"Retry-After": "30"}), "ok")
    clock = VirtualClock()
    result = run_plan_sync(
        compiled([{"id": 1, "tool": "scripted", "args": {"key": "a"}}], limited),
        retry=NO_JITTER,
        clock=clock,
        limits=RunLimits(max_seconds=10),
    )
    record = result.steps[1]
    assert clock.sleeps == []
    assert calls == ["a"]
    assert (result.status, record.status, record.attempts) == ("failed", "failed", 1)
    assert record.attempt_log[0].retry == "deadline"
    assert record.detail is not None
    assert record.detail.startswith("HTTPStatusError: HTTP 429 (not retried: the next attempt")


def test_parallel_steps_of_one_tool_keep_their_own_retries() -> None:
    flaky, calls = scripted(TimeoutError("slow"), "ok")
    clock = VirtualClock()
    policy = RetryPolicy(retries=1, base_delay=0.5, jitter=False)
    steps = [{"id": i, "tool": "scripted", "args": {"key": key}} for i, key in enumerate("abcd", 1)]
    result = run_plan_sync(compiled(steps, flaky), retry=policy, clock=clock)
    assert result.status == "succeeded"
    assert [result.steps[i].attempts for i in (1, 2, 3, 4)] == [2, 2, 2, 2]
    assert Counter(calls) == Counter({"a": 2, "b": 2, "c": 2, "d": 2})
    assert clock.sleeps == [0.5, 0.5, 0.5, 0.5]


def test_max_total_delay_stops_the_waiting() -> None:
    flaky, _ = scripted(TimeoutError("slow"))
    clock = VirtualClock()
    policy = RetryPolicy(retries=5, base_delay=0.5, max_total_delay=1.2, jitter=False)
    result = run_plan_sync(
        compiled([{"id": 1, "tool": "scripted", "args": {"key": "a"}}], flaky),
        retry=policy,
        clock=clock,
    )
    record = result.steps[1]
    assert clock.sleeps == [0.5]
    assert record.attempts == 2
    assert record.attempt_log[-1].retry == "max_total_delay"


def test_without_a_policy_nothing_is_retried() -> None:
    flaky, calls = scripted(TimeoutError("slow"), "ok")
    result = run_plan_sync(compiled([{"id": 1, "tool": "scripted", "args": {"key": "a"}}], flaky))
    record = result.steps[1]
    assert (record.status, record.attempts, calls) == ("failed", 1, ["a"])
    assert record.detail == "TimeoutError: slow"
    assert record.attempt_log[0].retry is None


def test_exception_groups_are_unwrapped() -> None:
    @tool
    def grouped(kind: str) -> str:
        if kind == "mixed":
            raise ExceptionGroup("workers", [TimeoutError("late"), ValueError("bad row 7")])
        raise ExceptionGroup("workers", [ConnectionResetError("reset"), TimeoutError("late")])

    clock = VirtualClock()
    result = run_plan_sync(
        compiled(
            [
                {"id": 1, "tool": "grouped", "args": {"kind": "mixed"}},
                {"id": 2, "tool": "grouped", "args": {"kind": "transient"}},
            ],
            grouped,
        ),
        retry=NO_JITTER,
        clock=clock,
    )
    mixed, transient = result.steps[1], result.steps[2]
    assert mixed.error is not None
    assert (mixed.error.type, mixed.error.message, mixed.attempts) == (
        "ValueError",
        "bad row 7",
        1,
    )
    assert mixed.detail == "ValueError: bad row 7"
    assert transient.error is not None
    assert (transient.error.type, transient.error.message, transient.attempts) == (
        "ConnectionResetError",
        "reset",
        3,
    )


def test_failed_attempts_are_charged() -> None:
    outcomes: list[BaseException | str] = [TimeoutError("slow"), TimeoutError("slow"), "ok"]

    @tool(cost_estimate_usd=0.2)
    def model_call(prompt: str, ctx: ToolContext) -> str:
        ctx.report_cost(usd=0.125, tokens=100)
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    result = run_plan_sync(
        compiled([{"id": 1, "tool": "model_call", "args": {"prompt": "hi"}}], model_call),
        retry=NO_JITTER,
        clock=VirtualClock(),
    )
    assert result.succeeded
    log = result.steps[1].attempt_log
    assert [(attempt.cost_usd, attempt.tokens) for attempt in log] == [(0.125, 100)] * 3
    assert (result.spent_usd, result.spent_tokens) == (0.375, 300)


def test_cancellation_leaves_of_a_tool_group_are_ignored() -> None:
    import asyncio

    raised: list[int] = []

    @tool
    def half_cancelled() -> str:
        raised.append(1)
        if len(raised) == 1:
            raise BaseExceptionGroup(
                "workers", [asyncio.CancelledError(), ConnectionResetError("reset")]
            )
        if len(raised) == 2:
            raise BaseExceptionGroup("workers", [asyncio.CancelledError()])
        return "unreachable"

    clock = VirtualClock()
    result = run_plan_sync(
        compiled([{"id": 1, "tool": "half_cancelled", "args": {}}], half_cancelled),
        retry=NO_JITTER,
        clock=clock,
    )
    record = result.steps[1]
    assert (record.status, record.attempts) == ("failed", 2)
    errors = [(a.error.type, a.kind, a.retry) for a in record.attempt_log if a.error is not None]
    assert errors == [
        ("ConnectionResetError", "transient", "retried"),
        ("CancelledError", "permanent", "permanent"),
    ]
    assert clock.sleeps == [0.5]
