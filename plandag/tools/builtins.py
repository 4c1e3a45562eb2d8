"""The built-in tools every run has: read a file, write JSON, select from XML and JSON.

Errors are :class:`~plandag.errors.PermanentStepError` with a stable ``reason`` (a retry
would fail the same way): ``missing_resource``, ``too_large``, ``decode_error``,
``invalid_args``, ``invalid_xml``, ``invalid_xpath``, ``invalid_json``,
``invalid_expression``, ``not_serializable``, ``io_error``.

Each tool declares ``typical_seconds``, the figure a plan's time estimate starts from until
the run store has measured the tool (ARCHITECTURE.md, "Brakes"). They were measured on a
laptop-class machine (median of 50 calls, and of the NF-e plan over the examples): a read
of a document 0.02-0.1 ms, a selection 0.01-0.1 ms, a JSON write with its fsync 1.3 ms
(100 ms at worst); each figure is rounded up generously (a slower disk, a larger document),
since a run may take 3x its estimate before it stops.
"""

from __future__ import annotations

import codecs
import datetime
import errno
import functools
import json
import os
import stat
from decimal import Decimal
from pathlib import Path
from typing import Any, TypedDict

import jmespath
import jmespath.exceptions
import jmespath.parser

from plandag.errors import BoundaryError, PermanentStepError
from plandag.tools.base import Tool, ToolContext, tool
from plandag.tools.writing import write_atomic

__all__ = [
    "BUILTIN_TOOLS",
    "WriteResult",
    "json_select",
    "read_file",
    "write_json",
    "xml_select",
]

_BINARY_ENCODINGS = frozenset({"binary", "bytes"})
_UTF8_BOM = codecs.BOM_UTF8


def _decode(data: bytes, encoding: str, path: str) -> str:
    try:
        codec = codecs.lookup(encoding).name
    except LookupError as error:
        raise PermanentStepError(
            f"read_file {path}: unknown encoding {encoding!r}; use a Python codec name "
            "such as 'utf-8' or 'iso-8859-1', or 'binary' for the raw bytes",
            reason="invalid_args",
        ) from error
    skipped = 0
    if codec in ("utf-8", "utf-8-sig"):
        # The byte order mark is dropped (what 'utf-8-sig' does); offsets stay file offsets.
        if data.startswith(_UTF8_BOM):
            skipped = len(_UTF8_BOM)
        codec = "utf-8"
    try:
        return data[skipped:].decode(codec) if skipped else data.decode(codec)
    except UnicodeDecodeError as error:
        offset = error.start + skipped
        raise PermanentStepError(
            f"read_file {path}: byte 0x{data[offset]:02x} at byte offset {offset} is not "
            f"valid {encoding} ({error.reason}); pass encoding='binary' to get the raw bytes "
            "(XML parsers read the encoding from the document), or the file's real encoding "
            "such as 'iso-8859-1'",
            reason="decode_error",
        ) from error


def _read_at_most(descriptor: int, count: int) -> bytes:
    """Up to ``count`` bytes from ``descriptor``: fewer only at the end of the file (a read
    returning nothing), as a buffered file's ``read(count)`` gives them."""
    data = os.read(descriptor, count)
    if not data or len(data) == count:
        return data
    chunks = [data]
    count -= len(data)
    while count > 0:
        data = os.read(descriptor, count)
        if not data:
            break
        chunks.append(data)
        count -= len(data)
    return b"".join(chunks)


