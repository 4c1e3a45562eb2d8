"""Requests and tokens per minute to a model provider: a limiter shared by every model call
of the process, off by default.

A provider limits how many requests and tokens a key may send per minute, and answers
HTTP 429 past that (plandag then waits the ``Retry-After`` and tries again:
:mod:`plandag.models.calls`). A batch of many contracts, or a plan of many ``llm`` steps,
meets that limit head-on; with a limit of its own plandag spaces its calls instead, so the
provider's limit is met without 429s.

**The limit** (:class:`RateLimit`): ``rpm`` requests and ``tpm`` tokens per minute, each
optional (``--rpm``/``--tpm``, ``rpm``/``tpm`` in a ``[rate_limit]`` table of the
configuration). Each is a token bucket (the algorithm Anthropic documents for its own
limits, "Rate limits"): it holds at most one minute's worth and refills continuously at
``limit / 60`` per second, so a full minute's burst may go at once and the rate after it is
the limit. A call takes one request and its tokens: the prompt's estimate plus
``max_tokens`` (what the budget reserves), settled with the usage the provider reported
once the attempt ends (tokens not used go back, tokens used beyond it are owed).

**Shared**: one :class:`RateLimiter` per provider in the process (:func:`limiter_for`,
set up by :func:`configure_rate_limit`), used by every planner call and every ``llm`` or
``agent`` step; waiters are served in the order they came (:class:`anyio.Lock` is fair).
Worker processes of a batch each take an even share (:meth:`RateLimit.split`).

**Waiting is not a stall**: while a call waits for a slot, the observer of the current
context (:func:`plandag.brakes.waiting.observe_waits`: a run's scheduler) is told when the
wait starts and ends, so that its stall detector and its plan-relative time limit leave
that time out, as they do the time a person takes to decide. A call queued behind other
calls waiting for their slots waits too, from the moment it queues.

The limiter runs on anyio (asyncio or trio alike) and sleeps on an injectable
:class:`~plandag.brakes.clock.Clock`, so tests drive it with a virtual one. (The maintained
limiters looked at first are asyncio-only, ``aiolimiter`` among them, or test-and-set
counters without a wait, ``limits``; a token bucket is a few lines.)
"""

from __future__ import annotations

import dataclasses
import math

import anyio

from plandag.brakes.clock import Clock, SystemClock
from plandag.brakes.waiting import WaitObserver, current_observer

__all__ = [
    "PERIOD_S",
    "Permit",
    "RateLimit",
    "RateLimiter",
    "TokenBucket",
    "configure_rate_limit",
    "configured_rate_limit",
    "limiter_for",
]

PERIOD_S = 60.0
"""The period the limits are given for: one minute."""


@dataclasses.dataclass(frozen=True, slots=True)
class RateLimit:
    """Requests and tokens per minute to one provider; None: no limit of that kind.

    Raises:
        ValueError: a limit that is not a finite number > 0.
    """

    rpm: float | None = None
    tpm: float | None = None

    def __post_init__(self) -> None:
        for name in ("rpm", "tpm"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not math.isfinite(value) or value <= 0
            ):
                raise ValueError(f"{name} must be a finite number > 0, not {value!r}")

    @property
    def active(self) -> bool:
        """Whether any limit is set."""
        return self.rpm is not None or self.tpm is not None

    def split(self, parts: int) -> RateLimit:
        """The share of one of ``parts`` workers (processes) that split this limit evenly.

        Raises:
            ValueError: ``parts`` < 1.
        """
        if parts < 1:
            raise ValueError(f"parts must be >= 1, not {parts}")
        return RateLimit(
            None if self.rpm is None else self.rpm / parts,
            None if self.tpm is None else self.tpm / parts,
        )

    def describe(self) -> str:
        """``50 rpm, 40,000 tpm``, ``50 rpm``, or ``none``."""
        parts = []
        if self.rpm is not None:
            parts.append(f"{self.rpm:,.4g} rpm")
        if self.tpm is not None:
            parts.append(f"{self.tpm:,.0f} tpm")
        return ", ".join(parts) or "none"


class TokenBucket:
    """A bucket of ``capacity`` that refills at ``rate`` per second, up to ``capacity``.

    Its level may go below zero (tokens owed, :meth:`take` of more than it holds); it then
    refills from there.

    Args:
        capacity: the most it holds (> 0); it starts full.
        rate: what it gains per second (> 0).
        now: the clock's time at the start, seconds.
    """

    def __init__(self, capacity: float, rate: float, now: float) -> None:
        self.capacity = capacity
        self.rate = rate
        self.level = capacity
        self.updated = now

    def _refill(self, now: float) -> None:
        if now > self.updated:
            self.level = min(self.capacity, self.level + (now - self.updated) * self.rate)
            self.updated = now

    def wait_s(self, amount: float, now: float) -> float:
        """Seconds until the bucket holds ``amount`` (at most its capacity); 0 when it does."""
        self._refill(now)
        missing = min(amount, self.capacity) - self.level
        return 0.0 if missing <= 0 else missing / self.rate

    def take(self, amount: float, now: float) -> None:
        """Take ``amount`` (the level may go below zero)."""
        self._refill(now)
        self.level -= amount

    def give(self, amount: float, now: float) -> None:
        """Put ``amount`` back (up to the capacity)."""
        self._refill(now)
        self.level = min(self.capacity, self.level + amount)


