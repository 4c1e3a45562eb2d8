"""The wire format: the encoding of a plan a model writes (docs/planning.md).

The model writes a plan with one-letter keys, which :func:`from_wire` turns into the
:class:`~plandag.dag.plan.Plan` model (:func:`to_wire` goes back); its structured-output
schema is built from the run's registry (:func:`plandag.planner.schema.plan_json_schema`),
so each step's arguments are that tool's own typed object. ``benchmarks/wire_tokens.py``
measures what the encoding costs in output tokens against the verbose Plan JSON.

========  =====================  ==========================================================
wire      Plan                   value
========  =====================  ==========================================================
``g``     ``goal``               string
``p``     ``params``             list of ``{"n": name, "t": type, "h": description,
                                 "v": default, "r": required}``; ``n`` and ``t``
                                 required, the rest optional; ``v`` of the param's type
``s``     ``steps``              list of steps (below)
``o``     ``output``             one reference, or ``{"json": "<JSON text>"}``; absent or
                                 null: no output
========  =====================  ==========================================================

A step is ``{"i": id, "t": tool, "a": args, "d": depends_on, "c": checks, "n":
description}``: ``a`` is the object of the tool's arguments, ``d`` a list of step ids,
``c`` (optional) a list of ``{"k": kind, "a": arguments}`` (``a`` optional when the kind
needs none), ``n`` (optional) a short description.

**JSON text.** A value whose type no strict schema can express (an argument typed ``Any``,
a free-form map, a recursive type; a param default of type object, array or any; the
output) is written as ``{"json": "<JSON text>"}`` (:data:`~plandag.planner.schema.JSON_TEXT_KEY`),
or as a string that is one reference. Any object whose only field is ``"json"``, a string,
is read as such a wrapper, at any depth of the arguments; text that is not JSON is an
``invalid_json_text`` diagnostic.

**Left-out values.** Under OpenAI's strict mode every property is required, the optional
ones nullable (:func:`plandag.models.schemas.prepare_schema`), so a model writes ``null``
for what it leaves out: a ``null`` wire field is absent, and, given the registry, a
``null`` argument whose type does not take ``null`` is left out (the text streamed is read
before the client restores the answer's shape, so the wire reader drops them itself).

Malformed wire data raises :class:`~plandag.errors.PlanError` with every problem found:
``invalid_json`` when the text is not JSON, ``invalid_json_text`` for each wrapper whose
text is not JSON, ``invalid_schema`` for everything else (which field, why, and the step id
when known), so the planner can send them back to the model like the compiler's own
diagnostics.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, get_args

from plandag.compiler import CompiledPlan, Diagnostic, compile_plan, load_plan
from plandag.dag.diagnostics import DIAGNOSTIC_CODES
from plandag.dag.plan import ParamSpec, ParamType, Plan
from plandag.errors import PlanError
from plandag.planner.schema import (
    JSON_TEXT_KEY,
    PLAN_SCHEMA_NAME,
    arguments_schema,
    decode_json_text,
    encode_arguments,
    is_json_text,
    wrap_json_text,
)
from plandag.tools.registry import Registry

__all__ = [
    "WIRE_SCHEMA_NAME",
    "compile_wire",
    "dumps_wire",
    "from_wire",
    "to_wire",
    "wire_to_document",
]

WIRE_SCHEMA_NAME = PLAN_SCHEMA_NAME
"""The structured-output schema's name (OpenAI's ``response_format.json_schema.name``)."""

_PARAM_TYPES: tuple[str, ...] = get_args(ParamType)
_TYPED_PARAMS = ("string", "integer", "number", "boolean")
_TOP_KEYS = ("g", "p", "s", "o")
_STEP_KEYS = ("i", "t", "a", "d", "c", "n")
_CHECK_KEYS = ("k", "a")
_PARAM_KEYS = ("n", "t", "h", "v", "r")


def _json_text(value: Any) -> str:
    """Compact JSON text of ``value`` (non-ASCII kept as is; NaN refused)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


