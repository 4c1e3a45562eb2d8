"""Spend past the cost cap when the provider reports more than was reserved, and the
makespan of honest runs, with the slow start off and on.

The scenario: a plan of ``--steps`` (30) independent ``llm`` steps (``max_tokens`` 100 each,
the executor model ``claude-haiku-4-5``, $1 / $5 per million tokens) run with
``RunLimits(max_cost_usd=--max-cost)`` (0.05), every other brake at its default, against
the local Messages API server (:class:`plandag.testing.MessagesServer`) answering each
request after ``--reply-seconds`` (1.5 s), so that every call is in flight before any
settles. The server runs in a process of its own. The lying server reports ``--factor``
(10) times the tokens the call reserved: its input tokens as the server counts them (the
``count_tokens`` endpoint the reservation asks) and its ``max_tokens``, each times the
factor. The honest server reports what it sent (a two-letter reply), never more than was
reserved.

Each of ``--runs`` (7) rounds runs:

* the lying scenario with the slow start off (``slow_start=None``: only the ratio rule,
  which cannot act before a first call settles) and on (the default), spend ÷ cap for
  each: what the provider billed, every message request it received at its reported usage
  (never less than the run's ``spent_usd``: a call cancelled in flight, by the stop at 2x
  the plan's estimate, is billed though its usage never reaches the run);
* 30 honest calls with the slow start off and on, at the scenario's cap and at the
  default cap ($1.00): the run's ``duration_s`` (its makespan).

On a checkout without the slow start (``RunLimits`` has no ``slow_start``) the columns
"off" and "on" are the same code and labelled ``main``.

Run: ``.venv/bin/python benchmarks/budget_overshoot.py [--runs 7] [--reply-seconds 1.5]``;
prints a table, then its median and max rows.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import multiprocessing
import statistics
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection
from typing import Any

import anyio

from plandag.compiler import compile_plan
from plandag.executors import ModelAccess
from plandag.models.anthropic import AnthropicClient
from plandag.models.base import Usage
from plandag.models.pricing import DEFAULT_PRICES
from plandag.scheduler import RunLimits, run_plan
from plandag.testing import MessagesServer, ScriptedResponse, estimate_tokens
from plandag.testing.server import input_text
from plandag.tools.registry import default_registry

MODEL = "claude-haiku-4-5"
HAS_SLOW_START = "slow_start" in {field.name for field in dataclasses.fields(RunLimits)}
_SERVER_LIFETIME_S = 600.0


def lying(factor: float) -> Callable[[dict[str, Any]], ScriptedResponse]:
    """A responder reporting ``factor`` times the tokens the request reserved (its counted
    input tokens and its ``max_tokens``)."""

    def respond(body: dict[str, Any]) -> ScriptedResponse:
        counted = estimate_tokens(input_text(body))
        usage = {
            "input_tokens": round(factor * counted),
            "output_tokens": round(factor * int(body["max_tokens"])),
        }
        return ScriptedResponse.text("ok", usage=usage)

    return respond


def honest(body: dict[str, Any]) -> ScriptedResponse:
    """A two-letter reply; the server reports the tokens it counted and sent."""
    return ScriptedResponse.text("ok")


def plan(steps: int) -> dict[str, Any]:
    """``steps`` independent ``llm`` steps of 100 output tokens."""
    return {
        "version": 1,
        "goal": "many model calls at once",
        "steps": [
            {"id": n, "tool": "llm", "args": {"prompt": f"Say ok ({n}).", "max_tokens": 100}}
            for n in range(1, steps + 1)
        ],
    }


def limits(max_cost: float, slow_start: bool) -> RunLimits:
    """The run's limits: the cost cap, the slow start off (None) or at its default."""
    if not HAS_SLOW_START:
        return RunLimits(max_cost_usd=max_cost)
    if slow_start:
        return RunLimits(max_cost_usd=max_cost)
    return RunLimits(max_cost_usd=max_cost, slow_start=None)  # type: ignore[call-arg]


def _serve(
    responder: Callable[[dict[str, Any]], ScriptedResponse],
    reply_seconds: float,
    connection: Connection,
) -> None:
    """The server's process: serve until the parent says stop (or goes away), then send
    back what the provider billed: every message request it received, at the usage its
    reply reports (a call the client gave up on is billed all the same)."""
    with MessagesServer(default=responder, ttft=reply_seconds) as server:
        connection.send(server.url)
        connection.poll(_SERVER_LIFETIME_S)
        price = DEFAULT_PRICES.price(MODEL)
        billed = 0.0
        for request in server.message_requests:
            usage = responder(request.json).usage
            if usage:
                billed += price.cost(Usage(**usage))
    connection.send(billed)


@dataclasses.dataclass
class Served:
    """A server's URL, then (once it stopped) what it billed, US dollars."""

    url: str
    billed_usd: float = 0.0


