"""CPU per model call of a contracts batch, and the contracts in flight at once.

The batch: the CUAD contracts and the Portuguese template of ``--contracts`` (default the
shared ones, ``../shared/data/contracts``, else ``examples/contracts``), each copied
``--copies`` times under a new name, extracted with the 41 CUAD fields at the default chunk
size by :func:`plandag.jobs.contracts.batch.extract_contracts` with the options ``plandag
extract contracts`` gives it (``--jobs``, its default ``--max-model-calls``, the default
retry policy, a shared budget with the slow start), against the local Messages API server
playing :class:`~plandag.jobs.contracts.scripted.ScriptedContracts`: replies quoting each
contract's CUAD-labelled clauses, each sent ``--reply-seconds`` after its request arrived.
The server runs in a process of its own, so its work is not counted.

Figures:

* **CPU ms per model call**: the batch process's CPU time (user + system,
  :func:`time.process_time`) from the batch's start to its end, divided by the model calls
  it made (a warm-up batch of one contract runs first, so imports are not counted);
* **contracts in flight**: at each moment, the contracts with a request to the provider
  outstanding (a message, or the token count asked before it: sent, answer not yet read);
  the most over the batch, its time-weighted mean and median from the first request to
  the last answer, and the share of that time with ``--jobs`` of them. The mean cannot reach
  ``--jobs``: a contract has no request out while its plan is built and its record made,
  and the batch's last contracts finish alone;
* the wall-clock seconds of the batch (they move with the machine's load; CPU time less).

``--before PATH`` measures a second source tree too (a checkout of main, its ``plandag``
imported with ``PYTHONPATH=PATH``) in a process of its own, and prints the two side by
side; each tree runs ``--runs`` times, alternating, and the table shows the medians.

Run: ``.venv/bin/python benchmarks/contracts_cpu.py [--before /path/to/main] [--jobs 4]
[--reply-seconds 0.5] [--copies 3] [--runs 3]``.
"""

from __future__ import annotations

import argparse
import contextvars
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parents[1]
SHARED = _REPO.parent / "shared" / "data" / "contracts"
EXAMPLES = _REPO / "examples" / "contracts"
_SERVER_LIFETIME_S = 900.0

_CONTRACT: contextvars.ContextVar[str] = contextvars.ContextVar("contract", default="?")


def default_contracts() -> Path:
    """The shared contracts when they are here, else the shipped examples."""
    for folder in (SHARED, Path("/work/shared/data/contracts"), EXAMPLES):
        if (folder / "cuad_labels.jsonl").is_file():
            return folder
    return EXAMPLES


def serve(labels: Path, reply_seconds: float) -> None:
    """Serve :class:`ScriptedContracts` of ``labels`` on a free port of 127.0.0.1, replies
    after ``reply_seconds``; print the base URL, then serve until standard input closes."""
    from plandag.jobs.contracts.scripted import ScriptedContracts
    from plandag.testing import MessagesServer

    scripted = ScriptedContracts(labels)
    with MessagesServer(default=scripted, ttft=reply_seconds) as server:
        print(server.url, flush=True)
        sys.stdin.read()  # until the parent closes the pipe (or exits)


class _Watched:
    """An LLM client that records, per contract, when each request to the provider (a
    message, or the token count before it) was sent and its answer read."""

    def __init__(self, inner: Any, log: list[tuple[float, int, str]]) -> None:
        self._inner = inner
        self._log = log
        self.provider = inner.provider
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def _watched(self, method: str, request: Any) -> Any:
        contract = _CONTRACT.get()
        self._log.append((time.perf_counter(), 1, contract))
        try:
            return await getattr(self._inner, method)(request)
        finally:
            self._log.append((time.perf_counter(), -1, contract))

    async def complete(self, request: Any) -> Any:
        self.calls += 1
        return await self._watched("complete", request)

    async def count_tokens(self, request: Any) -> Any:
        return await self._watched("count_tokens", request)


