"""``plandag exec`` of a plan that calls no model, no URL and no escalation hook, off a
terminal, imports none of what only those need before (or after) its steps run: httpx,
rich's progress bar, psutil, the OpenTelemetry conventions. Checked through ``sys.modules``
in a fresh interpreter (deterministic), not by timing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "examples" / "tools" / "text_tools.py"
_PROBE = """
import json, sys
sys.argv = ["plandag", *json.loads(sys.argv[1])]
import plandag.cli
try:
    plandag.cli.main()
except SystemExit as stop:
    assert stop.code in (0, None), stop.code
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""
NOT_NEEDED = ("httpx", "rich.progress", "psutil", "opentelemetry.semconv")


def test_exec_without_model_url_or_hook_imports_none_of_them(tmp_path: Path) -> None:
    plan = {
        "version": 1,
        "goal": "count words",
        "steps": [
            {"id": 1, "tool": "word_count", "args": {"text": "one two three"}},
            {"id": 2, "tool": "word_count", "args": {"text": "four"}, "depends_on": [1]},
        ],
        "output": "<step_2_result>",
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    environment = {
        name: value for name, value in os.environ.items() if not name.startswith("OTEL_")
    }
    environment["PLANDAG_STORE"] = str(tmp_path / "runs.sqlite3")
    arguments = ["exec", "plan.json", "--tools", str(TOOLS), "--json"]
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(arguments)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=tmp_path,
        env=environment,
    )
    assert json.loads(done.stdout)["status"] == "succeeded"
    modules = set(json.loads(done.stderr.strip().splitlines()[-1]))
    assert "plandag.runs.segments" in modules
    assert [name for name in NOT_NEEDED if name in modules] == []
