"""Time to first tool with and without ``--stream``, side by side in one run.

An 8-way fan-out plan (eight 0.5 s searches feeding one comparison) is played by the local
Messages API server at the LLMCompiler paper's planner speed (time to first token 0.5 s,
50 output tokens per second; token counts are the server's estimate, characters / 4).
Prints one JSON line per mode: plan call seconds, time to first tool start, whole run,
output tokens per step. Run: ``.venv/bin/python benchmarks/time_to_first_tool.py``.
"""

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


@tool
async def search(query: str) -> dict[str, Any]:
    """Search an encyclopedia for a movie; returns its genres."""
    await anyio.sleep(0.5)
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


async def once(stream: bool) -> dict[str, Any]:
    with MessagesServer(ttft=0.5, tokens_per_second=50.0) as server:
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


if __name__ == "__main__":
    for stream in (False, True):
        print(json.dumps(anyio.run(once, stream)))
