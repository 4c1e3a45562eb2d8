"""The planner's prompt (README, "Planning with a model").

The system prompt holds everything that does not depend on the task, so it is the same for
every task planned with the same registry and is the fixed prefix the provider caches
(``cache_control``, :class:`~plandag.models.base.LLMRequest`): the role, what the wire
format's keys mean (:mod:`plandag.planner.wire`), the reference grammar
(:mod:`plandag.dag.references`), the rules with the data-block rule, every tool with its
arguments' names and defaults, result type, effects and description (:func:`signature`,
untyped), every check kind likewise, and one example plan. What the structured-output
schema each planning request carries already states (the plan's shapes, every argument's
type, which are required, the tool and check names:
:func:`plandag.planner.schema.plan_json_schema`) is not repeated: the schema's tokens are
input too. The user message holds the task, the trusted context and the params given at
run time. A plan that does not compile goes back with :func:`repair_message`: the full
diagnostics list, formatted like ``plandag check``, as quoted data
(:func:`plandag.executors.data.quote_data`).

Every input token of the system prompt is paid on every planning call (LLMCompiler, Kim et
al., ICML 2024, counts the planner's prompt as the cost to beat against ReAct), so each line
is one the planner needs: mistakes the compiler catches are not taught in advance, they come
back as diagnostics for a repair.

Every text here is deterministic: the same registry, task and context give the same bytes
(tools and checks are listed by name).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import typing_extensions
from pydantic import BaseModel

from plandag.compiler import Diagnostic
from plandag.executors.data import DATA_BLOCK_RULE, quote_data
from plandag.tools.base import Tool
from plandag.tools.registry import Registry

__all__ = [
    "GOOD_EXAMPLE",
    "REFERENCE_GRAMMAR",
    "TEXT_KEYWORDS",
    "WIRE_FORMAT_GUIDE",
    "compact_schema",
    "describe_result_type",
    "format_diagnostics",
    "quoted_tool_text",
    "repair_message",
    "system_prompt",
    "user_prompt",
]

ROLE = (
    "You are the planner of plandag: write the whole plan for the task, before anything runs, "
    "as one JSON object: a DAG of tool calls."
)

WIRE_FORMAT_GUIDE = """\
Keys: "g" goal; "s" steps: "i" unique id, "t" tool, "a" args, "d" ids of the steps it \
uses, "c" checks ("k" kind, "a" args); "p" params, declare each one used ("n" name, "t" \
type, "h" help, "v" default, "r" required); "o" output.
{"json": TEXT}: a value as JSON text.
"o": the result, built by code from references (no model call); omit it only when the \
answer needs judgement."""
"""What the plan's keys mean. Their shapes, types and required fields, each tool's and
check's arguments, and where JSON text goes are the structured-output schema's
(:func:`plandag.planner.schema.plan_json_schema`), which every planning request carries:
the prompt does not repeat them."""

REFERENCE_GRAMMAR = """\
References: <step_N_result>, <step_N_result.key.0.field>, <param.NAME>. A string that is \
one reference gets the value with its type; in longer text, its text."""

RULES = """\
Rules:
- Independent steps must not depend on each other: they run at once. Use as few steps as \
the task needs.
- Add checks where code can verify a result.
- Use tools with effects only when the task asks for them."""

GOOD_EXAMPLE = (
    '{"g":"Total paid and refunded orders",'
    '"s":[{"i":1,"t":"read_file","a":{"path":"orders.json"},"d":[]},'
    '{"i":2,"t":"json_select","a":{"data":"<step_1_result>","expr":"sum(paid)"},"d":[1],'
    '"c":[{"k":"jmespath","a":{"expr":"@ >= `0`"}}]},'
    '{"i":3,"t":"json_select","a":{"data":"<step_1_result>","expr":"sum(refunded)"},"d":[1]}],'
    '"o":{"json":"{\\"paid\\":\\"<step_2_result>\\",\\"refunded\\":\\"<step_3_result>\\"}"}}'
)
"""A plan that compiles against the default registry (tested): steps 2 and 3 run at once,
a check, and an output assembled by code."""


# -- tools and checks ------------------------------------------------------------------------


TEXT_KEYWORDS = ("title", "description", "$comment", "examples")
"""The JSON Schema keywords that hold free text rather than constraints: what
:func:`compact_schema` leaves out of the schema of a tool from outside (its words reach a
model only as quoted data: :func:`quoted_tool_text`)."""


def compact_schema(schema: Any, *, drop: tuple[str, ...] = ("title",)) -> Any:
    """``schema`` without its ``title`` annotations (pydantic repeats every field's name),
    or without every keyword of ``drop``.

    A property *named* ``title`` (or any other dropped keyword) is kept: only the
    annotation keyword goes.

    Args:
        schema: a JSON schema (dicts, lists, scalars).
        drop: the annotation keywords to leave out (:data:`TEXT_KEYWORDS` for a schema
            whose words come from outside).

    Returns:
        A new schema; the input is not changed.
    """
    if isinstance(schema, list):
        return [compact_schema(item, drop=drop) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result: dict[str, Any] = {}
    for key, value in schema.items():
        if key in drop and (key != "title" or isinstance(value, str)):
            continue
        if key in ("properties", "$defs", "definitions", "patternProperties") and isinstance(
            value, dict
        ):
            result[key] = {name: compact_schema(item, drop=drop) for name, item in value.items()}
        else:
            result[key] = compact_schema(value, drop=drop)
    return result


def _compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _type_text(annotation: Any) -> str:
    if annotation is Any:
        return "any"
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    return str(annotation).replace("typing.", "").replace("typing_extensions.", "")


def _fields(annotation: Any) -> dict[str, Any] | None:
    if not isinstance(annotation, type):
        return None
    try:
        if typing_extensions.is_typeddict(annotation):
            return dict(typing.get_type_hints(annotation))
        if issubclass(annotation, BaseModel):
            return {name: info.annotation for name, info in annotation.model_fields.items()}
        if dataclasses.is_dataclass(annotation):
            hints = typing.get_type_hints(annotation)
            return {
                field.name: hints.get(field.name, Any) for field in dataclasses.fields(annotation)
            }
    except Exception:  # unresolvable forward references: name the type only
        return None
    return None


def describe_result_type(annotation: Any) -> str:
    """A tool's declared result type in a few words, for references into it.

    Args:
        annotation: the tool's return annotation (``Tool.result_type``).

    Returns:
        ``"any"`` for ``Any`` or no annotation; ``"Name {field: type, ...}"`` for a
        TypedDict, pydantic model or dataclass; else the type as written (``str | bytes``).
    """
    if annotation is inspect.Signature.empty or annotation is None:
        return "any"
    fields = _fields(annotation)
    if fields is None:
        return _type_text(annotation)
    inner = ", ".join(f"{name}: {_type_text(kind)}" for name, kind in fields.items())
    return f"{annotation.__name__} {{{inner}}}"


def _schema_type(schema: Any, definitions: Mapping[str, Any], depth: int = 0) -> str:
    """A JSON schema as a short type: ``string``, ``integer[]``, ``{string: string}``,
    ``{a: number, b?: string}``, ``"x"|"y"``, ``string|integer``; ``any`` when open."""
    if not isinstance(schema, Mapping) or depth > 4:
        return "any"
    reference = schema.get("$ref")
    if isinstance(reference, str):
        target = definitions.get(reference.rsplit("/", 1)[-1])
        return _schema_type(target, definitions, depth + 1)
    if "const" in schema:
        return _compact_json(schema["const"])
    if isinstance(schema.get("enum"), list):
        return "|".join(_compact_json(value) for value in schema["enum"])
    choices = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(choices, list):
        kinds = [_schema_type(choice, definitions, depth + 1) for choice in choices]
        return "|".join(dict.fromkeys(kind for kind in kinds if kind != "null")) or "null"
    kind = schema.get("type")
    if isinstance(kind, list):
        return "|".join(str(item) for item in kind if item != "null") or "null"
    if kind == "array":
        item = _schema_type(schema.get("items"), definitions, depth + 1)
        return f"({item})[]" if "|" in item else f"{item}[]"
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties")
        if isinstance(properties, Mapping) and properties:
            return "{" + _fields_text(schema, definitions, depth + 1) + "}"
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            return "{string: " + _schema_type(extra, definitions, depth + 1) + "}"
        return "object"
    return str(kind) if isinstance(kind, str) else "any"


def _fields_text(
    schema: Mapping[str, Any], definitions: Mapping[str, Any], depth: int, typed: bool = True
) -> str:
    """An object schema's fields: ``name: type`` (required), ``name?: type`` (optional, no
    default), ``name: type = DEFAULT`` (optional with a default), in the schema's order;
    without ``: type`` when not ``typed``."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return ""
    required = set(schema.get("required") or ())
    parts = []
    for name, field in properties.items():
        kind = _schema_type(field, definitions, depth)
        if not typed:
            if name in required:
                parts.append(name)
            elif isinstance(field, Mapping) and field.get("default") is not None:
                parts.append(f"{name}={_compact_json(field['default'])}")
            else:
                parts.append(f"{name}?")
            continue
        if name in required:
            parts.append(f"{name}: {kind}")
        elif isinstance(field, Mapping) and field.get("default") is not None:
            parts.append(f"{name}: {kind} = {_compact_json(field['default'])}")
        else:
            parts.append(f"{name}?: {kind}")
    return ", ".join(parts)


