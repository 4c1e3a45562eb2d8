"""plandag.trace.redact: secrets always masked, personal data (LGPD) masked with --redact."""

from __future__ import annotations

import cProfile
import gc
import logging
import os
import pstats
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree

from plandag.extract.nfe.record import Dest, Emit, Ide, NfeRecord, Total
from plandag.trace.redact import (
    Redactor,
    SecretFilter,
    holds_url_password,
    install_secret_filter,
    is_secret_key,
    is_valid_cpf,
    redact_personal,
    scrub_secret_values,
    scrub_secrets,
)

ANTHROPIC_KEY = "sk-ant-api03-AbCdEf0123456789_xyz-QRSTuvwx"
OPENAI_KEY = "sk-proj-AbCdEfGhIjKlMnOpQrStUv0123"
# Valid CPFs (Receita Federal módulo 11) and one with a wrong second check digit.
CPF = "52998224725"
CPF_FORMATTED = "529.982.247-25"
CPF_WRONG_DIGIT = "52998224726"
NFE_KEY = "43141003682759000190650020000000401000000405"
CNPJ = "03682759000190"
NFCE_WITH_CPF_RECIPIENT = "uninfe_000040_03682759000190_002_20_10_2014-procNFe.xml"


# -- secrets -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "api_key",
        "API-Key",
        "x-api-key",
        "X_API_KEY",
        "Authorization",
        "proxy-authorization",
        "token",
        "access_token",
        "secret",
        "password",
        "Cookie",
        "set-cookie",
        "ANTHROPIC_API_KEY",
        "client_secret",
        "{urn:x}password",
    ],
)
def test_secret_key_names(name: str) -> None:
    assert is_secret_key(name)


@pytest.mark.parametrize(
    "name", ["input_tokens", "output_tokens", "spent_tokens", "tool", "secretary", "key", "hash"]
)
def test_names_that_are_not_secrets(name: str) -> None:
    assert not is_secret_key(name)


def test_values_under_secret_keys_are_masked_at_any_depth() -> None:
    value = {
        "step_id": 3,
        "args": {
            "url": "https://api.example.com/v1",
            "headers": {"X-Api-Key": "abc123", "Accept": "application/json"},
            "auth": {"password": "hunter2", "user": "ana"},
            "token": None,
        },
        "attempts": [{"Authorization": "whatever", "Cookie": "a=1; b=2"}],
        "input_tokens": 120,
    }
    assert scrub_secrets(value) == {
        "step_id": 3,
        "args": {
            "url": "https://api.example.com/v1",
            "headers": {"X-Api-Key": "[secret]", "Accept": "application/json"},
            "auth": {"password": "[secret]", "user": "ana"},
            "token": None,
        },
        "attempts": [{"Authorization": "[secret]", "Cookie": "[secret]"}],
        "input_tokens": 120,
    }


