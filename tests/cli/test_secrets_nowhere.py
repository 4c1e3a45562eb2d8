"""Secrets nowhere: not in any command's output, the run store (every table, blobs), or the
trace; and a run that used one is still resumed, the secret put back from the environment."""

from __future__ import annotations

import gc
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from plandag.cli import app
from plandag.store import open_store
from plandag.store.sealing import seal, unseal
from plandag.testing import MessagesServer

SECRET = "s3cr3t-VALUE-0123456789abcdef"  # the value of SERVICE_API_TOKEN
LITERAL = "literal-KEY-9876543210zyx"  # an API-key header written into the plan itself
MODEL_KEY = "sk-ant-api03-fakeFAKEfake0123456789"  # ANTHROPIC_API_KEY
NEEDLES = (SECRET, LITERAL, MODEL_KEY)


class Echo(http.server.BaseHTTPRequestHandler):
    """Answers every GET and POST with the credentials it was sent, as JSON (so they come
    back in the step's result too)."""

    seen: list[dict[str, str | None]]

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.do_GET()

    def do_GET(self) -> None:
        headers = {
            "authorization": self.headers.get("Authorization"),
            "x-api-key": self.headers.get("X-Api-Key"),
        }
        self.seen.append(headers)
        body = json.dumps({"you_sent": headers, "note": f"token was {headers['authorization']}"})
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def echo() -> Iterator[tuple[str, list[dict[str, str | None]]]]:
    seen: list[dict[str, str | None]] = []
    handler = type("Handler", (Echo,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/who", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.setenv("SERVICE_API_TOKEN", SECRET)
    monkeypatch.setenv("ANTHROPIC_API_KEY", MODEL_KEY)
    store = tmp_path / "store" / "runs.sqlite3"
    monkeypatch.setenv("PLANDAG_STORE", str(store))
    monkeypatch.chdir(tmp_path)
    return store


def plandag(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def boundary(url: str) -> list[str]:
    """``--write-boundary`` for the working directory and the echo server's host."""
    host = url.rsplit("/", 1)[0]
    return ["--write-boundary", ".", "--write-boundary", host]


def assert_nowhere(store: Path, *texts: str) -> None:
    """No needle in the texts given (outputs) nor in any file of the store's folder: the
    database with its WAL, the blobs, the traces."""
    gc.collect()  # a connection an interrupted command left open checkpoints its WAL now
    for text in texts:
        for needle in NEEDLES:
            assert needle not in text
    files = [path for path in store.parent.rglob("*") if path.is_file()]
    assert any(path.name.endswith(".sqlite3") for path in files)
    assert any(path.parent.name == "traces" for path in files)
    for path in files:
        data = path.read_bytes()
        for needle in NEEDLES:
            assert needle.encode() not in data, f"{needle} in {path}"


def exec_plan(url: str) -> dict[str, Any]:
    """Step 1 POSTs with the credentials (an effect: it waits for the approval), step 2
    writes what came back."""
    return {
        "goal": "who am I",
        "steps": [
            {
                "id": 1,
                "tool": "http_post",
                "args": {
                    "json": {"hello": 1},
                    "url": url,
                    "headers": {"Authorization": f"Bearer {SECRET}", "X-Api-Key": LITERAL},
                },
            },
            {
                "id": 2,
                "tool": "write_json",
                "args": {"path": "out/seen.json", "data": "<step_1_result.json>"},
                "depends_on": [1],
            },
        ],
        "output": "<step_1_result.json>",
    }


def test_exec_and_approve_print_and_store_no_secret_and_the_approval_resends_it(
    tmp_path: Path, environment: Path, echo: tuple[str, list[dict[str, str | None]]]
) -> None:
    url, seen = echo
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(exec_plan(url)), encoding="utf-8")
    outputs: list[str] = []

    code, stdout, stderr = plandag(
        "exec", str(plan), *boundary(url), "--approve", "never", "--json"
    )
    outputs += [stdout, stderr]
    assert code == 4, stderr
    assert seen == []  # nothing sent before the approval
    run_id = json.loads(stdout)["run_id"]
    assert_nowhere(environment, *outputs)

    # the approval compiles the stored plan again: the secret comes back from the environment
    code, stdout, stderr = plandag("approve", run_id, "--json")
    outputs += [stdout, stderr]
    assert code == 0, stderr
    document = json.loads(stdout)
    assert document["status"] == "succeeded"
    # the secret from the environment is sent again; the literal key could not be kept
    assert seen == [{"authorization": f"Bearer {SECRET}", "x-api-key": "[secret]"}]
    written = json.loads((tmp_path / "out" / "seen.json").read_text(encoding="utf-8"))
    assert written["you_sent"]["authorization"] == f"Bearer {SECRET}"  # the real file: kept
    assert "[secret]" in json.dumps(document["steps"][0]["result"])  # shown masked

    # plain output and the other views of the run
    for command in (("runs",), ("runs", "--json"), ("trace", run_id)):
        code, stdout, stderr = plandag(*command)
        outputs += [stdout, stderr]
    assert_nowhere(environment, *outputs)

    store = open_store(environment)
    try:
        (version,) = store.plan_versions(run_id)
        headers = version.plan["steps"][0]["args"]["headers"]
        assert headers == {
            "Authorization": {"$env_text": ["Bearer ", {"$env": "SERVICE_API_TOKEN"}]},
            "X-Api-Key": "[secret]",
        }
    finally:
        store.close()


def test_exec_plain_output_masks_the_secret(
    tmp_path: Path, environment: Path, echo: tuple[str, list[dict[str, str | None]]]
) -> None:
    url, seen = echo
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(exec_plan(url)), encoding="utf-8")
    code, stdout, stderr = plandag("exec", str(plan), *boundary(url), "--approve", "auto")
    assert code == 0, stderr
    assert seen == [{"authorization": f"Bearer {SECRET}", "x-api-key": LITERAL}]
    assert "[secret]" in stdout
    assert_nowhere(environment, stdout, stderr)


def test_approve_without_the_variable_says_which_one_to_set(
    tmp_path: Path,
    environment: Path,
    echo: tuple[str, list[dict[str, str | None]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, _ = echo
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(exec_plan(url)), encoding="utf-8")
    code, stdout, _ = plandag("exec", str(plan), *boundary(url), "--approve", "never", "--json")
    assert code == 4
    run_id = json.loads(stdout)["run_id"]
    monkeypatch.delenv("SERVICE_API_TOKEN")
    code, stdout, stderr = plandag("approve", run_id)
    assert code == 2
    assert (
        f"run {run_id}: the run used the secret in the environment variable SERVICE_API_TOKEN, "
        "which the store does not keep; set SERVICE_API_TOKEN to the same value and run the "
        "command again"
    ) in " ".join(stderr.split())


def test_run_json_with_the_model_server_prints_and_stores_no_secret(
    environment: Path, echo: tuple[str, list[dict[str, str | None]]]
) -> None:
    url, seen = echo
    headers = json.dumps({"Authorization": f"Bearer {SECRET}", "X-Api-Key": LITERAL})
    wire = {
        "g": "who am I",
        "s": [{"i": 1, "t": "http_get", "a": [f"url={url}", f"headers:={headers}"], "d": []}],
        "o": '"<step_1_result.json>"',
    }
    with MessagesServer() as server:
        server.push_json(wire)
        server.push_text("You are known by your token.")  # the joiner, if it is asked
        code, stdout, stderr = plandag("run", "who am I", "--base-url", server.url, "--json")
        plain = plandag("runs")
        assert server.message_requests[0].api_key == MODEL_KEY  # the model got its key
    assert code == 0, stderr
    assert seen[0]["authorization"] == f"Bearer {SECRET}"
    document = json.loads(stdout)
    assert document["status"] == "succeeded"
    assert_nowhere(environment, stdout, stderr, plain[1], plain[2])


def test_seal_and_unseal() -> None:
    environment = {SECRET: "SERVICE_API_TOKEN"}
    value = {
        "whole": SECRET,
        "inside": f"a {SECRET} b {SECRET}",
        "Authorization": "Bearer literal0123456789",
        "pairs": [["x-api-key", SECRET], ["x-api-key", LITERAL]],
        "looks_sealed": {"$env": "SERVICE_API_TOKEN"},
        "n": 3,
    }
    sealed = seal(value, environment)
    assert sealed == {
        "whole": {"$env": "SERVICE_API_TOKEN"},
        "inside": {
            "$env_text": [
                "a ",
                {"$env": "SERVICE_API_TOKEN"},
                " b ",
                {"$env": "SERVICE_API_TOKEN"},
            ]
        },
        "Authorization": "[secret]",
        "pairs": [["x-api-key", {"$env": "SERVICE_API_TOKEN"}], ["x-api-key", "[secret]"]],
        "looks_sealed": {"$literal": {"$env": "SERVICE_API_TOKEN"}},
        "n": 3,
    }
    restored = unseal(sealed, {"SERVICE_API_TOKEN": SECRET})
    assert restored == {
        **value,
        "Authorization": "[secret]",
        "pairs": [["x-api-key", SECRET], ["x-api-key", "[secret]"]],
    }
    # a name that is not a secret's is never read from the environment
    with pytest.raises(ValueError, match="'HOME', which is not a secret's name"):
        unseal({"$env": "HOME"}, {"HOME": "/root"})


INTERRUPTING_TOOLS = '''
import os
import signal
from pathlib import Path

import anyio

from plandag import tool


@tool
async def interrupt_once(value: str, flag: str) -> str:
    """The first time (FLAG missing): press Ctrl-C on the run and wait; then answer."""
    if not Path(flag).exists():
        Path(flag).write_text("interrupted")
        os.kill(os.getpid(), signal.SIGINT)
        await anyio.sleep(30)
    return "got " + value
'''


def test_resume_puts_the_secret_back_into_stored_results(
    tmp_path: Path, environment: Path, echo: tuple[str, list[dict[str, str | None]]]
) -> None:
    url, seen = echo
    tools = tmp_path / "interrupting.py"
    tools.write_text(INTERRUPTING_TOOLS, encoding="utf-8")
    plan = tmp_path / "plan.json"
    steps = [
        {"id": 1, "tool": "http_get", "args": {"url": url, "headers": {"Authorization": SECRET}}},
        {
            "id": 2,
            "tool": "interrupt_once",
            "args": {"value": "<step_1_result.json.you_sent.authorization>", "flag": "flag"},
        },
    ]
    plan.write_text(json.dumps({"steps": steps, "output": "<step_2_result>"}), encoding="utf-8")
    code, stdout, stderr = plandag("exec", str(plan), "--tools", str(tools), "--json")
    assert code == 130, stderr
    first = json.loads(stdout)
    assert first["status"] == "interrupted"
    code, resumed, stderr = plandag("resume", first["run_id"], "--json")
    assert code == 0, stderr
    document = json.loads(resumed)
    assert document["status"] == "succeeded"
    assert len(seen) == 1  # step 1 was not run again: its stored result was used ...
    assert document["output"] == "got [secret]"  # ... with the secret put back (shown masked)
    store = open_store(environment)
    try:
        step_2 = store.steps(first["run_id"])[2]
    finally:
        store.close()
    assert step_2.result == {"$env_text": ["got ", {"$env": "SERVICE_API_TOKEN"}]}
    assert_nowhere(environment, stdout, resumed, stderr)


def test_a_secret_param_is_stored_by_name_and_the_approval_sends_it(
    tmp_path: Path, environment: Path, echo: tuple[str, list[dict[str, str | None]]]
) -> None:
    url, seen = echo
    plan = {
        "params": {"token": {"type": "string"}},
        "steps": [
            {
                "id": 1,
                "tool": "http_post",
                "args": {"url": url, "headers": {"Authorization": "Bearer <param.token>"}},
            },
            {
                "id": 2,
                "tool": "write_json",
                "args": {"path": "out/a.json", "data": 1},
                "depends_on": [1],
            },
        ],
    }
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan), encoding="utf-8")
    code, stdout, stderr = plandag(
        "exec", str(path), *boundary(url), "--param", f"token={SECRET}", "--approve", "never"
    )
    assert code == 4, stderr
    assert seen == []
    store = open_store(environment)
    try:
        (run,) = store.runs()
        run_id = run.run_id
        assert store.run(run_id).params == {"token": {"$env": "SERVICE_API_TOKEN"}}
    finally:
        store.close()
    code, approved, stderr = plandag("approve", run_id, "--json")
    assert code == 0, stderr
    assert seen == [{"authorization": f"Bearer {SECRET}", "x-api-key": None}]
    assert_nowhere(environment, stdout, approved, stderr)


def test_seal_keeps_what_a_plan_needs_under_secret_named_keys() -> None:
    plan = {
        "params": {"token": {"type": "string"}},  # a declaration, not a credential
        "args": {"Authorization": "Bearer <param.token>", "password": 12345678},
    }
    assert seal(plan, {}) == {
        "params": {"token": {"type": "string"}},
        "args": {"Authorization": "Bearer <param.token>", "password": "[secret]"},
    }
