"""Reading one NF-e / NFC-e file: what it is, where its invoices, protocols and events are.

:func:`parse_document` parses the bytes once (hardened lxml parser, ``plandag.tools.xml``),
finds every invoice (``infNFe``, wherever it sits: ``nfeProc``, a bare ``NFe``, an
``enviNFe`` batch of several, a SOAP envelope) and the protocols (``protNFe``) and events
(``retEvento``, ``evento``) in the same file, whatever namespace they were written in. A file
holding no invoice is refused with a :class:`~plandag.errors.PermanentStepError` whose
``reason`` says what it is instead:

* ``not_an_invoice``: an event file (``procEventoNFe``: CC-e, cancellation...), a SEFAZ
  response (``retEnviNFe``, ``retConsReciNFe``..., bare or in a SOAP envelope), a number
  voiding (``inutNFe``), any other XML without ``infNFe``;
* ``invalid_xml``: empty, not XML (the NF-e TXT layout), an HTML page, truncated, or a
  document with a DTD or entity declarations (``<!DOCTYPE ...>``: NF-e documents have none,
  and an entity left unexpanded would silently empty a field);
* ``template``: a schema-generated template whose values are placeholders (``"string"``).

An ``infNFe`` written in a foreign namespace (neither the NF-e namespace nor none) is not
read, but it is not dropped either: it keeps its place among the file's invoices and
:func:`invoice_context` refuses it (reason ``wrong_namespace``), so it gets its own error
record and an ``enviNFe`` of four invoices always gives four records. A file whose every
``infNFe`` is foreign is refused as a whole (``wrong_namespace``).

:func:`extract_document` runs the stored plan (``plan.json``) on one file through the
scheduler and returns its records.

Element names are the layout's (MOC 7.0, Anexo I); the namespace is
``http://www.portalfiscal.inf.br/nfe``.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import re
import stat
from collections.abc import Awaitable, Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lxml import etree

from plandag.errors import PermanentStepError
from plandag.extract.names import display_name
from plandag.tools.boundary import WriteBoundary
from plandag.tools.xml import NFE_NAMESPACE, parse_xml

if TYPE_CHECKING:
    from plandag.checks.base import CheckOutcome
    from plandag.compiler.compiled import CompiledPlan
    from plandag.planner.repair import PlanRepairer, RepairedRun
    from plandag.scheduler.estimate import PlanEstimate
    from plandag.scheduler.result import RunResult, StepRecord
    from plandag.scheduler.session import RunSession, SessionState
    from plandag.tools.registry import Registry

__all__ = [
    "BUSINESS_CHECKS",
    "EVENT_TYPES",
    "INPUT_REFUSALS",
    "INVOICE_STEP",
    "PARSE_STEP",
    "PLACEHOLDER_VALUES",
    "RECORD_STEP",
    "Extractor",
    "NfeDocument",
    "advise_read",
    "error_record",
    "extract_document",
    "file_sha256",
    "find_events",
    "find_protocols",
    "input_read_step",
    "invoice_context",
    "invoice_key",
    "load_plan_text",
    "nfe_excerpt",
    "nfe_needs_repair",
    "parse_document",
    "read_regular_file",
    "record_status",
    "takes_bytes",
]

#: An async function from one input path to its records (one per invoice, or one error record).
Extractor = Callable[[Path], Awaitable[list[dict[str, Any]]]]


def advise_read(path: Path) -> None:
    """Ask the kernel to read ``path`` into its page cache now, without waiting
    (``posix_fadvise(POSIX_FADV_WILLNEED)``, POSIX.1-2001), so that the read of an input
    further on finds its bytes in memory. Only a regular file is opened (a pipe or a device
    never is); anything that fails is ignored: the read itself reports it."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return
    try:
        advise(descriptor, 0, 0, os.POSIX_FADV_WILLNEED)
    except OSError:
        pass
    finally:
        os.close(descriptor)


#: Event types named in messages (MOC 7.0 and the event technical notes).
EVENT_TYPES: dict[str, str] = {
    "110110": "CC-e",
    "110111": "cancellation",
    "110112": "cancellation by substitution",
    "110140": "EPEC",
    "110150": "payment authorisation",
    "210200": "recipient confirmation",
    "210210": "recipient awareness",
    "210220": "recipient unknown operation",
    "210240": "recipient operation not performed",
}

#: Values that XSD-to-XML generators write where a real value belongs (XMLSpy, Oxygen and
#: Liquid write the type name, ``string``; SoapUI writes ``?``).
PLACEHOLDER_VALUES: frozenset[str] = frozenset({"string", "?", "token", "normalizedstring"})