def test_the_input_is_not_changed_and_tuples_become_lists() -> None:
    value = {"headers": (("authorization", "Bearer abcdefgh12345678"), ("accept", "*/*"))}
    assert scrub_secrets(value) == {"headers": [["authorization", "[secret]"], ["accept", "*/*"]]}
    assert value == {"headers": (("authorization", "Bearer abcdefgh12345678"), ("accept", "*/*"))}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization: Bearer abc.DEF-123_xyz", "Authorization: Bearer [secret]"),
        ("authorization: Basic dXNlcjpwYXNzd29yZA==", "authorization: Basic [secret]"),
        (f"key is {ANTHROPIC_KEY}.", "key is [secret]."),
        (f"openai {OPENAI_KEY} done", "openai [secret] done"),
        (f"x-api-key: {ANTHROPIC_KEY}", "x-api-key: [secret]"),
        ("headers={'x-api-key': 'plain-key-1'}", "headers={'x-api-key': '[secret]'}"),
        ('{"api_key": "abc", "n": 1}', '{"api_key": "[secret]", "n": 1}'),
        ("GET /v1?api_key=abc123&page=2", "GET /v1?api_key=[secret]&page=2"),
        ("password=hunter2 user=ana", "password=[secret] user=ana"),
        ("Cookie: session=abc; theme=dark\nAccept: */*", "Cookie: [secret]\nAccept: */*"),
        (
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
            "jwt [secret]",
        ),
    ],
)
def test_secrets_inside_strings(text: str, expected: str) -> None:
    assert scrub_secrets(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "Basic authentication is enabled",
        "the task-abcdefghijklmnopqrstuvwxyz step",
        "risk-assessment-for-the-whole-supply-chain",
        "spent 1200 input_tokens and 300 output_tokens",
        "a bearer of news",
    ],
)
def test_prose_is_not_taken_for_a_secret(text: str) -> None:
    assert scrub_secrets(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://alice:hunter2@127.0.0.1:9/x", "http://alice:[secret]@127.0.0.1:9/x"),
        ("GET http://u:p%40ss@host/v1: refused", "GET http://u:[secret]@host/v1: refused"),
        # the password runs to the last @ before the host, as urllib.parse reads it
        ("see http://u:p@ss@h/ there", "see http://u:[secret]@h/ there"),
        ("http://me@x.com:pw@host/a", "http://me@x.com:[secret]@host/a"),
        ("http://u:pw@[::1]:8080/", "http://u:[secret]@[::1]:8080/"),
        (
            "https://x-access-token:ghp_12@github.com/o/r",
            "https://x-access-token:[secret]@github.com/o/r",
        ),
        ("('http://a:b@h', 'x')", "('http://a:[secret]@h', 'x')"),
        ("│ http://alice:hunter2@127.0.0.1 │", "│ http://alice:[secret]@127.0.0.1 │"),
        ("http://u:[secret]@h", "http://u:[secret]@h"),
    ],
)
def test_a_password_in_a_url_is_masked(text: str, expected: str) -> None:
    assert scrub_secrets(text) == expected
    assert scrub_secret_values(text, ()) == expected
    assert holds_url_password(text) == (expected != text)


@pytest.mark.parametrize(
    "text",
    [
        "http://host:8080/path?mail=a@b.example",
        "ssh://git@github.com/o/r.git",
        "https://token@github.com/o/r",  # a user name alone is kept
        '{"a":"http://x:","b":"y@z"}',  # never across the quotes of JSON
        "http://[::1]:80@h",
        "mailto:ana@example.com",
    ],
)
def test_urls_without_a_password_are_kept(text: str) -> None:
    assert scrub_secret_values(text, ()) == text
    assert not holds_url_password(text)


def test_url_passwords_are_found_in_linear_time() -> None:
    # each try starts at a "://" and reads the host after each "@" once: these take
    # microseconds per character, never a quadratic time
    for text in (
        "://a:" + "@" * 200_000,
        "://a:" + "@b" * 100_000,
        "://a:b" * 100_000,
        "://" + "a" * 200_000 + ":" + "b" * 100_000,
    ):
        assert scrub_secret_values(text, ()) is not None


