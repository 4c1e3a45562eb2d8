"""The plan's structured-output schema, built from the run's registry (docs/planning.md).

A model with structured output can only write what the schema it is sent allows, so the
schema states every rule JSON Schema can state about a plan of *this* run:

* a step is one variant per registered tool, discriminated by ``"t"`` (``const``: the
  tool's name); its ``"a"`` is that tool's own argument object (its properties, their types,
  the required ones, enums, ``additionalProperties: false``);
* a check is one variant per registered check kind, discriminated by ``"k"``, with the
  kind's own argument object in ``"a"``;
* an argument listing tool names (an ``agent``'s scope, ``Tool.names_tools``) is an array
  of the registered names;
* ``"d"`` (``depends_on``) is an array of integers; a param's type is an enum and
  its default ``"v"`` a string, a number, a boolean or JSON text.

**References.** Any value inside the arguments may be a reference resolved at run time
(:mod:`plandag.dag.references`). A string argument takes one as it is (a string is a
string); wherever the schema asks for another type (a number, a boolean, an object, an
array, an enum), it also accepts a string that is exactly one reference, by the pattern
:data:`REFERENCE_PATTERN` (``<step_N_result…>``, ``<param.NAME…>``).

**JSON text.** A value whose type no strict schema can express (``Any``, a free-form map
such as ``dict[str, str]``, a recursive or tuple type) travels as a wrapper object,
``{"json": "<JSON text>"}``, so a plain string is never ambiguous: it is a string (or a
reference), and the wrapper's text is the value. Only such values do, plus the plan's
output (``"o"``), whose shape is free. :func:`encode_arguments` writes a value that way,
:func:`decode_json_text` reads it back.

**Providers.** The schema is the plan's, the same for every provider: it keeps to what
structured outputs accept (``anyOf``, ``const``, ``enum``, ``pattern``, local
``$ref``/``$defs``, every object closed) and carries the arguments' numeric and item-count
bounds (string lengths and formats are never sent: the compiler checks them). The client
shapes it for its provider, in one place, :func:`plandag.models.schemas.prepare_schema`:
OpenAI's strict mode gets every property required, the optional ones nullable; Anthropic
gets the bounds it refuses, and any pattern it cannot compile, moved into descriptions.
What a provider cannot enforce the compiler still checks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, get_args

from plandag.dag.plan import ParamType
from plandag.tools.registry import Registry

__all__ = [
    "BOUND_KEYWORDS",
    "JSON_TEXT_KEY",
    "PLAN_SCHEMA_NAME",
    "REFERENCE_PATTERN",
    "arguments_schema",
    "decode_json_text",
    "encode_arguments",
    "encode_value",
    "is_json_text",
    "plan_json_schema",
    "value_schema",
    "wrap_json_text",
]

PLAN_SCHEMA_NAME = "plandag_plan"
"""The structured-output schema's name (OpenAI's ``response_format.json_schema.name``)."""

JSON_TEXT_KEY = "json"
"""The one field of a JSON-text wrapper: ``{"json": "<JSON text>"}``."""

REFERENCE_PATTERN = (
    r"^<(step_[1-9][0-9]{0,17}_result(\.[^.<>\s]+)*"
    r"|param\.[A-Za-z_][A-Za-z0-9_]*(\.[^.<>\s]+)*)>$"
)
"""A string that is exactly one reference (the grammar of :mod:`plandag.dag.references`)."""

BOUND_KEYWORDS = frozenset(
    {
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
    }
)
"""The constraints the schema carries from the arguments' own schemas (a provider that
refuses them gets them in descriptions: :func:`plandag.models.schemas.prepare_schema`).
String lengths and formats are never sent (neither strict mode documents them): the
compiler checks them."""

_REFERENCE = re.compile(REFERENCE_PATTERN)
_REF_DEF = "ref"
_JSON_DEF = "json"
_CHECK_DEF = "check"
_CHECKS_DEF = "checks"
_IDS_DEF = "ids"
_PARAM_TYPES: tuple[str, ...] = get_args(ParamType)
_PRIMITIVES = (str, int, float, bool, type(None))
_SCALAR_TYPES = {"string", "integer", "number", "boolean", "null"}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/$defs/{name}"}


def _json_text_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {JSON_TEXT_KEY: {"type": "string"}},
        "required": [JSON_TEXT_KEY],
        "additionalProperties": False,
    }


class _Builder:
    """Turns pydantic's JSON schemas of arguments into wire schemas (the module docstring).

    Args:
        tool_names: the registered tool names (the enum of a ``names_tools`` argument).
    """

    def __init__(self, *, tool_names: Sequence[str] = ()) -> None:
        self.tool_names = list(tool_names)
        self.used: set[str] = set()

    def reference(self) -> dict[str, Any]:
        self.used.add(_REF_DEF)
        return _ref(_REF_DEF)

    def json_text(self) -> dict[str, Any]:
        self.used.add(_JSON_DEF)
        return _ref(_JSON_DEF)

    def _bounds_of(self, schema: Mapping[str, Any]) -> dict[str, Any]:
        return {
            key: value
            for key, value in schema.items()
            if key in BOUND_KEYWORDS and isinstance(value, int | float)
        }

    def typed(
        self,
        schema: Any,
        definitions: Mapping[str, Any],
        seen: tuple[str, ...] = (),
    ) -> dict[str, Any] | None:
        """The wire schema of a value of ``schema`` without the reference alternative, or
        None when no strict schema can express it (it then travels as JSON text)."""
        if not isinstance(schema, Mapping):
            return None
        reference = schema.get("$ref")
        if isinstance(reference, str):
            name = reference.rsplit("/", 1)[-1]
            if name in seen or name not in definitions:
                return None  # recursive, or not resolvable
            return self.typed(definitions[name], definitions, (*seen, name))
        if "const" in schema:
            value = schema["const"]
            return {"const": value} if isinstance(value, _PRIMITIVES) else None
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            if all(isinstance(value, _PRIMITIVES) for value in enum):
                return {"enum": list(enum)}
            return None
        choices = schema.get("anyOf") or schema.get("oneOf")
        if isinstance(choices, list) and choices:
            return self._union([self.value(choice, definitions, seen) for choice in choices])
        if isinstance(schema.get("allOf"), list) and len(schema["allOf"]) == 1:
            return self.typed(schema["allOf"][0], definitions, seen)
        kind = schema.get("type")
        if isinstance(kind, list):
            return self._union(
                [self.value({**schema, "type": item}, definitions, seen) for item in kind]
            )
        if kind in ("string", "integer", "number", "boolean", "null"):
            result: dict[str, Any] = {"type": kind}
            if kind == "string" and isinstance(schema.get("pattern"), str):
                result["pattern"] = schema["pattern"]
            result.update(self._bounds_of(schema))
            return result
        if kind == "array":
            items = schema.get("items")
            if "prefixItems" in schema or not isinstance(items, Mapping):
                return None
            item = self.value(items, definitions, seen)
            return {"type": "array", "items": item, **self._bounds_of(schema)}
        if kind == "object" or "properties" in schema:
            properties = schema.get("properties")
            extra = schema.get("additionalProperties", True)
            if not isinstance(properties, Mapping) or not properties or extra is not False:
                return None  # a free-form map (or an open object)
            if list(properties) == [JSON_TEXT_KEY]:
                return None  # would read as a JSON-text wrapper
            return self._object(properties, schema.get("required") or (), definitions, seen)
        return None  # Any, or a type JSON Schema does not name

    def value(
        self, schema: Any, definitions: Mapping[str, Any], seen: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        """The wire schema of a value that may also be a reference."""
        typed = self.typed(schema, definitions, seen)
        if typed is None:
            return {"anyOf": [self.reference(), self.json_text()]}
        if _takes_any_string(typed):
            return typed
        if "anyOf" in typed:
            reference = self.reference()
            branches = list(typed["anyOf"])
            return {"anyOf": branches if reference in branches else [*branches, reference]}
        return {"anyOf": [typed, self.reference()]}

    def _union(self, branches: list[dict[str, Any]]) -> dict[str, Any]:
        flat: list[dict[str, Any]] = []
        for branch in branches:
            for item in branch["anyOf"] if list(branch) == ["anyOf"] else [branch]:
                if item not in flat:
                    flat.append(item)
        if any(_takes_any_string(item) for item in flat):
            flat = [item for item in flat if item != _ref(_REF_DEF)]
        return flat[0] if len(flat) == 1 else {"anyOf": flat}

    def _object(
        self,
        properties: Mapping[str, Any],
        required: Iterable[str],
        definitions: Mapping[str, Any],
        seen: tuple[str, ...] = (),
        *,
        names_tools: str | None = None,
    ) -> dict[str, Any]:
        required = list(required)
        wire: dict[str, Any] = {}
        for name, field in properties.items():
            if name == names_tools and self.tool_names:
                wire[name] = {
                    "anyOf": [
                        {"type": "array", "items": {"enum": list(self.tool_names)}},
                        self.reference(),
                    ]
                }
            else:
                wire[name] = self.value(field, definitions, seen)
                if name not in required and isinstance(field, Mapping):
                    wire[name] = _without_null_default(wire[name], field)
        return {
            "type": "object",
            "properties": wire,
            "required": [name for name in required if name in properties],
            "additionalProperties": False,
        }

    def arguments(
        self, schema: Mapping[str, Any], names_tools: str | None = None
    ) -> dict[str, Any]:
        """The wire schema of a tool's or check kind's argument object."""
        definitions = schema.get("$defs") or schema.get("definitions") or {}
        properties = schema.get("properties")
        return self._object(
            properties if isinstance(properties, Mapping) else {},
            schema.get("required") or (),
            definitions,
            names_tools=names_tools,
        )

    def definitions(self) -> dict[str, Any]:
        result: dict[str, Any] = {}
        if _REF_DEF in self.used:
            result[_REF_DEF] = {
                "type": "string",
                "pattern": REFERENCE_PATTERN,
            }
        if _JSON_DEF in self.used:
            result[_JSON_DEF] = _json_text_schema()
        return result


def _without_null_default(wire: dict[str, Any], field: Mapping[str, Any]) -> dict[str, Any]:
    """An optional property whose default is ``null`` without its ``null`` branch: leaving
    it out gives the same value, in fewer schema tokens."""
    if "default" not in field or field["default"] is not None or list(wire) != ["anyOf"]:
        return wire
    branches = [branch for branch in wire["anyOf"] if branch != {"type": "null"}]
    if not branches or len(branches) == len(wire["anyOf"]):
        return wire
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def _takes_any_string(schema: Mapping[str, Any]) -> bool:
    """Whether ``schema`` accepts every string (so a reference too)."""
    if schema.get("type") == "string":
        return "pattern" not in schema
    return any(_takes_any_string(item) for item in schema.get("anyOf", ()))


def arguments_schema(
    schema: Mapping[str, Any],
    *,
    names_tools: str | None = None,
    tool_names: Sequence[str] = (),
) -> dict[str, Any]:
    """The wire schema of one argument object, standalone (its ``$defs`` included).

    Args:
        schema: the arguments' JSON schema (pydantic's ``model_json_schema()``).
        names_tools: the argument that lists tool names, or None.
        tool_names: the names it may list.

    Returns:
        ``{"type": "object", "properties": ..., "required": ..., "additionalProperties":
        false}``, with ``$defs`` for the reference and JSON-text schemas when used.
    """
    builder = _Builder(tool_names=tool_names)
    result = builder.arguments(schema, names_tools)
    definitions = builder.definitions()
    if definitions:
        result["$defs"] = definitions
    return result


def value_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The wire schema of one value of ``schema`` (references accepted), standalone.

    Args:
        schema: a JSON schema (a param's type, a router param...).

    Returns:
        The schema, with ``$defs`` when a reference or JSON-text schema is used.
    """
    builder = _Builder()
    result = builder.value(schema, {})
    definitions = builder.definitions()
    if definitions:
        result = {**result, "$defs": definitions}
    return result


