"""The reference grammar: how a step's arguments name other steps' results and the params.

Three forms, and only these (ARCHITECTURE.md, "The plan artifact")::

    <step_N_result>                 the whole result of step N
    <step_N_result.key.0.field>     a field of it: dotted keys, list indices as integers
    <param.NAME> / <param.NAME.key> a run-time param (or a field of it)

* A string that is *exactly* one reference receives the referenced value with its type
  (a list stays a list, a number stays a number).
* A reference inside a longer string is replaced by its text: strings as they are, anything
  else as compact JSON. Several references in one string all resolve.
* References are found at any depth of ``args`` (dicts and lists).
* ``$1``, ``${1}`` and other text stay literal text: unlike LLMCompiler's ``$N`` we never
  guess dependencies from free text.
* A malformed angle reference (``<step_x_result>``, ``<step_1_reslt>``, ``<params.x>``) is a
  compile error naming the nearest valid form (:func:`find_malformed`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pydantic import BaseModel

__all__ = [
    "ArgsTemplate",
    "Reference",
    "ReferenceResolutionError",
    "compile_template",
    "find_malformed",
    "find_references",
    "get_path",
    "is_constant",
    "is_index",
    "malformed_tokens",
    "parse_reference",
    "resolve_value",
    "suggest_reference",
]

_SEGMENT = r"[^.<>\s]+"
# At most 18 digits: any such id fits a 64-bit integer, and ``int()`` never meets Python's
# limit on converting long digit strings.
_STEP_REFERENCE = rf"<step_(?P<step>[1-9][0-9]{{0,17}})_result(?P<step_path>(?:\.{_SEGMENT})*)>"
_PARAM_REFERENCE = rf"<param\.(?P<param>[A-Za-z_][A-Za-z0-9_]*)(?P<param_path>(?:\.{_SEGMENT})*)>"
REFERENCE_PATTERN = re.compile(f"{_STEP_REFERENCE}|{_PARAM_REFERENCE}")
# Anything in angle brackets that mentions step, param or result is meant as a reference.
_CANDIDATE_PATTERN = re.compile(r"<[^<>\n]{0,200}?>")
_LOOKS_LIKE_REFERENCE = re.compile(r"step|param|result", re.IGNORECASE)
# An angle bracket opening a reference that is never closed: `<step_1_result` at the end of
# the text, or followed by a space or another `<` before any `>`.
_UNCLOSED_PATTERN = re.compile(r"<(?:step_|param\.)[^<>\s]{0,200}(?=[\s<]|$)", re.IGNORECASE)


@dataclasses.dataclass(frozen=True, slots=True)
class Reference:
    """One parsed reference.

    Attributes:
        text: the reference exactly as written, angle brackets included.
        step_id: the referenced step's id, or None for a param reference.
        param: the referenced param's name, or None for a step reference.
        path: the field path after the head; digit-only segments are kept as strings and
            used as list indices or as dict keys, whichever the value holds.
    """

    text: str
    step_id: int | None
    param: str | None
    path: tuple[str, ...]


def _from_match(match: re.Match[str]) -> Reference:
    if match.group("step") is not None:
        raw_path = match.group("step_path")
        return Reference(
            text=match.group(0),
            step_id=int(match.group("step")),
            param=None,
            path=tuple(raw_path.split(".")[1:]) if raw_path else (),
        )
    raw_path = match.group("param_path")
    return Reference(
        text=match.group(0),
        step_id=None,
        param=match.group("param"),
        path=tuple(raw_path.split(".")[1:]) if raw_path else (),
    )


def parse_reference(text: str) -> Reference | None:
    """Parse ``text`` when it is exactly one reference, else return None."""
    match = REFERENCE_PATTERN.fullmatch(text)
    return _from_match(match) if match else None


def _walk_strings(value: Any, location: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield location, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _walk_strings(item, f"{location}.{key}" if location else str(key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _walk_strings(item, f"{location}[{index}]")


def find_references(value: Any, location: str = "") -> Iterator[tuple[str, Reference]]:
    """Yield ``(location, reference)`` for every well-formed reference at any depth.

    Args:
        value: JSON-like data (dicts, lists, strings, numbers).
        location: prefix for the reported locations (``args`` gives ``args.data.total``).
    """
    for where, text in _walk_strings(value, location):
        if "<" not in text:
            continue
        for match in REFERENCE_PATTERN.finditer(text):
            yield where, _from_match(match)


def find_malformed(value: Any, location: str = "") -> Iterator[tuple[str, str, str]]:
    """Yield ``(location, token, nearest_valid_form)`` for every malformed angle reference.

    A token is malformed when it sits in angle brackets, mentions ``step``, ``param`` or
    ``result``, and is not a valid reference (``<step_x_result>``, ``<step_1_reslt>``), or
    when it opens a reference that is never closed (``<step_1_result`` with no ``>``).
    """
    for where, token, closed in malformed_tokens(value, location):
        yield where, token, suggest_reference(closed)


@functools.lru_cache(maxsize=4096)
def _malformed_candidate(token: str) -> bool:
    """True when a bracketed ``token`` is meant as a reference and is not a valid one
    (cached: a hostile text repeats the same token many times)."""
    return REFERENCE_PATTERN.fullmatch(token) is None and bool(_LOOKS_LIKE_REFERENCE.search(token))


def malformed_tokens(value: Any, location: str = "") -> Iterator[tuple[str, str, str]]:
    """Yield ``(location, token, closed_token)`` for every malformed angle reference, as
    :func:`find_malformed` finds them, without the suggestion (``closed_token`` is what
    :func:`suggest_reference` takes: the token, with ``>`` added when it was never closed).

    Scanning takes time linear in the text: each pattern looks at most 200 characters past
    an opening ``<`` and stops at the next ``<``.
    """
    for where, text in _walk_strings(value, location):
        if "<" not in text:
            continue
        for token in _CANDIDATE_PATTERN.findall(text):
            if _malformed_candidate(token):
                yield where, token, token
        for match in _UNCLOSED_PATTERN.finditer(text):
            token = match.group(0)
            yield where, token, token + ">"


def suggest_reference(token: str) -> str:
    """The nearest valid reference to a malformed ``token``, for an error's hint.

    ``<step_1_reslt>`` → ``<step_1_result>``; ``<Step 2 result.total>`` →
    ``<step_2_result.total>``; ``<params.input>`` → ``<param.input>``; with no step number
    in sight, ``<step_N_result>`` with N spelled out as a placeholder.
    """
    inner = token.strip("<>").strip()
    lowered = inner.lower()
    if "param" in lowered and "step" not in lowered:
        rest = re.split(r"params?[._\s:]*", inner, maxsplit=1, flags=re.IGNORECASE)[-1]
        name = re.sub(r"[^A-Za-z0-9_.]", "", rest).strip(".") or "NAME"
        if not re.match(r"[A-Za-z_]", name):
            name = f"p{name}"
        return f"<param.{name}>"
    number = re.search(r"[0-9]+", inner)
    step = number.group(0).lstrip("0") if number else ""
    if len(step) > 18:  # no step id that long can be referenced
        step = ""
    path = ""
    tail = re.search(r"result[s]?[^.]*((?:\.[^.<>\s]+)+)$", inner, re.IGNORECASE)
    if tail is None:
        tail = re.search(r"[A-Za-z_]\w*((?:\.[^.<>\s]+)+)$", inner)
    if tail is not None:
        path = tail.group(1)
    return f"<step_{step or 'N'}_result{path}>"


class ReferenceResolutionError(LookupError):
    """A reference's path does not exist in the value it points at (found at run time)."""


