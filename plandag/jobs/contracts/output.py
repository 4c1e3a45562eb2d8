"""Contract records written as JSONL (one record a line) or CSV (the record flattened).

**JSONL** holds each record whole (shape: :mod:`plandag.jobs.contracts.document`).

**CSV** has one row per contract: ``file``, ``status``, ``text_sha256``, ``extractor``,
``extractor_version``, ``chars``, ``chunks``, ``errors`` (``code: message`` joined by
`` | ``), ``quote_exists`` (the check's status), then three columns per field, in field
order: ``NAME`` (the answer as text: a date ``2019-04-01``; parties ``Name (Role); Name``;
a duration ``12 months`` or ``30 days``), ``NAME [evidence]`` (the values' ``start-end``
offsets, space-separated) and ``NAME [rejected]`` (how many quotes were rejected). The
quotes themselves are in the JSONL form only.

Both are flushed after each contract, so an interrupted batch leaves whole records, which
``--resume`` reads back (:func:`load_previous`).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

from plandag.errors import InputError
from plandag.jobs.contracts.fields import FieldSpec

__all__ = [
    "BASE_COLUMNS",
    "OutputFormat",
    "PreviousRecord",
    "RecordWriter",
    "answer_text",
    "csv_columns",
    "csv_row",
    "is_contracts_output",
    "load_previous",
    "output_format_for",
    "rewrite_previous",
]

OutputFormat = Literal["jsonl", "csv"]

BASE_COLUMNS: tuple[str, ...] = (
    "file",
    "status",
    "text_sha256",
    "extractor",
    "extractor_version",
    "chars",
    "chunks",
    "errors",
    "quote_exists",
)
"""The CSV columns before the fields' columns."""


def output_format_for(output: Path, format: str | None) -> OutputFormat:
    """``format``, or from ``output``'s suffix (``.csv`` → csv, anything else → jsonl).

    Raises:
        InputError: ``format`` is neither ``jsonl`` nor ``csv``.
    """
    if format is None:
        return "csv" if output.suffix.lower() == ".csv" else "jsonl"
    if format not in ("jsonl", "csv"):
        raise InputError(f"--format must be jsonl or csv, not {format!r}")
    return format  # type: ignore[return-value]


def csv_columns(fields: Sequence[FieldSpec]) -> list[str]:
    """The CSV header for ``fields``."""
    columns = list(BASE_COLUMNS)
    for spec in fields:
        columns.extend((spec.name, f"{spec.name} [evidence]", f"{spec.name} [rejected]"))
    return columns


def answer_text(answer: Any) -> str:
    """A field's answer as one CSV cell (see the module's docstring)."""
    if answer is None:
        return ""
    if isinstance(answer, str):
        return answer
    if isinstance(answer, Mapping):
        if "months" in answer:
            return f"{answer['months']} months"
        if "days" in answer:
            return f"{answer['days']} days"
        if "name" in answer:
            role = answer.get("role")
            return f"{answer['name']} ({role})" if role else str(answer["name"])
    if isinstance(answer, list):
        return "; ".join(answer_text(item) for item in answer)
    return json.dumps(answer, ensure_ascii=False)


def csv_row(record: Mapping[str, Any], fields: Sequence[FieldSpec]) -> dict[str, Any]:
    """One contract's CSV row (keys: :func:`csv_columns`)."""
    extractor = record.get("extractor") or {}
    checks = record.get("checks") or {}
    quote_check = checks.get("quote_exists") if isinstance(checks, Mapping) else None
    row: dict[str, Any] = {
        "file": record.get("file", ""),
        "status": record.get("status", ""),
        "text_sha256": record.get("text_sha256", ""),
        "extractor": extractor.get("name", "") if isinstance(extractor, Mapping) else "",
        "extractor_version": extractor.get("version", "") if isinstance(extractor, Mapping) else "",
        "chars": record.get("chars", 0),
        "chunks": record.get("chunks", 0),
        "errors": " | ".join(
            f"{error.get('code')}: {error.get('message')}"
            for error in record.get("errors") or []
            if isinstance(error, Mapping)
        ),
        "quote_exists": quote_check.get("status", "") if isinstance(quote_check, Mapping) else "",
    }
    found = record.get("fields") or {}
    for spec in fields:
        field = found.get(spec.name) if isinstance(found, Mapping) else None
        if not isinstance(field, Mapping):
            row[spec.name] = row[f"{spec.name} [evidence]"] = row[f"{spec.name} [rejected]"] = ""
            continue
        row[spec.name] = answer_text(field.get("answer"))
        row[f"{spec.name} [evidence]"] = " ".join(
            f"{value.get('start')}-{value.get('end')}" for value in field.get("values") or []
        )
        row[f"{spec.name} [rejected]"] = len(field.get("rejected") or [])
    return row


