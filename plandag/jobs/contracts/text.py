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
byte, or only whitespace, or a PDF whose pages hold neither text nor images), ``no_text``
(a scanned PDF: its pages hold images but no text layer; OCR it first), ``too_large`` and
``too_many_chunks`` (the limits below).

Limits, each on by default and lifted with None (docs/guides/contracts.md):

* ``max_bytes`` (:data:`MAX_INPUT_BYTES`, 64 MiB, as a research corpus's documents): a
  larger file is ``too_large``, told from its size before a byte is read, and never more
  than that is read.
* ``max_unpacked_bytes`` (:data:`MAX_UNPACKED_BYTES`, 256 MiB): a ``.docx`` is a zip
  package; the uncompressed sizes its central directory declares are added up before
  anything is parsed, and each part is then inflated once, counting the bytes it really
  gives (never more than the part declares nor the limit: a package that lies about its
  sizes is stopped there), so a 1 MB package holding 400 MB of XML is ``too_large`` in
  well under a second, in bounded memory.
* ``max_chars``: the most characters of text (the batch gives ``max_chunks *
  chunk_chars``): reading stops as soon as the text passes it (page by page, paragraph by
  paragraph), and the file is ``too_many_chunks``.
* PDFs: pypdf's own limits (a Flate stream inflating past 75 MB, an array or a page tree
  of more than 100,000 entries) make a bomb ``unreadable``, as does any other pypdf error.
* ``stop``: a :class:`threading.Event`; once it is set, reading stops at the next page or
  paragraph (:class:`ReadStopped`): a batch that gave up on the document (its time was
  up) does not leave a thread reading it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import logging
import os
import struct
import threading
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from plandag.errors import InputError

__all__ = [
    "CONTRACT_SUFFIXES",
    "MAX_INPUT_BYTES",
    "MAX_UNPACKED_BYTES",
    "ContractInputError",
    "ContractText",
    "ReadStopped",
    "read_contract",
    "read_contract_bytes",
    "text_sha256",
]

CONTRACT_SUFFIXES: tuple[str, ...] = (".txt", ".md", ".pdf", ".docx")
"""The suffixes :func:`read_contract` reads."""

MAX_INPUT_BYTES: int = 64 * 1024 * 1024
"""The largest contract file read by default (64 MiB, the largest document a research
corpus indexes): ``--max-input-bytes``."""

MAX_UNPACKED_BYTES: int = 256 * 1024 * 1024
"""The most bytes a ``.docx`` package may unpack to by default (256 MiB, its parts' sizes
added up): ``--max-unpacked-bytes``."""

_INFLATE_PIECE = 1 << 20  # bytes of a part inflated at once when its size is counted

PAGE_BREAK = "\f"
"""What separates two PDF pages in the extracted text."""

_OLE_SIGNATURE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # a legacy .doc, or an encrypted .docx


