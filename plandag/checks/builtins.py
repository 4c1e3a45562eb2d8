"""The built-in check kinds: ``not_empty``, ``equals``, ``regex``, ``jmespath``,
``file_exists`` and ``tolerance`` (ARCHITECTURE.md, "The plan artifact": a check is a fact
evaluated in code, never "looks right").

Each is declared with :func:`plandag.checks.base.check`; its first parameter receives the
step's result and its keyword arguments come from the plan's check entry::

    {"kind": "regex", "path": "code", "pattern": "[0-9]+"}

``path`` and ``expr`` fields are JMESPath expressions (https://jmespath.org/specification.html)
evaluated over the result. Results are JSON-like data (dicts, lists, strings, numbers);
pydantic models are converted with ``model_dump`` first; any other object cannot be searched
and the check fails saying so. Every outcome carries a detail a person can act on: what was
compared and the value found (cut to about 100 characters).
"""

from __future__ import annotations

import dataclasses
import decimal
import json
import os
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import jmespath as jmespath_library
from jmespath.exceptions import JMESPathError
from pydantic import BaseModel

from plandag.checks.base import CheckDefinition, CheckOutcome, check

_REGEX_SECONDS = 1.0
"""Time limit for one ``regex`` check's match, seconds."""

__all__ = [
    "BUILTIN_CHECKS",
    "equals",
    "file_exists",
    "jmespath_predicate",
    "not_empty",
    "regex",
    "tolerance",
]

_SHOWN_CHARACTERS = 100


class _UnsearchableResultError(TypeError):
    """A result holds an object that JMESPath cannot search."""


def _show(value: Any) -> str:
    """``value`` as compact JSON (repr for other objects), cut to about 100 characters."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        text = repr(value)
    if len(text) > _SHOWN_CHARACTERS:
        return text[: _SHOWN_CHARACTERS - 1] + "…"
    return text


def _searchable(value: Any) -> Any:
    """Convert ``value`` into data JMESPath can search (dicts, lists, scalars).

    Raises:
        _UnsearchableResultError: the value holds an object that is neither JSON-like nor a
            pydantic model (an lxml element, a file handle...).
    """
    if value is None or isinstance(value, str | bool | int | float | Decimal):
        return value
    if isinstance(value, BaseModel):
        return _searchable(value.model_dump())
    if isinstance(value, Mapping):
        return {str(key): _searchable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_searchable(item) for item in value]
    raise _UnsearchableResultError(
        f"the result holds a value of type {type(value).__name__}, which a path cannot search; "
        "return dicts, lists, strings and numbers (or a pydantic model) from the tool"
    )


def _select(result: Any, path: str | None) -> Any:
    """The value at JMESPath ``path`` in ``result`` (the whole result when ``path`` is None).

    Raises:
        _UnsearchableResultError: see :func:`_searchable`.
        JMESPathError: ``path`` is not a valid expression.
    """
    if path is None:
        try:
            return _searchable(result)
        except _UnsearchableResultError:
            return result
    return jmespath_library.search(path, _searchable(result))


def _where(path: str | None) -> str:
    return "the result" if path is None else f"the value at `{path}`"


def _json_equal(left: Any, right: Any) -> bool:
    """Equality in JSON's sense: ``true`` is not ``1``; lists and objects compare deeply."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left is right
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        return left.keys() == right.keys() and all(_json_equal(left[k], right[k]) for k in left)
    if isinstance(left, list | tuple) and isinstance(right, list | tuple):
        return len(left) == len(right) and all(
            _json_equal(a, b) for a, b in zip(left, right, strict=True)
        )
    try:
        return bool(left == right)
    except Exception:
        return False


def _jmespath_truthy(value: Any) -> bool:
    """JMESPath truthiness: false, null, "", [] and {} are false; everything else (0 too)
    is true (JMESPath specification, "Or Expressions")."""
    if value is None or value is False:
        return False
    if isinstance(value, str | list | tuple | Mapping):
        return len(value) > 0
    return True


def _is_empty(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, str | bytes | list | tuple | Mapping):
        return len(value) == 0
    return False


def _path_problem(kind: str, path: str | None, error: Exception) -> CheckOutcome:
    if isinstance(error, JMESPathError):
        return CheckOutcome(kind, "fail", f"invalid JMESPath expression `{path}`: {error}")
    return CheckOutcome(kind, "fail", str(error))