# Where an invoice shows a placeholder, if it is a template: the key and layout attributes
# and the fields no real invoice leaves to chance. Two of them make a template.
# Attributes and element paths (XPath, NF-e namespace) probed for placeholder values.
_TEMPLATE_ATTRIBUTES: tuple[str, ...] = ("Id", "versao")
_TEMPLATE_PATHS: tuple[str, ...] = (
    "nfe:ide/nfe:cNF",
    "nfe:ide/nfe:nNF",
    "nfe:ide/nfe:dhEmi",
    "nfe:emit/nfe:CNPJ",
    "nfe:total/nfe:ICMSTot/nfe:vNF",
)
# The probes as one XPath union: its result is in document order (XPath 1.0, 3.3) and each
# probe ends in its own element name, so a probe's first match is the first node of the
# union bearing its name.
_TEMPLATE_PROBE = etree.XPath(
    " | ".join(_TEMPLATE_PATHS), namespaces={"nfe": NFE_NAMESPACE}, smart_strings=False
)
_TEMPLATE_PROBE_TAGS: frozenset[str] = frozenset(
    f"{{{NFE_NAMESPACE}}}{path.rpartition(':')[2]}" for path in _TEMPLATE_PATHS
)
_TEMPLATE_THRESHOLD = 2

_SEFAZ_RESPONSE = re.compile(r"ret[A-Z]\w*")
_EVENT_ROOTS = frozenset({"procEventoNFe", "evento", "envEvento", "retEnvEvento", "retEvento"})
_VOIDING_ROOTS = frozenset({"inutNFe", "procInutNFe", "retInutNFe"})


class _Parts:
    """The elements of interest in one document, found in one pass over the tree (lxml's
    ``iter`` with ``{*}`` wildcards matches any namespace and none)."""

    __slots__ = ("event_answers", "event_requests", "invoices", "protocols")

    def __init__(self, root: etree._Element) -> None:
        self.invoices: list[etree._Element] = []
        self.protocols: list[etree._Element] = []
        self.event_answers: list[etree._Element] = []
        self.event_requests: list[etree._Element] = []
        for element in root.iter("{*}infNFe", "{*}infProt", "{*}infEvento"):
            name = _local_name(element)
            parent = element.getparent()
            parent_name = _local_name(parent) if parent is not None else ""
            if name == "infNFe":
                self.invoices.append(element)
            elif name == "infProt":
                if parent_name == "protNFe":
                    self.protocols.append(element)
            elif parent_name == "retEvento":
                self.event_answers.append(element)
            elif parent_name == "evento":
                self.event_requests.append(element)


def _local_name(element: etree._Element) -> str:
    tag = element.tag
    if not isinstance(tag, str):
        return ""
    return tag.rpartition("}")[2]


def _child_text(element: etree._Element, name: str) -> str | None:
    """Text (stripped; None when empty) of ``element``'s first child named ``name``, any ns."""
    for child in element:
        if _local_name(child) == name:
            text = (child.text or "").strip()
            return text or None
    return None


def _child_texts(element: etree._Element, names: tuple[str, ...]) -> dict[str, str | None]:
    """:func:`_child_text` of each of ``names``, in one pass over the children: ``{name:
    text of the first child so named (any namespace), stripped, None when empty or absent}``,
    keys in the order of ``names``."""
    texts: dict[str, str | None] = dict.fromkeys(names)
    found: set[str] = set()
    for child in element:
        tag = child.tag
        if type(tag) is not str:
            continue
        name = tag.rpartition("}")[2]
        if name in texts and name not in found:
            found.add(name)
            texts[name] = (child.text or "").strip() or None
    return texts


class NfeDocument:
    """One parsed input file and where its parts are.

    Attributes:
        source: the input's path as given (for messages and records).
        sha256: hex SHA-256 of the input bytes.
        root: the parsed root element.
        invoices: every ``infNFe`` element, in document order (at least one in the NF-e
            namespace; one in no namespace has been moved into it; one in a foreign
            namespace is kept in its place, and :func:`invoice_context` refuses it).
        protocols: ``protNFe/infProt`` fields by access key (``chNFe``): ``{"chNFe",
            "cStat", "xMotivo", "nProt", "dhRecbto"}``, in document order.
        events: every event in the file (see :func:`find_events`).
    """

    __slots__ = ("events", "invoices", "protocols", "root", "sha256", "source")

    source: str
    sha256: str
    root: etree._Element
    invoices: list[etree._Element]
    protocols: dict[str, dict[str, str | None]]
    events: list[dict[str, str | None]]

    def __init__(
        self,
        *,
        source: str,
        sha256: str,
        root: etree._Element,
        invoices: list[etree._Element],
        protocols: dict[str, dict[str, str | None]],
        events: list[dict[str, str | None]],
    ) -> None:
        self.source = source
        self.sha256 = sha256
        self.root = root
        self.invoices = invoices
        self.protocols = protocols
        self.events = events

    def __repr__(self) -> str:
        return (
            f"NfeDocument(source={self.source!r}, invoices={len(self.invoices)}, "
            f"protocols={len(self.protocols)}, events={len(self.events)})"
        )


def find_protocols(root: etree._Element) -> dict[str, dict[str, str | None]]:
    """Every authorisation protocol in the document, by the access key it answers.

    ``protNFe`` is found by local name, whatever its namespace (some emitters write it in
    no namespace). A protocol without ``chNFe`` is kept under the key ``""``.

    Returns:
        ``{chNFe: {"chNFe", "cStat", "xMotivo", "nProt", "dhRecbto"}}``, values as strings.
    """
    return _protocols(_Parts(root).protocols)


_PROTOCOL_FIELDS = ("chNFe", "cStat", "xMotivo", "nProt", "dhRecbto")
_EVENT_FIELDS = ("tpEvento", "chNFe", "nSeqEvento", "cStat", "nProt", "xEvento")