def signature(name: str, schema: Mapping[str, Any], *, typed: bool = True) -> str:
    """A tool's or a check kind's arguments schema as one signature line.

    Args:
        name: the tool or check kind.
        schema: its arguments' JSON schema (pydantic's, ``$defs`` resolved by name).
        typed: with each field's type; without, ``name(arg, optional?, with_default=DEFAULT)``.

    Returns:
        ``name(arg: type, optional?: type, with_default: type = DEFAULT)``, then
        `` # field: description`` notes for the fields that carry a description. A JSON
        schema is about three times longer for the same facts.
    """
    definitions = schema.get("$defs") or schema.get("definitions") or {}
    text = f"{name}({_fields_text(schema, definitions, 0, typed)})"
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        notes = [
            f"{field}: {value['description']}"
            for field, value in properties.items()
            if isinstance(value, Mapping) and isinstance(value.get("description"), str)
        ]
        if notes:
            text += " # " + "; ".join(notes)
    return text


def _plain(text: str) -> str:
    """A docstring's text for a prompt: reStructuredText literals without their backquotes."""
    return text.replace("``", "")


def quoted_tool_text(item: Tool) -> str:
    """What a tool defined outside the process (an MCP server's: ``origin`` set) says of
    itself, as one quoted data block (:func:`plandag.executors.data.quote_data`): its
    signature with the notes of its arguments, and its description. Every word of it comes
    from the server, so it reaches a model as data, never as instructions (ARCHITECTURE.md,
    "Untrusted content").

    Args:
        item: the tool.

    Returns:
        The block, labelled ``signature and description of tool NAME, from outside``.
    """
    return quote_data(
        f"signature and description of tool {item.name}, from outside",
        {"signature": signature(item.name, item.json_schema()), "description": item.description},
    )


