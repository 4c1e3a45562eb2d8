"""Start-up time of the ``plandag`` command line against a bare Python interpreter.

Runs each command ``--runs`` times (default 5), one after another, and prints the median
wall-clock seconds and its difference from ``python -c pass`` (the interpreter's own
start-up). Targets: ``plandag --version`` and ``plandag --help`` within 0.25 s of it,
``plandag check`` on a small plan within 0.8 s. The ``plandag`` console script next to the
interpreter is used (the one ``pip install`` made); run from the repository root::

    python benchmarks/startup.py [--runs 5]

Medians are only comparable within one run of this script: a loaded machine slows every
row, the baseline too. The load average before and after is printed with the table: on a
machine with more runnable processes than cores, wall-clock time grows with the load while
the CPU column (user + system) barely moves, so that column says what plandag itself costs.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMALL_PLAN = ROOT / "examples" / "plans" / "words.json"
SMALL_PLAN_TOOLS = ROOT / "examples" / "tools" / "text_tools.py"
TARGETS_S = {"plandag --version": 0.25, "plandag --help": 0.25, "plandag check": 0.8}


def _plandag() -> list[str]:
    script = Path(sys.executable).with_name("plandag")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "plandag"]


def commands() -> dict[str, list[str]]:
    """Each row's label and command line."""
    plandag = _plandag()
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "plandag --version": [*plandag, "--version"],
        "plandag --help": [*plandag, "--help"],
        "plandag check": [
            *plandag,
            "check",
            str(SMALL_PLAN),
            "--tools",
            str(SMALL_PLAN_TOOLS),
        ],
    }


def median_seconds(command: list[str], runs: int) -> tuple[float, float]:
    """Median wall-clock seconds and median CPU seconds (user + system, which a loaded
    machine inflates less) of ``runs`` runs of ``command`` (each must exit 0)."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, timeout=120)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def compile_bytecode() -> None:
    """Write plandag's bytecode (``__pycache__``), as an installed wheel has it: with
    ``PYTHONDONTWRITEBYTECODE`` set, an editable install otherwise compiles every module
    from source at each start."""
    import compileall

    compileall.compile_dir(ROOT / "plandag", quiet=1)


def main(argv: list[str] | None = None) -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per command (default 5)")
    runs = parser.parse_args(argv).runs
    compile_bytecode()
    load_before = os.getloadavg()[0]
    medians = {label: median_seconds(command, runs) for label, command in commands().items()}
    load_after = os.getloadavg()[0]
    wall_base, cpu_base = medians["python -c pass"]
    print(f"start-up, median of {runs} runs (seconds; CPU = user + system)")
    print(
        f"machine: {os.cpu_count()} cores, load average (1 min) {load_before:.1f} before, "
        f"{load_after:.1f} after"
    )
    print(
        f"{'command':<20} {'wall':>7} {'- python':>9} {'CPU':>7} {'- python':>9} "
        f"{'target':>7}  wall ok"
    )
    for label, (wall, cpu) in medians.items():
        extra = wall - wall_base
        target = TARGETS_S.get(label)
        verdict = "" if target is None else ("yes" if extra <= target else "NO")
        shown_target = "" if target is None else f"<={target:.2f}"
        print(
            f"{label:<20} {wall:>7.3f} {extra:>+9.3f} {cpu:>7.3f} {cpu - cpu_base:>+9.3f} "
            f"{shown_target:>7}  {verdict}"
        )


if __name__ == "__main__":
    main()
