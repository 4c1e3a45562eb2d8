"""Plan validity against a model that follows the schema and nothing else.

Run: ``python benchmarks/plan_validity.py [--answers 100] [--seed 7] [--json]``.

For each provider (the Anthropic Messages API and an OpenAI-compatible server, each a
local server of :mod:`plandag.testing` driven through plandag's own client), a
:class:`~plandag.testing.SchemaFollower` answers every planning request with a random
instance of the JSON Schema the request carries, whatever the prompt says. The planner is
:class:`~plandag.planner.planner.Planner` with the registry ``plandag plan`` uses (the
built-in tools and checks), asked ``--answers`` times; each first answer is read and
compiled exactly as ``plandag plan`` does, and the table counts the answers that carry
each diagnostic code.

A code among ``invalid_json``, ``invalid_schema``, ``unknown_tool``, ``unknown_check``,
``invalid_args`` and ``invalid_check_args`` is split by the rule it reports:

* **schema rule**: a rule of the plan's format that a JSON Schema states: JSON itself, a
  field's type, a required field, an unknown field, an enum or ``const`` (a tool or check
  name), the wire format's own shapes, and a numeric bound when the schema sent carried
  bounds;
* **no schema rule**: a rule no JSON Schema states (a custom validator, a value that must be
  a valid expression, a name declared twice) or one the provider's schema left out
  (numeric bounds on Anthropic).

The target is no first answer with a *schema rule* code. Before the typed schema, the wire
format's own rules (``"NAME=TEXT"`` assignments, JSON text in a string) were schema rules
the schema sent did not state: that is what the table's first column shows.

Every other code (dangling or cyclic dependencies, duplicate ids, references to missing
steps, ``invalid_json_text``...) is a rule no schema states and is counted as it is. Such
answers go back to the model as diagnostics, as from any model.

The script runs against whatever ``plandag`` is importable, so the same file measured the
code before the typed schema (the wire format of ``NAME=TEXT`` assignments) with the
stand-in copied next to it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from plandag.brakes.clock import VirtualClock  # noqa: E402
from plandag.errors import PlanError  # noqa: E402
from plandag.models import AnthropicClient, OpenAICompatibleClient  # noqa: E402
from plandag.planner.planner import Planner, PlannerGaveUp  # noqa: E402
from plandag.testing import ChatCompletionsServer, MessagesServer  # noqa: E402
from plandag.testing.schema_model import SchemaFollower  # noqa: E402
from plandag.tools.registry import default_registry  # noqa: E402

__all__ = ["PROVIDERS", "TARGET_CODES", "classify", "main", "measure"]

PROVIDERS = ("anthropic", "openai")
TARGET_CODES = (
    "invalid_json",
    "invalid_schema",
    "unknown_tool",
    "unknown_check",
    "invalid_args",
    "invalid_check_args",
)
"""The codes no first answer may carry for a rule the schema as sent states."""

TASK = "Read notes.txt, count its words and write the count to out/count.json."
_STATED = re.compile(
    r"Field required|Extra inputs are not permitted|Input should be a valid|"
    r"Input should be '|Input should be None|Input should be (?:an?|the) |"
    r"unknown field|must be |is missing|is not JSON|is not a param type|"
    r"is not registered|is not an assignment|after ':=' is not JSON|holds \"kind\""
)
_BOUND = re.compile(r"greater than|less than|at least|at most|multiple of")


SCHEMA_RULE = "(schema rule)"
NO_SCHEMA_RULE = "(no schema rule)"


def classify(code: str, message: str, bounds_sent: bool) -> str:
    """:data:`SCHEMA_RULE` or :data:`NO_SCHEMA_RULE` for a diagnostic of a target code (the
    module docstring).

    Args:
        code: the diagnostic code.
        message: its message.
        bounds_sent: the schema sent carried numeric bounds.

    Returns:
        The label.
    """
    if code in ("invalid_json", "unknown_tool", "unknown_check"):
        return SCHEMA_RULE
    if _BOUND.search(message):
        return SCHEMA_RULE if bounds_sent else NO_SCHEMA_RULE
    if "declared twice" in message or "assigned twice" in message:
        return NO_SCHEMA_RULE
    return SCHEMA_RULE if _STATED.search(message) else NO_SCHEMA_RULE


def _client(provider: str, url: str) -> Any:
    if provider == "anthropic":
        return AnthropicClient(api_key="test", base_url=url)
    return OpenAICompatibleClient(url + "/v1", api_key="test")


async def _provider(provider: str, answers: int, seed: int) -> dict[str, Any]:
    follower = SchemaFollower(seed)
    kind = MessagesServer if provider == "anthropic" else ChatCompletionsServer
    counts: collections.Counter[str] = collections.Counter()
    compiled = truncated = 0
    with kind(default=follower) as server:
        client = _client(provider, server.url)
        registry = default_registry(resolve_installed=False)
        try:
            for _ in range(answers):
                planner = Planner(client, "stand-in", registry, clock=VirtualClock(), max_repairs=0)
                try:
                    await planner.plan(TASK)
                    compiled += 1
                    continue
                except PlannerGaveUp as error:
                    diagnostics = error.attempts[0].diagnostics
                except PlanError as error:
                    diagnostics = tuple(error.diagnostics)
                except Exception as error:  # a cut answer or a refused call
                    counts[f"(call failed: {type(error).__name__})"] += 1
                    truncated += 1
                    continue
                sent = server.message_requests[-1].json
                bounds_sent = '"minimum"' in json.dumps(sent)
                seen: set[str] = set()
                for diagnostic in diagnostics:
                    if diagnostic.severity != "error":
                        continue
                    label = diagnostic.code
                    if label in TARGET_CODES:
                        label += " " + classify(label, diagnostic.message, bounds_sent)
                    seen.add(label)
                counts.update(seen)
        finally:
            await client.aclose()
    return {"answers": answers, "compiled": compiled, "failed_calls": truncated, "codes": counts}


def measure(answers: int = 100, seed: int = 7) -> dict[str, dict[str, Any]]:
    """First answers of the schema-following stand-in, by provider.

    Args:
        answers: plans asked of each provider (>= 1).
        seed: the stand-in's seed.

    Returns:
        ``{provider: {"answers", "compiled", "failed_calls", "codes": Counter}}``: the
        number of first answers that carry each code (the target codes labelled with
        :func:`classify`).
    """
    return {provider: asyncio.run(_provider(provider, answers, seed)) for provider in PROVIDERS}


def table(results: dict[str, dict[str, Any]]) -> str:
    """The results as a markdown table: one row per code, one column per provider."""
    labels = sorted({label for result in results.values() for label in result["codes"]})
    header = "| code (first answers carrying it) | " + " | ".join(results) + " |"
    lines = [header, "|---|" + "---|" * len(results)]
    for label in labels:
        cells = [str(result["codes"].get(label, 0)) for result in results.values()]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for name in ("compiled", "failed_calls", "answers"):
        cells = [str(result[name]) for result in results.values()]
        lines.append(f"| ({name}) | " + " | ".join(cells) + " |")
    stated = [
        sum(count for label, count in result["codes"].items() if label.endswith(SCHEMA_RULE))
        for result in results.values()
    ]
    lines.append(
        "| **answers with a target code for a schema rule** | "
        + " | ".join(str(number) for number in stated)
        + " |"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the table (or JSON with ``--json``); exit 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=100, help="plans asked of each provider")
    parser.add_argument("--seed", type=int, default=7, help="the stand-in's seed")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    if args.answers < 1:
        parser.error("--answers must be >= 1")
    results = measure(args.answers, args.seed)
    if args.json:
        print(json.dumps({name: {**r, "codes": dict(r["codes"])} for name, r in results.items()}))
    else:
        print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