def _tool_lines(registry: Registry) -> list[str]:
    lines = []
    for name in sorted(registry.tools):
        item = registry.tools[name]
        effects = "" if item.effects == "none" else f" [effects: {item.effects}]"
        if item.origin is not None:
            lines.append(
                f"- {name} -> {describe_result_type(item.result_type)}{effects}: a tool from "
                f"outside; its signature and description are quoted data:\n"
                f"{quoted_tool_text(item)}"
            )
            continue
        call, _, notes = signature(name, item.json_schema(), typed=False).partition(" # ")
        notes = f" ({notes})" if notes else ""
        lines.append(
            f"- {call} -> {describe_result_type(item.result_type)}{effects}: "
            f"{item.description}{notes}"
        )
    return lines


def _check_lines(registry: Registry) -> list[str]:
    lines = []
    for name in sorted(registry.checks):
        definition = registry.checks[name]
        schema = definition.args_model.model_json_schema()
        lines.append(f"- {signature(name, schema, typed=False)}: {_plain(definition.description)}")
    return lines


# -- the messages ----------------------------------------------------------------------------


def system_prompt(registry: Registry) -> str:
    """The planner's system prompt for the tools and checks of ``registry``.

    The prompt caching of the provider (``cache_control``) covers it whole: nothing in it
    depends on the task.

    Args:
        registry: the tools and check kinds the plan may use (every one is listed, by name).

    Returns:
        The text: role, the wire format, the reference grammar, the rules with the
        data-block rule and the common mistakes, the tools and the check kinds as signatures
        (sorted by name), one example plan.
    """
    sections = [
        ROLE,
        WIRE_FORMAT_GUIDE,
        REFERENCE_GRAMMAR,
        f"{RULES}\n- {DATA_BLOCK_RULE}",
        "Tools:\n" + "\n".join(_tool_lines(registry)),
        "Checks:\n" + "\n".join(_check_lines(registry)),
        f"Example, with other tools:\n{GOOD_EXAMPLE}",
    ]
    return "\n\n".join(sections) + "\n"


