"""The brakes every run has unless someone lifts them: one table of defaults per job
(ARCHITECTURE.md, "Brakes").

An agent that plans its own work must be stopped by limits outside its judgement, so every
brake is on by default, with the same values in Python (:func:`plandag.run_plan`,
:class:`plandag.planner.agent.Agent`) as on the command line:

=========================  ==================  ==========  ================  ===================
limit                      exec, run, Python   research    extract nfe       extract contracts
=========================  ==================  ==========  ================  ===================
cost (priced models only)  $1.00 per run       $2.00       $5.00 per batch   $20.00 per batch
tokens (every model)       200,000 per run     500,000     1,000,000/batch   5,000,000/batch
wall clock                 15 min              30 min      none              none
stall (no finished step)   120 s, then stop    120 s       300 s             300 s
write boundary             working directory   report's    output's folder   output's folder
                                               folder
=========================  ==================  ==========  ================  ===================

(:data:`JOB_BRAKES` holds it; ``plandag research`` and ``plandag extract contracts`` run
under their rows.) The cost cap counts only models with
a price (:mod:`plandag.models.pricing`); a model without one is capped by the token
cap alone and never refused for having no price. Batches have no wall-clock cap (they are
long by nature) and rely on the stall detector and the cost and token caps.

**Lifting a brake is explicit.** In Python a limit is a number, or :data:`UNLIMITED`;
leaving an argument out gives the table's value, and ``None`` is refused as ambiguous
(:class:`~plandag.scheduler.limits.RunLimits`). On the command line and in configuration
files the word is ``none`` (:data:`LIFT`): ``--max-cost none``, ``max_cost = "none"`` in
``[tool.plandag]``; ``--no-stop-on-stall`` keeps the stall reports without stopping.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Final, Literal, TypeVar

__all__ = [
    "DEFAULT_PLANNER_MAX_TOKENS",
    "JOB_BRAKES",
    "LIFT",
    "UNLIMITED",
    "JobBrakes",
    "Unlimited",
    "brakes_line",
    "cap_or_none",
    "describe_cost",
    "describe_seconds",
    "describe_tokens",
]

_T = TypeVar("_T")

DEFAULT_PLANNER_MAX_TOKENS: Final = 4096
"""Output tokens a planning call may take by default (``planner_max_tokens``,
``--planner-max-tokens``, ``Agent(plan_max_tokens=...)``): what each planning call
reserves for its answer against the cost and token caps.

