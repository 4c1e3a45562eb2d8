"""One model call with plandag's brakes: retries, the cost budget, and a record per attempt
(ARCHITECTURE.md, "Execution", "Brakes").

:func:`call_with_retries` makes the attempts of one :class:`LLMRequest`:

1. **budget**: before each attempt, the estimated cost is *reserved* on the run's
   :class:`~plandag.brakes.budget.Budget`: the input tokens the provider's counting
   endpoint gives when the client has one (:class:`~plandag.models.base.TokenCounter`:
   Anthropic's ``POST /v1/messages/count_tokens``, asked once per call; a counting
   request is not an attempt, costs nothing and is not recorded), else the conservative
   estimate of :func:`~plandag.models.base.estimate_input_tokens` (the serialized
   request's UTF-8 bytes / 3), plus ``max_tokens`` output tokens, priced from the
   :class:`PriceTable` (the input at the cache-write price when that is dearer and the
   request lets the provider cache its prompt: the most an honest provider bills). A
   reservation waits while the budget holds new calls back (the slow start, a provider
   that reported more than its calls reserved: :meth:`Budget.acquire`); one that does not
   fit raises :class:`BudgetRefusedError` and no request is sent. After the
   attempt, success or failure, the reservation is *settled* with the real usage, so
   parallel calls never push spend past the cap by more than their estimates were wrong;
2. **the rate limit**: when the process has one for the client's provider
   (:mod:`plandag.models.ratelimit`, off by default), the attempt waits for a slot (one
   request and the estimate's tokens, settled with the usage reported afterwards);
3. **the call**: :meth:`LLMClient.complete`, or :meth:`LLMClient.stream` when ``on_text``
   is given (each delta is handed to it as it arrives, and the time to first token is
   measured);
4. **the deadline**: with ``deadline`` (the run's wall-clock cap on ``clock``), no attempt
   starts past it and no delay is waited that would end past it: the call fails at once
   with :class:`DeadlineReachedError` (a 429 whose Retry-After is longer than the time
   left is not slept);
5. **retries**: a failure goes through :func:`plandag.errors.describe_failure` and
   :meth:`RetryPolicy.decide` exactly as a tool's would (a model call has no effect
   besides its cost, so it counts as idempotent): transient errors are retried after the
   policy's delay, raised to the server's Retry-After, slept on the injected
   :class:`~plandag.brakes.clock.Clock`; permanent ones (4xx, truncation, refusal) are
   raised at once;
6. **records**: every attempt, failed ones included, appends a :class:`CallRecord` with the
   usage the provider reported (0 when it reported none), its cost and timings.

An unknown model costs 0.0 (``priced=False``): the dollar cap does not see it, and it is
capped by the token cap alone (brakes are on by default, tokens included: 200,000 per run,
:mod:`plandag.brakes`). It is never refused for having no price.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable

from plandag.brakes.budget import Budget, Reservation
from plandag.brakes.clock import Clock
from plandag.brakes.retry import RetryPolicy
from plandag.errors import describe_failure
from plandag.models import telemetry
from plandag.models.base import (
    BudgetRefusedError,
    DeadlineReachedError,
    LLMClient,
    LLMRequest,
    LLMResponse,
    UnusableResponseError,
    Usage,
    estimate_input_tokens,
)
from plandag.models.pricing import DEFAULT_PRICES, Price, PriceTable
from plandag.models.ratelimit import Permit, limiter_for

__all__ = ["CallRecord", "call_with_retries", "deadline_from", "estimate_cost", "rate_slot"]

logger = logging.getLogger("plandag.planner")


def deadline_from(clock: Clock, remaining_s: float | None) -> float | None:
    """The ``deadline`` of :func:`call_with_retries` for a run with ``remaining_s`` seconds
    left (a session's ``remaining_s``), on ``clock``; None without a deadline."""
    return None if remaining_s is None else clock.monotonic() + remaining_s


@dataclasses.dataclass(frozen=True, slots=True)
class CallRecord:
    """One attempt of one model call, for the planner's report and the run's trace.

    Attributes:
        provider: the client's provider (``anthropic``, ``openai``).
        model: the model asked for.
        attempt: 1 for the first attempt of the call, 2 for its first retry...
        streamed: the attempt was a stream.
        usage: tokens the provider reported (zeros when it reported none, say on an HTTP
            error).
        cost_usd: US dollars for ``usage`` at the table's price (0.0 when unpriced).
        priced: the model had a price in the table.
        started_at: wall-clock start, seconds since the epoch (from the clock in use).
        duration_s: seconds from sending to the answer or the failure.
        ttft_s: seconds from sending to the first text delta (streams only; None for a
            whole-answer call or a stream that failed before any text).
        stop_reason: the provider's stop reason, when an answer arrived.
        request_id: the provider's request id, when known.
        error: ``"ErrorType: message"`` for a failed attempt, else None.
        error_reason: the failure's ``reason`` code (``http_529``, ``max_tokens``...), else
            None.
        retry_delay_s: seconds waited before the next attempt when this one was retried,
            else None.
    """

    provider: str
    model: str
    attempt: int
    streamed: bool
    usage: Usage
    cost_usd: float
    priced: bool
    started_at: float
    duration_s: float
    ttft_s: float | None = None
    stop_reason: str | None = None
    request_id: str | None = None
    error: str | None = None
    error_reason: str | None = None
    retry_delay_s: float | None = None

    @property
    def input_tokens(self) -> int:
        """``usage.input_tokens``."""
        return self.usage.input_tokens

    @property
    def output_tokens(self) -> int:
        """``usage.output_tokens``."""
        return self.usage.output_tokens


def estimate_cost(
    request: LLMRequest, price: Price | None, input_tokens: int | None = None
) -> tuple[float, int]:
    """The amount reserved before an attempt of ``request``.

    Args:
        request: the call.
        price: the model's price, or None when unpriced (costs 0.0).
        input_tokens: the input tokens as the provider counted them, or None to estimate
            them (:func:`~plandag.models.base.estimate_input_tokens`).

    Returns:
        ``(usd, tokens)``: the input tokens plus ``max_tokens`` output tokens, and their
        cost in US dollars at ``price``: the input at the cache-write price when the
        request lets the provider cache its prompt (``request.cache`` other than
        ``"none"``) and that price is the dearer (Anthropic bills a 5-minute cache write
        at 1.25 x the input price), so that an honest bill never passes what was reserved.
    """
    counted = input_tokens if input_tokens is not None else estimate_input_tokens(request)
    usage = Usage(input_tokens=counted, output_tokens=request.max_tokens)
    if price is None:
        return 0.0, usage.total_tokens
    usd = price.cost(usage)
    if request.cache != "none":
        written = Usage(cache_creation_input_tokens=counted, output_tokens=request.max_tokens)
        usd = max(usd, price.cost(written))
    return usd, usage.total_tokens


async def call_with_retries(
    client: LLMClient,
    request: LLMRequest,
    policy: RetryPolicy,
    clock: Clock,
    budget: Budget | None = None,
    *,
    prices: PriceTable = DEFAULT_PRICES,
    records: list[CallRecord] | None = None,
    deadline: float | None = None,
    on_text: Callable[[str], Awaitable[None]] | None = None,
    on_restart: Callable[[], Awaitable[None]] | None = None,
) -> LLMResponse:
    """Make ``request``, retrying transient failures, within the budget; record each attempt.

    The steps are in the module docstring.

    Args:
        client: the provider (:class:`~plandag.models.anthropic.AnthropicClient`,
            :class:`~plandag.models.openai.OpenAICompatibleClient`...).
        request: the call.
        policy: retries and backoff (``retries`` retries after the first attempt).
        clock: where delays are slept and durations measured (a ``VirtualClock`` in tests).
        budget: the run's budget, reserved before and settled after every attempt; None
            for no cap and no accounting.
        prices: the price table (default :data:`~plandag.models.pricing.DEFAULT_PRICES`).
        records: a list every attempt's :class:`CallRecord` is appended to, or None.
        deadline: ``clock.monotonic()`` value after which no attempt may start (the
            run's wall-clock cap; :func:`deadline_from` makes it from the seconds left), or
            None.
        on_text: when given, the call is streamed and every text delta is awaited through
            it as it arrives.
        on_restart: awaited before a retry of a streamed call, so a consumer can drop the
            text of the failed attempt (the next attempt streams from the start).

    Returns:
        The whole :class:`LLMResponse` of the successful attempt.

    Raises:
        BudgetRefusedError: an attempt's estimated cost did not fit the budget (nothing was
            sent for it); reason ``budget``.
        DeadlineReachedError: the deadline has passed, or the next attempt would start
            past it (its delay is not waited); the last failure is its ``__cause__``.
        TruncatedResponseError: the output was cut at ``max_tokens`` (never retried).
        StepError: the last failure when the policy stops retrying (a note on it says why
            when retries ran out or the deadline or total delay was reached).
    """
    price = prices.lookup(
        request.model, provider=client.provider, base_url=getattr(client, "base_url", None)
    )
    counted = await _count_input_tokens(client, request) if budget is not None else None
    estimate_usd, estimate_tokens = estimate_cost(request, price, counted)
    streamed = on_text is not None
    attempts = 0
    waited_s = 0.0
    while True:
        attempts += 1
        if deadline is not None and clock.monotonic() >= deadline:
            raise DeadlineReachedError(
                f"{client.provider} {request.model}: call not sent: the run's deadline has passed"
            )
        reservation = await _reserve(
            budget, request, client.provider, estimate_usd, estimate_tokens
        )
        try:
            permit = await rate_slot(client, estimate_tokens)
        except BaseException:
            _settle(budget, reservation, price, Usage())
            raise
        started_at = clock.time()
        started = clock.monotonic()
        ttft_s: float | None = None
        partial = Usage()
        # the attempt's live span is current while the client calls: the SDK's own span
        # of the request nests under it (plandag.models.telemetry)
        span = telemetry.start_model_call(client, request, attempts, streamed=streamed)
        try:
            if on_text is None:
                response = await client.complete(request)
            else:
                async with client.stream(request) as stream:
                    try:
                        async for delta in stream:
                            if ttft_s is None:
                                ttft_s = clock.monotonic() - started
                            await on_text(delta)
                        response = await stream.final_response()
                    finally:
                        partial = stream.usage
        except BaseException as error:
            telemetry.end_model_call(span, None, error, ttft_s=ttft_s)
            duration_s = clock.monotonic() - started
            usage = error.response.usage if isinstance(error, UnusableResponseError) else partial
            if permit is not None:
                permit.settle(usage.total_tokens)
            cost_usd = _settle(budget, reservation, price, usage)
            failure = (
                describe_failure(error, now=clock.time()) if isinstance(error, Exception) else None
            )
            decision = None
            if failure is not None:
                decision = policy.decide(
                    failure,
                    attempts=attempts,
                    waited_s=waited_s,
                    idempotent=True,
                    remaining_s=None if deadline is None else deadline - clock.monotonic(),
                )
            retry = decision is not None and decision.retry
            if records is not None:
                records.append(
                    CallRecord(
                        provider=client.provider,
                        model=request.model,
                        attempt=attempts,
                        streamed=streamed,
                        usage=usage,
                        cost_usd=cost_usd,
                        priced=price is not None,
                        started_at=started_at,
                        duration_s=duration_s,
                        ttft_s=ttft_s,
                        stop_reason=(
                            error.response.stop_reason
                            if isinstance(error, UnusableResponseError)
                            else None
                        ),
                        error=f"{type(error).__name__}: {error}",
                        error_reason=getattr(error, "reason", None),
                        retry_delay_s=decision.delay_s if decision is not None and retry else None,
                    )
                )
            if decision is None or not decision.retry:
                if decision is not None and decision.stop == "deadline":
                    raise DeadlineReachedError(
                        f"{client.provider} {request.model}: {type(error).__name__}: {error} "
                        f"({decision.explanation}); the call failed at once"
                    ) from error
                if decision is not None and decision.stop not in (None, "permanent"):
                    error.add_note(f"{client.provider} {request.model}: {decision.explanation}")
                raise
            await clock.sleep(decision.delay_s)
            waited_s += decision.delay_s
            if on_restart is not None:
                await on_restart()
            continue
        telemetry.end_model_call(span, response, None, ttft_s=ttft_s)
        duration_s = clock.monotonic() - started
        if permit is not None:
            permit.settle(response.usage.total_tokens)
        cost_usd = _settle(budget, reservation, price, response.usage)
        if records is not None:
            records.append(
                CallRecord(
                    provider=client.provider,
                    model=request.model,
                    attempt=attempts,
                    streamed=streamed,
                    usage=response.usage,
                    cost_usd=cost_usd,
                    priced=price is not None,
                    started_at=started_at,
                    duration_s=duration_s,
                    ttft_s=ttft_s,
                    stop_reason=response.stop_reason,
                    request_id=response.request_id,
                )
            )
        return response


async def rate_slot(client: LLMClient, tokens: int) -> Permit | None:
    """Wait for a slot of the process's rate limit of ``client``'s provider
    (:func:`plandag.models.ratelimit.limiter_for`): one request and ``tokens`` tokens; None
    when no limit is set. Settle the permit with the usage once the attempt ends."""
    limiter = limiter_for(client.provider)
    return None if limiter is None else await limiter.acquire(tokens)


async def _count_input_tokens(client: LLMClient, request: LLMRequest) -> int | None:
    """The provider's count of the request's input tokens, or None when the client has no
    counting endpoint or the count failed (the estimate is used then)."""
    counter = getattr(client, "count_tokens", None)
    if counter is None:
        return None
    try:
        counted = await counter(request)
    except Exception as error:  # the count is an optimisation: never fail the call for it
        logger.debug(
            "%s %s: token count failed (%s); estimating", client.provider, request.model, error
        )
        return None
    return counted if isinstance(counted, int) and counted >= 0 else None


async def _reserve(
    budget: Budget | None, request: LLMRequest, provider: str, usd: float, tokens: int
) -> Reservation | None:
    """Hold the estimate on ``budget`` (:meth:`Budget.acquire`: it may wait for the calls
    in flight); raise :class:`BudgetRefusedError` when it won't fit."""
    if budget is None:
        return None
    reservation = await budget.acquire(usd, tokens)
    if reservation is None:
        refusal = budget.refusal(usd, tokens).removeprefix("not started: its ")
        raise BudgetRefusedError(
            f"{provider} {request.model}: call not sent: its {refusal}; the estimate is "
            f"the prompt's input tokens (counted by the provider, else its bytes / 3) plus "
            f"max_tokens={request.max_tokens} output tokens",
            estimated_usd=usd,
            estimated_tokens=tokens,
        )
    return reservation


def _settle(
    budget: Budget | None,
    reservation: Reservation | None,
    price: Price | None,
    usage: Usage,
) -> float:
    """Settle ``reservation`` with the real cost of ``usage``; return that cost, US dollars."""
    cost_usd = price.cost(usage) if price is not None else 0.0
    if budget is not None and reservation is not None:
        budget.settle(reservation, cost_usd, usage.total_tokens)
    return cost_usd