def test_environment_secret_values_are_masked_wherever_they_appear(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ACME_API_KEY", "acme-0042-zeta")
    monkeypatch.setenv("GITHUB_TOKEN", "ghx_abcdefgh")
    monkeypatch.setenv("SHORT_TOKEN", "abc")  # under 8 characters: not masked
    monkeypatch.setenv("ACME_URL", "https://acme.example")  # not a secret name
    value = {
        "result": "called https://acme.example with acme-0042-zeta and ghx_abcdefgh; abc",
        "list": ["xacme-0042-zetay"],
    }
    assert scrub_secrets(value) == {
        "result": "called https://acme.example with [secret] and [secret]; abc",
        "list": ["x[secret]y"],
    }


def test_non_json_values_are_left_as_they_are() -> None:
    marker = object()
    data = b"Bearer abcdefgh12345678"
    assert scrub_secrets(marker) is marker
    assert scrub_secrets(data) is data
    assert scrub_secrets(3.5) == 3.5
    assert scrub_secrets(None) is None


def test_a_cycle_is_cut() -> None:
    value: dict[str, Any] = {"name": "x"}
    value["self"] = value
    assert scrub_secrets(value) == {"name": "x", "self": "[cycle]"}


# -- personal data -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("digits", "valid"),
    [
        ("52998224725", True),
        ("12709128527", True),
        ("11144477735", True),
        ("52998224726", False),
        ("52998224715", False),
        ("11111111111", False),
        ("5299822472", False),
        ("5299822472a", False),
    ],
)
def test_cpf_check_digits(digits: str, valid: bool) -> None:
    assert is_valid_cpf(digits) is valid


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"CPF {CPF_FORMATTED} do cliente", "CPF [cpf] do cliente"),
        ("CPF 529.982.247-26 digitado errado", "CPF [cpf] digitado errado"),
        (f"cpf={CPF};", "cpf=[cpf];"),
        (f"numero {CPF_WRONG_DIGIT}", f"numero {CPF_WRONG_DIGIT}"),
        ("Ana <ana.souza+nfe@example.com.br>", "Ana <[email]>"),
        ("mailto:joao_silva@mail.example.org", "mailto:[email]"),
        ("ligue +55 (11) 91234-5678 hoje", "ligue [phone] hoje"),
        ("+5511912345678", "[phone]"),
        ("+55 11 3456-7890", "[phone]"),
        ("tel (11) 1234-5678.", "tel [phone]."),
        ("tel (21)99790-0276", "tel [phone]"),
        ("whatsapp 21 99790-0276", "whatsapp [phone]"),
        ("TEL.21-2588-1418", "TEL.[phone]"),
        ("celular 11912345678", "celular [phone]"),
    ],
)
def test_personal_data_in_strings(text: str, expected: str) -> None:
    assert redact_personal(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        NFE_KEY,
        f"NFe{NFE_KEY}",
        "4314 1003 6827 5900 0190 6500 2000 0000 4010 0000 0405",
        CNPJ,
        "03.682.759/0001-90",
        "vNF 516.00 e R$ 1.234,56",
        "emitida em 2014-10-20T16:05:59-02:00, vence 09/11/2014",
        "CEP 95765-000",
        "nProt 143140001858029",
        "10 1234-5678",  # 10 is not a DDD
        "11 1234 5678",  # a bare DDD needs a dash inside the number
        "12345678901",  # 11 digits, neither a valid CPF nor DDD + mobile
        "sha256 a3f91270912852700bc",  # digits inside a hash
    ],
)
def test_values_that_are_not_personal_data_are_kept(text: str) -> None:
    assert redact_personal(text) == text


def test_numbers_are_never_masked() -> None:
    assert redact_personal({"vNF": 516.0, "n": 52998224725}) == {"vNF": 516.0, "n": 52998224725}


def _record(dest: Dest | None) -> dict[str, Any]:
    return NfeRecord(
        source="nota.xml",
        sha256="0" * 64,
        status="ok",
        ide=Ide(chNFe=NFE_KEY, mod="65", nNF="40", dhEmi="2014-10-20T16:05:59-02:00"),
        emit=Emit(CNPJ=CNPJ, xNome="LAURO WEBER & CIA LTDA", IE="0470015470", UF="RS"),
        dest=dest,
        total=Total(vProd="516.00", vNF="516.00"),
    ).model_dump()


def test_record_recipient_with_cpf_loses_name_and_cpf() -> None:
    record = _record(Dest(CPF=CPF, xNome="Maria da Silva", UF="RS", cPais="1058"))
    redacted = redact_personal(record)
    assert redacted["dest"] == {
        "CNPJ": None,
        "CPF": "[cpf]",
        "idEstrangeiro": None,
        "xNome": "[name]",
        "UF": "RS",
        "cPais": "1058",
    }
    assert redacted["emit"] == record["emit"]
    assert redacted["ide"] == record["ide"]
    assert redacted["total"] == record["total"]
    assert record["dest"]["xNome"] == "Maria da Silva"  # the input is untouched


def test_record_recipient_with_invalid_cpf_is_still_an_individual() -> None:
    redacted = redact_personal(_record(Dest(CPF=CPF_WRONG_DIGIT, xNome="Maria")))
    assert (redacted["dest"]["CPF"], redacted["dest"]["xNome"]) == ("[cpf]", "[name]")


def test_record_foreign_recipient_counts_as_an_individual() -> None:
    redacted = redact_personal(_record(Dest(idEstrangeiro="", xNome="John Doe", UF="EX")))
    assert redacted["dest"]["xNome"] == "[name]"
    assert redacted["dest"]["idEstrangeiro"] == ""


