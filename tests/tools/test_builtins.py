"""The built-in tools: read_file, write_json, xml_select, json_select."""

from __future__ import annotations

import json
import os
import typing
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import ValidationError

from plandag.errors import PermanentStepError
from plandag.tools import (
    BUILTIN_TOOLS,
    Tool,
    WriteResult,
    json_select,
    read_file,
    write_json,
    xml_select,
)
from plandag.tools.xml import parse_xml

NFE_DEFAULT = b"""<?xml version="1.0" encoding="UTF-8"?>
<nfeProc xmlns="http://www.portalfiscal.inf.br/nfe" versao="4.00">
  <NFe>
    <infNFe Id="NFe35180834128745000152550010000476121675985748" versao="4.00">
      <emit><CNPJ>34128745000152</CNPJ><xNome>Emitente Ltda</xNome></emit>
      <det nItem="1"><prod><cProd>A1</cProd><vProd>10.00</vProd></prod></det>
      <det nItem="2"><prod><cProd>B2</cProd><vProd>5.50</vProd></prod></det>
      <total><ICMSTot><vNF>15.50</vNF></ICMSTot></total>
      <autXML><CNPJ>99999999000191</CNPJ></autXML>
    </infNFe>
  </NFe>
  <protNFe xmlns="" versao="4.00"><infProt><cStat>100</cStat></infProt></protNFe>
</nfeProc>
"""

NFE_PREFIXED = b"""<ns:NFe xmlns:ns="http://www.portalfiscal.inf.br/nfe">
  <ns:infNFe Id="NFe26180875335849000115550010000016871192213331">
    <ns:det nItem="1"><ns:prod><ns:cProd>X</ns:cProd></ns:prod></ns:det>
    <ns:total><ns:ICMSTot><ns:vNF>5780.00</ns:vNF></ns:ICMSTot></ns:total>
  </ns:infNFe>
</ns:NFe>
"""


def invoke(item: Tool, **args: Any) -> Any:
    """Run a tool through Tool.invoke, as the scheduler does (args validated)."""

    async def main() -> Any:
        return await item.invoke(args)

    return anyio.run(main)


def test_builtin_tools_list() -> None:
    assert [item.name for item in BUILTIN_TOOLS] == [
        "read_file",
        "write_json",
        "xml_select",
        "json_select",
    ]
    assert [item.inline for item in BUILTIN_TOOLS] == [True, False, True, True]
    assert [item.effects for item in BUILTIN_TOOLS] == ["none", "write", "none", "none"]
    assert all(item.idempotent for item in BUILTIN_TOOLS)
    assert write_json.writes == "path"
    assert read_file.result_type == str | bytes
    assert write_json.result_type is WriteResult


# --- xml_select -------------------------------------------------------------------------


def test_xml_select_default_namespace_first_match() -> None:
    assert invoke(xml_select, xml=NFE_DEFAULT, path="//nfe:vNF") == "15.50"
    assert invoke(xml_select, xml=NFE_DEFAULT, path="//nfe:cProd") == "A1"


def test_xml_select_prefixed_namespace() -> None:
    assert xml_select(NFE_PREFIXED, path="//nfe:vNF") == "5780.00"
    assert xml_select(NFE_PREFIXED, path="//nfe:infNFe/@Id") == (
        "NFe26180875335849000115550010000016871192213331"
    )


def test_xml_select_all_matches() -> None:
    assert xml_select(NFE_DEFAULT, path="//nfe:cProd", all=True) == ["A1", "B2"]
    assert xml_select(NFE_DEFAULT, path="//nfe:missing", all=True) == []


def test_xml_select_attribute() -> None:
    assert xml_select(NFE_DEFAULT, path="//nfe:infNFe/@Id") == (
        "NFe35180834128745000152550010000476121675985748"
    )


def test_xml_select_missing_path_is_none() -> None:
    assert xml_select(NFE_DEFAULT, path="//nfe:dest/nfe:CNPJ") is None


def test_xml_select_full_path_skips_other_groups() -> None:
    assert xml_select(NFE_DEFAULT, path="//nfe:CNPJ", all=True) == [
        "34128745000152",
        "99999999000191",
    ]
    assert xml_select(NFE_DEFAULT, path="//nfe:emit/nfe:CNPJ") == "34128745000152"


