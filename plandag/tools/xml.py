"""XML parsing and namespace-aware XPath selection, shared by ``xml_select`` and the NF-e tools.

Parsing uses a hardened lxml parser: no entity expansion, no network access, no huge-tree
mode (the defences lxml's FAQ recommends against billion-laughs and external-entity
attacks). XPath expressions are compiled once per ``(expression, namespaces)`` and cached.

Selection results are converted to plain Python values so they can be referenced by later
steps and written as JSON (see :func:`select`).
"""

from __future__ import annotations

import functools
import math
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from lxml import etree

from plandag.errors import PermanentStepError

__all__ = [
    "DEFAULT_NAMESPACES",
    "NFE_NAMESPACE",
    "XMLDSIG_NAMESPACE",
    "as_element",
    "compile_table",
    "compile_xpath",
    "evaluate_compiled",
    "evaluate_table",
    "parse_xml",
    "select",
    "select_elements",
]

NFE_NAMESPACE = "http://www.portalfiscal.inf.br/nfe"
"""The NF-e layout's namespace (Manual de Orientação do Contribuinte, schema ``nfe_v4.00``)."""

XMLDSIG_NAMESPACE = "http://www.w3.org/2000/09/xmldsig#"
"""The XML Signature namespace (W3C XMLDSig), used by the NF-e ``Signature`` element."""

DEFAULT_NAMESPACES: Mapping[str, str] = {"nfe": NFE_NAMESPACE, "ds": XMLDSIG_NAMESPACE}
"""Prefixes every XPath may use without declaring them; a caller's own prefixes win."""

_DECLARATION = re.compile(r"\A\ufeff?\s*<\?xml\s[^>]*\?>")
_local = threading.local()


def _parser() -> etree.XMLParser:
    # lxml parsers must not be shared between threads; keep one per thread.
    parser: etree.XMLParser | None = getattr(_local, "parser", None)
    if parser is None:
        parser = etree.XMLParser(
            resolve_entities=False,
            no_network=True,
            huge_tree=False,
            remove_blank_text=False,
        )
        _local.parser = parser
    return parser


def parse_xml(data: bytes | str) -> etree._Element:
    """Parse an XML document with a hardened parser and return its root element.

    Args:
        data: the document. Bytes are decoded as the document says: a UTF-8 byte order
            mark, or the encoding in its declaration (``ISO-8859-1`` included), UTF-8
            otherwise. Text (already decoded) may keep its declaration and a leading byte
            order mark; both are dropped since the text is no longer encoded.

    Returns:
        The root element.

    Raises:
        PermanentStepError: reason ``invalid_xml``; the message carries lxml's reason with
            its line and column (1-based).
    """
    if isinstance(data, str):
        declaration = _DECLARATION.match(data)
        text = data[declaration.end() :] if declaration else data.lstrip("\ufeff")
        payload = text.encode("utf-8")
    elif isinstance(data, bytes | bytearray | memoryview):
        payload = bytes(data)
    else:
        raise PermanentStepError(
            f"cannot parse XML from a {type(data).__name__}; pass text or bytes",
            reason="invalid_args",
        )
    try:
        return etree.fromstring(payload, _parser())
    except etree.XMLSyntaxError as error:
        line, column = error.position
        raise PermanentStepError(
            f"invalid XML at line {line}, column {column}: {error.msg}",
            reason="invalid_xml",
        ) from error


def as_element(xml: Any) -> etree._Element:
    """The root element of ``xml``: text or bytes (parsed), an element, or an element tree.

    Raises:
        PermanentStepError: reason ``invalid_xml`` when the document does not parse,
            ``invalid_args`` when ``xml`` is of another type.
    """
    if isinstance(xml, etree._Element):
        return xml
    if isinstance(xml, etree._ElementTree):
        return xml.getroot()
    if isinstance(xml, str | bytes | bytearray | memoryview):
        return parse_xml(xml if isinstance(xml, str) else bytes(xml))
    raise PermanentStepError(
        f"xml must be XML text, bytes or a parsed element, not a {type(xml).__name__}",
        reason="invalid_args",
    )


