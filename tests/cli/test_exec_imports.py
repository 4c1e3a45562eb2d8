"""``plandag exec`` of a plan that calls no model, no URL and no escalation hook, off a
terminal, imports none of what only those need: httpx, rich's progress bar, psutil, the
OpenTelemetry conventions, the model clients.
Checked through ``sys.modules`` in a fresh interpreter (deterministic), not by timing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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
_TOOLS = '''
import json, sys
from pathlib import Path

from plandag.tools import tool


@tool
def modules_so_far(text: str) -> str:
    """Write the modules imported so far to MODULES.json (once), return ``text``."""
    seen = Path("MODULES.json")
    if not seen.exists():
        seen.write_text(json.dumps(sorted(sys.modules)), encoding="utf-8")
    return text
'''
NOT_NEEDED = (
    "httpx",
    "rich.progress",
    "psutil",
    "opentelemetry.semconv",
    "plandag.models",
    "plandag.trace.otel",
)


def test_exec_without_model_url_or_hook_imports_none_of_them(tmp_path: Path) -> None:
    plan = {
        "version": 1,
        "goal": "note twice",
        "steps": [
            {"id": 1, "tool": "modules_so_far", "args": {"text": "one"}},
            {"id": 2, "tool": "modules_so_far", "args": {"text": "two"}, "depends_on": [1]},
        ],
        "output": "<step_2_result>",
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    (tmp_path / "probe_tools.py").write_text(_TOOLS, encoding="utf-8")
    environment = {
        name: value for name, value in os.environ.items() if not name.startswith("OTEL_")
    }
    environment["PLANDAG_STORE"] = str(tmp_path / "runs.sqlite3")
    arguments = ["exec", "plan.json", "--tools", "probe_tools.py", "--json"]
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
    before = set(json.loads((tmp_path / "MODULES.json").read_text(encoding="utf-8")))
    assert "plandag.runs.segments" in before
    assert [name for name in NOT_NEEDED if name in before] == []
    modules = set(json.loads(done.stderr.strip().splitlines()[-1]))
    assert [name for name in NOT_NEEDED if name in modules] == []
