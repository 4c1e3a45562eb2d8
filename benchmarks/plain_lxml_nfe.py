"""The baseline NF-e extractor: plain lxml code, no plan, no scheduler, no checks.

It reads the same fields as plandag's stored plan (``plandag/extract/nfe/plan.json``, the
record of ``NFE.md``): ``ide``, ``emit``, ``dest``, ``items`` (with the per-item tax values
that enter vNF), ``total``, ``protocol`` and ``events``, by the same full XPath paths,
precompiled with :class:`lxml.etree.XPath`, from a document parsed by the same hardened
parser settings. Each value is the first match's text, stripped (None when absent or
empty). No validation, no status, no checks: what careful code written by hand for one job
would do. The NF-e namespace is ``http://www.portalfiscal.inf.br/nfe`` (MOC 7.0, Anexo I).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lxml import etree

__all__ = ["FIELD_PATHS", "extract_bytes", "extract_file"]

_NAMESPACES = {"nfe": "http://www.portalfiscal.inf.br/nfe"}

#: Per group, the field name and its XPath relative to ``infNFe`` (``items``: to ``det``).
FIELD_PATHS: Mapping[str, Mapping[str, str]] = {
    "ide": {
        "Id": "@Id",
        "versao": "@versao",
        "cUF": "nfe:ide/nfe:cUF",
        "cNF": "nfe:ide/nfe:cNF",
        "mod": "nfe:ide/nfe:mod",
        "serie": "nfe:ide/nfe:serie",
        "nNF": "nfe:ide/nfe:nNF",
        "dhEmi": "nfe:ide/nfe:dhEmi",
        "dEmi": "nfe:ide/nfe:dEmi",
        "tpNF": "nfe:ide/nfe:tpNF",
        "tpAmb": "nfe:ide/nfe:tpAmb",
        "finNFe": "nfe:ide/nfe:finNFe",
        "tpEmis": "nfe:ide/nfe:tpEmis",
        "cDV": "nfe:ide/nfe:cDV",
    },
    "emit": {
        "CNPJ": "nfe:emit/nfe:CNPJ",
        "CPF": "nfe:emit/nfe:CPF",
        "xNome": "nfe:emit/nfe:xNome",
        "IE": "nfe:emit/nfe:IE",
        "UF": "nfe:emit/nfe:enderEmit/nfe:UF",
    },
    "dest": {
        "CNPJ": "nfe:dest/nfe:CNPJ",
        "CPF": "nfe:dest/nfe:CPF",
        "idEstrangeiro": "nfe:dest/nfe:idEstrangeiro",
        "xNome": "nfe:dest/nfe:xNome",
        "UF": "nfe:dest/nfe:enderDest/nfe:UF",
        "cPais": "nfe:dest/nfe:enderDest/nfe:cPais",
    },
    "items": {
        "nItem": "@nItem",
        "cProd": "nfe:prod/nfe:cProd",
        "xProd": "nfe:prod/nfe:xProd",
        "NCM": "nfe:prod/nfe:NCM",
        "CFOP": "nfe:prod/nfe:CFOP",
        "qCom": "nfe:prod/nfe:qCom",
        "vUnCom": "nfe:prod/nfe:vUnCom",
        "vProd": "nfe:prod/nfe:vProd",
        "indTot": "nfe:prod/nfe:indTot",
        "vDesc": "nfe:prod/nfe:vDesc",
        "vICMSDeson": "nfe:imposto/nfe:ICMS/*/nfe:vICMSDeson",
        "indDeduzDeson": "nfe:imposto/nfe:ICMS/*/nfe:indDeduzDeson",
        "vPISST": "nfe:imposto/nfe:PISST/nfe:vPIS",
        "indSomaPISST": "nfe:imposto/nfe:PISST/nfe:indSomaPISST",
        "vCOFINSST": "nfe:imposto/nfe:COFINSST/nfe:vCOFINS",
        "indSomaCOFINSST": "nfe:imposto/nfe:COFINSST/nfe:indSomaCOFINSST",
    },
    "total": {
        name: f"nfe:total/nfe:ICMSTot/nfe:{name}"
        for name in (
            *("vProd", "vDesc", "vFrete", "vSeg", "vOutro", "vST", "vFCP", "vFCPST", "vIPI"),
            *("vIPIDevol", "vII", "vICMS", "vICMSDeson", "vICMSMonoReten", "vPIS", "vCOFINS"),
            "vNF",
        )
    }
    | {"vServ": "nfe:total/nfe:ISSQNtot/nfe:vServ", "vNFTot": "nfe:total/nfe:vNFTot"},
}

_INVOICES = etree.XPath("//nfe:infNFe", namespaces=_NAMESPACES)
_DETAILS = etree.XPath("nfe:det", namespaces=_NAMESPACES)
_HAS_DEST = etree.XPath("boolean(nfe:dest)", namespaces=_NAMESPACES)
# protNFe is sometimes written in no namespace, and events sit outside the invoice.
_PROTOCOLS = etree.XPath("//*[local-name()='protNFe']/*[local-name()='infProt']")
_EVENTS = etree.XPath("//*[local-name()='retEvento']/*[local-name()='infEvento']")
_PROTOCOL_FIELDS = ("chNFe", "cStat", "xMotivo", "nProt", "dhRecbto")
_EVENT_FIELDS = ("chNFe", "tpEvento", "cStat", "nProt", "xEvento")

_COMPILED: dict[str, dict[str, Callable[[etree._Element], Any]]] = {
    group: {
        name: etree.XPath(path, namespaces=_NAMESPACES, smart_strings=False)
        for name, path in paths.items()
    }
    for group, paths in FIELD_PATHS.items()
}

_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)


def _elements(select: etree.XPath, node: etree._Element) -> list[etree._Element]:
    """What an element-selecting XPath returns, typed as the element list it is."""
    found: Any = select(node)
    return list(found)


def _first_text(found: Any) -> str | None:
    """The stripped text of the first match (element or attribute value), None if none."""
    if not found:
        return None
    first = found[0]
    text = first if isinstance(first, str) else first.text
    if text is None:
        return None
    text = text.strip()
    return text or None


def _group(
    element: etree._Element, selectors: Mapping[str, Callable[[etree._Element], Any]]
) -> dict[str, str | None]:
    return {name: _first_text(select(element)) for name, select in selectors.items()}


def _children_texts(element: etree._Element, names: tuple[str, ...]) -> dict[str, str | None]:
    """Text of ``element``'s children named ``names``, whatever their namespace."""
    values: dict[str, str | None] = dict.fromkeys(names)
    for child in element:
        tag = child.tag
        if isinstance(tag, str):
            name = tag.rpartition("}")[2]
            if name in values and values[name] is None:
                values[name] = (child.text or "").strip() or None
    return values