def is_index(segment: str) -> bool:
    """True when a path segment is a list index: ASCII digits only (``"0"``, ``"12"``).

    ``str.isdigit`` alone would also accept ``"²"``, which ``int()`` refuses.
    """
    return segment.isascii() and segment.isdigit() and len(segment) <= 18


# Values whose attributes are methods or internals, never fields a reference may name.
_NO_FIELDS: tuple[type, ...] = (str, bytes, bytearray, int, float, complex, bool, type(None))


def _field_of(value: Any, segment: str) -> tuple[bool, Any]:
    """``(True, field)`` when ``value`` has a data field ``segment``, else ``(False, None)``.

    Pydantic models offer their fields, dataclasses theirs, other objects their public
    attributes that are not methods; scalars (``str``, numbers, ``None``) offer nothing.
    """
    if isinstance(value, _NO_FIELDS) or segment.startswith("_"):
        return False, None
    if isinstance(value, BaseModel):
        names = {*type(value).model_fields, *type(value).model_computed_fields}
        return (True, getattr(value, segment)) if segment in names else (False, None)
    if dataclasses.is_dataclass(value):
        names = {field.name for field in dataclasses.fields(value)}
        return (True, getattr(value, segment)) if segment in names else (False, None)
    try:
        found = getattr(value, segment)
    except Exception:
        return False, None
    if callable(found):
        return False, None
    return True, found


