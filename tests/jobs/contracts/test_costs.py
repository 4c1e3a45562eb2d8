"""What a contracts batch costs and why it failed, end to end through ``plandag extract
contracts`` against the local Messages API server: each record, its row in the run store
and its bar in the trace carry the usage the server reported; each bar spans its own
contract's run; a batch whose every model call failed exits 1 saying why, one where some
failed exits 0; with ``--jobs 4`` every contract's calls are in flight together."""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from plandag.cli import app
from plandag.executors.data import parse_data_blocks
from plandag.store import open_store
from plandag.testing import MessagesServer, ScriptedResponse

FIELDS_TOML = """\
[[field]]
name = "Governing Law"
description = "The law that governs the contract"
type = "text"
"""

HAIKU_IN, HAIKU_OUT = 1.0 / 1e6, 5.0 / 1e6  # US dollars per token
USAGE = {"A": (4000, 200), "B": (3000, 100)}


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port of 127.0.0.1 bound by no listener: a connection to it is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        yield int(held.getsockname()[1])


def excerpt_of(body: dict[str, Any]) -> str:
    content = body["messages"][0]["content"]
    text = content if isinstance(content, str) else "".join(b["text"] for b in content)
    (block,) = [b for b in parse_data_blocks(text) if b.attributes["label"] == "data"]
    return str(block.value["excerpt"])


def group_of(body: dict[str, Any]) -> list[str]:
    content = body["messages"][0]["content"]
    text = content if isinstance(content, str) else "".join(b["text"] for b in content)
    schema = json.loads(text.rsplit("JSON Schema:\n", 1)[1])
    return list(schema["properties"]["fields"]["required"])


def two_contracts(tmp_path: Path) -> tuple[Path, Path, Path]:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.txt").write_text("Contract A. Governed by the laws of Delaware.", "utf-8")
    (folder / "b.txt").write_text("Contract B. Governed by the laws of Ohio.", "utf-8")
    fields = tmp_path / "fields.toml"
    fields.write_text(FIELDS_TOML, encoding="utf-8")
    return folder / "a.txt", folder / "b.txt", fields


def extract(*args: str) -> Any:
    return CliRunner().invoke(
        app, ["extract", "contracts", *args], env={"ANTHROPIC_API_KEY": "test"}
    )


def run_two(tmp_path: Path) -> tuple[Any, Path, Path, dict[str, float]]:
    """Contracts A and B at once (``--jobs 2``), B's reply first: the result, the output,
    the store, and when each contract's request reached the server (seconds since the
    epoch)."""
    a, b, fields = two_contracts(tmp_path)
    b_arrived = threading.Event()

    def reply(body: dict[str, Any]) -> ScriptedResponse:
        which = "A" if "Contract A" in excerpt_of(body) else "B"
        if which == "A":  # A answers after B has asked: B's record is ready first
            b_arrived.wait(10)
            time.sleep(0.2)
        else:
            b_arrived.set()
        input_tokens, output_tokens = USAGE[which]
        return ScriptedResponse.json(
            {"fields": {name: [] for name in group_of(body)}},
            usage={"input_tokens": input_tokens, "output_tokens": output_tokens},
        )

    out = tmp_path / "out.jsonl"
    store = tmp_path / "runs.sqlite3"
    offset = time.time() - time.monotonic()  # the server stamps requests on the monotonic clock
    with MessagesServer(default=reply) as server:
        result = extract(
            str(a), str(b), "--fields", str(fields), "-o", str(out), "--jobs", "2",
            "--base-url", server.url, "--store", str(store),
        )  # fmt: skip
        arrived = {
            ("A" if "Contract A" in excerpt_of(r.json) else "B"): r.received_at + offset
            for r in server.message_requests
        }
    assert result.exit_code == 0, result.output
    return result, out, store, arrived


def trace_json(store: Path) -> dict[str, Any]:
    with open_store(store) as runs:
        (run,) = runs.runs()
    shown = CliRunner().invoke(app, ["trace", run.run_id, "--store", str(store), "--json"])
    assert shown.exit_code == 0, shown.output
    document: dict[str, Any] = json.loads(shown.stdout)
    return document


def test_each_contract_records_the_usage_the_server_reported(tmp_path: Path) -> None:
    _, out, store, _ = run_two(tmp_path)
    expected = {
        which: {
            "requests": 1,
            "failed_requests": 0,
            "input_tokens": tokens_in,
            "output_tokens": tokens_out,
            "cost_usd": pytest.approx(tokens_in * HAIKU_IN + tokens_out * HAIKU_OUT),
        }
        for which, (tokens_in, tokens_out) in USAGE.items()
    }
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [Path(r["file"]).name for r in records] == ["a.txt", "b.txt"]
    assert [r["usage"] for r in records] == [expected["A"], expected["B"]]

    with open_store(store) as runs:
        (run,) = runs.runs()
        documents = runs.documents(run.run_id)
    assert [d.usage for d in documents] == [expected["A"], expected["B"]]
    assert run.spent_tokens == 4000 + 200 + 3000 + 100

    trace = trace_json(store)
    assert trace["tokens"] == 4000 + 200 + 3000 + 100
    assert trace["steps_cost_usd"] == pytest.approx(
        sum(usage["cost_usd"] for usage in (records[0]["usage"], records[1]["usage"]))
    )
    steps = {Path(step["detail"]).name: step for step in trace["steps"]}
    assert steps["a.txt"]["usage"] == expected["A"]
    assert steps["b.txt"]["usage"] == expected["B"]

    timeline = CliRunner().invoke(
        app, ["trace", run.run_id, "--store", str(store)], env={"COLUMNS": "200"}
    )
    assert timeline.exit_code == 0, timeline.output
    assert "7,300 tokens" in timeline.output
    assert "1 call 4,000→200 tok $0.0050" in timeline.output
    assert "1 call 3,000→100 tok $0.0035" in timeline.output