@dataclasses.dataclass
class Permit:
    """A call's slot: the tokens it took, settled once its usage is known."""

    limiter: RateLimiter
    tokens: int
    waited_s: float
    settled: bool = False

    def settle(self, used_tokens: int) -> None:
        """Settle with the tokens the provider reported (once; later calls do nothing)."""
        if not self.settled:
            self.settled = True
            self.limiter.settle(self.tokens, used_tokens)


class RateLimiter:
    """The requests and tokens per minute of one provider (module docstring).

    Args:
        limit: the limit.
        clock: where time is read and waits are slept (default the real clock).
        period_s: the period the limits are given for (60 s; tests and benchmarks use a
            shorter one to run a minute's pattern in seconds).

    Attributes:
        waits: how many acquisitions had to wait.
        waited_s: seconds waited in all.
    """

    def __init__(
        self, limit: RateLimit, *, clock: Clock | None = None, period_s: float = PERIOD_S
    ) -> None:
        self.limit = limit
        self.clock: Clock = clock if clock is not None else SystemClock()
        now = self.clock.monotonic()
        self._requests = (
            TokenBucket(limit.rpm, limit.rpm / period_s, now) if limit.rpm is not None else None
        )
        self._tokens = (
            TokenBucket(limit.tpm, limit.tpm / period_s, now) if limit.tpm is not None else None
        )
        self._lock = anyio.Lock()
        self.waits = 0
        self.waited_s = 0.0

    def _wait_s(self, tokens: int, now: float) -> float:
        wait = 0.0
        if self._requests is not None:
            wait = self._requests.wait_s(1, now)
        if self._tokens is not None:
            wait = max(wait, self._tokens.wait_s(tokens, now))
        return wait

    async def acquire(self, tokens: int) -> Permit:
        """Wait for a request slot and ``tokens`` tokens (a call asking for more than a
        minute's tokens waits for a full bucket, then owes the rest), take them and return
        the permit to settle. The observer of the current context
        (:func:`plandag.brakes.waiting.current_observer`) is told when the call starts
        waiting, for the bucket or behind earlier calls queued for theirs, and when it stops.

        Cancellable: a cancelled wait takes nothing.
        """
        tokens = max(int(tokens), 0)
        waited = 0.0
        waiting = False
        observer: WaitObserver | None = None

        def wait_begins() -> None:
            nonlocal waiting, observer
            if not waiting:
                waiting = True
                self.waits += 1
                observer = current_observer()
                if observer is not None:
                    observer.slot_wait_started()

        queued_at = self.clock.monotonic()
        if not self._lock.locked() and self._wait_s(tokens, queued_at) <= 0:
            self._take(tokens, queued_at)  # no call queued and a slot free: no wait at all
            return Permit(self, tokens, 0.0)
        try:
            if self._lock.locked():  # queued behind a call that waits for its slot
                wait_begins()
            async with self._lock:
                if waiting:
                    waited += max(self.clock.monotonic() - queued_at, 0.0)
                while True:
                    now = self.clock.monotonic()
                    wait = self._wait_s(tokens, now)
                    if wait <= 0:
                        break
                    wait_begins()
                    await self.clock.sleep(wait)
                    waited += max(self.clock.monotonic() - now, 0.0)
                self._take(tokens, self.clock.monotonic())
        finally:
            self.waited_s += waited
            if observer is not None:
                observer.slot_wait_ended()
        return Permit(self, tokens, waited)

    def _take(self, tokens: int, now: float) -> None:
        if self._requests is not None:
            self._requests.take(1, now)
        if self._tokens is not None:
            self._tokens.take(tokens, now)

    def settle(self, reserved: int, used: int) -> None:
        """Put back the tokens a call took and did not use, or take those it used beyond."""
        if self._tokens is None or used == reserved:
            return
        now = self.clock.monotonic()
        if used < reserved:
            self._tokens.give(reserved - used, now)
        else:
            self._tokens.take(used - reserved, now)


_limit = RateLimit()
_period_s = PERIOD_S
_clock: Clock | None = None
_limiters: dict[str, RateLimiter] = {}


def configure_rate_limit(
    limit: RateLimit | None, *, clock: Clock | None = None, period_s: float = PERIOD_S
) -> None:
    """Set the limit of every provider for the process (None or an empty limit: none);
    the limiters made before are dropped.

    Args:
        limit: the requests and tokens per minute of each provider.
        clock: the limiters' clock (default the real one).
        period_s: the period the limit is given for (default a minute).
    """
    global _limit, _clock, _period_s
    _limit = limit if limit is not None else RateLimit()
    _clock = clock
    _period_s = period_s
    _limiters.clear()


def configured_rate_limit() -> RateLimit:
    """The limit :func:`configure_rate_limit` set (empty when none)."""
    return _limit


def limiter_for(provider: str) -> RateLimiter | None:
    """The process's limiter of ``provider`` (made at first use), or None without a
    limit."""
    if not _limit.active:
        return None
    found = _limiters.get(provider)
    if found is None:
        found = _limiters[provider] = RateLimiter(_limit, clock=_clock, period_s=_period_s)
    return found
