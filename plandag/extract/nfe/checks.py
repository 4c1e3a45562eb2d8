"""The NF-e checks (NFE.md, "Checks"): facts computed on one extraction record.

Each check takes the record dict that the ``nfe_record`` tool returns (the shape of
:class:`~plandag.extract.nfe.record.NfeRecord`) and returns a
:class:`~plandag.checks.base.CheckOutcome`: ``pass``, ``fail`` or ``not_applicable`` with a
detail naming the values compared. Money is computed with :class:`~decimal.Decimal` from
the XML's strings, never with float. ``unique_in_batch`` belongs to the batch driver.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from plandag.checks.base import CheckDefinition, CheckOutcome, check
from plandag.extract.nfe.validators import (
    ACCESS_KEY_PATTERN,
    decompose_key,
    mod11_digit,
    parse_decimal,
    valid_cnpj,
    valid_cpf,
)

__all__ = [
    "AUTHORISED_STATUSES",
    "CANCELLATION_EVENTS",
    "CANCELLATION_EVENT_STATUSES",
    "CANCELLED_STATUSES",
    "DENIED_STATUSES",
    "NFE_CHECKS",
    "TOLERANCE",
    "nfe_cnpj_cpf_valid",
    "nfe_items_sum_vprod",
    "nfe_key_check_digit",
    "nfe_key_matches_document",
    "nfe_protocol_authorised",
    "nfe_vnf_formula",
]

#: ± 0.01 (one centavo), inclusive, for sums of money (NFE.md).
TOLERANCE = Decimal("0.01")
#: 100 "Autorizado o uso da NF-e", 150 "... autorizado fora de prazo" (MOC 7.0, Anexo IV).
AUTHORISED_STATUSES = frozenset({"100", "150"})
#: 110 "Uso denegado", 301/302/303 denial by the emitter's / recipient's tax situation.
DENIED_STATUSES = frozenset({"110", "301", "302", "303"})
#: 101 "Cancelamento de NF-e homologado", 151 "... fora de prazo" (MOC 7.0, Anexo IV).
CANCELLED_STATUSES = frozenset({"101", "151"})
#: 110111 cancellation, 110112 NFC-e cancellation by substitution (MOC 7.0 event notes).
CANCELLATION_EVENTS = frozenset({"110111", "110112"})
#: 135 "Evento registrado e vinculado a NF-e", 136 "... não vinculado", 155 "Cancelamento
#: homologado fora de prazo".
CANCELLATION_EVENT_STATUSES = frozenset({"135", "136", "155"})
_BRAZIL = "1058"


def _group(record: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = record.get(name)
    return value if type(value) is dict or isinstance(value, Mapping) else {}


def _text(group: Mapping[str, Any], name: str) -> str | None:
    value = group.get(name)
    if value is None:
        return None
    text = (value if type(value) is str else str(value)).strip()
    return text or None


def _money(group: Mapping[str, Any], name: str) -> Decimal:
    """The decimal at ``name`` (0 when absent); ValueError when present but not a decimal."""
    value = group.get(name)
    if value is None:
        return Decimal(0)
    parsed = parse_decimal(value)
    if parsed is None:
        raise ValueError(f"{name}={value!r} is not a decimal")
    return parsed


def _outcome(kind: str, ok: bool, detail: str) -> CheckOutcome:
    return CheckOutcome(kind, "pass" if ok else "fail", detail)


@check
def nfe_key_check_digit(result: Mapping[str, Any]) -> CheckOutcome:
    """The access key's 44th digit is the mod-11 check digit of its first 43 characters.

    Source: MOC 7.0, Anexo I, 5.4.1 (weights 2..9 from the right; remainder 0 or 1 gives 0);
    NT 2025.001 for an alphanumeric CNPJ in the key (each character worth ASCII − 48).
    """
    kind = "nfe_key_check_digit"
    key = _text(_group(result, "ide"), "chNFe")
    if key is None:
        return CheckOutcome(kind, "fail", "the invoice has no access key (infNFe/@Id)")
    if not ACCESS_KEY_PATTERN.fullmatch(key):
        return CheckOutcome(kind, "fail", f"access key {key!r} is not 44 characters 0-9/A-Z")
    expected = mod11_digit(key[:43])
    if int(key[43]) == expected:
        return CheckOutcome(kind, "pass", f"check digit {expected} is right")
    return CheckOutcome(
        kind, "fail", f"key ends in {key[43]} but its mod-11 check digit is {expected}"
    )


def _key_emitter(emit: Mapping[str, Any]) -> str | None:
    cnpj = _text(emit, "CNPJ")
    if cnpj is not None:
        return cnpj
    cpf = _text(emit, "CPF")
    return f"000{cpf}" if cpf is not None else None


def _year_month(issue: str | None) -> str | None:
    """``AAMM`` from the issue date's own local date (``2018-08-28T...`` → ``1808``)."""
    if issue is None or len(issue) < 7 or issue[4] != "-":
        return None
    return issue[2:4] + issue[5:7]


