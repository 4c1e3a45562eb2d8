"""Records encoded once, where they are made: the texts a batch writes for each record.

A batch writes each record three times: its line in the output file, its row in the run
store and its bar in the trace. :func:`encode_first` makes all of that from the record in
one pass, in whichever process extracted it (a worker of :mod:`plandag.extract.parallel`,
or the batch's own process with ``--workers 1``), so that the process that writes (the
batch's parent) only appends texts:

- ``unique_in_batch`` needs the whole batch, which a worker does not see. A worker encodes
  the record as the first record of its key (``pass``, or ``not_applicable`` without a
  key), the outcome almost every record ends with; the parent takes those texts as they
  are when no earlier record of the batch has that key, and otherwise decodes the record
  and encodes it again with the outcome it gets there (a duplicate: rare).
- Sealing (:mod:`plandag.store.sealing`) depends on the parent's environment (its secret
  values), which a worker on another machine does not share: the worker only says whether
  a rule other than the secret values may apply
  (:func:`~plandag.store.sealing.may_need_sealing_by_rules`), and the parent seals
  (:func:`~plandag.store.sealing.sealed_store_json_text`).
- A record whose texts cannot be made (not JSON data) travels as the record itself, and the
  parent writes it as before.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from plandag.extract.names import escape_surrogates
from plandag.extract.nfe.output import record_identity, record_json_texts, restatus

__all__ = [
    "FIRST_OF_KEY",
    "NO_KEY",
    "EncodedRecord",
    "encode_first",
    "encode_ready",
    "escaped",
    "tally_fields",
    "with_unique",
]

#: ``unique_in_batch`` of the first record of a key (no other record of the batch has it).
FIRST_OF_KEY = ("pass", "no other record in the batch has this chNFe")
#: ``unique_in_batch`` of a record without a key.
NO_KEY = ("not_applicable", "the record has no chNFe")


_TUPLE_NEW = tuple.__new__


class EncodedRecord(NamedTuple):
    """A record ready to write: its identity, its texts and what a batch counts of it.

    Attributes:
        key: the record's ``ide.chNFe`` (None without one); source, sha256: as
            :func:`~plandag.extract.nfe.output.record_identity` gives them.
        status: the record's status (``ok``, ``check_failed``, ``error``).
        line: its JSONL line without the newline (``json.dumps(record,
            ensure_ascii=False)``) in UTF-8, or None when the record is not JSON data.
        compact: its compact JSON text (``separators=(",", ":")``, ``allow_nan=False``),
            the run store's form before sealing, or None (as ``line``).
        sealing_rules: whether a sealing rule other than the environment's secret values
            may change it (:func:`~plandag.store.sealing.may_need_sealing_by_rules`).
        failed_checks: names of its checks whose status is ``fail``, in order.
        error_codes: the codes of its errors, in order.
        repair: ``(outcome, model calls)`` of its repair note (``reused`` for a repair
            applied again), or None.
        summary: its trace summary (:func:`plandag.trace.writer.document_summary`).
        value: the record itself when ``compact`` is None or the process that encoded it
            keeps it (:func:`encode_ready`'s ``keep``), else None.
        summary_text: the JSON text of ``summary`` in a trace line
            (:func:`plandag.trace.writer.document_summary_text`), or None.
    """

    key: str | None
    source: str
    sha256: str | None
    status: str
    line: bytes | None
    compact: str | None
    sealing_rules: bool
    failed_checks: tuple[str, ...]
    error_codes: tuple[str, ...]
    repair: tuple[str, int] | None
    summary: dict[str, Any]
    value: Any = None
    summary_text: str | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its fields, made again by ``tuple.__new__`` (a call in C): the process
        that unpickles a chunk's records (a batch's parent) runs no Python-level
        ``__new__`` for each."""
        return _TUPLE_NEW, (EncodedRecord, tuple(self))

    def record(self) -> Any:
        """The record: ``value`` when it is kept, else decoded from ``compact`` (the same
        JSON)."""
        if self.value is not None or self.compact is None:
            return self.value
        return json.loads(self.compact)


def with_unique(record: dict[str, Any], outcome: tuple[str, str]) -> dict[str, Any]:
    """``record`` with ``checks.unique_in_batch`` set to ``outcome`` (``(status, detail)``)
    and its status restated (NFE.md "Status")."""
    checks = record.get("checks")
    checks = dict(checks) if type(checks) is dict or isinstance(checks, Mapping) else {}
    checks["unique_in_batch"] = {"status": outcome[0], "detail": outcome[1]}
    statuses = [
        str(c.get("status")) for c in checks.values() if type(c) is dict or isinstance(c, Mapping)
    ]
    return {**record, "checks": checks, "status": restatus(str(record.get("status")), statuses)}


def escaped(record: Mapping[str, Any]) -> Any:
    """:func:`~plandag.extract.names.escape_surrogates` of ``record``, with a fast path: a
    record that encodes as strict UTF-8 JSON (the usual case) holds no lone surrogate."""
    try:
        json.dumps(record, ensure_ascii=False, check_circular=False).encode("utf-8")
    except (UnicodeEncodeError, TypeError, ValueError, RecursionError):
        return escape_surrogates(record)
    return record


def tally_fields(
    record: Mapping[str, Any],
) -> tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, int] | None]:
    """What a batch's summary counts of a record: ``(status, failed check names, error
    codes, (repair outcome, model calls) or None)``."""
    checks = record.get("checks")
    failed: tuple[str, ...] = ()
    if type(checks) is dict or isinstance(checks, Mapping):
        for name, outcome in checks.items():
            if (type(outcome) is dict or isinstance(outcome, Mapping)) and outcome.get(
                "status"
            ) == "fail":
                failed += (name,)
    errors = record.get("errors")
    codes = (
        tuple(
            str(error.get("code"))
            for error in errors
            if type(error) is dict or isinstance(error, Mapping)
        )
        if errors
        else ()
    )
    repair = record.get("repair")
    noted = None
    if repair is not None and isinstance(repair, Mapping):
        outcome = "reused" if repair.get("reused") else str(repair.get("outcome"))
        noted = (outcome, int(repair.get("model_calls") or 0))
    return str(record.get("status")), failed, codes, noted


