"""Structured-output schemas as each provider accepts them, and the way back to the answer
the caller asked for.

A caller hands a model call any JSON Schema (Draft 2020-12; ``definitions`` and draft-7
refs read too). Providers that enforce a schema while generating accept only a subset:

* **OpenAI strict mode** (``response_format: {"type": "json_schema", "json_schema":
  {..., "strict": true}}``; OpenAI, "Structured Outputs", "Supported schemas"): the root
  is an object; every object sets ``additionalProperties: false`` and lists every property
  in ``required`` (an optional one is a union with ``null``); every schema has a ``type``
  (or ``anyOf``, ``enum``, ``$ref``); the keywords allowed besides those are ``pattern``
  and ``format`` (:data:`OPENAI_STRING_FORMATS`) on strings, ``minimum``, ``maximum``,
  ``exclusiveMinimum``, ``exclusiveMaximum``, ``multipleOf`` on numbers, ``minItems``,
  ``maxItems`` on arrays, and ``description``, ``title``, ``$defs`` anywhere; recursion
  through ``$ref`` is allowed; at most :data:`OPENAI_MAX_DEPTH` levels of nested objects,
  :data:`OPENAI_MAX_PROPERTIES` properties, :data:`OPENAI_MAX_ENUM_VALUES` enum values.
* **Anthropic structured outputs** (``output_config.format``; Anthropic, "Structured
  outputs", "JSON Schema limitations", and the ``anthropic`` SDK's ``transform_schema``):
  every object sets ``additionalProperties: false``; one ``type`` per schema (a nullable
  value is ``anyOf`` with ``null``); no numeric bounds, no string lengths, an array's
  ``minItems`` only 0 or 1, no ``maxItems``; ``pattern`` with simple regular expressions
  only (no backreferences, no lookahead or lookbehind, no word boundaries ``\\b``/``\\B``, no
  ``{n,m}`` with a large range: :func:`pattern_problem`); formats
  :data:`ANTHROPIC_STRING_FORMATS`; no recursion.

:func:`prepare_schema` turns a schema into the one a provider accepts
(:class:`PreparedSchema`). What it cannot state the provider cannot enforce, so plandag
checks it on the answer instead:

* a keyword the provider refuses (a numeric bound on Anthropic, ``minLength`` on OpenAI,
  ``default``, ``uniqueItems``...) is moved into the schema's ``description``, where the
  model reads it (:attr:`PreparedSchema.moved` lists them);
* an optional property becomes required and nullable where the provider wants every
  property required; a ``null`` the model writes for it means "absent" and is removed from
  the answer (:meth:`PreparedSchema.restore`);
* a value no provider schema can state (a free-form object, ``{}``, a tuple, a schema
  that refers to itself where recursion is refused) travels as JSON text in a string, and
  :meth:`PreparedSchema.restore` decodes it;
* a root that is not an object (OpenAI) is sent as ``{"value": ...}`` and unwrapped.

After restoring, :meth:`PreparedSchema.violations` validates the answer against the
schema as the caller gave it (``jsonschema``), so the rules the provider did not enforce
are still checked.

:func:`strict_problems` checks a schema against a provider's rules (the schema as sent,
for tests and for the local servers of ``plandag.testing``, which refuse what the real
APIs refuse).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import re
from collections.abc import Mapping
from typing import Any, Literal

__all__ = [
    "ANTHROPIC_MAX_REPETITION",
    "ANTHROPIC_STRING_FORMATS",
    "OPENAI_MAX_DEPTH",
    "OPENAI_MAX_ENUM_VALUES",
    "OPENAI_MAX_PROPERTIES",
    "OPENAI_STRING_FORMATS",
    "VALIDATORS_KEPT",
    "PreparedSchema",
    "SchemaProvider",
    "canonical_json",
    "pattern_problem",
    "prepare_schema",
    "schema_violations",
    "strict_problems",
    "validator_for",
]

SchemaProvider = Literal["openai", "anthropic"]
"""The rules a schema is prepared for: OpenAI's strict mode (every OpenAI-compatible
server), or Anthropic's structured outputs."""

OPENAI_STRING_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
)
"""The string formats OpenAI's strict mode accepts."""

ANTHROPIC_STRING_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "uri", "ipv4", "ipv6", "uuid"}
)
"""The string formats Anthropic's structured outputs accept."""

ANTHROPIC_MAX_REPETITION = 100
"""The largest bound of a ``{n}``/``{n,m}`` repetition in a ``pattern`` sent to Anthropic.
Its documentation refuses "complex quantifiers with large ranges" without giving a number;
plandag reads a bound above this one as large (:func:`pattern_problem`)."""

OPENAI_MAX_DEPTH = 10
"""Levels of nested objects OpenAI's strict mode accepts."""