# -- Plan -> wire ----------------------------------------------------------------------------


def to_wire(plan: Plan, registry: Registry | None = None) -> dict[str, Any]:
    """The wire form of ``plan`` (the table in the module docstring).

    Optional fields are left out when the plan does not set them: no ``p`` without params,
    no ``o`` when ``output`` is None, no ``c`` for a step without checks, no ``n`` without a
    description. ``d`` is always written.

    Args:
        plan: a validated plan.
        registry: the run's tools and checks: an argument whose type the schema carries as
            JSON text is written as ``{"json": ...}``; None writes every argument as it is
            (still read back the same).

    Returns:
        A JSON-safe dict; ``from_wire(to_wire(plan))`` equals ``plan``.

    Raises:
        ValueError: a value holds NaN or an infinity (not JSON).
    """
    wire: dict[str, Any] = {"g": plan.goal}
    if plan.params:
        wire["p"] = [_param_to_wire(name, spec) for name, spec in plan.params.items()]
    steps = []
    tools = registry.tools if registry is not None else {}
    for step in plan.steps:
        tool = tools.get(step.tool)
        args: dict[str, Any] = dict(step.args)
        if tool is not None:
            schema = arguments_schema(
                tool.json_schema(), names_tools=tool.names_tools, tool_names=sorted(tools)
            )
            args = encode_arguments(args, schema, schema.get("$defs", {}))
        _check_text(args)
        item: dict[str, Any] = {"i": step.id, "t": step.tool, "a": args, "d": list(step.depends_on)}
        if step.check:
            checks = []
            for spec in step.check:
                check: dict[str, Any] = {"k": spec.kind}
                arguments = spec.arguments
                definition = registry.checks.get(spec.kind) if registry is not None else None
                if definition is not None:
                    schema = arguments_schema(definition.args_model.model_json_schema())
                    arguments = encode_arguments(arguments, schema, schema.get("$defs", {}))
                if arguments:
                    check["a"] = arguments
                checks.append(check)
            item["c"] = checks
        if step.description is not None:
            item["n"] = step.description
        steps.append(item)
    wire["s"] = steps
    if plan.output is not None:
        wire["o"] = wrap_json_text(plan.output)
    return wire


def _check_text(value: Any) -> None:
    """Raise ValueError when ``value`` holds NaN or an infinity (not JSON)."""
    _json_text(value)


def _param_to_wire(name: str, spec: ParamSpec) -> dict[str, Any]:
    item: dict[str, Any] = {"n": name, "t": spec.type}
    if spec.description is not None:
        item["h"] = spec.description
    if "default" in spec.model_fields_set:
        default = spec.default
        typed = spec.type in _TYPED_PARAMS and default is not None and not is_json_text(default)
        item["v"] = default if typed else {JSON_TEXT_KEY: _json_text(default)}
    if spec.required is not None:
        item["r"] = spec.required
    return item


def dumps_wire(plan: Plan, registry: Registry | None = None) -> str:
    """``to_wire(plan, registry)`` as compact JSON text: what a model writes for ``plan``.

    Raises:
        ValueError: a value holds NaN or an infinity.
    """
    return _json_text(to_wire(plan, registry))


# -- wire -> Plan ----------------------------------------------------------------------------


