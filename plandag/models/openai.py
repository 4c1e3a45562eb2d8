"""OpenAI-compatible chat completions over httpx, for local servers (vLLM, Ollama,
llama.cpp's server) and any API that speaks the same protocol.

``POST {base_url}/chat/completions`` with the system prompt as the first message,
``max_tokens``, ``stop``, ``temperature`` when set, and for structured output
``response_format={"type": "json_schema", "json_schema": {"name": ..., "schema": ...,
"strict": true}}`` (https://platform.openai.com/docs/guides/structured-outputs). Streaming
sets ``"stream": true`` and ``"stream_options": {"include_usage": true}`` and reads the
server-sent events: ``data: {...}`` chunks whose ``choices[0].delta.content`` is the next
piece of text, a last chunk with ``usage``, then ``data: [DONE]``.

Usage: ``prompt_tokens`` minus ``prompt_tokens_details.cached_tokens`` is billed input,
the cached ones are cache reads, ``completion_tokens`` is output. ``finish_reason``
``length`` raises :class:`~plandag.models.base.TruncatedResponseError`,
``content_filter`` :class:`~plandag.models.base.ModelRefusalError`.

Native tool use (the ReAct loop, the ``agent`` step): the request's ``tools`` (Messages API
definitions) are sent as ``{"type": "function", "function": {"name", "description",
"parameters"}}``, ``tool_choice`` ``auto`` / ``any`` / ``tool`` / ``none`` as ``"auto"`` /
``"required"`` / ``{"type": "function", ...}`` / ``"none"`` (``disable_parallel_tool_use``
as ``parallel_tool_calls: false``); a conversation's content blocks are translated: an
assistant's ``tool_use`` blocks become its ``tool_calls``, a user's ``tool_result`` blocks
become ``role: "tool"`` messages. The answer's ``message.tool_calls`` stay in ``raw``
(:func:`content_blocks` reads them back as ``tool_use`` blocks). Other errors are
mapped as in :mod:`plandag.models.base`; a chunk ``{"error": {...}}`` in the middle of
a stream is transient when its ``type`` is one of
:data:`~plandag.models.base.TRANSIENT_STREAM_ERRORS` or its ``code`` is 429 or >= 500.
httpx is imported when a client is built.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from plandag.errors import PermanentStepError, StepError
from plandag.models import _http
from plandag.models.base import (
    LLMRequest,
    LLMResponse,
    LLMStream,
    Usage,
    check_stop_reason,
)

if TYPE_CHECKING:
    import httpx

__all__ = ["API_KEY_VARIABLE", "OpenAICompatibleClient", "content_blocks"]

API_KEY_VARIABLE = "OPENAI_API_KEY"
"""The environment variable the API key is read from when none is given."""


class OpenAICompatibleClient:
    """An :class:`~plandag.models.base.LLMClient` for OpenAI-compatible chat completions.

    Args:
        base_url: the API root, up to and including the version (``http://127.0.0.1:8000/v1``
            for vLLM, ``http://127.0.0.1:11434/v1`` for Ollama, ``https://api.openai.com/v1``).
        api_key: sent as ``Authorization: Bearer KEY``; default: the ``OPENAI_API_KEY``
            environment variable; None or empty sends no header (local servers need none).
        timeout_s: seconds for each phase of a request (connect, read, write, pool);
            default 600.
        transport: an ``httpx.AsyncBaseTransport`` to send through (tests: an
            ``httpx.MockTransport``); default: httpx's own.

    Attributes:
        provider: ``"openai"``.
        url: the chat completions URL, ``{base_url}/chat/completions``.
    """

    provider = "openai"

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        import httpx

        key = api_key if api_key is not None else os.environ.get(API_KEY_VARIABLE)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.url = base_url.rstrip("/") + "/chat/completions"
        self._http = httpx.AsyncClient(
            transport=transport,
            timeout=httpx.Timeout(timeout_s),
            headers=headers,
            follow_redirects=False,
        )

    async def __aenter__(self) -> OpenAICompatibleClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the httpx client's connections."""
        await self._http.aclose()

    def _where(self, request: LLMRequest) -> str:
        return f"openai {request.model} POST {self.url}"

    async def _send(self, request: LLMRequest, *, stream: bool) -> httpx.Response:
        """Send the request, streaming the body; map transport errors and statuses >= 400."""
        import httpx

        where = self._where(request)
        http_request = self._http.build_request("POST", self.url, json=body_of(request, stream))
        try:
            response = await self._http.send(http_request, stream=True)
        except httpx.TransportError as error:
            raise _http.transport_failure(error, httpx, where) from error
        if response.status_code >= 400:
            try:
                text = (await response.aread()).decode("utf-8", errors="replace")
            except httpx.HTTPError:
                text = ""
            finally:
                await response.aclose()
            raise _http.status_failure(response.status_code, response.headers, text, where)
        return response

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Send ``request`` and return the whole answer.

        Returns:
            The :class:`LLMResponse` (``raw``: the decoded JSON body).

        Raises:
            TruncatedResponseError: ``finish_reason`` ``length``.
            ModelRefusalError: ``finish_reason`` ``content_filter``.
            StepError: every other failure, mapped as in :mod:`plandag.models.base`; a
                body that is not a chat completion → :class:`PermanentStepError`
                (``invalid_response``).
        """
        import httpx

        where = self._where(request)
        response = await self._send(request, stream=False)
        try:
            data = await response.aread()
        except httpx.TransportError as error:
            raise _http.transport_failure(error, httpx, where) from error
        finally:
            await response.aclose()
        try:
            body = json.loads(data)
            choice = body["choices"][0]
            text = choice["message"].get("content") or ""
            finish_reason = choice.get("finish_reason")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as error:
            raise PermanentStepError(
                f"{where}: the answer is not a chat completion ({type(error).__name__}: "
                f"{error}){_http.snippet(data.decode('utf-8', errors='replace'))}",
                reason="invalid_response",
            ) from error
        result = LLMResponse(
            text=text,
            stop_reason=finish_reason,
            usage=usage_of(body.get("usage")),
            model=str(body.get("model") or request.model),
            request_id=response.headers.get("x-request-id") or body.get("id"),
            raw=body,
        )
        return check_stop_reason(result, request, where)

    @contextlib.asynccontextmanager
    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStream]:
        """Send ``request`` as a stream and hand on its text deltas.

        ``async with client.stream(request) as stream:`` sends the request (HTTP and
        connection failures are raised here); ``async for delta in stream`` yields the
        text as it arrives; ``await stream.final_response()`` returns the whole answer.

        Raises:
            TruncatedResponseError: from ``final_response``, ``finish_reason`` ``length``.
            StepError: every other failure, mapped as in :mod:`plandag.models.base`.
        """
        response = await self._send(request, stream=True)
        stream = _OpenAIStream(response, request, self._where(request))
        try:
            yield stream
        finally:
            await stream.aclose()


class _OpenAIStream:
    """One streamed chat completion: text deltas, usage so far, the final response."""

    def __init__(self, response: httpx.Response, request: LLMRequest, where: str) -> None:
        self._response = response
        self._request = request
        self._where = where
        self._parts: list[str] = []
        self._usage = Usage()
        self._finish_reason: str | None = None
        self._model = request.model
        self._id: str | None = response.headers.get("x-request-id")
        self._chunks = 0
        self._deltas = self._read()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._deltas

    @property
    def text(self) -> str:
        return "".join(self._parts)

    @property
    def usage(self) -> Usage:
        return self._usage

    async def _read(self) -> AsyncGenerator[str, None]:
        import httpx

        done = False
        failure: StepError | None = None
        try:
            # read to the end of the body, past "[DONE]" or an error chunk (the server ends
            # the body there): the response's own async generators are then exhausted,
            # never left to the garbage collector (which trio reports as a ResourceWarning)
            async for line in self._response.aiter_lines():
                if done or failure is not None or not line.startswith("data:"):
                    continue  # blank lines, "event:" and ": comment" lines
                payload = line[len("data:") :].strip()
                if payload == "[DONE]":
                    done = True
                    continue
                try:
                    text = self._take(payload)
                except StepError as error:
                    failure = error
                    continue
                if text:
                    self._parts.append(text)
                    yield text
        except httpx.TransportError as error:
            raise _http.transport_failure(error, httpx, self._where) from error
        if failure is not None:
            raise failure

    def _take(self, payload: str) -> str:
        """Read one chunk: remember usage, finish reason, model; return its text."""
        try:
            chunk = json.loads(payload)
        except ValueError as error:
            raise PermanentStepError(
                f"{self._where}: a stream chunk is not JSON{_http.snippet(payload)}",
                reason="invalid_response",
            ) from error
        if not isinstance(chunk, dict):
            return ""
        failure = chunk.get("error")
        if failure is not None:
            raise _stream_error(failure, self._where)
        self._chunks += 1
        if chunk.get("usage"):
            self._usage = usage_of(chunk["usage"])
        if chunk.get("model"):
            self._model = str(chunk["model"])
        if self._id is None and chunk.get("id"):
            self._id = str(chunk["id"])
        choices = chunk.get("choices") or []
        if not choices or not isinstance(choices[0], dict):
            return ""
        choice = choices[0]
        if choice.get("finish_reason"):
            self._finish_reason = str(choice["finish_reason"])
        delta = choice.get("delta") or {}
        content = delta.get("content") if isinstance(delta, dict) else None
        return content if isinstance(content, str) else ""

    async def final_response(self) -> LLMResponse:
        async for _ in self._deltas:
            pass
        if self._chunks == 0:
            raise PermanentStepError(
                f"{self._where}: the stream ended without a chunk", reason="empty_stream"
            )
        response = LLMResponse(
            text=self.text,
            stop_reason=self._finish_reason,
            usage=self._usage,
            model=self._model,
            request_id=self._id,
            raw={
                "id": self._id,
                "model": self._model,
                "choices": [
                    {
                        "message": {"role": "assistant", "content": self.text},
                        "finish_reason": self._finish_reason,
                    }
                ],
                "usage": _usage_body(self._usage),
            },
        )
        return check_stop_reason(response, self._request, self._where)

    async def aclose(self) -> None:
        await self._deltas.aclose()
        await self._response.aclose()


def body_of(request: LLMRequest, stream: bool) -> dict[str, Any]:
    """The JSON body of a chat completion for ``request``.

    Args:
        request: the call.
        stream: ask for server-sent events (with a final usage chunk).

    Returns:
        ``{"model", "messages", "max_tokens", ["stop"], ["temperature"],
        ["response_format"], ["stream", "stream_options"]}``.
    """
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    for message in request.messages:
        messages.extend(_chat_messages(message["role"], message["content"]))
    body: dict[str, Any] = {
        "model": request.model,
        "messages": messages,
        "max_tokens": request.max_tokens,
    }
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": definition["name"],
                    "description": definition.get("description", ""),
                    "parameters": definition.get("input_schema", {"type": "object"}),
                },
            }
            for definition in request.tools
        ]
        choice = request.tool_choice or {"type": "auto"}
        kind = choice.get("type")
        if kind == "tool":
            body["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
        else:
            body["tool_choice"] = {"any": "required", "none": "none"}.get(str(kind), "auto")
        if choice.get("disable_parallel_tool_use"):
            body["parallel_tool_calls"] = False
    if request.stop_sequences:
        body["stop"] = list(request.stop_sequences)
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.json_schema is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": request.schema_name,
                "schema": dict(request.json_schema),
                "strict": True,
            },
        }
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def _chat_messages(role: str, content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One conversation turn as chat messages: text as it is; content blocks translated
    (``tool_use`` → the assistant's ``tool_calls``, ``tool_result`` → ``role: "tool"``)."""
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    text = "".join(str(block.get("text", "")) for block in content if block.get("type") == "text")
    if role == "assistant":
        calls = [
            {
                "id": str(block["id"]),
                "type": "function",
                "function": {
                    "name": str(block["name"]),
                    "arguments": json.dumps(block.get("input", {}), separators=(",", ":")),
                },
            }
            for block in content
            if block.get("type") == "tool_use"
        ]
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = calls
        return [message]
    out: list[dict[str, Any]] = []
    for block in content:
        if block.get("type") == "tool_result":
            result = block.get("content", "")
            if not isinstance(result, str):
                result = "".join(
                    str(part.get("text", "")) if isinstance(part, Mapping) else str(part)
                    for part in result
                )
            out.append(
                {"role": "tool", "tool_call_id": str(block["tool_use_id"]), "content": result}
            )
    if text:
        out.append({"role": role, "content": text})
    return out


def content_blocks(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A chat completion's answer as Messages API content blocks: its text as a ``text``
    block, each of its ``tool_calls`` as a ``tool_use`` block (``arguments`` decoded; an
    argument text that is not a JSON object gives ``{"_invalid_arguments": text}``, which no
    tool's schema accepts, so the call becomes an error the model reads).

    Args:
        body: the decoded chat completion (an :class:`~plandag.models.LLMResponse`'s
            ``raw``).

    Returns:
        The blocks, text first.
    """
    choices = body.get("choices") or []
    message = choices[0].get("message") if choices and isinstance(choices[0], Mapping) else None
    if not isinstance(message, Mapping):
        return []
    blocks: list[dict[str, Any]] = []
    if isinstance(message.get("content"), str) and message["content"]:
        blocks.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        if not isinstance(call, Mapping):
            continue
        function = call.get("function")
        if not isinstance(function, Mapping):
            function = {}
        arguments = function.get("arguments", "{}")
        try:
            given = json.loads(arguments) if isinstance(arguments, str) else arguments
        except ValueError:
            given = None
        if not isinstance(given, dict):
            given = {"_invalid_arguments": arguments}
        blocks.append(
            {
                "type": "tool_use",
                "id": str(call.get("id", "")),
                "name": str(function.get("name", "")),
                "input": given,
            }
        )
    return blocks


def usage_of(usage: object) -> Usage:
    """A chat completion's ``usage`` object as :class:`Usage` (zeros when absent)."""
    if not isinstance(usage, Mapping):
        return Usage()
    prompt = _count(usage.get("prompt_tokens"))
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, Mapping) else 0
    cached = min(cached, prompt)
    return Usage(
        input_tokens=prompt - cached,
        output_tokens=_count(usage.get("completion_tokens")),
        cache_read_input_tokens=cached,
    )


def _usage_body(usage: Usage) -> dict[str, Any]:
    """:class:`Usage` back in the chat completion's shape (for ``raw`` of a stream)."""
    return {
        "prompt_tokens": usage.input_tokens + usage.cache_read_input_tokens,
        "completion_tokens": usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read_input_tokens},
    }


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _stream_error(error: object, where: str) -> StepError:
    """The step error a ``{"error": ...}`` chunk becomes."""
    if not isinstance(error, Mapping):
        return _http.stream_event_failure(None, str(error), where)
    error_type = error.get("type")
    code = error.get("code")
    kind = str(error_type) if isinstance(error_type, str) else None
    if isinstance(code, int) and not isinstance(code, bool) and (code == 429 or code >= 500):
        kind = kind if kind in ("overloaded_error", "rate_limit_error") else "server_error"
    detail = str(error.get("message") or json.dumps(error))
    return _http.stream_event_failure(kind, detail, where)
