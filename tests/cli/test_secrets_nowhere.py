"""Secrets nowhere: not in any command's output, the run store (every table, blobs), or the
trace; and a run that used one is still resumed, the secret put back from the environment."""

from __future__ import annotations

import base64
import gc
import http.server
import io
import itertools
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from plandag.cli import app
from plandag.cli.display import run_table
from plandag.scheduler.result import RunResult, StepErrorInfo, StepRecord
from plandag.store import open_store
from plandag.store.sealing import seal, unseal
from plandag.testing import MessagesServer

SECRET = "s3cr3t-VALUE-0123456789abcdef"  # the value of SERVICE_API_TOKEN
LITERAL = "literal-KEY-9876543210zyx"  # an API-key header written into the plan itself
MODEL_KEY = "sk-ant-api03-fakeFAKEfake0123456789"  # ANTHROPIC_API_KEY
URL_PASSWORD = "pw-URL-5551234zz"  # the password of a URL: http://alice:URL_PASSWORD@host/
NEEDLES = (SECRET, LITERAL, MODEL_KEY, URL_PASSWORD)


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
        "s": [{"i": 1, "t": "http_get", "a": {"url": url, "headers": {"json": headers}}, "d": []}],
        "o": "<step_1_result.json>",
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


# -- a token cut by the table's wrap ------------------------------------------------------

BEARER_TOKEN = "abcdefghijklmnopqrstuvwxyz0123456789"  # a literal token: only its form tells
REFUSED = f"the server said no to Authorization Bearer {BEARER_TOKEN}"

FAILING_TOOLS = f'''
from plandag import tool


@tool
def fail_auth(value: str) -> str:
    """Fail, quoting the credential the server refused."""
    raise RuntimeError({REFUSED!r})
'''


PLANDAG = [sys.executable, "-m", "plandag"]


def cells(text: str) -> list[str]:
    """The last column of each line of a rendered table."""
    return [line.split("│")[-2].strip() for line in text.splitlines() if line.count("│") > 2]


def width_splitting_the_token() -> int:
    """A terminal width at which the plain ``exec`` table (as rich lays it out, nothing
    masked) ends a line of the failure's cell with "Bearer" and starts the next with the
    token."""
    record = StepRecord(
        1,
        "fail_auth",
        status="failed",
        attempts=1,
        duration_s=0.001,
        reason="tool_error",
        error=StepErrorInfo("RuntimeError", REFUSED),
    )
    result = RunResult("0123456789abcdef", "failed", {1: record})
    for width in range(60, 160):
        out = io.StringIO()
        console = Console(width=width, file=out, soft_wrap=True, highlight=False)
        console.print(run_table(result, console_width=width))
        column = cells(out.getvalue())
        for line, following in itertools.pairwise(column):
            if line.endswith("Bearer") and following.startswith(BEARER_TOKEN[:12]):
                return width
    raise AssertionError("no width splits the line between Bearer and the token")


def test_a_token_the_table_wraps_away_from_bearer_is_masked(tmp_path: Path) -> None:
    width = width_splitting_the_token()
    (tmp_path / "tools.py").write_text(FAILING_TOOLS, encoding="utf-8")
    plan = {"steps": [{"id": 1, "tool": "fail_auth", "args": {"value": "x"}}]}
    (tmp_path / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    environment = {**os.environ, "COLUMNS": str(width), "PLANDAG_STORE": "runs.sqlite3"}
    done = subprocess.run(
        [*PLANDAG, "exec", "plan.json", "--tools", "tools.py", "--retries", "0"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=environment,
    )
    assert done.returncode == 1, done.stderr
    assert "Bearer [secret]" in " ".join(cells(done.stdout))
    for text in (done.stdout, done.stderr):
        assert BEARER_TOKEN[:12] not in text
        assert BEARER_TOKEN[-12:] not in text


# -- a password in a URL --------------------------------------------------------------------


def with_password(url: str, password: str = URL_PASSWORD) -> str:
    return url.replace("http://", f"http://alice:{password}@", 1)


def basic(password: str = URL_PASSWORD) -> str:
    return "Basic " + base64.b64encode(f"alice:{password}".encode()).decode()


def test_a_url_password_is_masked_in_outputs_store_and_traces(
    tmp_path: Path, environment: Path, echo: tuple[str, list[dict[str, str | None]]]
) -> None:
    url, seen = echo
    closed = "http://127.0.0.1:9/nothing"  # nothing listens: the error quotes the URL
    plan = tmp_path / "plan.json"
    steps = [
        {"id": 1, "tool": "http_get", "args": {"url": with_password(url)}},
        {"id": 2, "tool": "http_get", "args": {"url": with_password(closed)}},
        {
            "id": 3,
            "tool": "json_select",
            "args": {"data": {"see": f"sent to {with_password(url)} and back"}, "expr": "see"},
        },
    ]
    plan.write_text(json.dumps({"steps": steps, "output": "<step_3_result>"}), encoding="utf-8")
    outputs: list[str] = []
    code, stdout, stderr = plandag("exec", str(plan), "--retries", "0", "--json")
    outputs += [stdout, stderr]
    assert code == 1, stderr
    assert seen[0]["authorization"] == basic()  # the server got the user and password
    document = json.loads(stdout)
    run_id = document["run_id"]
    assert "alice:[secret]@" in document["output"]
    assert "alice:[secret]@" in json.dumps(document["steps"][1]["error"])
    code, stdout, stderr = plandag("exec", str(plan), "--retries", "0")
    outputs += [stdout, stderr]
    assert code == 1, stderr
    assert "alice:[secret]@" in stdout
    for command in (("runs",), ("runs", "--json"), ("trace", run_id)):
        code, stdout, stderr = plandag(*command)
        outputs += [stdout, stderr]
    assert_nowhere(environment, *outputs)


def interrupted_model_run(
    tmp_path: Path, server: MessagesServer, base_url: str
) -> tuple[str, list[str]]:
    """``exec`` of a plan whose first ``llm`` step calls the server, whose second step
    interrupts the run, and whose third ``llm`` step is left for the resume."""
    tools = tmp_path / "interrupting.py"
    tools.write_text(INTERRUPTING_TOOLS, encoding="utf-8")
    steps = [
        {"id": 1, "tool": "llm", "args": {"prompt": "Say one.", "max_tokens": 20}},
        {"id": 2, "tool": "interrupt_once", "args": {"value": "<step_1_result>", "flag": "f"}},
        {"id": 3, "tool": "llm", "args": {"prompt": "Say <step_2_result>.", "max_tokens": 20}},
    ]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"steps": steps, "output": "<step_3_result>"}), encoding="utf-8")
    server.push_text("one")
    code, stdout, stderr = plandag(
        "exec",
        str(plan),
        "--tools",
        str(tools),
        "--provider",
        "anthropic",
        "--base-url",
        base_url,
        "--json",
    )
    assert code == 130, stderr
    return json.loads(stdout)["run_id"], [stdout, stderr]


