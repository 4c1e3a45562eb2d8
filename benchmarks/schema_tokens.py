"""Prompt tokens of the plan schema: the typed schema built from the registry against the
schema of the wire format with ``NAME=TEXT`` assignments it replaced.

Run: ``python benchmarks/schema_tokens.py [--tools 60]``. For each registry it prints the
input tokens of one planning request: the system prompt (the tools as signatures, the
checks, the format guide and the example) and the structured-output schema, as compact
JSON, for:

* **typed** (system prompt only): the typed schema's prompt as it first was, repeating what
  the schema states (the plan's shapes in the format guide, typed tool signatures);

* **before**: the assignment wire format's schema (tools and check kinds as enums, every
  argument a string), and the system prompt with that format's guide and example;
* **after**: the typed schema (:func:`plandag.planner.schema.plan_json_schema`) as the
  clients send it (:func:`plandag.models.schemas.prepare_schema`): to Anthropic (numeric
  bounds in descriptions) and to an OpenAI-compatible server (strict: every property
  required, optional ones nullable), with today's system prompt.

Registries: ``movie8`` (the bench's one search tool and the built-in checks), the built-ins
(what ``plandag plan`` shows), the built-ins with the NF-e application, and the built-ins
with ``--tools`` synthetic tools (default 60) of mixed signatures (strings, bounded integers,
enums, optional fields, lists, typed objects, free-form maps, ``Any``).

Tokens are ``ceil(characters / 4)`` (:func:`plandag.testing.estimate_tokens`, what the local
servers bill); no real tokenizer is a dependency. Whether a provider bills the schema as
input, and how many tokens its own rendering takes, is the provider's: the figures are the
schema's text.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, NotRequired

from pydantic import Field
from typing_extensions import TypedDict

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from plandag.models.schemas import prepare_schema  # noqa: E402
from plandag.planner.prompt import (  # noqa: E402
    GOOD_EXAMPLE,
    WIRE_FORMAT_GUIDE,
    signature,
    system_prompt,
)
from plandag.planner.schema import plan_json_schema  # noqa: E402
from plandag.testing import estimate_tokens  # noqa: E402
from plandag.tools import Tool, tool  # noqa: E402
from plandag.tools.registry import Registry, default_registry  # noqa: E402

__all__ = ["assignment_schema", "main", "measure", "registries", "synthetic_tools"]

ASSIGNMENT_GUIDE = """\
Plan: {"g": goal, "p": [params], "s": [steps], "o": output}
Step: {"i": unique id > 0, "t": tool, "a": [args], "d": [ids it uses], "c": [checks]}
Arg: "NAME=TEXT" for a string as written, "NAME:=JSON" for any JSON ("n:=3"); [] for none.
Check: {"k": kind, "a": [args]}
Param (declare each one used): {"n": name, "t": JSON type or any, "h": help, "v": default \
JSON, "r": required}
"o": the result as JSON text with references, built by code (no model call); omit it only \
when the answer needs judgement."""
ASSIGNMENT_EXAMPLE = (
    '{"g":"Total paid and refunded orders",'
    '"s":[{"i":1,"t":"read_file","a":["path=orders.json"],"d":[]},'
    '{"i":2,"t":"json_select","a":["data=<step_1_result>","expr=sum(paid)"],"d":[1],'
    '"c":[{"k":"jmespath","a":["expr=@ >= `0`"]}]},'
    '{"i":3,"t":"json_select","a":["data=<step_1_result>","expr=sum(refunded)"],"d":[1]}],'
    '"o":"{\\"paid\\":\\"<step_2_result>\\",\\"refunded\\":\\"<step_3_result>\\"}"}'
)
"""The format guide and example the system prompt held with the assignment wire format."""

TYPED_GUIDE = """\
Plan: {"g": goal, "p": [params], "s": [steps], "o": output}
Step: {"i": unique id > 0, "t": tool, "a": {its args}, "d": [ids it uses], "c": [checks]}
Check: {"k": kind, "a": {its args}}
Param (declare each one used): {"n": name, "t": JSON type or any, "h": help, "v": default, \
"r": required}
JSON text: a value typed any or a free-form object, and "o", is one reference or \
{"json": "<the value as JSON text>"}.
"o": the result with references, built by code (no model call); omit it only when the \
answer needs judgement."""
"""The format guide the system prompt held when the typed schema came, before it left to
the schema what the schema states (shapes, types; tool signatures were typed too)."""

_PARAM_TYPES = ["string", "integer", "number", "boolean", "object", "array", "any"]


def _object(properties: dict[str, Any], required: Sequence[str], strict: bool) -> dict[str, Any]:
    if strict:
        properties = {
            key: value if key in required else {"anyOf": [value, {"type": "null"}]}
            for key, value in properties.items()
        }
        required = list(properties)
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


def assignment_schema(registry: Registry, *, strict: bool = False) -> dict[str, Any]:
    """The structured-output schema of the assignment wire format, as the planner sent it
    (tool names and check kinds as enums, arguments as strings)."""
    assignments = {
        "type": "array",
        "items": {"type": "string"},
        "description": "NAME=TEXT for a string, NAME:=JSON for any other value",
    }
    check = _object({"k": {"enum": sorted(registry.checks)}, "a": assignments}, ["k"], strict)
    step = _object(
        {
            "i": {"type": "integer", "description": "step id, positive, unique"},
            "t": {"enum": sorted(registry.tools)},
            "a": assignments,
            "d": {"type": "array", "items": {"type": "integer"}},
            "c": {"type": "array", "items": check},
            "n": {"type": "string"},
        },
        ["i", "t", "a", "d"],
        strict,
    )
    param = _object(
        {
            "n": {"type": "string"},
            "t": {"enum": _PARAM_TYPES},
            "h": {"type": "string"},
            "v": {"type": "string", "description": "JSON text of the default"},
            "r": {"type": "boolean"},
        },
        ["n", "t"],
        strict,
    )
    return _object(
        {
            "g": {"type": "string"},
            "p": {"type": "array", "items": param},
            "s": {"type": "array", "items": step},
            "o": {"type": "string", "description": "JSON text of the output"},
        },
        ["g", "s"],
        strict,
    )


class _Window(TypedDict):
    start: int
    end: NotRequired[int]


def synthetic_tools(count: int) -> list[Tool]:
    """``count`` tools cycling through six signatures, named ``tool_01``..."""
    shapes: list[Any] = []

    def fetch_page(url: str, timeout: Annotated[float, Field(gt=0)] = 10.0) -> str:
        "Fetch a page by URL."
        return url

    def search_items(
        query: str, limit: Annotated[int, Field(ge=1, le=50)] = 10, sort: str | None = None
    ) -> list[dict[str, Any]]:
        "Search the catalogue."
        return []

    def convert(value: float, unit: Literal["m", "km", "mi", "ft"] = "m") -> float:
        "Convert a length."
        return value

    def tag_records(records: list[str], tags: dict[str, str] | None = None) -> int:
        "Tag records."
        return len(records)

    def summarise(data: Any, window: _Window | None = None, style: str = "short") -> str:
        "Summarise data."
        return str(data)

    def flag(name: str, enabled: bool = True, level: int = 0) -> bool:
        "Set a flag."
        return enabled

    shapes = [fetch_page, search_items, convert, tag_records, summarise, flag]
    return [
        tool(shapes[index % len(shapes)], name=f"tool_{index + 1:02d}") for index in range(count)
    ]


def registries(count: int) -> dict[str, Registry]:
    """The registries measured, by label."""
    from plandag.bench.workloads import MOVIE8, World

    synthetic = default_registry(resolve_installed=False)
    for item in synthetic_tools(count):
        synthetic.add_tool(item)
    return {
        "movie8 (bench)": MOVIE8.make_registry(World()),
        "built-ins": default_registry(resolve_installed=False),
        "built-ins + NF-e": default_registry(["nfe"], resolve_installed=False),
        f"built-ins + {count} tools": synthetic,
    }


def _tokens(value: Any) -> int:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return estimate_tokens(text)


def _typed_signatures(prompt: str, registry: Registry) -> str:
    """``prompt`` with each tool's signature typed (``name(arg: type, ...)``)."""
    for name in sorted(registry.tools):
        schema = registry.tools[name].json_schema()
        untyped = signature(name, schema, typed=False).partition(" # ")[0]
        typed = signature(name, schema).partition(" # ")[0]
        prompt = prompt.replace(f"- {untyped} -> ", f"- {typed} -> ", 1)
    return prompt


