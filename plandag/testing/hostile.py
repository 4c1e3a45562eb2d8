"""Hostile input files made on the fly, for tests and benchmarks of the readers' limits: a
huge text, a ``.docx`` whose XML unpacks to far more than the file, and two PDF bombs (a
Flate stream that inflates far past its size, a page tree with a great many kids).

Each function writes one file and returns its path. None holds the whole unpacked content
in memory: the compressed parts are written piece by piece (:mod:`zlib`), so a 1 GiB Flate
bomb takes about 1 MB of memory and a second or two to make.
"""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

__all__ = [
    "docx_bomb",
    "flate_bomb_pdf",
    "large_text",
    "page_tree_bomb_pdf",
]

_CLAUSE = (
    "Section {n}. The Supplier shall deliver the Goods to the Customer at the place agreed "
    "in writing, and the Customer shall pay the price within thirty (30) days of the "
    "invoice. Either party may terminate this Agreement on ninety (90) days' notice.\n\n"
)

_BLOCK = 1 << 20  # what each piece of a compressed part holds before it is compressed


def large_text(path: Path, size: int) -> Path:
    """A text contract (ASCII, so UTF-8) of exactly ``size`` bytes: numbered clauses
    separated by blank lines, as a very long real contract would be, the last one cut."""
    written = 0
    number = 1
    with path.open("w", encoding="ascii", newline="\n") as handle:
        while written < size:
            piece = "".join(_CLAUSE.format(n=number + i) for i in range(1000))[: size - written]
            number += 1000
            handle.write(piece)
            written += len(piece)
    return path


_DOCX_TYPES = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" '
    'ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    '<Default Extension="xml" ContentType="application/xml"/>'
    '<Override PartName="/word/document.xml" ContentType="application/'
    'vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/>'
    "</Types>"
)
_DOCX_RELS = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
    'relationships/officeDocument" Target="word/document.xml"/>'
    "</Relationships>"
)
_DOCX_HEAD = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
    "<w:body>"
)
_DOCX_PARAGRAPH = "<w:p><w:r><w:t>The Supplier shall deliver the Goods.</w:t></w:r></w:p>"
_DOCX_TAIL = "</w:body></w:document>"


def docx_bomb(path: Path, unpacked: int, *, declared: int | None = None) -> Path:
    """A ``.docx`` whose ``word/document.xml`` holds ``unpacked`` bytes (at least) of
    identical paragraphs, deflated to a few hundred times less (400 MB of XML makes a file
    of about 1 MB).

    Args:
        path: where to write it.
        unpacked: the XML's size in bytes.
        declared: the uncompressed size written in the zip's directory for the part
            instead of the true one (a package that lies about its size); None: the truth.
    """
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as package:
        package.writestr("[Content_Types].xml", _DOCX_TYPES)
        package.writestr("_rels/.rels", _DOCX_RELS)
        with package.open("word/document.xml", "w", force_zip64=unpacked > 0x7FFFFFFF) as part:
            part.write(_DOCX_HEAD.encode())
            block = (_DOCX_PARAGRAPH * (_BLOCK // len(_DOCX_PARAGRAPH))).encode()
            written = len(_DOCX_HEAD)
            while written < unpacked:
                part.write(block)
                written += len(block)
            part.write(_DOCX_TAIL.encode())
    if declared is not None:
        _declare_size(path, "word/document.xml", declared)
    return path


def _declare_size(path: Path, name: str, size: int) -> None:
    """Write ``size`` as the uncompressed size of ``name`` in the zip's local header and
    central directory (32-bit fields; the part must not use ZIP64)."""
    import struct

    data = bytearray(path.read_bytes())
    encoded = name.encode()
    start = 0
    while True:
        local = data.find(b"PK\x03\x04", start)
        if local < 0:
            break
        length = struct.unpack_from("<H", data, local + 26)[0]
        if bytes(data[local + 30 : local + 30 + length]) == encoded:
            struct.pack_into("<I", data, local + 22, size)
        start = local + 4
    start = 0
    while True:
        central = data.find(b"PK\x01\x02", start)
        if central < 0:
            break
        length = struct.unpack_from("<H", data, central + 28)[0]
        if bytes(data[central + 46 : central + 46 + length]) == encoded:
            struct.pack_into("<I", data, central + 24, size)
        start = central + 4
    path.write_bytes(bytes(data))


def _pdf(objects: list[bytes]) -> bytes:
    """A PDF file of ``objects`` (object ``i + 1`` is ``objects[i]``; 1 is the catalog),
    with a correct cross-reference table."""
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets: list[int] = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    table = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        table,
    )
    return bytes(out)


_FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"


def flate_bomb_pdf(path: Path, inflated: int) -> Path:
    """A one-page PDF whose content stream is Flate-compressed and inflates to
    ``inflated`` bytes (at least): one line of text, then spaces (1 GiB deflates to about
    1 MB)."""
    compressor = zlib.compressobj(9)
    pieces = [compressor.compress(b"BT /F1 12 Tf 72 720 Td (Bomb) Tj ET\n")]
    block = b" " * _BLOCK
    written = 0
    while written < inflated:
        pieces.append(compressor.compress(block))
        written += len(block)
    pieces.append(compressor.flush())
    stream = b"".join(pieces)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
        _FONT,
    ]
    path.write_bytes(_pdf(objects))
    return path


def page_tree_bomb_pdf(path: Path, kids: int) -> Path:
    """A PDF whose page tree has ``kids`` kids, every one the same small page of text
    (200,000 kids make a file of about 1.2 MB)."""
    listed = b" ".join([b"3 0 R"] * kids)
    content = b"BT /F1 12 Tf 72 720 Td (Page) Tj ET"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + listed + b"] /Count %d >>" % kids,
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
        _FONT,
    ]
    path.write_bytes(_pdf(objects))
    return path
