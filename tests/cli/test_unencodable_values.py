"""Values made while a run runs that UTF-8 cannot encode (lone surrogates, U+D800-U+DFFF)
never crash it: every way such a value enters a run (a file read with ``unicode_escape``,
an HTTP body as text and as JSON, a model's reply, a tool's return value and error message,
a check's message) ends with the value escaped as text
(:mod:`plandag.surrogates`), the step's record saying so, the ``--json`` document printed,
the store and the trace readable, and ``resume`` working on the run."""

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
from plandag.surrogates import ESCAPED_NOTE
from plandag.testing import MessagesServer

MODEL_KEY = "sk-ant-api03-fakeFAKEfake0123456789"


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", MODEL_KEY)
    store = tmp_path / "store" / "runs.sqlite3"
    monkeypatch.setenv("PLANDAG_STORE", str(store))
    monkeypatch.chdir(tmp_path)
    return store


class Bodies(http.server.BaseHTTPRequestHandler):
    """``/text``: a text body whose charset (``unicode_escape``) decodes to a lone
    surrogate; ``/json``: the JSON body ``{"n":"\\ud800"}``."""

    def do_GET(self) -> None:
        if self.path == "/json":
            data, kind = b'{"n":"\\ud800"}', "application/json"
        else:
            data, kind = b"caf\\ud800 au lait", "text/plain; charset=unicode_escape"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def bodies() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Bodies)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


TOOLS = '''
from plandag import CheckOutcome, check, tool


@tool
def lone(text: str) -> dict:
    """Return a value holding a lone surrogate (and one in a key)."""
    return {"value": text + "\\ud800", "k\\udfff": [text, "\\udcff"]}


@tool
def broken(text: str) -> str:
    """Fail with a lone surrogate in the error message."""
    raise RuntimeError("cannot read " + text + "\\udc80")


@check
def shows(result: object) -> CheckOutcome:
    """Fail, quoting a lone surrogate in the message."""
    return CheckOutcome("shows", "fail", "saw \\ud83d without its pair")
'''


