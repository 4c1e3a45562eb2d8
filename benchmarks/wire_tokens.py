"""Output tokens per step: the encodings a model could write a plan in.

Run: ``python benchmarks/wire_tokens.py``. For each plan it prints the tokens a model would
write for it as:

* **verbose**: the Plan JSON (ARCHITECTURE.md, "The plan artifact"), compact separators,
  only the fields the plan sets, without ``version`` (a constant, not per step);
* **assign**: the wire format before the typed schema: one-letter keys, a step's arguments
  as ``NAME=TEXT`` / ``NAME:=JSON`` assignment strings, the output as JSON text;
* **typed-long**: the typed wire format (each tool's own argument object, JSON text only for
  what no strict schema can express) with the Plan JSON's key names;
* **typed**: the typed wire format as sent (:mod:`plandag.planner.wire`: one-letter keys).

The typed forms are written for the registry the plan runs with (``to_wire(plan,
registry)``), so an argument typed ``Any`` or a free-form map travels as
``{"json": "<JSON text>"}``, as the schema asks.

Tokens are estimated as ``ceil(characters / 4)`` (:func:`plandag.testing.estimate_tokens`,
the rule the local Messages API server reports): no real tokenizer is a dependency, so the
figures are an approximation. Escaped quotes (``\\"``) count two characters here; BPE
tokenizers often merge them.

The plans: the stored NF-e plan, the two example plans, an 8-way fan-out (eight HTTP
fetches and a join, the shape of LLMCompiler's Movie Recommendation benchmark) and a
depth-3 arithmetic DAG (four additions, two products, one sum).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from plandag.compiler import load_plan  # noqa: E402
from plandag.dag.plan import Plan  # noqa: E402
from plandag.planner.wire import dumps_wire, to_wire  # noqa: E402
from plandag.testing import estimate_tokens  # noqa: E402
from plandag.tools import tool  # noqa: E402
from plandag.tools.registry import Registry, default_registry  # noqa: E402

__all__ = ["arithmetic_plan", "assignment_text", "fan_out_plan", "main", "measure", "plans"]

_LONG_KEYS = {
    "g": "goal",
    "p": "params",
    "s": "steps",
    "o": "output",
    "i": "id",
    "t": "tool",
    "a": "args",
    "d": "depends_on",
    "c": "check",
    "n": "description",
    "k": "kind",
}


@tool
def add(a: float, b: float) -> float:
    "Add two numbers."
    return a + b


@tool
def multiply(a: float, b: float) -> float:
    "Multiply two numbers."
    return a * b


def registry() -> Registry:
    """The tools the measured plans call: the built-ins, NF-e's, the example tools file's
    and two arithmetic tools."""
    found = default_registry(["nfe"], resolve_installed=False)
    found.load_file(ROOT / "examples/tools/text_tools.py")
    found.add_tool(add)
    found.add_tool(multiply)
    return found


def fan_out_plan(width: int = 8) -> Plan:
    """``width`` HTTP fetches of movie pages at once, then one step joining their ratings."""
    steps: list[dict[str, Any]] = [
        {
            "id": index,
            "tool": "http_get",
            "args": {"url": f"https://movies.example.com/api/title/{1000 + index}"},
            "depends_on": [],
            "check": [{"kind": "equals", "path": "status", "value": 200}],
        }
        for index in range(1, width + 1)
    ]
    ratings = {
        f"movie_{index}": f"<step_{index}_result.json.rating>" for index in range(1, width + 1)
    }
    steps.append(
        {
            "id": width + 1,
            "tool": "write_json",
            "args": {"path": "out/ratings.json", "data": ratings},
            "depends_on": list(range(1, width + 1)),
            "check": [{"kind": "file_exists", "path": "out/ratings.json"}],
        }
    )
    return Plan.model_validate(
        {
            "goal": "Fetch the ratings of eight movies and write them to out/ratings.json",
            "steps": steps,
            "output": ratings,
        }
    )


def arithmetic_plan() -> Plan:
    """((1 + 2) * (3 + 4)) + ((5 + 6) * (7 + 8)): a DAG of depth 3, seven steps."""
    return Plan.model_validate(
        {
            "goal": "((1 + 2) * (3 + 4)) + ((5 + 6) * (7 + 8))",
            "steps": [
                {"id": 1, "tool": "add", "args": {"a": 1, "b": 2}, "depends_on": []},
                {"id": 2, "tool": "add", "args": {"a": 3, "b": 4}, "depends_on": []},
                {"id": 3, "tool": "add", "args": {"a": 5, "b": 6}, "depends_on": []},
                {"id": 4, "tool": "add", "args": {"a": 7, "b": 8}, "depends_on": []},
                {
                    "id": 5,
                    "tool": "multiply",
                    "args": {"a": "<step_1_result>", "b": "<step_2_result>"},
                    "depends_on": [1, 2],
                },
                {
                    "id": 6,
                    "tool": "multiply",
                    "args": {"a": "<step_3_result>", "b": "<step_4_result>"},
                    "depends_on": [3, 4],
                },
                {
                    "id": 7,
                    "tool": "add",
                    "args": {"a": "<step_5_result>", "b": "<step_6_result>"},
                    "depends_on": [5, 6],
                    "check": [{"kind": "equals", "value": 186}],
                },
            ],
            "output": "<step_7_result>",
        }
    )


def plans() -> list[tuple[str, Plan]]:
    """The measured plans, by name."""
    stored = [
        ("nfe (stored)", ROOT / "plandag/extract/nfe/plan.json"),
        ("invoice_total", ROOT / "examples/plans/invoice_total.json"),
        ("words", ROOT / "examples/plans/words.json"),
    ]
    result = [(name, load_plan(path.read_text(encoding="utf-8"))) for name, path in stored]
    result.append(("fan-out x8", fan_out_plan()))
    result.append(("arithmetic depth 3", arithmetic_plan()))
    return result


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _verbose_text(plan: Plan) -> str:
    document = plan.model_dump(mode="json", exclude_unset=True)
    document.pop("version", None)
    return _compact(document)


def assignment_text(plan: Plan) -> str:
    """``plan`` in the wire format of assignments: one-letter keys, arguments as
    ``NAME=TEXT`` (a string) or ``NAME:=JSON`` (any other value), the output as JSON text."""

    def assignments(values: dict[str, Any]) -> list[str]:
        return [
            f"{name}={value}" if isinstance(value, str) else f"{name}:={_compact(value)}"
            for name, value in values.items()
        ]

    wire = to_wire(plan)
    for item, step in zip(wire["s"], plan.steps, strict=True):
        item["a"] = assignments(step.args)
        for check, spec in zip(item.get("c", []), step.check, strict=True):
            if spec.arguments:
                check["a"] = assignments(spec.arguments)
    for param in wire.get("p", []):
        if "v" in param:
            param["v"] = _compact(plan.params[param["n"]].default)
    if plan.output is not None:
        wire["o"] = _compact(plan.output)
    return _compact(wire)


def _long_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {_LONG_KEYS.get(key, key): value[key] for key in value}
    return value


def typed_long_text(plan: Plan, tools: Registry) -> str:
    """The typed wire form of ``plan`` with the Plan JSON's key names."""
    wire = _long_keys(to_wire(plan, tools))
    wire["params"] = [_long_keys(item) for item in wire.get("params", [])]
    wire["steps"] = [
        {**_long_keys(item), "check": [_long_keys(c) for c in item.get("c", [])]}
        if "c" in item
        else _long_keys(item)
        for item in wire["steps"]
    ]
    return _compact(wire)


