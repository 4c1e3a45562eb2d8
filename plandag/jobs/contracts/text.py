"""A contract file → its text, the text's SHA-256 and the extractor that produced it.

Offsets in a contract record are character offsets into the text read here, so the record
keeps what identifies that text: the SHA-256 of its UTF-8 bytes and the extractor's name and
version (another extractor, or another version of one, may lay the same file out
differently).

Formats (by suffix, case-insensitive):

* ``.txt``, ``.md``: the bytes decoded as UTF-8 (a byte order mark dropped); a file that is
  not UTF-8 is read as Windows-1252, the usual legacy encoding of such files, and the
  extractor says so; a file holding a NUL byte is binary, not text, and refused. Line ends
  are kept as they are in the file.
* ``.pdf``: pypdf's ``extract_text`` page by page, pages joined by a form feed (``\\f``,
  the page break of ``pdftotext``). A PDF encrypted with an empty user password (only
  printing or copying restricted) is read; one that needs a password is refused.
* ``.docx``: python-docx: the body's paragraphs and tables in document order, one line per
  paragraph, table cells separated by a tab, rows by a line end.

A file that cannot be used raises :class:`ContractInputError`, whose ``code`` becomes the
error row's code: ``unsupported_type``, ``unreadable``, ``encrypted_pdf``, ``empty`` (no
byte, or only whitespace, or a PDF whose pages hold neither text nor images) and
``no_text`` (a scanned PDF: its pages hold images but no text layer; OCR it first).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import logging
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from plandag.errors import InputError

__all__ = [
    "CONTRACT_SUFFIXES",
    "ContractInputError",
    "ContractText",
    "read_contract",
    "read_contract_bytes",
    "text_sha256",
]

CONTRACT_SUFFIXES: tuple[str, ...] = (".txt", ".md", ".pdf", ".docx")
"""The suffixes :func:`read_contract` reads."""

PAGE_BREAK = "\f"
"""What separates two PDF pages in the extracted text."""

_OLE_SIGNATURE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # a legacy .doc, or an encrypted .docx


class ContractInputError(InputError):
    """A contract file that gives no text to extract from.

    Attributes:
        code: the error row's code (``unsupported_type``, ``unreadable``,
            ``encrypted_pdf``, ``empty``, ``no_text``).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclasses.dataclass(frozen=True, slots=True)
class ContractText:
    """The text of one contract as the extractor produced it.

    Attributes:
        text: the extracted text; record offsets are offsets into it.
        sha256: hex SHA-256 of ``text`` encoded as UTF-8.
        extractor: ``{"name", "version"}`` (for text files also ``"encoding"``).
        pages: pages of a PDF (None for other formats).
    """

    text: str
    sha256: str
    extractor: dict[str, str]
    pages: int | None = None


