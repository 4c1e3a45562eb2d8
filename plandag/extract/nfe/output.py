"""Writing NF-e records to JSONL or CSV, reading them back for ``--resume``, and patching them.

Two formats (NFE.md, "Batch behaviour"):

- JSONL (the default): one JSON record per line, UTF-8, ``ensure_ascii=False``, exactly the
  record the extractor produced.
- CSV: ``OUT.csv`` holds one row per invoice, flattened into the columns of
  :data:`INVOICE_COLUMNS` (a fixed order taken from the record layout of NFE.md, never from
  the first record, so two runs always give the same header), and ``OUT.items.csv`` one row
  per item (:data:`ITEM_COLUMNS`), carrying the invoice's ``source``, ``sha256`` and
  ``chNFe`` so the two files join.

CSV cells are neutralised against formula injection (OWASP, "CSV Injection"): a spreadsheet
runs a cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return as a
formula, so such a cell is written with a single quote ``'`` in front (``=HYPERLINK(...)`` →
``'=HYPERLINK(...)``), except a plain decimal number (``-5.00``, ``+1``), which is never
altered. :func:`load_existing` reads the quote back off the columns it uses. JSONL keeps
every value exactly as the record holds it.

Writers append one input's records at a time and flush after each input, so a crash leaves a
file holding whole inputs (at most a torn last line, which :func:`load_existing` drops).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import typing
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

from plandag.errors import InputError
from plandag.extract.nfe.record import Dest, Emit, Ide, Item, NfeRecord, Protocol, Total

__all__ = [
    "CHECK_NAMES",
    "INVOICE_COLUMNS",
    "ITEM_COLUMNS",
    "CsvRecordWriter",
    "EncodedLine",
    "JsonlRecordWriter",
    "OutputFormat",
    "RecordWriter",
    "WrittenRecord",
    "flatten_record",
    "is_plandag_output",
    "item_rows",
    "items_path_for",
    "load_existing",
    "neutralise_cell",
    "open_writer",
    "output_format_for",
    "record_identity",
    "record_json_texts",
    "restore_cell",
    "rewrite_unique_in_batch",
]

OutputFormat = Literal["jsonl", "csv"]

#: Check names in the order NFE.md lists them ("Checks").
CHECK_NAMES: tuple[str, ...] = (
    "key_check_digit",
    "key_matches_document",
    "cnpj_cpf_valid",
    "items_sum_vprod",
    "vnf_formula",
    "protocol_authorised",
    "unique_in_batch",
)

# Field order comes from the record model (record.py), never from the first record seen.
_IDE_FIELDS = tuple(Ide.model_fields)
_EMIT_FIELDS = tuple(Emit.model_fields)
_DEST_FIELDS = tuple(Dest.model_fields)
_TOTAL_FIELDS = tuple(Total.model_fields)
_PROTOCOL_FIELDS = tuple(Protocol.model_fields)
_ITEM_FIELDS = tuple(Item.model_fields)
_SCALAR_FIELDS = tuple(
    name
    for name in NfeRecord.model_fields
    if name
    not in {
        "errors",
        "checks",
        "ide",
        "emit",
        "dest",
        "items",
        "total",
        "protocol",
        "events",
        "repair",
    }
)

#: Columns of ``OUT.csv``, one row per invoice. ``errors`` holds ``code: message`` pairs
#: joined by `` | ``; ``events`` the record's event list and ``repair`` its repair note (with
#: ``--planner``) as JSON text; each check has a
#: status column (``pass``/``fail``/``not_applicable``) and a ``.detail`` column.
INVOICE_COLUMNS: tuple[str, ...] = (
    *_SCALAR_FIELDS,
    "errors",
    *(f"ide.{name}" for name in _IDE_FIELDS),
    *(f"emit.{name}" for name in _EMIT_FIELDS),
    *(f"dest.{name}" for name in _DEST_FIELDS),
    "items.count",
    *(f"total.{name}" for name in _TOTAL_FIELDS),
    *(f"protocol.{name}" for name in _PROTOCOL_FIELDS),
    "events",
    *(column for name in CHECK_NAMES for column in (f"checks.{name}", f"checks.{name}.detail")),
    "repair",
)

#: Columns of ``OUT.items.csv``, one row per ``det`` item of every invoice.
ITEM_COLUMNS: tuple[str, ...] = ("source", "sha256", "chNFe", *_ITEM_FIELDS)


@dataclass(frozen=True)
class WrittenRecord:
    """What the batch needs to remember about one record already in the output file.

    Attributes:
        sha256: hex digest of the input's bytes, or None (a pattern that matched nothing).
        source: the input path as given.
        chNFe: the record's access key, or None when it has none.
        status: ``ok`` | ``check_failed`` | ``error``.
        unique_in_batch: the ``(status, detail)`` written for the check, or None if absent.
        error_codes: the codes of the record's errors, in order.
    """

    sha256: str | None
    source: str
    chNFe: str | None
    status: str
    unique_in_batch: tuple[str, str] | None
    error_codes: tuple[str, ...] = ()


def output_format_for(output: Path, format: str | None) -> OutputFormat:
    """The output format: ``format`` when given, else ``csv`` for a ``.csv`` name, else ``jsonl``.

    Raises:
        InputError: ``format`` is neither ``jsonl`` nor ``csv``.
    """
    if format is None:
        return "csv" if output.suffix.lower() == ".csv" else "jsonl"
    if format == "jsonl":
        return "jsonl"
    if format == "csv":
        return "csv"
    raise InputError(f"unknown output format {format!r}: use jsonl or csv")


def items_path_for(output: Path) -> Path:
    """The items file beside a CSV output: ``out.csv`` → ``out.items.csv``."""
    return output.with_suffix(".items.csv") if output.suffix else Path(f"{output}.items.csv")


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


#: First characters that make a spreadsheet read a cell as a formula (OWASP, "CSV Injection").
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")


def neutralise_cell(text: str) -> str:
    """A CSV cell safe to open in a spreadsheet (OWASP, "CSV Injection").

    Args:
        text: the cell's text.

    Returns:
        ``text`` with a single quote in front when it starts with ``=``, ``+``, ``-``, ``@``,
        a tab or a carriage return, unless it is a plain decimal number (``-5.00``, ``+1``,
        kept as is); otherwise ``text`` unchanged.
    """
    if text.startswith(_FORMULA_STARTS) and not _PLAIN_NUMBER.fullmatch(text):
        return "'" + text
    return text


def restore_cell(text: str) -> str:
    """The text :func:`neutralise_cell` was given: the leading quote dropped when it guards
    a formula character."""
    if text.startswith("'") and text[1:].startswith(_FORMULA_STARTS):
        return text[1:]
    return text


def _group(record: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = record.get(name)
    return value if type(value) is dict or isinstance(value, Mapping) else {}


def record_chNFe(record: Mapping[str, Any]) -> str | None:
    """The record's ``ide.chNFe`` when it is a non-empty string, else None."""
    key = _group(record, "ide").get("chNFe")
    return key if isinstance(key, str) and key.strip() else None