def get_path(value: Any, path: tuple[str, ...], *, reference: str = "") -> Any:
    """Follow ``path`` into ``value``: dict keys, list indices, then object fields.

    Args:
        value: the referenced value (a step's result or a param's value).
        path: path segments, e.g. ``("items", "0", "vProd")``. A digit-only segment indexes a
            list, or names a dict key (the string ``"0"`` first, else the integer ``0``).
        reference: the reference's text, used in error messages.

    Returns:
        The value at the end of the path (``value`` itself for an empty path).

    Raises:
        ReferenceResolutionError: a segment is missing; the message names the segment,
            the reference and what was there instead (the keys a dict has, a list's length).
    """
    current = value
    for depth, segment in enumerate(path):
        if type(current) is dict and segment in current:  # the common case, decided at once
            current = current[segment]
            continue
        if isinstance(current, Mapping):
            if segment in current:
                current = current[segment]
                continue
            if is_index(segment) and int(segment) in current:
                current = current[int(segment)]
                continue
            keys = ", ".join(sorted(map(str, current)))[:200]
            raise ReferenceResolutionError(
                f"{reference or _where(path, depth)}: no key {segment!r} (keys: {keys or 'none'})"
            )
        if isinstance(current, list | tuple):
            if is_index(segment) and int(segment) < len(current):
                current = current[int(segment)]
                continue
            raise ReferenceResolutionError(
                f"{reference or _where(path, depth)}: index {segment!r} out of range for a "
                f"list of {len(current)}"
            )
        found, field = _field_of(current, segment)
        if found:
            current = field
            continue
        raise ReferenceResolutionError(
            f"{reference or _where(path, depth)}: a {type(current).__name__} has no field "
            f"{segment!r}"
        )
    return current


def _where(path: tuple[str, ...], depth: int) -> str:
    """The path up to and including segment ``depth``, dotted (for an error message)."""
    return ".".join(path[: depth + 1])


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return str(value)


def resolve_value(
    value: Any,
    step_result: Callable[[int], Any],
    params: Mapping[str, Any],
) -> Any:
    """Replace every reference in ``value`` (at any depth) by what it names.

    Args:
        value: JSON-like data holding references.
        step_result: returns the result of a step by id (the scheduler only calls this for
            steps that succeeded).
        params: the run's params by name.

    Returns:
        A new value; the input is not mutated. A whole-string reference keeps the
        referenced value's type; embedded references become text (JSON for non-strings).

    Raises:
        ReferenceResolutionError: a path segment or a param is missing.
    """

    return compile_template(value)(step_result, params)


ArgsTemplate = Callable[[Callable[[int], Any], Mapping[str, Any]], Any]
"""``template(step_result, params) -> value``: a value with its references resolved."""


