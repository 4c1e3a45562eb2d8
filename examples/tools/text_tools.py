"""Example user tools: load with `plandag exec PLAN.json --tools examples/tools/text_tools.py`."""

import time

from plandag import ToolContext, tool
from plandag.tools import open_for_write


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
    """Append one line to a file, creating missing folders; returns the new size in bytes.

    The file is opened through the run's write boundary (``open_for_write``), which checks
    the folder it actually reached: a folder swapped for a link while the step runs cannot
    send the line outside the boundary.
    """
    with open_for_write(ctx.write_boundary, path, append=True, step_id=ctx.step_id) as handle:
        handle.write(f"{line}\t{ctx.idempotency_key}\n".encode())
        handle.flush()
        return handle.tell()
