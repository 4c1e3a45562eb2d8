"""Example user tools: load with `plandag exec PLAN.json --tools examples/tools/text_tools.py`."""

import os
import time

from plandag import ToolContext, tool


@tool
def word_count(text: str) -> int:
    """Count the words of a text."""
    return len(text.split())


@tool(timeout=2.0)
def slow_upper(text: str, seconds: float = 0.1) -> str:
    """Upper-case a text after a blocking sleep (runs in a worker thread)."""
    time.sleep(seconds)
    return text.upper()


@tool(effects="write", writes="path", idempotent=False)
def append_line(path: str, line: str, ctx: ToolContext) -> int:
    """Append one line to a file; returns the new size in bytes."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(f"{line}\t{ctx.idempotency_key}\n")
        handle.flush()
        return handle.tell()
