"""Tokens per contract of ``plandag extract contracts``, measured on the scripted server.

The shipped contracts (``examples/contracts``: three CUAD v1 contracts and a Portuguese
template) are extracted with the 41 CUAD fields at the default chunk size, against the local
Messages API server playing :class:`plandag.jobs.contracts.scripted.ScriptedContracts`
(replies that quote each contract's CUAD-labelled clauses). Tokens are the server's
estimates (characters / 4: system prompt and messages in, the reply out), counted per
contract; a real model's tokenizer and replies differ, so these are estimates. Dollars at
Claude Haiku 4.5's price ($1 / $5 per million input / output tokens).

Run: ``.venv/bin/python benchmarks/contracts_tokens.py [--contracts N]`` (``N``: the first N
of the four, all by default); prints one JSON line per contract, then the totals.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import anyio

from plandag.brakes.budget import Budget
from plandag.executors import ModelAccess
from plandag.jobs.contracts.batch import expand_contract_inputs, extract_contracts
from plandag.jobs.contracts.scripted import ScriptedContracts
from plandag.models import AnthropicClient
from plandag.scheduler import RunLimits
from plandag.testing import MessagesServer

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "contracts"


async def measure(contracts: int | None = None) -> dict[str, dict[str, int]]:
    """Extract the first ``contracts`` shipped contracts (None: all four) against the
    scripted server; return the server's token counts per contract."""
    scripted = ScriptedContracts(EXAMPLES / "cuad_labels.jsonl")
    inputs = [*sorted(EXAMPLES.glob("cuad_*.txt")), EXAMPLES / "apsantos_modelo-de-contrato.md"]
    inputs = inputs[:contracts]
    with MessagesServer(default=scripted) as server, tempfile.TemporaryDirectory() as folder:
        client = AnthropicClient(api_key="local", base_url=server.url)
        try:
            files, missing = expand_contract_inputs([str(path) for path in inputs])
            summary = await extract_contracts(
                files,
                Path(folder) / "contracts.jsonl",
                missing=missing,
                run_options={
                    "models": ModelAccess(client, "claude-haiku-4-5"),
                    "budget": Budget(20.0, 5_000_000),
                    "limits": RunLimits.lifted(),
                },
            )
        finally:
            await client.aclose()
    assert summary.by_status.get("error", 0) == 0, summary
    return scripted.usage


def main(argv: list[str] | None = None) -> None:
    """Parse ``--contracts``, measure, print the JSON lines."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--contracts", type=int, help="the first N contracts only")
    options = parser.parse_args(argv)
    usage = anyio.run(measure, options.contracts)
    totals = {"calls": 0, "input_tokens": 0, "output_tokens": 0}
    for name, counts in sorted(usage.items()):
        shown = "apsantos_modelo-de-contrato.md (no labels)" if name == "(unlabelled)" else name
        print(json.dumps({"contract": shown, **counts}))
        for key in totals:
            totals[key] += counts[key]
    usd = totals["input_tokens"] / 1e6 * 1.0 + totals["output_tokens"] / 1e6 * 5.0
    print(json.dumps({"total": totals, "contracts": len(usage), "usd_at_haiku_4_5": round(usd, 4)}))


if __name__ == "__main__":
    main()