Sized to plans: the plans of the benchmark workloads and examples, in the typed wire format
the model writes (:mod:`plandag.planner.wire`), take 47 (``compare2``, 2 steps), 130
(``examples/plans/words.json``, 4 steps), 132 (``movie8``, 8 steps), 183 (``parallelqa``,
7 steps), 268 (``examples/plans/invoice_total.json``, 4 steps) and 1,318 output tokens (the
NF-e extraction plan, 9 steps with long XPath arguments) at four characters a token; under
OpenAI's strict mode, where every left-out optional field is written as ``null``, the NF-e
plan takes 1,404. 4,096 is about three times the largest, room for about 25 steps as dense
as the NF-e plan's, and half the former 8,192: a first planning call with Claude Sonnet
reserves about $0.06 of output instead of $0.12, so a cap of $0.10 no longer refuses it. A
plan that needs more is cut and refused (never a shorter plan); raise the setting for it."""


class Unlimited:
    """The type of :data:`UNLIMITED`: a brake lifted on purpose. One instance exists."""

    _instance: Unlimited | None = None

    def __new__(cls) -> Unlimited:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNLIMITED"

    def __reduce__(self) -> str:
        return "UNLIMITED"

    def __copy__(self) -> Unlimited:
        return self

    def __deepcopy__(self, memo: object) -> Unlimited:
        return self


UNLIMITED: Final = Unlimited()
"""A brake lifted on purpose: ``RunLimits(max_cost_usd=UNLIMITED)``."""

LIFT: Final = "none"
"""How a brake is lifted on the command line (``--max-cost none``) and in configuration
files (``max_cost = "none"``)."""

Boundary = Literal["working directory", "report's folder", "output's folder"]


@dataclasses.dataclass(frozen=True)
class JobBrakes:
    """The default brakes of one job.

    Attributes:
        job: the job (``exec``, ``run``, ``python``, ``research``, ``extract nfe``,
            ``extract contracts``).
        per: what one budget covers: ``run`` or ``batch``.
        max_cost_usd: cost cap, US dollars (priced models only).
        max_tokens: token cap (every model, priced or not).
        max_seconds: wall-clock cap, seconds, or :data:`UNLIMITED` (batches).
        stall_after: seconds without a finished step (a finished document, for a batch)
            that make a stall.
        stop_on_stall: a stall stops the run.
        boundary: the default write boundary, in words.
    """

    job: str
    per: Literal["run", "batch"]
    max_cost_usd: float
    max_tokens: int
    max_seconds: float | Unlimited
    stall_after: float
    stop_on_stall: bool
    boundary: Boundary


def _row(
    job: str,
    per: Literal["run", "batch"],
    cost: float,
    tokens: int,
    seconds: float | Unlimited,
    stall: float,
    boundary: Boundary,
) -> JobBrakes:
    return JobBrakes(job, per, cost, tokens, seconds, stall, True, boundary)


JOB_BRAKES: Mapping[str, JobBrakes] = {
    row.job: row
    for row in (
        _row("exec", "run", 1.00, 200_000, 15 * 60.0, 120.0, "working directory"),
        _row("run", "run", 1.00, 200_000, 15 * 60.0, 120.0, "working directory"),
        _row("python", "run", 1.00, 200_000, 15 * 60.0, 120.0, "working directory"),
        _row("research", "run", 2.00, 500_000, 30 * 60.0, 120.0, "report's folder"),
        _row("extract nfe", "batch", 5.00, 1_000_000, UNLIMITED, 300.0, "output's folder"),
        _row("extract contracts", "batch", 20.00, 5_000_000, UNLIMITED, 300.0, "output's folder"),
    )
}
"""The default brakes of every job, by job name (the table in the module docstring).
``python`` is :func:`plandag.run_plan` and :class:`~plandag.planner.agent.Agent` called
without brake arguments."""


def cap_or_none(value: _T | Unlimited | None) -> _T | None:
    """``value``, or None when it is :data:`UNLIMITED` (or None): for code that reads a
    limit as "a number, or no limit"."""
    if value is None or isinstance(value, Unlimited):
        return None
    return value


def describe_cost(usd: float | Unlimited | None) -> str:
    """``$1.00``, or ``none``."""
    value = cap_or_none(usd)
    return LIFT if value is None else f"${value:,.2f}"


def describe_tokens(tokens: int | Unlimited | None) -> str:
    """``200,000``, or ``none``."""
    value = cap_or_none(tokens)
    return LIFT if value is None else f"{value:,}"


def describe_seconds(seconds: float | Unlimited | None) -> str:
    """``15 min`` (whole minutes from 10 minutes up), ``120 s``, ``1.5 s``, or ``none``."""
    value = cap_or_none(seconds)
    if value is None:
        return LIFT
    if value >= 600 and math.isclose(value % 60, 0.0, abs_tol=1e-9):
        return f"{value / 60:g} min"
    return f"{value:g} s"


def brakes_line(
    *,
    max_cost_usd: float | Unlimited | None,
    max_tokens: int | Unlimited | None,
    max_seconds: float | Unlimited | None,
    stall_after: float | Unlimited | None,
    stop_on_stall: bool,
    boundary: str,
    per: str = "run",
    prices: str | None = None,
    rate_limit: str | None = None,
) -> str:
    """The short line printed to stderr when a run starts (after its plan compiled): each
    brake's value, and where the full table with how to lift each is (``plandag config``).

    Args:
        max_cost_usd: the cost cap, US dollars (:data:`UNLIMITED` or None: lifted).
        max_tokens: the token cap.
        max_seconds: the wall-clock cap, seconds.
        stall_after: the stall threshold, seconds.
        stop_on_stall: a stall stops the run (else ``(report only)`` follows the stall).
        boundary: the write boundary, as shown (``./``, ``out/``...).
        per: ``run`` or ``batch`` (what one budget covers).
        prices: where the run's prices come from (``genai-prices 0.2.5``, ``config``,
            ``none (token cap only)``: :func:`plandag.models.pricing.prices_source`), or
            None to leave it out.
        rate_limit: the requests and tokens per minute to the provider (``50 rpm``), or
            None when there is none.

    Returns:
        For example ``brakes: $1.00, 200,000 tokens, 15 min, stall 120 s, writes ./ —
        plandag config shows them all and how to lift each``; a lifted brake reads ``no
        cost cap``, ``no token cap``, ``no time cap`` or ``no stall check``; ``prices
        genai-prices 0.2.5`` and ``rate limit 50 rpm per provider`` follow the boundary when
        given.
    """
    cost = cap_or_none(max_cost_usd)
    tokens = cap_or_none(max_tokens)
    seconds = cap_or_none(max_seconds)
    stall_value = cap_or_none(stall_after)
    if stall_value is None:
        stall = "no stall check"
    else:
        stall = f"stall {describe_seconds(stall_value)}"
        if not stop_on_stall:
            stall += " (report only)"
    scope = "" if per == "run" else f" per {per}"
    parts = [
        "no cost cap" if cost is None else describe_cost(cost),
        "no token cap" if tokens is None else f"{describe_tokens(tokens)} tokens",
        "no time cap" if seconds is None else describe_seconds(seconds),
        stall,
        f"writes {boundary}",
    ]
    if prices is not None:
        parts.append(f"prices {prices}")
    if rate_limit is not None:
        parts.append(f"rate limit {rate_limit}")
    return f"brakes{scope}: {', '.join(parts)} — plandag config shows them all and how to lift each"