def test_xml_select_protocol_in_no_namespace() -> None:
    assert xml_select(NFE_DEFAULT, path="//nfe:cStat") is None
    assert xml_select(NFE_DEFAULT, path="//*[local-name()='protNFe']//*[local-name()='cStat']") == (
        "100"
    )


def test_xml_select_paths() -> None:
    assert xml_select(
        NFE_DEFAULT,
        paths={
            "key": "//nfe:infNFe/@Id",
            "cnpj": "//nfe:emit/nfe:CNPJ",
            "total": "//nfe:vNF",
            "items": "count(//nfe:det)",
            "dest": "//nfe:dest/nfe:CNPJ",
        },
    ) == {
        "key": "NFe35180834128745000152550010000476121675985748",
        "cnpj": "34128745000152",
        "total": "15.50",
        "items": "2",
        "dest": None,
    }


def test_xml_select_each_item() -> None:
    assert xml_select(
        NFE_DEFAULT,
        each="//nfe:det",
        paths={"n": "@nItem", "code": "nfe:prod/nfe:cProd", "value": "nfe:prod/nfe:vProd"},
    ) == [
        {"n": "1", "code": "A1", "value": "10.00"},
        {"n": "2", "code": "B2", "value": "5.50"},
    ]
    assert xml_select(NFE_PREFIXED, each="//nfe:det", path="nfe:prod/nfe:cProd") == ["X"]
    assert xml_select(NFE_DEFAULT, each="//nfe:none", path="@nItem") == []


def test_xml_select_parsed_element_and_tree() -> None:
    root = parse_xml(NFE_DEFAULT)
    assert xml_select(root, path="//nfe:vNF") == "15.50"
    assert invoke(xml_select, xml=root.getroottree(), path="//nfe:vNF") == "15.50"


def test_xml_select_text_input_with_declaration() -> None:
    text = NFE_DEFAULT.decode("utf-8")
    assert xml_select(text, path="//nfe:xNome") == "Emitente Ltda"


def test_xml_select_user_namespaces() -> None:
    document = b'<a xmlns="urn:example"><b>1</b></a>'
    assert xml_select(document, path="//e:b", namespaces={"e": "urn:example"}) == "1"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            {},
            "xml_select needs exactly one of 'path' (one XPath) or 'paths' (name → XPath); "
            "neither given",
        ),
        (
            {"path": "//a", "paths": {"a": "//a"}},
            "xml_select needs exactly one of 'path' "
            "(one XPath) or 'paths' (name → XPath); both given",
        ),
    ],
)
def test_xml_select_needs_path_or_paths(args: dict[str, Any], message: str) -> None:
    with pytest.raises(PermanentStepError) as caught:
        xml_select(NFE_DEFAULT, **args)
    assert caught.value.reason == "invalid_args"
    assert str(caught.value) == message


def test_xml_select_bad_xpath() -> None:
    with pytest.raises(PermanentStepError) as caught:
        xml_select(NFE_DEFAULT, paths={"ok": "//nfe:vNF", "bad": "//nfe:vNF[["})
    assert caught.value.reason == "invalid_xpath"
    assert str(caught.value) == "invalid XPath '//nfe:vNF[[': Invalid expression"


def test_xml_select_bad_xpath_reported_before_parsing() -> None:
    with pytest.raises(PermanentStepError) as caught:
        xml_select(b"<not xml", path="//[")
    assert caught.value.reason == "invalid_xpath"


def test_xml_select_invalid_xml() -> None:
    with pytest.raises(PermanentStepError) as caught:
        xml_select(b"<NFe>\n<infNFe>\n</NFe>", path="//nfe:vNF")
    assert caught.value.reason == "invalid_xml"
    assert str(caught.value) == (
        "invalid XML at line 3, column 7: Opening and ending tag mismatch: "
        "infNFe line 2 and NFe, line 3, column 7"
    )


def test_xml_select_wrong_input_type() -> None:
    with pytest.raises(PermanentStepError) as caught:
        xml_select(42, path="//a")
    assert caught.value.reason == "invalid_args"
    assert str(caught.value) == "xml must be XML text, bytes or a parsed element, not a int"


def test_xml_select_unknown_argument_refused() -> None:
    with pytest.raises(ValidationError):
        invoke(xml_select, xml=NFE_DEFAULT, path="//a", first=True)


# --- read_file --------------------------------------------------------------------------