@check
def not_empty(result: Any, path: str | None = None) -> CheckOutcome:
    """The value (at JMESPath ``path``, default the whole result) is not null, "", [] or {}.

    Args:
        result: the step's result.
        path: a JMESPath expression over the result, or None for the result itself.
    """
    try:
        value = _select(result, path)
    except (JMESPathError, _UnsearchableResultError) as error:
        return _path_problem("not_empty", path, error)
    if _is_empty(value):
        return CheckOutcome("not_empty", "fail", f"{_where(path)} is empty: {_show(value)}")
    return CheckOutcome("not_empty", "pass", f"{_where(path)} is {_show(value)}")


@check
def equals(result: Any, value: Any, path: str | None = None) -> CheckOutcome:
    """The value (at JMESPath ``path``) equals ``value`` in JSON's sense (``true`` ≠ ``1``).

    Args:
        result: the step's result.
        value: the expected value (any JSON value).
        path: a JMESPath expression over the result, or None for the result itself.
    """
    try:
        found = _select(result, path)
    except (JMESPathError, _UnsearchableResultError) as error:
        return _path_problem("equals", path, error)
    if _json_equal(found, value):
        return CheckOutcome("equals", "pass", f"{_where(path)} equals {_show(value)}")
    return CheckOutcome(
        "equals", "fail", f"{_where(path)} is {_show(found)}, expected {_show(value)}"
    )


@check
def regex(result: Any, pattern: str, path: str | None = None) -> CheckOutcome:
    """The value (at JMESPath ``path``) is a string that matches ``pattern`` in full.

    Args:
        result: the step's result.
        pattern: a regular expression in Python's syntax, matched in full. Plans are
            written by models, so the pattern is untrusted: it is matched with the
            ``regex`` library under a time limit of 1 second (a pattern that backtracks
            for ever fails the check instead of hanging the run).
        path: a JMESPath expression over the result, or None for the result itself.
    """
    import regex as regex_library  # imported by the first regex check, not at start-up

    try:
        compiled = regex_library.compile(pattern)
    except regex_library.error as error:
        return CheckOutcome("regex", "fail", f"invalid regular expression {pattern!r}: {error}")
    try:
        found = _select(result, path)
    except (JMESPathError, _UnsearchableResultError) as error:
        return _path_problem("regex", path, error)
    if not isinstance(found, str):
        return CheckOutcome(
            "regex",
            "fail",
            f"{_where(path)} is {type(found).__name__} {_show(found)}, not a string; "
            f"cannot match {pattern!r}",
        )
    try:
        matched = compiled.fullmatch(found, timeout=_REGEX_SECONDS)
    except TimeoutError:
        return CheckOutcome(
            "regex",
            "fail",
            f"matching {pattern!r} against {_where(path)} took longer than "
            f"{_REGEX_SECONDS:g} s (catastrophic backtracking?); simplify the pattern",
        )
    if matched is None:
        return CheckOutcome(
            "regex", "fail", f"{_where(path)} {_show(found)} does not fully match {pattern!r}"
        )
    return CheckOutcome("regex", "pass", f"{_where(path)} {_show(found)} matches {pattern!r}")


@check(name="jmespath")
def jmespath_predicate(result: Any, expr: str) -> CheckOutcome:
    """The JMESPath expression ``expr`` over the result is truthy.

    JMESPath truthiness: ``false``, ``null``, ``""``, ``[]`` and ``{}`` are false;
    everything else, ``0`` included, is true (JMESPath specification).

    Args:
        result: the step's result.
        expr: a JMESPath expression, e.g. ``total != `null` `` or ``length(items) > `0` ``.
    """
    try:
        value = jmespath_library.search(expr, _searchable(result))
    except (JMESPathError, _UnsearchableResultError) as error:
        return _path_problem("jmespath", expr, error)
    if _jmespath_truthy(value):
        return CheckOutcome("jmespath", "pass", f"`{expr}` is {_show(value)}")
    return CheckOutcome("jmespath", "fail", f"`{expr}` is {_show(value)}, which is false")


