"""The NF-e tools and checks the stored extraction plan uses (``plan.json``).

* ``nfe_parse``: bytes → :class:`~plandag.extract.nfe.document.NfeDocument` (parsed once,
  invoices, protocols and events located, SHA-256 of the bytes), or a refusal saying what
  the file is instead (``not_an_invoice``, ``invalid_xml``, ``template``).
* ``nfe_invoice``: one invoice of the document with its context: the ``infNFe`` element
  for ``xml_select``, its key, layout, protocol and the file's events.
* ``nfe_record``: the field groups selected by ``xml_select`` → one record dict
  (:class:`~plandag.extract.nfe.record.NfeRecord`), with ``status: error`` and the reasons
  when a required field is missing or does not parse.

All three are cheap, non-blocking and declared ``inline``: they run on the event loop.
Their ``typical_seconds`` (5 ms, 1 ms, 2 ms) round up what the stored plan measured over the
example invoices (median 0.3 ms, 0.03 ms, 0.3 ms per call; a batch of large ``enviNFe`` files
parses slower).
"""

from __future__ import annotations

import datetime
import functools
import re
from collections.abc import Mapping
from typing import Any, TypedDict, cast

from lxml import etree
from pydantic import BaseModel

from plandag.checks.base import CheckDefinition
from plandag.extract.nfe.checks import NFE_CHECKS
from plandag.extract.nfe.document import NfeDocument, invoice_context, parse_document
from plandag.extract.nfe.record import Dest, Emit, Event, Ide, Item, Protocol, Total
from plandag.extract.nfe.validators import (
    ACCESS_KEY_PATTERN,
    CNPJ_FORMAT,
    CPF_FORMAT,
    parse_decimal,
)
from plandag.tools.base import Tool, tool

__all__ = [
    "NFE_CHECKS",
    "NFE_TOOLS",
    "NfeInvoice",
    "nfe_invoice",
    "nfe_parse",
    "nfe_record",
    "plandag_tools",
]


class NfeInvoice(TypedDict):
    """What ``nfe_invoice`` returns.

    Keys: ``xml`` (the ``infNFe`` element), ``index`` (0-based), ``count`` (invoices in the
    file), ``chNFe`` (from ``@Id``, or None), ``layout`` (``@versao``), ``source``,
    ``sha256``, ``protocol`` (``{"chNFe", "cStat", "xMotivo", "nProt", "dhRecbto"}`` or
    None) and ``events`` (every event of the file).
    """

    xml: etree._Element
    index: int
    count: int
    chNFe: str | None
    layout: str | None
    source: str
    sha256: str
    protocol: dict[str, str | None] | None
    events: list[dict[str, str | None]]


@tool(inline=True, typical_seconds=0.005)
def nfe_parse(data: bytes, source: str = "") -> NfeDocument:
    """Parse one NF-e/NFC-e file and locate its invoices, protocols and events.

    Args:
        data: the file's bytes (``read_file`` with ``encoding="binary"``); the XML's own
            encoding declaration and byte order mark are honoured.
        source: the input's path, for messages and records.

    Returns:
        An ``NfeDocument`` (root, ``infNFe`` elements, protocols by key, events, sha256).

    Raises:
        PermanentStepError: reason ``invalid_xml`` (empty, TXT layout, HTML, not
            well-formed), ``not_an_invoice`` (event file, SEFAZ response...: the message
            names it) or ``template`` (placeholder values).
    """
    return parse_document(data, source)


@tool(inline=True, typical_seconds=0.001)
def nfe_invoice(document: NfeDocument, index: int = 0) -> NfeInvoice:
    """One invoice of a parsed document, ready for ``xml_select``, with its protocol and events.

    Args:
        document: ``nfe_parse``'s result.
        index: 0-based position of the invoice in the file (``enviNFe`` batches hold many).

    Returns:
        ``{"xml", "index", "count", "chNFe", "layout", "source", "sha256", "protocol",
        "events"}``: ``xml`` is the ``infNFe`` element; ``protocol`` the ``protNFe/infProt``
        answering this key (found whatever its namespace) or None; ``events`` every event in
        the file.

    Raises:
        PermanentStepError: reason ``invalid_args`` when ``index`` is out of range.
    """
    # invoice_context builds a new dict with exactly these keys, in this order.
    return cast(NfeInvoice, invoice_context(document, index))