def plandag(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def write_plan(tmp_path: Path, steps: list[dict[str, Any]], output: Any = None) -> Path:
    plan = tmp_path / "plan.json"
    document: dict[str, Any] = {"steps": steps}
    if output is not None:
        document["output"] = output
    plan.write_text(json.dumps(document), encoding="utf-8")
    return plan


def write_tools(tmp_path: Path) -> Path:
    tools = tmp_path / "lone_tools.py"
    tools.write_text(TOOLS, encoding="utf-8")
    return tools


def assert_readable(store: Path, run_id: str) -> None:
    """The run's rows, its trace and the commands that show them all read back."""
    gc.collect()
    opened = open_store(store)
    try:
        opened.steps(run_id)
        opened.run(run_id)
    finally:
        opened.close()
    for path in store.parent.rglob("*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            json.loads(line)
    for command in (("runs", "--json"), ("trace", run_id), ("runs",)):
        code, _, stderr = plandag(*command)
        assert code == 0, stderr


def exec_json(*args: str) -> tuple[int, dict[str, Any], str]:
    code, stdout, stderr = plandag("exec", *args, "--json")
    assert stdout.strip(), stderr  # the document is printed
    return code, json.loads(stdout), stderr


def step_of(document: dict[str, Any], step_id: int = 1) -> dict[str, Any]:
    return next(step for step in document["steps"] if step["id"] == step_id)


def test_read_file_with_unicode_escape(tmp_path: Path, environment: Path) -> None:
    (tmp_path / "lone.txt").write_text("abc \\ud800 def", encoding="utf-8")
    plan = write_plan(
        tmp_path,
        [
            {
                "id": 1,
                "tool": "read_file",
                "args": {"path": "lone.txt", "encoding": "unicode_escape"},
            }
        ],
        "<step_1_result>",
    )
    code, document, stderr = exec_json(str(plan))
    assert code == 0, stderr
    step = step_of(document)
    assert step["result"] == "abc \\ud800 def"  # the six characters, as the file wrote them
    assert document["output"] == "abc \\ud800 def"
    assert ESCAPED_NOTE in step["detail"]
    assert_readable(environment, document["run_id"])
    opened = open_store(environment)
    try:
        stored = opened.steps(document["run_id"])[1]
    finally:
        opened.close()
    assert stored.result == "abc \\ud800 def"
    assert stored.detail is not None
    assert ESCAPED_NOTE in stored.detail


@pytest.mark.parametrize(
    ("path", "reference", "expected"),
    [
        ("text", "<step_1_result.text>", "caf\\ud800 au lait"),
        ("json", "<step_1_result.json.n>", "\\ud800"),
    ],
)
def test_an_http_body_as_text_and_as_json(
    tmp_path: Path, environment: Path, bodies: str, path: str, reference: str, expected: str
) -> None:
    plan = write_plan(
        tmp_path, [{"id": 1, "tool": "http_get", "args": {"url": f"{bodies}/{path}"}}], reference
    )
    code, document, stderr = exec_json(str(plan))
    assert code == 0, stderr
    assert document["output"] == expected
    assert ESCAPED_NOTE in step_of(document)["detail"]
    assert_readable(environment, document["run_id"])


def test_a_model_reply_of_an_llm_step(tmp_path: Path, environment: Path) -> None:
    plan = write_plan(
        tmp_path,
        [{"id": 1, "tool": "llm", "args": {"prompt": "Say it.", "max_tokens": 50}}],
        "<step_1_result>",
    )
    with MessagesServer() as server:
        server.push_text("half a smile: \ud83d")
        code, document, stderr = exec_json(
            str(plan), "--provider", "anthropic", "--base-url", server.url
        )
    assert code == 0, stderr
    assert document["output"] == "half a smile: \\ud83d"
    assert ESCAPED_NOTE in step_of(document)["detail"]
    assert_readable(environment, document["run_id"])


def test_a_tools_return_value(tmp_path: Path, environment: Path) -> None:
    tools = write_tools(tmp_path)
    plan = write_plan(
        tmp_path,
        [
            {"id": 1, "tool": "lone", "args": {"text": "x"}},
            {"id": 2, "tool": "lone", "args": {"text": "<step_1_result.value>"}},
        ],
        "<step_2_result>",
    )
    code, document, stderr = exec_json(str(plan), "--tools", str(tools))
    assert code == 0, stderr
    assert step_of(document, 1)["result"] == {"value": "x\\ud800", "k\\udfff": ["x", "\\xff"]}
    # the next step got the escaped text, as a resumed run would from the store
    assert document["output"]["value"] == "x\\ud800\\ud800"
    assert_readable(environment, document["run_id"])


def test_a_tools_error_message(tmp_path: Path, environment: Path) -> None:
    tools = write_tools(tmp_path)
    plan = write_plan(tmp_path, [{"id": 1, "tool": "broken", "args": {"text": "x"}}])
    code, document, stderr = exec_json(str(plan), "--tools", str(tools), "--retries", "0")
    assert code == 1, stderr
    step = step_of(document)
    assert step["error"] == {"type": "RuntimeError", "message": "cannot read x\\x80"}
    assert step["attempt_log"][0]["error"]["message"] == "cannot read x\\x80"
    assert ESCAPED_NOTE in step["detail"]
    assert_readable(environment, document["run_id"])
    code, plain, stderr = plandag("exec", str(tools.parent / "plan.json"), "--tools", str(tools))
    assert code == 1, stderr
    assert "cannot read x\\x80" in plain  # the plain table too


def test_a_checks_message(tmp_path: Path, environment: Path) -> None:
    tools = write_tools(tmp_path)
    plan = write_plan(
        tmp_path,
        [{"id": 1, "tool": "lone", "args": {"text": "x"}, "check": [{"kind": "shows"}]}],
    )
    code, document, stderr = exec_json(str(plan), "--tools", str(tools), "--retries", "0")
    assert code == 1, stderr
    step = step_of(document)
    assert step["checks"][0]["detail"] == "saw \\ud83d without its pair"
    assert "saw \\ud83d without its pair" in step["error"]["message"]
    assert_readable(environment, document["run_id"])


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


def test_resume_after_an_escaped_value(tmp_path: Path, environment: Path) -> None:
    (tmp_path / "lone.txt").write_text("abc \\ud800", encoding="utf-8")
    tools = tmp_path / "interrupting.py"
    tools.write_text(INTERRUPTING_TOOLS, encoding="utf-8")
    plan = write_plan(
        tmp_path,
        [
            {
                "id": 1,
                "tool": "read_file",
                "args": {"path": "lone.txt", "encoding": "unicode_escape"},
            },
            {"id": 2, "tool": "interrupt_once", "args": {"value": "<step_1_result>", "flag": "f"}},
        ],
        "<step_2_result>",
    )
    code, first, stderr = exec_json(str(plan), "--tools", str(tools))
    assert code == 130, stderr
    assert first["status"] == "interrupted"
    code, stdout, stderr = plandag("resume", first["run_id"], "--json")
    assert code == 0, stderr
    document = json.loads(stdout)
    assert document["status"] == "succeeded"
    assert document["output"] == "got abc \\ud800"
    assert_readable(environment, first["run_id"])
