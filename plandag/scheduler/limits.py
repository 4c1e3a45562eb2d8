"""The brakes of one run (:class:`RunLimits`; ARCHITECTURE.md, "Brakes"): every brake on
by default with the values of :data:`plandag.brakes.JOB_BRAKES`, lifted only with
:data:`~plandag.brakes.UNLIMITED`. The runner (:mod:`plandag.scheduler.runner`) enforces
them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from plandag.brakes import JOB_BRAKES, LIFT, UNLIMITED, Unlimited, cap_or_none
from plandag.brakes.budget import (
    DEFAULT_PLAN_COST_FACTOR,
    DEFAULT_PLAN_TIME_FACTOR,
    DEFAULT_SLOW_START,
    Budget,
    check_slow_start,
)

__all__ = ["RunLimits"]


def _positive_or_none(name: str, value: float | None) -> None:
    if value is not None and (math.isnan(value) or value <= 0):
        raise ValueError(f"{name} must be > 0 or None, not {value}")


_PYTHON_BRAKES = JOB_BRAKES["python"]


def _check_brake(name: str, value: object, default: object, *, strict: bool) -> None:
    """A brake is a number or :data:`~plandag.brakes.UNLIMITED`; None is ambiguous."""
    if isinstance(value, Unlimited):
        return
    if value is None:
        raise ValueError(
            f"{name}=None is ambiguous: leave {name} out for the default ({default!r}) or "
            f"pass {name}=UNLIMITED (from plandag import UNLIMITED) to lift this brake"
        )
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number or UNLIMITED, not {value!r}")
    number = float(value)
    if not math.isfinite(number) or number < 0 or (strict and number == 0):
        bound = "> 0" if strict else ">= 0"
        raise ValueError(f"{name} must be {bound} (a finite number) or UNLIMITED, not {value!r}")


@dataclasses.dataclass(frozen=True)
class RunLimits:
    """The brakes of one run (ARCHITECTURE.md, "Brakes"; :mod:`plandag.brakes`).

    Every brake is on by default, with the values of :data:`plandag.brakes.JOB_BRAKES`
    for ``exec``, ``run`` and Python (the same as the command line): $1.00, 200,000
    tokens, 15 minutes, and a stop after 120 s without a finished step. A brake is lifted
    explicitly with :data:`~plandag.brakes.UNLIMITED`; ``None`` is refused as ambiguous
    (leave the argument out to keep the default).

    Attributes:
        max_seconds: wall-clock cap for the whole run, seconds from its start (CLI
            ``--max-seconds``); default 900.
        max_cost_usd: cap on the run's spend, US dollars (``--max-cost``); default 1.00.
            Models without a price cost $0 and are capped by ``max_tokens`` alone.
        max_tokens: cap on the run's tokens, every model priced or not (``--max-tokens``);
            default 200,000.
        heartbeat_every: seconds between :class:`~plandag.scheduler.events.Heartbeat`
            events (``--heartbeat-every``, default 10); None for no heartbeat (not a
            brake). Heartbeats are only computed when the run has observers.
        stall_after: seconds without any step finishing that make a stall
            (``--stall-after``); default 120.
        stop_on_stall: stop the run at the first stall (``--stop-on-stall``, default;
            ``--no-stop-on-stall`` keeps the stall events without stopping). Ignored when
            ``stall_after`` is lifted.

        breaker_after: steps in a row of one tool, or to one HTTP host, that must fail
            (each after its retries) for that dependency to be down for the rest of the run
            (``--breaker-after``, default 3; :mod:`plandag.scheduler.breaker`); None: no
            circuit breaker.
        plan_cost_factor: the run stops and escalates (reason ``plan_budget``) when its
            spend passes this many times its plan's estimated cost
            (``--plan-cost-factor``, default 2.0); None lifts it.
        plan_time_factor: likewise when its elapsed time (waiting for a person left out)
            passes this many times the plan's estimated time (``--plan-time-factor``,
            default 3.0; never below 5 s); None lifts it. See
            :mod:`plandag.scheduler.estimate`: a plan whose estimate is unknown is not held
            to either.
        slow_start: until a first model call has settled with usage, the calls in flight
            may hold at most this fraction of the cost and token caps (``--slow-start``,
            default :data:`~plandag.brakes.budget.DEFAULT_SLOW_START`, 0.15, in (0, 1]);
            None turns it off. It bounds the spend when a provider reports more than its
            calls reserved (:mod:`plandag.brakes.budget`: the rule, the bound and why
            0.15).

    Raises:
        ValueError: a limit <= 0 (a cap < 0), not a number, or None; ``breaker_after``
            < 1; ``slow_start`` outside (0, 1].
    """

    max_seconds: float | Unlimited = _PYTHON_BRAKES.max_seconds
    max_cost_usd: float | Unlimited = _PYTHON_BRAKES.max_cost_usd
    max_tokens: int | Unlimited = _PYTHON_BRAKES.max_tokens
    heartbeat_every: float | None = 10.0
    stall_after: float | Unlimited = _PYTHON_BRAKES.stall_after
    stop_on_stall: bool = _PYTHON_BRAKES.stop_on_stall
    breaker_after: int | None = 3
    plan_cost_factor: float | None = DEFAULT_PLAN_COST_FACTOR
    plan_time_factor: float | None = DEFAULT_PLAN_TIME_FACTOR
    slow_start: float | None = DEFAULT_SLOW_START

    def __post_init__(self) -> None:
        defaults = JOB_BRAKES["python"]
        _check_brake("max_seconds", self.max_seconds, defaults.max_seconds, strict=True)
        _check_brake("max_cost_usd", self.max_cost_usd, defaults.max_cost_usd, strict=False)
        _check_brake("max_tokens", self.max_tokens, defaults.max_tokens, strict=False)
        _check_brake("stall_after", self.stall_after, defaults.stall_after, strict=True)
        for name in ("plan_cost_factor", "plan_time_factor"):
            factor = getattr(self, name)
            if factor is not None and (
                isinstance(factor, bool)
                or not isinstance(factor, (int, float))
                or not (math.isfinite(factor) and factor > 0)
            ):
                raise ValueError(
                    f"RunLimits({name}={factor!r}): give a finite number > 0 (times the "
                    f"plan's estimate), or None to lift the limit"
                )
        check_slow_start(self.slow_start)
        _positive_or_none("heartbeat_every", self.heartbeat_every)
        if self.breaker_after is not None and (
            isinstance(self.breaker_after, bool) or self.breaker_after < 1
        ):
            raise ValueError(f"breaker_after must be >= 1 or None, not {self.breaker_after}")

    @classmethod
    def for_job(cls, job: str, **changes: Any) -> RunLimits:
        """The default brakes of ``job`` (a key of :data:`plandag.brakes.JOB_BRAKES`),
        with ``changes`` (field name → value) applied.

        Raises:
            KeyError: an unknown job.
            ValueError: a change out of range (as the constructor).
        """
        row = JOB_BRAKES[job]
        values: dict[str, Any] = {
            "max_seconds": row.max_seconds,
            "max_cost_usd": row.max_cost_usd,
            "max_tokens": row.max_tokens,
            "stall_after": row.stall_after,
            "stop_on_stall": row.stop_on_stall,
        }
        values.update(changes)
        return cls(**values)

    @classmethod
    def lifted(cls, *, heartbeat_every: float | None = None) -> RunLimits:
        """Every brake lifted, the plan-relative limits included: for a run governed by an
        outer run's brakes (one document of a batch, whose deadline, stall detector and
        budget are the batch's; a document is never escalated on its own because a busy
        machine made it slower than its plan's estimate)."""
        return cls(
            max_seconds=UNLIMITED,
            max_cost_usd=UNLIMITED,
            max_tokens=UNLIMITED,
            heartbeat_every=heartbeat_every,
            stall_after=UNLIMITED,
            stop_on_stall=False,
            plan_cost_factor=None,
            plan_time_factor=None,
        )

    @property
    def seconds_cap(self) -> float | None:
        """``max_seconds``, or None when lifted."""
        return cap_or_none(self.max_seconds)

    @property
    def cost_cap(self) -> float | None:
        """``max_cost_usd``, or None when lifted."""
        return cap_or_none(self.max_cost_usd)

    @property
    def token_cap(self) -> int | None:
        """``max_tokens``, or None when lifted."""
        return cap_or_none(self.max_tokens)

    @property
    def stall_cap(self) -> float | None:
        """``stall_after``, or None when lifted."""
        return cap_or_none(self.stall_after)

    def budget(self) -> Budget:
        """A new :class:`~plandag.brakes.budget.Budget` with this run's cost and token
        caps."""
        return Budget(self.cost_cap, self.token_cap, slow_start=self.slow_start)

    def as_json(self) -> dict[str, Any]:
        """The fields as JSON (a lifted brake is ``"none"``), as a run store keeps them."""
        return {
            field.name: LIFT if isinstance(value, Unlimited) else value
            for field in dataclasses.fields(self)
            for value in [getattr(self, field.name)]
        }

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> RunLimits:
        """The limits :meth:`as_json` wrote. ``"none"`` lifts a brake; a missing key keeps
        the default; ``null`` (written before every brake had a default, when it meant
        "off") lifts it too."""
        brakes = ("max_seconds", "max_cost_usd", "max_tokens", "stall_after")
        values: dict[str, Any] = {}
        for key, value in document.items():
            if key in brakes and (value is None or value == LIFT):
                values[key] = UNLIMITED
            else:
                values[key] = value
        return cls(**values)
