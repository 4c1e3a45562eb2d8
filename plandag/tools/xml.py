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

    The table also carries a plan for :func:`evaluate_table`: four or more plain child
    paths under one parent path (``nfe:total/nfe:ICMSTot/nfe:vNF``, ``.../nfe:vProd``...)
    are read from that parent's children in one pass; the other plain child paths
    (``nfe:ICMS/*/nfe:vICMSDeson``), or ``boolean()`` of one, ending in a name no other such
    expression of the table ends in are evaluated together, as one XPath union; a lone
    attribute (``@Id``) is read from the element. Each gives what each expression gives
    alone (see :func:`evaluate_table`).

    Raises:
        PermanentStepError: as :func:`compile_xpath`, for the first expression that fails.
    """
    return _compile_table(tuple(paths.items()), _namespace_items(namespaces))


class _FieldTable(tuple[tuple[str, etree.XPath], ...]):
    """A compiled table with its evaluation plan (:class:`_TablePlan`)."""

    plan: _TablePlan


# XPath 1.0 location paths of child steps only: a name test (``prefix:name`` or ``name``,
# ASCII names) or ``*`` per step, the last one a name test. No axes, predicates, functions,
# ``//``, whitespace: anything else is evaluated on its own.
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_CHILD_PATH = re.compile(rf"(?:(?:{_NAME}:)?{_NAME}/|\*/)*(?:({_NAME}):)?({_NAME})")
_ATTRIBUTE = re.compile(rf"@({_NAME})")
_BOOLEAN = re.compile(r"boolean\(([^()\s]*)\)")


#: Sibling paths (same parent path, distinct last names) from which their parent's
#: children are read in one pass (``parent/*``) instead of one union member each: reading
#: every child costs about as much as four separate paths.
_SIBLINGS_MIN = 4


class _TablePlan:
    """How :func:`evaluate_table` evaluates one table.

    ``groups``: ``(parent/*, {expanded name: field})`` for each set of at least
    :data:`_SIBLINGS_MIN` child paths with the same parent path and distinct last names;
    ``union``: one XPath, the union (``|``) of the other child paths (bare, or inside
    ``boolean()``: the fields in ``booleans``) whose last step names an element no other of
    them names (``by_tag``: that element's expanded name ``{uri}local`` → the field);
    ``attributes``: ``(field, attribute)`` for ``@name`` expressions; ``others``: ``(field,
    compiled)`` evaluated one by one.
    """

    __slots__ = ("attributes", "booleans", "by_tag", "groups", "names", "others", "union")

    def __init__(
        self,
        table: tuple[tuple[str, etree.XPath], ...],
        items: tuple[tuple[str, str], ...],
        namespace_items: tuple[tuple[str, str], ...],
    ) -> None:
        namespaces = dict(namespace_items)
        self.names = tuple(name for name, _ in table)
        attributes: list[tuple[str, str]] = []
        booleans: set[str] = set()
        paths: list[tuple[str, str, str]] = []  # (field, expression, expanded last name)
        for name, expr in items:
            attribute = _ATTRIBUTE.fullmatch(expr)
            if attribute is not None:
                attributes.append((name, attribute.group(1)))
                continue
            boolean = _BOOLEAN.fullmatch(expr)
            if boolean is not None:
                expr = boolean.group(1)
                booleans.add(name)
            path = _CHILD_PATH.fullmatch(expr)
            if path is None or not all(namespaces.get(prefix) for prefix in _prefixes(expr)):
                continue
            prefix, local = path.group(1), path.group(2)
            paths.append((name, expr, f"{{{namespaces[prefix]}}}{local}" if prefix else local))
        siblings: dict[str, list[tuple[str, str, str]]] = {}
        for name, expr, tag in paths:
            if name not in booleans:
                siblings.setdefault(expr.rpartition("/")[0], []).append((name, expr, tag))
        groups: list[tuple[etree.XPath, dict[str, str]]] = []
        grouped: set[str] = set()
        for parent, members in siblings.items():
            by_name = {tag: name for name, _, tag in members}
            if len(members) >= _SIBLINGS_MIN and len(by_name) == len(members):
                children = f"{parent}/*" if parent else "*"
                groups.append(
                    (etree.XPath(children, namespaces=namespaces, smart_strings=False), by_name)
                )
                grouped.update(by_name.values())
        tags: dict[str, list[tuple[str, str]]] = {}
        for name, expr, tag in paths:
            if name not in grouped:
                tags.setdefault(tag, []).append((name, expr))
        united = {tag: fields[0] for tag, fields in tags.items() if len(fields) == 1}
        self.groups = tuple(groups)
        self.by_tag = {tag: name for tag, (name, _) in united.items()}
        self.union = (
            etree.XPath(
                " | ".join(expr for _, expr in united.values()),
                namespaces=namespaces,
                smart_strings=False,
            )
            if united
            else None
        )
        self.attributes = tuple(attributes)
        self.booleans = frozenset(booleans & set(self.by_tag.values()))
        planned = grouped | set(self.by_tag.values()) | {name for name, _ in attributes}
        self.others = tuple((name, xpath) for name, xpath in table if name not in planned)