def test_each_contracts_bar_spans_its_own_run(tmp_path: Path) -> None:
    _, _, store, arrived = run_two(tmp_path)
    steps = {Path(step["detail"]).name: step for step in trace_json(store)["steps"]}
    for name, which in (("a.txt", "A"), ("b.txt", "B")):  # each bar holds its own request
        assert steps[name]["start"] <= arrived[which] <= steps[name]["end"]
    # B ran beside A, not after it: its bar ends before A's does
    assert steps["b.txt"]["end"] < steps["a.txt"]["end"]
    assert steps["b.txt"]["start"] < steps["a.txt"]["end"]


@pytest.mark.parametrize(
    ("provider", "path"), [(["--provider", "anthropic"], ""), (["--provider", "openai"], "/v1")]
)
def test_a_batch_whose_every_model_call_failed_exits_1_saying_why(
    tmp_path: Path, closed_port: int, provider: list[str], path: str
) -> None:
    a, b, fields = two_contracts(tmp_path)
    out = tmp_path / "out.jsonl"
    store = tmp_path / "runs.sqlite3"
    url = f"http://127.0.0.1:{closed_port}"
    result = extract(
        str(a), str(b), "--fields", str(fields), "-o", str(out), "--base-url", url + path,
        "--store", str(store), "--retries", "0", "--json", *provider, "--model", "local-model",
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    reason = f"the model endpoint {url} could not be reached: connection refused"
    assert f"every model call failed: {reason} (2 of 2 model calls)" in result.stderr
    summary = json.loads(result.stdout)
    assert summary["failure"] == f"{reason} (2 of 2 model calls)"
    assert summary["usage"]["requests"] == summary["usage"]["failed_requests"] == 2
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["status"] for r in records] == ["error", "error"]
    assert [r["errors"][0]["failure"] for r in records] == [reason, reason]
    assert all(reason in r["errors"][0]["message"] for r in records)
    with open_store(store) as runs:
        (run,) = runs.runs()
    assert run.status == "failed"
    assert run.detail == f"every model call failed: {reason} (2 of 2 model calls)"


def test_a_batch_where_some_model_calls_failed_exits_0_with_their_error_rows(
    tmp_path: Path,
) -> None:
    a, b, fields = two_contracts(tmp_path)

    def reply(body: dict[str, Any]) -> ScriptedResponse:
        if "Contract A" in excerpt_of(body):
            return ScriptedResponse.error(400, message="this excerpt is refused")
        return ScriptedResponse.json(
            {"fields": {name: [] for name in group_of(body)}},
            usage={"input_tokens": 3000, "output_tokens": 100},
        )

    out = tmp_path / "out.jsonl"
    with MessagesServer(default=reply) as server:
        result = extract(
            str(a), str(b), "--fields", str(fields), "-o", str(out), "--base-url", server.url,
            "--store", str(tmp_path / "runs.sqlite3"), "--retries", "0", "--json",
        )  # fmt: skip
        answered = f"the model endpoint {server.url} answered HTTP 400"
    assert result.exit_code == 0, result.output
    assert "every model call failed" not in result.output
    summary = json.loads(result.stdout)
    assert summary["failure"] is None
    assert (summary["usage"]["requests"], summary["usage"]["failed_requests"]) == (2, 1)
    assert summary["by_status"] == {"error": 1, "ok": 1}
    first, second = (json.loads(line) for line in out.read_text("utf-8").splitlines())
    assert first["status"] == "error"
    assert first["errors"][0]["failure"] == answered
    assert (first["usage"]["requests"], first["usage"]["failed_requests"]) == (1, 1)
    assert (second["status"], second["usage"]["input_tokens"]) == ("ok", 3000)


def test_with_jobs_4_every_contracts_calls_are_in_flight_together(
    tmp_path: Path, contracts_dir: Path
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    short = sorted(
        path for path in contracts_dir.glob("cuad_*.txt") if path.stat().st_size < 15_000
    )[:4]
    assert len(short) == 4
    for path in short:
        shutil.copy(path, folder / path.name)
    lock = threading.Condition()
    waiting: list[str] = []
    seen = {"calls": 0, "contracts": 0}
    everyone = 4 * 5  # four contracts of one chunk, five CUAD field groups each

    def reply(body: dict[str, Any]) -> ScriptedResponse:
        excerpt = excerpt_of(body)
        with lock:
            waiting.append(excerpt)
            seen["calls"] = max(seen["calls"], len(waiting))
            seen["contracts"] = max(seen["contracts"], len(set(waiting)))
            lock.notify_all()
            lock.wait_for(lambda: len(waiting) >= everyone, timeout=5)
            waiting.remove(excerpt)
        return ScriptedResponse.json({"fields": {name: [] for name in group_of(body)}})

    with MessagesServer(default=reply) as server:
        result = extract(
            str(folder), "-o", str(tmp_path / "out.jsonl"), "--jobs", "4",
            "--base-url", server.url, "--store", str(tmp_path / "runs.sqlite3"),
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert seen == {"calls": everyone, "contracts": 4}