def user_prompt(goal: str, context: str = "", params: Mapping[str, Any] | None = None) -> str:
    """The user message: the task, the trusted context, the params given at run time.

    Args:
        goal: the task, in the user's words.
        context: trusted context from the user (a file's text), or "" for none. It is not
            quoted as data: it comes from the user, like the task.
        params: values the run will be given (``--param NAME=VALUE``), by name, or None.
            Each is shown with its value as JSON; the plan must declare it in ``p``.

    Returns:
        The text.
    """
    parts = [f"Task:\n{goal.strip()}"]
    if context.strip():
        parts.append(f"Trusted context (from the user):\n{context.strip()}")
    if params:
        lines = [
            f"- {name} = {json.dumps(value, ensure_ascii=False, default=str)}"
            for name, value in params.items()
        ]
        parts.append(
            'Params given at run time (declare each in "p", use it as <param.NAME>):\n'
            + "\n".join(lines)
        )
    return "\n\n".join(parts) + "\n"


def format_diagnostics(diagnostics: Sequence[Diagnostic], source: str = "plan.json") -> str:
    """Diagnostics as ``plandag check`` prints them: one line each, then a summary line.

    Args:
        diagnostics: every diagnostic, errors and warnings, in the compiler's order.
        source: the name the lines start with.

    Returns:
        ``"{source}: step 3: error[unknown_tool]: ... (hint: ...)"`` lines and
        ``"{source}: N error(s); the plan does not compile"``.
    """
    errors = sum(1 for diagnostic in diagnostics if diagnostic.severity == "error")
    lines = [f"{source}: {diagnostic.format()}" for diagnostic in diagnostics]
    lines.append(f"{source}: {errors} error(s); the plan does not compile")
    return "\n".join(lines)


def repair_message(diagnostics: Sequence[Diagnostic], attempt: int) -> str:
    """The user message that sends a plan's diagnostics back to the model.

    Args:
        diagnostics: the full list the compiler (or the wire reader) reported.
        attempt: the number of the attempt that failed (1 for the first plan).

    Returns:
        The text: the diagnostics as one data block (labelled ``plandag check output,
        attempt N``; the whole list, never cut), then what to do.
    """
    report = format_diagnostics(diagnostics)
    block = quote_data(
        f"plandag check output, attempt {attempt}", report, max_chars=len(report) + 2
    )
    return (
        "The plan in your last answer does not compile. plandag check reported:\n"
        f"{block}\n"
        "Fix every error listed and answer with the whole corrected plan in the wire format."
    )
