"""Compile time and report size for hostile plans, before and after, side by side.

Three plans built to make the compiler's work or its report explode:

* ``dup-default``: 10,000 steps sharing one id, under the default step limit (500);
* ``dup-raised``: the same with ``max_steps=10000`` (every duplicate is analysed);
* ``refs-5mb``: one 5 MB argument made of ``<step_x_result>`` repeated 333,334 times.

For each, the median of 3 runs of ``compile_plan`` (seconds), how many diagnostics the
``PlanError`` lists, and the size and time of the report ``plandag check --json`` prints
(the diagnostics as indented JSON). The "before" column runs the same measurement on another
revision of plandag, exported from git into a temporary folder::

    .venv/bin/python benchmarks/compile_hostile.py                  # this tree only
    .venv/bin/python benchmarks/compile_hostile.py --before REV     # REV side by side

Each side runs in its own process (``PYTHONPATH`` set to its source tree).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CASES = ("dup-default", "dup-raised", "refs-5mb")
REPEATS = 3


def _plan(case: str, scale: float = 1.0) -> tuple[dict[str, Any], dict[str, Any]]:
    step = {"id": 1, "tool": "json_select", "args": {"data": {"n": 1}, "expr": "n"}}
    steps = max(1, round(10_000 * scale))
    if case == "dup-default":
        return {"version": 1, "goal": "dup", "steps": [step] * steps}, {}
    if case == "dup-raised":
        return {"version": 1, "goal": "dup", "steps": [step] * steps}, {"max_steps": steps}
    data = "<step_x_result>" * max(1, round(333_334 * scale))
    refs = {"id": 1, "tool": "json_select", "args": {"data": data, "expr": "n"}}
    return {"version": 1, "goal": "refs", "steps": [refs]}, {}


def measure(scale: float = 1.0) -> dict[str, Any]:
    """Run every case in this process (with whatever plandag is importable); ``scale``:
    the fraction of the steps and references the cases hold (1.0: as described above)."""
    from plandag.compiler import compile_plan
    from plandag.errors import PlanError
    from plandag.tools.registry import default_registry

    registry = default_registry()
    results: dict[str, Any] = {}
    for case in CASES:
        plan, options = _plan(case, scale)
        text = json.dumps(plan)
        compile_s: list[float] = []
        report_s: list[float] = []
        diagnostics: list[Any] = []
        report = ""
        for _ in range(REPEATS):
            started = time.perf_counter()
            try:
                compiled = compile_plan(text, registry, **options)
                diagnostics = list(compiled.diagnostics)
            except PlanError as error:
                diagnostics = error.diagnostics
            compile_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            document = [diagnostic.as_dict() for diagnostic in diagnostics]
            report = json.dumps(document, ensure_ascii=False, indent=2) + "\n"
            report_s.append(time.perf_counter() - started)
        results[case] = {
            "compile_s": statistics.median(compile_s),
            "diagnostics": len(diagnostics),
            "report_bytes": len(report.encode("utf-8")),
            "report_s": statistics.median(report_s),
        }
    return results


def _run_side(source: Path, scale: float = 1.0) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(source))
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--measure", "--scale", str(scale)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),
    )
    return json.loads(done.stdout.splitlines()[-1])


def _export(revision: str, folder: Path) -> Path:
    archive = folder / "source.tar"
    with archive.open("wb") as handle:
        subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", revision, "plandag"],
            stdout=handle,
            check=True,
        )
    with tarfile.open(archive) as tar:
        tar.extractall(folder / "tree", filter="data")
    return folder / "tree"


def _size(count: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if count < 1000 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000  # type: ignore[assignment]
    raise AssertionError


def _shown(side: dict[str, Any] | None, case: str, key: str) -> str:
    if side is None:
        return "-"
    value = side[case][key]
    if key == "report_bytes":
        return _size(value)
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", metavar="REV", help="a git revision to compare with")
    parser.add_argument(
        "--scale", type=float, default=1.0, help="fraction of the cases' sizes (default 1)"
    )
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    if arguments.measure:
        print(json.dumps(measure(arguments.scale)))
        return
    after = _run_side(ROOT, arguments.scale)
    before: dict[str, Any] | None = None
    if arguments.before:
        with tempfile.TemporaryDirectory() as folder:
            before = _run_side(_export(arguments.before, Path(folder)), arguments.scale)
    rows = [("case", "figure", f"before ({arguments.before})" if before else "-", "after")]
    for case in CASES:
        for key, label in (
            ("compile_s", "compile, s (median of 3)"),
            ("diagnostics", "diagnostics listed"),
            ("report_bytes", "check --json output"),
            ("report_s", "report made, s"),
        ):
            rows.append((case, label, _shown(before, case, key), _shown(after, case, key)))
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    for index, row in enumerate(rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
        if index == 0:
            print("  ".join("-" * width for width in widths))


if __name__ == "__main__":
    main()
