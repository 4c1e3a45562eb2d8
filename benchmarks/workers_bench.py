"""Documents/s of ``plandag extract nfe`` (defaults: store and trace on) with ``--workers 1``,
``--workers 2`` and ``--cluster local`` (2 workers), side by side with ratios.

Usage (from the repository root; ``--cluster local`` needs the ``dask`` extra)::

    .venv/bin/python benchmarks/workers_bench.py [--count 1000] [--repeat 3] [--corpus DIR]

Without ``--corpus``, ``--count`` distinct invoices are generated into a temporary folder by
``benchmarks/generate_nfe.py`` (new keys, numbers and dates: neither duplicates nor resumed).
Each configuration runs ``--repeat`` times as a separate ``plandag extract nfe ... --json``
command; the rate is inputs / the batch's own ``duration`` (from the first input to the
last write: the pool's or the cluster's start is inside it, the command's start-up is not),
and the median is reported. Beside it, documents per CPU-second of the processes the
command reaps (``getrusage(RUSAGE_CHILDREN)``; start-up included), which a loaded machine
changes much less: with ``--workers 1`` that is everything, the per-core rate for sizing;
with ``--workers 2`` the workers are children of the forkserver, not counted, so it is the
command's own (serial) share: the most one command can write; with ``--cluster local`` the
LocalCluster's processes are counted. Targets: ``--workers 2``
>= 1.7x ``--workers 1`` on 2 free cores; ``--cluster local`` within 15 % of ``--workers 2``.
On a loaded machine the ratios say how much of the cores the batch got, not what it would
get alone: report the load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLANDAG = Path(sys.executable).with_name("plandag")

CONFIGURATIONS: list[tuple[str, list[str]]] = [
    ("--workers 1", ["--workers", "1"]),
    ("--workers 2", ["--workers", "2"]),
    ("--cluster local (2 workers)", ["--cluster", "local", "--workers", "2"]),
]


def generate(count: int, folder: Path) -> None:
    """``count`` invoices into ``folder`` with ``benchmarks/generate_nfe.py``."""
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "generate_nfe.py"), str(count), str(folder)],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def rate(corpus: Path, options: list[str], work: Path) -> tuple[float, float]:
    """Documents/s of one ``plandag extract nfe`` run over ``corpus``, and documents per
    CPU-second of its process tree."""
    output = work / "out.jsonl"
    store = work / "store.db"
    for leftover in (output, store):
        leftover.unlink(missing_ok=True)
    cpu = _children_cpu()
    done = subprocess.run(
        [
            str(PLANDAG),
            "extract",
            "nfe",
            str(corpus),
            "-o",
            str(output),
            "--store",
            str(store),
            "--json",
            *options,
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    summary = json.loads(done.stdout)
    cpu = _children_cpu() - cpu
    return float(summary["inputs"]) / float(summary["duration"]), float(summary["inputs"]) / cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1000, help="invoices to generate")
    parser.add_argument("--repeat", type=int, default=3, help="runs per configuration")
    parser.add_argument("--corpus", type=Path, help="a folder of invoices instead")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="plandag-workers-bench-") as temporary:
        work = Path(temporary)
        corpus = args.corpus
        if corpus is None:
            corpus = work / "corpus"
            generate(args.count, corpus)
        documents = sum(1 for _ in corpus.rglob("*.xml"))
        rates: dict[str, list[float]] = {}
        per_cpu: dict[str, list[float]] = {}
        for _ in range(args.repeat):  # interleaved, so load changes hit every row alike
            for name, options in CONFIGURATIONS:
                wall, cpu = rate(corpus, options, work)
                rates.setdefault(name, []).append(wall)
                per_cpu.setdefault(name, []).append(cpu)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    medians = {name: statistics.median(values) for name, values in rates.items()}
    base = medians["--workers 1"]
    two = medians["--workers 2"]
    print(
        f"{documents} invoices, median of {args.repeat}, {os.cpu_count()} cores, "
        f"load average {load:.1f}"
    )
    print(
        f"{'configuration':<30} {'docs/s':>8} {'vs --workers 1':>15} {'vs --workers 2':>15}"
        f" {'docs/CPU-s':>11}"
    )
    for name, value in medians.items():
        print(
            f"{name:<30} {value:>8.1f} {value / base:>14.2f}x {value / two:>14.2f}x"
            f" {statistics.median(per_cpu[name]):>11.1f}"
        )
    print(
        "docs/CPU-s: --workers 1 counts everything; --workers 2 only the command's own "
        "process (the serial share); --cluster local its processes and the cluster's"
    )
    print(f"runs (docs/s): {json.dumps({k: [round(v, 1) for v in vs] for k, vs in rates.items()})}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
