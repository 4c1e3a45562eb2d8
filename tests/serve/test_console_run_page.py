"""A run's page shows its checks and its spend, as the store recorded them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from plandag.checks.builtins import BUILTIN_CHECKS
from plandag.dag.plan import Plan
from plandag.serve import app as app_module
from plandag.serve import create_app
from plandag.serve.runs import run_rows
from plandag.store import Store, open_store
from plandag.tools import ToolContext, tool
from plandag.tools.registry import Registry
from tests.serve.conftest import BASE, TOKEN, Clock, ScriptedPlanner, make_config, signed_in
from tests.serve.test_console_http import card_hash, eventually, start


@tool(cost_estimate_usd=0.25)
def priced(word: str, ctx: ToolContext) -> dict[str, str]:
    """Look WORD up in a paid service; reports $0.25 and 1,200 tokens."""
    ctx.report_cost(usd=0.25, tokens=1200)
    return {"word": word}


PLAN = Plan.model_validate(
    {
        "goal": "Look a word up",
        "steps": [
            {
                "id": 1,
                "tool": "priced",
                "args": {"word": "ok"},
                "check": [
                    {"kind": "equals", "path": "word", "value": "ok"},
                    {"kind": "regex", "path": "word", "pattern": "^zz$"},
                ],
            }
        ],
        "output": "<step_1_result.word>",
    }
)


def test_a_runs_page_shows_its_checks_and_its_spend(tmp_path: Path) -> None:
    planner = ScriptedPlanner(PLAN)
    registry = Registry([priced], BUILTIN_CHECKS)
    app = create_app(make_config(tmp_path, planner, registry=registry, clock=Clock()), TOKEN)
    with TestClient(app, base_url=BASE) as client:
        csrf = signed_in(client)
        path = start(client, csrf)
        digest = card_hash(eventually(client, path, lambda text: 'id="card"' in text))
        client.post(f"{path}/decide", data={"csrf": csrf, "hash": digest, "action": "approve"})
        page = eventually(client, path, lambda text: "</a> failed" in text)
        run_id = re.findall(r'href="/runs/([0-9a-f]{16})"', page)[0]
        run = client.get(f"/runs/{run_id}").text
    assert '<span id="run-status" class="status">failed</span>' in run
    assert (
        '<span id="run-spend">spent $0.2500 and 1200 tokens; model calls: 0 (0 input, 0 output '
        "tokens, $0.0000)</span>"
    ) in run
    assert "<th>checks</th>" in run
    assert (
        "<td>equals: pass (the value at `word` equals &quot;ok&quot;), regex: fail (the value "
        "at `word` &quot;ok&quot; does not fully match &#x27;^zz$&#x27;)</td>"
    ) in run


def test_the_runs_list_stream_sends_the_progress_again_each_time_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = create_app(make_config(tmp_path, ScriptedPlanner(), stream_s=1.0), TOKEN)
    with open_store(tmp_path / "runs.sqlite3") as store:
        store.create_run(
            "ba7c400000000002",
            command="extract",
            goal="extract nfe: 3 input(s) into out.jsonl",
            params={"output": "out.jsonl", "inputs": 3},
            options={},
        )
    renders: list[int] = []

    def rows_then_one_more_document(store: Store, limit: int = 100) -> list[dict[str, Any]]:
        rows = run_rows(store, limit)
        renders.append(len(renders))
        if len(renders) == 1:  # the stream has read the rows once: a document is recorded
            store.record_document("ba7c400000000002", 0, "a.xml", "ok", {"status": "ok"})
        return rows

    monkeypatch.setattr(app_module, "run_rows", rows_then_one_more_document)
    with TestClient(app, base_url=BASE) as client:
        signed_in(client)
        with client.stream("GET", "/runs/events") as response:
            body = "".join(response.iter_text())
    assert len(renders) >= 3  # the stream polled past the change
    events = re.findall(r'<progress max="(\d+)" value="(\d+)"></progress> (\d+/\d+)', body)
    assert events == [("3", "0", "0/3"), ("3", "1", "1/3")]
    assert body.count("event: runs") == 2
