"""A ``plandag run`` whose plan has ``llm`` steps keeps its model for a later segment: the
run stores the provider, model and base URL of its model steps (never a user or password
of the URL), so ``plandag approve`` (and ``resume``) call the same local OpenAI-compatible
server the run was started with, not a default provider."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from plandag.cli import app
from plandag.store import open_store
from plandag.testing import ChatCompletionsServer, ScriptedResponse

TOOLS_FILE = '''
import os
from pathlib import Path

from plandag import tool

LOG = Path(os.environ["PUBLISH_LOG"])


@tool(effects="write")
def publish(channel: str) -> str:
    """Publish on CHANNEL."""
    with LOG.open("a", encoding="utf-8") as log:
        log.write(f"publish {channel}\\n")
    return f"published on {channel}"
'''

PLAN = {
    "g": "Publish, then name a colour",
    "s": [
        {"i": 1, "t": "publish", "a": {"channel": "blog"}, "d": []},
        {"i": 2, "t": "llm", "a": {"prompt": "Name a colour.", "max_tokens": 20}, "d": [1]},
    ],
    "o": "<step_2_result>",
}


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("PUBLISH_LOG", str(tmp_path / "effects.log"))
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "runs.sqlite3"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tools.py").write_text(TOOLS_FILE, encoding="utf-8")


def plandag(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def stored_options(tmp_path: Path, run_id: str) -> dict[str, Any]:
    store = open_store(tmp_path / "runs.sqlite3")
    try:
        return dict(store.run(run_id).options)
    finally:
        store.close()


def test_approve_calls_the_model_steps_at_the_runs_own_server(tmp_path: Path) -> None:
    def reply(body: dict[str, Any]) -> Any:
        if "Name a colour" in json.dumps(body):
            return ScriptedResponse.text("teal")
        return ScriptedResponse.json(PLAN)

    with ChatCompletionsServer(default=reply) as server:
        url = server.url + "/v1"
        first = plandag(
            "run", "Publish, then name a colour", "--tools", "tools.py", "--provider", "openai",
            "--base-url", url, "--model", "local-model", "--approve", "never", "--json",
        )  # fmt: skip
        assert first.exit_code == 4, first.output
        run_id = json.loads(first.stdout)["run_id"]
        assert len(server.message_requests) == 1  # the plan; nothing ran

        approved = plandag("approve", run_id, "--who", "ana", "--json")
        assert approved.exit_code == 0, approved.output
        document = json.loads(approved.stdout)
        assert document["status"] == "succeeded"
        assert document["output"] == "teal"
        [_plan_call, step_call] = server.message_requests
        assert step_call.json["model"] == "local-model"
    executor = stored_options(tmp_path, run_id)["executor"]
    assert executor["provider"] == "openai"
    assert executor["base_url"] == url
    assert executor["model"] == "local-model"
    assert (tmp_path / "effects.log").read_text().splitlines() == ["publish blog"]


def test_the_model_steps_url_is_stored_without_its_user_and_password(tmp_path: Path) -> None:
    secret = "s3cret-pw-8841"
    result = plandag(
        "run", "Publish", "--tools", "tools.py", "--provider", "openai", "--model", "m",
        "--base-url", f"http://ana:{secret}@127.0.0.1:9/v1", "--retries", "0", "--json",
    )  # fmt: skip
    assert result.exit_code != 0
    store = open_store(tmp_path / "runs.sqlite3")
    try:
        [row] = store.runs()
    finally:
        store.close()
    executor = row.options["executor"]
    assert executor["base_url"] == "http://127.0.0.1:9/v1"
    assert executor["base_url_credentials"]["user"] == "ana"
    assert secret not in json.dumps(row.options)
