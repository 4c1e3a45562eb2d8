"""A local server that speaks OpenAI-compatible chat completions over real HTTP.

:class:`ChatCompletionsServer` is the :class:`~plandag.testing.server.MessagesServer` (same
lifecycle on 127.0.0.1, same :class:`~plandag.testing.script.Script` of replies, same
:attr:`~plandag.testing.server.MessagesServer.requests` record, same latency settings) with
the wire format of ``POST /v1/chat/completions``, as vLLM, Ollama and llama.cpp's server
speak it (https://platform.openai.com/docs/api-reference/chat)::

    with ChatCompletionsServer() as server:
        server.push_json({"answer": 42})
        client = OpenAICompatibleClient(server.url + "/v1", api_key=None)

* ``POST /v1/chat/completions`` → ``200 application/json``: ``{"id", "object":
  "chat.completion", "created", "model", "choices": [{"index": 0, "message": {"role":
  "assistant", "content", ["tool_calls"]}, "finish_reason"}], "usage": {"prompt_tokens",
  "completion_tokens", "total_tokens"}}`` with an ``x-request-id`` header;
* with ``"stream": true`` → ``200 text/event-stream``: ``data: {chunk}`` lines, each a
  ``chat.completion.chunk`` whose ``choices[0].delta.content`` is the next piece of text,
  the last one with the ``finish_reason``; then, when ``stream_options.include_usage`` is
  set, a chunk with empty ``choices`` and the ``usage``; then ``data: [DONE]``. A scripted
  stream error sends ``data: {"error": {...}}`` in the middle and ends the stream;
* a scripted tool call becomes ``message.tool_calls`` (``{"id", "type": "function",
  "function": {"name", "arguments": JSON text}}``) with finish reason ``tool_calls``;
* stop reasons map ``end_turn`` → ``stop``, ``max_tokens`` → ``length``, ``tool_use`` →
  ``tool_calls``, ``refusal`` → ``content_filter``;
* errors: ``{"error": {"message", "type", "param", "code"}}`` with the status of the
  scripted error (``retry-after`` when scripted); a request without ``model`` or
  ``messages`` → 400; any other path → 404;
* ``response_format`` as OpenAI's strict mode takes it: a ``json_schema`` with ``strict:
  true`` that breaks the strict rules (:func:`plandag.models.schemas.strict_problems`) →
  400 ``invalid_request_error`` with ``param: "response_format"`` and the message
  ``Invalid schema for response_format 'NAME': ...``, as OpenAI answers. A server that
  speaks fewer formats is played with ``response_formats`` (say ``("json_object",)`` for
  one without strict schemas, ``()`` for one without any): another ``response_format``
  type → 400 with ``param: "response_format"``; ``max_schema_bytes`` refuses a longer
  strict schema as too large.

Input tokens are counted as the Messages server counts them (four characters a token) over
every message's content, the tool definitions and a ``json_schema`` response format's schema
(its canonical JSON, :func:`~plandag.testing.script.schema_text`: OpenAI bills it among the
prompt tokens; ``json_object`` carries none); a reply's own ``usage``
(``input_tokens``, ``output_tokens``) replaces the estimate. There is no token-counting
endpoint (OpenAI-compatible servers have none).
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Mapping
from typing import Any

from plandag.testing.script import (
    CHARS_PER_TOKEN,
    ERROR_STATUS,
    Script,
    ScriptedResponse,
    estimate_tokens,
    resolve_reply,
    schema_text,
)
from plandag.testing.server import (
    MAX_BODY_BYTES,
    EventWriter,
    MessagesServer,
    RecordedRequest,
    RequestHandler,
    api_key_of,
    block_output,
    content_text,
    number_text,
    retry_headers,
    send_json,
    text_chunks,
)

__all__ = ["COMPLETIONS_PATH", "ChatCompletionsServer"]

COMPLETIONS_PATH = "/v1/chat/completions"
"""The one path the server answers."""

_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
_DEFAULT_MAX_TOKENS = 4096


class ChatCompletionsServer(MessagesServer):
    """An OpenAI-compatible chat completions server on 127.0.0.1 that plays a script.

    Arguments and methods as :class:`~plandag.testing.server.MessagesServer`; its
    :attr:`url` is the host root: give clients ``server.url + "/v1"`` as their base URL.
    ``api_key``, when set, is compared with ``authorization: Bearer KEY``.

    Args:
        response_formats: the ``response_format`` types the server speaks (default
            ``("json_schema", "json_object")``; ``text`` is always spoken).
        **options: as :class:`~plandag.testing.server.MessagesServer`.
    """

    def __init__(
        self,
        script: Script | None = None,
        *,
        response_formats: Collection[str] = ("json_schema", "json_object"),
        **options: Any,
    ) -> None:
        super().__init__(script, **options)
        self.response_formats = frozenset(response_formats) | {"text"}

    @property
    def message_requests(self) -> list[RecordedRequest]:
        """The requests to ``POST /v1/chat/completions``, in order."""
        return [r for r in self.requests if r.path.split("?")[0] == COMPLETIONS_PATH]

    def _handle(self, handler: RequestHandler) -> None:
        length_text = handler.headers.get("content-length")
        try:
            length = int(length_text) if length_text is not None else 0
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            handler.close_connection = True
            _send_error(handler, 400, "invalid_request_error", "bad content-length", "req_0")
            return
        raw = handler.rfile.read(length) if length else b""
        received_at = time.monotonic()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        headers = {name.lower(): value for name, value in handler.headers.items()}
        number = self._record(
            RecordedRequest(handler.command, handler.path, headers, body, raw, received_at)
        )
        request_id = f"chatcmpl-local-{number:06d}"
        path = handler.path.split("?")[0]
        if handler.command != "POST" or path != COMPLETIONS_PATH:
            message = f"{handler.command} {path} is not served here"
            _send_error(handler, 404, "not_found_error", message, request_id)
            return
        if self.api_key is not None and api_key_of(headers) != self.api_key:
            _send_error(handler, 401, "authentication_error", "invalid API key", request_id)
            return
        problem = _problem(body)
        if problem is not None:
            _send_error(handler, 400, "invalid_request_error", problem, request_id)
            return
        assert isinstance(body, dict)
        refusal = self._format_problem(body)
        if refusal is not None:
            _send_error(
                handler, 400, "invalid_request_error", refusal, request_id, param="response_format"
            )
            return
        wait = self._over_limit()
        if wait is not None:
            message = f"Rate limit reached: {self.rpm:g} requests per {self.rate_period_s:g} s"
            _send_error(handler, 429, "requests", message, request_id, retry_headers(wait))
            return
        try:
            reply = self.script.next_reply(body)
            if reply is None and self.default is not None:
                reply = resolve_reply(self.default, body)
        except Exception as error:  # a test's responder failed: say so in the 500
            message = f"the scripted responder raised {type(error).__name__}: {error}"
            _send_error(handler, 500, "server_error", message, request_id)
            return
        if reply is None:
            message = (
                f"no scripted response left (request {number} to {path}); "
                "queue one with push_text(), push_json(), push_error()..."
            )
            _send_error(handler, 500, "server_error", message, request_id)
            return
        streamed = body.get("stream") is True
        if reply.is_error or (reply.stream_error_after is not None and not streamed):
            self._send_error_reply(handler, reply, request_id)
            return
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
        shim = {
            "model": body["model"],
            "max_tokens": max_tokens if isinstance(max_tokens, int) else _DEFAULT_MAX_TOKENS,
        }
        input_tokens = estimate_tokens(_input_text(body))
        built = self._message(reply, shim, number, input_tokens)
        completion = _completion(built, request_id)
        if streamed:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self._stream_chunks(handler, reply, completion, request_id, received_at, include_usage)
        else:
            output_tokens = int(completion["usage"]["completion_tokens"])
            self._wait_until(received_at, self._delay_for(output_tokens))
            _send_json(handler, 200, completion, request_id)

    def _format_problem(self, body: Mapping[str, Any]) -> str | None:
        """Why the server refuses the request's ``response_format``, or None."""
        from plandag.models.schemas import strict_problems

        response_format = body.get("response_format")
        if response_format is None:
            return None
        kind = response_format.get("type") if isinstance(response_format, dict) else None
        if kind not in self.response_formats:
            allowed = ", ".join(repr(name) for name in sorted(self.response_formats))
            return f"'response_format.type': {kind!r} is not one of the allowed values [{allowed}]"
        if kind != "json_schema":
            return None
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
            return "'response_format.json_schema.schema': a JSON Schema object is required"
        name = spec.get("name")
        if spec.get("strict") is not True or not self.check_schemas:
            return None
        size = len(json.dumps(spec["schema"], separators=(",", ":")))
        if self.max_schema_bytes is not None and size > self.max_schema_bytes:
            return (
                f"Invalid schema for response_format {name!r}: the schema is too large "
                f"({size} bytes; at most {self.max_schema_bytes})"
            )
        problems = strict_problems(spec["schema"], "openai")
        if problems:
            return f"Invalid schema for response_format {name!r}: {problems[0]}"
        return None

    def _send_error_reply(
        self, handler: RequestHandler, reply: ScriptedResponse, request_id: str
    ) -> None:
        if reply.is_error:
            status = reply.status
            error_type = reply.error_type or "server_error"
        else:
            error_type = reply.stream_error_type
            status = ERROR_STATUS.get(error_type, 500)
        headers = dict(reply.headers)
        if reply.retry_after is not None:
            headers["retry-after"] = number_text(reply.retry_after)
        _send_error(
            handler, status, error_type, reply.error_message or error_type, request_id, headers
        )

    def _stream_chunks(
        self,
        handler: RequestHandler,
        reply: ScriptedResponse,
        completion: dict[str, Any],
        request_id: str,
        received_at: float,
        include_usage: bool,
    ) -> None:
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream; charset=utf-8")
        handler.send_header("cache-control", "no-cache")
        handler.send_header("x-request-id", request_id)
        handler.send_header("transfer-encoding", "chunked")
        handler.end_headers()
        writer = EventWriter(handler)
        choice = completion["choices"][0]
        text = choice["message"].get("content") or ""
        head = {
            "id": completion["id"],
            "object": "chat.completion.chunk",
            "created": completion["created"],
            "model": completion["model"],
        }

        def send(data: Mapping[str, Any] | str) -> None:
            payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
            writer.write_chunk(f"data: {payload}\n\n".encode())

        send({**head, "choices": [{"index": 0, "delta": {"role": "assistant"}}]})
        budget = reply.stream_error_after
        sent = 0
        for piece in text_chunks(text, self.chunk_chars):
            if budget is not None and sent + len(piece) > budget:
                piece = piece[: budget - sent]
                if piece:
                    send({**head, "choices": [{"index": 0, "delta": {"content": piece}}]})
                break
            self._wait_until(received_at, self._delay_for(sent / CHARS_PER_TOKEN))
            send({**head, "choices": [{"index": 0, "delta": {"content": piece}}]})
            sent += len(piece)
        if budget is not None:
            error_type = reply.stream_error_type
            message = reply.error_message or error_type
            send({"error": {"message": message, "type": error_type, "code": None}})
            writer.close()
            return
        self._wait_until(
            received_at, self._delay_for(int(completion["usage"]["completion_tokens"]))
        )
        delta: dict[str, Any] = {}
        if choice["message"].get("tool_calls"):
            delta["tool_calls"] = [
                {"index": index, **call}
                for index, call in enumerate(choice["message"]["tool_calls"])
            ]
        send(
            {
                **head,
                "choices": [{"index": 0, "delta": delta, "finish_reason": choice["finish_reason"]}],
            }
        )
        if include_usage:
            send({**head, "choices": [], "usage": completion["usage"]})
        send("[DONE]")
        writer.close()


