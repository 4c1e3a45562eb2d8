"""pytest-benchmark suite for NF-e extraction: ``pytest benchmarks/ --benchmark-enable``.

One benchmark round is one pass over every valid shared invoice (``SOURCES.md`` status
``ok``), by plandag's stored plan or by the plain lxml baseline; docs/s = files / mean.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from benchmarks.extract_bench import DEFAULT_DATA_DIR, valid_invoice_files
from benchmarks.plain_lxml_nfe import extract_file

pytestmark = pytest.mark.skipif(
    not (DEFAULT_DATA_DIR / "SOURCES.md").is_file(), reason="shared NF-e data not found"
)


@pytest.fixture(scope="module")
def files() -> list[Path]:
    return valid_invoice_files()


def test_plandag_extract(benchmark: Any, files: list[Path]) -> None:
    from plandag.extract.nfe import extract_document

    async def one_pass() -> int:
        count = 0
        for path in files:
            count += len(await extract_document(path))
        return count

    anyio.run(one_pass)  # compile the stored plan before timing
    assert benchmark(anyio.run, one_pass) == len(files)


def test_plain_lxml_extract(benchmark: Any, files: list[Path]) -> None:
    def one_pass() -> int:
        return sum(len(extract_file(path)) for path in files)

    assert benchmark(one_pass) == len(files)