class _Reader:
    """Collects diagnostics while a wire object is read."""

    def __init__(
        self,
        registry: Registry | None,
        text_problems: list[Diagnostic] | None = None,
        text_paths: list[tuple[int | None, str, bool]] | None = None,
    ) -> None:
        self.registry = registry
        self.diagnostics: list[Diagnostic] = []
        self.text_problems = text_problems if text_problems is not None else self.diagnostics
        self.text_paths = text_paths if text_paths is not None else []

    def problem(self, where: str, message: str, step_id: int | None = None, hint: str = "") -> None:
        self.diagnostics.append(
            Diagnostic(
                "invalid_schema",
                DIAGNOSTIC_CODES["invalid_schema"],
                step_id,
                f"wire field {where}: {message}",
                hint,
            )
        )

    def decoded(
        self, value: Any, where: str, step_id: int | None, located: str | None = None
    ) -> Any:
        """``value`` with its JSON-text wrappers decoded; ``invalid_json_text`` for each
        one whose text is not JSON. ``located``: how the compiler names ``value``'s place
        (``args``, ``check[0] (equals)``), to record where JSON text was decoded."""
        result, problems, paths = decode_json_text(value)
        if located is not None:
            self.text_paths.extend((step_id, located + path, True) for path in paths)
            self.text_paths.extend(
                (step_id, located + path.removesuffix("." + JSON_TEXT_KEY), False)
                for path, _ in problems
            )
        for path, why in problems:
            self.text_problems.append(
                Diagnostic(
                    "invalid_json_text",
                    DIAGNOSTIC_CODES["invalid_json_text"],
                    step_id,
                    f"wire field {where}{path}: the text is not JSON ({why})",
                    'write the value as JSON text: {"json": "[1, 2]"}, {"json": "{\\"a\\": '
                    '\\"<step_1_result>\\"}"}, or give one reference as a plain string',
                )
            )
        return result

    def arguments(
        self,
        value: Any,
        where: str,
        step_id: int | None,
        schema: Mapping[str, Any] | None,
        located: str,
    ) -> tuple[bool, dict[str, Any]]:
        """Read an argument object: wrappers decoded, left-out (``null``) values dropped."""
        if value is None:
            return True, {}
        if not isinstance(value, Mapping):
            self.problem(
                where,
                f"must be an object of arguments, not {_kind(value)}",
                step_id,
                'write {"NAME": value, ...}, {} for none',
            )
            return False, {}
        decoded = self.decoded(dict(value), where, step_id, located)
        if schema is not None:
            decoded = _without_left_out(decoded, schema, schema.get("$defs") or {})
        return True, decoded

    def unknown_keys(
        self, item: Mapping[str, Any], allowed: Sequence[str], where: str, step_id: int | None
    ) -> None:
        extra = [key for key in item if key not in allowed]
        if extra:
            names = ", ".join(repr(key) for key in extra)
            self.problem(
                where,
                f"unknown field(s) {names}",
                step_id,
                "the fields here are " + ", ".join(allowed),
            )


def _admits_null(schema: Any, definitions: Mapping[str, Any], depth: int = 0) -> bool:
    """Whether a (pydantic) JSON schema takes ``null``: no type at all, a ``null`` type or
    branch, or ``null`` in its enum."""
    if not isinstance(schema, Mapping) or depth > 20:
        return True
    reference = schema.get("$ref")
    if isinstance(reference, str):
        return _admits_null(definitions.get(reference.rsplit("/", 1)[-1]), definitions, depth + 1)
    if "const" in schema:
        return schema["const"] is None
    if isinstance(schema.get("enum"), list):
        return None in schema["enum"]
    choices = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(choices, list):
        return any(_admits_null(choice, definitions, depth + 1) for choice in choices)
    kind = schema.get("type")
    if kind is None:
        return "properties" not in schema
    return kind == "null" or (isinstance(kind, list) and "null" in kind)


def _without_left_out(
    args: dict[str, Any], schema: Mapping[str, Any], definitions: Mapping[str, Any]
) -> dict[str, Any]:
    """``args`` without the ``null`` values of optional arguments that do not take
    ``null`` (strict mode's way of leaving them out), at any depth of typed objects."""
    result = _left_out(args, schema, definitions, 0)
    return result if isinstance(result, dict) else args