def _protocols(infos: list[etree._Element]) -> dict[str, dict[str, str | None]]:
    protocols: dict[str, dict[str, str | None]] = {}
    for info in infos:
        fields = _child_texts(info, _PROTOCOL_FIELDS)
        protocols.setdefault(fields["chNFe"] or "", fields)
    return protocols


def find_events(root: etree._Element) -> list[dict[str, str | None]]:
    """Every event in the document: SEFAZ answers (``retEvento``) first, then requests
    (``evento``) that no answer in the file matches (same key, type and sequence).

    Returns:
        ``[{"tpEvento", "cStat", "chNFe", "nProt", "description"}]``: ``cStat`` is the
        answer's status (None for an unanswered request), ``description`` its ``xEvento``
        or the request's ``descEvento``.
    """
    parts = _Parts(root)
    return _events(parts.event_answers, parts.event_requests)


def _events(
    answers: list[etree._Element], requests: list[etree._Element]
) -> list[dict[str, str | None]]:
    events: list[dict[str, str | None]] = []
    answered: set[tuple[str | None, str | None, str | None]] = set()
    for info in answers:
        texts = _child_texts(info, _EVENT_FIELDS)
        tp_evento = texts["tpEvento"]
        key = texts["chNFe"]
        answered.add((key, tp_evento, texts["nSeqEvento"]))
        events.append(
            {
                "tpEvento": tp_evento,
                "cStat": texts["cStat"],
                "chNFe": key,
                "nProt": texts["nProt"],
                "description": texts["xEvento"],
            }
        )
    for info in requests:
        texts = _child_texts(info, _EVENT_FIELDS)
        tp_evento = texts["tpEvento"]
        key = texts["chNFe"]
        if (key, tp_evento, texts["nSeqEvento"]) in answered:
            continue
        detail = next((child for child in info if _local_name(child) == "detEvento"), None)
        events.append(
            {
                "tpEvento": tp_evento,
                "cStat": None,
                "chNFe": key,
                "nProt": None,
                "description": _child_text(detail, "descEvento") if detail is not None else None,
            }
        )
    return events


def _describe_event(root: etree._Element) -> str:
    events = find_events(root)
    if not events:
        return f"event file <{_local_name(root)}> without an event, not an invoice"
    event = events[0]
    tp_evento = event["tpEvento"] or "?"
    kind = EVENT_TYPES.get(tp_evento, "event")
    status = f", cStat {event['cStat']}" if event["cStat"] else ""
    key = f" for key {event['chNFe']}" if event["chNFe"] else ""
    more = f" (and {len(events) - 1} more)" if len(events) > 1 else ""
    name = f"{kind} event" if kind != "event" else "event"
    return f"{name} {tp_evento}{status}{key}{more}, not an invoice"


def _find_response(root: etree._Element) -> etree._Element | None:
    for element in root.iter(etree.Element):
        if _SEFAZ_RESPONSE.fullmatch(_local_name(element)):
            return element
    return None


def _describe_response(response: etree._Element) -> str:
    parts: list[str] = []
    status = _child_text(response, "cStat")
    if status:
        parts.append(f"cStat {status} {_child_text(response, 'xMotivo') or ''}".strip())
    for info in _Parts(response).protocols:
        answer = _child_text(info, "cStat")
        if answer:
            reason = _child_text(info, "xMotivo") or ""
            parts.append(f"protNFe cStat {answer} {reason}".strip())
            break
    summary = f" ({'; '.join(parts)})" if parts else ""
    return f"SEFAZ response {_local_name(response)}{summary}, not an invoice"


def _refuse_without_invoice(root: etree._Element, source: str) -> PermanentStepError:
    name = _local_name(root)
    where = f"{source}: " if source else ""
    if name.lower() == "html":
        return PermanentStepError(
            f"{where}an HTML page (an error or login page?), not NF-e XML", reason="invalid_xml"
        )
    if name in _EVENT_ROOTS:
        return PermanentStepError(f"{where}{_describe_event(root)}", reason="not_an_invoice")
    if name in _VOIDING_ROOTS:
        return PermanentStepError(
            f"{where}number voiding <{name}> (inutilização), not an invoice",
            reason="not_an_invoice",
        )
    response = _find_response(root)
    if response is not None:
        return PermanentStepError(f"{where}{_describe_response(response)}", reason="not_an_invoice")
    return PermanentStepError(
        f"{where}XML with root <{name}> holds no infNFe element, not an invoice",
        reason="not_an_invoice",
    )


def _placeholder_count(invoice: etree._Element) -> int:
    """How many of the probed key fields hold a placeholder (the invoice is in the NF-e
    namespace by now: see :func:`_into_nfe_namespace`): its ``Id`` and ``versao``
    attributes and the text of each probe's first match (``_TEMPLATE_PATHS``)."""
    texts = [invoice.get(name) for name in _TEMPLATE_ATTRIBUTES]
    seen: set[str] = set()
    found: Any = _TEMPLATE_PROBE(invoice)
    for element in found:
        tag = element.tag
        if tag in _TEMPLATE_PROBE_TAGS and tag not in seen:
            seen.add(tag)
            texts.append(element.text)
    return sum(
        1 for text in texts if text is not None and text.strip().lower() in PLACEHOLDER_VALUES
    )