def test_record_recipient_company_keeps_its_name() -> None:
    record = _record(Dest(CNPJ="17812455000295", xNome="MUNIK DOCES LTDA", UF="SP"))
    assert redact_personal(record) == record


def test_record_without_recipient_is_unchanged() -> None:
    record = _record(None)
    assert redact_personal(record) == record


def test_xml_text_recipient_with_cpf() -> None:
    xml = (
        "<NFe><infNFe><emit><CNPJ>03682759000190</CNPJ><xNome>LOJA LTDA</xNome>"
        "<enderEmit><fone>5136374747</fone></enderEmit></emit>"
        f"<dest><CPF>{CPF}</CPF><xNome>Maria da Silva</xNome>"
        "<enderDest><xLgr>RUA A</xLgr><fone>1140000000</fone></enderDest>"
        "<email>maria@example.com</email></dest>"
        "<total><ICMSTot><vNF>516.00</vNF></ICMSTot></total></infNFe></NFe>"
    )
    assert redact_personal(xml) == (
        "<NFe><infNFe><emit><CNPJ>03682759000190</CNPJ><xNome>LOJA LTDA</xNome>"
        "<enderEmit><fone>5136374747</fone></enderEmit></emit>"
        "<dest><CPF>[cpf]</CPF><xNome>[name]</xNome>"
        "<enderDest><xLgr>RUA A</xLgr><fone>[phone]</fone></enderDest>"
        "<email>[email]</email></dest>"
        "<total><ICMSTot><vNF>516.00</vNF></ICMSTot></total></infNFe></NFe>"
    )


def test_xml_text_recipient_company_keeps_its_name() -> None:
    xml = "<dest><CNPJ>17812455000295</CNPJ><xNome>MUNIK DOCES LTDA</xNome></dest>"
    assert redact_personal(xml) == xml


def test_xml_text_with_namespace_prefixes() -> None:
    xml = f"<nfe:dest><nfe:CPF>{CPF}</nfe:CPF><nfe:xNome>Maria</nfe:xNome></nfe:dest>"
    assert redact_personal(xml) == (
        "<nfe:dest><nfe:CPF>[cpf]</nfe:CPF><nfe:xNome>[name]</nfe:xNome></nfe:dest>"
    )


def test_keys_are_redacted_too_and_never_collide() -> None:
    value = {"ana@example.com": 1, "bia@example.com": 2, "n": 3}
    assert redact_personal(value) == {"[email]": 1, "[email]#1": 2, "n": 3}


def test_identifier_keys_skip_pattern_masking() -> None:
    # An 11-digit IE (Mato Grosso) with a valid CPF check digit and a digest stay as they are.
    value = {"IE": CPF, "sha256": f"ab{CPF}cd", "note": CPF}
    assert redact_personal(value) == {"IE": CPF, "sha256": f"ab{CPF}cd", "note": "[cpf]"}


# -- the Redactor ----------------------------------------------------------------------------


def test_redactor_without_personal_masks_secrets_only() -> None:
    value = {"api_key": "k", "note": f"{CPF_FORMATTED} Bearer abcdefgh12345678"}
    assert Redactor()(value) == {"api_key": "[secret]", "note": f"{CPF_FORMATTED} Bearer [secret]"}


def test_redactor_with_personal_masks_both() -> None:
    value = {
        "api_key": "k",
        "note": f"{CPF_FORMATTED} Bearer abcdefgh12345678 ana@example.com",
        "dest": {"CPF": CPF, "xNome": "Ana"},
    }
    assert Redactor(personal=True)(value) == {
        "api_key": "[secret]",
        "note": "[cpf] Bearer [secret] [email]",
        "dest": {"CPF": "[cpf]", "xNome": "[name]"},
    }
    assert repr(Redactor(personal=True)) == "Redactor(personal=True)"