def _left_out(value: Any, schema: Any, definitions: Mapping[str, Any], depth: int) -> Any:
    if not isinstance(schema, Mapping) or depth > 20:
        return value
    reference = schema.get("$ref")
    if isinstance(reference, str):
        target = definitions.get(reference.rsplit("/", 1)[-1])
        return _left_out(value, target, definitions, depth + 1)
    choices = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(choices, list):
        kind = (
            "object" if isinstance(value, Mapping) else "array" if isinstance(value, list) else ""
        )
        for choice in choices:
            resolved = choice
            while isinstance(resolved, Mapping) and isinstance(resolved.get("$ref"), str):
                resolved = definitions.get(resolved["$ref"].rsplit("/", 1)[-1])
            if isinstance(resolved, Mapping) and (
                resolved.get("type") == kind or (kind == "object" and "properties" in resolved)
            ):
                return _left_out(value, resolved, definitions, depth + 1)
        return value
    properties = schema.get("properties")
    if isinstance(value, Mapping) and isinstance(properties, Mapping):
        required = set(schema.get("required") or ())
        return {
            name: _left_out(item, properties.get(name), definitions, depth + 1)
            for name, item in value.items()
            if not (
                item is None
                and name in properties
                and name not in required
                and not _admits_null(properties[name], definitions)
            )
        }
    items = schema.get("items")
    if isinstance(value, list) and isinstance(items, Mapping):
        return [_left_out(item, items, definitions, depth + 1) for item in value]
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def wire_to_document(
    source: Mapping[str, Any] | str | bytes,
    registry: Registry | None = None,
    *,
    json_text_problems: list[Diagnostic] | None = None,
    json_text_paths: list[tuple[int | None, str, bool]] | None = None,
) -> dict[str, Any]:
    """Convert wire data to the verbose plan document (the dict ``compile_plan`` takes).

    Only the wire layer is checked here (fields, their JSON types, the JSON texts); the
    shape of the result is the Plan model's and the compiler's business, so
    ``compile_plan(wire_to_document(text), registry)`` reports every remaining problem.

    Args:
        source: the model's text (str or UTF-8 bytes) or the decoded JSON object.
        registry: the run's tools and checks, or None: with it, a ``null`` argument whose
            type does not take ``null`` is left out (OpenAI strict mode's way of omitting
            an optional argument).
        json_text_problems: a list the ``invalid_json_text`` diagnostics are appended to
            instead of being raised (the wrappers whose text is not JSON are then left as
            they are, so the plan can still be compiled and every problem reported at
            once); None raises them with the others.
        json_text_paths: a list ``(step_id, place, parsed)`` is appended to for each
            JSON-text value in a step's arguments or checks, the place named as the
            compiler's diagnostics name it (``args.data``, ``check[0] (equals).value``),
            ``parsed`` False when its text is not JSON.

    Returns:
        ``{"version": 1, "goal", "params", "steps", "output"}`` (``params`` and ``output``
        only when given).

    Raises:
        PlanError: ``invalid_json`` when the text is not JSON; ``invalid_json_text`` and
            ``invalid_schema`` for each wire problem found (all of them, not just the
            first).
    """
    if isinstance(source, str | bytes):
        try:
            data: Any = json.loads(source)
        except (ValueError, RecursionError) as error:
            raise PlanError(
                [
                    Diagnostic(
                        "invalid_json",
                        DIAGNOSTIC_CODES["invalid_json"],
                        None,
                        f"the plan is not JSON: {error}",
                        "answer with one JSON object in the wire format, nothing else",
                    )
                ]
            ) from None
    else:
        data = source
    reader = _Reader(registry, json_text_problems, json_text_paths)
    if not isinstance(data, Mapping):
        reader.problem("(top)", f"must be an object, not {_kind(data)}")
        raise PlanError(reader.diagnostics)
    reader.unknown_keys(data, _TOP_KEYS, "(top)", None)
    document: dict[str, Any] = {"version": 1}
    goal = data.get("g", "")
    if goal is None:
        goal = ""
    if not isinstance(goal, str):
        reader.problem("g", f"must be a string, not {_kind(goal)}")
    document["goal"] = goal
    params = data.get("p")
    if params is not None:
        document["params"] = _read_params(params, reader)
    steps = data.get("s")
    if steps is None:
        reader.problem("s", "is missing", hint='every plan has "s", the list of its steps')
        steps = []
    elif not isinstance(steps, list):
        reader.problem("s", f"must be an array of steps, not {_kind(steps)}")
        steps = []
    document["steps"] = [_read_step(item, index, reader) for index, item in enumerate(steps)]
    if data.get("o") is not None:
        document["output"] = reader.decoded(data["o"], "o", None)
    if reader.diagnostics:
        raise PlanError(reader.diagnostics)
    return document