@tool(inline=True, taint_source=True, reads="path", typical_seconds=0.01)
def read_file(path: str, encoding: str = "utf-8", max_bytes: int = 50_000_000) -> str | bytes:
    """Read a local file, as text or as raw bytes.

    Runs inline on the event loop: a local read of a document is short, and the batch
    extraction calls it once per document.

    Args:
        path: the file, absolute or relative to the working directory.
        encoding: a Python codec name (default ``utf-8``; a UTF-8 byte order mark is
            dropped), or ``binary`` (also ``bytes``) for the raw bytes. XML is best read as
            ``binary``: the parser then honours the document's own encoding declaration.
        max_bytes: refuse files larger than this many bytes (default 50 MB).

    Returns:
        The decoded text, or the bytes for ``binary``.

    Raises:
        PermanentStepError: reason ``missing_resource`` (no such file, or a folder),
            ``too_large`` (over ``max_bytes``), ``decode_error`` (names the byte offset),
            ``invalid_args`` (unknown encoding, ``max_bytes`` below 0), ``not_a_file`` (a
            pipe, device or socket: never read, so a FIFO cannot block the run),
            ``io_error`` (permission denied and other OS errors).
    """
    if max_bytes < 0:
        raise PermanentStepError(
            f"read_file {path}: max_bytes must be >= 0, got {max_bytes}", reason="invalid_args"
        )
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, and this
        # tool runs on the event loop. Only regular files are read, straight from the
        # descriptor (no buffered file object: one document, read once).
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            status = os.fstat(descriptor)
            if stat.S_ISDIR(status.st_mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
            if not stat.S_ISREG(status.st_mode):
                raise PermanentStepError(
                    f"read_file {path}: not a regular file (a pipe, device or socket); name a file",
                    reason="not_a_file",
                )
            # Size the read from fstat: reading max_bytes + 1 would allocate max_bytes up front.
            size = status.st_size
            data = _read_at_most(descriptor, min(size, max_bytes) + 1)
        finally:
            os.close(descriptor)
        if len(data) > max_bytes:
            size = max(size, len(data))
            raise PermanentStepError(
                f"read_file {path}: the file has {size} bytes, more than max_bytes="
                f"{max_bytes}; raise max_bytes if it is really meant to be read",
                reason="too_large",
            )
    except FileNotFoundError as error:
        raise PermanentStepError(
            f"read_file {path}: no such file (looked in {os.path.abspath(path)}); check the "
            "path or the --param that gave it",
            reason="missing_resource",
        ) from error
    except IsADirectoryError as error:
        raise PermanentStepError(
            f"read_file {path}: is a folder, not a file; name a file inside it",
            reason="missing_resource",
        ) from error
    except OSError as error:
        raise PermanentStepError(
            f"read_file {path}: cannot read: {error.strerror or error}", reason="io_error"
        ) from error
    if encoding.lower() in _BINARY_ENCODINGS:
        return data
    return _decode(data, encoding, path)


class WriteResult(TypedDict):
    """What ``write_json`` returns: where it wrote and how much.

    Attributes:
        path: the absolute path written.
        bytes: the file's size in bytes (UTF-8, trailing newline included).
    """

    path: str
    bytes: int


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"values of type {type(value).__name__} are not JSON serializable")


@tool(effects="write", writes="path", idempotent=True, typical_seconds=0.02)
def write_json(
    path: str, data: Any, indent: int | None = 2, ctx: ToolContext | None = None
) -> WriteResult:
    """Write ``data`` as a JSON file, atomically, creating missing parent folders.

    The document goes to a temporary file in the target's folder, is flushed to disk, then
    renamed over the target, so a reader sees the old file or the whole new one, never half
    of it. Writing the same data twice gives the same file (idempotent). The run's write
    boundary (``ctx.write_boundary``) is checked by the write itself
    (:func:`~plandag.tools.writing.write_atomic`: each folder opened relative to the one
    before, links followed only into the boundary), so a folder swapped for a link while
    the step runs cannot send the file outside.

    Args:
        path: the target file, absolute or relative to the working directory.
        data: JSON-like data; ``Decimal`` values are written as strings (exact money),
            dates and times in ISO 8601, paths as strings. Non-ASCII text is kept as is.
        indent: spaces per level, or None for one line.
        ctx: the step's context, given by the runner (its write boundary applies); None
            when called directly (no boundary).

    Returns:
        ``{"path": absolute path, "bytes": size written}``.

    Raises:
        BoundaryError: the file, or a folder to create for it, lies outside the boundary.
        PermanentStepError: reason ``not_serializable`` (a value JSON cannot hold, NaN
            included) or ``io_error`` (the folder cannot be created, the target is a
            folder, permission denied, disk full).
    """
    try:
        text = json.dumps(
            data, ensure_ascii=False, indent=indent, allow_nan=False, default=_json_default
        )
    except (TypeError, ValueError) as error:
        raise PermanentStepError(
            f"write_json {path}: data cannot be written as JSON: {error}",
            reason="not_serializable",
        ) from error
    payload = (text + "\n").encode("utf-8")
    boundary = ctx.write_boundary if ctx is not None else None
    step_id = ctx.step_id if ctx is not None else None
    try:
        write_atomic(boundary, path, payload, step_id=step_id)
    except BoundaryError:
        raise
    except OSError as error:
        raise PermanentStepError(
            f"write_json {path}: cannot write: {error.strerror or error}", reason="io_error"
        ) from error
    base = boundary.base if boundary is not None else Path.cwd()
    return {"path": os.path.abspath(os.path.join(base, path)), "bytes": len(payload)}


