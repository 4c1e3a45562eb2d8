"""NF-e extraction benchmark: documents per second through plandag's stored plan against
plain lxml code (``benchmarks/plain_lxml_nfe.py``) over the same files.

Both read every file from disk in the same order, one document at a time, in one process on
one event loop (``--jobs 1``): plandag through
:func:`plandag.extract.nfe.extract_document` (read → parse → invoice → five field groups in
parallel → record with the six checks, each a scheduled step), the baseline through
:func:`benchmarks.plain_lxml_nfe.extract_file`. The target: plandag at least half the
plain rate.

The inputs are the shared sample files listed with status ``ok`` in
``../shared/data/nfe/SOURCES.md`` (every valid invoice there).
"""

from __future__ import annotations

import dataclasses
import gc
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import anyio

from benchmarks.plain_lxml_nfe import extract_file

__all__ = ["DEFAULT_DATA_DIR", "ExtractFigures", "measure_extract", "valid_invoice_files"]

#: Where the shared NF-e samples are, from the repository root.
DEFAULT_DATA_DIR = Path(
    os.environ.get("PLANDAG_SHARED_NFE")
    or next(
        (
            folder / "shared" / "data" / "nfe"
            for folder in Path(__file__).resolve().parents[2:]
            if (folder / "shared" / "data" / "nfe").is_dir()
        ),
        Path(__file__).resolve().parents[2] / "shared" / "data" / "nfe",
    )
)
"""The shared corpus: ``PLANDAG_SHARED_NFE``, else the first ``shared/data/nfe`` found in the
repository's parent folder or above (a worktree sits one level deeper than the repository)."""


def valid_invoice_files(data_dir: Path = DEFAULT_DATA_DIR) -> list[Path]:
    """The files that ``data_dir/SOURCES.md`` lists with status ``ok``, sorted by name.

    The table's columns are ``file | repository | path | commit | license | status | ...``.

    Raises:
        FileNotFoundError: ``SOURCES.md`` is missing, or lists an ``ok`` file that is not
            in ``data_dir``.
    """
    files = []
    for line in (data_dir / "SOURCES.md").read_text("utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) > 5 and cells[5] == "ok":
            path = data_dir / cells[0]
            if not path.is_file():
                raise FileNotFoundError(f"{path} is listed in SOURCES.md but missing")
            files.append(path)
    return sorted(files)


@dataclasses.dataclass
class ExtractFigures:
    """Seconds per pass over all the files, per repetition.

    Attributes:
        documents: files per pass.
        records: invoices (records) per pass, as plandag produced them.
        plandag_s: plandag's time per pass.
        plain_s: the plain lxml code's time per pass.
        first_call_s: plandag's first document, which builds the registry and compiles
            the stored plan (left out of ``plandag_s``).
    """

    documents: int
    records: int = 0
    plandag_s: list[float] = dataclasses.field(default_factory=list)
    plain_s: list[float] = dataclasses.field(default_factory=list)
    first_call_s: float = 0.0

    def rate(self, values: list[float]) -> float:
        """Documents per second at the median of ``values``."""
        return self.documents / statistics.median(values)


def measure_extract(files: Sequence[Path], repetitions: int = 5) -> ExtractFigures:
    """Extract ``files`` with plandag and with plain lxml, ``repetitions`` passes each.

    One warm-up pass of each first (plan compiled, files in the page cache); then the two
    alternate so that noise on the shared machine hits both.

    Args:
        files: the inputs (at least one).
        repetitions: timed passes of each.

    Returns:
        The :class:`ExtractFigures`.

    Raises:
        ValueError: no files.
        RuntimeError: plandag produced an error record for one of them (not a valid
            invoice: the comparison would be unfair).
    """
    from plandag.extract.nfe import extract_document

    if not files:
        raise ValueError("no NF-e files to extract")
    figures = ExtractFigures(len(files))

    async def plandag_pass() -> tuple[float, int]:
        started = time.perf_counter()
        count = 0
        for path in files:
            records = await extract_document(path)
            count += len(records)
            if records[0].get("ide") is None:  # not extracted at all (a field error is fine)
                raise RuntimeError(f"{path}: {records[0].get('errors')}")
        return time.perf_counter() - started, count

    async def first_call() -> float:
        started = time.perf_counter()
        await extract_document(files[0])
        return time.perf_counter() - started

    def plain_pass() -> float:
        started = time.perf_counter()
        for path in files:
            extract_file(path)
        return time.perf_counter() - started

    figures.first_call_s = anyio.run(first_call)
    _, figures.records = anyio.run(plandag_pass)
    plain_pass()
    for _ in range(repetitions):
        gc.collect()
        elapsed, _ = anyio.run(plandag_pass)
        figures.plandag_s.append(elapsed)
        gc.collect()
        figures.plain_s.append(plain_pass())
    return figures