def _read_params(params: Any, reader: _Reader) -> dict[str, Any]:
    if not isinstance(params, list):
        reader.problem("p", f"must be an array of params, not {_kind(params)}")
        return {}
    result: dict[str, Any] = {}
    for index, item in enumerate(params):
        where = f"p[{index}]"
        if not isinstance(item, Mapping):
            reader.problem(where, f"must be an object, not {_kind(item)}")
            continue
        reader.unknown_keys(item, _PARAM_KEYS, where, None)
        name = item.get("n")
        if not isinstance(name, str) or not name:
            reader.problem(f"{where}.n", "must be the param's name, a non-empty string")
            continue
        if name in result:
            reader.problem(f"{where}.n", f"param {name!r} is declared twice")
            continue
        spec: dict[str, Any] = {}
        kind = item.get("t", "string")
        if kind not in _PARAM_TYPES:
            reader.problem(
                f"{where}.t", f"{kind!r} is not a param type", hint=", ".join(_PARAM_TYPES)
            )
        spec["type"] = kind
        if item.get("h") is not None:
            spec["description"] = item["h"]
        if item.get("v") is not None:
            spec["default"] = reader.decoded(item["v"], f"{where}.v", None)
        if item.get("r") is not None:
            spec["required"] = item["r"]
        result[name] = spec
    return result


def _tool_schema(reader: _Reader, name: Any) -> dict[str, Any] | None:
    registry = reader.registry
    if registry is None or not isinstance(name, str) or name not in registry.tools:
        return None
    return registry.tools[name].json_schema()


def _check_schema(reader: _Reader, kind: Any) -> dict[str, Any] | None:
    registry = reader.registry
    if registry is None or not isinstance(kind, str) or kind not in registry.checks:
        return None
    return registry.checks[kind].args_model.model_json_schema()


def _read_step(item: Any, index: int, reader: _Reader) -> dict[str, Any]:
    where = f"s[{index}]"
    if not isinstance(item, Mapping):
        reader.problem(where, f"a step must be an object, not {_kind(item)}")
        return {}
    raw_id = item.get("i")
    step_id = (
        raw_id if isinstance(raw_id, int) and not isinstance(raw_id, bool) and raw_id > 0 else None
    )
    reader.unknown_keys(item, _STEP_KEYS, where, step_id)
    step: dict[str, Any] = {}
    if "i" not in item:
        reader.problem(f"{where}.i", "is missing", hint="every step has a positive integer id")
    else:
        step["id"] = raw_id
    if "t" in item:
        step["tool"] = item["t"]
    else:
        reader.problem(f"{where}.t", "is missing", step_id, hint="name the tool the step calls")
    ok, args = reader.arguments(
        item.get("a"), f"{where}.a", step_id, _tool_schema(reader, item.get("t")), "args"
    )
    step["args"] = args if ok else {}
    if item.get("d") is not None:
        step["depends_on"] = item["d"]
    if item.get("n") is not None:
        step["description"] = item["n"]
    checks = item.get("c")
    if checks is not None:
        if not isinstance(checks, list):
            reader.problem(
                f"{where}.c", f"must be an array of checks, not {_kind(checks)}", step_id
            )
        else:
            step["check"] = [
                _read_check(check, f"{where}.c[{number}]", number, step_id, reader)
                for number, check in enumerate(checks)
            ]
    return step


