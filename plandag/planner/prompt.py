"""The planner's prompt (README, "Planning with a model").

The system prompt holds everything that does not depend on the task, so it is the same for
every task planned with the same registry (and can be cached by the provider): the rules,
the wire format (:mod:`plandag.planner.wire`), the reference grammar
(:mod:`plandag.dag.references`), every tool's name, effects, result type, description and
JSON schema (compact: no ``title`` annotations, no spaces), every check kind's, one good
example plan and one bad one with the diagnostics ``plandag check`` gives for it. The user
message holds the task, the trusted context and the params given at run time. A plan that
does not compile goes back with :func:`repair_message`: the full diagnostics list, formatted
like ``plandag check``, as quoted data (:func:`plandag.planner.data.quote_data`).

Every text here is deterministic: the same registry, task and context give the same bytes
(tools and checks are listed by name).

The bad example's reasons are the compiler's own words: ``tests/planner/test_prompt.py``
compiles :data:`BAD_EXAMPLE` against the default registry and checks that the diagnostics
are exactly :data:`BAD_EXAMPLE_REASONS`, so the prompt cannot drift from the compiler.
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
from plandag.planner.data import DATA_BLOCK_RULE, quote_data
from plandag.tools.registry import Registry

__all__ = [
    "BAD_EXAMPLE",
    "BAD_EXAMPLE_REASONS",
    "BAD_EXAMPLE_TASK",
    "GOOD_EXAMPLE",
    "GOOD_EXAMPLE_TASK",
    "REFERENCE_GRAMMAR",
    "WIRE_FORMAT_GUIDE",
    "compact_schema",
    "describe_result_type",
    "format_diagnostics",
    "repair_message",
    "system_prompt",
    "user_prompt",
]

ROLE = (
    "You are the planner of plandag. For a task, you write the whole plan before anything "
    "runs: a DAG of tool calls that plandag compiles like code (unknown tools, bad "
    "arguments, bad references, missing dependencies and cycles are rejected) and then runs, "
    "every step whose inputs are ready at once. You do not run tools; you answer with one "
    "plan."
)

RULES = """\
Rules:
- Use only the tools listed below, with arguments that fit their schemas.
- Steps that do not need each other's results must not depend on each other: they run at \
the same time. Use as few steps as the task needs.
- A step may use another step's result only through a reference, and lists that step in "d".
- Add checks (the check kinds below) wherever a result can be verified in code: a check is \
a fact evaluated on the result, and a failed check fails the step.
- When the task's result can be assembled from step results, write it in "o": it is built \
by code, with no further model call. Leave "o" out only when the task asks for a written \
answer that needs judgement over the results.
- Use tools with effects (write, irreversible) only when the task asks for that effect.
- Keep "n" (a step's note) to a few words, or leave it out: output is slow."""

WIRE_FORMAT_GUIDE = """\
Answer format (the wire format: one JSON object, short keys):
{"g": goal, "p": [params], "s": [steps], "o": output}
- "g": the goal in one sentence.
- "p" (optional): params given at run time: {"n": name, "t": type, "h": description, \
"v": default as JSON text, "r": required}; "n" and "t" required; t is one of string, \
integer, number, boolean, object, array, any.
- "s": the steps: {"i": id, "t": tool, "a": [assignments], "d": [ids it depends on], \
"c": [checks], "n": note}; "c" and "n" optional. Ids are positive integers, unique.
- An assignment sets one argument: "NAME=TEXT" sets NAME to the string TEXT, the rest of \
the string as is (no JSON inside); "NAME:=JSON" sets NAME to a JSON value ("max_bytes:=1000", \
"all:=true", "paths:={\\"total\\":\\"//nfe:vNF\\"}"). Write [] for no arguments.
- A check is {"k": kind, "a": [assignments of its fields]}; "a" optional.
- "o" (optional): the output, as JSON text ("\\"<step_2_result>\\"" or \
"{\\"total\\":\\"<step_2_result.total>\\"}")."""

REFERENCE_GRAMMAR = """\
References (in any argument, check field or the output, at any depth):
- <step_N_result> is the whole result of step N; <step_N_result.key.0.field> is a field \
of it (dotted keys, list indices as numbers).
- <param.NAME> is the param NAME, declared in "p".
- A string that is exactly one reference receives the referenced value with its type (a \
list stays a list, a number a number); a reference inside a longer string is replaced by \
its text (JSON for values that are not strings).
- Nothing else is a reference: "$1", "${1}" or "{step_1}" stay literal text. A misspelled \
reference (<step_1_output>, <step_x_result>) is an error."""

GOOD_EXAMPLE_TASK = "Total the paid and the refunded orders of a JSON file into out/summary.json."

GOOD_EXAMPLE = (
    '{"g":"Total paid and refunded orders into out/summary.json",'
    '"p":[{"n":"input","t":"string","h":"path of the orders JSON file"}],'
    '"s":[{"i":1,"t":"read_file","a":["path=<param.input>"],"d":[]},'
    '{"i":2,"t":"json_select","a":["data=<step_1_result>",'
    '"expr=sum(orders[?status==\'paid\'].amount)"],"d":[1],'
    '"c":[{"k":"jmespath","a":["expr=@ >= `0`"]}]},'
    '{"i":3,"t":"json_select","a":["data=<step_1_result>",'
    '"expr=sum(orders[?status==\'refunded\'].amount)"],"d":[1]},'
    '{"i":4,"t":"write_json","a":["path=out/summary.json",'
    '"data:={\\"paid\\":\\"<step_2_result>\\",\\"refunded\\":\\"<step_3_result>\\"}"],'
    '"d":[2,3],"c":[{"k":"file_exists","a":["path=out/summary.json"]}]}],'
    '"o":"{\\"paid\\":\\"<step_2_result>\\",\\"refunded\\":\\"<step_3_result>\\"}"}'
)
"""A plan that compiles against the default registry (tested): steps 2 and 3 run at once."""

BAD_EXAMPLE_TASK = "Total the paid orders of orders.json into out/sum.json."

BAD_EXAMPLE = (
    '{"g":"Total the paid orders",'
    '"s":[{"i":1,"t":"read_files","a":["path=orders.json"],"d":[]},'
    '{"i":2,"t":"json_select","a":["data=<step_1_output>"],"d":[1]},'
    '{"i":3,"t":"write_json","a":["path=out/sum.json","data=<step_2_result>"],"d":[2,5]}],'
    '"o":"\\"<param.total>\\""}'
)
"""A plan with five mistakes; :data:`BAD_EXAMPLE_REASONS` are the compiler's diagnostics."""

BAD_EXAMPLE_REASONS = (
    "plan.json: step 1: error[unknown_tool]: tool 'read_files' is not registered "
    "(hint: did you mean read_file, write_json?)",
    "plan.json: step 2: error[invalid_args]: args.expr: Field required (tool json_select) "
    "(hint: arguments of json_select: data, expr)",
    "plan.json: step 2: error[malformed_reference]: args.data: '<step_1_output>' is not a "
    "valid reference (hint: write <step_1_result>; references are <step_N_result>, "
    "<step_N_result.field.0> or <param.NAME>)",
    "plan.json: step 3: error[unknown_dependency]: depends_on names step 5, which does not "
    "exist (hint: existing steps: 1, 2, 3)",
    "plan.json: plan: error[unknown_param]: output: <param.total> names an undeclared param "
    '(hint: declare it under "params")',
    "plan.json: 5 error(s); the plan does not compile",
)
"""``plandag check`` on :data:`BAD_EXAMPLE` (default registry), line by line; kept equal to
the compiler's output by ``tests/planner/test_prompt.py``."""


# -- tools and checks ------------------------------------------------------------------------


def compact_schema(schema: Any) -> Any:
    """``schema`` without its ``title`` annotations (pydantic repeats every field's name).

    A property *named* ``title`` is kept: only the annotation keyword goes.

    Args:
        schema: a JSON schema (dicts, lists, scalars).

    Returns:
        A new schema; the input is not changed.
    """
    if isinstance(schema, list):
        return [compact_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in ("properties", "$defs", "definitions", "patternProperties") and isinstance(
            value, dict
        ):
            result[key] = {name: compact_schema(item) for name, item in value.items()}
        else:
            result[key] = compact_schema(value)
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


def _tool_lines(registry: Registry) -> list[str]:
    lines = []
    for name in sorted(registry.tools):
        item = registry.tools[name]
        lines.append(
            f"- {name} (effects: {item.effects}; returns {describe_result_type(item.result_type)})"
            f": {item.description}"
        )
        lines.append(f"  args schema: {_compact_json(compact_schema(item.json_schema()))}")
    return lines


def _check_lines(registry: Registry) -> list[str]:
    lines = []
    for name in sorted(registry.checks):
        definition = registry.checks[name]
        lines.append(f"- {name}: {definition.description}")
        schema = compact_schema(definition.args_model.model_json_schema())
        if schema.get("properties"):
            lines.append(f"  fields schema: {_compact_json(schema)}")
    return lines


# -- the messages ----------------------------------------------------------------------------


def system_prompt(registry: Registry) -> str:
    """The planner's system prompt for the tools and checks of ``registry``.

    Args:
        registry: the tools and check kinds the plan may use (every one is listed, by name).

    Returns:
        The text: role, rules, the data-block rule, the wire format, the reference grammar,
        the tools, the check kinds, the good example, the bad example with its reasons.
    """
    sections = [
        ROLE,
        RULES + "\n- " + DATA_BLOCK_RULE,
        WIRE_FORMAT_GUIDE,
        REFERENCE_GRAMMAR,
        "Tools:\n" + "\n".join(_tool_lines(registry)),
        'Check kinds (in a step\'s "c"):\n' + "\n".join(_check_lines(registry)),
        "A good plan (the examples use built-in tools; use only the tools listed above).\n"
        f"Task: {GOOD_EXAMPLE_TASK}\n{GOOD_EXAMPLE}",
        f"A bad plan, which does not compile.\nTask: {BAD_EXAMPLE_TASK}\n{BAD_EXAMPLE}\n"
        "plandag check reports:\n" + "\n".join(BAD_EXAMPLE_REASONS),
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
    parts.append("Answer with the plan in the wire format: one JSON object.")
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