def test_read_file_utf8_strips_bom(tmp_path: Path) -> None:
    file = tmp_path / "bom.xml"
    file.write_bytes(b"\xef\xbb\xbf<a>S\xc3\xa3o</a>")
    assert invoke(read_file, path=str(file)) == "<a>São</a>"
    assert read_file(str(file), encoding="utf-8-sig") == "<a>São</a>"


def test_read_file_latin1(tmp_path: Path) -> None:
    file = tmp_path / "latin.txt"
    file.write_bytes(b"Jo\xe3o")
    assert read_file(str(file), encoding="iso-8859-1") == "João"


def test_read_file_binary(tmp_path: Path) -> None:
    file = tmp_path / "raw.bin"
    file.write_bytes(b"\xef\xbb\xbf\x00\xff")
    assert read_file(str(file), encoding="binary") == b"\xef\xbb\xbf\x00\xff"
    assert read_file(str(file), encoding="bytes") == b"\xef\xbb\xbf\x00\xff"


def test_read_file_missing(tmp_path: Path) -> None:
    missing = tmp_path / "nope.xml"
    with pytest.raises(PermanentStepError) as caught:
        invoke(read_file, path=str(missing))
    assert caught.value.reason == "missing_resource"
    assert str(caught.value) == (
        f"read_file {missing}: no such file (looked in {missing}); check the path or "
        "the --param that gave it"
    )


def test_read_file_folder(tmp_path: Path) -> None:
    with pytest.raises(PermanentStepError) as caught:
        read_file(str(tmp_path))
    assert caught.value.reason == "missing_resource"
    assert str(caught.value) == (
        f"read_file {tmp_path}: is a folder, not a file; name a file inside it"
    )


