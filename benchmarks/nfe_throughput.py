"""NF-e throughput, side by side in one run: documents per second and CPU per document.

Usage (from the repository root)::

    .venv/bin/python benchmarks/nfe_throughput.py [--n 2000] [--repetitions 5]
        [--corpus DIR] [--seed 0] [--plandag PATH] [--compare CHECKOUT_OR_COMMAND]

Rows, measured in interleaved repetitions (each repetition runs every row once, in turn, so
that the shared machine's noise hits all of them), medians reported:

* ``lxml loop``: the bare lxml loop of ``benchmarks/plain_lxml_nfe.py`` over the files, in
  this process;
* ``plandag per-document loop``: :func:`plandag.extract.nfe.extract_document` on each file in
  turn, one event loop, in this process (no store, no trace, no output file), with
  ``run_plan``'s defaults; and the same loop with the run options ``plandag extract nfe``
  gives each document (:func:`plandag.cli.batch.batch_run_options`: lifted per-run limits,
  2 retries, the batch's budget, results not escaped): the extraction as the command runs
  it, so that the command rows' distance to it is the batch's own cost (output, store,
  trace, dispatch);
* ``plandag extract nfe --workers 1``, ``--workers 2`` and ``--cluster local`` (2 workers):
  the command with its defaults (store and trace on, a fresh store each repetition), in a
  child process; its rate is documents over the batch's own ``seconds`` (``--json``) less
  the seconds it spent starting its workers or cluster (``start_seconds``), so the
  command's start-up is left out and reported apart; an option the command lacks is shown
  ``n/a``;
* with ``--compare``: the same command rows of another plandag (a checkout's folder, run
  with this Python and that folder first on ``PYTHONPATH``, or a ``plandag`` command), in
  the same turns: before and after in one run.

Ratios are to the lxml loop; each command row shows its target (``--workers 1`` at least
0.6x the lxml loop, ``--workers 2`` at least 1.7x ``--workers 1``, the local cluster at least
0.85x ``--workers 2``) with the measured ratio of medians.

CPU (the second table), per document, median: each command row also runs on the first
``--start-documents`` files (start-up and little else), and the difference of the two runs
over the difference of their documents is the CPU one more document costs, start-up left
out. ``tree``: the command and every process it started (worker processes, Dask's
scheduler, nannies and workers), counted through Linux's child subreaper (each run is made
in a small runner process that adopts every orphan and reaps it, then reads
``RUSAGE_CHILDREN``); ``parent, whole command``: the command's own process (all its
threads), read from ``/proc/PID/stat`` before it is reaped (the start-up runs' own spread,
±30-50 ms, moves this figure by ±0.01-0.02 ms a document at 3,000 documents);
``parent in the batch``: what the command's process spends over the batch's documents, as
the command itself reports it (``cpu_seconds`` of ``--json``: from the expansion of the
inputs to the store's close, starting and stopping the workers left out; n/a for a
``plandag`` that does not report it), the start-up run's taken off as above (which leaves
out the batch's own fixed costs too: the modules it imports on its first document, the
run's creation, the store's close) — the process's start-up, whose spread moves the whole
command's figure, is in neither count. The targets are
judged on ``parent in the batch`` where the command reports it, else on the whole
command's difference. The parent's share of the tree is the serial fraction ``f`` of the
batch (Amdahl): however many cores, the batch goes at most ``1 / f`` times as fast as on
one, and ``1 / (f + (1 - f) / n)`` on ``n`` cores, printed for 2, 8 and 32. Targets: the
parent at most 0.15 ms per document with ``--workers 2``, the command's process at most
0.3 ms with ``--cluster local``. The machine's load (``uptime``) is printed
before and after. Start-up: the median wall time of ``plandag --version`` and of ``python -c
pass`` (5 each). The store's bytes per document: (database + WAL + blobs) / documents of the
last ``--workers 1`` store (``plandag.store.gc.store_size``), traces apart.

The invoices are made by ``benchmarks/generate_nfe.py`` (``--seed``) into a temporary folder,
or read from ``--corpus`` (generated there when it holds no ``.xml`` file).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` and ``plandag`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import anyio

from benchmarks.generate_nfe import generate
from benchmarks.plain_lxml_nfe import extract_file

__all__ = ["Command", "Row", "amdahl", "main", "measure", "render", "render_cpu", "run_measured"]

LXML = "lxml loop (benchmarks/plain_lxml_nfe.py)"
PER_DOCUMENT = "plandag per-document loop (extract_document)"
PER_DOCUMENT_AS_COMMAND = "plandag per-document loop, the command's run options"
CLI_WORKERS = "plandag extract nfe --workers {workers}"
CLI_CLUSTER = "plandag extract nfe --cluster local (2 workers)"
#: Cores for which the speed-up ceiling is printed.
CORES = (2, 8, 32)

# Runs one command and prints, as JSON, its own CPU seconds (read from /proc before it is
# reaped), the CPU seconds of its whole process tree (every orphan adopted: Linux's child
# subreaper), its wall seconds, exit code and standard output.
_RUNNER = r"""
import ctypes, json, os, resource, subprocess, sys, tempfile, time