def _check(record: Mapping[str, Any], name: str) -> tuple[str, str] | None:
    value = _group(record, "checks").get(name)
    if not isinstance(value, Mapping):
        return None
    return str(value.get("status", "")), str(value.get("detail", "") or "")


def _error_codes(record: Mapping[str, Any]) -> tuple[str, ...]:
    errors = record.get("errors") or []
    return tuple(str(e.get("code", "")) for e in errors if isinstance(e, Mapping))


def flatten_record(record: Mapping[str, Any]) -> dict[str, str]:
    """One CSV row (column → text) for a record, with every column of :data:`INVOICE_COLUMNS`.

    Missing groups (``dest`` null, ``protocol`` null, an error record) give empty cells.
    Cells that a spreadsheet would run as a formula are neutralised (:func:`neutralise_cell`).
    """
    row: dict[str, str] = {name: _text(record.get(name)) for name in _SCALAR_FIELDS}
    row["errors"] = " | ".join(
        f"{e.get('code', '')}: {e.get('message', '')}"
        for e in record.get("errors") or []
        if isinstance(e, Mapping)
    )
    for group, fields in (
        ("ide", _IDE_FIELDS),
        ("emit", _EMIT_FIELDS),
        ("dest", _DEST_FIELDS),
        ("total", _TOTAL_FIELDS),
        ("protocol", _PROTOCOL_FIELDS),
    ):
        values = _group(record, group)
        for name in fields:
            row[f"{group}.{name}"] = _text(values.get(name))
    items = record.get("items")
    row["items.count"] = str(len(items)) if isinstance(items, list) else ""
    events = record.get("events")
    row["events"] = _text(events) if events else ""
    repair = record.get("repair")
    row["repair"] = _text(repair) if repair else ""
    for name in CHECK_NAMES:
        outcome = _check(record, name)
        row[f"checks.{name}"] = outcome[0] if outcome else ""
        row[f"checks.{name}.detail"] = outcome[1] if outcome else ""
    return {column: neutralise_cell(text) for column, text in row.items()}