def test_read_file_reads_every_byte_of_a_file_given_in_short_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read may return fewer bytes than asked before the end of the file (a network
    filesystem): the file is still read whole, and still refused when too large."""
    file = tmp_path / "a.xml"
    file.write_bytes(b"0123456789")
    real_read = os.read
    monkeypatch.setattr(os, "read", lambda descriptor, count: real_read(descriptor, min(count, 3)))
    assert read_file(str(file), encoding="binary") == b"0123456789"
    assert read_file(str(file), encoding="binary", max_bytes=10) == b"0123456789"
    with pytest.raises(PermanentStepError) as caught:
        read_file(str(file), encoding="binary", max_bytes=9)
    assert caught.value.reason == "too_large"


def test_read_file_too_large(tmp_path: Path) -> None:
    file = tmp_path / "big.txt"
    file.write_bytes(b"x" * 11)
    assert read_file(str(file), max_bytes=11) == "x" * 11
    with pytest.raises(PermanentStepError) as caught:
        read_file(str(file), max_bytes=10)
    assert caught.value.reason == "too_large"
    assert str(caught.value) == (
        f"read_file {file}: the file has 11 bytes, more than max_bytes=10; raise max_bytes "
        "if it is really meant to be read"
    )


def test_read_file_decode_error_names_offset(tmp_path: Path) -> None:
    file = tmp_path / "latin.xml"
    file.write_bytes(b"\xef\xbb\xbf<a>Jo\xe3o</a>")
    with pytest.raises(PermanentStepError) as caught:
        read_file(str(file))
    assert caught.value.reason == "decode_error"
    assert str(caught.value) == (
        f"read_file {file}: byte 0xe3 at byte offset 8 is not valid utf-8 (invalid "
        "continuation byte); pass encoding='binary' to get the raw bytes (XML parsers read "
        "the encoding from the document), or the file's real encoding such as 'iso-8859-1'"
    )


def test_read_file_unknown_encoding(tmp_path: Path) -> None:
    file = tmp_path / "a.txt"
    file.write_bytes(b"a")
    with pytest.raises(PermanentStepError) as caught:
        read_file(str(file), encoding="klingon")
    assert caught.value.reason == "invalid_args"


# --- write_json -------------------------------------------------------------------------


def test_write_json_creates_folders_and_returns_write_result(tmp_path: Path) -> None:
    target = tmp_path / "out" / "deep" / "record.json"
    data = {"chave": "3518…", "vNF": Decimal("15.50"), "itens": [1, 2], "nome": "João"}
    result = invoke(write_json, path=str(target), data=data)
    text = (
        '{\n  "chave": "3518…",\n  "vNF": "15.50",\n'
        '  "itens": [\n    1,\n    2\n  ],\n  "nome": "João"\n}\n'
    )
    assert target.read_text(encoding="utf-8") == text
    assert result == {"path": str(target), "bytes": len(text.encode("utf-8"))}
    assert sorted(os.listdir(target.parent)) == ["record.json"]


def test_write_json_overwrites_atomically(tmp_path: Path) -> None:
    target = tmp_path / "a.json"
    target.write_text("old", encoding="utf-8")
    inode_before = target.stat().st_ino
    assert write_json(str(target), [1], indent=None) == {"path": str(target), "bytes": 4}
    assert target.read_text(encoding="utf-8") == "[1]\n"
    # os.replace of a new file: a new inode, never the old file truncated in place.
    assert target.stat().st_ino != inode_before
    assert write_json(str(target), [1], indent=None) == {"path": str(target), "bytes": 4}
    assert os.listdir(tmp_path) == ["a.json"]


def test_write_json_relative_path_is_returned_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert write_json("x/y.json", {}) == {"path": str(tmp_path / "x" / "y.json"), "bytes": 3}


def test_write_json_unserializable_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "bad.json"
    with pytest.raises(PermanentStepError) as caught:
        write_json(str(target), {"x": object()})
    assert caught.value.reason == "not_serializable"
    assert str(caught.value) == (
        f"write_json {target}: data cannot be written as JSON: values of type object are not JSON "
        "serializable"
    )
    with pytest.raises(PermanentStepError) as caught:
        write_json(str(target), {"x": float("nan")})
    assert caught.value.reason == "not_serializable"
    assert os.listdir(tmp_path) == []


def test_write_json_onto_a_folder_fails_cleanly(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    with pytest.raises(PermanentStepError) as caught:
        write_json(str(tmp_path / "taken"), {})
    assert caught.value.reason == "io_error"
    assert os.listdir(tmp_path) == ["taken"]


def test_write_result_fields_for_reference_checks() -> None:
    assert typing.get_type_hints(WriteResult) == {"path": str, "bytes": int}


# --- json_select ------------------------------------------------------------------------


def test_json_select_on_dict_and_text() -> None:
    data = {"items": [{"name": "a", "price": 5}, {"name": "b", "price": 20}]}
    assert invoke(json_select, data=data, expr="items[?price > `10`].name") == ["b"]
    assert json_select(json.dumps(data), "items[0].name") == "a"
    assert json_select(json.dumps(data).encode(), "length(items)") == 2
    assert json_select(data, "missing") is None


def test_json_select_bad_expression() -> None:
    with pytest.raises(PermanentStepError) as caught:
        json_select({}, "items[?")
    assert caught.value.reason == "invalid_expression"
    assert str(caught.value).startswith("invalid JMESPath expression 'items[?': ")


def test_json_select_type_error_on_data() -> None:
    with pytest.raises(PermanentStepError) as caught:
        json_select({"a": "text"}, "abs(a)")
    assert caught.value.reason == "invalid_expression"


def test_json_select_invalid_json_text() -> None:
    with pytest.raises(PermanentStepError) as caught:
        json_select('{"a": 1,', "a")
    assert caught.value.reason == "invalid_json"
    assert str(caught.value) == (
        "json_select: data is not valid JSON at line 1, column 9: "
        "Expecting property name enclosed in double quotes"
    )


def test_write_json_failure_keeps_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "a.json"
    target.write_text("old", encoding="utf-8")

    def failing_rename(source: Any, destination: Any, **descriptors: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "rename", failing_rename)
    with pytest.raises(PermanentStepError) as caught:
        write_json(str(target), {"new": True})
    assert caught.value.reason == "io_error"
    assert str(caught.value) == f"write_json {target}: cannot write: No space left on device"
    assert target.read_text(encoding="utf-8") == "old"
    assert os.listdir(tmp_path) == ["a.json"]


def test_read_file_refuses_pipes_and_devices_without_blocking(tmp_path: Path) -> None:
    """A FIFO would block the event loop at open(); it is refused instead (never read)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for target in (str(fifo), "/dev/zero"):
        with pytest.raises(PermanentStepError) as caught:
            anyio.run(read_file.invoke, {"path": target, "encoding": "binary"})
        assert caught.value.reason == "not_a_file"
        assert "not a regular file" in str(caught.value)
