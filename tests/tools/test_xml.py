"""plandag.tools.xml: hardened parsing, namespace defaults, XPath conversion and caching."""

from __future__ import annotations

import pytest
from lxml import etree

from plandag.errors import PermanentStepError
from plandag.tools.xml import (
    DEFAULT_NAMESPACES,
    NFE_NAMESPACE,
    compile_xpath,
    parse_xml,
    select,
    select_elements,
)

NFE = NFE_NAMESPACE


def test_namespace_constants() -> None:
    assert NFE_NAMESPACE == "http://www.portalfiscal.inf.br/nfe"
    assert dict(DEFAULT_NAMESPACES) == {
        "nfe": "http://www.portalfiscal.inf.br/nfe",
        "ds": "http://www.w3.org/2000/09/xmldsig#",
    }


def test_parse_bytes_with_utf8_bom() -> None:
    data = b'\xef\xbb\xbf<?xml version="1.0" encoding="UTF-8"?><a>S\xc3\xa3o Paulo</a>'
    assert parse_xml(data).text == "São Paulo"


def test_parse_bytes_declared_iso_8859_1() -> None:
    data = '<?xml version="1.0" encoding="ISO-8859-1"?>\r\n<a>Jo\xe3o</a>'.encode("latin-1")
    assert parse_xml(data).text == "João"


def test_parse_text_with_encoding_declaration() -> None:
    text = '<?xml version="1.0" encoding="ISO-8859-1"?>\n<a>João</a>'
    assert parse_xml(text).text == "João"


def test_parse_text_with_bom_and_declaration() -> None:
    text = '\ufeff<?xml version="1.0" encoding="UTF-8"?><a>ação</a>'
    assert parse_xml(text).text == "ação"


def test_parse_text_with_bom_only() -> None:
    assert parse_xml("\ufeff<a>x</a>").text == "x"


def test_parse_error_names_line_and_column() -> None:
    with pytest.raises(PermanentStepError) as caught:
        parse_xml(b"<a>\n  <b></a>")
    assert caught.value.reason == "invalid_xml"
    assert str(caught.value).startswith("invalid XML at line 2, column ")
    assert "Opening and ending tag mismatch" in str(caught.value)


def test_parse_empty_document() -> None:
    with pytest.raises(PermanentStepError) as caught:
        parse_xml(b"")
    assert caught.value.reason == "invalid_xml"
    assert str(caught.value) == (
        "invalid XML at line 1, column 1: Document is empty, line 1, column 1"
    )


def test_entities_are_not_expanded() -> None:
    root = parse_xml(b'<!DOCTYPE a [<!ENTITY e SYSTEM "file:///etc/hostname">]><a>&e;</a>')
    assert root.text is None
    assert select(root, "string(/a)") == ""


def test_select_conversions() -> None:
    root = parse_xml(b"<r x='1'><b> t </b><b/><b>  </b><c>2.50</c></r>")
    assert select(root, "//b") == "t"
    assert select(root, "//b", all=True) == ["t", "", ""]
    assert select(root, "/r/@x") == "1"
    assert type(select(root, "/r/@x")) is str
    assert select(root, "//b/text()", all=True) == [" t ", "  "]
    assert select(root, "count(//b)") == "3"
    assert select(root, "sum(//c)") == "2.5"
    assert select(root, "number(//missing)") is None
    assert select(root, "boolean(//b)") is True
    assert select(root, "string(//c)") == "2.50"
    assert select(root, "count(//b)", all=True) == ["3"]
    assert select(root, "//missing") is None
    assert select(root, "//missing", all=True) == []


def test_select_with_own_namespace_over_defaults() -> None:
    root = parse_xml(b'<a xmlns="urn:x"><b>1</b></a>')
    assert select(root, "//nfe:b", {"nfe": "urn:x"}) == "1"
    assert select(root, "//nfe:b") is None


def test_invalid_xpath_names_expression() -> None:
    root = parse_xml(b"<a/>")
    with pytest.raises(PermanentStepError) as caught:
        select(root, "//a[")
    assert caught.value.reason == "invalid_xpath"
    assert str(caught.value) == "invalid XPath '//a[': Invalid expression"


def test_undeclared_prefix_is_invalid_xpath() -> None:
    with pytest.raises(PermanentStepError) as caught:
        select(parse_xml(b"<a/>"), "//foo:a")
    assert caught.value.reason == "invalid_xpath"
    assert str(caught.value) == "invalid XPath '//foo:a': Undefined namespace prefix"


def test_empty_prefix_is_invalid_args() -> None:
    with pytest.raises(PermanentStepError) as caught:
        compile_xpath("//a", {"": "urn:x"})
    assert caught.value.reason == "invalid_args"


def test_compiled_xpath_is_cached() -> None:
    first = compile_xpath("//nfe:det")
    assert compile_xpath("//nfe:det") is first
    assert compile_xpath("//nfe:det", {"x": "urn:x"}) is compile_xpath("//nfe:det", {"x": "urn:x"})
    assert compile_xpath("//nfe:det", {"x": "urn:x"}) is not first
    assert isinstance(first, etree.XPath)


def test_select_elements() -> None:
    root = parse_xml(f'<NFe xmlns="{NFE}"><det nItem="1"/><det nItem="2"/></NFe>')
    found = select_elements(root, "//nfe:det")
    assert [element.get("nItem") for element in found] == ["1", "2"]
    with pytest.raises(PermanentStepError) as caught:
        select_elements(root, "count(//nfe:det)")
    assert caught.value.reason == "invalid_args"
    assert str(caught.value) == (
        "XPath 'count(//nfe:det)' must select elements (like '//nfe:det'), "
        "but it selected a float (2.0)"
    )


def test_comments_and_processing_instructions_do_not_cut_a_value() -> None:
    """A comment inside a signed NF-e field must not silently shorten its value."""
    root = parse_xml(
        b"<r><x>CONSUMIDOR<!-- c --> EXEMPLO<?pi x?> LTDA</x><v>20<!-- x -->3.51</v><e/></r>"
    )
    assert select(root, "/r/x") == "CONSUMIDOR EXEMPLO LTDA"
    assert select(root, "/r/v") == "203.51"
    assert select(root, "/r/e") == ""
    assert select(root, "/r/missing") is None
