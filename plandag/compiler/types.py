"""Static reasoning about a tool's declared result type: can a reference path exist in it?

Used by the compiler for the ``invalid_reference_path`` diagnostic. The rule is permissive
where the type says nothing (``Any``, ``object``, an unknown class) and strict where it is
explicit: a ``str`` has no fields, a list is indexed by integers, a TypedDict or pydantic
model has exactly its declared keys.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

__all__ = ["path_problem"]

_SCALARS: tuple[type, ...] = (str, bytes, int, float, bool, type(None))


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def _fields_of(annotation: Any) -> dict[str, Any] | None:
    """Declared fields of a TypedDict, pydantic model or dataclass, else None."""
    if isinstance(annotation, type):
        if typing.is_typeddict(annotation):
            return dict(typing.get_type_hints(annotation))
        if issubclass(annotation, BaseModel):
            return {name: info.annotation for name, info in annotation.model_fields.items()}
        if dataclasses.is_dataclass(annotation):
            try:
                hints = typing.get_type_hints(annotation)
            except Exception:
                return None
            return {
                field.name: hints.get(field.name, Any) for field in dataclasses.fields(annotation)
            }
    return None


def path_problem(annotation: Any, path: Sequence[str], depth: int = 0) -> str | None:
    """Why ``path`` cannot exist in a value of type ``annotation``, or None when it may.

    Args:
        annotation: a type annotation (a tool's return annotation).
        path: the reference's path segments, e.g. ``("items", "0", "vProd")``.

    Returns:
        None when the path may exist; otherwise a sentence naming the first segment that
        cannot, and what the type offers instead.
    """
    if depth > 20 or not path:
        return None
    segment, rest = path[0], path[1:]
    if annotation is Any or annotation is object:
        return None
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return path_problem(typing.get_args(annotation)[0], path, depth + 1)
    if origin is typing.Union or origin is types.UnionType:
        members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        problems = [path_problem(member, path, depth + 1) for member in members]
        if any(problem is None for problem in problems):
            return None
        return problems[0] if problems else f"{segment!r}: the value is always null"
    if origin is typing.Literal:
        return f"{segment!r}: the value is a literal {_type_name(annotation)} with no fields"
    if annotation in _SCALARS or (
        isinstance(annotation, type) and issubclass(annotation, _SCALARS)
    ):
        return f"{segment!r}: the result is a {_type_name(annotation)}, which has no fields"
    fields = _fields_of(annotation)
    if fields is not None:
        if segment not in fields:
            offered = ", ".join(sorted(fields)) or "none"
            name = _type_name(annotation)
            return f"{segment!r}: {name} has no field {segment!r} (fields: {offered})"
        return path_problem(fields[segment], rest, depth + 1)
    container = origin if origin is not None else annotation
    arguments = typing.get_args(annotation)
    if isinstance(container, type):
        if issubclass(container, Mapping):
            value_type = arguments[1] if len(arguments) == 2 else Any
            return path_problem(value_type, rest, depth + 1)
        if issubclass(container, tuple):
            if not segment.isdigit():
                return f"{segment!r}: the result is a tuple, indexed by integers"
            if len(arguments) == 2 and arguments[1] is Ellipsis:
                return path_problem(arguments[0], rest, depth + 1)
            if arguments and int(segment) >= len(arguments):
                return f"{segment!r}: the tuple has {len(arguments)} items"
            return path_problem(arguments[int(segment)] if arguments else Any, rest, depth + 1)
        if issubclass(container, Sequence) and not issubclass(container, str | bytes):
            if not segment.isdigit():
                return f"{segment!r}: the result is a list, indexed by integers (.0, .1, ...)"
            return path_problem(arguments[0] if arguments else Any, rest, depth + 1)
    return None