def item_rows(record: Mapping[str, Any]) -> list[dict[str, str]]:
    """The rows of ``OUT.items.csv`` for one record (none for an error record without items);
    cells neutralised like :func:`flatten_record`'s."""
    items = record.get("items")
    if not isinstance(items, list):
        return []
    head = {
        "source": _text(record.get("source")),
        "sha256": _text(record.get("sha256")),
        "chNFe": record_chNFe(record) or "",
    }
    rows = []
    for item in items:
        if isinstance(item, Mapping):
            row = {**head, **{name: _text(item.get(name)) for name in _ITEM_FIELDS}}
            rows.append({column: neutralise_cell(text) for column, text in row.items()})
    return rows


def record_identity(record: Mapping[str, Any]) -> tuple[str | None, str, str | None]:
    """``(chNFe, source, sha256)`` of a record, as :func:`written_record` gives them: what
    the duplicate check (``unique_in_batch``) keeps of each record."""
    sha = record.get("sha256")
    return (
        record_chNFe(record),
        _text(record.get("source")),
        sha if isinstance(sha, str) and sha else None,
    )


def written_record(record: Mapping[str, Any]) -> WrittenRecord:
    """The :class:`WrittenRecord` summary of a record dict."""
    chNFe, source, sha256 = record_identity(record)
    return WrittenRecord(
        sha256=sha256,
        source=source,
        chNFe=chNFe,
        status=_text(record.get("status")),
        unique_in_batch=_check(record, "unique_in_batch"),
        error_codes=_error_codes(record),
    )


def _written_row(row: Mapping[str, str]) -> WrittenRecord:
    unique_status = row.get("checks.unique_in_batch", "")
    key = restore_cell(row.get("ide.chNFe", ""))
    codes = tuple(part.split(":", 1)[0] for part in row.get("errors", "").split(" | ") if part)
    return WrittenRecord(
        sha256=restore_cell(row.get("sha256", "")) or None,
        source=restore_cell(row.get("source", "")),
        chNFe=key if key.strip() else None,
        status=row.get("status", ""),
        unique_in_batch=(
            (unique_status, row.get("checks.unique_in_batch.detail", "")) if unique_status else None
        ),
        error_codes=codes,
    )


def restatus(status: str, check_statuses: Sequence[str]) -> str:
    """A record's status from its checks (NFE.md "Status"): ``error`` stays ``error``;
    otherwise ``check_failed`` when any check is ``fail``, else ``ok``."""
    if status == "error":
        return "error"
    return "check_failed" if "fail" in check_statuses else "ok"


class EncodedLine(typing.Protocol):
    """What a writer reads of an encoded record
    (:class:`plandag.extract.nfe.encoded.EncodedRecord`): its JSONL line (None when it has
    none) and the record itself."""

    @property
    def line(self) -> bytes | None:
        """The record's JSONL line without the newline, in UTF-8, or None."""

    def record(self) -> Any:
        """The record."""