def cpu_of(pid):
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

argv = json.loads(sys.argv[1])
try:
    subreaper = ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
except (OSError, AttributeError):
    subreaper = False
before = resource.getrusage(resource.RUSAGE_CHILDREN)
with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
    started = time.perf_counter()
    child = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
    parent = None
    if hasattr(os, "waitid"):
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        parent = cpu_of(child.pid)
    code = child.wait()
    wall = time.perf_counter() - started
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            time.sleep(0.05)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out.seek(0)
    err.seek(0)
    print(json.dumps({
        "parent": parent,
        "tree": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
        "complete_tree": subreaper,
        "wall": wall,
        "code": code,
        "stdout": out.read().decode("utf-8", "replace"),
        "stderr": err.read().decode("utf-8", "replace")[-2000:],
    }))
"""


@dataclass
class Command:
    """A ``plandag`` to run: its argv prefix and the environment it needs (a checkout's
    folder on ``PYTHONPATH``), and the name shown in the table."""

    argv: list[str]
    environment: dict[str, str] = field(default_factory=dict)
    name: str = ""


@dataclass
class Row:
    """One line of the table: its label, the seconds of each repetition (empty: n/a), the
    seconds spent starting workers or a cluster in each (left out of the rate), and the
    target: at least ``target`` times the rate of the row labelled ``target_of``.

    ``cpu`` and ``parent``: per repetition, the CPU seconds ``documents`` more documents cost
    the whole process tree and the command's own process (start-up left out);
    ``batch_parent``: per repetition, the CPU seconds ``documents`` more documents cost the
    command's process by its own count over the batch (``cpu_seconds``; empty when it does
    not report it);
    ``parent_target``: the most milliseconds per document the parent may take."""

    label: str
    seconds: list[float] = field(default_factory=list)
    note: str = ""
    start: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    target: float | None = None
    target_of: str = ""
    parent: list[float] = field(default_factory=list)
    parent_target: float | None = None
    batch_parent: list[float] = field(default_factory=list)

    def rate(self, documents: int) -> float | None:
        """Documents per second at the median, or None when not measured."""
        return documents / statistics.median(self.seconds) if self.seconds else None


def _plandag_command(explicit: str | None) -> Command:
    if explicit:
        return Command([explicit], name=explicit)
    beside = Path(sys.executable).with_name("plandag")
    if beside.is_file():
        return Command([str(beside)], name="this checkout")
    found = shutil.which("plandag")
    if found is None:
        raise SystemExit("plandag not found: give --plandag PATH")
    return Command([found], name="this checkout")


def _compare_command(given: str) -> Command:
    """``--compare``: a checkout's folder (run as ``python -m plandag`` with the folder first
    on ``PYTHONPATH``, so that its worker processes use it too, and ``PYTHONSAFEPATH`` set, so
    that a checkout the benchmark is started from is not put before it) or a ``plandag``
    command."""
    folder = Path(given)
    if folder.is_dir():
        if not (folder / "plandag" / "__init__.py").is_file():
            raise SystemExit(f"--compare {given}: not a plandag checkout (no plandag/)")
        path = os.pathsep.join([str(folder.resolve()), os.environ.get("PYTHONPATH", "")])
        return Command(
            [sys.executable, "-m", "plandag"],
            {"PYTHONPATH": path.rstrip(os.pathsep), "PYTHONSAFEPATH": "1"},
            given,
        )
    return Command([given], name=given)


def _help_mentions(command: Command, option: str) -> bool:
    shown = subprocess.run(
        [*command.argv, "extract", "nfe", "--help"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **command.environment},
    )
    return option in shown.stdout


def _wall(argv: Sequence[str], environment: Mapping[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(list(argv), capture_output=True, check=True, env={**os.environ, **environment})
    return time.perf_counter() - started


def run_measured(
    argv: Sequence[str], environment: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Run ``argv`` in a runner process and return what it measured: ``parent`` (the
    command's own CPU seconds, None where ``/proc`` is missing), ``tree`` (CPU seconds of the
    command and every process it started; ``complete_tree``: False where orphans could not be
    adopted), ``wall``, ``code`` and ``stdout``/``stderr``."""
    done = subprocess.run(
        [sys.executable, "-c", _RUNNER, json.dumps(list(argv))],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **(environment or {})},
    )
    measured: dict[str, Any] = json.loads(done.stdout)
    return measured


