"""plandag.tools.xml: hardened parsing, namespace defaults, XPath conversion and caching."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree

from plandag.errors import PermanentStepError
from plandag.tools.xml import (
    DEFAULT_NAMESPACES,
    NFE_NAMESPACE,
    compile_table,
    compile_xpath,
    evaluate_compiled,
    evaluate_table,
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


# --- Field tables: one XPath union for plain child paths, the same values as one by one ---

_NS_A = "urn:a"
_NS_B = "urn:b"
_TABLE_NAMESPACES = {"a": _NS_A, "b": _NS_B}


def _one_by_one(
    root: etree._Element, paths: dict[str, str], namespaces: dict[str, str] | None
) -> dict[str, object]:
    """The reference: each expression compiled and evaluated alone."""
    return {
        name: evaluate_compiled(root, compile_xpath(expr, namespaces))
        for name, expr in paths.items()
    }


def test_table_union_takes_each_paths_first_match_in_document_order() -> None:
    root = parse_xml(
        f'<r xmlns="{_NS_A}" Id="NFe1" versao="4.00">'
        "<g><x>first x</x></g><g><y> y1 </y><x>second x</x></g>"
        "<h><k><z>z<!-- c -->1</z></k></h><h><m><z>z2</z></m></h>"
        "</r>"
    )
    paths = {
        "z": "a:h/*/a:z",
        "x": "a:g/a:x",
        "y": "a:g/a:y",
        "Id": "@Id",
        "missing": "a:g/a:w",
        "absent_attr": "@nope",
        "has_h": "boolean(a:h)",
        "has_w": "boolean(a:w)",
    }
    table = compile_table(paths, _TABLE_NAMESPACES)
    assert evaluate_table(root, table) == {
        "z": "z1",
        "x": "first x",
        "y": "y1",
        "Id": "NFe1",
        "missing": None,
        "absent_attr": None,
        "has_h": True,
        "has_w": False,
    }
    assert list(evaluate_table(root, table)) == list(paths)
    assert evaluate_table(root, table) == _one_by_one(root, paths, _TABLE_NAMESPACES)


def test_table_sibling_paths_take_each_ones_first_match_among_the_children() -> None:
    root = parse_xml(
        f'<r xmlns="{_NS_A}"><!-- c --><g><w>w1</w><x>x1</x></g>'
        "<g><z>z2</z><x>x2</x><y> y2 </y><?pi p?><v><!-- c -->v<b/>2</v></g></r>"
    )
    paths = {"v": "a:g/a:v", "w": "a:g/a:w", "x": "a:g/a:x", "y": "a:g/a:y", "u": "a:g/a:u"}
    table = compile_table(paths, _TABLE_NAMESPACES)
    assert len(table.plan.groups) == 1  # type: ignore[attr-defined]
    assert evaluate_table(root, table) == {"v": "v2", "w": "w1", "x": "x1", "y": "y2", "u": None}
    assert evaluate_table(root, table) == _one_by_one(root, paths, _TABLE_NAMESPACES)


def test_table_paths_ending_in_the_same_name_are_evaluated_one_by_one() -> None:
    root = parse_xml(f'<r xmlns="{_NS_A}"><p><v>1</v></p><q><v>2</v></q></r>')
    paths = {"q": "a:q/a:v", "p": "a:p/a:v", "count": "count(a:p)", "deep": "//a:v"}
    table = compile_table(paths, _TABLE_NAMESPACES)
    assert evaluate_table(root, table) == {"q": "2", "p": "1", "count": "1", "deep": "1"}


def test_table_an_undeclared_prefix_is_still_invalid_xpath() -> None:
    table = compile_table({"ok": "a:x", "bad": "zz:y"}, _TABLE_NAMESPACES)
    with pytest.raises(PermanentStepError) as caught:
        evaluate_table(parse_xml(b"<r/>"), table)
    assert caught.value.reason == "invalid_xpath"
    assert str(caught.value) == "invalid XPath 'zz:y': Undefined namespace prefix"


_NAMES = ("g", "x", "and")
_SPACES = (None, _NS_A, _NS_A, _NS_B)


def _element(name: str, space: str | None, attributes: str, content: str) -> str:
    declare = f' xmlns="{space}"' if space else ' xmlns=""'
    return f'<{name}{declare} xmlns:a="{_NS_A}"{attributes}>{content}</{name}>'


_ATTRIBUTES = st.lists(
    st.tuples(st.sampled_from(["Id", "k", "a:Id"]), st.sampled_from(["v", " w ", ""])),
    max_size=3,
    unique_by=lambda pair: pair[0],
).map(lambda pairs: "".join(f' {name}="{value}"' for name, value in pairs))
_OTHER_NODES = st.sampled_from([" t ", "", "<!-- c -->", "<?pi d?>", "u"])


def _trees(levels: int) -> st.SearchStrategy[str]:
    """Elements ``levels`` deep at most, with text, comments and processing instructions."""
    content = (
        st.lists(st.one_of(_trees(levels - 1), _OTHER_NODES), max_size=3).map("".join)
        if levels > 1
        else _OTHER_NODES
    )
    return st.builds(
        _element, st.sampled_from(_NAMES), st.sampled_from(_SPACES), _ATTRIBUTES, content
    )


_SUBTREES = _trees(3)


@st.composite
def _documents(draw: st.DrawFn) -> str:
    """A root whose children come twice, then more: every path that matches has a later
    match too, so a first match taken for a later one shows."""
    children = "".join(draw(st.lists(_SUBTREES, max_size=3)))
    more = "".join(draw(st.lists(_SUBTREES, max_size=2)))
    name, space = draw(st.sampled_from(_NAMES)), draw(st.sampled_from(_SPACES))
    return _element(name, space, ' Id="r"', children + more + children)


_STEPS = ("a:g", "a:x", "b:x", "x", "g", "*", "*", "and")
_LAST = ("a:g", "a:x", "b:x", "a:y", "x", "y", "and", "b:and", "a:text")


@st.composite
def _expressions(draw: st.DrawFn) -> str:
    steps = draw(st.lists(st.sampled_from(_STEPS), max_size=2))
    path = "/".join([*steps, draw(st.sampled_from(_LAST))])
    return draw(
        st.sampled_from(
            [
                path,
                path,
                path,
                f"boolean({path})",
                "@Id",
                "@k",
                "@a:Id",
                f"count({path})",
                f"//{path}",
            ]
        )
    )


_SIBLING_PARENTS = ("", "a:g", "*", "a:g/*", "x")


@st.composite
def _sibling_tables(draw: st.DrawFn) -> dict[str, str]:
    """Four or more paths under one parent (read from the parent's children), and others."""
    parent = draw(st.sampled_from(_SIBLING_PARENTS))
    lasts = draw(st.lists(st.sampled_from(_LAST), min_size=4, max_size=6, unique=True))
    paths = {
        f"s{number}": f"{parent}/{last}" if parent else last for number, last in enumerate(lasts)
    }
    paths.update(draw(st.dictionaries(st.sampled_from("abc"), _expressions(), max_size=3)))
    return paths


@settings(max_examples=150, deadline=None)
@given(
    tree=_documents(),
    paths=st.one_of(
        st.dictionaries(st.sampled_from("abcdefgh"), _expressions(), min_size=1, max_size=8),
        _sibling_tables(),
    ),
)
def test_table_union_equals_one_by_one_evaluation(tree: str, paths: dict[str, str]) -> None:
    root = parse_xml(tree)
    for number, element in enumerate(root.iter(etree.Element)):
        if element.text is not None and element.text.strip():  # every value its own
            element.text = f" {element.text.strip()}{number} "
        if element.get("Id"):
            element.set("Id", f"{element.get('Id')}{number}")
    table = compile_table(paths, _TABLE_NAMESPACES)
    for node in [root, *root.iterchildren(etree.Element)]:
        assert evaluate_table(node, table) == _one_by_one(node, paths, _TABLE_NAMESPACES)