OPENAI_MAX_PROPERTIES = 5000
"""Object properties, in all, OpenAI's strict mode accepts in one schema."""

OPENAI_MAX_ENUM_VALUES = 1000
"""Enum values, in all, OpenAI's strict mode accepts in one schema."""

_ANNOTATIONS = frozenset({"description", "title"})
_DROPPED = frozenset({"$schema", "$id", "$comment", "examples", "readOnly", "writeOnly"})
_STRUCTURE = frozenset(
    {"type", "enum", "const", "anyOf", "$ref", "$defs", "properties", "required"}
    | {"additionalProperties", "items"}
)
_NUMBER_BOUNDS = frozenset(
    {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
)
_JSON_TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")
_TYPE_KEYWORDS = {
    "object": frozenset(
        {"properties", "required", "additionalProperties", "patternProperties"}
        | {"propertyNames", "minProperties", "maxProperties", "unevaluatedProperties"}
        | {"dependentRequired", "dependentSchemas"}
    ),
    "array": frozenset(
        {"items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains"}
        | {"minContains", "maxContains", "unevaluatedItems"}
    ),
    "string": frozenset({"minLength", "maxLength", "pattern", "format", "contentEncoding"}),
    "number": _NUMBER_BOUNDS,
    "integer": _NUMBER_BOUNDS,
}
_MAX_VIOLATIONS = 20


@dataclasses.dataclass(frozen=True)
class _Profile:
    provider: SchemaProvider
    all_required: bool
    root_object: bool
    recursion: bool
    const: bool
    string: frozenset[str]
    formats: frozenset[str]
    number: frozenset[str]
    array: frozenset[str]
    max_min_items: int | None
    simple_patterns: bool


_PROFILES: dict[str, _Profile] = {
    "openai": _Profile(
        provider="openai",
        all_required=True,
        root_object=True,
        recursion=True,
        const=False,
        string=frozenset({"pattern", "format"}),
        formats=OPENAI_STRING_FORMATS,
        number=_NUMBER_BOUNDS,
        array=frozenset({"minItems", "maxItems"}),
        max_min_items=None,
        simple_patterns=False,
    ),
    "anthropic": _Profile(
        provider="anthropic",
        all_required=False,
        root_object=False,
        recursion=False,
        const=True,
        string=frozenset({"format", "pattern"}),
        formats=ANTHROPIC_STRING_FORMATS,
        number=frozenset(),
        array=frozenset({"minItems"}),
        max_min_items=1,
        simple_patterns=True,
    ),
}


_REPETITION = re.compile(r"\{(\d+)(?:,(\d*))?\}")
_LOOKAROUNDS = ("(?=", "(?!", "(?<=", "(?<!")


def pattern_problem(pattern: Any) -> str | None:
    """What Anthropic's structured outputs refuse in a ``pattern`` (Anthropic, "Structured
    outputs", "JSON Schema limitations": full and partial matches, quantifiers, character
    classes and groups are supported; backreferences, lookahead and lookbehind, word
    boundaries and complex quantifiers with large ranges are not), or None.

    Args:
        pattern: the keyword's value.

    Returns:
        ``"a lookaround"``, ``"a backreference"``, ``"a word boundary (\\b, \\B)"``,
        ``"a repetition above 100"`` (:data:`ANTHROPIC_MAX_REPETITION`),
        ``"not a regular expression (...)"`` (not a string, or Python's ``re`` cannot read
        it), or None for a simple one.
    """
    if not isinstance(pattern, str):
        return "not a regular expression (not a string)"
    try:
        re.compile(pattern)
    except re.error as error:
        return f"not a regular expression ({error})"
    index = 0
    in_class = False
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            escaped = pattern[index + 1 : index + 2]
            if not in_class and escaped in ("b", "B"):
                return "a word boundary (\\b, \\B)"
            if not in_class and escaped.isdigit() and escaped != "0":
                return "a backreference"
            index += 2
            continue
        if in_class:
            in_class = char != "]"
            index += 1
            continue
        if char == "[":
            index += 1
            if pattern.startswith("^", index):
                index += 1
            if pattern.startswith("]", index):
                index += 1  # a "]" first in a class is the character itself
            in_class = True
            continue
        if pattern.startswith(_LOOKAROUNDS, index):
            return "a lookaround"
        if pattern.startswith("(?P=", index):
            return "a backreference"
        repetition = _REPETITION.match(pattern, index) if char == "{" else None
        if repetition is not None and any(
            bound and int(bound) > ANTHROPIC_MAX_REPETITION for bound in repetition.groups()
        ):
            return f"a repetition above {ANTHROPIC_MAX_REPETITION}"
        index += 1
    return None


def _profile(provider: str) -> _Profile:
    try:
        return _PROFILES[provider]
    except KeyError:
        raise ValueError(
            f"no schema rules for provider {provider!r}; known: {', '.join(_PROFILES)}"
        ) from None


# -- the way back: restore nodes ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Text:
    """The value was sent as JSON text: decode it."""


@dataclasses.dataclass(frozen=True)
class _Object:
    """Per property: what to restore inside it, and whether a null means "absent"."""

    properties: Mapping[str, tuple[_Restore | None, bool]]


@dataclasses.dataclass(frozen=True)
class _Array:
    items: _Restore


@dataclasses.dataclass(frozen=True)
class _AnyOf:
    """Branches as sent, with their restore nodes: the first branch the value matches
    decides."""

    branches: tuple[tuple[Any, _Restore | None], ...]


@dataclasses.dataclass(frozen=True)
class _Ref:
    name: str


@dataclasses.dataclass(frozen=True)
class _Root:
    """The root was sent as ``{"value": ...}``."""

    inner: _Restore | None


_Restore = _Text | _Object | _Array | _AnyOf | _Ref | _Root
_ROOT_KEY = "value"
_TEXT_PREFIX = "JSON text (a string holding the JSON) of a value"


@dataclasses.dataclass(frozen=True)
class PreparedSchema:
    """A schema as one provider accepts it, with the way back to the caller's shape.

    Attributes:
        provider: the rules it was prepared for (``openai``, ``anthropic``).
        schema: the schema to send (a new dict, never the caller's).
        original: the schema as the caller gave it.
        moved: the keywords moved into descriptions because the provider refuses them, as
            ``"PATH: keyword"`` (JSON Pointer paths into ``original``); plandag checks them
            on the answer (:meth:`violations`).
        as_text: the paths whose values travel as JSON text.
        reshaped: the answer's shape differs from the caller's (nulls for absent optional
            properties, JSON text, a wrapped root): :meth:`restore` is needed.
    """

    provider: SchemaProvider
    schema: dict[str, Any]
    original: Mapping[str, Any]
    moved: tuple[str, ...]
    as_text: tuple[str, ...]
    reshaped: bool
    _restore: _Restore | None = dataclasses.field(repr=False, compare=False, default=None)
    _defs: Mapping[str, _Restore | None] = dataclasses.field(
        repr=False, compare=False, default_factory=dict
    )

    @property
    def enforced(self) -> bool:
        """True when the provider enforces every rule of the caller's schema (nothing moved
        into descriptions)."""
        return not self.moved

    def restore(self, value: Any) -> Any:
        """The answer in the caller's shape: nulls standing for absent optional properties
        removed, JSON text decoded, a wrapped root unwrapped. A part that does not have the
        shape sent is left as it is (:meth:`violations` then says what is wrong).

        Args:
            value: the decoded answer, as the provider's schema shaped it.

        Returns:
            A new value (``value`` is not changed).
        """
        if self._restore is None:
            return value
        return self._apply(copy.deepcopy(value), self._restore, 0)

    def restore_text(self, text: str) -> str:
        """The answer's text in the caller's shape: ``text`` itself when nothing was
        reshaped or it is not JSON, else the restored value as compact JSON."""
        if not self.reshaped:
            return text
        try:
            value = json.loads(text)
        except ValueError:
            return text
        restored = self.restore(value)
        if restored == value:
            return text
        return json.dumps(restored, ensure_ascii=False, separators=(",", ":"))

    def violations(self, value: Any) -> list[str]:
        """The answer's violations of the caller's schema, one line each
        (``$.age: -1 is less than the minimum of 0``), at most 20; empty when it
        validates (Draft 2020-12, ``jsonschema``)."""
        return schema_violations(self.original, value)

    @functools.cached_property
    def _sent_validator(self) -> Any:
        """The shared validator of the schema sent (:func:`validator_for`), looked up once:
        its ``$defs`` resolve every branch."""
        return validator_for(self.schema)

    def _apply(self, value: Any, node: _Restore | None, depth: int) -> Any:
        if node is None or depth > 200:
            return value
        if isinstance(node, _Text):
            if isinstance(value, str):
                try:
                    return json.loads(value)
                except ValueError:
                    return value
            return value
        if isinstance(node, _Root):
            if isinstance(value, dict) and set(value) == {_ROOT_KEY}:
                return self._apply(value[_ROOT_KEY], node.inner, depth + 1)
            return value
        if isinstance(node, _Object):
            if not isinstance(value, dict):
                return value
            for name, (inner, null_is_absent) in node.properties.items():
                if name not in value:
                    continue
                if null_is_absent and value[name] is None:
                    del value[name]
                elif inner is not None:
                    value[name] = self._apply(value[name], inner, depth + 1)
            return value
        if isinstance(node, _Array):
            if not isinstance(value, list):
                return value
            return [self._apply(item, node.items, depth + 1) for item in value]
        if isinstance(node, _Ref):
            return self._apply(value, self._defs.get(node.name), depth + 1)
        for branch, inner in node.branches:
            if self._sent_validator.evolve(schema=branch).is_valid(value):
                return self._apply(value, inner, depth + 1)
        return value


VALIDATORS_KEPT = 256
"""Validators :func:`validator_for` keeps (least recently used dropped first)."""


def canonical_json(schema: Mapping[str, Any]) -> str:
    """``schema`` as canonical JSON (keys sorted, no spaces): the key of its validator.

    Raises:
        TypeError: a value that is not JSON.
    """
    return json.dumps(schema, separators=(",", ":"), sort_keys=True)


@functools.lru_cache(maxsize=VALIDATORS_KEPT)
def _validator_of(canonical: str) -> Any:
    import jsonschema

    return jsonschema.Draft202012Validator(json.loads(canonical))


def validator_for(schema: Mapping[str, Any], canonical: str | None = None) -> Any:
    """The ``jsonschema`` Draft 2020-12 validator of ``schema``, built once per distinct
    schema (its :func:`canonical_json`) for the process and shared by every caller: the
    model clients validating answers, the ``llm`` step. The schema is not checked against
    the metaschema here.

    Args:
        schema: a JSON Schema.
        canonical: :func:`canonical_json` of ``schema`` when the caller has it.
    """
    return _validator_of(canonical if canonical is not None else canonical_json(schema))


def schema_violations(schema: Mapping[str, Any], value: Any) -> list[str]:
    """``value``'s violations of ``schema`` (Draft 2020-12), one line each, at most 20,
    with the schema's shared validator (:func:`validator_for`)."""
    validator = validator_for(schema)
    lines: list[str] = []
    for error in sorted(validator.iter_errors(value), key=lambda item: item.json_path):
        lines.append(f"{error.json_path}: {error.message}")
        if len(lines) >= _MAX_VIOLATIONS:
            break
    return lines


# -- preparing ------------------------------------------------------------------------------------


def prepare_schema(schema: Mapping[str, Any], provider: SchemaProvider) -> PreparedSchema:
    """``schema`` as ``provider``'s structured outputs accept it (rules in the module
    docstring).

    Args:
        schema: a JSON Schema (a mapping; Draft 2020-12, draft-7 ``definitions`` read too).
        provider: ``openai`` (strict mode, every OpenAI-compatible server) or
            ``anthropic``.

    Returns:
        The :class:`PreparedSchema`; its ``schema`` passes :func:`strict_problems` for
        ``provider`` except for size limits (too many properties, nesting or enum values),
        which no reshaping removes.

    Raises:
        ValueError: an unknown provider.
    """
    profile = _profile(provider)
    preparer = _Preparer(profile, schema)
    sent, restore = preparer.node(schema, "")
    target = sent.get("$ref", "").removeprefix("#/$defs/")
    named = preparer.defs.get(target) if set(sent) == {"$ref"} else None
    if profile.root_object and named is not None and named.get("type") == "object":
        sent = copy.deepcopy(named)  # a root that names its definition
    if profile.root_object and sent.get("type") != "object":
        description = sent.pop("description", None)
        sent = _object_schema({_ROOT_KEY: sent}, [_ROOT_KEY])
        if description is not None:
            sent["description"] = description
        restore = _Root(restore)
        preparer.reshaped = True
    if preparer.defs:
        sent["$defs"] = {name: preparer.defs[name] for name in sorted(preparer.defs)}
    return PreparedSchema(
        provider=profile.provider,
        schema=sent,
        original=schema,
        moved=tuple(preparer.moved),
        as_text=tuple(preparer.as_text),
        reshaped=preparer.reshaped,
        _restore=restore,
        _defs=dict(preparer.def_restores),
    )


def _object_schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _pointer(path: str, *parts: str | int) -> str:
    for part in parts:
        path += "/" + str(part).replace("~", "~0").replace("/", "~1")
    return path


def _describe(node: dict[str, Any], notes: Mapping[str, Any]) -> None:
    """Append ``notes`` (keyword → value) to ``node``'s description."""
    if not notes:
        return
    text = "{" + ", ".join(f"{key}: {json.dumps(value)}" for key, value in notes.items()) + "}"
    description = node.get("description")
    node["description"] = f"{description}\n\n{text}" if description else text


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object" if isinstance(value, dict) else "array"


_PRIMITIVES = (str, int, float, bool, type(None))


class _Preparer:
    def __init__(self, profile: _Profile, root: Mapping[str, Any]) -> None:
        self.profile = profile
        self.root = root
        self.moved: list[str] = []
        self.as_text: list[str] = []
        self.reshaped = False
        self.defs: dict[str, dict[str, Any]] = {}
        self.def_restores: dict[str, _Restore | None] = {}
        self._stack: list[str] = []
        self._registering: set[str] = set()

    # the JSON-text wrapper: for what no provider schema states
    def text(self, node: Any, path: str) -> tuple[dict[str, Any], _Restore]:
        self.as_text.append(path or "/")
        self.reshaped = True
        description = node.get("description") if isinstance(node, Mapping) else None
        stated = (
            {k: v for k, v in node.items() if k != "description"}
            if isinstance(node, Mapping)
            else node
        )
        text = f"{_TEXT_PREFIX}"
        if stated not in ({}, True):
            text += f" that validates against the JSON Schema {json.dumps(stated)}"
        if description:
            text = f"{description}\n\n{text}"
        return {"type": "string", "description": text}, _Text()

    def move(self, path: str, node: dict[str, Any], keywords: Mapping[str, Any]) -> None:
        for key in keywords:
            self.moved.append(f"{path or '/'}: {key}")
        _describe(node, keywords)

    def resolve(self, ref: str) -> tuple[str, Any] | None:
        """``(name, schema)`` of a local ref (``#``, ``#/$defs/N``, ``#/definitions/N``)."""
        if ref == "#":
            return "#", self.root
        for prefix in ("#/$defs/", "#/definitions/"):
            if ref.startswith(prefix):
                name = ref[len(prefix) :].replace("~1", "/").replace("~0", "~")
                table = self.root.get(prefix[2:-1])
                if isinstance(table, Mapping) and name in table:
                    return name, table[name]
        return None

    def node(self, node: Any, path: str) -> tuple[dict[str, Any], _Restore | None]:
        if not isinstance(node, Mapping):
            return self.text(node, path)  # true (any value) or false
        node = {
            k: v for k, v in node.items() if k not in _DROPPED and k not in ("$defs", "definitions")
        }
        if "$ref" in node:
            return self.ref(node, path)
        if "allOf" in node:
            parts = node.pop("allOf")
            if isinstance(parts, list) and len(parts) == 1 and isinstance(parts[0], Mapping):
                return self.node({**parts[0], **node}, path)
            return self.text({**node, "allOf": parts}, path)
        if "oneOf" in node and "anyOf" not in node:
            node["anyOf"] = node.pop("oneOf")
            self.moved.append(f"{path or '/'}: oneOf (sent as anyOf)")
        types = node.get("type")
        if isinstance(types, list):
            if len(types) == 1:
                node["type"] = types[0]
            elif "anyOf" not in node and "enum" not in node and "const" not in node:
                return self.node(_split_types(node, types), path)
        if "anyOf" in node:
            return self.any_of(node, path)
        if "enum" in node or "const" in node:
            return self.literal(node, path)
        kind = node.get("type")
        if kind == "object" or (kind is None and "properties" in node):
            return self.object(node, path)
        if kind == "array" or (kind is None and "items" in node):
            return self.array(node, path)
        if kind in ("string", "number", "integer", "boolean", "null"):
            return self.scalar(node, path, str(kind))
        return self.text(node, path)  # no type: any value

    def ref(self, node: dict[str, Any], path: str) -> tuple[dict[str, Any], _Restore | None]:
        ref = node.pop("$ref")
        found = self.resolve(ref) if isinstance(ref, str) else None
        if found is None or found[0] == "#":
            return self.text({**node, "$ref": ref}, path)  # remote, unknown or the root
        name, target = found
        recursive = name in self._stack
        if recursive and not self.profile.recursion:
            return self.text({**node, "$ref": ref}, path)
        siblings = {k: v for k, v in node.items() if k not in _ANNOTATIONS}
        if (siblings or not isinstance(target, Mapping)) and not recursive:
            merged = {**target, **node} if isinstance(target, Mapping) else target
            self._stack.append(name)
            try:
                return self.node(merged, path)
            finally:
                self._stack.pop()
        if name not in self.defs and name not in self._registering:
            self._registering.add(name)
            self._stack.append(name)
            try:
                sent, restore = self.node(target, _pointer("", "$defs", name))
            finally:
                self._stack.pop()
            self.defs[name] = sent
            self.def_restores[name] = restore
        return {"$ref": f"#/$defs/{name}"}, _Ref(name)

    def any_of(self, node: dict[str, Any], path: str) -> tuple[dict[str, Any], _Restore | None]:
        branches = node.pop("anyOf")
        if not isinstance(branches, list) or not branches:
            return self.text({**node, "anyOf": branches}, path)
        shared = {k: v for k, v in node.items() if k not in _ANNOTATIONS}
        sent_branches: list[Any] = []
        restores: list[tuple[Any, _Restore | None]] = []
        for index, branch in enumerate(branches):
            merged = {**shared, **branch} if isinstance(branch, Mapping) else branch
            sent, restore = self.node(merged, _pointer(path, "anyOf", index))
            if isinstance(restore, _Text):  # a branch only JSON text could carry
                return self.text({**node, "anyOf": branches}, path)
            sent_branches.append(sent)
            restores.append((sent, restore))
        out: dict[str, Any] = {"anyOf": sent_branches}
        for key in _ANNOTATIONS:
            if key in node:
                out[key] = node[key]
        if all(restore is None for _, restore in restores):
            return out, None
        return out, _AnyOf(tuple(restores))

    def literal(self, node: dict[str, Any], path: str) -> tuple[dict[str, Any], _Restore | None]:
        values = [node["const"]] if "const" in node else node.get("enum")
        if not isinstance(values, list) or not values:
            return self.text(node, path)
        if not all(isinstance(value, _PRIMITIVES) for value in values):
            return self.text(node, path)
        out: dict[str, Any] = {}
        if "const" in node and self.profile.const:
            out["const"] = node["const"]
        else:
            out["enum"] = list(values)
        if self.profile.provider == "openai":
            kinds = sorted({_json_type(value) for value in values})
            if "integer" in kinds and "number" in kinds:
                kinds.remove("integer")
            out["type"] = kinds[0] if len(kinds) == 1 else kinds
        for key in _ANNOTATIONS:
            if key in node:
                out[key] = node[key]
        rest = {
            k: v
            for k, v in node.items()
            if k not in _ANNOTATIONS and k not in ("enum", "const", "type")
        }
        self.move(path, out, rest)
        return out, None

    def object(self, node: dict[str, Any], path: str) -> tuple[dict[str, Any], _Restore | None]:
        properties = node.get("properties") or {}
        extra = node.get("additionalProperties", True)
        required = node.get("required") or []
        if not isinstance(properties, Mapping) or not isinstance(required, list):
            return self.text(node, path)
        if not properties and (extra is not False or node.get("patternProperties")):
            return self.text(node, path)  # a free-form object
        if any(name not in properties for name in required):
            return self.text(node, path)  # a required key only extra properties could carry
        sent_properties: dict[str, Any] = {}
        restores: dict[str, tuple[_Restore | None, bool]] = {}
        for name, sub in properties.items():
            sent, restore = self.node(sub, _pointer(path, "properties", name))
            null_is_absent = False
            optional = self.profile.all_required and name not in required
            if optional and not _accepts_null(sub, self.root):
                if set(sent) - _ANNOTATIONS == {"anyOf"}:
                    sent = {**sent, "anyOf": [*sent["anyOf"], {"type": "null"}]}
                else:
                    sent = {"anyOf": [sent, {"type": "null"}]}
                null_is_absent = True
                self.reshaped = True
            sent_properties[name] = sent
            if restore is not None or null_is_absent:
                restores[name] = (restore, null_is_absent)
        order = list(sent_properties)
        out = _object_schema(
            sent_properties,
            order if self.profile.all_required else [n for n in order if n in required],
        )
        for key in _ANNOTATIONS:
            if key in node:
                out[key] = node[key]
        rest = {
            k: v
            for k, v in node.items()
            if k not in _ANNOTATIONS and k not in ("type", "properties", "required")
        }
        if rest.get("additionalProperties", False) is False:
            rest.pop("additionalProperties", None)
        self.move(path, out, rest)
        return out, (_Object(restores) if restores else None)

    def array(self, node: dict[str, Any], path: str) -> tuple[dict[str, Any], _Restore | None]:
        if "prefixItems" in node or isinstance(node.get("items"), list):
            return self.text(node, path)  # a tuple
        sent_items, restore = self.node(node.get("items", {}), _pointer(path, "items"))
        out: dict[str, Any] = {"type": "array", "items": sent_items}
        for key in _ANNOTATIONS:
            if key in node:
                out[key] = node[key]
        rest: dict[str, Any] = {}
        for key, value in node.items():
            if key in _ANNOTATIONS or key in ("type", "items"):
                continue
            limit = self.profile.max_min_items
            if key in self.profile.array and not (
                key == "minItems" and limit is not None and value > limit
            ):
                out[key] = value
            else:
                rest[key] = value
        self.move(path, out, rest)
        return out, (_Array(restore) if restore is not None else None)

    def scalar(
        self, node: dict[str, Any], path: str, kind: str
    ) -> tuple[dict[str, Any], _Restore | None]:
        out: dict[str, Any] = {"type": kind}
        for key in _ANNOTATIONS:
            if key in node:
                out[key] = node[key]
        allowed = (
            self.profile.string
            if kind == "string"
            else self.profile.number
            if kind in ("number", "integer")
            else frozenset()
        )
        rest: dict[str, Any] = {}
        for key, value in node.items():
            if key in _ANNOTATIONS or key == "type":
                continue
            refused = (key == "format" and value not in self.profile.formats) or (
                key == "pattern" and self.profile.simple_patterns and pattern_problem(value)
            )
            if key in allowed and not refused:
                out[key] = value
            else:
                rest[key] = value
        self.move(path, out, rest)
        return out, None


def _split_types(node: dict[str, Any], types: list[Any]) -> dict[str, Any]:
    """``{"type": [A, B], ...}`` as ``{"anyOf": [{"type": A, ...}, {"type": B, ...}]}``, each
    branch with the keywords of its own type."""
    annotations = {k: node[k] for k in _ANNOTATIONS if k in node}
    branches = []
    for kind in types:
        own = _TYPE_KEYWORDS.get(str(kind), frozenset())
        branch = {k: v for k, v in node.items() if k in own}
        branch["type"] = kind
        branches.append(branch)
    return {**annotations, "anyOf": branches}


def _accepts_null(node: Any, root: Mapping[str, Any], depth: int = 0) -> bool:
    """Whether ``null`` is a valid value of ``node`` (structurally; refs followed)."""
    if depth > 50:
        return False
    if node is True or node == {}:
        return True
    if not isinstance(node, Mapping):
        return False
    if "$ref" in node and isinstance(node["$ref"], str):
        ref = node["$ref"]
        for prefix in ("#/$defs/", "#/definitions/"):
            table = root.get(prefix[2:-1])
            name = ref[len(prefix) :]
            if ref.startswith(prefix) and isinstance(table, Mapping) and name in table:
                return _accepts_null(table[name], root, depth + 1)
        return False
    if "const" in node:
        return node["const"] is None
    if "enum" in node:
        return isinstance(node["enum"], list) and None in node["enum"]
    for key in ("anyOf", "oneOf"):
        if isinstance(node.get(key), list):
            return any(_accepts_null(branch, root, depth + 1) for branch in node[key])
    if isinstance(node.get("allOf"), list):
        return all(_accepts_null(branch, root, depth + 1) for branch in node["allOf"])
    kind = node.get("type")
    if kind is None:
        return not (set(node) & {"properties", "items"})
    return kind == "null" or (isinstance(kind, list) and "null" in kind)


# -- checking the rules -----------------------------------------------------------------------


def strict_problems(schema: Any, provider: SchemaProvider = "openai") -> list[str]:
    """What a provider would refuse in ``schema`` as sent (rules in the module docstring).

    Args:
        schema: the schema as it would be sent.
        provider: ``openai`` (strict mode) or ``anthropic`` (structured outputs).

    Returns:
        One line per problem, ``"PATH: what"`` (JSON Pointer paths), empty when the
        provider accepts the schema.

    Raises:
        ValueError: an unknown provider.
    """
    profile = _profile(provider)
    checker = _Checker(profile, schema)
    if not isinstance(schema, Mapping):
        return ["/: a schema must be a JSON object"]
    if profile.root_object and schema.get("type") != "object":
        checker.problems.append('/: the root must be an object schema ("type": "object")')
    checker.check(schema, "", depth=0)
    defs = schema.get("$defs")
    if isinstance(defs, Mapping):
        for name, sub in defs.items():
            checker.check(sub, _pointer("", "$defs", name), depth=0)
    if "definitions" in schema:
        checker.problems.append("/definitions: definitions go in $defs")
    if profile.provider == "openai":
        if checker.properties > OPENAI_MAX_PROPERTIES:
            checker.problems.append(
                f"/: {checker.properties} object properties, more than {OPENAI_MAX_PROPERTIES}"
            )
        if checker.enum_values > OPENAI_MAX_ENUM_VALUES:
            checker.problems.append(
                f"/: {checker.enum_values} enum values, more than {OPENAI_MAX_ENUM_VALUES}"
            )
    if not profile.recursion and isinstance(defs, Mapping):
        for name in defs:
            if _cycle(schema, name):
                checker.problems.append(f"/$defs/{name}: refers to itself (no recursion)")
    return checker.problems


def _cycle(root: Mapping[str, Any], start: str) -> bool:
    defs = root.get("$defs") or {}
    seen: set[str] = set()
    todo = [start]
    while todo:
        name = todo.pop()
        for ref in _refs(defs.get(name)):
            target = ref.removeprefix("#/$defs/")
            if target == start:
                return True
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return False


def _refs(node: Any) -> list[str]:
    if isinstance(node, Mapping):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        for value in node.values():
            found.extend(_refs(value))
        return found
    if isinstance(node, list):
        return [ref for value in node for ref in _refs(value)]
    return []


class _Checker:
    def __init__(self, profile: _Profile, root: Any) -> None:
        self.profile = profile
        self.root = root
        self.problems: list[str] = []
        self.properties = 0
        self.enum_values = 0

    def say(self, path: str, what: str) -> None:
        self.problems.append(f"{path or '/'}: {what}")

    def check(self, node: Any, path: str, depth: int) -> None:
        if not isinstance(node, Mapping):
            self.say(path, "a schema must be a JSON object")
            return
        if "$ref" in node:
            ref = node["$ref"]
            if (
                set(node)
                - {"$ref", "$defs"}
                - ({"description"} if self.profile.provider == "anthropic" else set())
            ):
                self.say(path, "$ref with other keywords beside it")
            if not isinstance(ref, str) or not (
                ref == "#" or (ref.startswith("#/$defs/") and self._def(ref) is not None)
            ):
                self.say(path, f"$ref {ref!r} does not point into $defs")
            if ref == "#" and not self.profile.recursion:
                self.say(path, "$ref to the root (no recursion)")
            return
        if "anyOf" in node:
            branches = node["anyOf"]
            extra = set(node) - {"anyOf"} - _ANNOTATIONS - ({"$defs"} if not path else set())
            if extra:
                self.say(path, f"keywords beside anyOf: {', '.join(sorted(extra))}")
            if not isinstance(branches, list) or not branches:
                self.say(path, "anyOf must be a non-empty list")
                return
            for index, branch in enumerate(branches):
                self.check(branch, _pointer(path, "anyOf", index), depth)
            return
        kind = node.get("type")
        kinds: list[Any]
        if isinstance(kind, list):
            if self.profile.provider == "anthropic":
                self.say(path, "a list of types (use anyOf)")
            kinds = list(kind)
        elif kind is None:
            if "enum" in node or "const" in node:
                kinds = []
                if self.profile.provider == "openai":
                    self.say(path, "no type")
            else:
                self.say(path, "no type")
                return
        else:
            kinds = [kind]
        for item in kinds:
            if item not in _JSON_TYPES:
                self.say(path, f"unknown type {item!r}")
        allowed = set(_ANNOTATIONS) | {"type", "enum"}
        if self.profile.const:
            allowed.add("const")
        if not path:
            allowed.add("$defs")
        if "object" in kinds:
            allowed |= {"properties", "required", "additionalProperties"}
        if "array" in kinds:
            allowed |= {"items"} | set(self.profile.array)
        if "string" in kinds:
            allowed |= set(self.profile.string)
        if "number" in kinds or "integer" in kinds:
            allowed |= set(self.profile.number)
        for key in node:
            if key not in allowed:
                self.say(path, f"keyword {key!r} is not supported")
        values = node.get("enum")
        if values is not None:
            if not isinstance(values, list) or not values:
                self.say(path, "enum must be a non-empty list")
            else:
                self.enum_values += len(values)
                if not all(isinstance(value, _PRIMITIVES) for value in values):
                    self.say(path, "enum values must be strings, numbers, booleans or null")
        if "string" in kinds and "format" in node and node["format"] not in self.profile.formats:
            self.say(path, f"format {node['format']!r} is not supported")
        if "string" in kinds and "pattern" in node and self.profile.simple_patterns:
            problem = pattern_problem(node["pattern"])
            if problem is not None:
                self.say(path, f"pattern {node['pattern']!r}: {problem} is not supported")
        if "array" in kinds:
            limit = self.profile.max_min_items
            if limit is not None and node.get("minItems", 0) > limit:
                self.say(path, f"minItems above {limit}")
            if not isinstance(node.get("items"), Mapping):
                self.say(path, "an array needs an items schema")
            else:
                self.check(node["items"], _pointer(path, "items"), depth)
        if "object" in kinds:
            self.object(node, path, depth)

    def object(self, node: Mapping[str, Any], path: str, depth: int) -> None:
        if self.profile.provider == "openai" and depth + 1 > OPENAI_MAX_DEPTH:
            self.say(path, f"objects nested more than {OPENAI_MAX_DEPTH} levels deep")
        if node.get("additionalProperties") is not False:
            self.say(path, "additionalProperties must be false")
        properties = node.get("properties")
        if not isinstance(properties, Mapping):
            self.say(path, "an object needs its properties")
            return
        self.properties += len(properties)
        required = node.get("required", [])
        if not isinstance(required, list):
            self.say(path, "required must be a list")
            required = []
        unknown = [name for name in required if name not in properties]
        if unknown:
            self.say(path, f"required names unknown properties: {', '.join(map(str, unknown))}")
        if self.profile.all_required:
            missing = [name for name in properties if name not in required]
            if missing:
                self.say(path, f"properties not required: {', '.join(missing)}")
        for name, sub in properties.items():
            self.check(sub, _pointer(path, "properties", name), depth + 1)

    def _def(self, ref: str) -> Any:
        defs = self.root.get("$defs") if isinstance(self.root, Mapping) else None
        name = ref.removeprefix("#/$defs/").replace("~1", "/").replace("~0", "~")
        return defs.get(name) if isinstance(defs, Mapping) else None
