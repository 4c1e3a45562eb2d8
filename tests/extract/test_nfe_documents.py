"""Reading NF-e files: classification of what is not an invoice, the records of real files
(values checked by hand against the XML), and hand-built files for the layouts' variants
(batches, no-namespace protocols, ISO-8859-1, prefixes, older dEmi, missing fields)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import anyio
import pytest

from plandag.compiler import compile_plan
from plandag.errors import PermanentStepError
from plandag.extract.nfe import extract_document, load_plan_text, nfe_record_json_schema
from plandag.extract.nfe.document import parse_document
from plandag.extract.nfe.record import NfeRecord
from plandag.extract.nfe.validators import key_check_digit
from plandag.tools.registry import default_registry


def _shared_folder() -> Path | None:
    """The shared NF-e corpus (``PLANDAG_SHARED_NFE``, set by tests/conftest.py), or None."""
    folder = os.environ.get("PLANDAG_SHARED_NFE")
    return Path(folder) if folder and Path(folder).is_dir() else None


SAMPLES = _shared_folder()
needs_samples = pytest.mark.skipif(
    SAMPLES is None,
    reason="shared NF-e samples not found (set PLANDAG_SHARED_NFE)",
)


def _extract(path: Path) -> list[dict[str, Any]]:
    async def run() -> list[dict[str, Any]]:
        return await extract_document(path)

    return anyio.run(run)


def _sample(name: str) -> Path:
    assert SAMPLES is not None
    return SAMPLES / name


def _statuses(record: dict[str, Any]) -> dict[str, str]:
    return {name: outcome["status"] for name, outcome in record["checks"].items()}


# --- the stored plan ---------------------------------------------------------------------


def test_stored_plan_compiles_without_warnings() -> None:
    compiled = compile_plan(
        json.loads(load_plan_text()), default_registry(), params={"input": "x.xml", "index": 0}
    )
    assert compiled.diagnostics == ()
    assert compiled.order == (1, 2, 3, 4, 5, 6, 7, 8, 9)
    assert sorted(compiled.steps[9].parents) == [3, 4, 5, 6, 7, 8]
    assert [check.definition.name for check in compiled.steps[9].checks] == [
        "nfe_key_check_digit",
        "nfe_key_matches_document",
        "nfe_cnpj_cpf_valid",
        "nfe_items_sum_vprod",
        "nfe_vnf_formula",
        "nfe_protocol_authorised",
    ]


def test_record_json_schema_lists_the_groups() -> None:
    schema = nfe_record_json_schema()
    assert schema["title"] == "NfeRecord"
    assert set(schema["properties"]) == {
        "source", "sha256", "status", "errors", "checks", "layout", "invoice_index",
        "ide", "emit", "dest", "items", "total", "protocol", "events", "repair",
    }  # fmt: skip


# --- broken shared files -----------------------------------------------------------------


@needs_samples
@pytest.mark.parametrize(
    ("name", "code", "message"),
    [
        (
            "spedda_110110-53181011028793000173550010000066701204276800-1-procEventoNfe.xml",
            "not_an_invoice",
            "CC-e event 110110, cStat 135 for key "
            "53181011028793000173550010000066701204276800, not an invoice",
        ),
        (
            "brnfe_event_cancel.xml",
            "not_an_invoice",
            "cancellation event 110111, cStat 135 for key "
            "42170108897094000155550010000000051201601010, not an invoice",
        ),
        (
            "brnfe_sync_fail.xml",
            "not_an_invoice",
            "SEFAZ response retEnviNFe (cStat 104 Lote processado; protNFe cStat 204 "
            "Rejeicao: Duplicidade de NF-e [chNFe:42161208897094000155550010000000041201601018]),"
            " not an invoice",
        ),
        (
            "spednfe_nfe_v4.00_PL_009q.xml",
            "template",
            "invoice 0 is a schema template: its key, number, date or totals hold placeholder "
            "values such as 'string', not data",
        ),
        (
            "spednfe_nfe_errado.txt",
            "invalid_xml",
            "NF-e TXT layout (pipe-separated records), not XML; convert it to XML first",
        ),
    ],
)
def test_broken_shared_files_give_one_error_record(name: str, code: str, message: str) -> None:
    path = _sample(name)
    records = _extract(path)
    assert len(records) == 1
    record = records[0]
    assert record["status"] == "error"
    assert record["errors"] == [{"code": code, "message": f"{path}: {message}"}]
    assert record["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert record["ide"] is None
    assert record["checks"] == {}
    NfeRecord.model_validate(record)


@needs_samples
def test_every_shared_file_gives_valid_records() -> None:
    assert SAMPLES is not None
    paths = sorted(p for p in SAMPLES.iterdir() if p.suffix in (".xml", ".txt"))
    assert len(paths) == 42
    statuses: dict[str, int] = {}
    for path in paths:
        records = _extract(path)
        assert len(records) == 1, path.name
        for record in records:
            NfeRecord.model_validate(record)
            statuses[record["status"]] = statuses.get(record["status"], 0) + 1
            if record["status"] != "error":
                assert len(record["checks"]) == 6, path.name
                assert record["errors"] == []
    assert statuses == {"ok": 21, "check_failed": 15, "error": 6}


# --- real files, values checked by hand against the XML ----------------------------------


@needs_samples
def test_import_from_a_foreign_party() -> None:
    (record,) = _extract(_sample("nfelib_42210775277525000178550030000266631762885493-procNFe.xml"))
    assert record["status"] == "ok"
    assert record["layout"] == "4.00"
    assert record["ide"] == {
        "chNFe": "42210775277525000178550030000266631762885493",
        "cUF": "42",
        "cNF": "76288549",
        "mod": "55",
        "serie": "3",
        "nNF": "26663",
        "dhEmi": "2021-07-22T15:05:23-03:00",
        "tpNF": "0",
        "tpAmb": "1",
        "finNFe": "1",
        "tpEmis": "1",
        "cDV": "3",
    }
    assert record["emit"] == {
        "CNPJ": "75277525000178",
        "CPF": None,
        "xNome": "Fornos LTDA",
        "IE": "250745615",
        "UF": "SC",
    }
    assert record["dest"] == {
        "CNPJ": None,
        "CPF": None,
        "idEstrangeiro": "EXTERIOR",
        "xNome": "E.G.O. Elektro-Gerätebau GmbH",
        "UF": "EX",
        "cPais": "0230",
    }
    assert len(record["items"]) == 3
    first = record["items"][0]
    assert (first["cProd"], first["NCM"], first["CFOP"]) == ("0141400002", "85169000", "3101")
    assert (first["qCom"], first["vUnCom"], first["vProd"]) == (
        "700.0000",
        "55.7455000000",
        "39021.85",
    )
    total = record["total"]
    assert (total["vProd"], total["vII"], total["vIPI"], total["vOutro"], total["vNF"]) == (
        "84471.40",
        "13921.27",
        "11036.49",
        "192.79",
        "95700.68",
    )
    assert (total["vPIS"], total["vCOFINS"]) == ("1773.90", "8151.49")
    assert record["protocol"] == {
        "cStat": "100",
        "xMotivo": "Autorizado o uso da NF-e",
        "nProt": "342210134258589",
        "dhRecbto": "2021-07-22T15:55:43-03:00",
        "chNFe": "42210775277525000178550030000266631762885493",
    }
    assert _statuses(record) == {
        "key_check_digit": "pass",
        "key_matches_document": "pass",
        "cnpj_cpf_valid": "pass",
        "items_sum_vprod": "pass",
        "vnf_formula": "pass",
        "protocol_authorised": "pass",
    }
    assert record["checks"]["vnf_formula"]["detail"].startswith(
        "vNF 95700.68 = 95700.68 without vII 13921.27"
    )


@needs_samples
def test_cancelled_invoice_with_its_event_appended() -> None:
    (record,) = _extract(_sample("spedda_cancelada_55_new.xml"))
    assert record["ide"]["chNFe"] == "35210258716523000119550000000573661346317847"
    assert record["protocol"]["cStat"] == "100"
    assert record["events"] == [
        {
            "tpEvento": "110111",
            "cStat": "135",
            "chNFe": "35210258716523000119550000000573661346317847",
            "nProt": "135210128997350",
            "description": "Cancelamento registrado",
        }
    ]
    assert record["checks"]["protocol_authorised"] == {
        "status": "fail",
        "detail": "cancelled: event 110111 with cStat 135 (135210128997350) in the same file",
    }
    assert record["status"] == "check_failed"
    assert (record["total"]["vNF"], len(record["items"])) == ("581.55", 2)


@needs_samples
def test_nfce_without_recipient_and_layout_3_10() -> None:
    (record,) = _extract(_sample("spedda_NFCeProd2.xml"))
    assert record["status"] == "ok"
    assert (record["layout"], record["ide"]["mod"]) == ("3.10", "65")
    assert record["dest"] is None
    assert record["emit"]["CNPJ"] == "10422724000187"
    assert record["total"]["vNF"] == "42.00"
    assert record["total"]["vFCPST"] is None  # a 4.00 field, absent from 3.10
    assert record["checks"]["cnpj_cpf_valid"] == {
        "status": "pass",
        "detail": "emitter CNPJ 10422724000187 valid; recipient has no CNPJ/CPF to check",
    }


@needs_samples
def test_nfce_authorised_late_cstat_150() -> None:
    (record,) = _extract(_sample("spedda_nfce112_2.xml"))
    assert record["protocol"]["cStat"] == "150"
    assert record["checks"]["protocol_authorised"]["status"] == "pass"
    assert record["status"] == "ok"


@needs_samples
def test_tax_reform_invoice_keeps_vnftot_beside_vnf() -> None:
    (record,) = _extract(_sample("nfelib_nfe_reforma_tributaria.xml"))
    assert (record["total"]["vNF"], record["total"]["vNFTot"]) == ("164746.81", "5000")
    assert record["ide"]["dhEmi"] == "2025-07-01T10:00:01-00:00"
    assert record["checks"]["vnf_formula"]["status"] == "fail"
    assert record["checks"]["vnf_formula"]["detail"].startswith(
        "vNF 164746.81 but the formula gives 164801.01 (difference -54.20;"
    )
    assert record["checks"]["items_sum_vprod"]["detail"] == (
        "sum of 1 item(s) 14.88 vs total.vProd 158106.35 (difference -158091.47)"
    )
    assert record["status"] == "check_failed"


@needs_samples
def test_id_without_nfe_prefix_and_no_protocol() -> None:
    (record,) = _extract(_sample("nfelib_NFe35200159594315000157550010000000012062777161.xml"))
    assert record["ide"]["chNFe"] == "35200159594315000157550010000000012062777161"
    assert record["ide"]["dhEmi"] == "2020-01-01T12:00:00+01:00"
    assert record["protocol"] is None
    assert record["checks"]["protocol_authorised"]["status"] == "not_applicable"
    # The key says tpEmis 2 (position 35) while ide/tpEmis is 1: a fact of this file.
    assert record["checks"]["key_matches_document"] == {
        "status": "fail",
        "detail": "tpEmis: key 2, document 1",
    }


@needs_samples
def test_zona_franca_relief_and_placeholder_key() -> None:
    (record,) = _extract(_sample("uninfe_99999999999999999999999999999999999999999994.xml"))
    assert record["checks"]["vnf_formula"] == {
        "status": "pass",
        "detail": "vNF 1209.00 = 1209.00 (vProd=1300.00 -vDesc=-91.00)",
    }
    assert record["checks"]["key_check_digit"]["detail"] == (
        "key ends in 9 but its mod-11 check digit is 7"
    )
    # emit/CNPJ is "XXXXXXXXXXXXXX": a required field that does not parse (NFE.md, Status)
    assert record["status"] == "error"
    assert [error["code"] for error in record["errors"]] == ["invalid_field"]


@needs_samples
def test_utf8_bom_file() -> None:
    name = "uninfe_exemplo_csosn-500_-_01333652000100100000001062_nfeproc.xml"
    assert _sample(name).read_bytes().startswith(b"\xef\xbb\xbf")
    (record,) = _extract(_sample(name))
    assert record["ide"]["chNFe"] == "42150101333652000100551000000010621264603500"
    assert record["status"] == "ok"


@needs_samples
def test_enveloped_batch_with_a_bad_key() -> None:
    (record,) = _extract(_sample("spedda_mod55-nfe-veiculo.xml"))
    assert record["ide"]["chNFe"] == "21150605198872000120550010000821841836565171"
    assert record["checks"]["key_check_digit"]["status"] == "fail"
    assert record["protocol"] is None


# --- hand-built files ----------------------------------------------------------------------

NS = "http://www.portalfiscal.inf.br/nfe"
CNPJ = "34128745000152"


def _key(number: int) -> str:
    body = f"351808{CNPJ}55001{number:09d}1{number:08d}"
    return body + str(key_check_digit(body))


def _invoice(
    number: int,
    *,
    prefix: str = "",
    date: str = "<dhEmi>2018-08-28T10:00:00-03:00</dhEmi>",
    vnf: str = "<vNF>110.00</vNF>",
    namespace: bool = True,
) -> str:
    key = _key(number)
    xmlns = f' xmlns{":" + prefix if prefix else ""}="{NS}"' if namespace else ""
    body = f"""<NFe{xmlns}><infNFe versao="4.00" Id="NFe{key}">