class ContractInputError(InputError):
    """A contract file that gives no text to extract from.

    Attributes:
        code: the error row's code (``unsupported_type``, ``unreadable``,
            ``encrypted_pdf``, ``empty``, ``no_text``, ``too_large``, ``too_many_chunks``).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class ReadStopped(Exception):
    """Reading stopped because the ``stop`` event was set (nobody waits for the text)."""


def _check_stop(stop: threading.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise ReadStopped("reading stopped")


def _too_long(name: str, max_chars: int) -> ContractInputError:
    return ContractInputError(
        "too_many_chunks",
        f"{name}: its text runs past {max_chars:,} characters, more than the chunks a "
        "contract may have (--max-chunks) hold at --chunk-chars each; split the document, "
        "or raise --max-chunks or --chunk-chars",
    )


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


def read_contract(
    path: Path,
    *,
    max_bytes: int | None = MAX_INPUT_BYTES,
    max_unpacked_bytes: int | None = MAX_UNPACKED_BYTES,
    max_chars: int | None = None,
    stop: threading.Event | None = None,
) -> ContractText:
    """Read one contract file and extract its text.

    Args:
        path: a ``.txt``, ``.md``, ``.pdf`` or ``.docx`` file.
        max_bytes: the largest file read, in bytes (default :data:`MAX_INPUT_BYTES`);
            None: no limit.
        max_unpacked_bytes: the most bytes a ``.docx`` may unpack to (default
            :data:`MAX_UNPACKED_BYTES`); None: no limit.
        max_chars: the most characters of text, or None (see the module's docstring).
        stop: reading stops at the next page or paragraph once it is set.

    Returns:
        The :class:`ContractText`.

    Raises:
        ContractInputError: with ``code`` ``unsupported_type`` (another suffix; nothing is
            read), ``unreadable`` (cannot be opened, or not a valid file of its type),
            ``encrypted_pdf``, ``empty``, ``no_text``, ``too_large`` or
            ``too_many_chunks`` (see the module's docstring).
        ReadStopped: ``stop`` was set.
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
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if max_bytes is not None and size > max_bytes:
                raise _too_large(str(path), size, max_bytes)
            data = _read_at_most(handle, max_bytes)
    except OSError as error:
        raise ContractInputError(
            "unreadable", f"{path}: cannot read it ({error.strerror or error})"
        ) from error
    if max_bytes is not None and len(data) > max_bytes:  # it grew while it was read
        raise _too_large(str(path), len(data), max_bytes)
    return read_contract_bytes(
        data,
        suffix,
        str(path),
        max_unpacked_bytes=max_unpacked_bytes,
        max_chars=max_chars,
        stop=stop,
    )


def _read_at_most(handle: Any, max_bytes: int | None) -> bytes:
    """The file's bytes, at most ``max_bytes + 1`` of them (one more tells it is larger),
    read a piece at a time: memory follows the file's size, not the limit."""
    pieces: list[bytes] = []
    left = max_bytes + 1 if max_bytes is not None else None
    while left is None or left > 0:
        piece = handle.read(_INFLATE_PIECE if left is None else min(_INFLATE_PIECE, left))
        if not piece:
            break
        pieces.append(piece)
        if left is not None:
            left -= len(piece)
    return b"".join(pieces)


def _too_large(name: str, size: int, max_bytes: int) -> ContractInputError:
    return ContractInputError(
        "too_large",
        f"{name}: {size:,} bytes, more than the {max_bytes:,} an input may have "
        "(--max-input-bytes); split it, or raise the limit",
    )


def read_contract_bytes(
    data: bytes,
    suffix: str,
    source: str = "",
    *,
    max_unpacked_bytes: int | None = MAX_UNPACKED_BYTES,
    max_chars: int | None = None,
    stop: threading.Event | None = None,
) -> ContractText:
    """:func:`read_contract` on bytes already read.

    Args:
        data: the file's bytes.
        suffix: its format: ``.txt``, ``.md``, ``.pdf`` or ``.docx``.
        source: the file's name, for messages.
        max_unpacked_bytes, max_chars, stop: as :func:`read_contract`.

    Returns:
        The :class:`ContractText`.

    Raises:
        ContractInputError: as :func:`read_contract`.
        ReadStopped: ``stop`` was set.
    """
    name = source or f"the {suffix} input"
    if not data.strip():
        raise ContractInputError("empty", f"{name}: the file is empty; nothing to extract")
    if suffix in (".txt", ".md"):
        contract = _plain_text(data, name)
        if max_chars is not None and len(contract.text) > max_chars:
            raise _too_long(name, max_chars)
    elif suffix == ".pdf":
        contract = _pdf_text(data, name, max_chars, stop)
    elif suffix == ".docx":
        contract = _docx_text(data, name, max_unpacked_bytes, max_chars, stop)
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


def _pdf_text(
    data: bytes, name: str, max_chars: int | None, stop: threading.Event | None
) -> ContractText:
    with _quiet_pypdf():
        return _read_pdf_text(data, name, max_chars, stop)


def _read_pdf_text(
    data: bytes, name: str, max_chars: int | None, stop: threading.Event | None
) -> ContractText:
    try:
        from pypdf import PdfReader
        from pypdf.errors import FileNotDecryptedError, PyPdfError
    except ImportError:
        raise ContractInputError(
            "missing_extra",
            f"{name}: reading a PDF needs the documents extra: pip install 'plandag[documents]'",
        ) from None

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
        chars = 0
        for page in reader.pages:
            _check_stop(stop)
            texts.append(page.extract_text() or "")
            chars += len(texts[-1]) + 1
            if max_chars is not None and chars > max_chars + 1:
                raise _too_long(name, max_chars)
            if not texts[-1].strip():
                images += _image_count(page)
    except (ContractInputError, ReadStopped):
        raise
    except FileNotDecryptedError as error:
        raise ContractInputError(
            "encrypted_pdf", f"{name}: the PDF is encrypted ({error}); decrypt it first"
        ) from error
    except MemoryError as error:
        raise ContractInputError(
            "unreadable", f"{name}: not readable in the memory there is (MemoryError)"
        ) from error
    except (PyPdfError, ValueError, KeyError, TypeError, OSError, RecursionError) as error:
        # PyPdfError: also pypdf's LimitReachedError (a stream that inflates past its
        # limit, an array or page tree with too many entries: a PDF bomb)
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


def _docx_text(
    data: bytes,
    name: str,
    max_unpacked_bytes: int | None,
    max_chars: int | None,
    stop: threading.Event | None,
) -> ContractText:
    try:
        import docx
        from docx.opc.exceptions import PackageNotFoundError
        from docx.table import Table
        from docx.text.paragraph import Paragraph
    except ImportError:
        raise ContractInputError(
            "missing_extra",
            f"{name}: reading a DOCX needs the documents extra: pip install 'plandag[documents]'",
        ) from None
    from lxml.etree import XMLSyntaxError

    if data.startswith(_OLE_SIGNATURE):
        raise ContractInputError(
            "unreadable",
            f"{name}: not a .docx package but an OLE file (a password-protected document, or "
            "a legacy .doc renamed); remove the password or save it as .docx",
        )
    try:
        if max_unpacked_bytes is not None:
            _check_unpacked(data, name, max_unpacked_bytes, stop)
        document = docx.Document(io.BytesIO(data))
        lines: list[str] = []
        chars = 0
        for block in document.iter_inner_content():
            _check_stop(stop)
            if isinstance(block, Paragraph):
                lines.append(block.text)
                chars += len(lines[-1]) + 1
            elif isinstance(block, Table):
                for row in block.rows:
                    lines.append("\t".join(cell.text for cell in row.cells))
                    chars += len(lines[-1]) + 1
            if max_chars is not None and chars > max_chars + 1:
                raise _too_long(name, max_chars)
    except (ContractInputError, ReadStopped):
        raise
    except MemoryError as error:
        raise ContractInputError(
            "too_large", f"{name}: not readable in the memory there is (MemoryError)"
        ) from error
    except (
        PackageNotFoundError,
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        zlib.error,
        XMLSyntaxError,
        KeyError,
        ValueError,
        NotImplementedError,
        EOFError,
    ) as error:
        raise ContractInputError(
            "unreadable",
            f"{name}: not a readable .docx ({type(error).__name__}: {error}); check that the "
            "file is complete",
        ) from error
    text = "\n".join(lines)
    extractor = {"name": "python-docx", "version": _version("python-docx")}
    return ContractText(text, text_sha256(text), extractor)


def _check_unpacked(
    data: bytes, name: str, max_unpacked_bytes: int, stop: threading.Event | None
) -> None:
    """Refuse a ``.docx`` package that unpacks to more than ``max_unpacked_bytes``: first by
    the sizes its central directory declares, then by inflating every part once, a piece at
    a time, counting what it really gives (never more than its declared size, nor the
    limit: a part that would give more is stopped there).

    Raises:
        ContractInputError: ``too_large``, or ``unreadable`` for a part that gives more (or
            less) than it declares.
        zipfile.BadZipFile: not a zip package.
    """
    with zipfile.ZipFile(io.BytesIO(data)) as package:
        members = package.infolist()
        declared = sum(member.file_size for member in members)
        if declared > max_unpacked_bytes:
            raise _unpacked_too_large(name, declared, max_unpacked_bytes)
        total = 0
        for member in members:
            _check_stop(stop)
            given = _inflated_size(data, member, min(member.file_size, max_unpacked_bytes - total))
            if given is None or given != member.file_size:
                raise ContractInputError(
                    "unreadable",
                    f"{name}: its part {member.filename} unpacks to "
                    f"{'more than' if given is None else f'{given:,} bytes, not'} the "
                    f"{member.file_size:,} bytes it declares; the package is damaged or "
                    "forged",
                )
            total += given


def _unpacked_too_large(name: str, size: int, limit: int) -> ContractInputError:
    return ContractInputError(
        "too_large",
        f"{name}: the .docx package declares {size:,} bytes unpacked, more than the {limit:,} "
        "it may have (--max-unpacked-bytes); split the document, or raise the limit",
    )


def _inflated_size(data: bytes, member: zipfile.ZipInfo, most: int) -> int | None:
    """The bytes ``member`` really inflates to, counted a piece at a time, or None as soon
    as it gives more than ``most`` (its declared size, or what the limit leaves).

    Raises:
        zipfile.BadZipFile: a part that is encrypted, or whose local header is damaged.
        NotImplementedError: a compression method other than stored or deflated.
        zlib.error: a deflated part that does not inflate.
    """
    if member.flag_bits & 0x1:
        raise zipfile.BadZipFile(f"{member.filename} is encrypted")
    header = member.header_offset
    if data[header : header + 4] != b"PK\x03\x04":
        raise zipfile.BadZipFile(f"{member.filename}: no local file header where it is said")
    name_length, extra_length = struct.unpack_from("<HH", data, header + 26)
    start = header + 30 + name_length + extra_length
    packed = memoryview(data)[start : start + member.compress_size]
    if member.compress_type == zipfile.ZIP_STORED:
        return len(packed) if len(packed) <= most else None
    if member.compress_type != zipfile.ZIP_DEFLATED:
        raise NotImplementedError(
            f"{member.filename} is compressed with method {member.compress_type}, which Word "
            "does not use"
        )
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    given = 0
    for offset in range(0, len(packed), _INFLATE_PIECE):
        pending: bytes = bytes(packed[offset : offset + _INFLATE_PIECE])
        while pending:
            piece = inflater.decompress(pending, _INFLATE_PIECE)
            given += len(piece)
            if given > most:
                return None
            pending = inflater.unconsumed_tail
        if inflater.eof:
            break
    given += len(inflater.flush())
    return given if given <= most else None