def _padded(value: str | None, width: int) -> str | None:
    if value is None:
        return None
    return value.zfill(width) if value.isdigit() else value


@check
def nfe_key_matches_document(result: Mapping[str, Any]) -> CheckOutcome:
    """The access key's fields equal the document's: cUF, year-month of issue (dhEmi's own
    local date), emitter CNPJ (``000`` + CPF for an individual), model, series, number,
    tpEmis, cNF and cDV.

    Source: MOC 7.0, Anexo I, 5.4 (composition of the access key); the series is zero-padded
    to 3 digits, the number to 9 and cNF to 8, as the key writes them.
    """
    kind = "nfe_key_matches_document"
    ide = _group(result, "ide")
    key = _text(ide, "chNFe")
    if key is None or not ACCESS_KEY_PATTERN.fullmatch(key):
        return CheckOutcome(kind, "fail", f"no well-formed access key to compare ({key!r})")
    parts = decompose_key(key)
    document = {
        "cUF": _padded(_text(ide, "cUF"), 2),
        "AAMM": _year_month(_text(ide, "dhEmi")),
        "CNPJ": _key_emitter(_group(result, "emit")),
        "mod": _padded(_text(ide, "mod"), 2),
        "serie": _padded(_text(ide, "serie"), 3),
        "nNF": _padded(_text(ide, "nNF"), 9),
        "tpEmis": _text(ide, "tpEmis"),
        "cNF": _padded(_text(ide, "cNF"), 8),
        "cDV": _text(ide, "cDV"),
    }
    mismatches = [
        f"{name}: key {parts[name]}, document {value if value is not None else 'missing'}"
        for name, value in document.items()
        if value != parts[name]
    ]
    if mismatches:
        return CheckOutcome(kind, "fail", "; ".join(mismatches))
    return CheckOutcome(kind, "pass", "cUF, AAMM, CNPJ/CPF, mod, serie, nNF, tpEmis, cNF, cDV")


def _document_problem(role: str, group: Mapping[str, Any]) -> tuple[str, bool] | None:
    cnpj = _text(group, "CNPJ")
    if cnpj is not None:
        ok = valid_cnpj(cnpj)
        return f"{role} CNPJ {cnpj} {'valid' if ok else 'invalid'}", ok
    cpf = _text(group, "CPF")
    if cpf is not None:
        ok = valid_cpf(cpf)
        return f"{role} CPF {cpf} {'valid' if ok else 'invalid'}", ok
    return None


@check
def nfe_cnpj_cpf_valid(result: Mapping[str, Any]) -> CheckOutcome:
    """The emitter's and the recipient's CNPJ or CPF have the right check digits.

    Numeric and alphanumeric CNPJ (NT 2025.001) and CPF (Receita Federal rules; see
    :mod:`plandag.extract.nfe.validators`). A recipient identified by ``idEstrangeiro``, or
    none (NFC-e), has nothing to check.
    """
    kind = "nfe_cnpj_cpf_valid"
    emitter = _document_problem("emitter", _group(result, "emit"))
    if emitter is None:
        return CheckOutcome(kind, "fail", "the emitter has no CNPJ or CPF")
    findings = [emitter]
    recipient = _document_problem("recipient", _group(result, "dest"))
    if recipient is not None:
        findings.append(recipient)
    detail = "; ".join(text for text, _ in findings)
    if recipient is None:
        detail += "; recipient has no CNPJ/CPF to check"
    return _outcome(kind, all(ok for _, ok in findings), detail)


