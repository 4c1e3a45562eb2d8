"""A run whose plan calls no model imports neither the model-backed steps, nor psutil (the
run's owner is this process, whose start time the system gives directly on Linux), nor the
OpenTelemetry conventions when no span provider is configured. Checked through
``sys.modules`` in a fresh interpreter (deterministic), not by timing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from plandag.store import owner

_PROBE = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path

    import anyio

    from plandag.compiler import compile_plan
    from plandag.runs.options import RunOptions
    from plandag.runs.segments import start_run
    from plandag.runs.traces import trace_factory
    from plandag.store import open_store
    from plandag.tools import tool
    from plandag.tools.registry import Registry


    @tool
    def note(text: str) -> str:
        \"\"\"Return ``text``.\"\"\"
        return text


    registry = Registry()
    registry.add_tool(note)
    plan = {
        "goal": "two notes",
        "steps": [
            {"id": 1, "tool": "note", "args": {"text": "a"}},
            {"id": 2, "tool": "note", "args": {"text": "<step_1_result>"}},
        ],
        "output": "<step_2_result>",
    }
    store = open_store(Path(sys.argv[1]) / "runs.sqlite3")
    compiled = compile_plan(plan, registry)
    outcome = anyio.run(
        lambda: start_run(
            store, compiled, RunOptions(), command="exec", trace=trace_factory(store, False)
        )
    )
    assert outcome.status == "succeeded", outcome.status
    store.close()
    print(json.dumps(sorted(sys.modules)), file=sys.stderr)
    """
)

NOT_NEEDED = ("psutil", "opentelemetry.semconv", "opentelemetry.trace")


def test_a_run_without_model_steps_or_spans_imports_none_of_them(tmp_path: Path) -> None:
    environment = {
        name: value for name, value in os.environ.items() if not name.startswith("OTEL_")
    }
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=environment,
    )
    modules = set(json.loads(done.stderr.strip().splitlines()[-1]))
    assert "plandag.runs.segments" in modules
    assert [name for name in NOT_NEEDED if name in modules] == []
    assert sorted(name for name in modules if name.startswith("plandag.executors")) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_this_process_start_time_is_psutils_to_the_bit() -> None:
    import psutil

    assert owner.this_process_started() == psutil.Process(os.getpid()).create_time()
    assert owner.process_started(os.getpid()) == owner.this_process_started()