def _constant(value: Any) -> ArgsTemplate:
    def template(step_result: Callable[[int], Any], params: Mapping[str, Any]) -> Any:
        return value

    template.constant = True  # type: ignore[attr-defined]
    return template


def is_constant(template: ArgsTemplate) -> bool:
    """True when ``template`` came from a value without references (it returns the value)."""
    return getattr(template, "constant", False) is True


def _lookup(
    reference: Reference, step_result: Callable[[int], Any], params: Mapping[str, Any]
) -> Any:
    if reference.step_id is not None:
        base = step_result(reference.step_id)
    else:
        assert reference.param is not None
        if reference.param not in params:
            raise ReferenceResolutionError(f"{reference.text}: no param {reference.param!r}")
        base = params[reference.param]
    return get_path(base, reference.path, reference=reference.text) if reference.path else base


def _whole(reference: Reference) -> ArgsTemplate:
    """A resolver for a string that is exactly ``reference``: :func:`_lookup`, with the
    choices that depend on the reference alone made once."""
    step_id = reference.step_id
    path = reference.path
    text = reference.text
    if step_id is not None:
        if not path:

            def whole_result(step_result: Callable[[int], Any], params: Mapping[str, Any]) -> Any:
                return step_result(step_id)

            return whole_result

        def result_field(step_result: Callable[[int], Any], params: Mapping[str, Any]) -> Any:
            return get_path(step_result(step_id), path, reference=text)

        return result_field

    def whole_reference(step_result: Callable[[int], Any], params: Mapping[str, Any]) -> Any:
        return _lookup(reference, step_result, params)

    return whole_reference


def _compile(value: Any) -> ArgsTemplate | None:
    """A resolver for ``value``, or None when it holds no reference (a constant)."""
    kind = type(value)
    if kind is str or isinstance(value, str):
        if "<" not in value:
            return None
        whole = REFERENCE_PATTERN.fullmatch(value)
        if whole:
            return _whole(_from_match(whole))
        parts: list[str | Reference] = []
        position = 0
        for match in REFERENCE_PATTERN.finditer(value):
            parts.append(value[position : match.start()])
            parts.append(_from_match(match))
            position = match.end()
        if not parts:
            return None
        parts.append(value[position:])

        def embedded(step_result: Callable[[int], Any], params: Mapping[str, Any]) -> Any:
            return "".join(
                part if isinstance(part, str) else _as_text(_lookup(part, step_result, params))
                for part in parts
            )

        return embedded
    if kind is dict or isinstance(value, Mapping):
        dynamic = [(key, _compile(item)) for key, item in value.items()]
        resolvers = [(key, resolver) for key, resolver in dynamic if resolver is not None]
        if not resolvers:
            return None
        static = dict(value)

        def mapping(step_result: Callable[[int], Any], params: Mapping[str, Any]) -> Any:
            out = dict(static)
            for key, resolver in resolvers:
                out[key] = resolver(step_result, params)
            return out

        return mapping
    if kind is list or isinstance(value, list | tuple):
        items = [(_compile(item), item) for item in value]
        if all(resolver is None for resolver, _ in items):
            return None

        def sequence(step_result: Callable[[int], Any], params: Mapping[str, Any]) -> Any:
            return [
                item if resolver is None else resolver(step_result, params)
                for resolver, item in items
            ]

        return sequence
    return None


def compile_template(value: Any) -> ArgsTemplate:
    """Compile ``value`` once into a resolver that gives what :func:`resolve_value` gives.

    The resolver walks only the parts of ``value`` that hold references, so a step whose
    args carry many literal strings (XPath tables, say) pays for its references alone.
    Parts without references are shared with ``value``, not copied; callers must not
    mutate them.

    Args:
        value: JSON-like data holding references.

    Returns:
        ``template(step_result, params) -> resolved value``; it raises
        :class:`ReferenceResolutionError` like :func:`resolve_value`.
    """
    resolver = _compile(value)
    return resolver if resolver is not None else _constant(value)
