"""Fixtures of the contract tests: the shared CUAD contracts and generated documents.

The shared contracts are found at ``PLANDAG_SHARED_CONTRACTS``, else the first existing of
``<repo>/../shared/data/contracts`` (where CI lays ``shared/`` beside the clone) and
``/work/shared/data/contracts``; tests that need them skip when none exists. Generated
PDFs and DOCX files are written under the test's ``tmp_path``.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[3]


def _shared_contracts() -> Path | None:
    given = os.environ.get("PLANDAG_SHARED_CONTRACTS")
    candidates = [Path(given)] if given else []
    candidates += [_REPO.parent / "shared/data/contracts", Path("/work/shared/data/contracts")]
    return next((path for path in candidates if (path / "cuad_labels.jsonl").is_file()), None)


@pytest.fixture
def contracts_dir() -> Path:
    """The folder of the shared contracts (CUAD texts, their labels, a Portuguese template)."""
    found = _shared_contracts()
    if found is None:
        pytest.skip("the shared contracts are not here (set PLANDAG_SHARED_CONTRACTS)")
    return found


def pdf_bytes(pages: Sequence[Sequence[str]]) -> bytes:
    """A PDF whose page i holds the lines ``pages[i]`` (fpdf2, Helvetica, uncompressed)."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_compression(False)
    pdf.set_font("Helvetica", size=10)
    for lines in pages:
        pdf.add_page()
        for number, line in enumerate(lines):
            pdf.text(20, 20 + number * 8, line)
    return bytes(pdf.output())


@pytest.fixture
def make_pdf(tmp_path: Path) -> Callable[..., Path]:
    """``make_pdf(name, pages)``: write :func:`pdf_bytes` of ``pages`` to ``tmp_path/name``."""

    def make(name: str, pages: Sequence[Sequence[str]]) -> Path:
        path = tmp_path / name
        path.write_bytes(pdf_bytes(pages))
        return path

    return make


@pytest.fixture
def make_scanned_pdf(tmp_path: Path) -> Callable[[str], Path]:
    """``make_scanned_pdf(name)``: a two-page PDF of images only (a scan with no text layer)."""
    from fpdf import FPDF
    from PIL import Image

    def make(name: str) -> Path:
        image = Image.new("RGB", (200, 100), "white")
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        pdf = FPDF()
        for _ in range(2):
            pdf.add_page()
            pdf.image(io.BytesIO(buffer.getvalue()), x=10, y=10, w=150)
        path = tmp_path / name
        path.write_bytes(bytes(pdf.output()))
        return path

    return make


@pytest.fixture
def make_encrypted_pdf(tmp_path: Path) -> Callable[..., Path]:
    """``make_encrypted_pdf(name, user_password)``: a one-page PDF encrypted with RC4-128."""
    from pypdf import PdfReader, PdfWriter

    def make(name: str, user_password: str = "secret") -> Path:
        writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf_bytes([["Confidential terms."]]))))
        writer.encrypt(user_password=user_password, owner_password="owner", algorithm="RC4-128")
        path = tmp_path / name
        with path.open("wb") as handle:
            writer.write(handle)
        return path

    return make


@pytest.fixture
def make_docx(tmp_path: Path) -> Callable[..., Path]:
    """``make_docx(name, paragraphs, table=None)``: a .docx with the paragraphs, then a table
    of the given rows."""
    import docx

    def make(name: str, paragraphs: Sequence[str], table: Sequence[Sequence[str]] = ()) -> Path:
        document = docx.Document()
        for paragraph in paragraphs:
            document.add_paragraph(paragraph)
        if table:
            grid = document.add_table(rows=len(table), cols=len(table[0]))
            for row, cells in zip(grid.rows, table, strict=True):
                for cell, text in zip(row.cells, cells, strict=True):
                    cell.text = text
        path = tmp_path / name
        document.save(str(path))
        return path

    return make


@pytest.fixture
def anyio_backend() -> str:
    """The contract runs' backend: asyncio, as ``plandag extract contracts`` runs them."""
    return "asyncio"
