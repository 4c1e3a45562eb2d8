"""The NF-e per-document path's shortcuts give what the plain way gives: template probes as
one XPath union, protocol and event fields in one pass over the children, the stored plan's
field tables evaluated by union."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree

from plandag.extract.nfe.document import (
    PLACEHOLDER_VALUES,
    _child_text,
    _child_texts,
    _placeholder_count,
    load_plan_text,
    parse_document,
)
from plandag.extract.nfe.tools import NfeInvoice, nfe_invoice
from plandag.tools.xml import NFE_NAMESPACE, compile_table

NS = NFE_NAMESPACE
_PROBES = tuple(
    etree.XPath(path, namespaces={"nfe": NS})
    for path in (
        "nfe:ide/nfe:cNF",
        "nfe:ide/nfe:nNF",
        "nfe:ide/nfe:dhEmi",
        "nfe:emit/nfe:CNPJ",
        "nfe:total/nfe:ICMSTot/nfe:vNF",
    )
)


def _placeholders_one_probe_at_a_time(invoice: etree._Element) -> int:
    """The reference: ``Id``, ``versao`` and each probe's first match, one XPath each."""
    texts = [invoice.get("Id"), invoice.get("versao")]
    for probe in _PROBES:
        found: Any = probe(invoice)
        texts.append(found[0].text if found else None)
    return sum(
        1 for text in texts if text is not None and text.strip().lower() in PLACEHOLDER_VALUES
    )


def test_stored_plan_field_tables_are_evaluated_by_union() -> None:
    plan = json.loads(load_plan_text())
    tables = [step["args"]["paths"] for step in plan["steps"] if step["tool"] == "xml_select"]
    assert len(tables) == 5
    for paths in tables:
        assert compile_table(paths).plan.others == ()  # type: ignore[attr-defined]


def test_placeholder_probe_takes_the_first_match_of_each_path() -> None:
    invoice = etree.fromstring(
        f'<infNFe xmlns="{NS}" Id="NFe1" versao="4.00">'
        "<ide><cNF>12345678</cNF></ide>"
        "<ide><cNF>string</cNF><nNF> String </nNF></ide>"
        "<emit><CNPJ>?</CNPJ></emit><emit><CNPJ>1</CNPJ></emit>"
        "<total><ICMSTot><vNF>token</vNF></ICMSTot></total>"
        "</infNFe>"
    )
    assert _placeholder_count(invoice) == 3  # nNF, the first CNPJ, vNF; not the second cNF
    assert _placeholder_count(invoice) == _placeholders_one_probe_at_a_time(invoice)


_VALUES = ("string", "?", "1", "", " Token ")


@st.composite
def _groups(draw: st.DrawFn, name: str, fields: tuple[str, ...]) -> str:
    children = []
    for field in draw(st.lists(st.sampled_from(fields), max_size=4)):
        text = draw(st.sampled_from(_VALUES))
        extra = draw(st.sampled_from(["", "<!-- c -->", "<x/>"]))
        children.append(f"<{field}>{text}{extra}</{field}>")
    return f"<{name}>{''.join(children)}</{name}>"


@st.composite
def _invoices(draw: st.DrawFn) -> str:
    groups = draw(
        st.lists(
            st.one_of(
                _groups("ide", ("cNF", "nNF", "dhEmi", "mod")),
                _groups("emit", ("CNPJ", "CPF")),
                _groups("total", ("ICMSTot", "vNF")),
                st.just("<total><ICMSTot><vNF>string</vNF></ICMSTot></total>"),
                st.just("<total><ICMSTot><vNF>10.00</vNF></ICMSTot></total>"),
            ),
            max_size=6,
        )
    )
    identifier = draw(st.sampled_from(['Id="string"', 'Id="NFe1"', ""]))
    return f'<infNFe xmlns="{NS}" {identifier} versao="?">{"".join(groups)}</infNFe>'


@settings(max_examples=100, deadline=None)
@given(text=_invoices())
def test_placeholder_count_equals_one_probe_at_a_time(text: str) -> None:
    invoice = etree.fromstring(text)
    assert _placeholder_count(invoice) == _placeholders_one_probe_at_a_time(invoice)


_FIELDS = ("chNFe", "cStat", "xMotivo", "nProt", "dhRecbto")


@st.composite
def _infos(draw: st.DrawFn) -> str:
    children = []
    for _ in range(draw(st.integers(0, 8))):
        child = draw(st.sampled_from([*_FIELDS, "other", "comment"]))
        if child == "comment":
            children.append("<!-- c -->")
            continue
        space = draw(st.sampled_from(["", ' xmlns="urn:other"', ' xmlns=""']))
        text = draw(st.sampled_from(["", "  ", " 100 ", "Autorizado"]))
        children.append(f"<{child}{space}>{text}</{child}>")
    return f'<infProt xmlns="{NS}">{"".join(children)}</infProt>'


@settings(max_examples=100, deadline=None)
@given(text=_infos())
def test_child_texts_in_one_pass_equal_child_text_per_name(text: str) -> None:
    info = etree.fromstring(text)
    assert _child_texts(info, _FIELDS) == {name: _child_text(info, name) for name in _FIELDS}
    assert list(_child_texts(info, _FIELDS)) == list(_FIELDS)


def test_nfe_invoice_gives_exactly_the_keys_of_its_declared_shape() -> None:
    text = (
        f'<nfeProc xmlns="{NS}"><NFe><infNFe Id="NFe1" versao="4.00"><ide><nNF>1</nNF></ide>'
        "</infNFe></NFe></nfeProc>"
    )
    invoice = nfe_invoice.function(parse_document(text.encode(), "a.xml"), 0)
    assert list(invoice) == list(NfeInvoice.__annotations__)
    assert (invoice["index"], invoice["count"], invoice["chNFe"], invoice["layout"]) == (
        0,
        1,
        "1",
        "4.00",
    )
