"""Where plandag's NF-e extraction spends its time: cProfile over passes of every valid file.

Usage (from the repository root)::

    .venv/bin/python benchmarks/profile_extract.py [--passes 10] [--top 25]

Prints the functions with the most own time (``tottime``) and the most cumulative time,
``file:line(function)``, after one warm-up pass (which compiles the stored plan).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` and ``plandag`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import anyio

from benchmarks.extract_bench import valid_invoice_files


def main(argv: list[str] | None = None) -> int:
    """Profile ``--passes`` passes over the valid shared invoices; print the top costs."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passes", type=int, default=10, help="passes over the files")
    parser.add_argument("--top", type=int, default=25, help="functions listed per table")
    options = parser.parse_args(argv)

    from plandag.extract.nfe import extract_document

    files = valid_invoice_files()

    async def passes(count: int) -> None:
        for _ in range(count):
            for path in files:
                await extract_document(path)

    anyio.run(passes, 1)
    profile = cProfile.Profile()
    profile.enable()
    anyio.run(passes, options.passes)
    profile.disable()
    stats = pstats.Stats(profile, stream=sys.stdout)
    print(f"{options.passes} passes over {len(files)} files")
    stats.sort_stats("tottime").print_stats(options.top)
    stats.sort_stats("cumulative").print_stats(options.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