@dataclass
class _Pass:
    seconds: float
    start: float
    parent: float | None
    tree: float
    store: Path
    batch_parent: float | None


def _cli_pass(command: Command, corpus: Path, folder: Path, extra: Sequence[str]) -> _Pass:
    """One ``extract nfe`` run into a fresh folder."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    store = folder / "runs.sqlite3"
    argv = [*command.argv, "extract", "nfe", str(corpus), "-o", str(folder / "out.jsonl")]
    measured = run_measured([*argv, "--store", str(store), "--json", *extra], command.environment)
    if measured["code"] != 0:
        raise RuntimeError(
            f"{command.name}: extract nfe {' '.join(extra)} exited {measured['code']}: "
            f"{measured['stderr']}"
        )
    summary = json.loads(measured["stdout"])
    if summary["by_status"].get("ok") != summary["records"]:
        # every generated invoice is valid: anything else is the command's doing; say so
        print(
            f"warning: extract nfe {' '.join(extra)}: {summary['by_status']}, errors "
            f"{summary['error_codes']}",
            file=sys.stderr,
        )
    start = float(summary.get("start_seconds", 0.0))
    batch_parent = summary.get("cpu_seconds")
    return _Pass(
        float(summary["duration"]) - start,
        start,
        measured["parent"],
        measured["tree"],
        store,
        float(batch_parent) if batch_parent is not None else None,
    )


def _command_rows(command: Command, prefix: str) -> list[tuple[Row, list[str]]]:
    """The command rows of one ``plandag``: ``(row, extra arguments)``, or a row with a note
    and None arguments for an option the command lacks."""
    has_workers = _help_mentions(command, "--workers")
    has_cluster = _help_mentions(command, "--cluster")
    one = Row(prefix + CLI_WORKERS.format(workers=1), target=0.6, target_of=LXML)
    two = Row(
        prefix + CLI_WORKERS.format(workers=2),
        target=1.7,
        target_of=one.label,
        parent_target=0.15,
    )
    cluster = Row(prefix + CLI_CLUSTER, target=0.85, target_of=two.label, parent_target=0.3)
    rows: list[tuple[Row, list[str]]] = [(one, ["--workers", "1"] if has_workers else [])]
    if not has_workers:
        one.note = "the command has no --workers option: one process"
        two.note = "n/a: the command has no --workers option"
    rows.append((two, ["--workers", "2"] if has_workers else []))
    if not has_cluster:
        cluster.note = "n/a: the command has no --cluster option"
    rows.append((cluster, ["--cluster", "local", "--workers", "2"] if has_cluster else []))
    return [(row, ["n/a"] if row.note.startswith("n/a") else extra) for row, extra in rows]


def measure(
    files: Sequence[Path],
    corpus: Path,
    command: Command,
    repetitions: int,
    scratch: Path,
    compare: Command | None = None,
    start_documents: int = 16,
    rows: Sequence[str] = ("w1", "w2", "cluster"),
) -> tuple[list[Row], Path | None]:
    """Run every row ``repetitions`` times, interleaved. Returns the rows and the last
    ``--workers 1`` store (None when it did not run). ``compare``: another ``plandag`` whose
    command rows run in the same turns. ``start_documents``: the files of the start-up runs
    (the first ones), whose CPU is taken off each command row's (see the module's text).
    ``rows``: the command rows to run (``w1``, ``w2``, ``cluster``)."""
    from plandag.brakes.budget import Budget
    from plandag.brakes.retry import RetryPolicy
    from plandag.extract.nfe import extract_document
    from plandag.scheduler import RunLimits

    async def per_document() -> None:
        for path in files:
            await extract_document(path)

    async def per_document_as_command() -> None:
        # what plandag.cli.batch.batch_run_options gives each document with the defaults
        # (and extract_command's escape_results=False: the batch escapes each record once)
        options = {
            "retry": RetryPolicy(retries=2),
            "max_concurrency": None,
            "limits": RunLimits.lifted(),
            "budget": Budget(5.0, 1_000_000),
            "escape_results": False,
        }
        for path in files:
            await extract_document(path, run_options=options)

    def lxml_loop() -> None:
        for path in files:
            extract_file(path)

    small = scratch / "start-corpus"
    small.mkdir(parents=True, exist_ok=True)
    start_files = list(files[: max(1, min(start_documents, len(files) - 1))])
    for path in start_files:
        shutil.copy(path, small / path.name)
    extra_documents = len(files) - len(start_files)

    lxml = Row(LXML)
    loop = Row(PER_DOCUMENT)
    loop_as_command = Row(PER_DOCUMENT_AS_COMMAND)
    keys = ("w1", "w2", "cluster")
    owners: dict[int, Command] = {}
    command_rows: list[tuple[Row, list[str]]] = []
    contenders = [(command, "")]
    if compare is not None:
        contenders.append((compare, f"before ({compare.name}): "))
    for owner, prefix in contenders:
        for key, (row, extra) in zip(keys, _command_rows(owner, prefix), strict=True):
            if key in rows:
                owners[id(row)] = owner
                command_rows.append((row, extra))

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
        loop_as_command.seconds.append(timed(lambda: anyio.run(per_document_as_command)))
        for number, (row, extra) in enumerate(command_rows):
            if extra == ["n/a"]:
                continue
            owner = owners[id(row)]
            full = _cli_pass(owner, corpus, scratch / f"{number}-{repetition}", extra)
            start = _cli_pass(owner, small, scratch / f"{number}-{repetition}-start", extra)
            row.seconds.append(full.seconds)
            row.start.append(full.start)
            scale = len(files) / extra_documents if extra_documents else 0.0
            row.cpu.append((full.tree - start.tree) * scale)
            if full.parent is not None and start.parent is not None:
                row.parent.append((full.parent - start.parent) * scale)
            if full.batch_parent is not None and start.batch_parent is not None:
                row.batch_parent.append((full.batch_parent - start.batch_parent) * scale)
            if row.label == CLI_WORKERS.format(workers=1):
                store = full.store
    return [lxml, loop, loop_as_command, *(row for row, _ in command_rows)], store


def _uptime() -> str:
    """What ``uptime`` prints (the load averages over 1, 5 and 15 minutes), or the load
    averages alone where the command is missing."""
    try:
        shown = subprocess.run(["uptime"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        one, five, fifteen = os.getloadavg()
        return f"load average: {one:.2f}, {five:.2f}, {fifteen:.2f}"
    return shown.stdout.strip()


def _startup(command: Command, times: int = 5) -> tuple[float, float]:
    """Median wall seconds of ``plandag --version`` and of ``python -c pass``."""
    version = [_wall([*command.argv, "--version"], command.environment) for _ in range(times)]
    bare = [_wall([sys.executable, "-c", "pass"], {}) for _ in range(times)]
    return statistics.median(version), statistics.median(bare)


def render(rows: Sequence[Row], documents: int) -> str:
    """The table as Markdown: label, documents/s (median), ratio to the lxml loop, the target
    (a ratio to another row) with its measured ratio, the spread, the whole tree's CPU per
    document and the note."""
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


def amdahl(serial: float, cores: int) -> float:
    """The speed-up on ``cores`` cores of work whose ``serial`` fraction (0-1) runs on one
    core only (Amdahl's law): ``1 / (serial + (1 - serial) / cores)``."""
    return 1.0 / (serial + (1.0 - serial) / cores)


def render_cpu(rows: Sequence[Row], documents: int) -> str:
    """The CPU table as Markdown: per command row, the tree's CPU per document, the
    parent's as the command reports it over the batch (``in the batch``) and as the
    difference of the whole command's runs (medians and min-max, start-up left out), the
    parent's target and whether the target row (``in the batch`` where reported, else the
    whole command's) meets it, the parent's share of the tree (the serial fraction ``f``,
    from the same figure) and the speed-up ceiling it implies on 2, 8 and 32 cores and on
    any number (``1 / f``)."""
    lines = [
        "| path | tree CPU ms/doc | parent in the batch ms/doc | min-max "
        "| parent, whole command ms/doc | min-max | parent target | met? | serial fraction f | "
        + " | ".join(f"ceiling {cores} cores" for cores in CORES)
        + " | 1/f |",
        "|---|---|---|---|---|---|---|---|---|" + "---|" * len(CORES) + "---|",
    ]

    def per_document(values: Sequence[float]) -> tuple[float, str, str] | None:
        if not values:
            return None
        scaled = [value / documents * 1000 for value in values]
        median = statistics.median(scaled)
        return median, f"{median:.3f}", f"{min(scaled):.3f}-{max(scaled):.3f}"

    for row in rows:
        if not row.cpu:
            continue
        tree = statistics.median(row.cpu) / documents * 1000
        in_batch = per_document(row.batch_parent)
        whole = per_document(row.parent)
        judged = in_batch or whole
        cells = [
            f"{tree:.3f}",
            *(in_batch[1:] if in_batch else ("n/a", "")),
            *(whole[1:] if whole else ("n/a", "")),
        ]
        if judged is None:
            lines.append(f"| {row.label} | {' | '.join(cells)} | | | |" + " |" * len(CORES) + " |")
            continue
        parent = judged[0]
        target = met = ""
        if row.parent_target is not None:
            target = f"≤ {row.parent_target:g}"
            met = "yes" if parent <= row.parent_target else "no"
        serial = min(1.0, max(parent / tree, 1e-9)) if tree > 0 else 1.0
        ceilings = " | ".join(f"{amdahl(serial, cores):.2f}×" for cores in CORES)
        lines.append(
            f"| {row.label} | {' | '.join(cells)} | {target} | {met} | {serial:.3f} "
            f"| {ceilings} | {1 / serial:.1f}× |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Generate (or reuse) the corpus, measure every row, print both tables."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="invoices (default 2000)")
    parser.add_argument("--repetitions", type=int, default=5, help="interleaved repetitions")
    parser.add_argument("--corpus", type=Path, help="folder of invoices (generated if empty)")
    parser.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    parser.add_argument("--plandag", help="the plandag command to time (default: this venv's)")
    parser.add_argument(
        "--compare",
        help="another plandag timed alongside: a checkout's folder, or a plandag command",
    )
    parser.add_argument(
        "--rows",
        default="w1,w2,cluster",
        help="command rows to run, of w1, w2, cluster (default all three)",
    )
    parser.add_argument(
        "--start-documents",
        type=int,
        default=16,
        help="files of the start-up runs, taken off each command row's CPU (default 16)",
    )
    options = parser.parse_args(argv)
    if options.n < 2 or options.repetitions < 1 or options.start_documents < 1:
        parser.error("--n must be at least 2, --repetitions and --start-documents at least 1")
    command = _plandag_command(options.plandag)
    compare = _compare_command(options.compare) if options.compare else None
    with tempfile.TemporaryDirectory(prefix="nfe-throughput-") as temporary:
        scratch = Path(temporary)
        corpus = options.corpus or scratch / "corpus"
        files = sorted(corpus.glob("*.xml")) if corpus.is_dir() else []
        if not files:
            generate(options.n, corpus, seed=options.seed)
            files = sorted(corpus.glob("*.xml"))
        if len(files) != options.n:
            raise SystemExit(f"--corpus {corpus} holds {len(files)} files, not --n {options.n}")
        load_before = _uptime()
        started = time.perf_counter()
        rows, store = measure(
            files,
            corpus,
            command,
            options.repetitions,
            scratch,
            compare,
            start_documents=options.start_documents,
            rows=tuple(options.rows.split(",")),
        )
        elapsed = time.perf_counter() - started
        load_after = _uptime()
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
    print(f"uptime after:  {load_after}")
    print()
    print(render(rows, len(files)))
    print()
    print(
        f"CPU per document (the difference between {len(files)} documents and the first "
        f"{min(options.start_documents, len(files) - 1)}: start-up left out; tree = the "
        "command and every process it started; parent, whole command = the command's own "
        "process; parent in the batch = the same difference of what the command reports its "
        "process spent over the batch (--json cpu_seconds), the row the targets are judged "
        "on where reported):"
    )
    print()
    print(render_cpu(rows, len(files)))
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