#: Texts that would make a pattern that backtracks take quadratic time: ``prefix``, then
#: ``unit`` repeated, then ``suffix``; a megabyte at the largest ``count``.
_LONG_TEXTS = {
    "letters": ("", "a", "@", 1_000_000),
    "at": ("", "a@", "", 500_000),
    "sk": ("", "sk-ab ", "", 200_000),
    "jwt": ("", "eyJ", "", 330_000),
    "cpfs": ("", "12709128527 ", "", 90_000),
    "dest": ("", "<dest ", "CPF", 200_000),
    "token": ("", "token ", "", 200_000),
    "blanks": ("Bearer", " ", "", 1_000_000),
    "ddd": ("", "(11) ", "", 200_000),
}


def _calls(redactor: Redactor, text: str) -> int:
    """The Python and built-in function calls of one redaction of ``text``."""
    profile = cProfile.Profile()
    profile.runcall(redactor, text)
    return int(pstats.Stats(profile).total_calls)  # type: ignore[attr-defined]


def _cpu_seconds(redactor: Redactor, text: str) -> float:
    """The CPU time of this thread over one redaction of ``text`` (time waiting for a core
    left out, so other processes on the machine do not count)."""
    started = time.thread_time()
    redactor(text)
    return time.thread_time() - started


@pytest.mark.parametrize("name", list(_LONG_TEXTS))
def test_long_texts_are_handled_in_linear_time(name: str) -> None:
    # Four times the text is at most four times the calls (exact: they are counted), and
    # well under sixteen times the CPU, which a scan from every position would take: the
    # least of three interleaved measures, this thread's CPU time, so a busy machine moves
    # neither side (measured 3.2-4.3 at a load of 5-10).
    prefix, unit, suffix, count = _LONG_TEXTS[name]
    redactor = Redactor(personal=True)

    def text(size: int) -> str:
        return prefix + unit * size + suffix

    redactor(text(count // 64))  # the patterns it needs compiled, its caches made
    assert _calls(redactor, text(count // 16)) <= 4 * _calls(redactor, text(count // 64))
    short, long = text(count // 16), text(count // 4)
    collecting = gc.isenabled()
    gc.disable()
    try:
        times = [(_cpu_seconds(redactor, short), _cpu_seconds(redactor, long)) for _ in range(3)]
    finally:
        if collecting:
            gc.enable()
    assert min(t for t, _ in times) > 0
    assert min(t for _, t in times) < 8 * min(t for t, _ in times)


# -- a real shared NFC-e ---------------------------------------------------------------------


@pytest.fixture
def shared_nfce() -> Path:
    folder = os.environ.get("PLANDAG_SHARED_NFE")
    if not folder or not (Path(folder) / NFCE_WITH_CPF_RECIPIENT).is_file():
        pytest.skip("the shared NF-e corpus (PLANDAG_SHARED_NFE) is not available")
    return Path(folder) / NFCE_WITH_CPF_RECIPIENT


def test_real_nfce_xml_masks_the_recipient_only(shared_nfce: Path) -> None:
    text = shared_nfce.read_text(encoding="utf-8")
    redacted = redact_personal(text)
    assert "12709128527" in text
    assert "12709128527" not in redacted
    assert "NF-E EMITIDA EM AMBIENTE DE HOMOLOGACAO" not in redacted
    assert "<dest><CPF>[cpf]</CPF><xNome>[name]</xNome>" in redacted
    assert "<xNome>LAURO WEBER &amp; CIA LTDA</xNome>" in redacted
    # Nothing else changes: the two masked values are the whole difference.
    expected = text.replace("<CPF>12709128527</CPF>", "<CPF>[cpf]</CPF>").replace(
        "<xNome>NF-E EMITIDA EM AMBIENTE DE HOMOLOGACAO - SEM VALOR FISCAL</xNome>",
        "<xNome>[name]</xNome>",
    )
    assert redacted == expected


def test_real_nfce_as_a_record(shared_nfce: Path) -> None:
    root = etree.fromstring(shared_nfce.read_bytes())
    namespace = {"n": "http://www.portalfiscal.inf.br/nfe"}

    def group(name: str) -> dict[str, str]:
        element = root.find(f".//n:infNFe/n:{name}", namespace)
        assert element is not None
        return {
            etree.QName(child).localname: child.text or ""
            for child in element
            if etree.QName(child).localname in ("CNPJ", "CPF", "xNome", "IE")
        }

    record = NfeRecord(
        source=str(shared_nfce),
        sha256="0" * 64,
        status="ok",
        ide=Ide(chNFe="43141003682759000190650020000000401000000405", mod="65"),
        emit=Emit(**group("emit")),
        dest=Dest(**group("dest")),
    ).model_dump()
    redacted = Redactor(personal=True)(record)
    assert redacted["dest"]["CPF"] == "[cpf]"
    assert redacted["dest"]["xNome"] == "[name]"
    assert redacted["emit"] == {
        "CNPJ": "03682759000190",
        "CPF": None,
        "xNome": "LAURO WEBER & CIA LTDA",
        "IE": "0470015470",
        "UF": None,
    }
    assert redacted["ide"]["chNFe"] == "43141003682759000190650020000000401000000405"


# -- logging ---------------------------------------------------------------------------------


@pytest.fixture
def restore_logging() -> Iterator[None]:
    factory = logging.getLogRecordFactory()
    root = logging.getLogger()
    filters = list(root.filters)
    try:
        yield
    finally:
        logging.setLogRecordFactory(factory)
        root.filters[:] = filters
        for handler in root.handlers:
            handler.filters[:] = [f for f in handler.filters if not isinstance(f, SecretFilter)]


def test_filter_on_a_logger_scrubs_message_and_args(
    caplog: pytest.LogCaptureFixture, restore_logging: None
) -> None:
    logger = logging.getLogger("plandag.tests.redact")
    installed = install_secret_filter(logger)
    try:
        assert install_secret_filter(logger) is installed  # not installed twice
        assert [type(f) for f in logger.filters] == [SecretFilter]
        with caplog.at_level(logging.DEBUG, logger="plandag.tests.redact"):
            logger.debug("Request options: %s", {"headers": {"x-api-key": ANTHROPIC_KEY}})
            logger.debug("sending %s with %r", "Authorization: Bearer abcdefgh12345678", 3)
        assert [record.getMessage() for record in caplog.records] == [
            "Request options: {'headers': {'x-api-key': '[secret]'}}",
            "sending Authorization: Bearer [secret] with 3",
        ]
        assert ANTHROPIC_KEY not in caplog.text
        assert "abcdefgh12345678" not in caplog.text
    finally:
        logger.removeFilter(installed)


def test_global_install_scrubs_every_logger_at_debug(
    caplog: pytest.LogCaptureFixture, restore_logging: None
) -> None:
    install_secret_filter()
    install_secret_filter()  # idempotent
    caplog.set_level(logging.DEBUG)
    httpx_logger = logging.getLogger("httpx")
    anthropic_logger = logging.getLogger("anthropic._base_client")
    httpx_logger.debug("HTTP Request: POST %s headers=%s", "https://x/v1", [("x-api-key", "k1")])
    anthropic_logger.debug("api key %s", ANTHROPIC_KEY)
    try:
        raise ValueError(f"refused key {ANTHROPIC_KEY}")
    except ValueError:
        anthropic_logger.exception("failed")
    text = caplog.text
    assert ANTHROPIC_KEY not in text
    assert "'k1'" not in text
    assert [record.getMessage() for record in caplog.records] == [
        "HTTP Request: POST https://x/v1 headers=[('x-api-key', '[secret]')]",
        "api key [secret]",
        "failed",
    ]
    assert "ValueError: refused key [secret]" in text


def test_a_malformed_log_call_is_still_scrubbed(restore_logging: None) -> None:
    record = logging.LogRecord(
        "x", logging.INFO, __file__, 1, "token=%s %s", (ANTHROPIC_KEY,), None
    )
    assert SecretFilter().filter(record) is True
    assert record.msg == "token=[secret] %s"
    assert record.args == ("[secret]",)


@settings(max_examples=200, deadline=None)
@given(
    text=st.lists(
        st.sampled_from(
            [*"aB1 :=,-@.()/\u0131", "sk-", "eyJ", "Bearer ", "token", "98765432", "52998224725"]
        ),
        max_size=12,
    ).map("".join),
    personal=st.booleans(),
)
def test_redactor_text_is_the_value_under_a_plain_key(text: str, personal: bool) -> None:
    redactor = Redactor(personal=personal)
    assert redactor.text(text) == redactor({"detail": text})["detail"]
