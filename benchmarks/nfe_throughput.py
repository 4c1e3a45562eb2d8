"""NF-e throughput, side by side in one run: documents per second on N generated invoices.

Usage (from the repository root)::

    .venv/bin/python benchmarks/nfe_throughput.py [--n 5000] [--repetitions 3]
        [--corpus DIR] [--seed 0] [--plandag PATH] [--compare PATH]

Rows, measured in interleaved repetitions (each repetition runs every row once, in turn, so
that the shared machine's noise hits all of them), medians reported:

* ``lxml loop``: the bare lxml loop of ``benchmarks/plain_lxml_nfe.py`` over the files, in
  this process;
* ``plandag per-document loop``: :func:`plandag.extract.nfe.extract_document` on each file in
  turn, one event loop, in this process (no store, no trace, no output file);
* ``plandag extract nfe --workers 1``: the command with its defaults (store and trace on, a
  fresh store each repetition), in a child process; its rate is documents over the batch's
  own ``seconds`` (``--json``) less the seconds it spent starting its workers or cluster
  (``start_seconds``), so the command's start-up is left out and reported apart;
* ``--workers 2`` and ``--cluster local`` (2 workers): measured when the command has those
  options, otherwise shown ``n/a``; the LocalCluster's start (seconds, median) is named in
  the row's note;
* with ``--compare PATH``: another ``plandag`` (an older checkout's) with its defaults, timed
  like the ``--workers 1`` row in the same turns: a before/after in one run.

Ratios are to the lxml loop; each command row also shows its target (README, "Every core and
a cluster"): ``--workers 1`` at least 0.5x the lxml loop, ``--workers 2`` at least 1.7x
``--workers 1``, the LocalCluster at least 0.85x ``--workers 2``, with the measured ratio of
medians. ``CPU ms/doc``: CPU time of the command and the processes it reaped (user +
system, start-up included), per document, median: less moved by a loaded machine than the
wall-clock rates, and for ``--workers 1`` the per-core cost to size a deployment with. The
machine's load (``uptime``) is printed before and after. Start-up: the median
wall time of ``plandag --version`` and of ``python -c pass`` (5 each). The store's bytes per
document: (database + WAL + blobs) / documents of the last ``--workers 1`` store
(``plandag.store.gc.store_size``), traces apart.

The invoices are made by ``benchmarks/generate_nfe.py`` (``--seed``) into a temporary folder,
or read from ``--corpus`` (generated there when it holds fewer than N ``.xml`` files).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` and ``plandag`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import anyio

from benchmarks.generate_nfe import generate
from benchmarks.plain_lxml_nfe import extract_file

__all__ = ["Row", "main", "measure"]

LXML = "lxml loop (benchmarks/plain_lxml_nfe.py)"
PER_DOCUMENT = "plandag per-document loop (extract_document)"
CLI_WORKERS = "plandag extract nfe --workers {workers}"
CLI_CLUSTER = "plandag extract nfe --cluster local (2 workers)"


@dataclass
class Row:
    """One line of the table: its label, the seconds of each repetition (empty: n/a), the
    seconds spent starting workers or a cluster in each (left out of the rate), and the
    target: at least ``target`` times the rate of the row labelled ``target_of``."""

    label: str
    seconds: list[float] = field(default_factory=list)
    note: str = ""
    start: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    target: float | None = None
    target_of: str = ""

    def rate(self, documents: int) -> float | None:
        """Documents per second at the median, or None when not measured."""
        return documents / statistics.median(self.seconds) if self.seconds else None


def _plandag_command(explicit: str | None) -> list[str]:
    if explicit:
        return [explicit]
    beside = Path(sys.executable).with_name("plandag")
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("plandag")
    if found is None:
        raise SystemExit("plandag not found: give --plandag PATH")
    return [found]


def _help_mentions(command: list[str], option: str) -> bool:
    shown = subprocess.run(
        [*command, "extract", "nfe", "--help"], capture_output=True, text=True, check=False
    )
    return option in shown.stdout


def _wall(argv: Sequence[str]) -> float:
    started = time.perf_counter()
    subprocess.run(list(argv), capture_output=True, check=True)
    return time.perf_counter() - started


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _cli_pass(
    command: list[str], corpus: Path, folder: Path, extra: Sequence[str]
) -> tuple[float, float, Path, float]:
    """One ``extract nfe`` run into a fresh folder: (the batch's own seconds without the
    start of its workers or cluster, those start seconds, store path, CPU seconds of the
    command and the processes it reaped, start-up included)."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    store = folder / "runs.sqlite3"
    cpu_before = _children_cpu()
    done = subprocess.run(
        [
            *command,
            "extract",
            "nfe",
            str(corpus),
            "-o",
            str(folder / "out.jsonl"),
            "--store",
            str(store),
            "--json",
            *extra,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"extract nfe {' '.join(extra)} exited {done.returncode}: {done.stderr}")
    summary = json.loads(done.stdout)
    if summary["by_status"].get("ok") != summary["records"]:
        # every generated invoice is valid: anything else is the command's doing; say so
        print(
            f"warning: extract nfe {' '.join(extra)}: {summary['by_status']}, errors "
            f"{summary['error_codes']}",
            file=sys.stderr,
        )
    start = float(summary.get("start_seconds", 0.0))
    return float(summary["duration"]) - start, start, store, _children_cpu() - cpu_before


def measure(
    files: Sequence[Path],
    corpus: Path,
    command: list[str],
    repetitions: int,
    scratch: Path,
    compare: list[str] | None = None,
) -> tuple[list[Row], Path | None]:
    """Run every row ``repetitions`` times, interleaved. Returns the rows and the last
    ``--workers 1`` store (None when it did not run). ``compare``: another ``plandag``
    command (an older version) timed like the ``--workers 1`` row, in the same turns."""
    from plandag.extract.nfe import extract_document

    async def per_document() -> None:
        for path in files:
            await extract_document(path)

    def lxml_loop() -> None:
        for path in files:
            extract_file(path)

    has_workers = _help_mentions(command, "--workers")
    has_cluster = _help_mentions(command, "--cluster")
    lxml = Row(LXML)
    loop = Row(PER_DOCUMENT)
    one = Row(CLI_WORKERS.format(workers=1), target=0.5, target_of=LXML)
    two = Row(CLI_WORKERS.format(workers=2), target=1.7, target_of=one.label)
    cluster = Row(CLI_CLUSTER, target=0.85, target_of=two.label)
    other = Row(f"plandag extract nfe, defaults ({compare[0]})" if compare else "")
    if not has_workers:
        one.note = "today's command (no --workers option: one process)"
        two.note = "n/a: the command has no --workers option"
    if not has_cluster:
        cluster.note = "n/a: the command has no --cluster option"

    def timed(action: Callable[[], object]) -> float:
        gc.collect()
        started = time.perf_counter()
        action()
        return time.perf_counter() - started

    # Warm-up: files in the page cache, the stored plan compiled.
    lxml_loop()
    anyio.run(per_document)
    store: Path | None = None
    for repetition in range(repetitions):
        lxml.seconds.append(timed(lxml_loop))
        loop.seconds.append(timed(lambda: anyio.run(per_document)))
        seconds, start, store, cpu = _cli_pass(
            command, corpus, scratch / f"w1-{repetition}", ["--workers", "1"] if has_workers else []
        )
        one.seconds.append(seconds)
        one.start.append(start)
        one.cpu.append(cpu)
        if compare:
            other.seconds.append(_cli_pass(compare, corpus, scratch / f"cmp-{repetition}", [])[0])
        if has_workers:
            seconds, start, _, cpu = _cli_pass(
                command, corpus, scratch / f"w2-{repetition}", ["--workers", "2"]
            )
            two.seconds.append(seconds)
            two.start.append(start)
            two.cpu.append(cpu)
        if has_cluster:
            seconds, start, _, cpu = _cli_pass(
                command,
                corpus,
                scratch / f"cl-{repetition}",
                ["--cluster", "local", *(["--workers", "2"] if has_workers else [])],
            )
            cluster.seconds.append(seconds)
            cluster.start.append(start)
            cluster.cpu.append(cpu)
    return [lxml, loop, one, *([other] if compare else []), two, cluster], store


def _uptime() -> str:
    """What ``uptime`` prints (the load averages over 1, 5 and 15 minutes), or the load
    averages alone where the command is missing."""
    try:
        shown = subprocess.run(["uptime"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        one, five, fifteen = os.getloadavg()
        return f"load average: {one:.2f}, {five:.2f}, {fifteen:.2f}"
    return shown.stdout.strip()


def _startup(command: list[str], times: int = 5) -> tuple[float, float]:
    """Median wall seconds of ``plandag --version`` and of ``python -c pass``."""
    version = [_wall([*command, "--version"]) for _ in range(times)]
    bare = [_wall([sys.executable, "-c", "pass"]) for _ in range(times)]
    return statistics.median(version), statistics.median(bare)


def render(rows: Sequence[Row], documents: int) -> str:
    """The table as Markdown: label, documents/s (median), ratio to the lxml loop, the target
    (a ratio to another row) with its measured ratio, the spread, and the note."""
    base = rows[0].rate(documents)
    by_label = {row.label: row for row in rows}
    lines = [
        "| path | docs/s (median) | × lxml loop | target | measured | met? | min-max docs/s "
        "| CPU ms/doc | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        rate = row.rate(documents)
        if rate is None or base is None:
            lines.append(f"| {row.label} | n/a | n/a | | | | | | {row.note} |")
            continue
        target = measured = met = ""
        reference = by_label.get(row.target_of)
        reference_rate = reference.rate(documents) if reference is not None else None
        if row.target is not None and reference_rate:
            short = "lxml loop" if row.target_of == LXML else row.target_of.rsplit(" ", 2)[-2:]
            name = short if isinstance(short, str) else " ".join(short)
            target = f"≥ {row.target:g}× {name}"
            measured = f"{rate / reference_rate:.2f}×"
            met = "yes" if rate / reference_rate >= row.target else "no"
        spread = f"{documents / max(row.seconds):.0f}-{documents / min(row.seconds):.0f}"
        note = row.note
        if row.start and max(row.start) >= 0.05:
            started = f"start of workers/cluster {statistics.median(row.start):.1f} s left out"
            note = f"{note}; {started}" if note else started
        cpu = f"{statistics.median(row.cpu) / documents * 1000:.2f}" if row.cpu else ""
        lines.append(
            f"| {row.label} | {rate:.0f} | {rate / base:.2f} | {target} | {measured} | {met} "
            f"| {spread} | {cpu} | {note} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Generate (or reuse) the corpus, measure every row, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=5000, help="invoices (default 5000)")
    parser.add_argument("--repetitions", type=int, default=3, help="interleaved repetitions")
    parser.add_argument("--corpus", type=Path, help="folder of invoices (generated if short)")
    parser.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    parser.add_argument("--plandag", help="the plandag command to time (default: this venv's)")
    parser.add_argument(
        "--compare", help="another plandag command (e.g. an older version) timed alongside"
    )
    options = parser.parse_args(argv)
    if options.n < 1 or options.repetitions < 1:
        parser.error("--n and --repetitions must be at least 1")
    command = _plandag_command(options.plandag)
    with tempfile.TemporaryDirectory(prefix="nfe-throughput-") as temporary:
        scratch = Path(temporary)
        corpus = options.corpus or scratch / "corpus"
        files = sorted(corpus.glob("*.xml")) if corpus.is_dir() else []
        if len(files) < options.n:
            if files:
                raise SystemExit(f"--corpus {corpus} holds {len(files)} files, fewer than --n")
            generate(options.n, corpus, seed=options.seed)
            files = sorted(corpus.glob("*.xml"))
        files = files[: options.n]
        if len(files) != len(list(corpus.glob("*.xml"))):
            raise SystemExit(f"--corpus {corpus} holds more files than --n {options.n}")
        load_before = _uptime()
        started = time.perf_counter()
        rows, store = measure(
            files,
            corpus,
            command,
            options.repetitions,
            scratch,
            [options.compare] if options.compare else None,
        )
        elapsed = time.perf_counter() - started
        version, bare = _startup(command)
        size_line = ""
        if store is not None:
            from plandag.store import open_store
            from plandag.store.gc import store_size

            opened = open_store(store)
            try:
                size = store_size(opened)
            finally:
                opened.close()
            per_document = size.bytes_per_document or 0.0
            size_line = (
                f"store: {per_document:,.0f} bytes per document (database + WAL + blobs; "
                f"traces apart: {size.trace_bytes / len(files):,.0f} bytes per document)"
            )
    print(
        f"{len(files)} generated invoices (seed {options.seed}), {options.repetitions} "
        f"interleaved repetitions, {elapsed:.0f} s; CPUs: {os.cpu_count()}. Medians; on a "
        "shared, noisy machine read the ratios."
    )
    print(f"uptime before: {load_before}")
    print(f"uptime after:  {_uptime()}")
    print()
    print(render(rows, len(files)))
    print()
    print(
        f"start-up (median of 5, wall): plandag --version {version:.3f} s, python -c pass "
        f"{bare:.3f} s, difference {version - bare:.3f} s (not in the rates above)"
    )
    if size_line:
        print(size_line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