def _into_nfe_namespace(invoice: etree._Element) -> None:
    """Move an ``infNFe`` written in no namespace (and its non-namespaced descendants) into
    the NF-e namespace, so the plan's ``nfe:`` paths reach it like any other invoice."""
    for element in invoice.iter(etree.Element):
        tag = element.tag
        if isinstance(tag, str) and not tag.startswith("{"):
            element.tag = f"{{{NFE_NAMESPACE}}}{tag}"


#: A record of the NF-e TXT layout: its type (``A``, ``B``, ``C02``...) and a pipe.
_TXT_RECORD = re.compile(rb"[A-Z][0-9A-Z]{0,4}\|")


def _precheck_bytes(data: bytes, source: str) -> None:
    where = f"{source}: " if source else ""
    head = data[:512].lstrip(b"\xef\xbb\xbf \t\r\n")
    if not head:
        raise PermanentStepError(f"{where}empty file, not an invoice", reason="invalid_xml")
    if head.startswith(b"NOTAFISCAL|") or _TXT_RECORD.match(head):
        raise PermanentStepError(
            f"{where}NF-e TXT layout (pipe-separated records), not XML; convert it to XML first",
            reason="invalid_xml",
        )
    lowered = head[:64].lower()
    if lowered.startswith((b"<!doctype html", b"<html")):
        raise PermanentStepError(
            f"{where}an HTML page (an error or login page?), not NF-e XML", reason="invalid_xml"
        )


def _refuse_a_dtd(root: etree._Element, source: str) -> None:
    """Refuse a document carrying a DTD (``<!DOCTYPE ...>``, internal subset or external).

    NF-e documents never have one (MOC 7.0: the layout is defined by XML Schema); the
    hardened parser does not expand entities, so a field holding an entity reference would
    come out empty with status ok. Refusing the document says what is wrong instead.
    """
    docinfo = root.getroottree().docinfo
    if docinfo.internalDTD is not None or docinfo.doctype or docinfo.system_url:
        where = f"{source}: " if source else ""
        raise PermanentStepError(
            f"{where}a DTD or entity declaration (<!DOCTYPE {docinfo.root_name}>); "
            "NF-e documents have none",
            reason="invalid_xml",
        )


def _is_foreign(invoice: etree._Element) -> bool:
    """Whether an ``infNFe`` is in a namespace other than the NF-e one (none was moved in)."""
    return etree.QName(invoice).namespace != NFE_NAMESPACE


def _foreign(invoice: etree._Element) -> str:
    key = invoice_key(invoice)
    which = f"infNFe {key}" if key else "an infNFe"
    return f"{which} is in the namespace {etree.QName(invoice).namespace}, not NF-e's"


def parse_document(data: bytes | str, source: str = "") -> NfeDocument:
    """Parse one input and locate its invoices, protocols and events.

    Args:
        data: the file's bytes (the encoding comes from the document: a UTF-8 byte order
            mark, its declaration such as ``ISO-8859-1``, else UTF-8), or text.
        source: the input's path, for messages.

    Returns:
        An :class:`NfeDocument` with at least one invoice.

    Raises:
        PermanentStepError: reason ``invalid_xml`` (empty, the TXT layout, HTML, not
            well-formed or truncated: lxml's message with line and column; a DTD or entity
            declaration), ``not_an_invoice`` (events, SEFAZ responses, other XML; the
            message names what the file is), ``wrong_namespace`` (every ``infNFe`` is in a
            foreign namespace) or ``template`` (placeholder values such as ``"string"``).
    """
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    sha256 = hashlib.sha256(payload).hexdigest()
    _precheck_bytes(payload, source)
    try:
        root = parse_xml(data)
    except PermanentStepError as error:
        if source:
            raise PermanentStepError(f"{source}: {error}", reason=error.reason) from error
        raise
    _refuse_a_dtd(root, source)
    parts = _Parts(root)
    invoices: list[etree._Element] = []
    readable = 0
    for element in parts.invoices:
        namespace = etree.QName(element).namespace
        if namespace is None:
            _into_nfe_namespace(element)
            readable += 1
        elif namespace == NFE_NAMESPACE:
            readable += 1
        invoices.append(element)
    if not invoices:
        raise _refuse_without_invoice(root, source)
    if not readable:
        where = f"{source}: " if source else ""
        raise PermanentStepError(
            f"{where}{_foreign(invoices[0])}; no invoice in the NF-e namespace {NFE_NAMESPACE}",
            reason="wrong_namespace",
        )
    for position, invoice in enumerate(invoices):
        if _is_foreign(invoice):
            continue
        if _placeholder_count(invoice) >= _TEMPLATE_THRESHOLD:
            where = f"{source}: " if source else ""
            raise PermanentStepError(
                f"{where}invoice {position} is a schema template: its key, number, date or "
                f"totals hold placeholder values such as 'string', not data",
                reason="template",
            )
    return NfeDocument(
        source=source,
        sha256=sha256,
        root=root,
        invoices=invoices,
        protocols=_protocols(parts.protocols),
        events=_events(parts.event_answers, parts.event_requests),
    )


