"""The NF-e / NFC-e extraction record: one per invoice, one error record per unusable input.

The fields mirror the layout's own names (MOC 7.0, Anexo I) and NFE.md "The record". Money
and quantities are decimal strings exactly as written in the XML; codes (CFOP, NCM, CNPJ,
cStat) are strings. A value absent from the invoice is ``null``. ``plandag schema nfe``
prints :func:`nfe_record_json_schema`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CheckResult",
    "Dest",
    "Emit",
    "Event",
    "Ide",
    "Item",
    "NfeRecord",
    "Protocol",
    "RecordError",
    "RecordStatus",
    "Total",
    "nfe_record_json_schema",
]

RecordStatus = Literal["ok", "check_failed", "error"]


class _Group(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RecordError(_Group):
    """Why a record is an error: a stable ``code`` (``not_an_invoice``, ``invalid_xml``,
    ``template``, ``missing_field``, ``invalid_field``...) and a message naming the field or
    the file's kind."""

    code: str
    message: str


class CheckResult(_Group):
    """One check's outcome on the record; ``not_applicable`` never fails a record."""

    status: Literal["pass", "fail", "not_applicable"]
    detail: str = ""


class Ide(_Group):
    """Identification (group B, ``ide``) plus the access key taken from ``infNFe/@Id``.

    ``dhEmi`` is ISO 8601 with the document's own offset, never converted; a layout that
    only has ``dEmi`` gives that date. ``cNF`` and ``cDV`` are kept to compare with the key.
    """

    chNFe: str | None = Field(None, description="Access key: infNFe/@Id without 'NFe'.")
    cUF: str | None = None
    cNF: str | None = None
    mod: str | None = Field(None, description="55 = NF-e, 65 = NFC-e.")
    serie: str | None = None
    nNF: str | None = None
    dhEmi: str | None = Field(None, description="ISO 8601, the document's own offset.")
    tpNF: str | None = Field(None, description="0 = entry (entrada), 1 = exit (saída).")
    tpAmb: str | None = Field(None, description="1 = production, 2 = test environment.")
    finNFe: str | None = None
    tpEmis: str | None = None
    cDV: str | None = None


class Emit(_Group):
    """The emitter (group C, ``emit``)."""

    CNPJ: str | None = None
    CPF: str | None = None
    xNome: str | None = None
    IE: str | None = None
    UF: str | None = None


class Dest(_Group):
    """The recipient (group E, ``dest``); ``UF``/``cPais`` come from ``enderDest`` if any."""

    CNPJ: str | None = None
    CPF: str | None = None
    idEstrangeiro: str | None = None
    xNome: str | None = None
    UF: str | None = None
    cPais: str | None = None


class Item(_Group):
    """One ``det``: product fields (group I, ``prod``) and the tax values that enter vNF.

    ``vICMSDeson``/``indDeduzDeson`` come from the item's ICMS group (NT 2023.004),
    ``vPISST``/``indSomaPISST`` and ``vCOFINSST``/``indSomaCOFINSST`` from its PISST and
    COFINSST groups (NT 2020.005).
    """

    nItem: str | None = None
    cProd: str | None = None
    xProd: str | None = None
    NCM: str | None = None
    CFOP: str | None = None
    qCom: str | None = None
    vUnCom: str | None = None
    vProd: str | None = None
    indTot: str | None = Field(None, description="1 = vProd enters ICMSTot/vProd.")
    vDesc: str | None = None
    vICMSDeson: str | None = None
    indDeduzDeson: str | None = None
    vPISST: str | None = None
    indSomaPISST: str | None = None
    vCOFINSST: str | None = None
    indSomaCOFINSST: str | None = None


class Total(_Group):
    """Totals: ``ICMSTot`` (group W02), ``ISSQNtot/vServ`` (W17) and ``vNFTot`` (tax reform).

    ``vNFTot`` is the tax reform's total beside ``vNF``; it never replaces it.
    """

    vProd: str | None = None
    vDesc: str | None = None
    vFrete: str | None = None
    vSeg: str | None = None
    vOutro: str | None = None
    vST: str | None = None
    vFCP: str | None = None
    vFCPST: str | None = None
    vIPI: str | None = None
    vIPIDevol: str | None = None
    vII: str | None = None
    vICMS: str | None = None
    vICMSDeson: str | None = None
    vICMSMonoReten: str | None = None
    vPIS: str | None = None
    vCOFINS: str | None = None
    vNF: str | None = None
    vServ: str | None = Field(None, description="ISSQNtot/vServ: services under ISSQN.")
    vNFTot: str | None = None


class Protocol(_Group):
    """The authorisation protocol (``protNFe/infProt``) matching the invoice's key."""

    cStat: str | None = None
    xMotivo: str | None = None
    nProt: str | None = None
    dhRecbto: str | None = None
    chNFe: str | None = None


class Event(_Group):
    """An event found in the same file (``retEvento`` or ``evento``): type and status."""

    tpEvento: str | None = None
    cStat: str | None = Field(None, description="Event status; null for an unanswered request.")
    chNFe: str | None = None
    nProt: str | None = None
    description: str | None = None


class NfeRecord(_Group):
    """One invoice's record (or one error record for an unusable input). See NFE.md."""

    source: str = Field(description="The input path as given.")
    sha256: str = Field(description="SHA-256 of the input file's bytes, hex.")
    status: RecordStatus
    errors: list[RecordError] = Field(default_factory=list)
    checks: dict[str, CheckResult] = Field(default_factory=dict)
    layout: str | None = Field(None, description="infNFe/@versao: '3.10' or '4.00'.")
    invoice_index: int | None = Field(None, description="0-based position in the file.")
    ide: Ide | None = None
    emit: Emit | None = None
    dest: Dest | None = None
    items: list[Item] = Field(default_factory=list)
    total: Total | None = None
    protocol: Protocol | None = None
    events: list[Event] = Field(default_factory=list)
    repair: dict[str, Any] | None = Field(
        None,
        description="With --planner, when this input's run asked a model for a repair: its "
        "outcome (repaired or why it gave up), model, calls, replaced and new steps.",
    )


def nfe_record_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12, as pydantic writes it) of :class:`NfeRecord`."""
    return NfeRecord.model_json_schema()