_DEFAULT_ITEMS = tuple(sorted(DEFAULT_NAMESPACES.items()))


def _namespace_items(namespaces: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    if not namespaces:
        return _DEFAULT_ITEMS
    for prefix in namespaces:
        if not prefix or not isinstance(prefix, str):
            raise PermanentStepError(
                f"namespace prefix {prefix!r} is not usable in XPath; give every namespace "
                "a non-empty prefix (a default namespace needs one too, e.g. 'nfe')",
                reason="invalid_args",
            )
    return tuple(sorted({**DEFAULT_NAMESPACES, **namespaces}.items()))


@functools.lru_cache(maxsize=1024)
def _compile(expr: str, namespace_items: tuple[tuple[str, str], ...]) -> etree.XPath:
    try:
        return etree.XPath(expr, namespaces=dict(namespace_items), smart_strings=False)
    except etree.XPathSyntaxError as error:
        raise PermanentStepError(
            f"invalid XPath {expr!r}: {error}", reason="invalid_xpath"
        ) from error


def compile_xpath(expr: str, namespaces: Mapping[str, str] | None = None) -> etree.XPath:
    """A compiled XPath for ``expr`` with the default prefixes plus ``namespaces``; cached.

    Raises:
        PermanentStepError: reason ``invalid_xpath`` for a syntax error, ``invalid_args``
            for an empty namespace prefix.
    """
    return _compile(expr, _namespace_items(namespaces))


def compile_table(
    paths: Mapping[str, str], namespaces: Mapping[str, str] | None = None
) -> tuple[tuple[str, etree.XPath], ...]:
    """``(name, compile_xpath(expr, namespaces))`` for each ``name: expr`` of ``paths``, in
    order; the table is remembered, so a plan selecting the same fields from many documents
    builds it once.

    Raises:
        PermanentStepError: as :func:`compile_xpath`, for the first expression that fails.
    """
    return _compile_table(tuple(paths.items()), _namespace_items(namespaces))


@functools.lru_cache(maxsize=256)
def _compile_table(
    items: tuple[tuple[str, str], ...], namespace_items: tuple[tuple[str, str], ...]
) -> tuple[tuple[str, etree.XPath], ...]:
    return tuple((name, _compile(expr, namespace_items)) for name, expr in items)


def evaluate_table(
    root: etree._Element, table: Iterable[tuple[str, etree.XPath]]
) -> dict[str, Any]:
    """``{name: evaluate_compiled(root, compiled)}`` for each ``(name, compiled)`` of
    ``table`` (from :func:`compile_table`): each expression's first match, converted.

    Raises:
        PermanentStepError: reason ``invalid_xpath`` when an expression fails to evaluate.
    """
    values: dict[str, Any] = {}
    for name, compiled in table:
        try:
            found = compiled(root)
        except etree.XPathError as error:
            raise PermanentStepError(
                f"invalid XPath {compiled.path!r}: {error}", reason="invalid_xpath"
            ) from error
        if type(found) is list:
            values[name] = _convert(found[0]) if found else None
        else:
            values[name] = _convert(found)
    return values


def _convert(item: Any) -> Any:
    if isinstance(item, etree._Element):
        if len(item):
            # Comments, processing instructions or child elements split the text: take the
            # element's whole text content (XPath's string-value), comments left out.
            return "".join(str(text) for text in item.itertext()).strip()
        text = item.text
        return "" if text is None else text.strip()
    if isinstance(item, bool):
        return item
    if isinstance(item, float):
        if math.isnan(item):
            return None
        if math.isinf(item):
            return "Infinity" if item > 0 else "-Infinity"
        if item.is_integer():
            return str(int(item))
        return repr(item)
    if isinstance(item, str):
        return str(item)
    return item


def select(
    root: etree._Element,
    expr: str,
    namespaces: Mapping[str, str] | None = None,
    all: bool = False,
) -> Any:
    """Evaluate ``expr`` on ``root`` and convert what it selects to plain Python values.

    Conversions: an element gives its text content, stripped: comments and processing
    instructions inside it are left out, the text of child elements included, and an
    element without text gives ``""`` (a missing element gives None); an attribute or text
    node gives its string; a number (``count()``,
    ``sum()``) gives its XPath string form, without ``.0`` when integral (``"3"``,
    ``"2.5"``; NaN gives None); a boolean stays a bool.

    Args:
        root: the element the expression is evaluated against (relative paths start here).
        expr: an XPath 1.0 expression; the prefixes ``nfe`` (NF-e) and ``ds`` (XMLDSig) are
            always declared.
        namespaces: more prefixes (prefix → URI); they win over the defaults.
        all: return a list of every match instead of the first match only.

    Returns:
        The first match's value, or None when nothing matches; with ``all``, a list (empty
        when nothing matches; one item for a number, string or boolean result).

    Raises:
        PermanentStepError: reason ``invalid_xpath`` when the expression does not compile
            or fails to evaluate (an undeclared prefix, an unknown function).
    """
    return evaluate_compiled(root, compile_xpath(expr, namespaces), all)


def evaluate_compiled(root: etree._Element, compiled: etree.XPath, all: bool = False) -> Any:
    """:func:`select` with an expression already compiled by :func:`compile_xpath`.

    Callers that evaluate the same expressions on many elements (``xml_select`` with
    ``each``) compile once and call this in the loop.

    Raises:
        PermanentStepError: reason ``invalid_xpath`` when the expression fails to evaluate.
    """
    try:
        found = compiled(root)
    except etree.XPathError as error:
        raise PermanentStepError(
            f"invalid XPath {compiled.path!r}: {error}", reason="invalid_xpath"
        ) from error
    if type(found) is list:
        if all:
            return [_convert(item) for item in found]
        return _convert(found[0]) if found else None
    value = _convert(found)
    return [value] if all else value


def select_elements(
    root: etree._Element, expr: str, namespaces: Mapping[str, str] | None = None
) -> list[etree._Element]:
    """The elements ``expr`` selects from ``root``, in document order.

    Args:
        root: the element the expression is evaluated against.
        expr: an XPath 1.0 expression selecting elements (``//nfe:det``); prefixes as in
            :func:`select`.
        namespaces: more prefixes (prefix → URI); they win over the defaults.

    Raises:
        PermanentStepError: reason ``invalid_xpath`` when the expression does not compile
            or evaluate, ``invalid_args`` when it selects something other than elements.
    """
    found = _evaluate(root, expr, namespaces)
    if not isinstance(found, list) or not _all_elements(found):
        raise PermanentStepError(
            f"XPath {expr!r} must select elements (like '//nfe:det'), but it selected "
            f"{_describe(found)}",
            reason="invalid_args",
        )
    return found


def _all_elements(items: list[Any]) -> bool:
    """True when every item is an lxml element (comments and processing instructions excluded)."""
    return all(isinstance(item, etree._Element) and isinstance(item.tag, str) for item in items)


def _describe(found: Any) -> str:
    if isinstance(found, list):
        kinds = sorted({type(item).__name__ for item in found})
        return f"a list of {', '.join(kinds)}"
    return f"a {type(found).__name__} ({found!r})"


def _evaluate(root: etree._Element, expr: str, namespaces: Mapping[str, str] | None) -> Any:
    compiled = compile_xpath(expr, namespaces)
    try:
        return compiled(root)
    except etree.XPathError as error:
        raise PermanentStepError(
            f"invalid XPath {expr!r}: {error}", reason="invalid_xpath"
        ) from error
