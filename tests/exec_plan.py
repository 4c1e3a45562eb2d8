"""Run a plan through ``plandag exec`` in the test's folder.

Tests of what a real run leaves behind (store rows, trace lines) write their tools and plan
to files and run them as a user would: :func:`exec_plan` does that and gives the run's id
and where its store is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from plandag.cli import app


def exec_plan(tmp_path: Path, plan: dict[str, Any], tools: str, *extra: str) -> tuple[str, Path]:
    """Write ``tools`` (a tools module's source) and ``plan`` (the plan's JSON) under
    ``tmp_path`` and run ``plandag exec PLAN --tools TOOLS --store STORE --json *extra``.

    Args:
        tmp_path: the test's folder (the store goes in ``tmp_path / "store"``).
        plan: the plan, as its JSON.
        tools: the source of the tools module.
        extra: more options for ``plandag exec``.

    Returns:
        The run's id and the store's path (its traces are in ``traces/`` beside it).

    Raises:
        AssertionError: the command did not exit 0 (its stderr is shown).
    """
    (tmp_path / "tools.py").write_text(tools, encoding="utf-8")
    (tmp_path / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    store_path = tmp_path / "store" / "runs.sqlite3"
    result = CliRunner().invoke(
        app,
        [
            "exec",
            str(tmp_path / "plan.json"),
            "--tools",
            str(tmp_path / "tools.py"),
            "--store",
            str(store_path),
            "--json",
            *extra,
        ],
    )
    assert result.exit_code == 0, result.stderr
    return str(json.loads(result.stdout)["run_id"]), store_path