def text_sha256(text: str) -> str:
    """Hex SHA-256 of ``text`` encoded as UTF-8 (lone surrogates written as ``surrogatepass``)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def read_contract(path: Path) -> ContractText:
    """Read one contract file and extract its text.

    Args:
        path: a ``.txt``, ``.md``, ``.pdf`` or ``.docx`` file.

    Returns:
        The :class:`ContractText`.

    Raises:
        ContractInputError: with ``code`` ``unsupported_type`` (another suffix; nothing is
            read), ``unreadable`` (cannot be opened, or not a valid file of its type),
            ``encrypted_pdf``, ``empty`` or ``no_text`` (see the module's docstring).
    """
    suffix = path.suffix.lower()
    if suffix not in CONTRACT_SUFFIXES:
        hint = " (save it as .docx)" if suffix == ".doc" else ""
        shown = f"a {suffix} file" if suffix else "a file without a suffix"
        raise ContractInputError(
            "unsupported_type",
            f"{path}: {shown} is not a contract format read here{hint}; give "
            + ", ".join(CONTRACT_SUFFIXES),
        )
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ContractInputError(
            "unreadable", f"{path}: cannot read it ({error.strerror or error})"
        ) from error
    return read_contract_bytes(data, suffix, str(path))


def read_contract_bytes(data: bytes, suffix: str, source: str = "") -> ContractText:
    """:func:`read_contract` on bytes already read.

    Args:
        data: the file's bytes.
        suffix: its format: ``.txt``, ``.md``, ``.pdf`` or ``.docx``.
        source: the file's name, for messages.

    Returns:
        The :class:`ContractText`.

    Raises:
        ContractInputError: as :func:`read_contract`.
    """
    name = source or f"the {suffix} input"
    if not data.strip():
        raise ContractInputError("empty", f"{name}: the file is empty; nothing to extract")
    if suffix in (".txt", ".md"):
        contract = _plain_text(data, name)
    elif suffix == ".pdf":
        contract = _pdf_text(data, name)
    elif suffix == ".docx":
        contract = _docx_text(data, name)
    else:
        raise ContractInputError(
            "unsupported_type",
            f"{name}: {suffix or 'no suffix'} is not a contract format read here; give "
            + ", ".join(CONTRACT_SUFFIXES),
        )
    if not contract.text.strip():
        raise ContractInputError("empty", f"{name}: the document holds no text; nothing to extract")
    return contract


def _version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:  # pragma: no cover - installed with plandag
        return "unknown"


NUL = b"\x00"


def _plain_text(data: bytes, name: str) -> ContractText:
    from plandag import __version__

    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if NUL in data:  # valid UTF-8 may hold NUL bytes; no text file does
        raise ContractInputError(
            "unreadable",
            f"{name}: binary data, not text (a NUL byte at byte {data.find(NUL)}); "
            "give the contract as text, PDF or DOCX",
        )
    try:
        text = data.decode("utf-8")
        encoding = "utf-8"
    except UnicodeDecodeError:
        try:
            text = data.decode("cp1252")
        except UnicodeDecodeError as second:
            raise ContractInputError(
                "unreadable",
                f"{name}: neither UTF-8 nor Windows-1252 text (byte {second.start}); save it "
                "as UTF-8",
            ) from second
        encoding = "cp1252"
    extractor = {"name": "plandag-text", "version": __version__, "encoding": encoding}
    return ContractText(text, text_sha256(text), extractor)


_PYPDF_QUIET = threading.Lock()
_pypdf_readers = [0, logging.NOTSET]  # PDFs being read now, pypdf's level before the first


@contextlib.contextmanager
def _quiet_pypdf() -> Iterator[None]:
    """pypdf's warnings off while a PDF is read: they name no file ("EOF marker not found"),
    and what makes a PDF unusable reaches its error row with the file's name."""
    logger = logging.getLogger("pypdf")
    with _PYPDF_QUIET:
        if _pypdf_readers[0] == 0:
            _pypdf_readers[1] = logger.level
            logger.setLevel(logging.ERROR + 1)
        _pypdf_readers[0] += 1
    try:
        yield
    finally:
        with _PYPDF_QUIET:
            _pypdf_readers[0] -= 1
            if _pypdf_readers[0] == 0:
                logger.setLevel(_pypdf_readers[1])


def _pdf_text(data: bytes, name: str) -> ContractText:
    with _quiet_pypdf():
        return _read_pdf_text(data, name)


def _read_pdf_text(data: bytes, name: str) -> ContractText:
    from pypdf import PdfReader
    from pypdf.errors import FileNotDecryptedError, PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise ContractInputError(
                "encrypted_pdf",
                f"{name}: the PDF is encrypted with a password; decrypt it first "
                "(e.g. qpdf --decrypt --password=PASSWORD IN OUT)",
            )
        texts: list[str] = []
        images = 0
        for page in reader.pages:
            texts.append(page.extract_text() or "")
            if not texts[-1].strip():
                images += _image_count(page)
    except ContractInputError:
        raise
    except FileNotDecryptedError as error:
        raise ContractInputError(
            "encrypted_pdf", f"{name}: the PDF is encrypted ({error}); decrypt it first"
        ) from error
    except (PdfReadError, ValueError, KeyError, TypeError, OSError, RecursionError) as error:
        raise ContractInputError(
            "unreadable",
            f"{name}: not a readable PDF ({type(error).__name__}: {error}); check that the "
            "file is complete",
        ) from error
    except NotImplementedError as error:  # an unsupported filter or encryption algorithm
        raise ContractInputError(
            "unreadable", f"{name}: pypdf cannot read this PDF ({error})"
        ) from error
    text = PAGE_BREAK.join(texts)
    if not text.strip():
        if images:
            raise ContractInputError(
                "no_text",
                f"{name}: a scanned PDF: {len(texts)} page(s) of images without a text layer; "
                "run OCR first (e.g. ocrmypdf IN OUT) and extract from its output",
            )
        raise ContractInputError(
            "empty", f"{name}: the PDF's {len(texts)} page(s) hold no text; nothing to extract"
        )
    extractor = {"name": "pypdf", "version": _version("pypdf")}
    return ContractText(text, text_sha256(text), extractor, pages=len(texts))


def _image_count(page: Any) -> int:
    """Images drawn on a PDF page (0 when its resources cannot be read)."""
    try:
        return len(page.images)
    except Exception:  # a damaged image dictionary: the page still counts as textless
        return 0


def _docx_text(data: bytes, name: str) -> ContractText:
    import docx
    from docx.opc.exceptions import PackageNotFoundError
    from docx.table import Table
    from docx.text.paragraph import Paragraph
    from lxml.etree import XMLSyntaxError

    if data.startswith(_OLE_SIGNATURE):
        raise ContractInputError(
            "unreadable",
            f"{name}: not a .docx package but an OLE file (a password-protected document, or "
            "a legacy .doc renamed); remove the password or save it as .docx",
        )
    try:
        document = docx.Document(io.BytesIO(data))
        lines: list[str] = []
        for block in document.iter_inner_content():
            if isinstance(block, Paragraph):
                lines.append(block.text)
            elif isinstance(block, Table):
                for row in block.rows:
                    lines.append("\t".join(cell.text for cell in row.cells))
    except (
        PackageNotFoundError,
        zipfile.BadZipFile,
        XMLSyntaxError,
        KeyError,
        ValueError,
    ) as error:
        raise ContractInputError(
            "unreadable",
            f"{name}: not a readable .docx ({type(error).__name__}: {error}); check that the "
            "file is complete",
        ) from error
    text = "\n".join(lines)
    extractor = {"name": "python-docx", "version": _version("python-docx")}
    return ContractText(text, text_sha256(text), extractor)
