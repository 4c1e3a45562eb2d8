"""The wire format: the compact encoding of a plan a model writes (README, "Planning with a
model").

Output tokens are the slow part of planning, so the model does not write the verbose Plan
JSON (ARCHITECTURE.md, "The plan artifact"): it writes the same plan with one-letter keys,
which :func:`from_wire` turns into the :class:`~plandag.dag.plan.Plan` model, losslessly
(:func:`to_wire` goes back). ``benchmarks/wire_tokens.py`` measures the saving.

========  =====================  ==========================================================
wire      Plan                   value
========  =====================  ==========================================================
``g``     ``goal``               string
``p``     ``params``             list of ``{"n": name, "t": type, "h": description,
                                 "v": default (JSON text), "r": required}``; ``n`` and
                                 ``t`` required, the rest optional
``s``     ``steps``              list of steps (below)
``o``     ``output``             JSON text of the output value; absent or null: no output
========  =====================  ==========================================================

A step is ``{"i": id, "t": tool, "a": args, "d": depends_on, "c": checks, "n": description}``:
``a`` is the list of the step's arguments as *assignments*, ``d`` a list of step ids, ``c``
(optional) a list of ``{"k": kind, "a": assignments}`` (``a`` optional), ``n`` (optional) a
short description. An assignment is one string, in the style of HTTPie's request items:

* ``"NAME=TEXT"``: the argument NAME is the string TEXT, the rest of the string as is
  (no JSON inside: ``"path=<param.input>"``, ``"expr=items[?price > `10`].name"``);
* ``"NAME:=JSON"``: the argument NAME is the JSON value (``"max_bytes:=1000"``,
  ``"paths:={\\"vNF\\":\\"//nfe:vNF\\"}"``, ``"all:=true"``).

The first ``=`` ends the name; a name ending in ``:`` marks JSON. ``o`` (the output) and a
param's default ``v`` are JSON text.

Why strings: structured output constrains the model with a JSON schema, and the Anthropic
API accepts only schemas whose every object lists its properties with
``additionalProperties: false`` (the SDK's own ``transform_schema`` forces it; free-form
objects are refused). Tool arguments are free-form (each tool has its own, and any argument
may hold a reference string), so they cannot be JSON objects on the wire. JSON text inside
a string would do, at the price of a backslash before every quote; assignments need none
for the most common arguments, strings (paths, references, expressions), and measure
shorter than the verbose Plan JSON itself (``benchmarks/wire_tokens.py``). The reader is
lenient where it cannot be ambiguous: an object given for ``a`` is taken as the args
themselves, and a JSON value that is not a string for ``o`` or ``v`` as the value.

Malformed wire data raises :class:`~plandag.errors.PlanError` with every problem found:
``invalid_json`` when the text is not JSON, ``invalid_schema`` for everything else (which
field, why, and the step id when known), so the planner can send them back to the model
like the compiler's own diagnostics.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, get_args

from plandag.compiler import Diagnostic, load_plan
from plandag.compiler.diagnostics import DIAGNOSTIC_CODES
from plandag.dag.plan import ParamSpec, ParamType, Plan
from plandag.errors import PlanError

__all__ = [
    "WIRE_SCHEMA_NAME",
    "dumps_wire",
    "from_wire",
    "to_wire",
    "wire_json_schema",
    "wire_to_document",
]

WIRE_SCHEMA_NAME = "plandag_plan"
"""The structured-output schema's name (OpenAI's ``response_format.json_schema.name``)."""

_PARAM_TYPES: tuple[str, ...] = get_args(ParamType)
_TOP_KEYS = ("g", "p", "s", "o")
_STEP_KEYS = ("i", "t", "a", "d", "c", "n")
_CHECK_KEYS = ("k", "a")
_PARAM_KEYS = ("n", "t", "h", "v", "r")


def _json_text(value: Any) -> str:
    """Compact JSON text of ``value`` (non-ASCII kept as is; NaN refused)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


# -- Plan -> wire ----------------------------------------------------------------------------


def to_wire(plan: Plan) -> dict[str, Any]:
    """The wire form of ``plan`` (the table in the module docstring).

    Optional fields are left out when the plan does not set them: no ``p`` without params,
    no ``o`` when ``output`` is None, no ``c`` for a step without checks, no ``n`` without a
    description. ``d`` is always written.

    Args:
        plan: a validated plan.

    Returns:
        A JSON-safe dict; ``from_wire(to_wire(plan))`` equals ``plan``.

    Raises:
        ValueError: a value holds NaN or an infinity (not JSON).
    """
    wire: dict[str, Any] = {"g": plan.goal}
    if plan.params:
        wire["p"] = [_param_to_wire(name, spec) for name, spec in plan.params.items()]
    steps = []
    for step in plan.steps:
        item: dict[str, Any] = {
            "i": step.id,
            "t": step.tool,
            "a": _assignments(step.args, f"step {step.id} args"),
            "d": list(step.depends_on),
        }
        if step.check:
            checks = []
            for spec in step.check:
                check: dict[str, Any] = {"k": spec.kind}
                if spec.arguments:
                    check["a"] = _assignments(spec.arguments, f"step {step.id} check {spec.kind}")
                checks.append(check)
            item["c"] = checks
        if step.description is not None:
            item["n"] = step.description
        steps.append(item)
    wire["s"] = steps
    if plan.output is not None:
        wire["o"] = _json_text(plan.output)
    return wire


