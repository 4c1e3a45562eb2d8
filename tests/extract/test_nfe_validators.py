"""Check digits (access key, CNPJ numeric and alphanumeric, CPF) and the six NF-e checks on
hand-built records. Every expected digit below was computed by hand from the rules quoted in
plandag/extract/nfe/validators.py."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plandag.checks.base import CheckOutcome
from plandag.extract.nfe.checks import (
    NFE_CHECKS,
    nfe_cnpj_cpf_valid,
    nfe_items_sum_vprod,
    nfe_key_check_digit,
    nfe_key_matches_document,
    nfe_protocol_authorised,
    nfe_vnf_formula,
)
from plandag.extract.nfe.record import NfeRecord
from plandag.extract.nfe.validators import (
    cnpj_check_digits,
    cpf_check_digits,
    decompose_key,
    key_check_digit,
    mod11_digit,
    parse_decimal,
    valid_cnpj,
    valid_cpf,
    valid_key,
)

KEY = "35180834128745000152550010000474491454651420"


# --- validators ------------------------------------------------------------------------


def test_known_access_key_is_valid_and_a_changed_last_digit_is_not() -> None:
    assert valid_key(KEY) is True
    assert key_check_digit(KEY[:43]) == 0
    assert valid_key(KEY[:43] + "1") is False


@pytest.mark.parametrize(
    "key",
    [
        "",
        KEY[:43],
        KEY + "0",
        "NFe" + KEY[3:],
        "351808341287450001525500100004744914546514a0",
    ],
)
def test_malformed_keys_are_invalid(key: str) -> None:
    assert valid_key(key) is False


def test_key_check_digit_refuses_a_body_of_the_wrong_length() -> None:
    with pytest.raises(ValueError, match="43 characters"):
        key_check_digit("123")


def test_mod11_digit_counts_letters_as_ascii_minus_48() -> None:
    # "A" = 17: 17*2 = 34, 34 % 11 = 1 -> digit 0.
    assert mod11_digit("A") == 0
    # "1A": A*2 + 1*3 = 37, 37 % 11 = 4 -> 11 - 4 = 7.
    assert mod11_digit("1A") == 7
    # Weights cycle 2..9 then restart at 2: nine 1s give 2+3+...+9+2 = 46, 46 % 11 = 2 -> 9.
    assert mod11_digit("111111111") == 9


def _mod11_by_hand(text: str) -> int:
    """MOC 7.0, Anexo I, 5.4.1 step by step: each character's ASCII code - 48, times weights
    2, 3, ..., 9, 2, ... from the right; remainder 0 or 1 gives 0, else 11 - remainder."""
    total = 0
    weight = 2
    for character in reversed(text):
        total += (ord(character) - 48) * weight
        weight = 2 if weight == 9 else weight + 1
    remainder = total % 11
    return 0 if remainder < 2 else 11 - remainder


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet="0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", max_size=60))
def test_mod11_digit_equals_the_rule_step_by_step(text: str) -> None:
    assert mod11_digit(text) == _mod11_by_hand(text)


def test_decompose_key_gives_every_field() -> None:
    assert decompose_key(KEY) == {
        "cUF": "35",
        "AAMM": "1808",
        "CNPJ": "34128745000152",
        "mod": "55",
        "serie": "001",
        "nNF": "000047449",
        "tpEmis": "1",
        "cNF": "45465142",
        "cDV": "0",
    }
    with pytest.raises(ValueError, match="44 characters"):
        decompose_key("123")


def test_alphanumeric_cnpj_example_of_nt_2025_001() -> None:
    # 12ABC34501DE: sum 459 (weights 5,4,3,2,9,8,7,6,5,4,3,2) -> 459 % 11 = 8 -> 3;
    # then sum 424 -> 424 % 11 = 6 -> 5.
    assert cnpj_check_digits("12ABC34501DE") == "35"
    assert valid_cnpj("12ABC34501DE35") is True
    assert valid_cnpj("12ABC34501DE36") is False
    assert valid_cnpj("12abc34501de35") is False
    assert valid_cnpj("12ABC34501DE3A") is False


def test_numeric_cnpj() -> None:
    assert valid_cnpj("34128745000152") is True
    assert valid_cnpj("07670813000823") is False
    assert valid_cnpj("00000000000000") is False
    assert valid_cnpj("99999999999999") is False
    assert valid_cnpj("3412874500015") is False


def test_cpf() -> None:
    assert cpf_check_digits("529982247") == "25"
    assert valid_cpf("52998224725") is True
    assert valid_cpf("52998224724") is False
    assert valid_cpf("11111111111") is False
    assert valid_cpf("5299822472") is False
    with pytest.raises(ValueError, match="9 digits"):
        cpf_check_digits("12345678")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1209.00", Decimal("1209.00")),
        (" 55.7455000000 ", Decimal("55.7455000000")),
        ("-1.5", Decimal("-1.5")),
        ("7", Decimal("7")),
        ("1e3", None),
        ("NaN", None),
        ("Infinity", None),
        ("", None),
        ("string", None),
        ("1,50", None),
        (None, None),
    ],
)
def test_parse_decimal(text: str | None, expected: Decimal | None) -> None:
    assert parse_decimal(text) == expected


# --- checks on hand-built records --------------------------------------------------------


def _record(**overrides: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "source": "a.xml",
        "sha256": "0" * 64,
        "status": "ok",
        "errors": [],
        "checks": {},
        "layout": "4.00",
        "invoice_index": 0,
        "ide": {
            "chNFe": KEY,
            "cUF": "35",
            "cNF": "45465142",
            "mod": "55",
            "serie": "1",
            "nNF": "47449",
            "dhEmi": "2018-08-28T10:00:00-03:00",
            "tpNF": "1",
            "tpAmb": "1",
            "finNFe": "1",
            "tpEmis": "1",
            "cDV": "0",
        },
        "emit": {"CNPJ": "34128745000152", "CPF": None, "xNome": "A", "IE": "1", "UF": "SP"},
        "dest": {
            "CNPJ": None,
            "CPF": "52998224725",
            "idEstrangeiro": None,
            "xNome": "B",
            "UF": "SP",
            "cPais": "1058",
        },
        "items": [
            {"nItem": "1", "vProd": "60.00", "indTot": "1"},
            {"nItem": "2", "vProd": "40.00", "indTot": "1"},
        ],
        "total": {"vProd": "100.00", "vNF": "100.00"},
        "protocol": {"cStat": "100", "xMotivo": "Autorizado", "nProt": "1", "chNFe": KEY},
        "events": [],
    }
    for name, value in overrides.items():
        if isinstance(value, dict) and isinstance(record.get(name), dict):
            record[name] = {**record[name], **value}
        else:
            record[name] = value
    return copy.deepcopy(record)


def _run(definition: Any, record: dict[str, Any]) -> CheckOutcome:
    outcome = definition.evaluate(record, {})
    assert isinstance(outcome, CheckOutcome)
    return outcome


def test_the_six_checks_are_exported_with_their_kinds() -> None:
    assert [definition.name for definition in NFE_CHECKS] == [
        "nfe_key_check_digit",
        "nfe_key_matches_document",
        "nfe_cnpj_cpf_valid",
        "nfe_items_sum_vprod",
        "nfe_vnf_formula",
        "nfe_protocol_authorised",
    ]


def test_base_record_passes_every_check_and_fits_the_model() -> None:
    record = _record()
    assert [_run(definition, record).status for definition in NFE_CHECKS] == ["pass"] * 6


def test_key_check_digit_outcomes() -> None:
    assert _run(nfe_key_check_digit, _record()).detail == "check digit 0 is right"
    wrong = _run(nfe_key_check_digit, _record(ide={"chNFe": KEY[:43] + "1"}))
    assert (wrong.status, wrong.detail) == (
        "fail",
        "key ends in 1 but its mod-11 check digit is 0",
    )
    assert _run(nfe_key_check_digit, _record(ide={"chNFe": None})).status == "fail"
    assert _run(nfe_key_check_digit, _record(ide={"chNFe": "string"})).status == "fail"


def test_key_matches_document_compares_each_field() -> None:
    outcome = _run(nfe_key_matches_document, _record(ide={"serie": "2", "nNF": "47450"}))
    assert outcome.status == "fail"
    assert outcome.detail == "serie: key 001, document 002; nNF: key 000047449, document 000047450"


def test_key_matches_document_uses_the_local_date_of_dhemi() -> None:
    # 2018-09-01 00:30 at -03:00 is 2018-09-01 03:30 UTC; either way the local month is 09,
    # and 2018-08-31 23:30 -03:00 (2018-09-01 in UTC) must stay in month 08.
    late = _record(ide={"dhEmi": "2018-08-31T23:30:00-03:00"})
    assert _run(nfe_key_matches_document, late).status == "pass"
    september = _run(nfe_key_matches_document, _record(ide={"dhEmi": "2018-09-01T00:30:00-03:00"}))
    assert (september.status, september.detail) == ("fail", "AAMM: key 1808, document 1809")


def test_key_matches_document_with_a_cpf_emitter() -> None:
    body = "35" + "1808" + "000" + "52998224725" + "55" + "001" + "000047449" + "1" + "45465142"
    key = body + str(key_check_digit(body))
    record = _record(ide={"chNFe": key, "cDV": key[-1]}, emit={"CNPJ": None, "CPF": "52998224725"})
    assert _run(nfe_key_matches_document, record).status == "pass"
    assert _run(nfe_key_check_digit, record).status == "pass"
    assert _run(nfe_cnpj_cpf_valid, record).status == "pass"


def test_key_with_an_alphanumeric_cnpj() -> None:
    body = "35" + "2607" + "12ABC34501DE35" + "55" + "001" + "000000001" + "1" + "12345678"
    # Hand check of the last step only: mod11_digit is verified above on letters.
    key = body + str(mod11_digit(body))
    record = _record(
        ide={
            "chNFe": key,
            "dhEmi": "2026-07-15T09:00:00-03:00",
            "nNF": "1",
            "cNF": "12345678",
            "cDV": key[-1],
        },
        emit={"CNPJ": "12ABC34501DE35"},
        protocol={"chNFe": key},
    )
    assert [_run(definition, record).status for definition in NFE_CHECKS] == ["pass"] * 6


def test_cnpj_cpf_valid_outcomes() -> None:
    bad_cpf = _run(nfe_cnpj_cpf_valid, _record(dest={"CPF": "52998224724"}))
    assert (bad_cpf.status, bad_cpf.detail) == (
        "fail",
        "emitter CNPJ 34128745000152 valid; recipient CPF 52998224724 invalid",
    )
    foreign = _record(dest={"CPF": None, "idEstrangeiro": "EXTERIOR", "UF": "EX", "cPais": "0230"})
    assert _run(nfe_cnpj_cpf_valid, foreign).status == "pass"
    assert _run(nfe_cnpj_cpf_valid, _record(dest=None)).status == "pass"
    no_emitter = _run(nfe_cnpj_cpf_valid, _record(emit={"CNPJ": None}))
    assert (no_emitter.status, no_emitter.detail) == ("fail", "the emitter has no CNPJ or CPF")


def test_items_sum_counts_only_items_with_indtot_1() -> None:
    items = [
        {"nItem": "1", "vProd": "60.00", "indTot": "1"},
        {"nItem": "2", "vProd": "40.00", "indTot": "1"},
        {"nItem": "3", "vProd": "999.00", "indTot": "0"},
    ]
    assert _run(nfe_items_sum_vprod, _record(items=items)).status == "pass"
    near = _run(nfe_items_sum_vprod, _record(total={"vProd": "100.01"}))
    assert near.status == "pass"
    off = _run(nfe_items_sum_vprod, _record(total={"vProd": "100.02"}))
    assert (off.status, off.detail) == (
        "fail",
        "sum of 2 item(s) 100.00 vs total.vProd 100.02 (difference -0.02)",
    )


def _formula(total: dict[str, str], **overrides: Any) -> CheckOutcome:
    return _run(nfe_vnf_formula, _record(total=total, **overrides))


def test_vnf_formula_with_every_classic_term() -> None:
    # 1000 - 50 - 10 + 20 + 2 + 30 + 5 + 3 + 0 + 100 + 1 = 1101
    total = {
        "vProd": "1000.00",
        "vDesc": "50.00",
        "vICMSDeson": "10.00",
        "vST": "20.00",
        "vFCPST": "2.00",
        "vFrete": "30.00",
        "vSeg": "5.00",
        "vOutro": "3.00",
        "vII": "0.00",
        "vIPI": "100.00",
        "vIPIDevol": "1.00",
        "vNF": "1101.00",
    }
    assert _formula(total).status == "pass"
    assert _formula({**total, "vNF": "1101.01"}).status == "pass"
    failing = _formula({**total, "vNF": "1101.02"})
    assert failing.status == "fail"
    assert failing.detail.startswith("vNF 1101.02 but the formula gives 1101.00 (difference 0.02")


def test_vnf_formula_subtracts_only_relief_flagged_inddeduzdeson_1() -> None:
    items = [
        {
            "nItem": "1",
            "vProd": "100.00",
            "indTot": "1",
            "vICMSDeson": "10.00",
            "indDeduzDeson": "1",
        },
        {
            "nItem": "2",
            "vProd": "100.00",
            "indTot": "1",
            "vICMSDeson": "5.00",
            "indDeduzDeson": "0",
        },
    ]
    total = {"vProd": "200.00", "vICMSDeson": "15.00"}
    assert _formula({**total, "vNF": "190.00"}, items=items).status == "pass"
    assert _formula({**total, "vNF": "185.00"}, items=items).status == "fail"
    # Without the flag (older notes) the whole ICMSTot/vICMSDeson is subtracted.
    plain = [{"nItem": "1", "vProd": "200.00", "indTot": "1", "vICMSDeson": "15.00"}]
    assert _formula({**total, "vNF": "185.00"}, items=plain).status == "pass"


def test_vnf_formula_adds_mono_reten_services_and_flagged_pis_cofins_st() -> None:
    items = [
        {
            "nItem": "1",
            "vProd": "100.00",
            "indTot": "1",
            "vPISST": "2.00",
            "indSomaPISST": "1",
            "vCOFINSST": "3.00",
            "indSomaCOFINSST": "0",
        },
        {"nItem": "2", "vProd": "0.00", "indTot": "1", "vCOFINSST": "4.00", "indSomaCOFINSST": "1"},
    ]
    total = {"vProd": "100.00", "vICMSMonoReten": "7.00", "vServ": "50.00"}
    # 100 + 7 + 50 + 2 (PIS-ST flagged) + 4 (COFINS-ST flagged) = 163
    assert _formula({**total, "vNF": "163.00"}, items=items).status == "pass"
    assert _formula({**total, "vNF": "166.00"}, items=items).status == "fail"


def test_vnf_formula_import_exception_only_for_foreign_entries() -> None:
    total = {
        "vProd": "84471.40",
        "vII": "13921.27",
        "vIPI": "11036.49",
        "vOutro": "192.79",
        "vNF": "95700.68",
    }
    foreign = {"CPF": None, "idEstrangeiro": "EXTERIOR", "UF": "EX", "cPais": "0230"}
    entry = _formula(total, ide={"tpNF": "0"}, dest=foreign)
    assert entry.status == "pass"
    assert "without vII 13921.27" in entry.detail
    assert _formula(total, ide={"tpNF": "1"}, dest=foreign).status == "fail"
    assert _formula(total, ide={"tpNF": "0"}).status == "fail"  # a Brazilian party
    by_country = {"CPF": None, "UF": "SP", "cPais": "0230"}
    assert _formula(total, ide={"tpNF": "0"}, dest=by_country).status == "pass"


def test_vnftot_never_replaces_vnf() -> None:
    outcome = _formula({"vProd": "100.00", "vNF": "90.00", "vNFTot": "100.00"})
    assert outcome.status == "fail"


def test_vnf_formula_with_an_unparseable_term_fails() -> None:
    outcome = _formula({"vProd": "100.00", "vFrete": "1,00", "vNF": "100.00"})
    assert (outcome.status, outcome.detail) == (
        "fail",
        "cannot compute the formula: vFrete='1,00' is not a decimal",
    )


@pytest.mark.parametrize(
    ("status", "expected", "word"),
    [
        ("100", "pass", "cStat 100"),
        ("150", "pass", "cStat 150"),
        ("110", "fail", "denied"),
        ("301", "fail", "denied"),
        ("302", "fail", "denied"),
        ("101", "fail", "cancelled"),
        ("204", "fail", "not authorised"),
    ],
)
def test_protocol_status_codes(status: str, expected: str, word: str) -> None:
    outcome = _run(nfe_protocol_authorised, _record(protocol={"cStat": status}))
    assert outcome.status == expected
    assert word in outcome.detail


def test_no_protocol_is_not_applicable() -> None:
    outcome = _run(nfe_protocol_authorised, _record(protocol=None))
    assert (outcome.status, outcome.detail) == (
        "not_applicable",
        "no authorisation protocol in the file",
    )


def test_protocol_for_another_key_fails() -> None:
    other = KEY[:-1] + "9"
    outcome = _run(nfe_protocol_authorised, _record(protocol={"chNFe": other}))
    assert (outcome.status, outcome.detail) == (
        "fail",
        f"the protocol answers key {other}, not {KEY}",
    )


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        ({"tpEvento": "110111", "cStat": "135", "chNFe": KEY, "nProt": "9"}, "fail"),
        ({"tpEvento": "110112", "cStat": "136", "chNFe": KEY}, "fail"),
        ({"tpEvento": "110111", "cStat": "155", "chNFe": KEY}, "fail"),
        ({"tpEvento": "110111", "cStat": "573", "chNFe": KEY}, "pass"),  # rejected event
        ({"tpEvento": "110110", "cStat": "135", "chNFe": KEY}, "pass"),  # CC-e
        ({"tpEvento": "110111", "cStat": "135", "chNFe": KEY[:-1] + "9"}, "pass"),
    ],
)
def test_cancellation_event_in_the_same_file(event: dict[str, str], expected: str) -> None:
    outcome = _run(nfe_protocol_authorised, _record(events=[event]))
    assert outcome.status == expected
    if expected == "fail":
        assert outcome.detail.startswith("cancelled: event ")


def test_cancellation_event_wins_even_without_protocol() -> None:
    event = {"tpEvento": "110111", "cStat": "135", "chNFe": KEY, "nProt": "135210128997350"}
    outcome = _run(nfe_protocol_authorised, _record(protocol=None, events=[event]))
    assert (outcome.status, outcome.detail) == (
        "fail",
        "cancelled: event 110111 with cStat 135 (135210128997350) in the same file",
    )


def test_hand_built_record_fits_the_record_model() -> None:
    model = NfeRecord.model_validate(_record())
    assert model.ide is not None
    assert model.ide.chNFe == KEY
    assert [item.vProd for item in model.items] == ["60.00", "40.00"]
