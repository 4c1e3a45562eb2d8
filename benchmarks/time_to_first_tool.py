"""Time to first tool with and without ``--stream``, side by side in one run.

An 8-way fan-out plan (eight 0.5 s searches feeding one comparison) is played by the local
Messages API server at the LLMCompiler paper's planner speed (time to first token 0.5 s,
50 output tokens per second; token counts are the server's estimate, characters / 4).
Prints one JSON line per mode: plan call seconds, time to first tool start, whole run,
output tokens per step. Run: ``.venv/bin/python benchmarks/time_to_first_tool.py
[--ttft SECONDS] [--tokens-per-second N] [--search-seconds SECONDS]`` (0.5, 50 and 0.5 by
default).
"""

import argparse
import json
import time
from typing import Any

import anyio

from plandag.checks.builtins import BUILTIN_CHECKS
from plandag.models import AnthropicClient
from plandag.planner.agent import Agent
from plandag.scheduler import RunLimits
from plandag.testing import MessagesServer
from plandag.tools import tool
from plandag.tools.registry import Registry

#: seconds each search sleeps (``--search-seconds``)
SEARCH_SECONDS = {"value": 0.5}


@tool
async def search(query: str) -> dict[str, Any]:
    """Search an encyclopedia for a movie; returns its genres."""
    await anyio.sleep(SEARCH_SECONDS["value"])
    return {"query": query, "genres": ["drama"]}


@tool
def compare(items: list[Any]) -> str:
    """Pick the movie most like the others."""
    return items[0]["query"]


MOVIES = [
    "The Godfather",
    "Goodfellas",
    "Casino",
    "Heat",
    "Scarface",
    "Donnie Brasco",
    "The Departed",
    "Mean Streets",
]
steps = [{"i": i + 1, "t": "search", "a": {"query": m}, "d": []} for i, m in enumerate(MOVIES)]
steps.append(
    {
        "i": 9,
        "t": "compare",
        "a": {"items": [f"<step_{i}_result>" for i in range(1, 9)]},
        "d": list(range(1, 9)),
    }
)
PLAN = {"g": "Which movie is most similar to the others?", "s": steps, "o": "<step_9_result>"}


async def once(stream: bool, ttft: float = 0.5, tokens_per_second: float = 50.0) -> dict[str, Any]:
    """One run of the plan, streamed or not, against the server at this speed."""
    with MessagesServer(ttft=ttft, tokens_per_second=tokens_per_second) as server:
        server.push_json(PLAN)
        client = AnthropicClient(api_key="t", base_url=server.url)
        agent = Agent(
            client,
            "claude-sonnet-4-6",
            Registry([search, compare], BUILTIN_CHECKS),
            stream=stream,
            limits=RunLimits(heartbeat_every=None),
        )
        t = time.perf_counter()
        r = await agent.run("Which of these 8 movies is most similar to the others?")
        wall = time.perf_counter() - t
        await client.aclose()
        call = r.llm_calls[0]
        return {
            "stream": stream,
            "status": r.status,
            "answer": r.answer,
            "output_tokens": r.plan.attempts[-1].output_tokens,
            "steps": len(r.plan.plan.steps),
            "output_tokens_per_step": r.output_tokens_per_step,
            "plan_call_s": round(call.duration_s, 3),
            "ttft_s": call.ttft_s and round(call.ttft_s, 3),
            "first_tool_start_s": round(r.first_tool_start_s, 3),
            "run_s": round(wall, 3),
        }


def main(argv: list[str] | None = None) -> None:
    """Parse the speeds, run without and with ``--stream``, print a JSON line each."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--ttft", type=float, default=0.5, help="seconds to the first token")
    parser.add_argument("--tokens-per-second", type=float, default=50.0, help="output speed")
    parser.add_argument("--search-seconds", type=float, default=0.5, help="each search's sleep")
    options = parser.parse_args(argv)
    SEARCH_SECONDS["value"] = options.search_seconds
    for stream in (False, True):
        print(json.dumps(anyio.run(once, stream, options.ttft, options.tokens_per_second)))


if __name__ == "__main__":
    main()