def _assignments(values: Mapping[str, Any], where: str) -> list[str]:
    """``values`` as assignments: ``NAME=TEXT`` for strings, ``NAME:=JSON`` otherwise."""
    items = []
    for name, value in values.items():
        if "=" in name or name.endswith(":"):
            raise ValueError(
                f"{where}: the name {name!r} holds '=' or ends with ':', which the wire "
                "format's assignments cannot express"
            )
        items.append(
            f"{name}={value}" if isinstance(value, str) else f"{name}:={_json_text(value)}"
        )
    return items


def _param_to_wire(name: str, spec: ParamSpec) -> dict[str, Any]:
    item: dict[str, Any] = {"n": name, "t": spec.type}
    if spec.description is not None:
        item["h"] = spec.description
    if "default" in spec.model_fields_set:
        item["v"] = _json_text(spec.default)
    if spec.required is not None:
        item["r"] = spec.required
    return item


def dumps_wire(plan: Plan) -> str:
    """``to_wire(plan)`` as compact JSON text: what a model writes for ``plan``.

    Raises:
        ValueError: a value holds NaN or an infinity.
    """
    return _json_text(to_wire(plan))


# -- wire -> Plan ----------------------------------------------------------------------------


class _Reader:
    """Collects ``invalid_schema`` diagnostics while a wire object is read."""

    def __init__(self) -> None:
        self.diagnostics: list[Diagnostic] = []

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

    def json_field(self, value: Any, where: str, step_id: int | None) -> tuple[bool, Any]:
        """Decode a JSON-text field; a non-string JSON value is taken as the value itself."""
        if not isinstance(value, str):
            return True, value
        try:
            return True, json.loads(value)
        except (ValueError, RecursionError) as error:
            self.problem(
                where,
                f"is not JSON text ({error})",
                step_id,
                'write the value as JSON inside the string: "\\"<step_1_result>\\"" for a '
                'string, "{\\"total\\":\\"<step_2_result.vNF>\\"}" for an object',
            )
            return False, None

    def assignments(self, value: Any, where: str, step_id: int | None) -> tuple[bool, Any]:
        """Decode a list of ``NAME=TEXT`` / ``NAME:=JSON`` strings into a dict.

        An object given instead is taken as the dict itself (a model without structured
        output may write one).
        """
        if isinstance(value, Mapping):
            return True, dict(value)
        if not isinstance(value, list):
            self.problem(
                where,
                f"must be a list of assignments, not {_kind(value)}",
                step_id,
                'write ["NAME=TEXT", "NAME:=JSON"], [] for none',
            )
            return False, None
        result: dict[str, Any] = {}
        ok = True
        for index, item in enumerate(value):
            here = f"{where}[{index}]"
            if not isinstance(item, str) or "=" not in item:
                shown = repr(item) if isinstance(item, str) else _kind(item)
                self.problem(
                    here,
                    f"{shown} is not an assignment",
                    step_id,
                    'write "NAME=TEXT" for a string, "NAME:=JSON" for any other value',
                )
                ok = False
                continue
            name, _, text = item.partition("=")
            parsed: Any = text
            if name.endswith(":"):
                name = name[:-1]
                try:
                    parsed = json.loads(text)
                except (ValueError, RecursionError) as error:
                    self.problem(
                        here,
                        f"the value of {name!r} after ':=' is not JSON ({error})",
                        step_id,
                        f'write "{name}=TEXT" for a string, or valid JSON after ":="',
                    )
                    ok = False
                    continue
            if name in result:
                self.problem(here, f"{name!r} is assigned twice", step_id, "assign it once")
                ok = False
                continue
            result[name] = parsed
        return ok, result

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