@tool(inline=True, typical_seconds=0.002)
def xml_select(
    xml: Any,
    path: str | None = None,
    paths: dict[str, str] | None = None,
    each: str | None = None,
    all: bool = False,
    namespaces: dict[str, str] | None = None,
) -> Any:
    """Select values from an XML document with namespace-aware XPath 1.0 (lxml).

    The prefix ``nfe`` is bound to the NF-e namespace ``http://www.portalfiscal.inf.br/nfe``
    and ``ds`` to XML Signature, so ``//nfe:infNFe/@Id`` works whether the document uses a
    default or a prefixed namespace. Elements in no namespace are reached with
    ``local-name()``: ``//*[local-name()='protNFe']``.

    What a match becomes: an element gives its own text, stripped (None when it has none);
    an attribute or text node gives its string; a number (``count()``) gives its XPath
    string form, without ``.0`` when integral (``"3"``, ``"2.5"``); a boolean stays a bool.

    Args:
        xml: the document as text or bytes, or an element or tree already parsed (so a
            plan can parse once and select many times).
        path: one XPath expression. Exactly one of ``path`` and ``paths`` is given.
        paths: several, by name (name → XPath).
        each: an XPath selecting elements (``//nfe:det``); ``path``/``paths`` are then
            evaluated relative to each of them (write ``nfe:prod/nfe:cProd``, not ``//...``,
            which would search the whole document).
        all: every match as a list instead of the first match only.
        namespaces: more prefixes (prefix → URI), merged over the defaults.

    Returns:
        For ``path``, the first match's value (None when nothing matches) or, with
        ``all``, the list of every match. For ``paths``, a dict name → such a value. With
        ``each``, a list with one such value or dict per selected element.

    Raises:
        PermanentStepError: reason ``invalid_args`` (not exactly one of path/paths, an
            ``each`` that selects something other than elements, an empty prefix), ``invalid_xpath``
            (names the expression), ``invalid_xml`` (with line and column).
    """
    if (path is None) == (paths is None):
        given = "both" if path is not None else "neither"
        raise PermanentStepError(
            f"xml_select needs exactly one of 'path' (one XPath) or 'paths' (name → XPath); "
            f"{given} given",
            reason="invalid_args",
        )
    # lxml is imported by the first XML step, not by every command that lists the tools.
    from plandag.tools.xml import (
        as_element,
        compile_table,
        compile_xpath,
        evaluate_compiled,
        evaluate_table,
        select_elements,
    )

    # Compile every expression first: a bad one is reported before any parsing.
    single = compile_xpath(path, namespaces) if path is not None else None
    table = compile_table(paths, namespaces) if paths is not None else ()
    if each is not None:
        compile_xpath(each, namespaces)
    root = as_element(xml)

    def evaluate(node: Any) -> Any:
        if single is not None:
            return evaluate_compiled(node, single, all)
        if not all:
            return evaluate_table(node, table)
        return {name: evaluate_compiled(node, compiled, all) for name, compiled in table}

    if each is None:
        return evaluate(root)
    return [evaluate(node) for node in select_elements(root, each, namespaces)]


@functools.lru_cache(maxsize=1024)
def _compile_jmespath(expr: str) -> jmespath.parser.ParsedResult:
    try:
        return jmespath.compile(expr)
    except jmespath.exceptions.JMESPathError as error:
        raise PermanentStepError(
            f"invalid JMESPath expression {expr!r}: {error}", reason="invalid_expression"
        ) from error


@tool(inline=True, typical_seconds=0.002)
def json_select(data: Any, expr: str) -> Any:
    """Evaluate a JMESPath expression (https://jmespath.org/specification.html) on data.

    Args:
        data: a dict or list, or JSON text (str or bytes), which is parsed first.
        expr: the JMESPath expression, e.g. ``items[?price > `10`].name``; compiled once
            and cached.

    Returns:
        What the expression selects (None when it selects nothing).

    Raises:
        PermanentStepError: reason ``invalid_expression`` (does not compile, or fails on
            this data, e.g. a function given the wrong type), ``invalid_json`` (text that
            is not JSON; names line and column).
    """
    compiled = _compile_jmespath(expr)
    if isinstance(data, str | bytes | bytearray):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as error:
            raise PermanentStepError(
                f"json_select: data is not valid JSON at line {error.lineno}, column "
                f"{error.colno}: {error.msg}",
                reason="invalid_json",
            ) from error
        except UnicodeDecodeError as error:
            raise PermanentStepError(
                f"json_select: data bytes are not UTF-8/16/32 JSON: {error}",
                reason="invalid_json",
            ) from error
    try:
        return compiled.search(data)
    except jmespath.exceptions.JMESPathError as error:
        raise PermanentStepError(
            f"JMESPath expression {expr!r} failed on the data: {error}",
            reason="invalid_expression",
        ) from error


BUILTIN_TOOLS: list[Tool] = [read_file, write_json, xml_select, json_select]
"""The built-in tools, in the order they are documented."""