def invoice_key(invoice: etree._Element) -> str | None:
    """The access key of an ``infNFe``: its ``Id`` attribute without the ``NFe`` prefix."""
    identifier = invoice.get("Id")
    if identifier is None:
        return None
    identifier = identifier.strip()
    return identifier[3:] if identifier.startswith("NFe") else identifier


def invoice_context(document: NfeDocument, index: int) -> dict[str, Any]:
    """The invoice at ``index`` with its key, layout, protocol and the file's events.

    The protocol is the one whose ``chNFe`` is the invoice's key; when the file holds one
    invoice and one protocol for another key, that protocol is still attached (with its own
    ``chNFe``) so the protocol check can say it answers another invoice.

    Raises:
        PermanentStepError: reason ``invalid_args`` when ``index`` is out of range;
            ``wrong_namespace`` when that ``infNFe`` is in a foreign namespace (it is not
            read: its fields would be found nowhere).
    """
    count = len(document.invoices)
    if not 0 <= index < count:
        raise PermanentStepError(
            f"{document.source or 'the document'} holds {count} invoice(s); index {index} is "
            f"out of range (0..{count - 1})",
            reason="invalid_args",
        )
    invoice = document.invoices[index]
    if _is_foreign(invoice):
        where = f"{document.source}: " if document.source else ""
        raise PermanentStepError(
            f"{where}invoice {index}: {_foreign(invoice)}; it is not read",
            reason="wrong_namespace",
        )
    key = invoice_key(invoice)
    protocol = document.protocols.get(key) if key else None
    if protocol is None and count == 1 and len(document.protocols) == 1:
        protocol = next(iter(document.protocols.values()))
    return {
        "xml": invoice,
        "index": index,
        "count": count,
        "chNFe": key,
        "layout": invoice.get("versao"),
        "source": document.source,
        "sha256": document.sha256,
        "protocol": dict(protocol) if protocol is not None else None,
        "events": [dict(event) for event in document.events],
    }


# --- Running the stored plan on one file -------------------------------------------------

#: The stored plan's steps that parse the file, pick the invoice and build the record.
PARSE_STEP = 2
INVOICE_STEP = 3
RECORD_STEP = 9

_compiled: dict[
    tuple[int, int, str | None], tuple[Registry, WriteBoundary | None, CompiledPlan]
] = {}
_COMPILED_KEPT = 8
_default_registry: list[Registry] = []


def load_plan_text() -> str:
    """The stored plan (``plandag/extract/nfe/plan.json``) as shipped in the package."""
    return resources.files("plandag.extract.nfe").joinpath("plan.json").read_text("utf-8")


def _compiled_plan(
    registry: Registry, write_boundary: WriteBoundary | None, plan_text: str | None = None
) -> CompiledPlan:
    """The stored plan (or ``plan_text``) compiled against ``registry`` and
    ``write_boundary`` once; each run swaps in its params.

    Raises:
        PlanError: the plan does not compile against ``registry``.
    """
    digest = hashlib.sha256(plan_text.encode("utf-8")).hexdigest() if plan_text else None
    key = (id(registry), id(write_boundary), digest)
    cached = _compiled.get(key)
    if cached is not None and cached[0] is registry and cached[1] is write_boundary:
        return cached[2]
    from plandag.compiler import compile_plan

    plan = json.loads(plan_text if plan_text else load_plan_text())
    compiled = compile_plan(
        plan, registry, params={"input": "input.xml", "index": 0}, write_boundary=write_boundary
    )
    if len(_compiled) >= _COMPILED_KEPT:
        _compiled.pop(next(iter(_compiled)))
    _compiled[key] = (registry, write_boundary, compiled)
    return compiled


#: What a plan's step must be for :func:`extract_document` to take the input's bytes in its
#: place: ``read_file`` of ``<param.input>`` as bytes, within read_file's default size cap.
_READ_TOOL = "read_file"
_READ_ENCODINGS = frozenset({"binary", "bytes"})
_READ_MAX_BYTES = 50_000_000


def input_read_step(compiled: CompiledPlan) -> int | None:
    """The step of ``compiled`` that reads the input file's raw bytes, or None.

    That is a root step calling ``read_file`` with exactly ``{"path": "<param.input>",
    "encoding": "binary"}`` (or ``"bytes"``), the default size cap and no check: its result
    is the file's bytes and nothing else, so a caller that already holds them (a cluster
    worker, which has no access to the parent's files) may give them instead
    (``extract_document(..., data=...)``).
    """
    for step_id in compiled.roots:
        step = compiled.steps[step_id]
        args = step.step.args
        if (
            step.tool.name == _READ_TOOL
            and not step.checks
            and set(args) == {"path", "encoding"}
            and args["path"] == "<param.input>"
            and args["encoding"] in _READ_ENCODINGS
        ):
            return step_id
    return None


def takes_bytes(
    registry: Registry | None,
    write_boundary: WriteBoundary | None,
    plan_text: str | None,
    size: int,
) -> bool:
    """Whether :func:`extract_document` can take ``size`` bytes of an input instead of reading
    its path with these arguments (see :func:`input_read_step`): the plan reads its input
    with such a step and ``size`` is within ``read_file``'s default cap (larger inputs must
    be refused by ``read_file`` itself, as ``too_large``).

    Raises:
        PlanError: the plan does not compile against ``registry``.
    """
    compiled = _compiled_plan(_registry_or_default(registry), write_boundary, plan_text)
    return size <= _READ_MAX_BYTES and input_read_step(compiled) is not None