def extract_bytes(data: bytes, source: str = "") -> list[dict[str, Any]]:
    """Extract every invoice of one NF-e file's bytes.

    Args:
        data: the file's bytes (the parser honours the BOM and encoding declaration).
        source: the input's name, copied into each record.

    Returns:
        One dict per ``infNFe`` in document order: ``source``, ``sha256``, ``ide`` (with
        ``chNFe`` from ``Id`` less its ``NFe`` prefix), ``emit``, ``dest`` (None when the
        invoice has none), ``items`` (a list), ``total``, ``protocol`` (the ``infProt`` whose
        ``chNFe`` is the invoice's key, else the file's only protocol, else None) and
        ``events`` (every answered event in the file); values are strings or None. An
        input without invoices gives an empty list.

    Raises:
        lxml.etree.XMLSyntaxError: the bytes are not well-formed XML.
    """
    root = etree.fromstring(data, _PARSER)
    sha256 = hashlib.sha256(data).hexdigest()
    protocols: dict[str | None, dict[str, str | None]] = {}
    for info in _elements(_PROTOCOLS, root):
        fields = _children_texts(info, _PROTOCOL_FIELDS)
        protocols.setdefault(fields["chNFe"], fields)
    events = [_children_texts(info, _EVENT_FIELDS) for info in _elements(_EVENTS, root)]
    invoices = _elements(_INVOICES, root)
    # One invoice and one protocol for another key: attach it anyway, as plandag does.
    lone = len(invoices) == 1 and len(protocols) == 1
    lone_protocol = next(iter(protocols.values())) if lone else None
    records = []
    for invoice in invoices:
        ide = _group(invoice, _COMPILED["ide"])
        identifier = ide["Id"] or ""
        key = identifier[3:] if identifier.startswith("NFe") else identifier
        ide["chNFe"] = key or None
        records.append(
            {
                "source": source,
                "sha256": sha256,
                "ide": ide,
                "emit": _group(invoice, _COMPILED["emit"]),
                "dest": _group(invoice, _COMPILED["dest"]) if _HAS_DEST(invoice) else None,
                "items": [_group(det, _COMPILED["items"]) for det in _elements(_DETAILS, invoice)],
                "total": _group(invoice, _COMPILED["total"]),
                "protocol": protocols.get(key, lone_protocol),
                "events": events,
            }
        )
    return records


def extract_file(path: Path) -> list[dict[str, Any]]:
    """:func:`extract_bytes` on a file read from disk, its path as ``source``.

    Raises:
        OSError: the file cannot be read.
        lxml.etree.XMLSyntaxError: it is not well-formed XML.
    """
    return extract_bytes(path.read_bytes(), str(path))
