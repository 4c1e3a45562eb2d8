"""The cost brake: reserve a step's estimated cost before it starts, settle the real cost
after (ARCHITECTURE.md, "Brakes", "Cost cap").

A reservation is granted only when the money spent, plus every reservation still open, plus
the new estimate stays within the cap, for dollars and for tokens alike. The runner is one
event loop, and the ledger's decisions do not await, so two steps starting at once cannot
both squeeze under the cap. Failed, retried and cancelled attempts are settled like any
other. A model call reserves its input tokens and ``max_tokens`` of output
(:func:`plandag.models.calls.estimate_cost`), the most an honest provider can bill it.

Dollars are kept as whole nanodollars (``round(usd * 1e9)``), so sums and comparisons are
exact: steps of $0.10 and $0.20 fit a cap of $0.30.

**A provider that reports more than was reserved.** Reservations bound what an honest
provider can bill; one that reports more (a proxy counting differently, a tokenizer unlike
the estimate, a faulty or hostile server) could take the spend past the cap by the factor of
its excess times everything in flight. Two rules keep that bounded:

* **the worst ratio**: every settlement of a reservation that held something compares the
  reported amount with it, per cap; the worst ratio seen (reported ÷ reserved,
  :attr:`Budget.worst_ratio`, 1.0 until a settlement passes its reservation) then scales
  every later decision: a reservation is refused when ``spent + ratio x estimate`` would
  pass the cap, and a model call (:meth:`Budget.acquire`) waits while ``spent + ratio x
  (held + estimate)`` would: the calls in flight could pass the cap at that ratio. Once
  they have settled it starts, or is refused when it does not fit on its own. At ratio 1
  (nothing reported above its reservation) a reservation that does not fit beside those
  held is refused at once, as it always was;
* **the slow start**: until a first call has settled with usage (a settlement reporting
  tokens or dollars; a failure that reported none teaches nothing), what the calls in
  flight hold may not pass ``slow_start`` (:data:`DEFAULT_SLOW_START`, 0.15) of each cap:
  a model call past it waits for that first settlement (a single call larger than the
  fraction still starts when nothing else is held). With replies that take long, every
  call starts before any settles, so the ratio alone could not help: only what was
  reserved before the first settlement is exposed to a ratio nobody has seen yet.

**The bound.** Let ``C`` be a cap, ``f`` the slow start's fraction, ``e`` the largest single
reservation, ``L`` the worst ratio any call of the run reports (at least 1) and ``r1`` the
worst ratio known once a first call has settled with usage (1 when it reported no more than
it reserved). Every call reserved before that first settlement holds
at most ``max(f x C, e)`` together, so they can report at most ``L x max(f x C, e)``. Every
call started after it started with ``spent + r x held <= C`` for the ratio ``r >= r1`` known
then, so the last of them ends the run at most at ``(L / r1) x C``. The final spend is at
most ``max(L x max(f x C, e), (L / r1) x C, C)``. For a provider whose excess is steady
(``r1 = L``), as in a misconfigured proxy, that is ``max(L x f, 1) x C`` when no single call
holds more than ``f x C``: with the default ``f = 0.15``, 1.5 x the cap at 10 x the reserved
tokens, and no more than the cap for a steady excess up to 6.7 x. A provider that reports
honestly for its first call and lies later can reach ``L x C``: no ledger can see a ratio
before it is reported.

Why 0.15: the largest fraction that holds a tenfold over-report to 1.5 x the cap. The price
is paid by honest runs only when their first parallel calls together reserve more than 15 %
of a cap (the default caps: $0.15 of $1.00, about 27 Claude Haiku calls of 1,024 output
tokens; 30,000 of 200,000 tokens, about 24 of them): the calls past it start when the first
call settles, so such a run takes at most one call's duration longer. A run that plans first
(``plandag run``, an ``Agent``) ends the slow start with its planning call, usually before
its steps call a model. ``RunLimits(slow_start=...)`` and ``--slow-start`` change it; None
(``--slow-start none``) turns it off.

What waits: only :meth:`Budget.acquire` (model calls: the ``llm`` and ``agent`` steps through
:meth:`plandag.tools.base.ToolContext.acquire`, the planner's calls). :meth:`Budget.reserve`
never waits: a tool's fixed estimate reserved by the runner and
:meth:`~plandag.tools.base.ToolContext.reserve` are refused where a call would wait for the
calls in flight, and are not held back by the slow start. A waiting call never waits for
reservations only other waiting callers hold (they could not settle): it then starts when
only the slow start held it back, and is refused otherwise.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import anyio
    import anyio.lowlevel

__all__ = [
    "DEFAULT_PLAN_COST_FACTOR",
    "DEFAULT_PLAN_TIME_FACTOR",
    "DEFAULT_SLOW_START",
    "MIN_PLAN_TIME_LIMIT_S",
    "Budget",
    "Estimate",
    "PlanBudget",
    "Reservation",
    "check_slow_start",
    "over_reservation_warning",
]

DEFAULT_PLAN_COST_FACTOR = 2.0
"""A run may spend this many times its plan's estimated cost (``plan_cost_factor``)."""
DEFAULT_PLAN_TIME_FACTOR = 3.0
"""A run may take this many times its plan's estimated time (``plan_time_factor``)."""
MIN_PLAN_TIME_LIMIT_S = 5.0
"""The plan-relative time limit is never below this many seconds: a plan estimated at a few
milliseconds (local reads and selections) is not stopped by what its estimate leaves out
(recording each step in the run store, a loaded machine, scheduling jitter); the absolute
caps hold such runs."""
DEFAULT_SLOW_START = 0.15
"""Until a first model call has settled with usage, the calls in flight may hold at most
this fraction of each cap (``slow_start``; why this value: the module docstring)."""