def test_a_base_url_is_stored_without_its_password_and_resume_asks_for_it(
    tmp_path: Path, environment: Path
) -> None:
    with MessagesServer() as server:
        run_id, outputs = interrupted_model_run(tmp_path, server, with_password(server.url))
        assert server.message_requests[0].headers["authorization"] == basic()
        store = open_store(environment)
        try:
            executor = store.run(run_id).options["executor"]
        finally:
            store.close()
        assert executor["base_url"] == server.url
        assert executor["base_url_credentials"] == {"user": "alice", "secret_from": None}
        assert_nowhere(environment, *outputs)

        code, stdout, stderr = plandag("resume", run_id, "--json")
        assert code == 2
        assert stdout == ""
        assert (
            f"run {run_id}: its model server's URL {server.url} was given with a user and "
            "password, which the run store does not keep; give them again: --base-url "
            f"http://<user>:<password>@{server.url.removeprefix('http://')}"
        ) in " ".join(stderr.split())
        assert len(server.message_requests) == 1  # nothing was sent

        code, stdout, stderr = plandag(
            "resume", run_id, "--base-url", "http://alice:x@127.0.0.1:9", "--json"
        )
        assert code == 2
        assert f"is not the run's model server {server.url}" in " ".join(stderr.split())

        server.push_text("two")
        code, resumed, stderr = plandag(
            "resume", run_id, "--base-url", with_password(server.url), "--json"
        )
        assert code == 0, stderr
        assert json.loads(resumed)["output"] == "two"
        assert server.message_requests[-1].headers["authorization"] == basic()
        outputs += [resumed, stderr]
    assert_nowhere(environment, *outputs)


def test_a_base_url_password_from_the_environment_comes_back_on_resume(
    tmp_path: Path, environment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    password = "proxy-PASS-0123456789"
    monkeypatch.setenv("MODEL_PROXY_PASSWORD", password)
    with MessagesServer() as server:
        run_id, outputs = interrupted_model_run(
            tmp_path, server, with_password(server.url, password)
        )
        store = open_store(environment)
        try:
            executor = store.run(run_id).options["executor"]
        finally:
            store.close()
        assert executor["base_url_credentials"] == {
            "user": "alice",
            "secret_from": "MODEL_PROXY_PASSWORD",
        }
        monkeypatch.delenv("MODEL_PROXY_PASSWORD")
        code, _, stderr = plandag("resume", run_id)
        assert code == 2
        assert (
            "took its password from the environment variable MODEL_PROXY_PASSWORD, which the "
            "run store does not keep; set MODEL_PROXY_PASSWORD to the same value"
        ) in " ".join(stderr.split())
        monkeypatch.setenv("MODEL_PROXY_PASSWORD", password)
        server.push_text("two")
        code, resumed, stderr = plandag("resume", run_id, "--json")
        assert code == 0, stderr
        assert server.message_requests[-1].headers["authorization"] == basic(password)
        outputs += [resumed, stderr]
    gc.collect()
    for path in environment.parent.rglob("*"):
        if path.is_file():
            assert password.encode() not in path.read_bytes(), path
    for text in outputs:
        assert password not in text