def _param_schema(builder: _Builder) -> dict[str, Any]:
    """A param declaration: a name of one character or more (the pattern states it; string
    lengths are not sent), its default a string, a number, a boolean, or JSON text (an
    object, an array; the compiler checks it against the declared type)."""
    return {
        "type": "object",
        "properties": {
            "n": {"type": "string", "pattern": "^[^\\n]+$"},
            "t": {"enum": list(_PARAM_TYPES)},
            "h": {"type": "string"},
            "v": {
                "anyOf": [
                    {"type": "string"},
                    {"type": "number"},
                    {"type": "boolean"},
                    builder.json_text(),
                ]
            },
            "r": {"type": "boolean"},
        },
        "required": ["n", "t"],
        "additionalProperties": False,
    }


def plan_json_schema(
    registry: Registry,
    *,
    tools: Collection[str] | None = None,
) -> dict[str, Any]:
    """The structured-output schema of a plan (or a replanner's patch) for ``registry``.

    Args:
        registry: the run's tools and check kinds.
        tools: the tool names the steps may call (a subset of the registry's), or None for
            every registered tool.

    Returns:
        A new schema: ``{"g": goal, "p": [params], "s": [steps], "o": output}``, steps a
        union discriminated by ``"t"``, checks by ``"k"`` (the module docstring). With no
        tool to call, ``"s"`` takes no step.

    Raises:
        KeyError: a name in ``tools`` is not registered.
    """
    names = sorted(registry.tools) if tools is None else sorted(set(tools))
    builder = _Builder(tool_names=sorted(registry.tools))
    step_id: dict[str, Any] = {"type": "integer", "minimum": 1}
    checks = []
    for kind in sorted(registry.checks):
        definition = registry.checks[kind]
        arguments = builder.arguments(definition.args_model.model_json_schema())
        variant = {
            "type": "object",
            "properties": {"k": {"const": kind}, "a": arguments},
            "required": ["k", "a"] if arguments["required"] else ["k"],
            "additionalProperties": False,
        }
        checks.append(variant)
    variants = []
    for name in names:
        item = registry.tools[name]
        variants.append(
            {
                "type": "object",
                "properties": {
                    "i": dict(step_id),
                    "t": {"const": name},
                    "a": builder.arguments(item.json_schema(), item.names_tools),
                    "d": _ref(_IDS_DEF),
                    "c": _ref(_CHECKS_DEF),
                    "n": {"type": "string"},
                },
                "required": ["i", "t", "a", "d"],
                "additionalProperties": False,
            }
        )
    output = {"anyOf": [builder.reference(), builder.json_text()]}
    param = _param_schema(builder)
    check: dict[str, Any] = {"anyOf": checks}
    if len(checks) == 1:
        check = checks[0]
    elif not checks:
        check = {"type": "object", "properties": {}, "additionalProperties": False}
    definitions: dict[str, Any] = {
        _IDS_DEF: {"type": "array", "items": {"type": "integer"}},
        _CHECKS_DEF: {"type": "array", "items": _ref(_CHECK_DEF)},
        _CHECK_DEF: check,
        **builder.definitions(),
    }
    step: dict[str, Any] = {"anyOf": variants}
    if len(variants) == 1:
        step = variants[0]
    elif not variants:
        step = {"type": "object", "properties": {}, "additionalProperties": False}
    steps: dict[str, Any] = {"type": "array", "items": step}
    return {
        "type": "object",
        "properties": {
            "g": {"type": "string"},
            "p": {"type": "array", "items": param},
            "s": steps,
            "o": output,
        },
        "required": ["g", "s"],
        "additionalProperties": False,
        "$defs": definitions,
    }