<ide><cUF>35</cUF><cNF>{number:08d}</cNF><mod>55</mod><serie>1</serie><nNF>{number}</nNF>
{date}<tpNF>1</tpNF><tpEmis>1</tpEmis><cDV>{key[-1]}</cDV><tpAmb>2</tpAmb><finNFe>1</finNFe></ide>
<emit><CNPJ>{CNPJ}</CNPJ><xNome>Emitente Ação</xNome><enderEmit><UF>SP</UF></enderEmit>
<IE>123</IE></emit>
<dest><CNPJ>12ABC34501DE35</CNPJ><xNome>Destinatário</xNome></dest>
<autXML><CNPJ>07670813000823</CNPJ></autXML>
<det nItem="1"><prod><cProd>A1</cProd><xProd>Produto</xProd><NCM>94033000</NCM>
<CFOP>5102</CFOP><qCom>2.0000</qCom><vUnCom>50.0000000000</vUnCom><vProd>100.00</vProd>
<indTot>1</indTot></prod><imposto><ICMS><ICMS00><vICMS>18.00</vICMS></ICMS00></ICMS>
<PIS><PISAliq><vPIS>1.65</vPIS></PISAliq></PIS></imposto></det>
<total><ICMSTot><vICMS>18.00</vICMS><vProd>100.00</vProd><vFrete>10.00</vFrete>
<vDesc>0.00</vDesc><vPIS>1.65</vPIS>{vnf}</ICMSTot>
<ISSQNtot><vPIS>9.99</vPIS><vCOFINS>9.99</vCOFINS></ISSQNtot></total>
<transp><transporta><CNPJ>11111111111111</CNPJ></transporta></transp>
<cobr><fat><vDesc>5.00</vDesc></fat></cobr>
</infNFe></NFe>"""
    if prefix:
        body = re.sub(r"<(/?)([A-Za-z]\w*)", rf"<\1{prefix}:\2", body)
    return body


def _protocol(number: int, *, namespace: str = NS, status: str = "100") -> str:
    xmlns = f' xmlns="{namespace}"' if namespace else ' xmlns=""'
    return (
        f'<protNFe versao="4.00"{xmlns}><infProt><chNFe>{_key(number)}</chNFe>'
        f"<dhRecbto>2018-08-28T10:05:00-03:00</dhRecbto><nProt>135{number:012d}</nProt>"
        f"<cStat>{status}</cStat><xMotivo>Autorizado o uso da NF-e</xMotivo></infProt>"
        "</protNFe>"
    )


def _write(tmp_path: Path, name: str, text: str, encoding: str = "utf-8") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode(encoding))
    return path


def test_batch_envelope_gives_one_record_per_invoice(tmp_path: Path) -> None:
    text = (
        f'<?xml version="1.0" encoding="UTF-8"?><enviNFe xmlns="{NS}" versao="4.00">'
        f"<idLote>1</idLote><indSinc>0</indSinc>{_invoice(1)}{_invoice(2)}{_invoice(3)}"
        "</enviNFe>"
    )
    records = _extract(_write(tmp_path, "lote.xml", text))
    assert [r["ide"]["chNFe"] for r in records] == [_key(1), _key(2), _key(3)]
    assert [r["invoice_index"] for r in records] == [0, 1, 2]
    assert [r["ide"]["nNF"] for r in records] == ["1", "2", "3"]
    assert len({r["sha256"] for r in records}) == 1


def test_fields_come_from_their_own_groups(tmp_path: Path) -> None:
    (record,) = _extract(_write(tmp_path, "a.xml", _invoice(7)))
    assert record["emit"] == {
        "CNPJ": CNPJ,
        "CPF": None,
        "xNome": "Emitente Ação",
        "IE": "123",
        "UF": "SP",
    }
    assert record["dest"]["CNPJ"] == "12ABC34501DE35"  # not autXML's or transporta's
    assert record["dest"]["UF"] is None  # no enderDest
    assert (record["total"]["vPIS"], record["total"]["vDesc"]) == ("1.65", "0.00")
    assert record["total"]["vCOFINS"] is None  # only in ISSQNtot here
    assert record["items"][0]["vDesc"] is None
    assert record["status"] == "ok"
    assert record["checks"]["cnpj_cpf_valid"]["detail"] == (
        "emitter CNPJ 34128745000152 valid; recipient CNPJ 12ABC34501DE35 valid"
    )
    assert record["checks"]["protocol_authorised"]["status"] == "not_applicable"


def test_protocol_in_no_namespace_is_found(tmp_path: Path) -> None:
    text = (
        f'<nfeProc xmlns="{NS}" versao="4.00">{_invoice(5)}{_protocol(5, namespace="")}</nfeProc>'
    )
    (record,) = _extract(_write(tmp_path, "p.xml", text))
    assert record["protocol"] == {
        "cStat": "100",
        "xMotivo": "Autorizado o uso da NF-e",
        "nProt": "135000000000005",
        "dhRecbto": "2018-08-28T10:05:00-03:00",
        "chNFe": _key(5),
    }
    assert record["checks"]["protocol_authorised"]["status"] == "pass"


def test_denied_protocol_fails(tmp_path: Path) -> None:
    text = f'<nfeProc xmlns="{NS}">{_invoice(5)}{_protocol(5, status="302")}</nfeProc>'
    (record,) = _extract(_write(tmp_path, "d.xml", text))
    assert record["checks"]["protocol_authorised"] == {
        "status": "fail",
        "detail": "denied: cStat 302 Autorizado o uso da NF-e",
    }
    assert record["status"] == "check_failed"


def test_iso_8859_1_declared_file(tmp_path: Path) -> None:
    text = '<?xml version="1.0" encoding="ISO-8859-1"?>' + _invoice(8)
    (record,) = _extract(_write(tmp_path, "latin.xml", text, encoding="iso-8859-1"))
    assert record["emit"]["xNome"] == "Emitente Ação"
    assert record["status"] == "ok"


def test_crlf_and_prefixed_namespace(tmp_path: Path) -> None:
    text = _invoice(9, prefix="nfe").replace("\n", "\r\n")
    (record,) = _extract(_write(tmp_path, "prefixed.xml", text))
    assert record["ide"]["chNFe"] == _key(9)
    assert record["total"]["vNF"] == "110.00"
    assert record["status"] == "ok"


def test_invoice_in_no_namespace_is_read(tmp_path: Path) -> None:
    (record,) = _extract(_write(tmp_path, "bare.xml", _invoice(4, namespace=False)))
    assert record["ide"]["chNFe"] == _key(4)
    assert record["items"][0]["vProd"] == "100.00"


def test_older_layout_demi_date(tmp_path: Path) -> None:
    text = _invoice(3, date="<dEmi>2018-08-28</dEmi>")
    (record,) = _extract(_write(tmp_path, "old.xml", text))
    assert record["ide"]["dhEmi"] == "2018-08-28"
    assert record["checks"]["key_matches_document"]["status"] == "pass"
    assert record["status"] == "ok"


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        (
            {"vnf": ""},
            {"code": "missing_field", "message": "total/ICMSTot/vNF is missing"},
        ),
        (
            {"vnf": "<vNF>110,00</vNF>"},
            {"code": "invalid_field", "message": "total/vNF '110,00' is not a decimal number"},
        ),
        (
            {"date": "<dhEmi>28/08/2018</dhEmi>"},
            {
                "code": "invalid_field",
                "message": "ide/dhEmi (issue date) '28/08/2018' is not an ISO 8601 date-time",
            },
        ),
        (
            {"date": ""},
            {"code": "missing_field", "message": "ide/dhEmi (issue date) is missing"},
        ),
    ],
)
def test_missing_or_unparseable_required_fields(
    tmp_path: Path, changes: dict[str, str], error: dict[str, str]
) -> None:
    (record,) = _extract(_write(tmp_path, "bad.xml", _invoice(2, **changes)))
    assert record["status"] == "error"
    assert record["errors"] == [error]
    NfeRecord.model_validate(record)


@pytest.mark.parametrize(
    ("content", "code", "message"),
    [
        (b"", "invalid_xml", "empty file, not an invoice"),
        (b"\xef\xbb\xbf \r\n", "invalid_xml", "empty file, not an invoice"),
        (
            b"<!DOCTYPE html><html><body>502 Bad Gateway</body></html>",
            "invalid_xml",
            "an HTML page (an error or login page?), not NF-e XML",
        ),
        (
            b"<html><head><title>x</title></head><body/></html>",
            "invalid_xml",
            "an HTML page (an error or login page?), not NF-e XML",
        ),
        (
            f'<retConsReciNFe xmlns="{NS}"><cStat>104</cStat><xMotivo>Lote processado'
            "</xMotivo></retConsReciNFe>".encode(),
            "not_an_invoice",
            "SEFAZ response retConsReciNFe (cStat 104 Lote processado), not an invoice",
        ),
        (
            b"<catalog><book/></catalog>",
            "not_an_invoice",
            "XML with root <catalog> holds no infNFe element, not an invoice",
        ),
    ],
)
def test_unusable_inputs(tmp_path: Path, content: bytes, code: str, message: str) -> None:
    path = tmp_path / "input.xml"
    path.write_bytes(content)
    (record,) = _extract(path)
    assert record["errors"] == [{"code": code, "message": f"{path}: {message}"}]
    assert record["sha256"] == hashlib.sha256(content).hexdigest()


def test_truncated_file_is_invalid_xml(tmp_path: Path) -> None:
    text = _invoice(6)
    path = _write(tmp_path, "cut.xml", text[: len(text) // 2])
    (record,) = _extract(path)
    assert record["status"] == "error"
    assert record["errors"][0]["code"] == "invalid_xml"
    assert record["errors"][0]["message"].startswith(f"{path}: invalid XML at line ")


def test_unreadable_input_gives_an_error_record(tmp_path: Path) -> None:
    path = tmp_path / "missing.xml"
    (record,) = _extract(path)
    assert record["status"] == "error"
    assert record["sha256"] == ""
    assert record["errors"] == [
        {
            "code": "missing_resource",
            "message": f"read_file {path}: no such file (looked in {path}); check the path or "
            "the --param that gave it",
        }
    ]


def test_parse_document_locates_protocols_and_events() -> None:
    event = (
        '<retEvento versao="1.00"><infEvento><cStat>135</cStat>'
        f"<chNFe>{_key(1)}</chNFe><tpEvento>110111</tpEvento><nSeqEvento>1</nSeqEvento>"
        "<xEvento>Cancelamento registrado</xEvento><nProt>1</nProt></infEvento></retEvento>"
    )
    text = f'<nfeProc xmlns="{NS}">{_invoice(1)}{_protocol(1)}{event}</nfeProc>'
    document = parse_document(text.encode(), "x.xml")
    assert len(document.invoices) == 1
    assert list(document.protocols) == [_key(1)]
    assert document.events == [
        {
            "tpEvento": "110111",
            "cStat": "135",
            "chNFe": _key(1),
            "nProt": "1",
            "description": "Cancelamento registrado",
        }
    ]
    assert document.sha256 == hashlib.sha256(text.encode()).hexdigest()


def test_parse_document_refuses_a_template_with_placeholders() -> None:
    text = (
        _invoice(1)
        .replace(f'Id="NFe{_key(1)}"', 'Id="string"')
        .replace("<nNF>1</nNF>", "<nNF>string</nNF>")
    )
    with pytest.raises(PermanentStepError) as caught:
        parse_document(text.encode())
    assert caught.value.reason == "template"


def test_one_placeholder_alone_is_not_a_template() -> None:
    text = _invoice(1).replace("<nNF>1</nNF>", "<nNF>string</nNF>")
    assert len(parse_document(text.encode()).invoices) == 1
