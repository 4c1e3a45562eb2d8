"""Cost and time of a run that reuses a plan from the plan library against the first run
of its task type (README, "The plan library"), side by side in one process.

An invoice total (read an NF-e file, select ``vNF``, check it is there) is planned once by
the local Messages API server playing the LLMCompiler paper's planner speed (time to first
token 0.5 s, 50 output tokens per second; input tokens are the server's estimate of the real
prompt, characters / 4, priced as claude-sonnet-4-6 and claude-haiku-4-5), then run again on
two other invoices: once with ``task_type`` (no model call), once routed (one call to the
executor model). Prints one JSON line per run: requests the server received, model calls,
US dollars on models, seconds. Run: ``.venv/bin/python benchmarks/library_reuse.py
[--ttft SECONDS] [--tokens-per-second N]`` (the server's speed; 0.5 and 50 by default).
"""

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from plandag.library import PlanLibrary
from plandag.models import AnthropicClient
from plandag.planner.agent import Agent, AgentResult
from plandag.scheduler import RunLimits
from plandag.store import open_store
from plandag.testing import MessagesServer
from plandag.tools.registry import default_registry

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "nfe"
INVOICES = [
    EXAMPLES / "nfelib_35180834128745000152550010000476121675985748-nfe.xml",
    EXAMPLES / "nfelib_42210775277525000178550030000266631762885493-procNFe.xml",
    EXAMPLES / "uninfe_000040_03682759000190_002_20_10_2014-procNFe.xml",
]
PLAN = {
    "g": "Total of an NF-e invoice",
    "p": [{"n": "input", "t": "string", "h": "path of the NF-e XML file"}],
    "s": [
        {"i": 1, "t": "read_file", "a": {"path": "<param.input>"}, "d": []},
        {
            "i": 2,
            "t": "xml_select",
            "a": {"xml": "<step_1_result>", "paths": {"total": "//nfe:vNF"}},
            "d": [1],
            "c": [{"k": "jmespath", "a": {"expr": "total != `null`"}}],
        },
    ],
    "o": {"json": '{"total":"<step_2_result.total>"}'},
}


def figures(label: str, result: AgentResult, requests: int, seconds: float) -> dict[str, Any]:
    calls = [*result.llm_calls, *result.routing_calls]
    return {
        "run": label,
        "status": result.status,
        "answer": result.answer,
        "requests": requests,
        "model_calls": len(calls),
        # every prompt token: billed at the input price, written to or read from the cache
        "input_tokens": sum(
            call.usage.input_tokens
            + call.usage.cache_creation_input_tokens
            + call.usage.cache_read_input_tokens
            for call in calls
        ),
        "cache_write_tokens": sum(call.usage.cache_creation_input_tokens for call in calls),
        "cache_read_tokens": sum(call.usage.cache_read_input_tokens for call in calls),
        "output_tokens": sum(call.output_tokens for call in calls),
        "usd_on_models": round(sum(call.cost_usd for call in calls), 6),
        "seconds": round(seconds, 3),
    }


async def measure(ttft: float = 0.5, tokens_per_second: float = 50.0) -> None:
    """Plan once, reuse twice against the server at this speed; print a JSON line per run."""
    with (
        tempfile.TemporaryDirectory() as folder,
        MessagesServer(ttft=ttft, tokens_per_second=tokens_per_second) as server,
    ):
        store = open_store(Path(folder) / "runs.sqlite3")
        client = AnthropicClient(api_key="local", base_url=server.url)
        agent = Agent(
            client,
            "claude-sonnet-4-6",
            default_registry(),
            limits=RunLimits(heartbeat_every=None),
            read_only=True,
            library=PlanLibrary(store),
        )
        server.push_json(PLAN)
        server.push_json(  # the routing call's answer (plandag.library.routing)
            {
                "route": {
                    "task_type": "invoice_total",
                    "new": False,
                    "params": {"input": str(INVOICES[2])},
                }
            }
        )
        runs = (
            ("first (planned)", f"Total of {INVOICES[0].name}", INVOICES[0], "invoice_total"),
            ("reused (--task-type)", f"Total of {INVOICES[1].name}", INVOICES[1], "invoice_total"),
            ("reused (routed)", f"What is the total of {INVOICES[2].name}?", None, None),
        )
        try:
            for label, task, invoice, task_type in runs:
                server.clear_requests()
                params = {"input": str(invoice)} if invoice is not None else None
                started = time.perf_counter()
                result = await agent.run(task, params=params, task_type=task_type)
                seconds = time.perf_counter() - started
                print(json.dumps(figures(label, result, len(server.requests), seconds)))
        finally:
            await client.aclose()
            store.close()


def main(argv: list[str] | None = None) -> None:
    """Parse the server's speed, measure, print."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--ttft", type=float, default=0.5, help="seconds to the first token")
    parser.add_argument("--tokens-per-second", type=float, default=50.0, help="output speed")
    options = parser.parse_args(argv)
    anyio.run(measure, options.ttft, options.tokens_per_second)


if __name__ == "__main__":
    main()