def encode_ready(
    ready: Mapping[str, Any], texts: tuple[str, str] | None, *, keep: bool = False
) -> EncodedRecord:
    """The :class:`EncodedRecord` of a record as it is written (``unique_in_batch`` given),
    from its :func:`~plandag.extract.nfe.output.record_json_texts` (None: not JSON data);
    ``keep``: the record itself kept in it as ``value`` (in the process that writes it,
    never sent)."""
    from plandag.store.sealing import may_need_sealing_by_rules
    from plandag.trace.writer import document_summary, document_summary_text

    key, source, sha256 = record_identity(ready)
    status, failed, codes, repair = tally_fields(ready)
    summary = document_summary(ready)
    if texts is None:
        return EncodedRecord(
            key, source, sha256, status, None, None, True, failed, codes, repair,
            summary, ready, document_summary_text(summary),
        )  # fmt: skip
    line, compact = texts
    return EncodedRecord(
        key,
        source,
        sha256,
        status,
        line.encode("utf-8"),
        compact,
        may_need_sealing_by_rules(compact),
        failed,
        codes,
        repair,
        summary,
        ready if keep else None,
        document_summary_text(summary),
    )


def encode_first(record: Mapping[str, Any]) -> EncodedRecord | None:
    """``record`` encoded as the first record of its key in the batch (``unique_in_batch``
    :data:`FIRST_OF_KEY`, or :data:`NO_KEY` without a key), its lone surrogates escaped
    first when it holds any; None when it is not JSON data (the record then travels as it
    is)."""
    written, texts = _as_first(record)
    if texts is None:
        written, texts = _as_first(escaped(record))
        if texts is None:
            return None
    return encode_ready(written, texts)


def _as_first(record: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[str, str] | None]:
    key = record_identity(record)[0]
    written = with_unique(dict(record), FIRST_OF_KEY if key is not None else NO_KEY)
    return written, record_json_texts(written)