def _prefixes(expr: str) -> list[str]:
    return [step.partition(":")[0] for step in expr.split("/") if ":" in step]


@functools.lru_cache(maxsize=256)
def _compile_table(
    items: tuple[tuple[str, str], ...], namespace_items: tuple[tuple[str, str], ...]
) -> tuple[tuple[str, etree.XPath], ...]:
    table = _FieldTable((name, _compile(expr, namespace_items)) for name, expr in items)
    table.plan = _TablePlan(table, items, namespace_items)
    return table


def evaluate_table(
    root: etree._Element, table: Iterable[tuple[str, etree.XPath]]
) -> dict[str, Any]:
    """``{name: evaluate_compiled(root, compiled)}`` for each ``(name, compiled)`` of
    ``table`` (from :func:`compile_table`): each expression's first match, converted.

    A table from :func:`compile_table` is evaluated by its plan. XPath node-sets come in
    document order (XPath 1.0, section 3.3, as lxml returns them), so: sibling paths
    ``parent/name`` come from ``parent/*``, a path's first match being the first child so
    named; the other plain child paths with distinct last names from one XPath union, a
    path's first match being the first node named like its last step (and ``boolean()`` of
    a path is whether it has one); ``@name`` from ``root.get(name)`` (the attribute without
    namespace, as the XPath name test selects it); the rest one by one. The values are
    those of the one by one evaluation.

    Raises:
        PermanentStepError: reason ``invalid_xpath`` when an expression fails to evaluate.
    """
    plan: _TablePlan | None = getattr(table, "plan", None)
    if plan is None:
        return _evaluate_each(root, table)
    values: dict[str, Any] = dict.fromkeys(plan.names)
    try:
        for children, by_tag in plan.groups:
            found: Any = children(root)
            for node in found:
                name = by_tag.get(node.tag)
                if name is not None and values[name] is None:
                    if len(node):
                        values[name] = _element_value(node)
                    else:  # _element_value of a leaf, inline
                        text = node.text
                        values[name] = "" if text is None else text.strip()
        if plan.union is not None:
            found = plan.union(root)
            by_tag = plan.by_tag
            booleans = plan.booleans
            for node in found:
                name = by_tag[node.tag]
                if values[name] is None:
                    if name in booleans:
                        values[name] = True
                    elif len(node):
                        values[name] = _element_value(node)
                    else:  # _element_value of a leaf, inline
                        text = node.text
                        values[name] = "" if text is None else text.strip()
    except etree.XPathError:
        return _evaluate_each(root, table)
    for name in plan.booleans:
        if values[name] is None:
            values[name] = False
    for name, attribute in plan.attributes:
        values[name] = root.get(attribute)
    for name, compiled in plan.others:
        values[name] = evaluate_compiled(root, compiled)
    return values


def _element_value(element: etree._Element) -> str:
    """:func:`_convert` of an element (never None)."""
    if len(element):
        return "".join(str(text) for text in element.itertext()).strip()
    text = element.text
    return "" if text is None else text.strip()


def _evaluate_each(
    root: etree._Element, table: Iterable[tuple[str, etree.XPath]]
) -> dict[str, Any]:
    return {name: evaluate_compiled(root, compiled) for name, compiled in table}


def _convert(item: Any) -> Any:
    if isinstance(item, etree._Element):
        # Comments, processing instructions or child elements split the text: the element's
        # whole text content (XPath's string-value), comments left out.
        return _element_value(item)
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