def _registry_or_default(registry: Registry | None) -> Registry:
    if registry is not None:
        return registry
    if not _default_registry:
        from plandag.tools.registry import default_registry

        _default_registry.append(default_registry())
    return _default_registry[0]


_estimates: dict[int, tuple[CompiledPlan, PlanEstimate]] = {}


def _plan_estimate(compiled: CompiledPlan) -> PlanEstimate:
    """:func:`plandag.scheduler.estimate.estimate_plan` of ``compiled``, once per plan."""
    cached = _estimates.get(id(compiled))
    if cached is not None and cached[0] is compiled:
        return cached[1]
    from plandag.scheduler.estimate import estimate_plan

    estimate = estimate_plan(compiled)
    if len(_estimates) >= _COMPILED_KEPT:
        _estimates.pop(next(iter(_estimates)))
    _estimates[id(compiled)] = (compiled, estimate)
    return estimate


# --- Repairs (plandag extract nfe --planner) ----------------------------------------------

#: The record step's checks: facts about the invoice's data. Their failure is the record's
#: ``check_failed`` status (a business outcome), never a reason to repair the plan.
BUSINESS_CHECKS: frozenset[str] = frozenset(
    {
        "nfe_key_check_digit",
        "nfe_key_matches_document",
        "nfe_cnpj_cpf_valid",
        "nfe_items_sum_vprod",
        "nfe_vnf_formula",
        "nfe_protocol_authorised",
    }
)

#: Step failure reasons that describe the input, not the plan: the file is not an invoice,
#: not XML, a template, in a foreign namespace, missing, not a regular file, unreadable or
#: too large. Such an input gets its error record; no repair is asked for.
INPUT_REFUSALS: frozenset[str] = frozenset(
    {
        "not_an_invoice",
        "invalid_xml",
        "template",
        "wrong_namespace",
        "missing_resource",
        "not_a_file",
        "io_error",
        "too_large",
    }
)


def nfe_needs_repair(session: RunSession, state: SessionState) -> bool:
    """The trigger of ``plandag extract nfe --planner``: whether a document's failed run is
    a plan failure that a repair may fix.

    A failed step (after its retries) triggers a repair when:

    * it failed with a tool error of any reason except :data:`INPUT_REFUSALS` (an
      ``invalid_xpath``, ``invalid_args``, ``decode_error``, ``timeout``, a tool raising);
    * or it failed its checks (``check_failed``) and at least one failing check is a
      structural one (any kind outside :data:`BUSINESS_CHECKS`: ``not_empty``, ``regex``,
      ``jmespath``... attached to a selection step, say, because a field path no longer
      matches).

    Never a trigger: the record step failing only its NF-e checks (``check_failed`` with
    business checks: the record's ``check_failed`` status), an input refused as unusable,
    a record whose required field is missing (the step succeeded; the record says
    ``error`` with ``missing_field``: the data's outcome unless a structural check on the
    selection makes it a step failure), a brake's stop, the cost cap.

    Args:
        session: the document's run.
        state: its settled state.

    Returns:
        True to ask for a repair.
    """
    for step_id, failure in state.failed.items():
        if failure.reason == "check_failed":
            record = session.records[step_id]
            if any(
                outcome.status == "fail" and outcome.kind not in BUSINESS_CHECKS
                for outcome in record.checks
            ):
                return True
            continue
        if failure.reason not in INPUT_REFUSALS:
            return True
    return False


def _outline(element: etree._Element, depth: int) -> Any:
    children = [child for child in element if isinstance(child.tag, str)]
    if depth <= 0 or not children:
        return _local_name(element)
    return {_local_name(element): [_outline(child, depth - 1) for child in children[:40]]}


def nfe_excerpt(path: Path, index: int) -> dict[str, Any]:
    """The relevant excerpt of an input for the replanner: the invoice's element outline
    (names three levels deep) and its XML (``ds:Signature`` left out), as data.

    Args:
        path: the input file.
        index: the invoice's position in the file.

    Returns:
        ``{"source", "invoice_index", "outline", "xml"}``; when the file cannot be parsed,
        ``{"source", "error", "head"}`` with its first 4000 bytes as text. The caller quotes
        it (and cuts it to its size cap).
    """
    try:
        data = path.read_bytes()
    except OSError as error:
        return {"source": display_name(path), "error": display_name(f"cannot read it: {error}")}
    try:
        document = parse_document(data, display_name(path))
        invoice = document.invoices[min(index, len(document.invoices) - 1)]
    except PermanentStepError as error:
        return {
            "source": display_name(path),
            "error": str(error),
            "head": data[:4000].decode("utf-8", "replace"),
        }
    copy = etree.fromstring(etree.tostring(invoice))
    for signature in copy.iter("{http://www.w3.org/2000/09/xmldsig#}Signature"):
        parent = signature.getparent()
        if parent is not None:
            parent.remove(signature)
    return {
        "source": display_name(path),
        "invoice_index": index,
        "outline": _outline(copy, 3),
        "xml": etree.tostring(copy, encoding="unicode"),
    }


