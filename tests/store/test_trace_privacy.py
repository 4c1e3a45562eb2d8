"""Secrets never reach a run's trace or store; ``--redact`` masks personal data (README,
"Durable runs", **Secrets nowhere**; LGPD, Lei 13.709/2018)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plandag.store import open_store
from tests.exec_plan import exec_plan

TOOLS = '''
from plandag.tools import tool


@tool
def call_api(url: str, headers: dict[str, str]) -> dict[str, object]:
    """Pretend to call URL with HEADERS; echo what was sent."""
    return {"url": url, "sent": headers}


@tool
def recipient() -> dict[str, object]:
    """An NFC-e recipient who is a person."""
    return {"dest": {"CPF": "52998224725", "xNome": "MARIA DA SILVA", "email": "maria@example.com"}}
'''

SECRET = "sk-ant-api03-" + "Q" * 40
ENV_SECRET = "test-key-value-from-the-environment-0123456789"


def _exec(tmp_path: Path, plan: dict[str, object], *extra: str) -> tuple[str, str]:
    run_id, store_path = exec_plan(tmp_path, plan, TOOLS, *extra)
    trace = (tmp_path / "store" / "traces" / f"{run_id}.jsonl").read_text(encoding="utf-8")
    store = open_store(store_path)
    try:
        stored = json.dumps([step.args for step in store.steps(run_id).values()])
    finally:
        store.close()
    return trace, stored


def test_api_keys_and_authorization_headers_never_reach_the_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", ENV_SECRET)
    plan = {
        "steps": [
            {
                "id": 1,
                "tool": "call_api",
                "args": {
                    "url": "http://127.0.0.1:9/v1",
                    "headers": {"Authorization": f"Bearer {SECRET}", "x-note": ENV_SECRET},
                },
            }
        ],
        "output": "<step_1_result>",
    }
    trace, stored = _exec(tmp_path, plan)
    for secret in (SECRET, ENV_SECRET):
        assert secret not in trace
        assert secret not in stored
    assert "http://127.0.0.1:9/v1" in trace  # the rest is kept
    assert "[secret]" in trace


def test_redact_masks_personal_data_only_when_asked(tmp_path: Path) -> None:
    plan = {"steps": [{"id": 1, "tool": "recipient", "args": {}}], "output": "<step_1_result>"}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    plain, _ = _exec(tmp_path / "a", plan)
    assert "MARIA DA SILVA" in plain
    assert "52998224725" in plain
    redacted, _ = _exec(tmp_path / "b", plan, "--redact")
    for personal in ("MARIA DA SILVA", "52998224725", "maria@example.com"):
        assert personal not in redacted
    assert "[name]" in redacted
    assert "[cpf]" in redacted


def test_an_exec_trace_holds_its_compile_and_step_spans(tmp_path: Path) -> None:
    plan = {"steps": [{"id": 1, "tool": "recipient", "args": {}}], "output": "<step_1_result>"}
    trace, _ = _exec(tmp_path, plan)
    lines = [json.loads(line) for line in trace.splitlines()]
    assert [line["type"] for line in lines][:2] == ["run_started", "plan"]
    spans = [(line["kind"], line["attrs"]) for line in lines if line["type"] == "span"]
    assert [kind for kind, _ in spans] == ["compile", "step"]
    assert spans[0][1]["ok"] is True
    assert (spans[1][1]["step_id"], spans[1][1]["status"]) == (1, "succeeded")
    assert lines[-1]["type"] == "run_finished"
    assert lines[-1]["status"] == "succeeded"