@check
def file_exists(result: Any, path: str, non_empty: bool = False) -> CheckOutcome:
    """The file ``path`` exists (relative paths against the working directory).

    Args:
        result: the step's result (not used: the check looks at the file system).
        path: the file's path.
        non_empty: also require the file to hold at least one byte.
    """
    del result
    file = Path(path)
    if not file.exists():
        absolute = os.path.abspath(file)
        return CheckOutcome("file_exists", "fail", f"file {path} does not exist ({absolute})")
    if not file.is_file():
        return CheckOutcome("file_exists", "fail", f"{path} exists but is not a file")
    size = file.stat().st_size
    if non_empty and size == 0:
        return CheckOutcome("file_exists", "fail", f"file {path} exists but is empty (0 bytes)")
    return CheckOutcome("file_exists", "pass", f"file {path} exists ({size} bytes)")


@dataclasses.dataclass(frozen=True, slots=True)
class _Number:
    value: Decimal | None
    problem: str | None


def _as_decimal(value: Any, what: str) -> _Number:
    """``value`` as a Decimal built from its *string* form; a list is summed.

    Never float arithmetic: ``0.1`` becomes ``Decimal("0.1")``, not the float's binary value.
    """
    if isinstance(value, list | tuple):
        total = Decimal(0)
        for index, item in enumerate(value):
            part = _as_decimal(item, f"{what}[{index}]")
            if part.value is None:
                return part
            total += part.value
        return _Number(total, None)
    if value is None or isinstance(value, bool):
        return _Number(None, f"{what} is {_show(value)}, not a number")
    if not isinstance(value, str | int | float | Decimal):
        return _Number(None, f"{what} is of type {type(value).__name__}, not a number")
    try:
        number = Decimal(str(value).strip())
    except decimal.InvalidOperation:
        return _Number(None, f"{what} is {_show(value)}, not a number")
    if not number.is_finite():
        return _Number(None, f"{what} is {_show(value)}, not a finite number")
    return _Number(number, None)


@check
def tolerance(
    result: Any,
    actual: str,
    expected: str | None = None,
    expected_value: str | float | int | None = None,
    tolerance: str | float | int = "0.01",
) -> CheckOutcome:
    """``|actual - expected| <= tolerance``, in decimal arithmetic.

    Args:
        result: the step's result.
        actual: JMESPath expression for the actual amount; a list value is summed
            (``items[].vProd``).
        expected: JMESPath expression for the expected amount (a list is summed), or None.
        expected_value: the expected amount written out (``"1234.56"``), or None. Give
            exactly one of ``expected`` and ``expected_value``.
        tolerance: the largest allowed absolute difference (default ``"0.01"``).

    All numbers become :class:`decimal.Decimal` from their string form, so ``0.1 + 0.2``
    equals ``0.3`` exactly.
    """
    if (expected is None) == (expected_value is None):
        return CheckOutcome(
            "tolerance", "fail", "give exactly one of `expected` (a path) and `expected_value`"
        )
    allowed = _as_decimal(tolerance, "tolerance")
    if allowed.value is None or allowed.value < 0:
        return CheckOutcome(
            "tolerance", "fail", allowed.problem or f"tolerance {tolerance!r} is negative"
        )
    try:
        searchable = _searchable(result)
        actual_found = jmespath_library.search(actual, searchable)
        if expected is not None:
            expected_found: Any = jmespath_library.search(expected, searchable)
            expected_name = f"expected `{expected}`"
        else:
            expected_found = expected_value
            expected_name = "expected value"
    except JMESPathError as error:
        return CheckOutcome("tolerance", "fail", f"invalid JMESPath expression: {error}")
    except _UnsearchableResultError as error:
        return CheckOutcome("tolerance", "fail", str(error))
    actual_number = _as_decimal(actual_found, f"actual `{actual}`")
    expected_number = _as_decimal(expected_found, expected_name)
    for number in (actual_number, expected_number):
        if number.value is None:
            return CheckOutcome("tolerance", "fail", str(number.problem))
    assert actual_number.value is not None
    assert expected_number.value is not None
    difference = abs(actual_number.value - expected_number.value)
    comparison = (
        f"actual `{actual}` = {actual_number.value}, {expected_name} = "
        f"{expected_number.value}, difference {difference}"
    )
    if difference <= allowed.value:
        return CheckOutcome("tolerance", "pass", f"{comparison} <= tolerance {allowed.value}")
    return CheckOutcome("tolerance", "fail", f"{comparison} > tolerance {allowed.value}")


BUILTIN_CHECKS: list[CheckDefinition] = [
    not_empty,
    equals,
    regex,
    jmespath_predicate,
    file_exists,
    tolerance,
]
"""Every built-in check kind, in the order documented above."""
