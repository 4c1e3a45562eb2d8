"""A stand-in model that follows the schema and nothing else (docs/testing.md).

:class:`SchemaFollower` is a :data:`~plandag.testing.script.Responder`: given as a server's
``default`` (or pushed), it answers every structured-output request with a random instance
of the JSON Schema the request carries, whatever the prompt says::

    from plandag.testing import ChatCompletionsServer, MessagesServer, SchemaFollower

    with MessagesServer(default=SchemaFollower(seed=7)) as server: ...
    with ChatCompletionsServer(default=SchemaFollower(seed=7)) as server: ...

It reads the schema where each protocol puts it: ``output_config.format.schema`` (the
Anthropic Messages API) or ``response_format.json_schema.schema`` (OpenAI-compatible chat
completions); a request without one gets a short plain text. It is what a model that obeys
structured output but understands nothing would write, so it shows which rules a schema
states and which it leaves to the code that reads the answer.

The generator (:func:`random_instance`) covers the JSON Schema that plandag sends and what
pydantic emits: ``type`` (one or a list), ``const``, ``enum``, ``anyOf``/``oneOf`` (a branch
at random), ``allOf`` of one schema, ``$ref`` into the root's ``$defs``/``definitions``
(recursion bounded by depth), ``properties``/``required`` (an optional property is written
half the time) with ``additionalProperties`` false or a schema, ``items``, ``minItems``/
``maxItems``, ``minimum``/``maximum`` and their exclusive forms, ``minLength``/``maxLength``,
and ``pattern`` (a string the regular expression matches, from its parse:
literals, classes, ranges, categories, groups, alternation, repeats, anchors; back
references and look-arounds are refused). Why not hypothesis-jsonschema: it generates
through hypothesis's engine, which draws examples inside a test run and shrinks them, not
one seeded random instance per request in a server thread; the tests use it to check this
generator and the plan schema.

Every answer is drawn from one :class:`random.Random` seeded with ``seed``, so a run is
reproducible when requests arrive in the same order.
"""

from __future__ import annotations

import importlib
import json
import random
import string
import threading
from collections.abc import Mapping
from typing import Any

from plandag.testing.script import ScriptedResponse

__all__ = ["SchemaFollower", "UnsupportedSchemaError", "random_instance", "request_schema"]

_ALPHABET = string.ascii_letters + string.digits + " _-./:"
_PRINTABLE = [chr(code) for code in range(32, 127)]
_sre: Any = importlib.import_module("re._parser")
_constants: Any = importlib.import_module("re._constants")


class UnsupportedSchemaError(ValueError):
    """A schema (or a pattern in it) this generator cannot draw an instance of."""