_DIGITS = re.compile(r"[0-9]+")
_REQUIRED_DECIMALS = ("vProd", "vNF")
_ITEM_DECIMALS = ("qCom", "vUnCom", "vProd", "vDesc", "vICMSDeson", "vPISST", "vCOFINSST")


@functools.cache
def _field_names(model: type[BaseModel]) -> tuple[str, ...]:
    return tuple(model.model_fields)


def _pick(model: type[BaseModel], values: Mapping[str, Any] | None) -> dict[str, Any]:
    """The model's fields from ``values`` as stripped strings: None for an absent element,
    ``""`` for an element present but empty (values are kept as written, NFE.md)."""
    values = values or {}
    picked: dict[str, Any] = {}
    for name in _field_names(model):
        value = values.get(name)
        if value is not None:
            value = value.strip() if isinstance(value, str) else str(value)
        picked[name] = value
    return picked


def _datetime(text: str) -> datetime.datetime | None:
    """``text`` as an ISO 8601 date-time (``Z`` read as ``+00:00``), or None when it is not
    one. ``dhEmi`` must also carry its UTC offset (MOC 7.0, field B09:
    "AAAA-MM-DDThh:mm:ssTZD"): its ``tzinfo`` is then set."""
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _valid_datetime(text: str, *, offset: bool = False) -> bool:
    """Whether ``text`` is an ISO 8601 date-time; with ``offset``, one carrying its UTC offset
    (``-03:00``, ``Z``), as ``dhEmi`` must (MOC 7.0, field B09: "AAAA-MM-DDThh:mm:ssTZD")."""
    moment = _datetime(text)
    return moment is not None and (moment.tzinfo is not None or not offset)


def _valid_date(text: str) -> bool:
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _key_from_id(identifier: str | None) -> str | None:
    if identifier is None:
        return None
    identifier = identifier.strip()
    return identifier[3:] if identifier.startswith("NFe") else identifier


def _validate(record: dict[str, Any], *, from_dhemi: bool = True) -> list[dict[str, str]]:
    """Errors for required fields that are missing or do not parse (NFE.md, "Status").

    ``from_dhemi``: the issue date comes from ``dhEmi`` (layouts 3.10 and 4.00: a date-time
    that must carry its UTC offset, NFE.md "ISO 8601 with its own offset") rather than an
    older layout's ``dEmi`` (a date, no offset).
    """
    errors: list[dict[str, str]] = []

    def missing(field: str) -> None:
        errors.append({"code": "missing_field", "message": f"{field} is missing"})

    def invalid(field: str, value: Any, expected: str) -> None:
        errors.append({"code": "invalid_field", "message": f"{field} {value!r} is not {expected}"})

    ide, emit, total = record["ide"], record["emit"], record["total"]
    key = ide["chNFe"]
    if not key:
        missing("infNFe/@Id (access key)")
    elif not ACCESS_KEY_PATTERN.fullmatch(key):
        invalid("infNFe/@Id (access key)", key, "44 characters 0-9 (A-Z in the CNPJ)")
    for name, width in (("mod", 2), ("nNF", 9)):
        value = ide[name]
        if not value:
            missing(f"ide/{name}")
        elif not _DIGITS.fullmatch(value) or len(value) > width:
            invalid(f"ide/{name}", value, f"a number of up to {width} digits")
    issue = ide["dhEmi"]
    moment = _datetime(issue) if issue and from_dhemi else None
    if not issue:
        missing("ide/dhEmi (issue date)")
    elif from_dhemi and moment is None:
        invalid("ide/dhEmi (issue date)", issue, "an ISO 8601 date-time")
    elif from_dhemi and moment is not None and moment.tzinfo is None:
        invalid("ide/dhEmi (issue date)", issue, "an ISO 8601 date-time with its UTC offset")
    elif not from_dhemi and not (_valid_datetime(issue) if "T" in issue else _valid_date(issue)):
        invalid("ide/dEmi (issue date)", issue, "an ISO 8601 date")
    if not emit["CNPJ"] and not emit["CPF"]:
        missing("emit/CNPJ or emit/CPF (emitter document)")
    elif emit["CNPJ"] and not CNPJ_FORMAT.fullmatch(emit["CNPJ"]):
        invalid("emit/CNPJ", emit["CNPJ"], "a CNPJ (12 characters 0-9 or A-Z, then 2 digits)")
    elif not emit["CNPJ"] and not CPF_FORMAT.fullmatch(emit["CPF"]):
        invalid("emit/CPF", emit["CPF"], "a CPF (11 digits)")
    for name, value in total.items():
        if not value:
            if name in _REQUIRED_DECIMALS:
                missing(f"total/ICMSTot/{name}")
            continue
        if parse_decimal(value) is None:
            invalid(f"total/{name}", value, "a decimal number")
    for position, item in enumerate(record["items"]):
        for name in _ITEM_DECIMALS:
            value = item[name]
            if value and parse_decimal(value) is None:
                label = item["nItem"] or str(position + 1)
                invalid(f"det[nItem={label}]/{name}", value, "a decimal number")
    return errors


