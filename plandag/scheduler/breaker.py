"""The circuit breaker: a tool or an HTTP host that keeps failing is taken out of the run
(ARCHITECTURE.md, "Execution"; the circuit breaker pattern of Nygard, "Release It!", 2007).

Every step needs one or two **dependencies**: its tool (``tool http_get``) and, when its
arguments hold an ``http://`` or ``https://`` URL in ``url``, that URL's host (``host
api.example.com``). The runner counts, per dependency, the steps that failed in a row:

* a step's failure is counted once, after its retries are spent (a step that fails once and
  then succeeds on a retry is a success, and never counts); it is counted against the host
  when the step has one (the host failed, not the HTTP tool: one host down does not take
  ``http_get`` down for every other host), else against the tool;
* a step that succeeds resets the count of each of its dependencies;
* failures that blame the step's own input rather than the dependency neither count nor
  reset (:data:`INPUT_FAILURES`: invalid arguments, an unresolved reference, a write outside
  the boundary, a failed check, an unusable URL, an HTTP 4xx answer other than 408 and 429,
  which shows the host is up), nor do steps that never ran;
* a call the cost caps refused (:data:`BUDGET_REFUSALS`: the run's budget, or an agent
  step's own, would not hold its estimate, so nothing was sent) is the run's brake, not the
  dependency failing: it neither counts nor resets (three model steps refused by the
  budget do not take ``llm`` down, and a replanner is not told that the model is down).

After ``after`` failures in a row (``RunLimits.breaker_after``, 3 by default) the dependency
is **down** for the rest of the run: a step that needs it fails at once with reason
``dependency_down``, without an attempt (a retry that would need it is not made either), and
a replanner is told which dependency is down so that the new plan avoids it. There is no
half-open probe within a run: a resumed run starts with every dependency up.
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any, Literal

__all__ = [
    "BUDGET_REFUSALS",
    "INPUT_FAILURES",
    "CircuitBreaker",
    "Dependency",
    "DownDependency",
    "counts_against_dependency",
    "step_dependencies",
    "url_host",
]

INPUT_FAILURES: frozenset[str] = frozenset(
    {
        "invalid_args",
        "reference_error",
        "write_outside_boundary",
        "check_failed",
        "invalid_url",
        "invalid_request",
        "dependency_down",
        "upstream_failed",
    }
)
"""Failure reasons that say nothing about the dependency: they neither count nor reset."""

BUDGET_REFUSALS: frozenset[str] = frozenset({"budget", "agent_budget"})
"""Failure reasons of a call the cost caps refused before sending it (the run's budget:
``budget``; an ``agent`` step's own: ``agent_budget``): the brake stopped the step, the
dependency was never asked; they neither count nor reset."""


def counts_against_dependency(reason: str | None) -> bool:
    """Whether a failed step with ``reason`` counts towards its dependencies' breakers.

    Args:
        reason: the step's reason code (``tool_error``, ``timeout``, ``http_503``...).

    Returns:
        False for :data:`INPUT_FAILURES`, :data:`BUDGET_REFUSALS` and HTTP 4xx answers other
        than 408 and 429 (``http_404``: the host answered, the request was wrong); True
        otherwise.
    """
    if reason is None:
        return True
    if reason in INPUT_FAILURES or reason in BUDGET_REFUSALS:
        return False
    return not (reason.startswith("http_4") and reason not in ("http_408", "http_429"))


def url_host(value: Any) -> str | None:
    """The lower-cased host of an ``http://`` or ``https://`` URL (with ``:port`` when one
    is given), or None for anything else."""
    if not isinstance(value, str):
        return None
    try:
        parts = urllib.parse.urlsplit(value.strip())
        host = parts.hostname
        port = parts.port
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not host:
        return None
    return f"{host}:{port}" if port is not None else host


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class Dependency:
    """Something steps need: a tool (``kind="tool"``, its name) or an HTTP host
    (``kind="host"``, ``api.example.com`` or ``127.0.0.1:8080``)."""

    kind: Literal["tool", "host"]
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


@dataclasses.dataclass(frozen=True, slots=True)
class DownDependency:
    """A dependency the breaker took out of the run.

    Attributes:
        dependency: the tool or host.
        failed_steps: the steps whose failures in a row opened the breaker, in order.
        detail: the last of those failures, in words (reason: detail).
        time: when it went down, seconds since the epoch (the run's clock).
    """

    dependency: Dependency
    failed_steps: tuple[int, ...]
    detail: str
    time: float

    def describe(self) -> str:
        """One line: ``tool lookup is down: steps 1, 2, 3 failed in a row (last:
        tool_error: ...)``."""
        steps = ", ".join(map(str, self.failed_steps))
        return f"{self.dependency} is down: steps {steps} failed in a row (last: {self.detail})"

    def as_dict(self) -> dict[str, Any]:
        """``{"kind", "name", "steps", "detail", "time"}`` for JSON output."""
        return {
            "kind": self.dependency.kind,
            "name": self.dependency.name,
            "steps": list(self.failed_steps),
            "detail": self.detail,
            "time": self.time,
        }


class CircuitBreaker:
    """Counts failures in a row per dependency and says which are down (module docstring).

    Args:
        after: failures in a row that take a dependency down (>= 1).

    Raises:
        ValueError: ``after`` < 1.
    """

    def __init__(self, after: int) -> None:
        if after < 1:
            raise ValueError(f"breaker_after must be >= 1 or None, not {after}")
        self.after = after
        self.streaks: dict[Dependency, list[int]] = {}
        self.down: dict[Dependency, DownDependency] = {}

    def blocking(self, dependencies: Sequence[Dependency]) -> DownDependency | None:
        """The first of ``dependencies`` that is down, or None."""
        for dependency in dependencies:
            found = self.down.get(dependency)
            if found is not None:
                return found
        return None

    def succeeded(self, dependencies: Sequence[Dependency]) -> None:
        """A step needing ``dependencies`` succeeded: their counts start again at 0."""
        for dependency in dependencies:
            self.streaks.pop(dependency, None)

    def failed(
        self,
        step_id: int,
        dependencies: Sequence[Dependency],
        reason: str | None,
        detail: str,
        now: float,
    ) -> list[DownDependency]:
        """A step needing ``dependencies`` failed (after its retries) with ``reason``.

        Args:
            step_id: the step.
            dependencies: what it needed (the failure is counted against its host when it
                has one, else against its tool).
            reason: its reason code (see :func:`counts_against_dependency`).
            detail: its failure in words, for :attr:`DownDependency.detail`.
            now: the time, seconds since the epoch.

        Returns:
            The dependencies this failure took down (usually none).
        """
        if not counts_against_dependency(reason):
            return []
        hosts = [dependency for dependency in dependencies if dependency.kind == "host"]
        opened: list[DownDependency] = []
        for dependency in hosts or dependencies:
            if dependency in self.down:
                continue
            streak = self.streaks.setdefault(dependency, [])
            streak.append(step_id)
            if len(streak) >= self.after:
                down = DownDependency(
                    dependency, tuple(streak), f"{reason or 'tool_error'}: {detail}", now
                )
                self.down[dependency] = down
                del self.streaks[dependency]
                opened.append(down)
        return opened

    def snapshot(self) -> tuple[DownDependency, ...]:
        """Every dependency down, in the order they went down."""
        return tuple(self.down.values())


def step_dependencies(tool: str, args: Mapping[str, Any]) -> tuple[Dependency, ...]:
    """The dependencies of a step of ``tool`` with resolved ``args``: the tool, and the host
    of ``args["url"]`` when it is an http(s) URL."""
    host = url_host(args.get("url"))
    if host is None:
        return (Dependency("tool", tool),)
    return (Dependency("tool", tool), Dependency("host", host))