def measure(registry: Registry) -> dict[str, int]:
    """Input tokens of one planning request's prompt and schema: before (assignments),
    typed (the typed schema with the prompt repeating its shapes and types) and after."""
    prompt = system_prompt(registry)
    typed_prompt = _typed_signatures(prompt.replace(WIRE_FORMAT_GUIDE, TYPED_GUIDE), registry)
    before_prompt = typed_prompt.replace(TYPED_GUIDE, ASSIGNMENT_GUIDE).replace(
        GOOD_EXAMPLE, ASSIGNMENT_EXAMPLE
    )
    typed = plan_json_schema(registry)
    return {
        "tools": len(registry.tools),
        "checks": len(registry.checks),
        "prompt_before": _tokens(before_prompt),
        "prompt_typed": _tokens(typed_prompt),
        "prompt_after": _tokens(prompt),
        "schema_before": _tokens(assignment_schema(registry)),
        "schema_before_strict": _tokens(assignment_schema(registry, strict=True)),
        "schema_after": _tokens(prepare_schema(typed, "anthropic").schema),
        "schema_after_strict": _tokens(prepare_schema(typed, "openai").schema),
    }


def main(argv: list[str] | None = None) -> int:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, default=60, help="synthetic tools added (>= 1)")
    args = parser.parse_args(argv)
    if args.tools < 1:
        parser.error("--tools must be >= 1")
    print(
        "| registry | tools | checks | system prompt before → typed → after | schema before → "
        "after (Anthropic) | schema before → after (OpenAI strict) | prompt + schema before → "
        "typed → after (Anthropic) |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, registry in registries(args.tools).items():
        m = measure(registry)
        total_before = m["prompt_before"] + m["schema_before"]
        total_typed = m["prompt_typed"] + m["schema_after"]
        total_after = m["prompt_after"] + m["schema_after"]
        print(
            f"| {label} | {m['tools']} | {m['checks']} | {m['prompt_before']} → "
            f"{m['prompt_typed']} → {m['prompt_after']} | {m['schema_before']} → "
            f"{m['schema_after']} | {m['schema_before_strict']} → {m['schema_after_strict']} | "
            f"{total_before} → {total_typed} → {total_after} ({total_after / total_before:.2f}x) |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
