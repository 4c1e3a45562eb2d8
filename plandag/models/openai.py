"""OpenAI-compatible chat completions through the official ``openai`` SDK, for OpenAI and for
local servers that speak the same protocol (vLLM, Ollama, llama.cpp's server).

The SDK client is ``AsyncOpenAI(base_url=..., max_retries=0)``: plandag owns retries
(:func:`plandag.models.calls.call_with_retries`), so one plandag attempt is one request
(two, once per run, when the server refuses a structured-output mode: see below).
``chat.completions.create`` is sent with the system prompt as the first message,
``max_tokens``, ``stop``, ``temperature`` when set; streaming adds ``stream: true`` and
``stream_options: {"include_usage": true}``, and the last chunk carries the usage.

**Structured output** (:mod:`plandag.models.structured`): a request's ``json_schema`` goes
as ``response_format: {"type": "json_schema", "json_schema": {"name", "schema", "strict":
true}}`` after :func:`~plandag.models.schemas.prepare_schema` has shaped it for strict mode
(https://platform.openai.com/docs/guides/structured-outputs); the answer is brought back to
the caller's shape and validated against the schema. A server that refuses strict schemas
is asked for JSON mode (``{"type": "json_object"}``), then for no response format, the
schema stated in the system prompt; the client remembers it and says it once on stderr.

Usage: ``prompt_tokens`` minus ``prompt_tokens_details.cached_tokens`` is billed input,
the cached ones are cache reads, ``completion_tokens`` is output. ``finish_reason``
``length`` raises :class:`~plandag.models.base.TruncatedResponseError`, ``content_filter``
:class:`~plandag.models.base.ModelRefusalError`.

Native tool use (the ReAct loop, the ``agent`` step): the request's ``tools`` (Messages API
definitions) are sent as ``{"type": "function", "function": {"name", "description",
"parameters"}}``, ``tool_choice`` ``auto`` / ``any`` / ``tool`` / ``none`` as ``"auto"`` /
``"required"`` / ``{"type": "function", ...}`` / ``"none"`` (``disable_parallel_tool_use``
as ``parallel_tool_calls: false``); a conversation's content blocks are translated: an
assistant's ``tool_use`` blocks become its ``tool_calls``, a user's ``tool_result`` blocks
become ``role: "tool"`` messages. The answer's ``message.tool_calls`` stay in ``raw``
(:func:`content_blocks` reads them back as ``tool_use`` blocks).

Errors are mapped as in :mod:`plandag.models.base` (:mod:`plandag.models.failures`); an
error the SDK raises in the middle of a stream (a ``{"error": {...}}`` chunk) is transient
when its ``type`` is one of :data:`~plandag.models.base.TRANSIENT_STREAM_ERRORS` or its
``code`` is 429 or >= 500. The SDK is imported when a client is built.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any

from plandag.errors import PermanentStepError, StepError
from plandag.models import failures, telemetry
from plandag.models.base import (
    LLMRequest,
    LLMResponse,
    LLMStream,
    Usage,
    check_stop_reason,
)
from plandag.models.chat_completions import content_blocks
from plandag.models.structured import Attempt, SchemaModes, SchemaRefusal, finish

if TYPE_CHECKING:
    import httpx2
    import openai
    from openai import AsyncStream
    from openai.types.chat import ChatCompletionChunk

__all__ = ["API_KEY_VARIABLE", "OpenAICompatibleClient", "body_of", "content_blocks"]

API_KEY_VARIABLE = "OPENAI_API_KEY"
"""The environment variable the API key is read from when none is given."""

_NO_KEY = "no-key"
"""The key the SDK is built with when there is none; its ``Authorization`` header is then
left out of every request (``extra_headers={"Authorization": openai.omit}``)."""


class OpenAICompatibleClient:
    """An :class:`~plandag.models.base.LLMClient` for OpenAI-compatible chat completions.

    Args:
        base_url: the API root, up to and including the version (``http://127.0.0.1:8000/v1``
            for vLLM, ``http://127.0.0.1:11434/v1`` for Ollama, ``https://api.openai.com/v1``).
        api_key: sent as ``Authorization: Bearer KEY``; default: the ``OPENAI_API_KEY``
            environment variable; None or empty sends no header (local servers need none).
        timeout_s: seconds for each phase of a request (connect, read, write, pool);
            default 600.
        http_client: an ``httpx2.AsyncClient`` for the SDK to use (tests: one on an
            ``httpx2.MockTransport``); default: the SDK's own.
        notice: where a change of structured-output mode is said, one line (default:
            stderr).

    Attributes:
        provider: ``"openai"``.
        base_url: the API root as given (without a trailing ``/``).
        url: the chat completions URL, ``{base_url}/chat/completions``.
        sdk: the underlying ``openai.AsyncOpenAI`` (``max_retries=0``).
        schema_modes: the structured-output modes this server accepts, as learnt.
    """

    provider = "openai"
    sends_temperature = True
    """A request's ``temperature`` is sent when it has one."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        http_client: httpx2.AsyncClient | None = None,
        notice: Callable[[str], None] | None = None,
    ) -> None:
        import openai

        key = api_key if api_key is not None else os.environ.get(API_KEY_VARIABLE)
        root = base_url.rstrip("/")
        self.base_url = root
        self.url = root + "/chat/completions"
        self.sdk: openai.AsyncOpenAI = openai.AsyncOpenAI(
            api_key=key or _NO_KEY,
            base_url=root,
            max_retries=0,
            timeout=timeout_s,
            http_client=http_client,
        )
        self._headers: dict[str, Any] = {} if key else {"Authorization": openai.omit}
        self.schema_modes = SchemaModes(
            "openai", ("strict", "json", "prompt"), f"openai {root}", notice
        )

    async def __aenter__(self) -> OpenAICompatibleClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the SDK client's connections."""
        await self.sdk.close()

    def _where(self, request: LLMRequest) -> str:
        return f"openai {request.model} POST {self.url}"

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Send ``request`` with ``chat.completions.create`` and return the whole answer.

        Returns:
            The :class:`LLMResponse` (``raw``: the chat completion as decoded JSON; ``text``
            in the shape the request's schema asked for).

        Raises:
            TruncatedResponseError: ``finish_reason`` ``length``.
            ModelRefusalError: ``finish_reason`` ``content_filter``.
            StepError: every other failure, mapped as in :mod:`plandag.models.base`; an
                answer that is not a chat completion → :class:`PermanentStepError`
                (``invalid_response``).
        """
        where = self._where(request)
        attempts = self.schema_modes.attempts(request)
        for number, attempt in enumerate(attempts):
            try:
                completion = await self._create(request, attempt, stream=False)
            except SchemaRefusal as refusal:
                if self.schema_modes.gives_up(request, attempt, refusal):
                    raise refusal.mapped from refusal
                self.schema_modes.refused(attempt, refusal)
                if number + 1 < len(attempts):
                    continue
                raise refusal.mapped from refusal
            response = _response(completion, request, where)
            return finish(check_stop_reason(response, request, where), attempt)
        raise AssertionError("unreachable: at least one attempt")

    async def _create(self, request: LLMRequest, attempt: Attempt, *, stream: bool) -> Any:
        """One ``chat.completions.create``; HTTP and transport failures mapped (a refusal
        of the response format as :class:`SchemaRefusal`)."""
        import openai

        where = self._where(request)
        params = body_of(request, stream, attempt)
        try:
            return await self.sdk.chat.completions.create(
                **params, extra_headers={**self._headers, **telemetry.trace_headers()}
            )
        except openai.APIStatusError as error:
            mapped = _failure(error, where)
            if _schema_refusal(error, attempt):
                raise SchemaRefusal(error.status_code, error.message, mapped) from error
            raise mapped from error
        except openai.APIError as error:
            raise _failure(error, where) from error
        except ValueError as error:  # a 200 whose body is not JSON
            raise PermanentStepError(
                f"{where}: the answer is not a chat completion ({type(error).__name__}: {error})",
                reason="invalid_response",
            ) from error

    @contextlib.asynccontextmanager
    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStream]:
        """Send ``request`` as a stream and hand on its text deltas.

        ``async with client.stream(request) as stream:`` sends the request (HTTP and
        connection failures are raised here); ``async for delta in stream`` yields the
        text as it arrives; ``await stream.final_response()`` returns the whole answer (its
        text in the shape the request's schema asked for; the deltas are the text as the
        model wrote it).

        Raises:
            TruncatedResponseError: from ``final_response``, ``finish_reason`` ``length``.
            StepError: every other failure, mapped as in :mod:`plandag.models.base`.
        """
        attempts = self.schema_modes.attempts(request)
        for number, attempt in enumerate(attempts):
            try:
                sdk_stream = await self._create(request, attempt, stream=True)
            except SchemaRefusal as refusal:
                if self.schema_modes.gives_up(request, attempt, refusal):
                    raise refusal.mapped from refusal
                self.schema_modes.refused(attempt, refusal)
                if number + 1 < len(attempts):
                    continue
                raise refusal.mapped from refusal
            break
        stream = _OpenAIStream(sdk_stream, request, self._where(request), attempt)
        try:
            yield stream
        finally:
            await stream.aclose()


class _OpenAIStream:
    """One streamed chat completion: text deltas, usage so far, the final response."""

    def __init__(
        self,
        sdk_stream: AsyncStream[ChatCompletionChunk],
        request: LLMRequest,
        where: str,
        attempt: Attempt,
    ) -> None:
        self._sdk = sdk_stream
        self._request = request
        self._where = where
        self._attempt = attempt
        self._parts: list[str] = []
        self._usage = Usage()
        self._finish_reason: str | None = None
        self._model = request.model
        self._id: str | None = sdk_stream.response.headers.get("x-request-id")
        self._response_id: str | None = None
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
        import openai

        try:
            async for chunk in self._sdk:
                text = self._take(chunk)
                if text:
                    self._parts.append(text)
                    yield text
        except openai.APIError as error:
            raise _failure(error, self._where) from error
        except ValueError as error:  # a chunk that is not JSON
            raise PermanentStepError(
                f"{self._where}: a stream chunk is not JSON ({error})",
                reason="invalid_response",
            ) from error

    def _take(self, chunk: ChatCompletionChunk) -> str:
        """Read one chunk: remember usage, finish reason, model; return its text."""
        self._chunks += 1
        if chunk.usage is not None:
            self._usage = usage_of(chunk.usage.to_dict())
        if chunk.model:
            self._model = chunk.model
        if chunk.id:
            self._response_id = chunk.id
        if self._id is None and chunk.id:
            self._id = chunk.id
        if not chunk.choices:
            return ""
        choice = chunk.choices[0]
        if choice.finish_reason:
            self._finish_reason = str(choice.finish_reason)
        content = choice.delta.content if choice.delta is not None else None
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
            response_id=self._response_id,
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
        return finish(check_stop_reason(response, self._request, self._where), self._attempt)

    async def aclose(self) -> None:
        await self._deltas.aclose()
        await self._sdk.close()


def _response(completion: Any, request: LLMRequest, where: str) -> LLMResponse:
    """The :class:`LLMResponse` of a ``ChatCompletion``."""
    body = completion.to_dict() if hasattr(completion, "to_dict") else None
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(body, dict) or not choices or not isinstance(choices[0], dict):
        raise PermanentStepError(
            f"{where}: the answer is not a chat completion{failures.snippet(str(completion))}",
            reason="invalid_response",
        )
    choice = choices[0]
    found = choice.get("message")
    message: dict[str, Any] = found if isinstance(found, dict) else {}
    request_id = getattr(completion, "_request_id", None) or body.get("id")
    response_id = body.get("id")
    return LLMResponse(
        text=str(message.get("content") or ""),
        stop_reason=choice.get("finish_reason"),
        usage=usage_of(body.get("usage")),
        model=str(body.get("model") or request.model),
        request_id=str(request_id) if request_id else None,
        raw=body,
        response_id=str(response_id) if response_id else None,
    )


def body_of(request: LLMRequest, stream: bool, attempt: Attempt | None = None) -> dict[str, Any]:
    """The keyword arguments of ``chat.completions.create`` (the request's JSON body) for
    ``request``.

    Args:
        request: the call.
        stream: ask for server-sent events (with a final usage chunk).
        attempt: the structured-output mode and prepared schema
            (:mod:`plandag.models.structured`); None: strict mode with the request's
            schema prepared for OpenAI.

    Returns:
        ``{"model", "messages", "max_tokens", ["tools", "tool_choice",
        "parallel_tool_calls"], ["stop"], ["temperature"], ["response_format"],
        ["stream", "stream_options"]}``.
    """
    if attempt is None:
        attempt = SchemaModes("openai", ("strict",), "").attempts(request)[0]
    messages: list[dict[str, Any]] = []
    system = attempt.system(request.system)
    if system:
        messages.append({"role": "system", "content": system})
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
    if attempt.mode == "strict" and attempt.prepared is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": request.schema_name,
                "schema": attempt.prepared.schema,
                "strict": True,
            },
        }
    elif attempt.mode == "json":
        body["response_format"] = {"type": "json_object"}
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


def _schema_refusal(error: openai.APIStatusError, attempt: Attempt) -> bool:
    """Whether an HTTP error refuses the request's structured-output mode."""
    from plandag.models.structured import is_schema_refusal

    if attempt.mode not in ("strict", "json"):
        return False
    body = error.body
    param = body.get("param") if isinstance(body, Mapping) else None
    return is_schema_refusal(error.status_code, error.message, param)


def _failure(error: openai.APIError, where: str) -> StepError:
    """The step error an SDK error becomes (table in :mod:`plandag.models.base`)."""
    import httpx2
    import openai

    if isinstance(error, openai.APIStatusError):
        detail = error.message
        if isinstance(error.body, str) and error.body.strip() and error.body not in detail:
            detail = f"{detail}: {error.body}"  # a body that is not JSON, as it came
        return failures.status_failure(error.status_code, error.response.headers, detail, where)
    if isinstance(error, openai.APIConnectionError):
        cause = error.__cause__
        if isinstance(cause, httpx2.TransportError):
            return failures.transport_failure(cause, where)
        return failures.transport_failure(error, where)
    return _stream_error(error.body, error.message, where)


def _stream_error(error: object, message: str, where: str) -> StepError:
    """The step error a ``{"error": ...}`` chunk in the middle of a stream becomes."""
    if not isinstance(error, Mapping):
        return failures.stream_event_failure(None, message, where)
    error_type = error.get("type")
    code = error.get("code")
    kind = str(error_type) if isinstance(error_type, str) else None
    if isinstance(code, int) and not isinstance(code, bool) and (code == 429 or code >= 500):
        kind = kind if kind in ("overloaded_error", "rate_limit_error") else "server_error"
    detail = str(error.get("message") or json.dumps(error))
    return failures.stream_event_failure(kind, detail, where)