def _problem(body: Any) -> str | None:
    if not isinstance(body, dict):
        return "the request body must be a JSON object"
    if not isinstance(body.get("model"), str):
        return "model: a string is required"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    return None


def _input_text(body: Mapping[str, Any]) -> str:
    parts = []
    for message in body.get("messages", []):
        if isinstance(message, dict):
            parts.append(content_text(message.get("content") or ""))
            if message.get("tool_calls"):
                parts.append(json.dumps(message["tool_calls"]))
    if body.get("tools"):
        parts.append(json.dumps(body["tools"]))
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        spec = response_format.get("json_schema")
        if isinstance(spec, dict) and spec.get("schema") is not None:
            parts.append(schema_text(spec["schema"]))
    return "".join(parts)


def _completion(message: Mapping[str, Any], request_id: str) -> dict[str, Any]:
    """The chat completion for a message the Messages server built."""
    text = "".join(block_output(block) for block in message["content"] if block["type"] == "text")
    calls = [
        {
            "id": str(block["id"]).replace("toolu_", "call_"),
            "type": "function",
            "function": {
                "name": block["name"],
                "arguments": json.dumps(block.get("input", {}), separators=(",", ":")),
            },
        }
        for block in message["content"]
        if block["type"] == "tool_use"
    ]
    usage = message["usage"]
    prompt = int(usage["input_tokens"])
    output = int(usage["output_tokens"])
    reply: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
    if calls:
        reply["tool_calls"] = calls
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": message["model"],
        "choices": [
            {
                "index": 0,
                "message": reply,
                "finish_reason": _FINISH.get(str(message["stop_reason"]), "stop"),
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": output,
            "total_tokens": prompt + output,
        },
    }


def _send_json(
    handler: RequestHandler,
    status: int,
    data: Mapping[str, Any],
    request_id: str,
    headers: Mapping[str, str] | None = None,
) -> None:
    send_json(handler, status, data, request_id, headers, request_id_header="x-request-id")


def _send_error(
    handler: RequestHandler,
    status: int,
    error_type: str,
    message: str,
    request_id: str,
    headers: Mapping[str, str] | None = None,
    *,
    param: str | None = None,
) -> None:
    code = "rate_limit_exceeded" if status == 429 else None
    body = {"error": {"message": message, "type": error_type, "param": param, "code": code}}
    _send_json(handler, status, body, request_id, headers)