def record_status(record: Mapping[str, Any]) -> str:
    """``error`` when the record has errors, else ``check_failed`` when a check failed, else
    ``ok`` (NFE.md, "Status"; ``not_applicable`` never fails a record)."""
    if record.get("errors"):
        return "error"
    checks = record.get("checks") or {}
    if any(outcome.get("status") == "fail" for outcome in checks.values()):
        return "check_failed"
    return "ok"


def error_record(source: str, sha256: str, code: str, message: str) -> dict[str, Any]:
    """The record of an unusable input: ``status: error`` with one reason.

    Args:
        source: the input's path. ``sha256``: hex digest of its bytes ("" when unreadable).
        code: ``not_an_invoice``, ``invalid_xml``, ``template``, ``io_error``...
        message: what the input is and why it cannot be used.

    Returns:
        A dict shaped like ``NfeRecord.model_dump()`` with empty invoice groups.
    """
    return {
        "source": source,
        "sha256": sha256,
        "status": "error",
        "errors": [{"code": code, "message": message}],
        "checks": {},
        "layout": None,
        "invoice_index": None,
        "ide": None,
        "emit": None,
        "dest": None,
        "items": [],
        "total": None,
        "protocol": None,
        "events": [],
    }


def _with_checks(record: Mapping[str, Any], outcomes: list[CheckOutcome]) -> dict[str, Any]:
    merged = dict(record)
    merged["checks"] = {
        outcome.kind.removeprefix("nfe_"): {"status": outcome.status, "detail": outcome.detail}
        for outcome in outcomes
    }
    merged["status"] = record_status(merged)
    return merged


def read_regular_file(path: Path) -> bytes:
    """The bytes of ``path`` when it is a regular file (or a link to one), read without
    ever waiting for a writer: it is opened without blocking (``O_NONBLOCK``), and what is
    not a regular file (a named pipe, a device, a folder) is not read.

    Raises:
        OSError: it cannot be opened or read, or it is not a regular file (``EINVAL``).
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    descriptor = os.open(path, flags)
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
        parts = []
        while part := os.read(descriptor, 1 << 20):
            parts.append(part)
        return b"".join(parts)
    finally:
        os.close(descriptor)


def file_sha256(path: Path) -> str:
    """The hex sha256 of the bytes of the regular file ``path`` (:func:`read_regular_file`),
    or "" when it cannot be read."""
    try:
        return hashlib.sha256(read_regular_file(path)).hexdigest()
    except OSError:
        return ""


def _failure(step: Any) -> tuple[str, str]:
    """``(code, message)`` of a failed or skipped step record."""
    code = step.reason or "tool_error"
    if step.error is not None:
        return code, str(step.error.message)
    return code, str(step.detail or f"step {step.id} {step.status}")


def _final_step(result: RunResult, tool: str, default: int) -> StepRecord | None:
    """The stored plan's step ``default``, or after a repair the last step of ``tool`` that
    was not superseded."""
    step = result.steps.get(default)
    if step is not None and step.superseded_by is None:
        return step
    candidates = [
        item
        for key, item in sorted(result.steps.items())
        if item.tool == tool and item.superseded_by is None
    ]
    return candidates[-1] if candidates else step


def _excerpt_for(path: Path, index: int) -> Callable[[RunSession, SessionState], Any]:
    """The excerpt callback of one invoice's run (read only when a repair is asked for)."""

    def excerpt(session: RunSession, state: SessionState) -> Any:
        return nfe_excerpt(path, index)

    return excerpt


def _repair_note(repaired: RepairedRun, model: str, saved: Path | None) -> dict[str, Any]:
    outcome = "repaired" if repaired.repaired else (repaired.gave_up or repaired.status)
    return {
        "outcome": outcome,
        "model": model,
        **repaired.summary(),
        "plan": saved.name if saved is not None else None,
    }


