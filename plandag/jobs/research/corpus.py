"""A corpus: a folder of documents, cut into chunks with stable ids and character offsets,
searched with BM25 through SQLite FTS5 (docs/guides/research.md).

* **Documents**: every ``.md``, ``.markdown``, ``.txt``, ``.html``, ``.htm`` and ``.pdf``
  file under the folder (sub-folders included, hidden ones skipped). The text of a ``.md``
  or ``.txt`` file is the file itself (UTF-8); of an HTML file, the text of its body
  through lxml (scripts and styles dropped, one blank line after each block element); of
  a PDF, each page's text through pypdf, pages separated by a blank line. A file that
  cannot be read (not UTF-8, an encrypted or broken PDF, no text at all) is kept in the
  index as ``skipped`` with the reason, and the rest goes on.
* **Chunks**: the text cut at blank lines into pieces of at most :data:`CHUNK_CHARS`
  characters (a longer paragraph is cut at the last sentence end, else the last space,
  before the limit). A chunk's id is ``PATH#N``: the document's path relative to the
  folder (``/`` separators) and its 1-based position. ``start``/``end`` are ``[start,
  end)`` character offsets into the document's extracted text, so
  ``text[start:end] == chunk.text``. Ids stay the same as long as the file does.
* **Index**: one SQLite file (default in the user's cache folder, one per corpus folder)
  holding the documents (path, size, modification time, SHA-256 of the bytes), the chunks
  and an FTS5 table (``porter unicode61`` tokenizer) ranked with its built-in ``bm25()``
  (https://www.sqlite.org/fts5.html#the_bm25_function). It is built once and reused; each
  :meth:`Corpus.open` compares the folder with it and re-indexes only the files added,
  removed or modified (size or modification time changed and the bytes differ).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final, Literal

import platformdirs

from plandag.errors import InputError

__all__ = [
    "CHUNK_CHARS",
    "MAX_DOCUMENT_BYTES",
    "SUFFIXES",
    "Chunk",
    "Corpus",
    "DocumentInfo",
    "IndexUpdate",
    "SearchHit",
    "chunk_text",
    "default_index_path",
    "extract_text",
]

CHUNK_CHARS: Final = 1200
"""The most characters in one chunk (about 300 tokens at four characters a token): a few
paragraphs, small enough that several read chunks fit one executor call."""

SUFFIXES: Final = (".md", ".markdown", ".txt", ".html", ".htm", ".pdf")
"""The file suffixes a corpus indexes (lower case compared)."""

MAX_DOCUMENT_BYTES = 64 * 1024 * 1024
"""The largest file a corpus indexes (64 MiB, some 50,000 chunks of text); a larger one is
skipped with the reason, so one stray dump does not hold the index for minutes."""

_INDEX_FORMAT: Final = "1"
"""Stored in the index; an index of another format (or chunk size) is rebuilt."""

_BLOCK_TAGS: Final = frozenset(
    {
        "p",
        "div",
        "section",
        "article",
        "header",
        "footer",
        "main",
        "aside",
        "nav",
        "blockquote",
        "pre",
        "li",
        "ul",
        "ol",
        "dl",
        "dt",
        "dd",
        "table",
        "tr",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "br",
        "hr",
        "figure",
        "figcaption",
        "title",
    }
)


class CorpusFileError(Exception):
    """A corpus file whose text cannot be extracted; its message says why."""


@dataclasses.dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk of a document.

    Attributes:
        chunk_id: ``PATH#N`` (see the module docstring).
        document: the document's path relative to the corpus folder.
        seq: 1-based position in the document.
        start: offset of the first character in the document's extracted text.
        end: offset just past the last character (``[start, end)``).
        text: ``document_text[start:end]``.
    """

    chunk_id: str
    document: str
    seq: int
    start: int
    end: int
    text: str

    def as_dict(self) -> dict[str, Any]:
        """``{"chunk_id", "document", "start", "end", "text"}``."""
        return {
            "chunk_id": self.chunk_id,
            "document": self.document,
            "start": self.start,
            "end": self.end,
            "text": self.text,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class SearchHit:
    """One result of :meth:`Corpus.search`: a chunk and its BM25 score (higher is better;
    SQLite's ``bm25()`` negated)."""

    chunk: Chunk
    score: float

    def as_dict(self, preview_chars: int = 200) -> dict[str, Any]:
        """``{"chunk_id", "document", "start", "end", "score", "preview"}``: the preview is
        the chunk's first ``preview_chars`` characters."""
        text = self.chunk.text
        preview = text if len(text) <= preview_chars else text[: preview_chars - 1] + "…"
        return {
            "chunk_id": self.chunk.chunk_id,
            "document": self.chunk.document,
            "start": self.chunk.start,
            "end": self.chunk.end,
            "score": round(self.score, 4),
            "preview": preview,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class DocumentInfo:
    """A file of the corpus as indexed: ``status`` ``indexed`` (with its characters and
    chunks) or ``skipped`` (with the reason)."""

    path: str
    status: Literal["indexed", "skipped"]
    chars: int
    chunks: int
    sha256: str
    error: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class IndexUpdate:
    """What :meth:`Corpus.open` did to the index: the documents' paths added, removed,
    modified (re-indexed) and unchanged. ``reused`` is true when nothing was re-indexed."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    modified: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()

    @property
    def reused(self) -> bool:
        """True when the index was used as it was (no file added, removed or modified)."""
        return not (self.added or self.removed or self.modified)


def default_index_path(folder: Path) -> Path:
    """Where the index of ``folder`` lives by default: ``research/<hash>.sqlite3`` in the
    user's cache folder (``platformdirs.user_cache_path("plandag")``), the hash being the
    first 16 hex digits of the SHA-256 of the folder's resolved path."""
    digest = hashlib.sha256(str(folder.resolve()).encode("utf-8", "surrogateescape")).hexdigest()
    return platformdirs.user_cache_path("plandag") / "research" / f"{digest[:16]}.sqlite3"


def _html_text(data: bytes) -> str:
    import lxml.html
    from lxml import etree

    try:
        root: lxml.html.HtmlElement = lxml.html.document_fromstring(data)
    except (etree.ParserError, ValueError) as error:
        raise CorpusFileError(f"not readable as HTML: {error}") from error
    for element in list(root.iter("script", "style", "noscript", "template")):
        element.drop_tree()
    for element in root.iter():
        if isinstance(element.tag, str) and element.tag.lower() in _BLOCK_TAGS:
            element.tail = "\n\n" + (element.tail or "")
    head = root.find("head")
    if head is not None:
        head.drop_tree()
    text = root.text_content()
    lines = [re.sub(r"[ \t\r\f\v]+", " ", line).strip() for line in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _pdf_text(path: Path) -> str:
    try:
        from pypdf import PdfReader
        from pypdf.errors import PyPdfError
    except ImportError:
        raise CorpusFileError(
            "missing_extra: reading a PDF needs the documents extra: pip install "
            "'plandag[documents]'"
        ) from None

    try:
        reader = PdfReader(path)
        if reader.is_encrypted:
            raise CorpusFileError("an encrypted PDF; give a decrypted copy")
        pages = [page.extract_text() or "" for page in reader.pages]
    except CorpusFileError:
        raise
    except (PyPdfError, OSError, ValueError, KeyError, TypeError) as error:
        raise CorpusFileError(f"not readable as PDF: {type(error).__name__}: {error}") from error
    return "\n\n".join(page.strip() for page in pages).strip()


def extract_text(path: Path) -> str:
    """The text of one corpus file, as the module docstring describes per suffix.

    Args:
        path: a file with one of :data:`SUFFIXES`.

    Returns:
        The extracted text (offsets of chunks and citations refer to it).

    Raises:
        CorpusFileError: the file is not UTF-8 text, not readable HTML or PDF, encrypted,
            or has no text.
        OSError: the file cannot be read.
    """
    suffix = path.suffix.lower()
    if suffix == ".pdf":
        text = _pdf_text(path)
    else:
        data = path.read_bytes()
        if suffix in (".html", ".htm"):
            text = _html_text(data)
        else:
            try:
                text = data.decode("utf-8-sig")
            except UnicodeDecodeError as error:
                raise CorpusFileError(
                    f"not UTF-8 text (byte {error.start}); convert it to UTF-8"
                ) from error
            text = text.replace("\r\n", "\n").replace("\r", "\n")
            if "\x00" in text:
                raise CorpusFileError(
                    "a binary file (it holds NUL bytes), not text; remove it from the folder"
                )
    if not text.strip():
        raise CorpusFileError("no text (empty, or a scanned PDF without a text layer)")
    return text


_BLANK_LINE = re.compile(r"\n[ \t\r\f\v]*\n")
_SENTENCE_END = re.compile(r"[.!?;:][\"')\]]*\s")


def _cut_long(text: str, start: int, end: int, limit: int) -> Iterator[tuple[int, int]]:
    """Pieces of ``text[start:end]`` of at most ``limit`` characters, cut after a sentence
    end, else at a space, else hard."""
    while end - start > limit:
        window = text[start : start + limit]
        cut = -1
        for match in _SENTENCE_END.finditer(window):
            if match.end() > limit // 2:
                cut = match.end()
        if cut <= 0:
            space = window.rfind(" ", limit // 2)
            cut = space + 1 if space > 0 else limit
        piece_end = start + cut
        yield start, _rstrip(text, start, piece_end)
        start = _lstrip(text, piece_end, end)
    if start < end:
        yield start, end


def _lstrip(text: str, start: int, end: int) -> int:
    while start < end and text[start].isspace():
        start += 1
    return start


def _rstrip(text: str, start: int, end: int) -> int:
    while end > start and text[end - 1].isspace():
        end -= 1
    return end


def chunk_text(text: str, limit: int = CHUNK_CHARS) -> list[tuple[int, int]]:
    """Cut ``text`` into chunks at blank lines, each at most ``limit`` characters.

    Paragraphs (runs of text between blank lines) are packed in order while they fit; a
    paragraph longer than ``limit`` is cut after a sentence end, else at a space.

    Args:
        text: a document's extracted text.
        limit: the most characters in one chunk (>= 100).

    Returns:
        ``[(start, end), ...]`` offsets in ``text``, in order; every chunk starts and ends
        on a character that is not whitespace, and the chunks do not overlap.

    Raises:
        ValueError: ``limit`` below 100.
    """
    if limit < 100:
        raise ValueError(f"a chunk limit must be >= 100 characters, not {limit}")
    paragraphs: list[tuple[int, int]] = []
    position = 0
    for separator in [*_BLANK_LINE.finditer(text), None]:
        end = separator.start() if separator is not None else len(text)
        start = _lstrip(text, position, end)
        end = _rstrip(text, start, end)
        if start < end:
            paragraphs.extend(_cut_long(text, start, end, limit))
        if separator is not None:
            position = separator.end()
    chunks: list[tuple[int, int]] = []
    current: tuple[int, int] | None = None
    for start, end in paragraphs:
        if current is not None and end - current[0] <= limit:
            current = (current[0], end)
            continue
        if current is not None:
            chunks.append(current)
        current = (start, end)
    if current is not None:
        chunks.append(current)
    return chunks


_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS document (
    path TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    status TEXT NOT NULL,
    chars INTEGER NOT NULL,
    chunks INTEGER NOT NULL,
    error TEXT
)""",
    """CREATE TABLE IF NOT EXISTS chunk (
    chunk_id TEXT PRIMARY KEY,
    document TEXT NOT NULL,
    seq INTEGER NOT NULL,
    start INTEGER NOT NULL,
    "end" INTEGER NOT NULL,
    text TEXT NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS chunk_document ON chunk (document, seq)",
    """CREATE VIRTUAL TABLE IF NOT EXISTS chunk_fts USING fts5(
    chunk_id UNINDEXED, text, tokenize = 'porter unicode61'
)""",
)


def _corpus_files(folder: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """Every indexable file under ``folder`` (resolved) by its relative ``/`` path, hidden
    folders and files skipped, in sorted order; and the symbolic links that lead out of
    the folder, by relative path, each with the reason it is not indexed.

    Links: a link to a file inside the folder is indexed under the link's own path (its
    text is the corpus's already, so nothing from outside comes in: a corpus that links
    one document from two places still works), and read where it leads; a link that
    leads outside the folder (``notes.txt -> /etc/passwd``) is never read: it is kept as
    ``skipped`` with the reason, so the index never holds a byte from outside the folder.
    A link to a folder is never entered (``os.walk`` does not follow links), whether it
    leads in or out.
    """
    found: dict[str, Path] = {}
    outside: dict[str, str] = {}
    for directory, folders, files in os.walk(folder):
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        for name in sorted(files):
            if name.startswith(".") or not name.lower().endswith(SUFFIXES):
                continue
            path = Path(directory) / name
            relative = path.relative_to(folder).as_posix()
            if path.is_symlink():
                target = Path(os.path.realpath(path))
                if not target.is_relative_to(folder):
                    outside[relative] = (
                        f"a symbolic link to {target}, outside the corpus folder: not "
                        "followed; copy the file into the folder to index it"
                    )
                    continue
                path = target
            if path.is_file():
                found[relative] = path
    return dict(sorted(found.items())), outside


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


_WORD = re.compile(r"\w+", re.UNICODE)


def _match_expression(query: str) -> str | None:
    """An FTS5 MATCH expression for free text: its words, each quoted, joined by OR (BM25
    then ranks chunks holding more of them, and rarer ones, first). None: no word."""
    words = list(dict.fromkeys(word.lower() for word in _WORD.findall(query)))
    if not words:
        return None
    return " OR ".join(f'"{word}"' for word in words[:64])


class Corpus:
    """An indexed folder of documents. Open one with :meth:`open`.

    Methods are safe to call from several threads (one lock around the connection).

    Attributes:
        folder: the corpus folder (resolved).
        index_path: the SQLite index file.
        update: what :meth:`open` did to the index.
    """

    def __init__(
        self, folder: Path, index_path: Path, connection: sqlite3.Connection, update: IndexUpdate
    ) -> None:
        self.folder = folder
        self.index_path = index_path
        self.update = update
        self._connection = connection
        self._lock = threading.Lock()

    @classmethod
    def open(
        cls, folder: str | Path, *, index: str | Path | None = None, chunk_chars: int = CHUNK_CHARS
    ) -> Corpus:
        """Open the corpus of ``folder``: build its index, or bring it up to date.

        Args:
            folder: the folder of documents.
            index: the index file (default :func:`default_index_path`); its folder is
                created when missing.
            chunk_chars: the most characters in one chunk (an index built with another
                value is rebuilt).

        Returns:
            The opened corpus; :attr:`update` says which files were (re-)indexed.

        Raises:
            InputError: the folder does not exist, holds no file to index, or the index
                cannot be created or read (what, where and what to do).
        """
        root = Path(folder).expanduser()
        if not root.is_dir():
            state = "is a file, not a folder" if root.is_file() else "does not exist"
            raise InputError(
                f"corpus folder {root} ({root.absolute()}) {state}; give a folder of .md, "
                ".txt, .html or .pdf files"
            )
        root = root.resolve()
        files, outside = _corpus_files(root)
        if not files and not outside:
            raise InputError(
                f"corpus folder {root} holds no .md, .txt, .html or .pdf file; add documents "
                "or give another folder"
            )
        index_path = Path(index).expanduser() if index is not None else default_index_path(root)
        if index_path.is_dir():
            raise InputError(
                f"the corpus index {index_path} is a folder; give --index a file name (the "
                "index is built there)"
            )
        try:
            index_path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(index_path, check_same_thread=False)
            update = _refresh(connection, root, files, chunk_chars, outside)
        except sqlite3.Error as error:
            raise InputError(
                f"the corpus index {index_path} cannot be used: {error}; if it is an index "
                "plandag built, delete it (it is rebuilt), else give another file with --index"
            ) from error
        except OSError as error:
            raise InputError(
                f"the corpus index {index_path} cannot be created: {error.strerror or error}; "
                "give another with --index"
            ) from error
        return cls(root, index_path, connection, update)

    def close(self) -> None:
        """Close the index."""
        with self._lock:
            self._connection.close()

    def __enter__(self) -> Corpus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def documents(self) -> list[DocumentInfo]:
        """Every file of the corpus as indexed, by path."""
        with self._lock:
            rows = self._connection.execute(
                "SELECT path, status, chars, chunks, sha256, error FROM document ORDER BY path"
            ).fetchall()
        return [DocumentInfo(row[0], row[1], row[2], row[3], row[4], row[5]) for row in rows]

    def chunk_count(self) -> int:
        """Chunks in the index."""
        with self._lock:
            (count,) = self._connection.execute("SELECT count(*) FROM chunk").fetchone()
        return int(count)

    def search(self, query: str, k: int = 5) -> list[SearchHit]:
        """The ``k`` chunks that best match ``query`` by BM25, best first.

        Args:
            query: free text; its words are searched (stemmed, case-folded), any of them.
            k: how many hits at most (>= 1).

        Returns:
            Up to ``k`` hits; none when no word of the query occurs in the corpus.

        Raises:
            ValueError: ``k`` < 1.
        """
        if k < 1:
            raise ValueError(f"k must be >= 1, not {k}")
        expression = _match_expression(query)
        if expression is None:
            return []
        with self._lock:
            rows = self._connection.execute(
                'SELECT c.chunk_id, c.document, c.seq, c.start, c."end", c.text, '
                "bm25(chunk_fts) AS rank FROM chunk_fts JOIN chunk c ON c.chunk_id = "
                "chunk_fts.chunk_id WHERE chunk_fts MATCH ? ORDER BY rank, c.document, c.seq "
                "LIMIT ?",
                (expression, k),
            ).fetchall()
        return [SearchHit(Chunk(*row[:6]), -float(row[6])) for row in rows]

    def chunk(self, chunk_id: str) -> Chunk | None:
        """The chunk with id ``chunk_id``, or None."""
        with self._lock:
            row = self._connection.execute(
                'SELECT chunk_id, document, seq, start, "end", text FROM chunk WHERE chunk_id = ?',
                (chunk_id,),
            ).fetchone()
        return Chunk(*row) if row is not None else None

    def chunks(self, document: str | None = None) -> list[Chunk]:
        """Every chunk (of ``document`` when given), by document and position."""
        sql = 'SELECT chunk_id, document, seq, start, "end", text FROM chunk'
        args: tuple[Any, ...] = ()
        if document is not None:
            sql += " WHERE document = ?"
            args = (document,)
        with self._lock:
            rows = self._connection.execute(sql + " ORDER BY document, seq", args).fetchall()
        return [Chunk(*row) for row in rows]

    def nearest_ids(self, chunk_id: str, count: int = 3) -> list[str]:
        """Chunk ids closest to ``chunk_id`` (for "unknown chunk" messages)."""
        import difflib

        with self._lock:
            ids = [row[0] for row in self._connection.execute("SELECT chunk_id FROM chunk")]
        return difflib.get_close_matches(chunk_id, ids, n=count, cutoff=0.5)


def _refresh(
    connection: sqlite3.Connection,
    root: Path,
    files: dict[str, Path],
    chunk_chars: int,
    outside: dict[str, str] | None = None,
) -> IndexUpdate:
    """Bring the index on ``connection`` up to date with ``files``, and with the links that
    lead out of the folder (``outside``: kept as ``skipped`` with the reason, their targets
    never read); returns what changed."""
    outside = outside or {}
    with connection:
        for statement in _SCHEMA:
            connection.execute(statement)
        meta = dict(connection.execute("SELECT key, value FROM meta").fetchall())
        wanted = {"format": _INDEX_FORMAT, "chunk_chars": str(chunk_chars)}
        if any(meta.get(key) != value for key, value in wanted.items()):
            connection.execute("DELETE FROM document")
            connection.execute("DELETE FROM chunk")
            connection.execute("DELETE FROM chunk_fts")
            connection.executemany(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", list(wanted.items())
            )
    stored = {
        row[0]: (row[1], row[2], row[3])
        for row in connection.execute("SELECT path, size, mtime_ns, sha256 FROM document")
    }
    added: list[str] = []
    modified: list[str] = []
    unchanged: list[str] = []
    removed = sorted(set(stored) - set(files) - set(outside))
    for relative, reason in outside.items():
        link = root / relative
        try:
            status = link.lstat()
            digest = hashlib.sha256(os.fsencode(os.readlink(link))).hexdigest()
        except OSError:  # gone since it was listed
            status, digest = None, ""
        known = stored.get(relative)
        size = status.st_size if status is not None else -1
        mtime_ns = status.st_mtime_ns if status is not None else -1
        if known is not None and known == (size, mtime_ns, digest):
            unchanged.append(relative)
            continue
        (modified if known is not None else added).append(relative)
        _index_file(connection, relative, link, size, mtime_ns, digest, chunk_chars, error=reason)
    for relative, path in files.items():
        known = stored.get(relative)
        try:
            stat = path.stat()
            if known is not None and known[0] == stat.st_size and known[1] == stat.st_mtime_ns:
                unchanged.append(relative)
                continue
            digest = _sha256(path)
        except OSError as failure:  # gone since it was listed, or not readable
            (modified if known is not None else added).append(relative)
            _index_file(
                connection,
                relative,
                path,
                -1,
                -1,
                "",
                chunk_chars,
                error=f"cannot read: {failure.strerror or failure}",
            )
            continue
        if known is not None and known[2] == digest:
            with connection:  # touched, same bytes: remember the new time, keep the chunks
                connection.execute(
                    "UPDATE document SET size = ?, mtime_ns = ? WHERE path = ?",
                    (stat.st_size, stat.st_mtime_ns, relative),
                )
            unchanged.append(relative)
            continue
        (modified if known is not None else added).append(relative)
        _index_file(connection, relative, path, stat.st_size, stat.st_mtime_ns, digest, chunk_chars)
    with connection:
        for relative in removed:
            _forget(connection, relative)
    return IndexUpdate(tuple(added), tuple(removed), tuple(modified), tuple(unchanged))


def _forget(connection: sqlite3.Connection, relative: str) -> None:
    ids = [
        row[0]
        for row in connection.execute("SELECT chunk_id FROM chunk WHERE document = ?", (relative,))
    ]
    connection.executemany("DELETE FROM chunk_fts WHERE chunk_id = ?", [(i,) for i in ids])
    connection.execute("DELETE FROM chunk WHERE document = ?", (relative,))
    connection.execute("DELETE FROM document WHERE path = ?", (relative,))


def _index_file(
    connection: sqlite3.Connection,
    relative: str,
    path: Path,
    size: int,
    mtime_ns: int,
    digest: str,
    chunk_chars: int,
    *,
    error: str | None = None,
) -> None:
    """(Re-)index one file in one transaction: its old chunks go, its new ones come
    (none, with ``error`` given or found: the file is kept as ``skipped`` with it)."""
    spans: Sequence[tuple[int, int]] = ()
    text = ""
    if error is None and size > MAX_DOCUMENT_BYTES:
        error = (
            f"{size:,} bytes, more than the {MAX_DOCUMENT_BYTES:,} a document may have; split "
            "it into smaller files"
        )
    if error is None:
        try:
            text = extract_text(path)
            spans = chunk_text(text, chunk_chars)
        except CorpusFileError as failure:
            error = str(failure)
        except OSError as failure:
            error = f"cannot read: {failure.strerror or failure}"
    rows = [
        (f"{relative}#{seq}", relative, seq, start, end, text[start:end])
        for seq, (start, end) in enumerate(spans, start=1)
    ]
    with connection:
        _forget(connection, relative)
        connection.execute(
            "INSERT INTO document (path, size, mtime_ns, sha256, status, chars, chunks, error) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                relative,
                size,
                mtime_ns,
                digest,
                "skipped" if error is not None else "indexed",
                len(text),
                len(rows),
                error,
            ),
        )
        connection.executemany(
            'INSERT INTO chunk (chunk_id, document, seq, start, "end", text) '
            "VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )
        connection.executemany(
            "INSERT INTO chunk_fts (chunk_id, text) VALUES (?, ?)",
            [(row[0], row[5]) for row in rows],
        )
