"""Reading contract files: text, SHA-256 and extractor, or the error code of a file that
gives no text."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import pytest

from plandag import __version__
from plandag.jobs.contracts.text import ContractInputError, read_contract


def test_a_cuad_text_file_is_read_as_is_with_its_sha256(contracts_dir: Path) -> None:
    path = contracts_dir / "cuad_ADUROBIOTECH_INC_06_02_2020-EX-10.7-CONSULTING_AGREEMENT.txt"
    contract = read_contract(path)
    raw = path.read_bytes().decode("utf-8")
    assert contract.text == raw
    assert len(contract.text) == len(raw)
    assert contract.sha256 == hashlib.sha256(raw.encode("utf-8")).hexdigest()
    assert contract.extractor == {
        "name": "plandag-text",
        "version": __version__,
        "encoding": "utf-8",
    }


def test_markdown_keeps_its_line_ends_and_drops_a_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "terms.md"
    path.write_bytes(b"\xef\xbb\xbf# Terms\r\n\r\nClause 1.\r\n")
    contract = read_contract(path)
    assert contract.text == "# Terms\r\n\r\nClause 1.\r\n"


def test_a_legacy_windows_1252_text_is_read_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "old.txt"
    path.write_bytes("Cláusula “primeira”".encode("cp1252"))
    contract = read_contract(path)
    assert contract.text == "Cláusula “primeira”"
    assert contract.extractor["encoding"] == "cp1252"


def test_a_pdf_is_read_page_by_page_with_form_feeds(make_pdf: Callable[..., Path]) -> None:
    path = make_pdf("two.pdf", [["Section 1. Term", "One year."], ["Section 2. Law", "Delaware."]])
    contract = read_contract(path)
    assert contract.text == "Section 1. Term\nOne year.\fSection 2. Law\nDelaware."
    assert contract.pages == 2
    assert contract.extractor == {"name": "pypdf", "version": version("pypdf")}


def test_a_docx_gives_paragraphs_then_table_rows(make_docx: Callable[..., Path]) -> None:
    path = make_docx(
        "a.docx", ["SUPPLY AGREEMENT", "1. Term. One year."], [["Party", "Role"], ["Acme", "Buyer"]]
    )
    contract = read_contract(path)
    assert contract.text == "SUPPLY AGREEMENT\n1. Term. One year.\nParty\tRole\nAcme\tBuyer"
    assert contract.extractor == {"name": "python-docx", "version": version("python-docx")}


@pytest.mark.parametrize(
    ("name", "content", "code"),
    [
        ("empty.txt", b"", "empty"),
        ("blank.md", b"  \n\t\n", "empty"),
        ("binary.txt", b"\x00\x81\xff\x00", "unreadable"),
        ("utf8-with-nul.txt", b"Agreement\x00\x01\x02 of sale", "unreadable"),
        ("renamed.md", b"\x7fELF\x02\x01\x01\x00\x00\x00", "unreadable"),
        ("notes.doc", b"anything", "unsupported_type"),
        ("data.xlsx", b"anything", "unsupported_type"),
        ("README", b"anything", "unsupported_type"),
        ("broken.pdf", b"%PDF-1.7\nnot really", "unreadable"),
        ("broken.docx", b"PK\x03\x04 not a zip", "unreadable"),
        ("protected.docx", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1 ole", "unreadable"),
    ],
)
def test_files_without_usable_text_raise_their_code(
    tmp_path: Path, name: str, content: bytes, code: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ContractInputError) as caught:
        read_contract(path)
    assert caught.value.code == code
    assert str(path) in str(caught.value)


def test_an_encrypted_pdf_is_refused_with_what_to_do(
    make_encrypted_pdf: Callable[..., Path],
) -> None:
    with pytest.raises(ContractInputError) as caught:
        read_contract(make_encrypted_pdf("locked.pdf"))
    assert caught.value.code == "encrypted_pdf"
    assert "decrypt it first" in str(caught.value)


def test_a_pdf_encrypted_with_an_empty_user_password_is_read(
    make_encrypted_pdf: Callable[..., Path],
) -> None:
    contract = read_contract(make_encrypted_pdf("owner-only.pdf", user_password=""))
    assert contract.text == "Confidential terms."


def test_a_scanned_pdf_is_no_text_and_an_empty_pdf_is_empty(
    make_scanned_pdf: Callable[[str], Path], make_pdf: Callable[..., Path]
) -> None:
    with pytest.raises(ContractInputError) as scanned:
        read_contract(make_scanned_pdf("scan.pdf"))
    assert scanned.value.code == "no_text"
    assert "OCR" in str(scanned.value)
    with pytest.raises(ContractInputError) as blank:
        read_contract(make_pdf("blank.pdf", [[], []]))
    assert blank.value.code == "empty"


def test_a_missing_file_is_unreadable(tmp_path: Path) -> None:
    with pytest.raises(ContractInputError) as caught:
        read_contract(tmp_path / "gone.txt")
    assert caught.value.code == "unreadable"


def test_a_damaged_pdf_logs_nothing_beside_its_error_row(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "random.pdf"
    path.write_bytes(bytes(range(256)) * 20)  # no %PDF header, no %%EOF marker
    with caplog.at_level(logging.WARNING), pytest.raises(ContractInputError) as caught:
        read_contract(path)
    assert caught.value.code == "unreadable"
    assert [record.getMessage() for record in caplog.records] == []  # no nameless warnings
