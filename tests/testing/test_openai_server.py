"""The OpenAI-compatible loopback server: chat completions as JSON and as server-sent
events with usage, tool calls, errors, and ``python -m plandag.testing --protocol openai``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from plandag.testing import ChatCompletionsServer, estimate_tokens, schema_text

BODY = {"model": "local", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def server() -> Iterator[ChatCompletionsServer]:
    with ChatCompletionsServer() as running:
        yield running


def post(server: ChatCompletionsServer, body: dict[str, object]) -> httpx.Response:
    with httpx.Client(base_url=server.url, trust_env=False) as client:
        return client.post("/v1/chat/completions", json=body)


def test_a_text_reply_is_a_chat_completion_with_usage(server: ChatCompletionsServer) -> None:
    server.push_text("hello there", usage={"input_tokens": 7, "output_tokens": 3})
    reply = post(server, BODY)
    assert reply.status_code == 200
    body = reply.json()
    assert body["object"] == "chat.completion"
    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "hello there"},
            "finish_reason": "stop",
        }
    ]
    assert body["usage"] == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    assert reply.headers["x-request-id"] == body["id"]


def test_a_json_schema_response_format_is_billed_as_input(
    server: ChatCompletionsServer,
) -> None:
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    strict = {
        "type": "json_schema",
        "json_schema": {"name": "answer", "strict": True, "schema": schema},
    }
    for _ in range(3):
        server.push_json({"answer": "x"})
    billed = post(server, {**BODY, "response_format": strict}).json()["usage"]
    plain = post(server, {**BODY, "response_format": {"type": "json_object"}}).json()["usage"]
    bare = post(server, BODY).json()["usage"]
    assert billed["prompt_tokens"] == estimate_tokens("hi" + schema_text(schema))
    assert plain["prompt_tokens"] == bare["prompt_tokens"] == estimate_tokens("hi")


def test_a_tool_use_reply_is_tool_calls(server: ChatCompletionsServer) -> None:
    server.push_tool_use("lookup", {"key": "a"}, usage={"input_tokens": 5, "output_tokens": 4})
    message = post(server, BODY).json()["choices"][0]
    assert message["finish_reason"] == "tool_calls"
    (call,) = message["message"]["tool_calls"]
    assert call["type"] == "function"
    assert call["function"] == {"name": "lookup", "arguments": '{"key":"a"}'}
    assert message["message"]["content"] is None


def test_a_stream_sends_deltas_then_usage_then_done(server: ChatCompletionsServer) -> None:
    server.push_text("abcdefghijklmnopqrst", usage={"input_tokens": 2, "output_tokens": 5})
    body = {**BODY, "stream": True, "stream_options": {"include_usage": True}}
    lines = [line for line in post(server, body).text.splitlines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "abcdefghijklmnopqrst"
    assert [c["choices"][0].get("finish_reason") for c in chunks if c["choices"]][-1] == "stop"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 2, "completion_tokens": 5, "total_tokens": 7}


def test_errors_have_the_openai_shape_and_count_as_requests(
    server: ChatCompletionsServer,
) -> None:
    server.push_error(429, "rate_limit_error", retry_after=2)
    reply = post(server, BODY)
    assert reply.status_code == 429
    assert reply.headers["retry-after"] == "2"
    assert reply.json()["error"]["code"] == "rate_limit_exceeded"
    assert post(server, {"model": "local"}).status_code == 400
    with httpx.Client(base_url=server.url, trust_env=False) as client:
        assert client.post("/v1/messages", json=BODY).status_code == 404
    assert len(server.message_requests) == 2  # the 404 was not a chat completion


def test_command_line_serves_chat_completions(tmp_path: Path) -> None:
    path = tmp_path / "replies.jsonl"
    path.write_text(json.dumps({"text": "from the file"}) + "\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    arguments = ["--port", "0", "--script", str(path), "--exit-after", "30", "--protocol", "openai"]
    process = subprocess.Popen(
        [sys.executable, "-m", "plandag.testing", *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        assert url.endswith("/v1")
        with httpx.Client(base_url=url, trust_env=False) as client:
            reply = client.post("/chat/completions", json=BODY)
        assert reply.json()["choices"][0]["message"]["content"] == "from the file"
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0, stderr
