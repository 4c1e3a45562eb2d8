"""``plandag run --stream`` when the planner's stream breaks mid-plan and is retried: the
broken attempt is discarded whole, in the run store too (its step rows go; the retried
plan's steps are recorded as they ran)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from plandag.cli import app
from plandag.store import open_store
from plandag.testing import MessagesServer

TOOLS_FILE = '''
import os
from pathlib import Path

from plandag import tool

LOG = Path(os.environ["TOOL_LOG"])


@tool
def lookup(name: str) -> dict:
    """Look a name up; returns its score."""
    with LOG.open("a", encoding="utf-8") as log:
        log.write(f"lookup {name}\\n")
    return {"name": name, "score": len(name)}
'''


def plan(first: str, second: str) -> dict[str, Any]:
    return {
        "g": "Score two names",
        "s": [
            {"i": 1, "t": "lookup", "a": {"name": f"{first}"}, "d": []},
            {"i": 2, "t": "lookup", "a": {"name": f"{second}"}, "d": []},
        ],
        "o": "<step_2_result.score>",
    }


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    monkeypatch.setenv("TOOL_LOG", str(tmp_path / "tools.log"))
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "store" / "runs.sqlite3"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tools.py").write_text(TOOLS_FILE, encoding="utf-8")


def test_a_broken_stream_leaves_nothing_of_its_attempt_in_the_store(tmp_path: Path) -> None:
    broken = json.dumps(plan("a", "zz"), separators=(",", ":"))
    with MessagesServer(tokens_per_second=200.0) as server:
        server.push_stream_error_after(broken.index('{"i":2'), text=broken)  # step 1 came
        server.push_json(plan("ccc", "dddd"))
        result = CliRunner().invoke(
            app,
            [
                *("run", "Score two names", "--tools", "tools.py", "--stream"),
                *("--base-url", server.url, "--json"),
            ],
        )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["answer"] == 4
    ran = (tmp_path / "tools.log").read_text().splitlines()
    # the broken attempt's step 1 may have run (or been cancelled before it began); its
    # step 2 never arrived; the retried plan's steps ran once each
    assert sorted(line for line in ran if line != "lookup a") == ["lookup ccc", "lookup dddd"]
    assert ran.count("lookup a") <= 1
    store = open_store(tmp_path / "store" / "runs.sqlite3")
    try:
        steps = store.steps(document["run_id"])
        assert {key: (row.status, row.result) for key, row in steps.items()} == {
            1: ("succeeded", {"name": "ccc", "score": 3}),
            2: ("succeeded", {"name": "dddd", "score": 4}),
        }
    finally:
        store.close()