# -- values ------------------------------------------------------------------------------------


def is_json_text(value: Any) -> bool:
    """Whether ``value`` is a JSON-text wrapper: an object whose only field is ``"json"``,
    a string."""
    return (
        isinstance(value, Mapping) and len(value) == 1 and isinstance(value.get(JSON_TEXT_KEY), str)
    )


def decode_json_text(value: Any) -> tuple[Any, list[tuple[str, str]], list[str]]:
    """``value`` with every JSON-text wrapper in it replaced by the value its text holds.

    Args:
        value: a wire value (an argument, an argument object, the output...).

    Returns:
        ``(decoded, problems, paths)``: ``problems`` lists ``(path, why)`` for each wrapper
        whose text is not JSON (its path from ``value``: ``.data.json``, ``[2].json``; such
        a wrapper is left as it is); ``paths`` lists the path of each wrapper decoded
        (``.data``, ``[2]``).
    """
    problems: list[tuple[str, str]] = []
    paths: list[str] = []

    def walk(item: Any, path: str) -> Any:
        if is_json_text(item):
            try:
                decoded = json.loads(item[JSON_TEXT_KEY])
            except (ValueError, RecursionError) as error:
                problems.append((f"{path}.{JSON_TEXT_KEY}", str(error)))
                return item
            paths.append(path)
            return decoded
        if isinstance(item, Mapping):
            return {key: walk(inner, f"{path}.{key}") for key, inner in item.items()}
        if isinstance(item, list):
            return [walk(inner, f"{path}[{index}]") for index, inner in enumerate(item)]
        return item

    return walk(value, ""), problems, paths


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def wrap_json_text(value: Any) -> Any:
    """``value`` as ``{"json": "<JSON text>"}``, or as it is when it is a string that is
    exactly one reference.

    Raises:
        ValueError: ``value`` holds NaN or an infinity.
    """
    if isinstance(value, str) and _REFERENCE.match(value):
        return value
    return {JSON_TEXT_KEY: _json_text(value)}