class RecordWriter:
    """Writes records to the output file, one contract at a time, flushed after each.

    Args:
        output: the file (created or truncated; appended to with ``append``).
        format: ``jsonl`` or ``csv``.
        fields: the fields (the CSV columns).
        append: add to an existing file (``--resume``); a CSV header is written only when
            the file is empty.

    Raises:
        OSError: the file cannot be opened.
    """

    def __init__(
        self,
        output: Path,
        format: OutputFormat,
        fields: Sequence[FieldSpec],
        *,
        append: bool = False,
    ) -> None:
        self.format = format
        self.fields = tuple(fields)
        self.handle: TextIO = output.open("a" if append else "w", encoding="utf-8", newline="")
        self.csv: csv.DictWriter[str] | None = None
        if format == "csv":
            self.csv = csv.DictWriter(self.handle, fieldnames=csv_columns(self.fields))
            if self.handle.tell() == 0:
                self.csv.writeheader()
                self.handle.flush()

    def write(self, record: Mapping[str, Any]) -> None:
        """Write one record and flush."""
        if self.csv is not None:
            self.csv.writerow(csv_row(record, self.fields))
        else:
            self.handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        self.handle.flush()

    def close(self) -> None:
        """Close the file (with an ``fsync``, so a finished batch survives a power cut)."""
        if self.handle.closed:
            return
        self.handle.flush()
        with contextlib.suppress(OSError):  # a pipe or a device: nothing to sync
            os.fsync(self.handle.fileno())
        self.handle.close()


@dataclass(frozen=True, slots=True)
class PreviousRecord:
    """One record of a previous output, as ``--resume`` sees it.

    Attributes:
        file: the record's ``file``.
        status: its ``status``.
        text_sha256: its ``text_sha256`` ("" for most error rows).
        line: the record as it stands in the file (a JSONL line, or a CSV row as a dict).
    """

    file: str
    status: str
    text_sha256: str
    line: str | dict[str, str]


def is_contracts_output(path: Path) -> bool:
    """Whether ``path`` holds a previous contracts output: its first line is a JSON record
    with ``file``, ``status`` and ``text_sha256``, or a CSV header starting with
    :data:`BASE_COLUMNS`."""
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            first = handle.readline()
    except (OSError, UnicodeDecodeError):
        return False
    if first.startswith("{"):
        try:
            data = json.loads(first)
        except ValueError:
            return False
        return isinstance(data, dict) and {"file", "status", "text_sha256"} <= set(data)
    header = next(csv.reader(io.StringIO(first)), [])
    return tuple(header[: len(BASE_COLUMNS)]) == BASE_COLUMNS


def load_previous(
    output: Path, format: OutputFormat, fields: Sequence[FieldSpec]
) -> list[PreviousRecord]:
    """The records of a previous output (``--resume``); none when the file does not exist
    or is empty.

    Raises:
        InputError: the file is not a contracts output plandag wrote (a line that is not a
            record, another CSV header, or other fields' columns): it is never overwritten.
    """
    try:
        text = output.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"--resume: cannot read {output} ({error})") from None
    if not text.strip():
        return []
    previous: list[PreviousRecord] = []
    if format == "csv":
        reader = csv.DictReader(io.StringIO(text, newline=""))
        if reader.fieldnames != csv_columns(fields):
            raise InputError(
                f"--resume: {output} does not have the columns of a contracts CSV for these "
                "fields (another --fields, or not written by plandag); write to another file "
                "or leave out --resume"
            )
        for row in reader:
            previous.append(
                PreviousRecord(row["file"], row["status"], row["text_sha256"], dict(row))
            )
        return previous
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError:
            data = None
        if not isinstance(data, dict) or not {"file", "status", "text_sha256"} <= set(data):
            raise InputError(
                f"--resume: {output} line {number} is not a contract record; it was not "
                "written by plandag extract contracts: write to another file or leave out "
                "--resume"
            )
        previous.append(
            PreviousRecord(
                str(data["file"]), str(data["status"]), str(data["text_sha256"] or ""), line
            )
        )
    return previous


def rewrite_previous(
    output: Path,
    format: OutputFormat,
    fields: Sequence[FieldSpec],
    kept: Sequence[PreviousRecord],
) -> None:
    """Replace ``output`` with only the ``kept`` records, atomically (a temporary file in
    the same folder, then ``os.replace``)."""
    folder = output.resolve().parent
    descriptor, temporary = tempfile.mkstemp(prefix=".contracts-", dir=folder)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8", newline="") as handle:
            if format == "csv":
                writer = csv.DictWriter(handle, fieldnames=csv_columns(fields))
                writer.writeheader()
                for record in kept:
                    assert isinstance(record.line, dict)
                    writer.writerow(record.line)
            else:
                for record in kept:
                    handle.write(f"{record.line}\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, output)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