async def extract_document(
    path: Path,
    *,
    registry: Registry | None = None,
    write_boundary: WriteBoundary | None = None,
    run_options: Mapping[str, Any] | None = None,
    repairer: PlanRepairer | None = None,
    save_repairs: Path | None = None,
    plan_text: str | None = None,
    data: bytes | None = None,
) -> list[dict[str, Any]]:
    """Extract every invoice of one file through the stored plan.

    The plan runs for invoice 0, then once more for each further invoice of a file that
    holds several (an ``enviNFe`` batch); an invoice that fails (a foreign namespace:
    ``wrong_namespace``) gets its own error record, with its ``invoice_index`` when the file
    holds several, and the others are still extracted.

    With a ``repairer`` (``--planner``), each run is a run session
    (:func:`plandag.planner.repair.run_with_repairs`): it makes no model call unless a
    step fails in a way :func:`nfe_needs_repair` accepts; then the replanner sees the
    failure and :func:`nfe_excerpt` of this input (as quoted data), and its patch runs for
    this input only. A record whose run asked for a repair carries ``"repair"``:
    ``{"outcome": "repaired" | "max_replans" | "no_progress" | "budget" |
    "replanner_error" | status, "model", "replans", "model_calls", "reused", "gave_up",
    "replaced", "new_steps", "plan"}`` (``plan``: the saved plan file's name, with
    ``save_repairs``). A repair that worked is reused, with no model call, for a later
    input of the batch failing on the same steps (see :mod:`plandag.planner.repair`).

    Args:
        path: the input file; its string form becomes each record's ``source``.
        registry: tools and checks to run the plan with (default: the built-in registry,
            built once).
        write_boundary: where the plan's steps may write; ``extract`` gives the output
            file's folder (the stored plan itself writes nothing; a repaired plan may).
        run_options: keyword arguments for :func:`plandag.scheduler.run_plan` (``retry``,
            ``max_concurrency``, ``limits``, a ``budget`` shared by the batch, which also
            pays the repairs' model calls).
        repairer: the model side of repairs, or None (no model call, ever).
        save_repairs: a folder where each repaired plan that succeeded is written
            (:func:`plandag.planner.repair.save_repair`, name ``nfe``), or None.
        plan_text: another plan to run instead of the stored one (same params ``input``
            and ``index``, same step roles), or None.
        data: the input's bytes, already read (a cluster worker has no access to the
            parent's files): the plan's step that reads the input (:func:`input_read_step`)
            is not run and ends ``succeeded`` with these bytes, as a resumed step does, and
            ``path`` still names the input in records and messages. Only for plans that
            have such a step and bytes within its cap (:func:`takes_bytes`). None: the plan
            reads ``path``.

    Returns:
        One record dict per invoice, in file order (shape of ``NfeRecord``; ``checks`` keyed
        by the check's name without its ``nfe_`` prefix: ``key_check_digit``,
        ``key_matches_document``, ``cnpj_cpf_valid``, ``items_sum_vprod``,
        ``vnf_formula``, ``protocol_authorised``); or a single error record (``status:
        error``, ``errors: [{code, message}]``, the SHA-256 of the bytes, "" when unreadable)
        when the file cannot be read or is not an invoice. Codes: the failing step's reason
        (``not_an_invoice``, ``invalid_xml``, ``template``, ``io_error``...).

    Raises:
        PlanError: the stored plan does not compile against ``registry`` (a packaging bug).
        OSError: a repaired plan cannot be written into ``save_repairs``.
        ValueError: ``data`` given for a plan that cannot take it (see :func:`takes_bytes`),
            or with a ``repairer``.
    """
    from plandag.scheduler import run_plan

    registry = _registry_or_default(registry)
    compiled = _compiled_plan(registry, write_boundary, plan_text)
    given: dict[int, Any] | None = None
    if data is not None:
        read_step = input_read_step(compiled)
        if read_step is None or len(data) > _READ_MAX_BYTES or repairer is not None:
            raise ValueError(
                "extract_document: data given for a plan that does not read its input's "
                "bytes in one read_file step (or too large, or with a repairer); give the path"
            )
        given = {read_step: data}
    source = str(path)
    records: list[dict[str, Any]] = []
    index = 0
    count = 1
    sha256 = ""
    while index < count:
        run = dataclasses.replace(compiled, params={"input": source, "index": index})
        note: dict[str, Any] | None = None
        if repairer is None:
            options = dict(run_options or {})
            # The stored plan's estimate (for the plan-relative limits) is the same for every
            # document: computed once per compiled plan rather than once per run.
            if "tool_durations" not in options:
                options.setdefault("plan_estimate", _plan_estimate(compiled))
            if given is not None:
                options["completed"] = given
            result = await run_plan(run, **options)
        else:
            from plandag.planner.repair import run_with_repairs, save_repair

            repaired = await run_with_repairs(
                run,
                registry,
                repairer=repairer,
                trigger=nfe_needs_repair,
                excerpt=_excerpt_for(path, index),
                **{k: v for k, v in (run_options or {}).items() if k != "escape_results"},
            )
            result = repaired.run
            if repaired.triggered:
                saved = (
                    save_repair(
                        save_repairs,
                        "nfe",
                        repaired,
                        source=display_name(source),
                        model=repairer.model,
                    )
                    if save_repairs is not None
                    else None
                )
                note = _repair_note(repaired, repairer.model, saved)
        if index == 0:
            parse_step = _final_step(result, "nfe_parse", PARSE_STEP)
            if (
                parse_step is not None
                and parse_step.status == "succeeded"
                and isinstance(parse_step.result, NfeDocument)
            ):
                count = len(parse_step.result.invoices)
                sha256 = parse_step.result.sha256
        record_step = _final_step(result, "nfe_record", RECORD_STEP)
        if (
            record_step is not None
            and isinstance(record_step.result, Mapping)
            and record_step.status in ("succeeded", "failed")
        ):
            record = _with_checks(record_step.result, list(record_step.checks))
        else:
            failed = [result.steps[key] for key in sorted(result.steps)]
            culprit = next(
                (step for step in failed if step.status == "failed"),
                record_step if record_step is not None else failed[-1],
            )
            code, message = _failure(culprit)
            if not sha256:  # the file was not read or not parsed: one record for it
                digest = hashlib.sha256(data).hexdigest() if data is not None else ""
                record = error_record(source, digest or file_sha256(path), code, message)
                if note is not None:
                    record["repair"] = note
                return [record]
            record = error_record(source, sha256, code, message)
            if count > 1:
                record["invoice_index"] = index
        if note is not None:
            record["repair"] = note
        records.append(record)
        index += 1
    return records
