"""What the model-backed steps of runs used and how their calls failed: :class:`ModelUsage`,
summed from the ``llm_call`` children that :func:`plandag.executors.access.call_model` adds
to each attempt (one per request sent to the provider: the ``llm`` step's call, each of an
``agent``'s turns, a re-ask; a token count asked for a reservation is not one).

A batch job sums one per document (``extract contracts`` puts :meth:`ModelUsage.as_dict` in
each record and the run store's document row) and over the batch, where
:meth:`ModelUsage.failure_summary` says why when every call failed.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from plandag.scheduler.result import RunResult

__all__ = ["USAGE_KEYS", "ModelUsage", "run_model_usage"]

USAGE_KEYS: tuple[str, ...] = (
    "requests",
    "failed_requests",
    "input_tokens",
    "output_tokens",
    "cost_usd",
)
"""The keys of :meth:`ModelUsage.as_dict`, in order."""


@dataclasses.dataclass(slots=True)
class ModelUsage:
    """Model calls and what they used.

    Attributes:
        requests: requests sent to the provider (each attempt of each call; a failed one
            too).
        failed_requests: those that got no usable answer: the call raised (connection
            refused, HTTP 5xx, a cut-off or refused reply...); a cancelled call (a brake
            stopped the run) is not counted as failed.
        input_tokens: prompt tokens the provider reported, cached ones included.
        output_tokens: generated tokens the provider reported.
        cost_usd: US dollars of those tokens at the model's price (0.0 for an unpriced
            model).
        failures: each failure's words (``the model endpoint http://127.0.0.1:8765 could not
            be reached: connection refused``; else ``Type: message``) → how many requests
            failed so.
    """

    requests: int = 0
    failed_requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    failures: Counter[str] = dataclasses.field(default_factory=Counter)

    @property
    def all_failed(self) -> bool:
        """True when at least one request was sent and every one failed."""
        return self.requests > 0 and self.failed_requests >= self.requests

    def add_call(self, attrs: Mapping[str, Any]) -> None:
        """Count one ``llm_call`` child's attributes (``input_tokens``, ``output_tokens``,
        ``cost_usd``, ``error_reason``, ``failure``, ``error``)."""
        self.requests += 1
        self.input_tokens += _count(attrs.get("input_tokens"))
        self.output_tokens += _count(attrs.get("output_tokens"))
        cost = attrs.get("cost_usd")
        if isinstance(cost, int | float) and not isinstance(cost, bool) and cost > 0:
            self.cost_usd += float(cost)
        reason = attrs.get("error_reason")
        failed = attrs.get("error") is not None if reason is None else reason != "cancelled"
        if failed:
            self.failed_requests += 1
            self.failures[str(attrs.get("failure") or attrs.get("error") or "failed")] += 1

    def add(self, other: ModelUsage | Mapping[str, Any]) -> None:
        """Add another usage: a :class:`ModelUsage`, or its :meth:`as_dict` (whose
        failures are unknown)."""
        if isinstance(other, ModelUsage):
            self.failures.update(other.failures)
            values: Mapping[str, Any] = other.as_dict()
        else:
            values = other
        self.requests += _count(values.get("requests"))
        self.failed_requests += _count(values.get("failed_requests"))
        self.input_tokens += _count(values.get("input_tokens"))
        self.output_tokens += _count(values.get("output_tokens"))
        cost = values.get("cost_usd")
        if isinstance(cost, int | float) and not isinstance(cost, bool) and cost > 0:
            self.cost_usd += float(cost)

    def as_dict(self) -> dict[str, Any]:
        """``{"requests", "failed_requests", "input_tokens", "output_tokens", "cost_usd"}``
        (:data:`USAGE_KEYS`; US dollars rounded to 1e-9)."""
        return {
            "requests": self.requests,
            "failed_requests": self.failed_requests,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": round(self.cost_usd, 9),
        }

    def failure_summary(
        self, failed: int | None = None, of: int | None = None, unit: str = "model calls"
    ) -> str | None:
        """Why the calls failed, in a line: the most frequent failure with ``(N of M
        UNIT)``, then how many failed otherwise; None when none failed.

        Args:
            failed: the N shown (default :attr:`failed_requests`).
            of: the M shown (default :attr:`requests`).
            unit: what N and M count (``model calls``, ``branches``).
        """
        if not self.failures:
            return None
        ranked = self.failures.most_common()
        first = ranked[0][0]
        shown = (
            f"{first} ({self.failed_requests if failed is None else failed} of "
            f"{self.requests if of is None else of} {unit})"
        )
        if len(ranked) > 1:
            rest = sum(count for _, count in ranked[1:])
            shown += f"; {rest} failed otherwise (first: {ranked[1][0]})"
        return shown


def _count(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return 0


def _children(result: RunResult) -> Iterable[Mapping[str, Any]]:
    for step_id in sorted(result.steps):
        for attempt in result.steps[step_id].attempt_log:
            for child in attempt.children:
                if child.get("kind") == "llm_call":
                    attrs = child.get("attrs")
                    yield attrs if isinstance(attrs, Mapping) else {}


def run_model_usage(result: RunResult) -> ModelUsage:
    """The model calls of every step of ``result`` (every attempt, re-asks included)."""
    usage = ModelUsage()
    for attrs in _children(result):
        usage.add_call(attrs)
    return usage