def in_flight(log: Sequence[tuple[float, int, str]], jobs: int) -> tuple[int, float, int, float]:
    """The contracts with a request outstanding, from the first request to the last answer
    of ``log`` (``(time, +1 sent | -1 read, contract)``): ``(most, time-weighted mean,
    time-weighted median, share of the time with at least jobs of them)``."""
    if not log:
        return 0, 0.0, 0, 0.0
    ordered = sorted(log, key=lambda item: (item[0], item[1]))
    open_calls: dict[str, int] = {}
    most = 0
    seconds_at: dict[int, float] = {}
    previous = ordered[0][0]
    for at, change, contract in ordered:
        seconds_at[len(open_calls)] = seconds_at.get(len(open_calls), 0.0) + (at - previous)
        previous = at
        count = open_calls.get(contract, 0) + change
        if count:
            open_calls[contract] = count
        else:
            open_calls.pop(contract, None)
        most = max(most, len(open_calls))
    span = ordered[-1][0] - ordered[0][0]
    if span <= 0:
        return most, float(most), most, 0.0
    mean = sum(count * seconds for count, seconds in seconds_at.items()) / span
    median, below = 0, 0.0
    for count in sorted(seconds_at):
        below += seconds_at[count]
        if below >= span / 2:
            median = count
            break
    full = sum(seconds for count, seconds in seconds_at.items() if count >= jobs)
    return most, mean, median, full / span


def _inputs(source: Path, folder: Path, copies: int) -> list[Path]:
    names = sorted(p.name for p in source.glob("cuad_*.txt"))
    names += sorted(p.name for p in source.glob("*.md") if p.name != "SOURCES.md")
    paths = []
    for copy in range(copies):
        for name in names:
            target = folder / f"{copy}_{name}"
            shutil.copyfile(source / name, target)
            paths.append(target)
    return paths


async def _batch(
    url: str,
    inputs: Sequence[Path],
    out: Path,
    jobs: int,
    log: list[tuple[float, int, str]],
    slots: int | None = None,
) -> tuple[Any, int]:
    import anyio

    from plandag.brakes.budget import Budget
    from plandag.brakes.retry import RetryPolicy
    from plandag.executors import ModelAccess
    from plandag.jobs.contracts.batch import extract_contracts
    from plandag.jobs.contracts.document import extract_contract
    from plandag.models import AnthropicClient
    from plandag.scheduler import RunLimits
    from plandag.tools.boundary import WriteBoundary
    from plandag.tools.registry import default_registry

    if slots is None:
        slots = _default_slots(jobs)
    client = AnthropicClient(api_key="local", base_url=url)
    watched = _Watched(client, log)
    run_options = {
        "models": ModelAccess(watched, "claude-haiku-4-5", call_slots=anyio.CapacityLimiter(slots)),  # type: ignore[arg-type]
        "budget": Budget(20.0, 5_000_000),
        "limits": RunLimits.lifted(),
        "retry": RetryPolicy(),
        "max_concurrency": None,
    }
    registry = default_registry(("contracts",))
    boundary = WriteBoundary([out.parent])

    async def extractor(path: Path, contract: Any) -> dict[str, Any]:
        token = _CONTRACT.set(path.name)
        try:
            return await extract_contract(
                path,
                registry=registry,
                run_options=run_options,
                write_boundary=boundary,
                contract=contract,
            )
        finally:
            _CONTRACT.reset(token)

    try:
        summary = await extract_contracts(
            list(inputs), out, jobs=jobs, extractor=extractor, run_options=run_options
        )
    finally:
        await client.aclose()
    return summary, watched.calls


def _default_slots(jobs: int) -> int:
    """``extract contracts``' default ``--max-model-calls`` in the checkout measured (16
    where it has no rule of its own)."""
    try:
        from plandag.jobs.contracts.calls import default_model_calls
    except ImportError:
        return 16
    from plandag.jobs.contracts.fields import CUAD_FIELDS

    return int(default_model_calls(jobs, CUAD_FIELDS))


