"""Output tokens per step: the verbose Plan JSON against the wire format
(:mod:`plandag.planner.wire`).

Run: ``python benchmarks/wire_tokens.py``. For each plan it prints the tokens a model would
write for it as:

* **verbose**: the Plan JSON (ARCHITECTURE.md, "The plan artifact"), compact separators,
  only the fields the plan sets, without ``version`` (a constant, not per step);
* **json-text**: the wire format with a step's args as one JSON text string (the plain way
  to fit free-form args into a structured-output schema, which refuses free-form objects);
* **wire**: the wire format as sent (:mod:`plandag.planner.wire`: one-letter keys, args as
  ``NAME=TEXT`` / ``NAME:=JSON`` assignments).

Tokens are estimated as ``ceil(characters / 4)`` (:func:`plandag.testing.estimate_tokens`,
the rule the local Messages API server reports): no real tokenizer is available offline,
so the figures are an approximation. Escaped quotes (``\\"``) count two characters here;
BPE tokenizers often merge them, so the json-text column is, if anything, pessimistic.

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

__all__ = ["arithmetic_plan", "fan_out_plan", "main", "measure", "plans"]


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


def _json_text_args(plan: Plan) -> str:
    wire = to_wire(plan)
    for item, step in zip(wire["s"], plan.steps, strict=True):
        item["a"] = _compact(step.args)
        for check, spec in zip(item.get("c", []), step.check, strict=True):
            if spec.arguments:
                check["a"] = _compact(spec.arguments)
    return _compact(wire)


def measure(plan: Plan) -> dict[str, int]:
    """Estimated output tokens of ``plan`` in each encoding: verbose, json_text, wire."""
    return {
        "verbose": estimate_tokens(_verbose_text(plan)),
        "json_text": estimate_tokens(_json_text_args(plan)),
        "wire": estimate_tokens(dumps_wire(plan)),
    }


def main() -> None:
    """Print the table."""
    header = (
        f"{'plan':<20} {'steps':>5} {'verbose':>8} {'json-text':>9} {'wire':>6} "
        f"{'verbose/step':>12} {'wire/step':>9} {'wire/verbose':>12}"
    )
    print(header)
    print("-" * len(header))
    totals = {"steps": 0, "verbose": 0, "json_text": 0, "wire": 0}
    for name, plan in plans():
        figures = measure(plan)
        steps = len(plan.steps)
        totals["steps"] += steps
        for key, value in figures.items():
            totals[key] += value
        print(
            f"{name:<20} {steps:>5} {figures['verbose']:>8} {figures['json_text']:>9} "
            f"{figures['wire']:>6} {figures['verbose'] / steps:>12.1f} "
            f"{figures['wire'] / steps:>9.1f} {figures['wire'] / figures['verbose']:>12.2f}"
        )
    steps = totals["steps"]
    print("-" * len(header))
    print(
        f"{'all':<20} {steps:>5} {totals['verbose']:>8} {totals['json_text']:>9} "
        f"{totals['wire']:>6} {totals['verbose'] / steps:>12.1f} "
        f"{totals['wire'] / steps:>9.1f} {totals['wire'] / totals['verbose']:>12.2f}"
    )
    print("tokens: ceil(characters / 4), an estimate (no offline tokenizer)")


if __name__ == "__main__":
    main()