_NANO = 1_000_000_000


class Estimate(Protocol):
    """What :class:`PlanBudget` reads of a plan's estimate (the scheduler's
    :class:`~plandag.scheduler.estimate.PlanEstimate`, or a patch's)."""

    @property
    def cost_usd(self) -> float | None:
        """The estimated cost, US dollars, or None when unknown."""
        ...

    @property
    def seconds(self) -> float | None:
        """The estimated time, seconds, or None when unknown."""
        ...


def _nanodollars(usd: float, name: str) -> int:
    if not math.isfinite(usd) or usd < 0:
        raise ValueError(f"{name} must be a finite number of US dollars >= 0, not {usd}")
    return round(usd * _NANO)


def check_slow_start(value: object) -> None:
    """Refuse a slow start that is not None nor a number in (0, 1].

    Raises:
        ValueError: what was given and what is expected.
    """
    if value is None:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (math.isfinite(value) and 0 < value <= 1)
    ):
        raise ValueError(
            "slow_start must be a fraction of the caps greater than 0 and at most 1 (e.g. "
            f"{DEFAULT_SLOW_START}), or None to turn the slow start off, not {value!r}"
        )


@dataclasses.dataclass(slots=True)
class Reservation:
    """An amount held for one attempt until it is settled.

    Attributes:
        nanodollars: dollars held, in units of 1e-9 US dollars.
        tokens: tokens held.
        settled: :meth:`Budget.settle` was called on it.
    """

    nanodollars: int
    tokens: int
    settled: bool = False

    @property
    def holds(self) -> bool:
        """It holds something and is not settled yet."""
        return not self.settled and (self.nanodollars > 0 or self.tokens > 0)


# What the ledger says to a reservation now, from the mildest: it may go; it waits for the
# first settlement (the slow start); it waits because the calls in flight could pass a cap
# at the worst ratio; it is refused.
_GO, _WAIT_SLOW, _WAIT_RATIO, _REFUSE = 0, 1, 2, 3