def measure(source: Path, copies: int, jobs: int, reply_seconds: float) -> dict[str, Any]:
    """One batch of ``source``'s contracts × ``copies`` (after a one-contract warm-up)."""
    import anyio

    server = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--serve",
            str(source / "cuad_labels.jsonl"),
            "--reply-seconds",
            str(reply_seconds),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        if not url.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"the scripted server did not start (it printed {url!r})")
        with tempfile.TemporaryDirectory() as folder:
            root = Path(folder)
            inputs = _inputs(source, root, copies)
            warm: list[tuple[float, int, str]] = []
            anyio.run(_batch, url, inputs[:1], root / "warm.jsonl", jobs, warm)
            log: list[tuple[float, int, str]] = []
            cpu, wall = time.process_time(), time.perf_counter()
            summary, calls = anyio.run(_batch, url, inputs, root / "out.jsonl", jobs, log)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        if server.stdin is not None:
            server.stdin.close()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=30)
    most, mean, median, full = in_flight(log, jobs)
    return {
        "contracts": len(inputs),
        "statuses": summary.by_status,
        "calls": calls,
        "cpu_ms_per_call": 1000 * cpu / max(calls, 1),
        "cpu_s": cpu,
        "wall_s": wall,
        "in_flight_max": most,
        "in_flight_mean": mean,
        "in_flight_median": median,
        "in_flight_full": 100 * full,
    }


def _measure_in(tree: Path | None, args: argparse.Namespace) -> dict[str, Any]:
    """:func:`measure` in a process of its own, ``plandag`` imported from ``tree`` (None:
    this checkout)."""
    env = os.environ.copy()
    env["PYTHONPATH"] = str(tree if tree is not None else _REPO)
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--measure",
        "--contracts",
        str(args.contracts),
        "--copies",
        str(args.copies),
        "--jobs",
        str(args.jobs),
        "--reply-seconds",
        str(args.reply_seconds),
    ]
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=_SERVER_LIFETIME_S, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"the measurement failed:\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


_ROWS = (
    ("model calls", "calls", "{:.0f}"),
    ("CPU ms per model call", "cpu_ms_per_call", "{:.1f}"),
    ("CPU seconds", "cpu_s", "{:.2f}"),
    ("wall seconds", "wall_s", "{:.2f}"),
    ("contracts in flight, most", "in_flight_max", "{:.0f}"),
    ("contracts in flight, mean", "in_flight_mean", "{:.2f}"),
    ("contracts in flight, median", "in_flight_median", "{:.0f}"),
    ("% of the time with --jobs in flight", "in_flight_full", "{:.0f}"),
)


def render(columns: Sequence[tuple[str, Sequence[dict[str, Any]]]]) -> str:
    """A Markdown table: one row per figure, one column per tree (the median of its runs)."""
    header = ["figure", *(name for name, _ in columns)]
    rows = [header]
    for label, key, shape in _ROWS:
        cells = [label]
        for _, runs in columns:
            cells.append(shape.format(statistics.median(float(run[key]) for run in runs)))
        rows.append(cells)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for number, row in enumerate(rows):
        lines.append(
            "| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |"
        )
        if number == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> list[tuple[str, list[dict[str, Any]]]]:
    """Parse the arguments, measure, print the table; return the columns' runs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contracts", type=Path, default=default_contracts())
    parser.add_argument("--copies", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--reply-seconds", type=float, default=0.5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", type=Path, default=None, help="a checkout to compare with")
    parser.add_argument("--serve", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve is not None:
        serve(args.serve, args.reply_seconds)
        return []
    if args.measure:
        result = measure(args.contracts, args.copies, args.jobs, args.reply_seconds)
        print(json.dumps(result))
        return []
    trees: list[tuple[str, Path | None]] = []
    if args.before is not None:
        trees.append((f"before ({args.before})", args.before))
    trees.append(("this checkout", None))
    columns: list[tuple[str, list[dict[str, Any]]]] = [(name, []) for name, _ in trees]
    for _ in range(args.runs):
        for (_, tree), (_, runs) in zip(trees, columns, strict=True):
            runs.append(_measure_in(tree, args))
    first = columns[-1][1][0]
    print(
        f"{first['contracts']} contracts ({args.contracts}, {args.copies} copies), "
        f"--jobs {args.jobs}, replies after {args.reply_seconds:g} s, "
        f"median of {args.runs} run(s)"
    )
    print(render(columns))
    return columns


if __name__ == "__main__":
    main()