def request_schema(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The structured-output schema a request carries, in either protocol, or None.

    Args:
        body: the request's JSON body (Anthropic Messages or OpenAI chat completions).

    Returns:
        ``output_config.format.schema`` (format ``json_schema``), else
        ``response_format.json_schema.schema``, else None.
    """
    config = body.get("output_config")
    if isinstance(config, Mapping):
        fmt = config.get("format")
        if isinstance(fmt, Mapping) and isinstance(fmt.get("schema"), Mapping):
            return fmt["schema"]  # type: ignore[no-any-return]
    response_format = body.get("response_format")
    if isinstance(response_format, Mapping):
        inner = response_format.get("json_schema")
        if isinstance(inner, Mapping) and isinstance(inner.get("schema"), Mapping):
            return inner["schema"]  # type: ignore[no-any-return]
    return None


class _Generator:
    def __init__(
        self, root: Mapping[str, Any], rng: random.Random, max_items: int, max_depth: int
    ) -> None:
        self.root = root
        self.rng = rng
        self.max_items = max_items
        self.max_depth = max_depth
        definitions = root.get("$defs") or root.get("definitions") or {}
        self.definitions: Mapping[str, Any] = (
            definitions if isinstance(definitions, Mapping) else {}
        )

    def value(self, schema: Any, depth: int = 0) -> Any:
        if schema is True or schema == {}:
            return self._any(depth)
        if not isinstance(schema, Mapping):
            raise UnsupportedSchemaError(f"not a schema: {schema!r}")
        reference = schema.get("$ref")
        if isinstance(reference, str):
            if reference == "#":
                return self.value(self.root, depth + 1)
            name = reference.rsplit("/", 1)[-1]
            if name not in self.definitions:
                raise UnsupportedSchemaError(f"unresolvable $ref {reference!r}")
            return self.value(self.definitions[name], depth + 1)
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return self.rng.choice(schema["enum"])
        choices = schema.get("anyOf") or schema.get("oneOf")
        if isinstance(choices, list) and choices:
            if depth >= self.max_depth:
                simple = [choice for choice in choices if not _deep(choice)]
                choices = simple or choices
            return self.value(self.rng.choice(choices), depth + 1)
        parts = schema.get("allOf")
        if isinstance(parts, list) and parts:
            if len(parts) != 1:
                raise UnsupportedSchemaError("allOf of more than one schema")
            return self.value(parts[0], depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = self.rng.choice(kind) if kind else None
        if kind is None:
            if "properties" in schema:
                kind = "object"
            elif "items" in schema:
                kind = "array"
            else:
                return self._any(depth)
        if kind == "null":
            return None
        if kind == "boolean":
            return self.rng.random() < 0.5
        if kind == "integer":
            return self._integer(schema)
        if kind == "number":
            return self._number(schema)
        if kind == "string":
            return self._string(schema)
        if kind == "array":
            return self._array(schema, depth)
        if kind == "object":
            return self._object(schema, depth)
        raise UnsupportedSchemaError(f"unknown type {kind!r}")

    def _any(self, depth: int) -> Any:
        kinds = ["null", "boolean", "integer", "number", "string"]
        if depth < self.max_depth:
            kinds += ["array", "object"]
        kind = self.rng.choice(kinds)
        if kind == "array":
            return [self._any(depth + 1) for _ in range(self.rng.randint(0, 2))]
        if kind == "object":
            return {self._text(1, 6): self._any(depth + 1) for _ in range(self.rng.randint(0, 2))}
        return self.value({"type": kind}, depth + 1)

    def _integer(self, schema: Mapping[str, Any]) -> int:
        low: int | None = None
        high: int | None = None
        if isinstance(schema.get("minimum"), int | float):
            low = int(-(-schema["minimum"] // 1))
        if isinstance(schema.get("exclusiveMinimum"), int | float):
            low = int(schema["exclusiveMinimum"] // 1) + 1
        if isinstance(schema.get("maximum"), int | float):
            high = int(schema["maximum"] // 1)
        if isinstance(schema.get("exclusiveMaximum"), int | float):
            high = int(-(-schema["exclusiveMaximum"] // 1)) - 1
        if low is None:
            low = -3 if high is None else min(-3, high)
        if high is None:
            high = max(100, low)
        if low > high:
            raise UnsupportedSchemaError(f"no integer between {low} and {high}")
        return self.rng.randint(low, high)

    def _number(self, schema: Mapping[str, Any]) -> float:
        low = float(schema.get("minimum", schema.get("exclusiveMinimum", -3.0)))
        high = float(schema.get("maximum", schema.get("exclusiveMaximum", low + 100.0)))
        if high < low:
            raise UnsupportedSchemaError(f"no number between {low} and {high}")
        value = round(self.rng.uniform(low, high), 3)
        if "exclusiveMinimum" in schema and value <= low:
            value = low + (high - low) / 2 if high > low else low + 0.5
        if "exclusiveMaximum" in schema and value >= high:
            value = low + (high - low) / 2
        return value

    def _text(self, low: int, high: int) -> str:
        return "".join(self.rng.choice(_ALPHABET) for _ in range(self.rng.randint(low, high)))

    def _string(self, schema: Mapping[str, Any]) -> str:
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            return _from_pattern(pattern, self.rng)
        low = int(schema.get("minLength", 0))
        high = int(schema.get("maxLength", max(low, 12)))
        if high < low:
            raise UnsupportedSchemaError(f"no string of length {low} to {high}")
        return self._text(low, min(high, low + 12))

    def _array(self, schema: Mapping[str, Any], depth: int) -> list[Any]:
        low = int(schema.get("minItems", 0))
        high = int(schema.get("maxItems", low + self.max_items))
        if depth >= self.max_depth:
            high = low
        if high < low:
            raise UnsupportedSchemaError(f"no array of {low} to {high} items")
        items = schema.get("items", {})
        if "prefixItems" in schema:
            raise UnsupportedSchemaError("prefixItems (tuples)")
        return [self.value(items, depth + 1) for _ in range(self.rng.randint(low, high))]

    def _object(self, schema: Mapping[str, Any], depth: int) -> dict[str, Any]:
        properties = schema.get("properties") or {}
        required = set(schema.get("required") or ())
        result: dict[str, Any] = {}
        for name, field in properties.items():
            if name in required or (depth < self.max_depth and self.rng.random() < 0.5):
                result[name] = self.value(field, depth + 1)
        extra = schema.get("additionalProperties", True)
        if extra is not False and depth < self.max_depth:
            field = extra if isinstance(extra, Mapping) else {}
            for _ in range(self.rng.randint(0, 2)):
                name = self._text(1, 8)
                if name not in properties:
                    result[name] = self.value(field, depth + 1)
        return result


def _deep(schema: Any) -> bool:
    """Whether a branch may nest (an object, an array, a reference)."""
    if not isinstance(schema, Mapping):
        return False
    return "$ref" in schema or schema.get("type") in ("object", "array") or "properties" in schema


def _from_pattern(pattern: str, rng: random.Random) -> str:
    """A string the regular expression ``pattern`` matches (``re.search`` semantics: the
    anchors ``^``/``$`` it holds are honoured, nothing is added around it)."""
    try:
        parsed = _sre.parse(pattern)
    except Exception as error:  # re.error and friends
        raise UnsupportedSchemaError(f"pattern {pattern!r}: {error}") from error
    return _walk(list(parsed), rng)


def _category(name: Any) -> list[str]:
    text = str(name).rsplit(".", 1)[-1].upper()
    if "NOT_DIGIT" in text:
        return [c for c in _PRINTABLE if not c.isdigit()]
    if "DIGIT" in text:
        return list(string.digits)
    if "NOT_WORD" in text:
        return [c for c in _PRINTABLE if not (c.isalnum() or c == "_")]
    if "WORD" in text:
        return list(string.ascii_letters + string.digits + "_")
    if "NOT_SPACE" in text:
        return [c for c in _PRINTABLE if not c.isspace()]
    if "SPACE" in text:
        return [" "]
    raise UnsupportedSchemaError(f"category {name}")


def _class(items: list[Any]) -> list[str]:
    chosen: set[str] = set()
    negate = False
    for op, argument in items:
        if op is _constants.NEGATE:
            negate = True
        elif op is _constants.LITERAL:
            chosen.add(chr(argument))
        elif op is _constants.RANGE:
            chosen.update(chr(code) for code in range(argument[0], argument[1] + 1))
        elif op is _constants.CATEGORY:
            chosen.update(_category(argument))
        else:
            raise UnsupportedSchemaError(f"class item {op}")
    if negate:
        return [c for c in _PRINTABLE if c not in chosen]
    return sorted(chosen)


def _walk(items: list[Any], rng: random.Random) -> str:
    out: list[str] = []
    for op, argument in items:
        if op is _constants.LITERAL:
            out.append(chr(argument))
        elif op is _constants.NOT_LITERAL:
            out.append(rng.choice([c for c in _PRINTABLE if ord(c) != argument]))
        elif op is _constants.ANY:
            out.append(rng.choice(_ALPHABET))
        elif op is _constants.IN:
            choices = _class(list(argument))
            if not choices:
                raise UnsupportedSchemaError("an empty character class")
            out.append(rng.choice(choices))
        elif op is _constants.CATEGORY:
            out.append(rng.choice(_category(argument)))
        elif op is _constants.BRANCH:
            out.append(_walk(list(rng.choice(argument[1])), rng))
        elif op is _constants.SUBPATTERN:
            out.append(_walk(list(argument[-1]), rng))
        elif op in (_constants.MAX_REPEAT, _constants.MIN_REPEAT) or (
            str(op) == "POSSESSIVE_REPEAT"
        ):
            low, high, inner = argument
            top = low + 3 if high == _constants.MAXREPEAT else min(high, low + 3)
            for _ in range(rng.randint(low, top)):
                out.append(_walk(list(inner), rng))
        elif op is _constants.AT:
            continue  # ^, $, \A, \Z: the string is built whole
        else:
            raise UnsupportedSchemaError(f"pattern feature {op}")
    return "".join(out)


def random_instance(
    schema: Mapping[str, Any],
    rng: random.Random,
    *,
    max_items: int = 4,
    max_depth: int = 8,
) -> Any:
    """A random value that validates against ``schema``.

    Args:
        schema: a JSON Schema (the subset in the module docstring); ``$ref`` resolves into
            its own ``$defs``/``definitions``.
        rng: the random source.
        max_items: the most items an array gets beyond its ``minItems``.
        max_depth: the nesting past which arrays get their ``minItems`` only, optional
            properties are left out and unions prefer branches that do not nest.

    Returns:
        The value (JSON-ready).

    Raises:
        UnsupportedSchemaError: the schema uses what the generator does not cover.
    """
    return _Generator(schema, rng, max_items, max_depth).value(schema)


class SchemaFollower:
    """A responder that answers a structured-output request with a random instance of its
    schema (the module docstring); thread-safe.

    Args:
        seed: the random source's seed.
        max_items: the most items an array gets beyond its ``minItems`` (>= 0).
        max_depth: see :func:`random_instance` (>= 1).
        text: the answer to a request without a schema.

    Attributes:
        answered: the structured-output requests answered so far.
    """

    def __init__(
        self, seed: int = 0, *, max_items: int = 4, max_depth: int = 8, text: str = "ok"
    ) -> None:
        if max_items < 0 or max_depth < 1:
            raise ValueError("max_items must be >= 0 and max_depth >= 1")
        self.rng = random.Random(seed)
        self.max_items = max_items
        self.max_depth = max_depth
        self.text = text
        self.answered = 0
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> ScriptedResponse:
        """The reply to a request with JSON ``body``."""
        schema = request_schema(body)
        if schema is None:
            return ScriptedResponse.text(self.text)
        with self._lock:
            value = random_instance(
                schema, self.rng, max_items=self.max_items, max_depth=self.max_depth
            )
            self.answered += 1
        return ScriptedResponse.text(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