def _items(result: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    items = result.get("items")
    if not isinstance(items, list):
        return []
    return [item for item in items if type(item) is dict or isinstance(item, Mapping)]


@check
def nfe_items_sum_vprod(result: Mapping[str, Any]) -> CheckOutcome:
    """The sum of ``vProd`` over items with ``indTot = 1`` equals ``ICMSTot/vProd`` (± 0.01).

    Source: MOC 7.0, rule W07-10 ("total dos produtos" = sum of the items' vProd with
    indTot = 1). An item without ``indTot`` (layouts before 2.00) counts as 1.
    """
    kind = "nfe_items_sum_vprod"
    total = _group(result, "total")
    declared = parse_decimal(total.get("vProd"))
    if declared is None:
        return CheckOutcome(kind, "fail", f"total.vProd {total.get('vProd')!r} is not a decimal")
    summed = Decimal(0)
    counted = 0
    for item in _items(result):
        if (_text(item, "indTot") or "1") != "1":
            continue
        value = parse_decimal(item.get("vProd"))
        if value is None:
            number = item.get("nItem")
            return CheckOutcome(
                kind, "fail", f"item {number}: vProd {item.get('vProd')!r} is not a decimal"
            )
        summed += value
        counted += 1
    difference = summed - declared
    detail = f"sum of {counted} item(s) {summed} vs total.vProd {declared}"
    if abs(difference) > TOLERANCE:
        detail += f" (difference {difference})"
    return _outcome(kind, abs(difference) <= TOLERANCE, detail)


def _is_foreign(dest: Mapping[str, Any]) -> bool:
    if _text(dest, "idEstrangeiro") is not None or _text(dest, "UF") == "EX":
        return True
    country = _text(dest, "cPais")
    return country is not None and country.lstrip("0") != _BRAZIL


def _relief_subtracted(
    total: Mapping[str, Any], items: Sequence[Mapping[str, Any]]
) -> tuple[Decimal, str]:
    """vICMSDeson to subtract: per NT 2023.004, where items carry ``indDeduzDeson`` only the
    relief of items with ``indDeduzDeson = 1``; otherwise ``ICMSTot/vICMSDeson``."""
    flagged = [item for item in items if _text(item, "indDeduzDeson") is not None]
    if not flagged:
        return _money(total, "vICMSDeson"), "vICMSDeson"
    relief = sum(
        (_money(item, "vICMSDeson") for item in flagged if _text(item, "indDeduzDeson") == "1"),
        Decimal(0),
    )
    return relief, "vICMSDeson(indDeduzDeson=1)"


def _flagged_sum(items: Sequence[Mapping[str, Any]], value: str, flag: str) -> Decimal:
    return sum(
        (_money(item, value) for item in items if _text(item, flag) == "1"),
        Decimal(0),
    )


@check
def nfe_vnf_formula(result: Mapping[str, Any]) -> CheckOutcome:
    """``vNF`` equals the NF-e layout manual's total formula, within ± 0.01.

    The formula::

        vNF = vProd − vDesc − vICMSDeson + vST + vFCPST + vFrete + vSeg + vOutro + vII
              + vIPI + vIPIDevol + vServ (ISSQNtot) + vICMSMonoReten
              + vPIS of PISST where indSomaPISST = 1 + vCOFINS of COFINSST where
              indSomaCOFINSST = 1

    Sources: MOC 7.0, Anexo I, ICMSTot/vNF (W16) and rule W16-10 (rejection 610); NT
    2016.002 (vFCPST, vIPIDevol); NT 2020.005 (indSomaPISST, indSomaCOFINSST); NT 2023.001
    (vICMSMonoReten); NT 2023.004 (indDeduzDeson: where items carry it, only their relief
    with indDeduzDeson = 1 is subtracted).

    An import (tpNF = 0 from a foreign party) that fails the formula but satisfies it
    without vII passes with a note: SEFAZ authorises such invoices. ``vNFTot`` (tax reform)
    is a different total and never replaces vNF.
    """
    kind = "nfe_vnf_formula"
    total = _group(result, "total")
    items = _items(result)
    declared = parse_decimal(total.get("vNF"))
    if declared is None:
        return CheckOutcome(kind, "fail", f"total.vNF {total.get('vNF')!r} is not a decimal")
    try:
        relief, relief_name = _relief_subtracted(total, items)
        terms: list[tuple[str, Decimal]] = [
            ("vProd", _money(total, "vProd")),
            ("-vDesc", -_money(total, "vDesc")),
            (f"-{relief_name}", -relief),
            ("vST", _money(total, "vST")),
            ("vFCPST", _money(total, "vFCPST")),
            ("vFrete", _money(total, "vFrete")),
            ("vSeg", _money(total, "vSeg")),
            ("vOutro", _money(total, "vOutro")),
            ("vII", _money(total, "vII")),
            ("vIPI", _money(total, "vIPI")),
            ("vIPIDevol", _money(total, "vIPIDevol")),
            ("vServ", _money(total, "vServ")),
            ("vICMSMonoReten", _money(total, "vICMSMonoReten")),
            ("vPISST", _flagged_sum(items, "vPISST", "indSomaPISST")),
            ("vCOFINSST", _flagged_sum(items, "vCOFINSST", "indSomaCOFINSST")),
        ]
    except ValueError as error:
        return CheckOutcome(kind, "fail", f"cannot compute the formula: {error}")
    computed = sum((value for _, value in terms), Decimal(0))
    used = " ".join(f"{name}={value}" for name, value in terms if value)
    if abs(computed - declared) <= TOLERANCE:
        return CheckOutcome(kind, "pass", f"vNF {declared} = {computed} ({used})")
    ii = dict(terms)["vII"]
    ide = _group(result, "ide")
    if (
        ii
        and _text(ide, "tpNF") == "0"
        and _is_foreign(_group(result, "dest"))
        and abs(computed - ii - declared) <= TOLERANCE
    ):
        return CheckOutcome(
            kind,
            "pass",
            f"vNF {declared} = {computed - ii} without vII {ii}: an import from a foreign "
            "party whose vNF leaves out the import tax, as SEFAZ authorises",
        )
    return CheckOutcome(
        kind,
        "fail",
        f"vNF {declared} but the formula gives {computed} (difference {declared - computed}; "
        f"{used})",
    )


def _cancellation(result: Mapping[str, Any], key: str | None) -> Mapping[str, Any] | None:
    events = result.get("events")
    if not isinstance(events, list) or key is None:
        return None
    for event in events:
        if not isinstance(event, Mapping):
            continue
        if (
            _text(event, "chNFe") == key
            and _text(event, "tpEvento") in CANCELLATION_EVENTS
            and _text(event, "cStat") in CANCELLATION_EVENT_STATUSES
        ):
            return event
    return None


@check
def nfe_protocol_authorised(result: Mapping[str, Any]) -> CheckOutcome:
    """The invoice was authorised and not cancelled.

    cStat 100 or 150 pass; 110, 301, 302, 303 fail as denied; 101 and 151 fail as cancelled;
    any other status fails with its reason. A cancellation event for this key in the same
    file (110111, or 110112 for an NFC-e cancelled by substitution, with event cStat 135, 136
    or 155) fails as cancelled. No protocol (an offline-contingency NFC-e, an unsent file)
    is ``not_applicable``. Source: MOC 7.0, Anexo IV (status codes) and the event notes.
    """
    kind = "nfe_protocol_authorised"
    key = _text(_group(result, "ide"), "chNFe")
    event = _cancellation(result, key)
    if event is not None:
        protocol_number = _text(event, "nProt") or "no protocol number"
        return CheckOutcome(
            kind,
            "fail",
            f"cancelled: event {_text(event, 'tpEvento')} with cStat {_text(event, 'cStat')} "
            f"({protocol_number}) in the same file",
        )
    protocol = result.get("protocol")
    if not isinstance(protocol, Mapping):
        return CheckOutcome(kind, "not_applicable", "no authorisation protocol in the file")
    status = _text(protocol, "cStat")
    reason = _text(protocol, "xMotivo") or ""
    answered = _text(protocol, "chNFe")
    if answered is not None and key is not None and answered != key:
        return CheckOutcome(kind, "fail", f"the protocol answers key {answered}, not {key}")
    if status in AUTHORISED_STATUSES:
        return CheckOutcome(
            kind, "pass", f"cStat {status} {reason} (nProt {_text(protocol, 'nProt')})".strip()
        )
    if status in DENIED_STATUSES:
        return CheckOutcome(kind, "fail", f"denied: cStat {status} {reason}".strip())
    if status in CANCELLED_STATUSES:
        return CheckOutcome(kind, "fail", f"cancelled: cStat {status} {reason}".strip())
    return CheckOutcome(kind, "fail", f"not authorised: cStat {status} {reason}".strip())


NFE_CHECKS: tuple[CheckDefinition, ...] = (
    nfe_key_check_digit,
    nfe_key_matches_document,
    nfe_cnpj_cpf_valid,
    nfe_items_sum_vprod,
    nfe_vnf_formula,
    nfe_protocol_authorised,
)
