"""How a model is offered tools and how its tool calls come back (ARCHITECTURE.md,
"Untrusted content"), shared by the ``agent`` step (:mod:`plandag.executors.agent`), the
ReAct baseline (:mod:`plandag.react`) and the planner's prompt
(:mod:`plandag.planner.prompt`):

* a tool's arguments as a compact JSON schema (:func:`compact_schema`) or as one signature
  line (:func:`signature`), its result type in a few words (:func:`describe_result_type`);
  what a tool from outside (an MCP server's) says of itself reaches a model only as quoted
  data (:func:`quoted_tool_text`, without its schema's free text: :data:`TEXT_KEYWORDS`);
* the Messages API's native tool use: each tool as a tool definition
  (:func:`tool_definitions`, described by :func:`tool_description`), the reply's content
  blocks from either client (:func:`content_blocks`), the ``tool_result`` block that
  answers a call (:func:`tool_result_block`), and the rules of a loop that calls one tool
  per turn (:data:`REACT_RULES`; Yao et al., *ReAct*, ICLR 2023).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import typing
from collections.abc import Mapping
from typing import Any

import typing_extensions
from pydantic import BaseModel

from plandag.executors.data import quote_data
from plandag.tools.base import Tool
from plandag.tools.registry import Registry

__all__ = [
    "REACT_RULES",
    "TEXT_KEYWORDS",
    "compact_schema",
    "content_blocks",
    "describe_result_type",
    "quoted_tool_text",
    "signature",
    "tool_definitions",
    "tool_description",
    "tool_result_block",
]

REACT_RULES = """\
Rules:
- Use only the tools provided, with arguments that fit their schemas.
- One tool call per turn: its result comes back before your next turn.
- Use tools with effects (write, irreversible) only when the task asks for that effect.
- Never invent a result that no tool produced."""
"""The rules of a loop that calls one tool per turn, in the system prompts of the ReAct
baseline and of the ``agent`` step."""

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


def tool_description(registry: Registry, name: str) -> str:
    """The description of tool ``name`` as the planner's system prompt gives it.

    Args:
        registry: the tools.
        name: a registered tool's name.

    Returns:
        ``"(effects: none; returns TYPE): DOCSTRING"`` (the planner's tool line, without
        the leading ``- NAME``); for a tool from outside (an MCP server's), its signature
        and description as quoted data instead of the docstring
        (:func:`quoted_tool_text`).

    Raises:
        KeyError: no such tool.
    """
    item = registry.tools[name]
    if item.origin is not None:
        return (
            f"(effects: {item.effects}; returns {describe_result_type(item.result_type)}): "
            f"a tool from outside; its signature and description are quoted data:\n"
            f"{quoted_tool_text(item)}"
        )
    return (
        f"(effects: {item.effects}; returns {describe_result_type(item.result_type)}): "
        f"{item.description}"
    )


def tool_definitions(registry: Registry) -> list[dict[str, Any]]:
    """Every tool of ``registry`` as a Messages API tool definition, sorted by name.

    Returns:
        ``[{"name", "description", "input_schema"}]``: the description of
        :func:`tool_description`, the compact schema the planner's prompt shows; for a tool
        from outside (an MCP server's), the schema without its free text
        (:data:`TEXT_KEYWORDS`: the argument notes are in the
        description's quoted data).
    """
    definitions = []
    for name in sorted(registry.tools):
        item = registry.tools[name]
        drop = TEXT_KEYWORDS if item.origin is not None else ("title",)
        schema = compact_schema(item.json_schema(), drop=drop)
        schema.setdefault("type", "object")
        definitions.append(
            {
                "name": name,
                "description": tool_description(registry, name),
                "input_schema": schema,
            }
        )
    return definitions


def content_blocks(raw: Any) -> list[dict[str, Any]]:
    """The response's content blocks as Messages API JSON (text and tool_use): those of the
    Anthropic SDK's message, or those of an OpenAI-compatible chat completion (a dict;
    :func:`plandag.models.openai.content_blocks`).

    Args:
        raw: an :class:`~plandag.models.LLMResponse`'s ``raw``.

    Raises:
        TypeError: the response carries no content blocks (neither client's answer).
    """
    if isinstance(raw, Mapping):
        from plandag.models.openai import content_blocks as chat_blocks

        return chat_blocks(raw)
    content = getattr(raw, "content", None)
    if content is None:
        raise TypeError(
            "the ReAct loop needs Messages API content blocks or a chat completion in the "
            "response (use AnthropicClient or OpenAICompatibleClient)"
        )
    blocks: list[dict[str, Any]] = []
    for block in content:
        kind = getattr(block, "type", None)
        if kind == "text":
            blocks.append({"type": "text", "text": str(block.text)})
        elif kind == "tool_use":
            blocks.append(
                {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
            )
    return blocks


def tool_result_block(use: Mapping[str, Any], content: str, is_error: bool) -> dict[str, Any]:
    """The ``tool_result`` block answering tool call ``use`` with ``content`` (text; a data
    block for a result), ``is_error`` set for a failed or refused call."""
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": use["id"], "content": content}
    if is_error:
        result["is_error"] = True
    return result