class Budget:
    """Spend and reservations of one run against its caps (the rules: module docstring).

    Args:
        max_cost_usd: cap in US dollars, or None for no dollar cap.
        max_tokens: cap in tokens, or None for no token cap.
        slow_start: until a first call settles with usage, model calls in flight may hold
            at most this fraction of each cap, in (0, 1] (default
            :data:`DEFAULT_SLOW_START`); None turns it off.

    Raises:
        ValueError: a negative or non-finite cap; a slow start outside (0, 1].
    """

    def __init__(
        self,
        max_cost_usd: float | None,
        max_tokens: int | None,
        *,
        slow_start: float | None = DEFAULT_SLOW_START,
    ) -> None:
        self.max_nanodollars = (
            _nanodollars(max_cost_usd, "max_cost_usd") if max_cost_usd is not None else None
        )
        if max_tokens is not None and max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0, not {max_tokens}")
        check_slow_start(slow_start)
        self.max_tokens = max_tokens
        self.max_cost_usd = max_cost_usd
        self.slow_start = slow_start
        self.spent_nanodollars = 0
        self.spent_tokens = 0
        self.reserved_nanodollars = 0
        self.reserved_tokens = 0
        self.worst_ratio = 1.0
        """The worst reported ÷ reserved of any settlement, per cap (1.0 until one passes
        its reservation); later decisions count every estimate at this ratio."""
        self.over_reserved = 0
        """Settlements that reported more than their reservation held."""
        self.usage_settled = False
        """A reservation was settled with usage (the slow start is over)."""
        self._open = 0  # reservations that hold something, not settled
        self._waiters_hold = 0  # of those, how many callers waiting in acquire() hold
        self._changed: anyio.Event | None = None
        self._token: anyio.lowlevel.EventLoopToken | None = None
        self._loop_thread = 0

    @property
    def capped(self) -> bool:
        """True when the budget has a dollar cap or a token cap."""
        return self.max_nanodollars is not None or self.max_tokens is not None

    @property
    def spent_usd(self) -> float:
        """US dollars settled so far."""
        return self.spent_nanodollars / _NANO

    @property
    def reserved_usd(self) -> float:
        """US dollars held by attempts still running."""
        return self.reserved_nanodollars / _NANO

    @property
    def usage_over_reservation(self) -> float | None:
        """:attr:`worst_ratio` once a settlement reported more than its reservation held,
        else None: what a run's result reports."""
        return self.worst_ratio if self.over_reserved else None

    @property
    def exceeded(self) -> bool:
        """True when spent plus reserved is already past a cap: even a free attempt (no
        estimate) is then refused, as :meth:`reserve` would refuse it."""
        cap = self.max_nanodollars
        if cap is not None and self.spent_nanodollars + self.reserved_nanodollars > cap:
            return True
        token_cap = self.max_tokens
        return token_cap is not None and self.spent_tokens + self.reserved_tokens > token_cap

    def _verdict(self, nanodollars: int, tokens: int) -> int:
        """The rules of the module docstring for an estimate of ``nanodollars`` and
        ``tokens``: the severer of the two caps' verdicts (``_GO`` ... ``_REFUSE``)."""
        slow = None if self.usage_settled else self.slow_start
        verdict = _GO
        cap = self.max_nanodollars
        if cap is not None:
            verdict = self._one_cap(
                self.spent_nanodollars, self.reserved_nanodollars, cap, nanodollars, slow
            )
        cap = self.max_tokens
        if cap is not None and verdict != _REFUSE:
            verdict = max(
                verdict, self._one_cap(self.spent_tokens, self.reserved_tokens, cap, tokens, slow)
            )
        return verdict

    def _one_cap(self, spent: int, held: int, cap: int, amount: int, slow: float | None) -> int:
        """One cap's verdict on ``amount`` beside ``spent`` and ``held``."""
        if amount <= 0:  # nothing asked of this cap: refused only once it is passed
            return _REFUSE if spent + held > cap else _GO
        ratio = self.worst_ratio
        if spent + ratio * amount > cap:
            return _REFUSE  # does not fit even alone, at the worst ratio
        if spent + ratio * (held + amount) > cap:
            # the calls in flight could pass the cap; before any over-report, the rule as
            # always: no room beside them
            return _WAIT_RATIO if ratio > 1.0 else _REFUSE
        if slow is not None and held > 0 and held + amount > round(slow * cap):
            return _WAIT_SLOW
        return _GO

    def _hold(self, nanodollars: int, tokens: int) -> Reservation:
        self.reserved_nanodollars += nanodollars
        self.reserved_tokens += tokens
        reservation = Reservation(nanodollars, tokens)
        if reservation.holds:
            self._open += 1
        return reservation

    def reserve(self, usd: float, tokens: int) -> Reservation | None:
        """Hold ``usd`` dollars and ``tokens`` tokens for one attempt, if the caps allow,
        without waiting (module docstring: refused where :meth:`acquire` would wait for
        the calls in flight; not held back by the slow start).

        Args:
            usd: the attempt's estimated cost, US dollars (>= 0).
            tokens: its estimated tokens (>= 0).

        Returns:
            The :class:`Reservation`, or None when spent + reserved + this estimate, at
            the worst ratio seen, would exceed a cap (nothing is held then).
        """
        nanodollars = round(usd * _NANO)
        if not nanodollars and not tokens:  # holds nothing: refused only past a cap
            return None if self.exceeded else Reservation(0, 0)
        if self._verdict(nanodollars, tokens) >= _WAIT_RATIO:
            return None
        return self._hold(nanodollars, tokens)

    async def acquire(
        self, usd: float, tokens: int, *, holding: Iterable[Reservation] = ()
    ) -> Reservation | None:
        """Hold the estimate of one model call, waiting while the calls in flight could
        pass a cap at the worst ratio seen or while the slow start holds it back (module
        docstring). Cancellable; nothing is held when it is cancelled.

        Args:
            usd: the call's estimated cost, US dollars (>= 0).
            tokens: its estimated tokens (>= 0).
            holding: reservations the caller holds itself (its step's own): it does not
                wait for them to settle.

        Returns:
            The :class:`Reservation`, or None when the estimate does not fit (nothing is
            held then).
        """
        nanodollars = round(usd * _NANO)
        own = sum(1 for reservation in holding if reservation.holds)
        while True:
            verdict = self._verdict(nanodollars, tokens)
            if verdict == _REFUSE:
                return None
            if verdict == _GO:
                return self._hold(nanodollars, tokens)
            if self._open - self._waiters_hold - own <= 0:
                # nothing held is held by a caller that can settle it: waiting would never end
                return None if verdict == _WAIT_RATIO else self._hold(nanodollars, tokens)
            await self._wait(own)

    async def _wait(self, own: int) -> None:
        """Wait for the next settlement (or for a waiter holding reservations to join)."""
        import anyio
        import anyio.lowlevel

        if own:
            self._notify()  # the others may now see that nothing held can settle
        event = self._changed
        if event is None:
            event = self._changed = anyio.Event()
            self._token = anyio.lowlevel.current_token()
            self._loop_thread = threading.get_ident()
        self._waiters_hold += own
        try:
            await event.wait()
        finally:
            self._waiters_hold -= own

    def _notify(self) -> None:
        """Wake every caller waiting in :meth:`acquire` (from the event loop's thread or a
        worker thread: a sync tool settling its own hold)."""
        event = self._changed
        if event is None:
            return
        self._changed = None
        if threading.get_ident() == self._loop_thread:
            event.set()
            return
        import anyio.from_thread

        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
            anyio.from_thread.run_sync(event.set, token=self._token)

    def settle(self, reservation: Reservation, usd: float, tokens: int) -> None:
        """Release ``reservation`` and add the attempt's real cost to the spend; a cost
        above what it held raises :attr:`worst_ratio` (module docstring).

        Args:
            reservation: from :meth:`reserve` or :meth:`acquire`; settling it twice does
                nothing.
            usd: the real cost, US dollars (>= 0).
            tokens: the real tokens (>= 0).
        """
        if reservation.settled:
            return
        reservation.settled = True
        held_nanodollars, held_tokens = reservation.nanodollars, reservation.tokens
        self.reserved_nanodollars -= held_nanodollars
        self.reserved_tokens -= held_tokens
        nanodollars = round(usd * _NANO)
        self.spent_nanodollars += nanodollars
        self.spent_tokens += tokens
        if held_nanodollars <= 0 and held_tokens <= 0:
            return  # it held nothing: no ratio, nobody waits for it
        self._open -= 1
        if nanodollars > 0 or tokens > 0:
            self.usage_settled = True
        if (held_nanodollars > 0 and nanodollars > held_nanodollars) or (
            held_tokens > 0 and tokens > held_tokens
        ):
            ratio = max(
                nanodollars / held_nanodollars if held_nanodollars > 0 else 0.0,
                tokens / held_tokens if held_tokens > 0 else 0.0,
            )
            self.over_reserved += 1
            self.worst_ratio = max(self.worst_ratio, ratio)
        if self._changed is not None:
            self._notify()

    def refusal(self, usd: float, tokens: int) -> str:
        """Why :meth:`reserve` refused ``usd`` / ``tokens``, in words, for a step's detail."""
        nanodollars = round(usd * _NANO)
        ratio = self.worst_ratio
        scaled = (
            f", counted at {ratio:.3g}x (the most a settled call reported over its reservation),"
            if ratio > 1.0
            else ""
        )
        cap = self.max_nanodollars
        if cap is not None and (
            (
                nanodollars > 0
                and self.spent_nanodollars + ratio * (self.reserved_nanodollars + nanodollars) > cap
            )
            or self.spent_nanodollars + self.reserved_nanodollars > cap
        ):
            return (
                f"not started: its estimated cost of ${usd:.6g}{scaled} would take the run "
                f"past its cost cap of ${self.max_cost_usd:.6g} (spent ${self.spent_usd:.6g}, "
                f"held by running steps ${self.reserved_usd:.6g})"
            )
        return (
            f"not started: its estimated {tokens} tokens{scaled} would take the run past its "
            f"cap of {self.max_tokens} tokens (spent {self.spent_tokens}, held by running "
            f"steps {self.reserved_tokens})"
        )


