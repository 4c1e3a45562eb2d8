"""RFC 8785 canonical JSON (the JSON Canonicalization Scheme) of JSON data, written by
``orjson`` whenever that gives the same bytes as ``rfc8785``, and the
test of JSON data that :func:`~plandag.scheduler.result.to_jsonable` returns as it is
(a recorder may then write it without converting it again)."""

from __future__ import annotations

import json
import math
from typing import Any

import orjson
import rfc8785

__all__ = [
    "NOT_PLAIN",
    "PLAIN",
    "STANDARD",
    "canonical_bytes",
    "canonical_json",
    "is_plain_json",
    "json_form",
    "plain_json_text",
]

# keys sorted by their UTF-8 bytes: by code point, as RFC 8785's UTF-16 units for the ASCII
# keys of the standard form
_SORTED = orjson.OPT_SORT_KEYS
_SAFE_INTEGER = 2**53 - 1
# How deep and how large a value :func:`json_form` calls plain: well within
# ``to_jsonable``'s limits (200 levels, a million values), so that it never cuts one.
_PLAIN_DEPTH = 100
_PLAIN_VALUES = 500_000
# What :func:`json_form` finds: not plain JSON; plain JSON that only ``rfc8785`` writes as
# RFC 8785 does; plain JSON that the standard encoder writes so too.
NOT_PLAIN, PLAIN, STANDARD = 0, 1, 2


def json_form(value: Any) -> int:
    """What ``value`` is, as :data:`NOT_PLAIN`, :data:`PLAIN` or :data:`STANDARD`.

    Plain: exactly ``dict`` with ``str`` keys, ``list``, ``str``, ``bool``, None, ``int``
    and finite ``float``, nested less than 100 levels, 500,000 values at most
    (``to_jsonable`` returns such a value as it is). Standard: plain, and the standard
    encoder writes it as RFC 8785 does: ASCII keys (sorted alike by code point and by
    UTF-16 unit), integers within ±(2**53 - 1), and floats that Python's ``repr`` writes
    as ECMAScript does (RFC 8785, 3.2.2.3): not a whole number (``repr`` adds ``.0``), and
    at least 1e-4 in magnitude (``repr`` writes an exponent below that; a float that is
    not whole is below 2**52, so never written with one above). Strings are escaped alike
    by both (RFC 8785, 3.2.2.2).
    """
    # The containers one level at a time (the form is the least of every value's, in any
    # order): a loop over a level's containers instead of a call for each; ``value`` is the
    # one item of a list at depth -1, which its budget does not count.
    form = STANDARD
    budget = _PLAIN_VALUES + 1
    level: list[Any] = [[value]]
    for depth in range(-1, _PLAIN_DEPTH):
        below: list[Any] = []
        add = below.append
        for container in level:
            budget -= len(container)
            if budget < 0:
                return NOT_PLAIN
            items: Any
            if type(container) is dict:
                for key in container:
                    if type(key) is not str:
                        return NOT_PLAIN
                    if form == STANDARD and not key.isascii():
                        form = PLAIN
                items = container.values()
            else:
                items = container
            for item in items:
                kind = type(item)
                if kind is str or kind is bool or item is None:
                    continue
                if kind is int:
                    if form == STANDARD and not -_SAFE_INTEGER <= item <= _SAFE_INTEGER:
                        form = PLAIN
                    continue
                if kind is float:
                    if not math.isfinite(item):
                        return NOT_PLAIN
                    if form == STANDARD and (abs(item) < 1e-4 or item.is_integer()):
                        form = PLAIN
                    continue
                if kind is not dict and kind is not list:
                    return NOT_PLAIN
                if item:
                    add(item)
                elif depth + 1 >= _PLAIN_DEPTH:  # an empty one, nested too deep
                    return NOT_PLAIN
        if not below:
            return form
        level = below
    return NOT_PLAIN  # nested too deep


def canonical_bytes(value: Any, form: int) -> bytes:
    """The RFC 8785 canonical JSON of a plain ``value`` whose :func:`json_form` is
    ``form`` (as that function gives it: a value of the standard form holds no cycle and
    is nested less than 100 levels): written by ``orjson`` with sorted keys when the form
    is standard (the bytes of the standard encoder with sorted keys and no spaces, UTF-8
    kept: the same integers, ``repr``'s floats for the standard form's, the same
    escapes), by ``rfc8785`` otherwise (and for ``orjson``'s errors: a lone
    surrogate)."""
    if form == STANDARD:
        try:
            return orjson.dumps(value, option=_SORTED)
        except orjson.JSONEncodeError:  # rfc8785 says why
            pass
    return rfc8785.dumps(value)


def canonical_json(value: Any) -> bytes:
    """The RFC 8785 canonical JSON of ``value`` (UTF-8), as ``rfc8785.dumps`` gives it:
    written by ``orjson`` when that gives the same bytes (:func:`json_form`, standard),
    by ``rfc8785`` otherwise.

    Args:
        value: a JSON value (``to_jsonable``'s output).

    Returns:
        The canonical bytes.

    Raises:
        rfc8785.CanonicalizationError: a value RFC 8785 cannot write (a lone surrogate, an
            integer beyond ±(2**53 - 1), NaN or an infinity, a key that is not a string).
    """
    return canonical_bytes(value, json_form(value))


def plain_json_text(value: Any, form: int) -> str:
    """``json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)`` of
    a plain ``value`` whose :func:`json_form` is ``form``: written by ``orjson`` when the
    form is standard (the same integers, ``repr``'s floats for the standard form's, the
    same escapes, keys in their order), by the standard library otherwise (and for a lone
    surrogate, which ``orjson`` refuses).

    Raises:
        ValueError: a float NaN or infinite (not plain).
    """
    if form == STANDARD:
        try:
            return orjson.dumps(value).decode()
        except orjson.JSONEncodeError:  # a lone surrogate: written below
            pass
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def is_plain_json(value: Any) -> bool:
    """Whether ``value`` is plain JSON data (:func:`json_form`): exactly ``dict`` with
    ``str`` keys, ``list``, ``str``, ``bool``, None, ``int`` and finite ``float``, nested
    less than 100 levels, 500,000 values at most; ``to_jsonable`` returns such a value as
    it is (an equal copy)."""
    return json_form(value) != NOT_PLAIN