def wire_to_document(source: Mapping[str, Any] | str | bytes) -> dict[str, Any]:
    """Convert wire data to the verbose plan document (the dict ``compile_plan`` takes).

    Only the wire layer is checked here (fields, their JSON types, the JSON texts); the
    shape of the result is the Plan model's and the compiler's business, so
    ``compile_plan(wire_to_document(text), registry)`` reports every remaining problem.

    Args:
        source: the model's text (str or UTF-8 bytes) or the decoded JSON object.

    Returns:
        ``{"version": 1, "goal", "params", "steps", "output"}`` (``params`` and ``output``
        only when given).

    Raises:
        PlanError: ``invalid_json`` when the text is not JSON; ``invalid_schema`` for each
            wire problem found (all of them, not just the first).
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
    reader = _Reader()
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
        ok, output = reader.json_field(data["o"], "o", None)
        if ok:
            document["output"] = output
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
            ok, default = reader.json_field(item["v"], f"{where}.v", None)
            if ok:
                spec["default"] = default
        if item.get("r") is not None:
            spec["required"] = item["r"]
        result[name] = spec
    return result


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
    if item.get("a") is None:
        step["args"] = {}
    else:
        ok, args = reader.assignments(item["a"], f"{where}.a", step_id)
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
                _read_check(check, f"{where}.c[{number}]", step_id, reader)
                for number, check in enumerate(checks)
            ]
    return step


def _read_check(item: Any, where: str, step_id: int | None, reader: _Reader) -> dict[str, Any]:
    if not isinstance(item, Mapping):
        reader.problem(where, f"a check must be an object, not {_kind(item)}", step_id)
        return {}
    reader.unknown_keys(item, _CHECK_KEYS, where, step_id)
    check: dict[str, Any] = {}
    if item.get("a") is not None:
        ok, arguments = reader.assignments(item["a"], f"{where}.a", step_id)
        if ok:
            if "kind" in arguments:
                reader.problem(
                    f"{where}.a", 'holds "kind"; the kind goes in "k"', step_id, "remove it"
                )
            check.update(arguments)
    if "k" in item:
        check["kind"] = item["k"]
    else:
        reader.problem(f"{where}.k", "is missing", step_id, hint="name the check kind")
    return check


def from_wire(source: Mapping[str, Any] | str | bytes) -> Plan:
    """Read a plan in the wire format: :func:`wire_to_document`, then the Plan model.

    Args:
        source: the model's text (str or UTF-8 bytes) or the decoded JSON object.

    Returns:
        The :class:`Plan` (only its shape is checked; compile it for the rest).

    Raises:
        PlanError: ``invalid_json``/``invalid_schema`` diagnostics (wire problems first;
            a wire object without wire problems may still fail the Plan model, reported
            with the Plan's field names).
    """
    return load_plan(wire_to_document(source))


# -- the schema ------------------------------------------------------------------------------


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def _object(
    properties: dict[str, dict[str, Any]], required: Sequence[str], all_required: bool
) -> dict[str, Any]:
    if all_required:
        properties = {
            key: value if key in required else _nullable(value) for key, value in properties.items()
        }
        required = list(properties)
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


def _assignments_schema() -> dict[str, Any]:
    return {
        "type": "array",
        "items": {"type": "string"},
        "description": "NAME=TEXT for a string, NAME:=JSON for any other value",
    }


def wire_json_schema(
    *,
    tools: Sequence[str] | None = None,
    checks: Sequence[str] | None = None,
    all_required: bool = False,
) -> dict[str, Any]:
    """The JSON schema of the wire format, for structured output.

    It stays inside the subset the Anthropic API accepts for ``output_config.format``
    (every object lists its properties, ``additionalProperties: false``; no numeric or
    length constraints, no recursion, no tuples), so the Anthropic SDK's
    ``transform_schema`` leaves it unchanged; with ``all_required`` it also fits OpenAI's
    strict mode (every property required, optional ones nullable).

    Args:
        tools: the tool names a step may call (an ``enum``, so a constrained model cannot
            name an unknown tool), or None for any string.
        checks: the check kinds a check may name, likewise.
        all_required: list every property as required, optional ones as ``anyOf [T, null]``
            (OpenAI strict mode); False leaves optional properties out of ``required``
            (fewer output tokens: the model may omit them).

    Returns:
        The schema, a new dict each call.
    """
    # An enum goes without "type": the SDK's transform_schema drops it there.
    tool_schema: dict[str, Any] = {"enum": list(tools)} if tools is not None else {"type": "string"}
    kind_schema: dict[str, Any] = (
        {"enum": list(checks)} if checks is not None else {"type": "string"}
    )
    check = _object(
        {"k": kind_schema, "a": _assignments_schema()},
        ["k"],
        all_required,
    )
    step = _object(
        {
            "i": {"type": "integer", "description": "step id, positive, unique"},
            "t": tool_schema,
            "a": _assignments_schema(),
            "d": {"type": "array", "items": {"type": "integer"}},
            "c": {"type": "array", "items": check},
            "n": {"type": "string"},
        },
        ["i", "t", "a", "d"],
        all_required,
    )
    param = _object(
        {
            "n": {"type": "string"},
            "t": {"enum": list(_PARAM_TYPES)},
            "h": {"type": "string"},
            "v": {"type": "string", "description": "JSON text of the default"},
            "r": {"type": "boolean"},
        },
        ["n", "t"],
        all_required,
    )
    return _object(
        {
            "g": {"type": "string"},
            "p": {"type": "array", "items": param},
            "s": {"type": "array", "items": step},
            "o": {"type": "string", "description": "JSON text of the output"},
        },
        ["g", "s"],
        all_required,
    )