@tool(inline=True, typical_seconds=0.002)
def nfe_record(
    source: str,
    sha256: str,
    invoice: dict[str, Any],
    ide: dict[str, Any],
    emit: dict[str, Any],
    dest: dict[str, Any],
    items: list[dict[str, Any]],
    total: dict[str, Any],
    protocol: dict[str, Any] | None = None,
    events: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Assemble one invoice's record from the field groups (NFE.md, "The record").

    Args:
        source: the input's path.
        sha256: hex SHA-256 of the input bytes.
        invoice: ``nfe_invoice``'s result (gives ``layout`` and ``index``).
        ide: identification fields selected from the invoice, with ``Id`` (``infNFe/@Id``)
            and ``dEmi`` (older layouts) beside ``dhEmi``.
        emit: emitter fields. ``dest``: recipient fields with ``present`` (whether the
            ``dest`` group exists; an NFC-e may have none).
        items: one dict per ``det``. ``total``: the totals.
        protocol: the matching ``protNFe/infProt`` fields, or None.
        events: events found in the same file.

    Returns:
        The record as a dict shaped like ``NfeRecord.model_dump()``: ``status`` is
        ``error`` with ``errors`` when a required field (access key, mod, nNF, issue date,
        emitter document, vProd, vNF) is missing or does not parse (``dhEmi`` without its
        UTC offset is ``invalid_field``; an older ``dEmi`` is a plain date), or a present
        decimal does not parse; ``ok`` otherwise (the checks attached to the step refine it).
        Values are the XML's strings, unconverted (dates keep their own offset).
    """
    ide_values = dict(ide)
    from_dhemi = True
    if not ide_values.get("dhEmi") and ide_values.get("dEmi"):
        ide_values["dhEmi"] = ide_values["dEmi"]
        from_dhemi = False
    ide_values["chNFe"] = _key_from_id(ide_values.get("Id")) or invoice.get("chNFe")
    has_dest = dest.get("present")
    dest_values = _pick(Dest, dest)
    if has_dest is None:
        has_dest = any(value is not None for value in dest_values.values())
    record: dict[str, Any] = {
        "source": source,
        "sha256": sha256,
        "status": "ok",
        "errors": [],
        "checks": {},
        "layout": invoice.get("layout"),
        "invoice_index": invoice.get("index"),
        "ide": _pick(Ide, ide_values),
        "emit": _pick(Emit, emit),
        "dest": dest_values if has_dest else None,
        "items": [_pick(Item, item) for item in items],
        "total": _pick(Total, total),
        "protocol": _pick(Protocol, protocol) if protocol else None,
        "events": [_pick(Event, event) for event in events or []],
    }
    errors = _validate(record, from_dhemi=from_dhemi)
    if errors:
        record["status"] = "error"
        record["errors"] = errors
    return record


NFE_TOOLS: tuple[Tool, ...] = (nfe_parse, nfe_invoice, nfe_record)


def plandag_tools() -> tuple[tuple[Tool, ...], tuple[CheckDefinition, ...]]:
    """The NF-e application's tools and checks, for the ``plandag.tools`` entry-point group
    (``plandag.tools.registry.default_registry`` discovers them there)."""
    return NFE_TOOLS, NFE_CHECKS