def measure(plan: Plan, tools: Registry | None = None) -> dict[str, int]:
    """Estimated output tokens of ``plan`` in each encoding: verbose, assign, typed_long,
    typed."""
    tools = tools if tools is not None else registry()
    return {
        "verbose": estimate_tokens(_verbose_text(plan)),
        "assign": estimate_tokens(assignment_text(plan)),
        "typed_long": estimate_tokens(typed_long_text(plan, tools)),
        "typed": estimate_tokens(dumps_wire(plan, tools)),
    }


def main() -> None:
    """Print the table."""
    columns = ("verbose", "assign", "typed_long", "typed")
    header = (
        f"{'plan':<20} {'steps':>5} "
        + " ".join(f"{name:>10}" for name in columns)
        + f" {'typed/step':>10} {'typed/verbose':>13} {'typed/assign':>12}"
    )
    print(header)
    print("-" * len(header))
    tools = registry()
    totals = dict.fromkeys(("steps", *columns), 0)
    rows = [(name, len(plan.steps), measure(plan, tools)) for name, plan in plans()]
    for _, steps, figures in rows:
        totals["steps"] += steps
        for key, value in figures.items():
            totals[key] += value
    for name, steps, figures in [*rows, ("all", totals["steps"], totals)]:
        print(
            f"{name:<20} {steps:>5} "
            + " ".join(f"{figures[key]:>10}" for key in columns)
            + f" {figures['typed'] / steps:>10.1f}"
            f" {figures['typed'] / figures['verbose']:>13.2f}"
            f" {figures['typed'] / figures['assign']:>12.2f}"
        )
    print("tokens: ceil(characters / 4), an estimate (no tokenizer is a dependency)")


if __name__ == "__main__":
    main()