def over_reservation_warning(ratio: float | None) -> str | None:
    """The warning a command prints (and a trace shows) for a run whose provider reported
    more than its calls reserved (``RunResult.usage_over_reservation``); None for None."""
    if ratio is None:
        return None
    return (
        f"warning: the provider reported more than was reserved (up to {ratio:.3g}x a "
        f"call's reservation); later calls were counted at {ratio:.3g}x, and the spend may "
        "pass the cap"
    )


class PlanBudget:
    """The limits relative to a plan's estimate (ARCHITECTURE.md, "Brakes": "spend may not
    pass 2x the estimate nor time 3x (both configurable)").

    Args:
        estimate: the plan's :class:`~plandag.scheduler.estimate.PlanEstimate`.
        cost_factor: the run may spend up to this many times the estimated cost (US
            dollars); None lifts the limit.
        time_factor: the run may take up to this many times the estimated time (seconds,
            never below :data:`MIN_PLAN_TIME_LIMIT_S`); None lifts the limit.

    A limit whose estimate is unknown is off (only the absolute caps apply).

    Raises:
        ValueError: a factor that is not a finite number > 0.
    """

    def __init__(
        self, estimate: Estimate, cost_factor: float | None, time_factor: float | None
    ) -> None:
        for name, factor in (("plan_cost_factor", cost_factor), ("plan_time_factor", time_factor)):
            if factor is not None and not (math.isfinite(factor) and factor > 0):
                raise ValueError(f"{name} must be a finite number > 0 or None, not {factor}")
        self.estimate = estimate
        self.cost_factor = cost_factor
        self.time_factor = time_factor
        self.cost_limit_usd: float | None = (
            cost_factor * estimate.cost_usd
            if cost_factor is not None and estimate.cost_usd is not None
            else None
        )
        self.time_limit_s: float | None = (
            max(time_factor * estimate.seconds, MIN_PLAN_TIME_LIMIT_S)
            if time_factor is not None and estimate.seconds is not None
            else None
        )

    @property
    def enforced(self) -> bool:
        """True when at least one limit applies."""
        return self.cost_limit_usd is not None or self.time_limit_s is not None

    def _cost_words(self, spent_usd: float, what: str) -> str:
        assert self.cost_factor is not None
        assert self.estimate.cost_usd is not None
        return (
            f"{what} ${spent_usd:.4f} passed {self.cost_factor:g}x the plan's estimated cost "
            f"${self.estimate.cost_usd:.4f} (limit ${self.cost_limit_usd:.4f})"
        )

    def _time_words(self, elapsed_s: float, what: str) -> str:
        assert self.time_factor is not None
        assert self.estimate.seconds is not None
        return (
            f"{what} {elapsed_s:.3g} s passed {self.time_factor:g}x the plan's estimated time "
            f"{self.estimate.seconds:.3g} s (limit {self.time_limit_s:.3g} s)"
        )

    def time_words(self, elapsed_s: float) -> str:
        """``elapsed time X s passed 3x the plan's estimated time Y s (limit Z s)``."""
        return self._time_words(elapsed_s, "elapsed time")

    def passed(self, spent_usd: float, elapsed_s: float) -> str | None:
        """Why the run must stop, in words, when ``spent_usd`` (US dollars) is past the cost
        limit or ``elapsed_s`` (seconds, time waiting for a person left out) past the time
        limit; None while both are within them."""
        cost_limit = self.cost_limit_usd
        if cost_limit is not None and spent_usd > cost_limit + 1e-12:
            return self._cost_words(spent_usd, "spend")
        time_limit = self.time_limit_s
        if time_limit is not None and elapsed_s > time_limit:
            return self.time_words(elapsed_s)
        return None

    def patch_refusal(
        self, spent_usd: float, elapsed_s: float, patch: Estimate, ids: tuple[int, ...]
    ) -> str | None:
        """Why a replan patch must not run, in words, or None when it fits.

        The patch is projected from where the run stands: spend = ``spent_usd`` + the
        patch's estimated cost; time = ``elapsed_s`` + the patch's critical path. A patch
        whose own estimate is unknown is not projected (only the absolute caps apply).
        """
        steps = ", ".join(map(str, ids))
        cost_limit = self.cost_limit_usd
        if cost_limit is not None and patch.cost_usd is not None:
            projected = spent_usd + patch.cost_usd
            if projected > cost_limit + 1e-12:
                return f"replan patch (steps {steps}) not run: " + self._cost_words(
                    projected, "projected spend"
                )
        time_limit = self.time_limit_s
        if time_limit is not None and patch.seconds is not None:
            projected = elapsed_s + patch.seconds
            if projected > time_limit:
                return f"replan patch (steps {steps}) not run: " + self._time_words(
                    projected, "projected time"
                )
        return None
