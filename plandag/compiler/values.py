"""Values a plan may hold: those its hash can encode.

A person's approval is bound to the plan's hash, SHA-256 of its canonical JSON (RFC 8785,
:func:`plandag.approval.gate.plan_hash`). RFC 8785 writes every number as an IEEE 754 double
(section 3.2.2.3, after I-JSON, RFC 7493 section 2.2), so an integer outside
±(2^53 - 1) cannot be written exactly; and it writes strings as Unicode text (section
3.2.2.2), which a lone UTF-16 surrogate (U+D800 to U+DFFF, ``"\\ud800"`` in JSON) is not. A
plan holding either would compile and then fail when its hash is taken, so the compiler
refuses it: ``integer_out_of_range`` and ``lone_surrogate``, with the JSON path of each.

Floats need no check: ``NaN`` and the infinities are written as strings on the way to the
hash (:func:`plandag.scheduler.result.to_jsonable`), and every finite double is encodable.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from plandag.dag.diagnostics import DiagnosticCollector
from plandag.dag.plan import Plan

__all__ = [
    "MAX_SAFE_INTEGER",
    "Unencodable",
    "check_header",
    "check_values",
    "describe_integer",
    "unencodable_values",
]

MAX_SAFE_INTEGER = 2**53 - 1
"""The largest integer an IEEE 754 double holds exactly, with all below it (RFC 7493, 2.2)."""

_SURROGATE = re.compile("[\ud800-\udfff]")

Unencodable = tuple[Literal["integer_out_of_range", "lone_surrogate"], str, str]
"""``(code, where, what)``: the diagnostic code, the JSON path (``args.data.items[0]``) and
what is there (``the integer 9007199254740993``, ``the key '\\ud800'``)."""


def describe_integer(number: int) -> str:
    """``number`` for a message: ``the integer 9007199254740992``, or its size when its
    digits are too many to print (``a positive integer of about 5001 digits``).

    Python refuses to write integers of more than 4300 digits, and a message has no use for
    them: past 128 bits (about 39 digits) the number is described by its sign and size.
    """
    if number.bit_length() <= 128:
        return f"the integer {number}"
    digits = int(number.bit_length() * 0.30103) + 1  # log10(2) per bit, within one digit
    sign = "a negative" if number < 0 else "a positive"
    return f"{sign} integer of about {digits} digits"


def _surrogate(text: str) -> str | None:
    """The first lone surrogate of ``text`` as ``U+D800``, or None."""
    if text.isascii():
        return None
    match = _SURROGATE.search(text)
    return None if match is None else f"U+{ord(match.group(0)):04X}"


def _out_of_range(item: object) -> bool:
    return (
        isinstance(item, int)
        and not isinstance(item, bool)
        and not -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER
    )


def _key_text(key: object) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, int) and not isinstance(key, bool):
        return str(key) if key.bit_length() <= 128 else f"<{describe_integer(key)}>"
    try:
        return str(key)
    except Exception:
        return type(key).__name__


def unencodable_values(value: Any, location: str = "") -> Iterator[Unencodable]:
    """Yield every integer and string in ``value`` that RFC 8785 cannot encode.

    Walks dicts (keys and values), lists and tuples at any depth without recursion, in
    time linear in the size of ``value``; other values (floats, bools, None, objects) are
    not judged here.

    Args:
        value: JSON-like data (a step's args, a param's default, the plan's output...).
        location: the path of ``value`` itself (``args``), prefixed to every path reported.

    Yields:
        ``(code, where, what)``, a dict's keys before its values:
        ``integer_out_of_range`` for an int (not a bool) outside ±:data:`MAX_SAFE_INTEGER`,
        ``lone_surrogate`` for a str or dict key holding a code point between U+D800 and
        U+DFFF. A key is reported at the path it opens.
    """
    stack: list[tuple[Any, str]] = [(value, location)]
    while stack:
        item, where = stack.pop()
        shown = where or "(the value)"
        if isinstance(item, str):
            point = _surrogate(item)
            if point is not None:
                yield "lone_surrogate", shown, f"a string with a lone surrogate ({point})"
        elif _out_of_range(item):
            yield "integer_out_of_range", shown, describe_integer(item)
        elif isinstance(item, Mapping):
            children: list[tuple[Any, str]] = []
            for key, sub in item.items():
                path = f"{where}.{_key_text(key)}" if where else _key_text(key)
                if isinstance(key, str):
                    point = _surrogate(key)
                    if point is not None:
                        yield "lone_surrogate", path, f"a key with a lone surrogate ({point})"
                elif _out_of_range(key):
                    yield "integer_out_of_range", path, f"a key: {describe_integer(key)}"
                children.append((sub, path))
            stack.extend(reversed(children))
        elif isinstance(item, list | tuple):
            stack.extend(
                (sub, f"{where}[{index}]") for index, sub in reversed(list(enumerate(item)))
            )


def check_values(
    diagnostics: DiagnosticCollector, step_id: int | None, value: Any, where: str
) -> None:
    """Record ``integer_out_of_range`` and ``lone_surrogate`` for every value in ``value``
    that the plan's hash cannot encode (:mod:`plandag.compiler.values`), at its JSON path
    under ``where``."""
    for code, path, what in unencodable_values(value, where):
        if code == "integer_out_of_range":
            diagnostics.add(
                code,
                step_id,
                f"{path}: {what} is outside ±9007199254740991 (2^53 - 1), the integers the "
                "plan's canonical JSON (RFC 8785) holds exactly",
                "write it as a string, or as a smaller number",
            )
        else:
            diagnostics.add(
                code,
                step_id,
                f"{path}: {what}, which is not Unicode text and cannot be hashed (RFC 8785)",
                "remove it, or write the character meant (in JSON a pair such as "
                "\\ud83d\\ude00 is one character; a lone half is not)",
            )


def check_header(plan: Plan, diagnostics: DiagnosticCollector) -> None:
    """Check the plan's own values (goal, params, output) against what its hash can
    encode; steps are checked with their other checks."""
    check_values(diagnostics, None, plan.goal, "goal")
    check_values(
        diagnostics,
        None,
        {name: spec.model_dump(exclude_none=True) for name, spec in plan.params.items()},
        "params",
    )
    check_values(diagnostics, None, plan.output, "output")