class RecordWriter:
    """Appends records to an output file. Use :func:`open_writer` to get one.

    ``write_input(records)`` writes every record of one input and flushes (a grouped writer,
    ``open_writer(..., grouped=True)``, keeps them until :meth:`flush`: one write per group),
    so an interrupted batch leaves whole inputs behind. ``close()`` flushes and closes the
    file(s).
    """

    def write_input(
        self, records: Sequence[Mapping[str, Any]], lines: Sequence[str | None] | None = None
    ) -> None:
        """Write the records of one input (in order) and flush.

        Args:
            records: the input's records.
            lines: for each record, its JSONL line without the newline when the caller has
                it already (exactly ``json.dumps(record, ensure_ascii=False, default=str)``,
                the first item of :func:`record_json_texts`), or None; the JSONL writer
                writes it instead of encoding the record again. Other writers ignore it.
        """
        raise NotImplementedError

    def write_encoded(self, records: Sequence[EncodedLine]) -> None:
        """Write the records of one input given as
        :class:`~plandag.extract.nfe.encoded.EncodedRecord` (their lines where the format
        is JSONL)."""
        self.write_input([record.record() for record in records])

    def flush(self) -> None:
        """Write what a grouped writer holds (nothing to do for the others)."""

    def close(self) -> None:
        """Flush and close the file(s)."""
        raise NotImplementedError