@contextlib.contextmanager
def served(
    responder: Callable[[dict[str, Any]], ScriptedResponse], reply_seconds: float
) -> Iterator[Served]:
    """A :class:`MessagesServer` in a process of its own (so that its threads do not take
    the run's interpreter lock)."""
    context = multiprocessing.get_context("fork")
    parent, child = context.Pipe()
    process = context.Process(target=_serve, args=(responder, reply_seconds, child), daemon=True)
    process.start()
    try:
        if not parent.poll(30.0):
            raise SystemExit("the local server did not start within 30 s")
        server = Served(str(parent.recv()))
        yield server
        parent.send("stop")
        if parent.poll(30.0):
            server.billed_usd = float(parent.recv())
    finally:
        process.join(timeout=10.0)
        if process.is_alive():
            process.kill()
            process.join(timeout=5.0)


def once(
    steps: int,
    responder: Callable[[dict[str, Any]], ScriptedResponse],
    reply_seconds: float,
    run_limits: RunLimits,
) -> tuple[float, float]:
    """One run against a fresh server; returns ``(billed_usd, duration_s)``: what the
    provider billed (at least the run's own ``spent_usd``: a call cancelled in flight by a
    stop is billed, its usage never reaches the run) and the run's makespan."""
    compiled = compile_plan(plan(steps), default_registry())
    with served(responder, reply_seconds) as server:

        async def main() -> tuple[float, float]:
            client = AnthropicClient(api_key="local", base_url=server.url)
            try:
                result = await run_plan(
                    compiled, models=ModelAccess(client, MODEL), limits=run_limits
                )
            finally:
                await client.aclose()
            return result.spent_usd, result.duration_s

        spent, seconds = anyio.run(main)
    return max(spent, server.billed_usd), seconds


@dataclasses.dataclass
class Row:
    """One round: spend ÷ cap when lying, honest makespans (seconds)."""

    lying_off: float
    lying_on: float
    honest_cap_off: float
    honest_cap_on: float
    honest_default_off: float
    honest_default_on: float


def measure(
    runs: int, reply_seconds: float, steps: int, max_cost: float, factor: float
) -> list[Row]:
    """``runs`` rounds of the scenario (module docstring)."""
    rows = []
    default_cap = RunLimits().cost_cap or 1.0
    for _ in range(runs):
        values = []
        for responder, cap in (
            (lying(factor), max_cost),
            (honest, max_cost),
            (honest, default_cap),
        ):
            for slow in (False, True):
                spent, seconds = once(steps, responder, reply_seconds, limits(cap, slow))
                values.append(spent / cap if responder is not honest else seconds)
        rows.append(Row(values[0], values[1], values[2], values[3], values[4], values[5]))
    return rows


def render(rows: Sequence[Row], max_cost: float) -> str:
    """The table: a line per round, then the median and max of each column."""
    off, on = ("off", "on") if HAS_SLOW_START else ("main", "main")
    header = (
        f"{'run':>6}  {'lying spend/cap':>15} {'':>6}  "
        f"{'honest makespan s':>17} {'(cap $' + format(max_cost, 'g') + ')':>9}  "
        f"{'honest makespan s':>17} {'(cap $1)':>8}"
    )
    columns = (
        f"{'':>6}  {'slow start ' + off:>15} {on:>6}  {'slow start ' + off:>17} {on:>9}  "
        f"{'slow start ' + off:>17} {on:>8}"
    )
    lines = [header, columns]

    def line(label: str, values: Sequence[float]) -> str:
        return (
            f"{label:>6}  {values[0]:>15.2f} {values[1]:>6.2f}  {values[2]:>17.2f} "
            f"{values[3]:>9.2f}  {values[4]:>17.2f} {values[5]:>8.2f}"
        )

    table = [dataclasses.astuple(row) for row in rows]
    for number, values in enumerate(table, 1):
        lines.append(line(str(number), values))
    by_column = list(zip(*table, strict=True))
    lines.append(line("median", [statistics.median(column) for column in by_column]))
    lines.append(line("max", [max(column) for column in by_column]))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> list[Row]:
    """Parse the options, measure, print the table; returns the rows."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="rounds (7)")
    parser.add_argument(
        "--reply-seconds", type=float, default=1.5, help="seconds before each reply (1.5)"
    )
    parser.add_argument("--steps", type=int, default=30, help="llm steps at once (30)")
    parser.add_argument("--max-cost", type=float, default=0.05, help="cost cap, USD (0.05)")
    parser.add_argument(
        "--factor", type=float, default=10.0, help="times the reserved tokens reported (10)"
    )
    options = parser.parse_args(argv)
    plandag_log = logging.getLogger("plandag")
    level = plandag_log.level
    plandag_log.setLevel(logging.ERROR)  # the breaker's warnings per run
    try:
        rows = measure(
            options.runs, options.reply_seconds, options.steps, options.max_cost, options.factor
        )
    finally:
        plandag_log.setLevel(level)  # the caller's logging as it was
    print(
        f"{options.steps} llm steps, replies after {options.reply_seconds:g} s, lying server "
        f"reports {options.factor:g}x the reserved tokens, cap ${options.max_cost:g}"
    )
    print(render(rows, options.max_cost))
    return rows


if __name__ == "__main__":
    main()
