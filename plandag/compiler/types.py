"""Static reasoning about a tool's declared result type: can a reference path exist in it?

Used by the compiler for the ``invalid_reference_path`` diagnostic. The rule is permissive
where the type says nothing (``Any``, ``object``, an unknown class) and strict where it is
explicit: a ``str`` has no fields, a list is indexed by integers, a TypedDict or pydantic
model has exactly its declared keys.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import typing_extensions
from pydantic import BaseModel

from plandag.dag.references import is_index

__all__ = ["path_problem"]

_SCALARS: tuple[type, ...] = (str, bytes, int, float, bool, type(None))


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def _fields_of(annotation: Any) -> dict[str, Any] | None:
    """Declared fields of a TypedDict, pydantic model or dataclass, else None (cached per
    class: resolving type hints is the slowest part of checking a reference path)."""
    if isinstance(annotation, type):
        return _class_fields(annotation)
    return None


@functools.lru_cache(maxsize=512)
def _class_fields(annotation: type) -> dict[str, Any] | None:
    """Fields of a class, read once (the fields of a class never change in a process)."""
    # typing_extensions' check also knows its own TypedDict, which pydantic requires
    # on Python < 3.12 (typing.is_typeddict does not recognise it).
    if typing_extensions.is_typeddict(annotation):
        try:
            return dict(typing.get_type_hints(annotation))
        except Exception:  # unresolvable forward references: say nothing about it
            return None
    if issubclass(annotation, BaseModel):
        fields = {name: info.annotation for name, info in annotation.model_fields.items()}
        for name, computed in annotation.model_computed_fields.items():
            fields[name] = computed.return_type
        return fields
    if dataclasses.is_dataclass(annotation):
        try:
            hints = typing.get_type_hints(annotation)
        except Exception:
            return None
        return {field.name: hints.get(field.name, Any) for field in dataclasses.fields(annotation)}
    return None


def path_problem(annotation: Any, path: Sequence[str], depth: int = 0) -> str | None:
    """Why ``path`` cannot exist in a value of type ``annotation``, or None when it may.

    Args:
        annotation: a type annotation (a tool's return annotation).
        path: the reference's path segments, e.g. ``("items", "0", "vProd")``.
        depth: how many segments were already followed (used by the recursion; callers
            leave it at 0). Past 20 levels the answer is None (may exist).

    Returns:
        None when the path may exist; otherwise a sentence naming the first segment that
        cannot, what the value there is (``the result``, ``result.items``) and what its
        type offers instead.
    """
    return _problem(annotation, tuple(path), depth, ())


def _describe(done: tuple[str, ...]) -> str:
    return "the result" if not done else "result." + ".".join(done)


def _problem(
    annotation: Any, path: tuple[str, ...], depth: int, done: tuple[str, ...]
) -> str | None:
    if depth > 20 or not path:
        return None
    segment, rest = path[0], path[1:]
    here = _describe(done)
    if annotation is Any or annotation is object:
        return None
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _problem(typing.get_args(annotation)[0], path, depth + 1, done)
    if origin is typing.Union or origin is types.UnionType:
        members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        problems = [_problem(member, path, depth + 1, done) for member in members]
        if any(problem is None for problem in problems):
            return None
        return problems[0] if problems else f"{segment!r}: {here} is always null"
    if origin is typing.Literal:
        return f"{segment!r}: {here} ({_type_name(annotation)}) has no fields"
    if annotation in _SCALARS or (
        isinstance(annotation, type) and issubclass(annotation, _SCALARS)
    ):
        return f"{segment!r}: {here} ({_type_name(annotation)}) has no fields"
    fields = _fields_of(annotation)
    if fields is not None:
        if segment not in fields:
            offered = ", ".join(sorted(fields)) or "none"
            name = _type_name(annotation)
            return f"{segment!r}: {here} ({name}) has no field {segment!r} (fields: {offered})"
        return _problem(fields[segment], rest, depth + 1, (*done, segment))
    container = origin if origin is not None else annotation
    arguments = typing.get_args(annotation)
    if isinstance(container, type):
        if issubclass(container, Mapping):
            value_type = arguments[1] if len(arguments) == 2 else Any
            return _problem(value_type, rest, depth + 1, (*done, segment))
        if issubclass(container, tuple):
            if not is_index(segment):
                return f"{segment!r}: {here} is a tuple, indexed by integers (.0, .1, ...)"
            if len(arguments) == 2 and arguments[1] is Ellipsis:
                return _problem(arguments[0], rest, depth + 1, (*done, segment))
            if arguments and int(segment) >= len(arguments):
                return f"{segment!r}: {here} is a tuple of {len(arguments)} items"
            item_type = arguments[int(segment)] if arguments else Any
            return _problem(item_type, rest, depth + 1, (*done, segment))
        if issubclass(container, Sequence) and not issubclass(container, str | bytes):
            if not is_index(segment):
                return f"{segment!r}: {here} is a list, indexed by integers (.0, .1, ...)"
            return _problem(arguments[0] if arguments else Any, rest, depth + 1, (*done, segment))
    return None