def _dumps(record: Mapping[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, default=str)


# Separators that no JSON text holds raw: ``json.dumps`` writes every control character
# inside a string as an escape (``\u0000``), and numbers, literals and keys converted from
# numbers hold none. A text made with them differs from a text made with other separators
# only where a separator stands.
_ITEM_MARK = "\x00"
_KEY_MARK = "\x01"
# What json.dumps(record, ensure_ascii=False, separators=(_ITEM_MARK, _KEY_MARK),
# allow_nan=False) builds at each call (JSONEncoder.encode keeps no state between calls).
_MARKED_ENCODER = json.JSONEncoder(
    ensure_ascii=False, separators=(_ITEM_MARK, _KEY_MARK), allow_nan=False
)


def record_json_texts(record: Mapping[str, Any]) -> tuple[str, str] | None:
    """A record's two JSON texts from one encoding, or None when it cannot have them.

    The record is encoded once with separators no JSON text holds raw (control characters,
    which ``json.dumps`` always escapes inside strings), then each separator is put in:

    - the JSONL line: ``json.dumps(record, ensure_ascii=False, default=str)`` (``", "`` and
      ``": "``);
    - the compact text: ``json.dumps(record, ensure_ascii=False, separators=(",", ":"),
      allow_nan=False)``, the run store's form (:func:`plandag.store.sealing.sealed_json`).

    Args:
        record: a record (a mapping).

    Returns:
        ``(line, compact)``, both exactly the texts above; None when the record is not
        JSON data (an object ``json`` cannot encode, NaN or infinity, a circular
        reference) or when its text holds a lone surrogate (not UTF-8): the caller takes
        the general path for it.
    """
    try:
        marked = _MARKED_ENCODER.encode(record)
        if not marked.isascii():  # (ASCII text holds no lone surrogate: known at once)
            marked.encode("utf-8")  # a lone surrogate raises UnicodeEncodeError (a ValueError)
    except (TypeError, ValueError, RecursionError):
        return None
    return (
        marked.replace(_ITEM_MARK, ", ").replace(_KEY_MARK, ": "),
        marked.replace(_ITEM_MARK, ",").replace(_KEY_MARK, ":"),
    )


class JsonlRecordWriter(RecordWriter):
    """One JSON record per line, UTF-8 (``ensure_ascii=False``).

    Args:
        path: the file; append: keep what it holds.
        grouped: hold each input's lines until :meth:`flush` (one write for the group;
            whole inputs, in order), instead of writing and flushing each input at once.
    """

    def __init__(self, path: Path, *, append: bool, grouped: bool = False) -> None:
        # UTF-8 bytes: an encoded record's line comes encoded already (by the worker that
        # extracted it), and is written as it is
        self._file: IO[bytes] = path.open("ab" if append else "wb")
        self._held: list[bytes] | None = [] if grouped else None

    def write_input(
        self, records: Sequence[Mapping[str, Any]], lines: Sequence[str | None] | None = None
    ) -> None:
        """Write the records of one input in a single write, then flush (``lines``: see
        :meth:`RecordWriter.write_input`)."""
        if records:
            if lines is None:
                text = "".join(_dumps(record) + "\n" for record in records)
            else:
                text = "".join(
                    (_dumps(record) if line is None else line) + "\n"
                    for record, line in zip(records, lines, strict=True)
                )
            self._emit(text.encode("utf-8"))

    def write_encoded(self, records: Sequence[EncodedLine]) -> None:
        """Write the lines of one input's encoded records (see
        :meth:`RecordWriter.write_encoded`)."""
        if records:
            # one join of the lines (no line copied to add its newline first)
            lines = [
                _dumps(record.record()).encode("utf-8") if record.line is None else record.line
                for record in records
            ]
            lines.append(b"")
            self._emit(b"\n".join(lines))

    def _emit(self, data: bytes) -> None:
        if self._held is not None:
            self._held.append(data)
            return
        self._file.write(data)
        self._file.flush()

    def flush(self) -> None:
        """Write the lines held (a grouped writer) in one write, and flush."""
        if self._held:
            data = b"".join(self._held)
            self._held.clear()
            self._file.write(data)
            self._file.flush()

    def close(self) -> None:
        """Write what is held, and close the file."""
        try:
            self.flush()
        finally:
            self._file.close()


class CsvRecordWriter(RecordWriter):
    """``OUT.csv`` (one row per invoice) and ``OUT.items.csv`` (one row per item)."""

    def __init__(self, path: Path, *, append: bool) -> None:
        items_path = items_path_for(path)
        write_header = not append or not path.exists() or path.stat().st_size == 0
        write_items_header = not append or not items_path.exists() or items_path.stat().st_size == 0
        mode = "a" if append else "w"
        self._file: IO[str] = path.open(mode, encoding="utf-8", newline="")
        self._items_file: IO[str] = items_path.open(mode, encoding="utf-8", newline="")
        self._rows = csv.DictWriter(self._file, fieldnames=INVOICE_COLUMNS)
        self._items = csv.DictWriter(self._items_file, fieldnames=ITEM_COLUMNS)
        if write_header:
            self._rows.writeheader()
        if write_items_header:
            self._items.writeheader()
        self._file.flush()
        self._items_file.flush()

    def write_input(
        self, records: Sequence[Mapping[str, Any]], lines: Sequence[str | None] | None = None
    ) -> None:
        """Write the items first, then the invoice rows, then flush both files (``lines``
        is not used).

        Items go first so that an interruption never leaves an invoice row whose items are
        missing; :func:`load_existing` drops items whose invoice row is absent.
        """
        for record in records:
            self._items.writerows(item_rows(record))
        self._items_file.flush()
        self._rows.writerows(flatten_record(record) for record in records)
        self._file.flush()

    def close(self) -> None:
        """Close both files."""
        self._file.close()
        self._items_file.close()


def open_writer(
    output: Path, format: OutputFormat, *, append: bool, grouped: bool = False
) -> RecordWriter:
    """A writer for ``output`` in ``format``; ``append`` keeps what the file(s) already hold;
    ``grouped``: a JSONL writer holds the lines until :meth:`RecordWriter.flush` (CSV
    writes each input at once either way).

    Creates the output's folder when missing. Raises OSError when the file cannot be opened.
    """
    output.parent.mkdir(parents=True, exist_ok=True)
    if format == "csv":
        return CsvRecordWriter(output, append=append)
    return JsonlRecordWriter(output, append=append, grouped=grouped)


def _replace_atomically(path: Path, lines: Iterator[str]) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with temporary.open("w", encoding="utf-8", newline="") as handle:
            for line in lines:
                handle.write(line)
        os.replace(temporary, path)
    finally:
        if temporary.exists():
            temporary.unlink()


def _csv_lines(columns: Sequence[str], rows: Iterator[Mapping[str, str]]) -> Iterator[str]:
    class _Line:
        text = ""

        def write(self, text: str) -> None:
            self.text += text

    line = _Line()
    writer = csv.DictWriter(line, fieldnames=columns)
    writer.writeheader()
    yield line.text
    for row in rows:
        line.text = ""
        writer.writerow(row)
        yield line.text


def _drop_record(written: WrittenRecord) -> bool:
    """Old records that ``--resume`` drops and extracts again: no sha256, or internal_error."""
    return written.sha256 is None or "internal_error" in written.error_codes


_STATUSES = frozenset({"ok", "check_failed", "error"})
_JSON_TYPES: dict[type, str] = {
    dict: "an object",
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}
_AFRESH = "remove --resume to start the output afresh"


def _json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _record_problem(record: Mapping[str, Any]) -> str | None:
    """Why a JSON object is not a record plandag wrote, or None when its fields are sound.

    Checks what ``--resume`` and the batch read back: ``source`` and ``sha256`` strings,
    ``status`` one of ``ok``/``check_failed``/``error``, ``errors`` an array of objects with a
    string ``code``, ``checks`` an object of objects with a string ``status``, ``ide`` null or
    an object whose ``chNFe`` is null or a string, ``items`` an array.
    """
    absent = [
        name for name in ("source", "sha256", "status", "errors", "checks") if name not in record
    ]
    if absent:
        return "it is not a record plandag wrote (no " + ", ".join(repr(n) for n in absent) + ")"
    expected: tuple[tuple[str, type, str], ...] = (
        ("source", str, "a string"),
        ("sha256", str, "a string"),
        ("status", str, "a string"),
        ("errors", list, "an array"),
        ("checks", dict, "an object"),
    )
    for name, kind, wanted in expected:
        if not isinstance(record[name], kind):
            return f"field {name!r} is {_json_type(record[name])}, not {wanted}"
    if record["status"] not in _STATUSES:
        return f"field 'status' is {record['status']!r}, not ok, check_failed or error"
    for position, error in enumerate(record["errors"]):
        if not isinstance(error, dict) or not isinstance(error.get("code"), str):
            return f"field 'errors' item {position} is not an object with a string 'code'"
    for name, outcome in record["checks"].items():
        if not isinstance(outcome, dict) or not isinstance(outcome.get("status"), str):
            return f"field 'checks' entry {name!r} is not an object with a string 'status'"
    ide = record.get("ide")
    if ide is not None:
        if not isinstance(ide, dict):
            return f"field 'ide' is {_json_type(ide)}, not an object or null"
        key = ide.get("chNFe")
        if key is not None and not isinstance(key, str):
            return f"field 'ide.chNFe' is {_json_type(key)}, not a string or null"
    items = record.get("items", [])
    if not isinstance(items, list):
        return f"field 'items' is {_json_type(items)}, not an array"
    return None


def _load_jsonl(output: Path) -> list[WrittenRecord]:
    raw = output.read_bytes()
    kept: list[str] = []
    result: list[WrittenRecord] = []
    changed = False
    lines = raw.split(b"\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        last = number == len(lines)  # no newline after it: torn by an interruption
        try:
            record = json.loads(line.decode("utf-8"))
            if not isinstance(record, dict):
                raise ValueError(f"{_json_type(record)}, not a JSON object")
        except ValueError as exc:
            if last:
                changed = True
                continue
            raise InputError(
                f"cannot resume: line {number} of {output} is not a JSON record ({exc}); {_AFRESH}"
            ) from exc
        problem = _record_problem(record)
        if problem is not None:
            raise InputError(f"cannot resume: line {number} of {output}: {problem}; {_AFRESH}")
        if last:
            changed = True  # complete record but without its newline: rewrite the file
        written = written_record(record)
        if _drop_record(written):
            changed = True
            continue
        kept.append(_dumps(record) + "\n")
        result.append(written)
    if changed:
        _replace_atomically(output, iter(kept))
    return result


def _read_csv(path: Path, columns: Sequence[str]) -> tuple[str, list[dict[str, str]]]:
    """The text and rows of a CSV plandag wrote with ``columns``.

    Raises:
        InputError: not UTF-8, not CSV, other columns, or a row with too few or too many cells.
    """
    try:
        text = path.read_text(encoding="utf-8")
        reader = csv.DictReader(io.StringIO(text, newline=""))
        if reader.fieldnames is None:
            return text, []
        if tuple(reader.fieldnames) != tuple(columns):
            raise InputError(
                f"cannot resume: {path} does not have the columns plandag writes; {_AFRESH}"
            )
        rows = list(reader)
    except UnicodeDecodeError as exc:
        raise InputError(
            f"cannot resume: {path} is not UTF-8 text ({exc.reason} at byte {exc.start}), "
            f"not a CSV plandag wrote; {_AFRESH}"
        ) from exc
    except csv.Error as exc:
        raise InputError(
            f"cannot resume: {path} is not a CSV plandag wrote ({exc}); {_AFRESH}"
        ) from exc
    complete = rows if text.endswith("\n") else rows[:-1]  # the last one may be torn
    for number, row in enumerate(complete, start=1):
        if None in row or any(value is None for value in row.values()):
            raise InputError(
                f"cannot resume: row {number} of {path} ({row.get('source')!r}) does not have "
                f"the {len(columns)} cells plandag writes; {_AFRESH}"
            )
    return text, rows


def _load_csv(output: Path) -> list[WrittenRecord]:
    text, rows = _read_csv(output, INVOICE_COLUMNS)
    changed = False
    if rows and not text.endswith("\n"):
        rows.pop()  # torn by an interruption
        changed = True
    kept_rows: list[dict[str, str]] = []
    result: list[WrittenRecord] = []
    with_items = 0
    expected_items: Counter[tuple[str, str]] = Counter()
    for row in rows:
        if row.get("status") not in _STATUSES:
            raise InputError(
                f"cannot resume: {output} has a row for {row.get('source')!r} whose status "
                f"{row.get('status')!r} is not ok, check_failed or error; {_AFRESH}"
            )
        written = _written_row(row)
        if _drop_record(written):
            changed = True
            continue
        kept_rows.append(row)
        result.append(written)
        count = row.get("items.count", "")
        if count.isdigit() and int(count):
            with_items += 1
            expected_items[(written.sha256 or "", written.chNFe or "")] += int(count)
    items_path = items_path_for(output)
    item_rows_kept: list[dict[str, str]] | None = None
    if items_path.exists():
        # Keep only items whose invoice row survived (joined on sha256 and chNFe).
        keys = {(w.sha256 or "", w.chNFe or "") for w in result}
        item_text, all_items = _read_csv(items_path, ITEM_COLUMNS)
        if all_items and not item_text.endswith("\n"):
            all_items.pop()
        item_rows_kept = []
        found_items: Counter[tuple[str, str]] = Counter()
        for row in all_items:
            key = (restore_cell(row.get("sha256") or ""), restore_cell(row.get("chNFe") or ""))
            if key in keys:
                item_rows_kept.append(row)
                found_items[key] += 1
        short = sum(1 for key, count in expected_items.items() if found_items[key] != count)
        if short:
            raise InputError(
                f"cannot resume: the items file {items_path} does not hold the items of "
                f"{short} invoice(s) listed in {output} (the two files do not belong "
                "together); remove --resume to write both files afresh"
            )
    elif with_items:
        raise InputError(
            f"cannot resume: the items file {items_path} is missing, though {output} lists "
            f"{with_items} invoice(s) with items; remove --resume to write both files afresh"
        )
    # Every check has passed: only now repair the files.
    if changed:
        _replace_atomically(output, _csv_lines(INVOICE_COLUMNS, iter(kept_rows)))
    if item_rows_kept is not None:
        _replace_atomically(items_path, _csv_lines(ITEM_COLUMNS, iter(item_rows_kept)))
    return result


def load_existing(output: Path, format: OutputFormat) -> list[WrittenRecord]:
    """Read a previous output for ``--resume``, in file order, repairing it in place.

    A torn last line (an interrupted run) is dropped. Records without a sha256 (a pattern
    that matched nothing, an input that is not a regular file) and ``internal_error`` records
    are dropped too, so their inputs are extracted again. For CSV, items whose invoice row is
    gone are dropped from ``OUT.items.csv``. Nothing is changed when the file is refused.
    Returns [] when the file does not exist.

    Args:
        output: the previous output file (JSONL, or the invoice CSV beside its items file).
        format: its format.

    Raises:
        InputError: the file is not an output plandag wrote: a line that is not a JSON
            object, a record missing ``source``/``sha256``/``status``/``errors``/``checks``
            or with a field of the wrong type (the message names the line and field), text
            that is not UTF-8, CSV columns that differ from :data:`INVOICE_COLUMNS` /
            :data:`ITEM_COLUMNS`, a malformed row; or, for CSV, the items file is missing
            (or lacks items) while the invoice file lists invoices with items.
        OSError: the file cannot be read or repaired.
    """
    if not output.exists():
        return []
    if format == "csv":
        return _load_csv(output)
    return _load_jsonl(output)


#: Longest first line :func:`is_plandag_output` reads (a JSONL record of a huge invoice).
_FIRST_LINE_LIMIT = 64 * 1024 * 1024


def is_plandag_output(path: Path) -> bool:
    """Whether ``path`` holds an output plandag wrote (so overwriting it loses no input).

    True for JSONL whose first line is a JSON object with ``sha256`` and ``status``, for
    CSV whose header is :data:`INVOICE_COLUMNS` or :data:`ITEM_COLUMNS`, and for an empty
    file (an interrupted first run's output: overwriting it loses nothing). False for
    anything else and for a file that cannot be read. Reads the first line only (at most
    64 MiB); never opens anything but a regular file.
    """
    try:
        if not path.is_file():
            return False
        if path.stat().st_size == 0:
            return True
        with path.open("rb") as handle:
            first = handle.readline(_FIRST_LINE_LIMIT)
    except OSError:
        return False
    if not first.endswith(b"\n"):
        return False
    try:
        text = first.decode("utf-8")
    except UnicodeDecodeError:
        return False
    if text.startswith("{"):
        try:
            record = json.loads(text)
        except ValueError:
            return False
        return isinstance(record, dict) and "sha256" in record and "status" in record
    header = next(csv.reader([text.rstrip("\r\n")]), [])
    return tuple(header) in (INVOICE_COLUMNS, ITEM_COLUMNS)


def _patched_record(record: dict[str, Any], outcome: tuple[str, str]) -> tuple[dict[str, Any], str]:
    checks = record.get("checks")
    checks = dict(checks) if isinstance(checks, Mapping) else {}
    checks["unique_in_batch"] = {"status": outcome[0], "detail": outcome[1]}
    record["checks"] = checks
    statuses = [str(c.get("status")) for c in checks.values() if isinstance(c, Mapping)]
    record["status"] = restatus(str(record.get("status", "")), statuses)
    return record, record["status"]


def rewrite_unique_in_batch(
    output: Path, format: OutputFormat, updates: Mapping[int, tuple[str, str]]
) -> dict[int, str]:
    """Set ``unique_in_batch`` of the records at the given positions and restate their status.

    Args:
        output: the output file (JSONL, or the invoice CSV; items are untouched).
        format: its format.
        updates: record position in the file (0-based, header excluded) → the new
            ``(status, detail)`` of the check.

    Returns:
        position → the record's status after the change (``ok``/``check_failed``/``error``).

    The file is rewritten to a temporary file beside it and moved over it with
    ``os.replace``, so a crash leaves either the old or the new file, never a mix.
    """
    if not updates:
        return {}
    statuses: dict[int, str] = {}
    if format == "jsonl":

        def jsonl_lines() -> Iterator[str]:
            with output.open(encoding="utf-8") as handle:
                for position, line in enumerate(handle):
                    if position in updates:
                        record, statuses[position] = _patched_record(
                            json.loads(line), updates[position]
                        )
                        yield _dumps(record) + "\n"
                    else:
                        yield line

        _replace_atomically(output, jsonl_lines())
        return statuses

    def csv_rows() -> Iterator[Mapping[str, str]]:
        with output.open(encoding="utf-8", newline="") as handle:
            for position, row in enumerate(csv.DictReader(handle)):
                if position in updates:
                    status, detail = updates[position]
                    row["checks.unique_in_batch"] = status
                    row["checks.unique_in_batch.detail"] = detail
                    checks = [row.get(f"checks.{name}", "") for name in CHECK_NAMES]
                    row["status"] = statuses[position] = restatus(row.get("status", ""), checks)
                yield row

    _replace_atomically(output, _csv_lines(INVOICE_COLUMNS, csv_rows()))
    return statuses