def _accepts(schema: Mapping[str, Any], value: Any) -> bool:
    """Whether a branch's own type takes ``value`` (the shape only, not its contents)."""
    if "const" in schema:
        return bool(schema["const"] == value)
    if "enum" in schema:
        return value in schema["enum"]
    kind = schema.get("type")
    if kind == "string":
        if not isinstance(value, str):
            return False
        pattern = schema.get("pattern")
        return not isinstance(pattern, str) or re.search(pattern, value) is not None
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "null":
        return value is None
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        if not isinstance(value, Mapping):
            return False
        properties = schema.get("properties") or {}
        return set(value) <= set(properties) and set(schema.get("required") or ()) <= set(value)
    return False


def encode_value(value: Any, schema: Mapping[str, Any], definitions: Mapping[str, Any]) -> Any:
    """``value`` written for the wire schema ``schema``: JSON text where the schema wants
    it, references kept, typed objects and arrays walked.

    Args:
        value: the value as the plan holds it.
        schema: its wire schema (from :func:`plan_json_schema` or :func:`arguments_schema`).
        definitions: the ``$defs`` the schema refers to.

    Returns:
        The wire value (``value`` itself when no JSON text is needed).
    """
    reference = schema.get("$ref")
    if isinstance(reference, str):
        name = reference.rsplit("/", 1)[-1]
        if name == _JSON_DEF:
            return wrap_json_text(value)
        target = definitions.get(name)
        return value if target is None else encode_value(value, target, definitions)
    branches = schema.get("anyOf")
    if isinstance(branches, list):
        resolved = [
            definitions.get(b["$ref"].rsplit("/", 1)[-1], b) if "$ref" in b else b for b in branches
        ]
        for target in resolved:
            if target is not definitions.get(_JSON_DEF) and _accepts(target, value):
                return encode_value(value, target, definitions)
        if any(branch == _ref(_JSON_DEF) for branch in branches):
            return wrap_json_text(value)
        return value
    if schema.get("type") == "object" and isinstance(value, Mapping):
        properties = schema.get("properties") or {}
        return {
            key: encode_value(item, properties[key], definitions) if key in properties else item
            for key, item in value.items()
        }
    if schema.get("type") == "array" and isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            return [encode_value(item, items, definitions) for item in value]
    return value


def encode_arguments(
    args: Mapping[str, Any], schema: Mapping[str, Any], definitions: Mapping[str, Any]
) -> dict[str, Any]:
    """A step's (or check's) arguments written for their wire argument schema.

    Args:
        args: the arguments, by name.
        schema: the wire argument object's schema.
        definitions: the ``$defs`` it refers to.

    Returns:
        The wire arguments; an argument the schema does not know is kept as it is.
    """
    properties = schema.get("properties") or {}
    return {
        name: encode_value(value, properties[name], definitions) if name in properties else value
        for name, value in args.items()
    }
