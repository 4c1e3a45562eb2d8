"""When a failed attempt is tried again, and after how long (ARCHITECTURE.md, "Retry vs
replan").

:class:`RetryPolicy` holds the numbers; :meth:`RetryPolicy.decide` applies the rules to one
failure of one step. The runner keeps the counters on the step itself, so parallel steps of
the same tool never share a retry count or a delay budget.

Backoff is capped exponential with full jitter (the AWS Architecture Blog's "Exponential
Backoff And Jitter", 2015): before retry *n* (1 for the first retry) the cap is
``min(max_delay, base_delay * 2 ** (n - 1))`` and the delay is drawn uniformly from
``[0, cap]`` (exactly ``cap`` with ``jitter=False``). A server's Retry-After raises the
delay to at least what it asked.
"""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Literal

from plandag.errors import FailureInfo

__all__ = ["RetryDecision", "RetryPolicy", "StopReason"]

StopReason = Literal[
    "permanent",
    "retries_exhausted",
    "not_idempotent",
    "max_total_delay",
    "deadline",
]
"""Why a failed step is not tried again:

* ``permanent``: the error's kind is permanent;
* ``retries_exhausted``: ``retries`` retries were made already;
* ``not_idempotent``: the outcome is unknown (the tool may have acted) and the tool is not
  idempotent;
* ``max_total_delay``: the delay would take the step's waiting past ``max_total_delay``;
* ``deadline``: the run's wall-clock cap would pass before the delay ends (Retry-After
  longer than the remaining time, say).
"""


@dataclasses.dataclass(frozen=True, slots=True)
class RetryDecision:
    """The verdict on one failed attempt.

    Attributes:
        retry: try again after ``delay_s``.
        delay_s: seconds to wait before the next attempt (0.0 when not retrying).
        stop: why not, when ``retry`` is False; else None.
        explanation: the same in words, for the step's ``detail``; "" when retrying.
    """

    retry: bool
    delay_s: float = 0.0
    stop: StopReason | None = None
    explanation: str = ""


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How failed steps are retried. One policy serves the whole run; counters are per step.

    Attributes:
        retries: retries after the first attempt (0: never retry). CLI ``--retries``,
            default 2.
        base_delay: seconds; the cap before the first retry.
        max_delay: seconds; no single backoff delay is longer (Retry-After may be).
        max_total_delay: seconds; a step never waits longer than this in total between its
            attempts.
        jitter: draw each delay uniformly from ``[0, cap]`` (full jitter); False waits the
            cap exactly.
        random: the random source for jitter; pass ``random.Random(seed)`` for repeatable
            delays (default: a fresh unseeded ``random.Random``).

    Raises:
        ValueError: a negative number, or a delay that is not finite.
    """

    retries: int = 2
    base_delay: float = 0.5
    max_delay: float = 30.0
    max_total_delay: float = 120.0
    jitter: bool = True
    random: random.Random = dataclasses.field(default_factory=random.Random, compare=False)

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError(f"retries must be >= 0, not {self.retries}")
        for name in ("base_delay", "max_delay", "max_total_delay"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number of seconds >= 0, not {value}")

    def backoff(self, retry_number: int) -> float:
        """The backoff delay before retry ``retry_number`` (1 for the first retry), seconds.

        ``min(max_delay, base_delay * 2 ** (retry_number - 1))``, times a uniform draw in
        ``[0, 1)`` when ``jitter`` is on.
        """
        exponent = min(retry_number - 1, 64)  # 2**64 * base_delay is past any cap
        cap = min(self.max_delay, self.base_delay * 2.0**exponent)
        return cap * self.random.random() if self.jitter else cap

    def decide(
        self,
        failure: FailureInfo,
        *,
        attempts: int,
        waited_s: float,
        idempotent: bool,
        remaining_s: float | None,
    ) -> RetryDecision:
        """Decide whether a step tries again after ``failure``, and when.

        The rules, in order (ARCHITECTURE.md, "Retry vs replan"): a permanent failure is not
        retried; nor one past ``retries``; after a failure whose outcome is unknown only an
        idempotent tool is retried (a failure known to precede any effect is retried for any tool);
        the delay is the jittered backoff, raised to the server's Retry-After; a delay that
        would take the step's total waiting past ``max_total_delay``, or end after the run's
        deadline, is not waited: the step fails now.

        Args:
            failure: the attempt's failure (:func:`plandag.errors.describe_failure`).
            attempts: attempts made so far, this one included (>= 1).
            waited_s: seconds this step has already waited between its attempts.
            idempotent: the tool's ``idempotent`` flag.
            remaining_s: seconds left before the run's deadline, or None for no deadline.

        Returns:
            A :class:`RetryDecision`. The jitter draw happens only when every other rule
            allows a retry, so a seeded ``random`` gives the same delays whatever failed
            permanently in between.
        """
        if failure.kind == "permanent":
            return RetryDecision(False, stop="permanent", explanation="not retried: permanent")
        if attempts > self.retries:
            return RetryDecision(
                False,
                stop="retries_exhausted",
                explanation=f"gave up after {attempts} attempt(s) ({self.retries} retries)",
            )
        if not idempotent and not failure.before_effect:
            return RetryDecision(
                False,
                stop="not_idempotent",
                explanation=(
                    "not retried: the tool is not idempotent and the failure may have "
                    "happened after it acted"
                ),
            )
        delay = self.backoff(attempts)
        retry_after = failure.retry_after_s
        if retry_after is not None and retry_after > delay:
            delay = retry_after
        if waited_s + delay > self.max_total_delay:
            return RetryDecision(
                False,
                stop="max_total_delay",
                explanation=(
                    f"not retried: waiting {delay:.3g} s more would exceed the maximum total "
                    f"delay of {self.max_total_delay:g} s"
                ),
            )
        if remaining_s is not None and delay >= remaining_s:
            return RetryDecision(
                False,
                stop="deadline",
                explanation=(
                    f"not retried: the next attempt would start after {delay:.3g} s, past the "
                    f"run's deadline ({max(remaining_s, 0.0):.3g} s left)"
                ),
            )
        return RetryDecision(True, delay_s=delay)
