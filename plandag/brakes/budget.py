"""The cost brake: reserve a step's estimated cost before it starts, settle the real cost
after (ARCHITECTURE.md, "Brakes", "Cost cap").

A reservation is granted only when the money spent, plus every reservation still open, plus
the new estimate stays within the cap, for dollars and for tokens alike. The runner is one
event loop, and :meth:`Budget.reserve` does not await, so two steps starting at once cannot
both squeeze under the cap: parallel steps can never push spend past it. Failed, retried and
cancelled attempts are settled like any other.

Dollars are kept as whole nanodollars (``round(usd * 1e9)``), so sums and comparisons are
exact: steps of $0.10 and $0.20 fit a cap of $0.30.

The cap bounds what the runner *lets start*. A tool that reports more than it estimated can
still take the spend past the cap; after that no further step is granted a reservation.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Protocol

__all__ = [
    "DEFAULT_PLAN_COST_FACTOR",
    "DEFAULT_PLAN_TIME_FACTOR",
    "MIN_PLAN_TIME_LIMIT_S",
    "Budget",
    "Estimate",
    "PlanBudget",
    "Reservation",
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


class Budget:
    """Spend and reservations of one run against its caps.

    Args:
        max_cost_usd: cap in US dollars, or None for no dollar cap.
        max_tokens: cap in tokens, or None for no token cap.

    Raises:
        ValueError: a negative or non-finite cap.
    """

    def __init__(self, max_cost_usd: float | None, max_tokens: int | None) -> None:
        self.max_nanodollars = (
            _nanodollars(max_cost_usd, "max_cost_usd") if max_cost_usd is not None else None
        )
        if max_tokens is not None and max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0, not {max_tokens}")
        self.max_tokens = max_tokens
        self.max_cost_usd = max_cost_usd
        self.spent_nanodollars = 0
        self.spent_tokens = 0
        self.reserved_nanodollars = 0
        self.reserved_tokens = 0

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
    def exceeded(self) -> bool:
        """True when spent plus reserved is already past a cap: even a free attempt (no
        estimate) is then refused, as :meth:`reserve` would refuse it."""
        cap = self.max_nanodollars
        if cap is not None and self.spent_nanodollars + self.reserved_nanodollars > cap:
            return True
        token_cap = self.max_tokens
        return token_cap is not None and self.spent_tokens + self.reserved_tokens > token_cap

    def reserve(self, usd: float, tokens: int) -> Reservation | None:
        """Hold ``usd`` dollars and ``tokens`` tokens for one attempt, if the caps allow.

        Args:
            usd: the attempt's estimated cost, US dollars (>= 0).
            tokens: its estimated tokens (>= 0).

        Returns:
            The :class:`Reservation`, or None when spent + reserved + this estimate would
            exceed a cap (nothing is held then).
        """
        nanodollars = round(usd * _NANO)
        cap = self.max_nanodollars
        if (
            cap is not None
            and self.spent_nanodollars + self.reserved_nanodollars + nanodollars > cap
        ):
            return None
        token_cap = self.max_tokens
        if token_cap is not None and self.spent_tokens + self.reserved_tokens + tokens > token_cap:
            return None
        self.reserved_nanodollars += nanodollars
        self.reserved_tokens += tokens
        return Reservation(nanodollars, tokens)

    def settle(self, reservation: Reservation, usd: float, tokens: int) -> None:
        """Release ``reservation`` and add the attempt's real cost to the spend.

        Args:
            reservation: from :meth:`reserve`; settling it twice does nothing.
            usd: the real cost, US dollars (>= 0).
            tokens: the real tokens (>= 0).
        """
        if reservation.settled:
            return
        reservation.settled = True
        self.reserved_nanodollars -= reservation.nanodollars
        self.reserved_tokens -= reservation.tokens
        self.spent_nanodollars += round(usd * _NANO)
        self.spent_tokens += tokens

    def refusal(self, usd: float, tokens: int) -> str:
        """Why :meth:`reserve` refused ``usd`` / ``tokens``, in words, for a step's detail."""
        cap = self.max_nanodollars
        if cap is not None and (
            self.spent_nanodollars + self.reserved_nanodollars + round(usd * _NANO) > cap
        ):
            return (
                f"not started: its estimated cost of ${usd:.6g} would take the run past its "
                f"cost cap of ${self.max_cost_usd:.6g} (spent ${self.spent_usd:.6g}, held by "
                f"running steps ${self.reserved_usd:.6g})"
            )
        return (
            f"not started: its estimated {tokens} tokens would take the run past its cap of "
            f"{self.max_tokens} tokens (spent {self.spent_tokens}, held by running steps "
            f"{self.reserved_tokens})"
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
