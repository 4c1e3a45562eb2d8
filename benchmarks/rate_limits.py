"""HTTP 429s from a rate-limited server, without and with plandag's own rate limit.

Run: ``python benchmarks/rate_limits.py [--steps 30] [--rpm 20] [--period 60]``. A local
OpenAI-compatible server (``plandag.testing.ChatCompletionsServer``) takes at most ``--rpm``
requests per ``--period`` seconds (a token bucket, as providers document theirs) and
answers 429 with ``Retry-After`` past it. A plan of ``--steps`` independent ``llm`` steps
runs against it twice, with the command line's retry policy (2 retries, delays raised to
the server's Retry-After):

* **without**: no rate limit in plandag (the default): every step calls at once;
* **with**: plandag's limit set to the server's (``--rpm N``, here
  :func:`plandag.models.ratelimit.configure_rate_limit` with the same period).

It prints, side by side: the 429s the server sent, the steps that succeeded and failed,
the calls that waited for a slot and the run's wall time. ``--period`` shorter than 60
runs a minute's pattern in less time (the smoke test does); the command line's ``--rpm``
is per minute.

Everything runs on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from plandag.brakes.retry import RetryPolicy  # noqa: E402
from plandag.compiler import compile_plan  # noqa: E402
from plandag.dag.plan import Plan  # noqa: E402
from plandag.executors import EXECUTOR_TOOLS, ModelAccess  # noqa: E402
from plandag.models import OpenAICompatibleClient  # noqa: E402
from plandag.models.ratelimit import RateLimit, configure_rate_limit, limiter_for  # noqa: E402
from plandag.scheduler.entry import run_plan  # noqa: E402
from plandag.scheduler.runner import RunLimits  # noqa: E402
from plandag.testing import ChatCompletionsServer  # noqa: E402
from plandag.tools.registry import Registry  # noqa: E402

__all__ = ["Outcome", "main", "measure", "render"]

MODEL = "local-model"


@dataclass(frozen=True)
class Outcome:
    """One run against the rate-limited server."""

    mode: str
    status: str
    http_429: int
    succeeded: int
    failed: int
    waited_calls: int
    seconds: float


def _plan(steps: int) -> Plan:
    return Plan.model_validate(
        {
            "goal": "ask",
            "steps": [
                {"id": number, "tool": "llm", "args": {"prompt": f"Say ok {number}."}}
                for number in range(1, steps + 1)
            ],
        }
    )


async def _run(steps: int, rpm: float, period_s: float, limited: bool) -> Outcome:
    configure_rate_limit(RateLimit(rpm=rpm) if limited else None, period_s=period_s)
    try:
        with ChatCompletionsServer(rpm=rpm, rate_period_s=period_s) as server:
            for _ in range(steps):
                server.push_text("ok")
            started = time.perf_counter()
            async with OpenAICompatibleClient(server.url + "/v1", api_key="k") as client:
                result = await run_plan(
                    compile_plan(_plan(steps), Registry(EXECUTOR_TOOLS)),
                    models=ModelAccess(client, MODEL),
                    limits=RunLimits(heartbeat_every=None),
                    retry=RetryPolicy(retries=2),  # the command line's default
                )
            seconds = time.perf_counter() - started
            statuses = [record.status for record in result.steps.values()]
            limiter = limiter_for("openai")
            return Outcome(
                mode=f"with --rpm {rpm:g}" if limited else "without",
                status=str(result.status),
                http_429=server.rate_limited,
                succeeded=statuses.count("succeeded"),
                failed=statuses.count("failed"),
                waited_calls=limiter.waits if limiter is not None else 0,
                seconds=seconds,
            )
    finally:
        configure_rate_limit(None)


def measure(steps: int = 30, rpm: float = 20, period_s: float = 60.0) -> list[Outcome]:
    """Both runs, without then with plandag's limit."""
    return [
        anyio.run(_run, steps, rpm, period_s, False),
        anyio.run(_run, steps, rpm, period_s, True),
    ]


def render(outcomes: Sequence[Outcome], steps: int, rpm: float, period_s: float) -> str:
    """The outcomes as a Markdown table."""
    lines = [
        f"{steps} llm steps at once; the server takes {rpm:g} requests per {period_s:g} s "
        "(429 with Retry-After past it); default retry policy (2 retries)",
        "",
        "| plandag | run | 429s received | steps succeeded | steps failed | calls that "
        "waited for a slot | wall time (s) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for outcome in outcomes:
        lines.append(
            f"| {outcome.mode} | {outcome.status} | {outcome.http_429} | {outcome.succeeded} | "
            f"{outcome.failed} | {outcome.waited_calls} | {outcome.seconds:.1f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30, help="llm steps (30)")
    parser.add_argument("--rpm", type=float, default=20, help="the server's limit (20)")
    parser.add_argument("--period", type=float, default=60.0, help="its period, s (60)")
    args = parser.parse_args(argv)
    outcomes = measure(args.steps, args.rpm, args.period)
    print(render(outcomes, args.steps, args.rpm, args.period))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