def _read_check(
    item: Any, where: str, index: int, step_id: int | None, reader: _Reader
) -> dict[str, Any]:
    if not isinstance(item, Mapping):
        reader.problem(where, f"a check must be an object, not {_kind(item)}", step_id)
        return {}
    reader.unknown_keys(item, _CHECK_KEYS, where, step_id)
    check: dict[str, Any] = {}
    ok, arguments = reader.arguments(
        item.get("a"),
        f"{where}.a",
        step_id,
        _check_schema(reader, item.get("k")),
        f"check[{index}] ({item.get('k')})",
    )
    if ok:
        if "kind" in arguments:
            reader.problem(f"{where}.a", 'holds "kind"; the kind goes in "k"', step_id, "remove it")
        check.update(arguments)
    if "k" in item:
        check["kind"] = item["k"]
    else:
        reader.problem(f"{where}.k", "is missing", step_id, hint="name the check kind")
    return check


def compile_wire(
    source: Mapping[str, Any] | str | bytes, registry: Registry, **options: Any
) -> CompiledPlan:
    """Read a model's plan and compile it, reporting every problem at once.

    Args:
        source: the model's text or its decoded JSON object.
        registry: the run's tools and checks.
        options: keyword arguments of :func:`~plandag.compiler.compile_plan` (``params``,
            ``read_only``, ``write_boundary``, ``http_allow``, ``tainted_author``,
            ``max_steps``).

    Returns:
        The compiled plan.

    Raises:
        PlanError: the wire problems (``invalid_json``, ``invalid_schema``), or the
            ``invalid_json_text`` problems followed by the compiler's diagnostics.
    """
    problems: list[Diagnostic] = []
    places: list[tuple[int | None, str, bool]] = []
    document = wire_to_document(
        source, registry, json_text_problems=problems, json_text_paths=places
    )
    try:
        compiled = compile_plan(document, registry, **options)
    except PlanError as error:
        if not problems and not places:
            raise
        recoded = [_in_json_text(d, places) for d in error.diagnostics]
        raise PlanError([*problems, *(d for d in recoded if d is not None)]) from None
    if problems:
        raise PlanError([*problems, *compiled.diagnostics])
    return compiled


def _in_json_text(
    diagnostic: Diagnostic, places: Sequence[tuple[int | None, str, bool]]
) -> Diagnostic | None:
    """An argument error inside a value given as JSON text becomes ``invalid_json_text``:
    the schema states the argument's type everywhere but in JSON text, so the text's
    contents are a rule of their own (the wrapper's text is JSON of the wrong shape). An
    error at a wrapper whose text is not JSON is dropped: that text is reported already."""
    if diagnostic.code not in ("invalid_args", "invalid_check_args"):
        return diagnostic
    where = diagnostic.message.split(": ", 1)[0]
    for step_id, place, parsed in places:
        if step_id != diagnostic.step_id:
            continue
        if where == place or where.startswith((place + ".", place + "[")):
            if not parsed:
                return None
            return Diagnostic(
                "invalid_json_text",
                DIAGNOSTIC_CODES["invalid_json_text"],
                diagnostic.step_id,
                f"{diagnostic.message}; the value was given as JSON text",
                f"write JSON text of the argument's type there; {diagnostic.hint}",
            )
    return diagnostic


def from_wire(source: Mapping[str, Any] | str | bytes, registry: Registry | None = None) -> Plan:
    """Read a plan in the wire format: :func:`wire_to_document`, then the Plan model.

    Args:
        source: the model's text (str or UTF-8 bytes) or the decoded JSON object.
        registry: the run's tools and checks, or None (see :func:`wire_to_document`).

    Returns:
        The :class:`Plan` (only its shape is checked; compile it for the rest).

    Raises:
        PlanError: ``invalid_json``/``invalid_json_text``/``invalid_schema`` diagnostics
            (wire problems first; a wire object without wire problems may still fail the
            Plan model, reported with the Plan's field names).
    """
    return load_plan(wire_to_document(source, registry))
