"""The Anthropic Messages API through the official ``anthropic`` SDK (async client).

The SDK client is built with ``max_retries=0``: plandag owns retries
(:func:`plandag.models.calls.call_with_retries`), so one plandag attempt is exactly one
HTTP request. Structured output is the SDK's JSON-schema output format,
``output_config={"format": {"type": "json_schema", "schema": ...}}``
(https://docs.anthropic.com/en/docs/build-with-claude/structured-outputs). Streaming is
``client.messages.stream(...)``; its text deltas are handed on as they arrive.

The SDK in use (2.14) has no ``temperature`` parameter on ``messages.create``: requests are
sent at the model's default temperature, and :attr:`LLMRequest.temperature` is ignored here.

Errors are mapped as in :mod:`plandag.models.base`. A mid-stream ``error`` event
reaches us as the SDK's ``APIStatusError`` carrying the stream's own status (200); it is
told apart from an HTTP error by that status and mapped by the event's ``error.type``.
The SDK is imported when a client is built, so importing this module stays cheap.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from plandag.errors import PermanentStepError, StepError
from plandag.models import failures, telemetry
from plandag.models.base import (
    LLMRequest,
    LLMResponse,
    LLMStream,
    MissingAPIKeyError,
    Usage,
    check_stop_reason,
)
from plandag.models.structured import (
    Attempt,
    SchemaModes,
    SchemaRefusal,
    finish,
    is_schema_refusal,
)

if TYPE_CHECKING:
    import anthropic
    import httpx2
    from anthropic.lib.streaming import AsyncMessageStream

__all__ = ["API_KEY_VARIABLE", "AnthropicClient"]

API_KEY_VARIABLE = "ANTHROPIC_API_KEY"
"""The environment variable the API key is read from when none is given."""


class AnthropicClient:
    """An :class:`~plandag.models.base.LLMClient` for the Anthropic Messages API.

    Args:
        api_key: the API key; default: the ``ANTHROPIC_API_KEY`` environment variable.
        base_url: the API's base URL (``http://127.0.0.1:PORT`` for the local test server
            of ``plandag.testing``); default: the SDK's (``ANTHROPIC_BASE_URL`` or
            https://api.anthropic.com).
        timeout_s: seconds for each phase of a request (connect, read, write, pool);
            default 600. Given explicitly, it also spares the SDK's refusal of long
            non-streaming requests.
        http_client: an ``httpx2.AsyncClient`` for the SDK to use (tests: one on an
            ``httpx2.MockTransport``); default: the SDK's own.
        prompt_cache: send each request's ``cache_control`` breakpoints
            (:attr:`LLMRequest.cache`); False sends none, whatever the requests ask (to
            measure without caching, or for a gateway that refuses the field).
        notice: where a change of structured-output mode is said, one line (default:
            stderr; :mod:`plandag.models.structured`).

    Raises:
        MissingAPIKeyError: no key given and ``ANTHROPIC_API_KEY`` unset or empty; raised
            here, before any request.

    Attributes:
        provider: ``"anthropic"``.
        sdk: the underlying ``anthropic.AsyncAnthropic`` (``max_retries=0``, its own
            OpenTelemetry spans off: :mod:`plandag.models.telemetry`).
        base_url: the API's base URL as the SDK resolved it.
        schema_modes: the structured-output modes the server accepts, as learnt.
    """

    provider = "anthropic"
    sends_temperature = False
    """The SDK in use has no ``temperature`` parameter: none is sent (or recorded)."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout_s: float = 600.0,
        http_client: httpx2.AsyncClient | None = None,
        prompt_cache: bool = True,
        notice: Callable[[str], None] | None = None,
    ) -> None:
        self.prompt_cache = prompt_cache
        key = api_key if api_key is not None else os.environ.get(API_KEY_VARIABLE)
        if not key:
            raise MissingAPIKeyError(
                f"no Anthropic API key: set {API_KEY_VARIABLE} (or pass api_key=...); "
                "for offline tests point base_url at plandag.testing's local server with "
                "any key",
                variable=API_KEY_VARIABLE,
            )
        import anthropic

        self.schema_modes = SchemaModes(
            "anthropic", ("strict", "prompt"), f"anthropic {base_url or 'API'}", notice
        )
        # the SDK's own spans off: plandag's chat span is the one span of each call
        # (plandag.models.telemetry)
        self.sdk: anthropic.AsyncAnthropic = anthropic.AsyncAnthropic(
            api_key=key,
            base_url=base_url,
            max_retries=0,
            timeout=timeout_s,
            http_client=http_client,
            open_telemetry=telemetry.sdk_options(),  # type: ignore[arg-type]
        )
        self.base_url = str(self.sdk.base_url)

    async def __aenter__(self) -> AnthropicClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the SDK client's connections."""
        await self.sdk.close()

    def _where(self, request: LLMRequest) -> str:
        return f"anthropic {request.model} POST /v1/messages"

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Send ``request`` with ``messages.create`` and return the whole answer.

        Args:
            request: the call (its ``temperature`` is not sent, see the module docstring).

        Returns:
            The :class:`LLMResponse` (``raw``: the SDK's ``Message``).

        Raises:
            TruncatedResponseError: stop reason ``max_tokens`` (or the context window).
            ModelRefusalError: stop reason ``refusal``.
            StepError: every other failure, mapped as in :mod:`plandag.models.base`.
        """
        where = self._where(request)
        attempts = self.schema_modes.attempts(request)
        for number, attempt in enumerate(attempts):
            try:
                message = await self._create(request, attempt)
            except SchemaRefusal as refusal:
                if self.schema_modes.gives_up(request, attempt, refusal):
                    raise refusal.mapped from refusal
                self.schema_modes.refused(attempt, refusal)
                if number + 1 < len(attempts):
                    continue
                raise refusal.mapped from refusal
            response = _response(message, getattr(message, "_request_id", None))
            return finish(check_stop_reason(response, request, where), attempt)
        raise AssertionError("unreachable: at least one attempt")

    async def _create(self, request: LLMRequest, attempt: Attempt) -> Any:
        """One ``messages.create``; failures mapped (a refusal of the output format as
        :class:`SchemaRefusal`)."""
        import anthropic

        where = self._where(request)
        try:
            return await self.sdk.messages.create(
                **_params(request, self.prompt_cache, attempt),
                extra_headers=telemetry.trace_headers() or None,
            )
        except anthropic.APIStatusError as error:
            mapped = _failure(error, where)
            if _schema_refusal(error, attempt):
                raise SchemaRefusal(error.status_code, error.message, mapped) from error
            raise mapped from error
        except anthropic.APIError as error:
            raise _failure(error, where) from error
        except Exception as error:
            cause = _transport_cause(error, where)
            if cause is None:
                raise
            raise cause from error

    async def count_tokens(self, request: LLMRequest) -> int:
        """The input tokens ``request`` would be billed for, from the API's free counting
        endpoint (``messages.count_tokens``, ``POST /v1/messages/count_tokens``,
        https://docs.anthropic.com/en/docs/build-with-claude/token-counting): the system
        prompt, messages, tools and output schema as they would be sent. Not an attempt
        of the call: it costs nothing and is not recorded.

        Raises:
            StepError: the count failed, mapped as in :mod:`plandag.models.base`.
        """
        import anthropic

        where = f"anthropic {request.model} POST /v1/messages/count_tokens"
        params = _params(request, self.prompt_cache, self.schema_modes.attempts(request)[0])
        params.pop("max_tokens")
        params.pop("stop_sequences", None)
        try:
            counted = await self.sdk.messages.count_tokens(**params)
        except anthropic.APIError as error:
            raise _failure(error, where) from error
        except Exception as error:
            mapped = _transport_cause(error, where)
            if mapped is None:
                raise
            raise mapped from error
        return int(counted.input_tokens)

    @contextlib.asynccontextmanager
    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStream]:
        """Send ``request`` with ``messages.stream`` and hand on its text deltas.

        ``async with client.stream(request) as stream:`` sends the request (HTTP and
        connection failures are raised here); ``async for delta in stream`` yields the
        text as it arrives; ``await stream.final_response()`` returns the whole answer.

        Raises:
            TruncatedResponseError: from ``final_response``, stop reason ``max_tokens``.
            StepError: every other failure, mapped as in :mod:`plandag.models.base`
                (a mid-stream ``overloaded_error`` event → :class:`TransientStepError`).
        """
        import anthropic

        where = self._where(request)
        attempts = self.schema_modes.attempts(request)
        for number, attempt in enumerate(attempts):
            manager = self.sdk.messages.stream(
                **_params(request, self.prompt_cache, attempt),
                extra_headers=telemetry.trace_headers() or None,
            )
            try:
                sdk_stream = await manager.__aenter__()
            except anthropic.APIStatusError as error:
                mapped = _failure(error, where)
                refusal = SchemaRefusal(error.status_code, error.message, mapped)
                if _schema_refusal(error, attempt) and not self.schema_modes.gives_up(
                    request, attempt, refusal
                ):
                    self.schema_modes.refused(attempt, refusal)
                    if number + 1 < len(attempts):
                        continue
                raise mapped from error
            except anthropic.APIError as error:
                raise _failure(error, where) from error
            break
        stream = _AnthropicStream(sdk_stream, request, where, attempt)
        try:
            yield stream
        finally:
            await stream.aclose()


class _AnthropicStream:
    """One open ``messages.stream``: text deltas, usage so far, the final response."""

    def __init__(
        self,
        sdk_stream: AsyncMessageStream[Any],
        request: LLMRequest,
        where: str,
        attempt: Attempt,
    ) -> None:
        self._attempt = attempt
        self._sdk = sdk_stream
        self._request = request
        self._where = where
        self._parts: list[str] = []
        self._deltas = self._read()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._deltas

    @property
    def text(self) -> str:
        return "".join(self._parts)

    @property
    def usage(self) -> Usage:
        snapshot = self._snapshot()
        return _usage(snapshot.usage) if snapshot is not None else Usage()

    def _snapshot(self) -> Any:
        try:
            return self._sdk.current_message_snapshot
        except AssertionError:  # no message_start yet
            return None

    async def _read(self) -> AsyncGenerator[str, None]:
        import anthropic

        try:
            async for event in self._sdk:
                if event.type == "content_block_delta" and event.delta.type == "text_delta":
                    text = event.delta.text
                    if text:
                        self._parts.append(text)
                        yield text
        except anthropic.APIError as error:
            raise _failure(error, self._where) from error
        except Exception as error:
            mapped = _transport_cause(error, self._where)
            if mapped is None:
                raise
            raise mapped from error

    async def final_response(self) -> LLMResponse:
        async for _ in self._deltas:
            pass
        snapshot = self._snapshot()
        if snapshot is None:
            raise PermanentStepError(
                f"{self._where}: the stream ended without a message", reason="empty_stream"
            )
        response = _response(snapshot, self._sdk.request_id)
        return finish(check_stop_reason(response, self._request, self._where), self._attempt)

    async def aclose(self) -> None:
        await self._deltas.aclose()
        await self._sdk.close()


CACHE_CONTROL: dict[str, str] = {"type": "ephemeral"}
"""The breakpoint marker of Anthropic's prompt caching (a 5-minute cache)."""


def _params(
    request: LLMRequest, prompt_cache: bool = True, attempt: Attempt | None = None
) -> dict[str, Any]:
    """The keyword arguments of ``messages.create`` / ``messages.stream`` for ``request``.

    The output schema is the request's, prepared for Anthropic's structured outputs
    (:func:`~plandag.models.schemas.prepare_schema`), in ``output_config.format``; in
    ``prompt`` mode (``attempt``, :mod:`plandag.models.structured`) it is stated in the
    system prompt instead.

    With ``prompt_cache`` and ``request.cache`` other than ``"none"``, the fixed prefix
    ends with a ``cache_control`` breakpoint: the system prompt (sent as one text block)
    or, without one, the last tool; with ``"conversation"``, the last block of the last
    message too (the API caches tools, then system, then messages, up to each breakpoint).
    """
    if attempt is None:
        attempt = SchemaModes("anthropic", ("strict",), "").attempts(request)[0]
    cache = request.cache if prompt_cache else "none"
    system = attempt.system(request.system)
    messages: list[dict[str, Any]] = [
        {"role": message["role"], "content": message["content"]} for message in request.messages
    ]
    params: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": messages,
    }
    if system:
        params["system"] = system
    if request.stop_sequences:
        params["stop_sequences"] = list(request.stop_sequences)
    if request.tools:
        params["tools"] = [dict(definition) for definition in request.tools]
    if request.tool_choice is not None:
        params["tool_choice"] = dict(request.tool_choice)
    if attempt.mode == "strict" and attempt.prepared is not None:
        params["output_config"] = {
            "format": {"type": "json_schema", "schema": attempt.prepared.schema}
        }
    if cache == "none":
        return params
    if system:
        params["system"] = [{"type": "text", "text": system, "cache_control": dict(CACHE_CONTROL)}]
    elif request.tools:
        params["tools"][-1] = {**params["tools"][-1], "cache_control": dict(CACHE_CONTROL)}
    if cache == "conversation":
        last = messages[-1]
        content = last["content"]
        blocks: list[dict[str, Any]] = (
            [{"type": "text", "text": content}]
            if isinstance(content, str)
            else [dict(block) for block in content]
        )
        if blocks and blocks[-1].get("text", None) != "":
            blocks[-1] = {**blocks[-1], "cache_control": dict(CACHE_CONTROL)}
            messages[-1] = {"role": last["role"], "content": blocks}
    return params


def _usage(usage: Any) -> Usage:
    """The SDK's ``Usage`` as ours (absent cache counts are 0)."""
    return Usage(
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        cache_creation_input_tokens=usage.cache_creation_input_tokens or 0,
        cache_read_input_tokens=usage.cache_read_input_tokens or 0,
    )


def _response(message: Any, request_id: str | None) -> LLMResponse:
    text = "".join(block.text for block in message.content if block.type == "text")
    return LLMResponse(
        text=text,
        stop_reason=message.stop_reason,
        usage=_usage(message.usage),
        model=message.model,
        request_id=request_id,
        raw=message,
        response_id=getattr(message, "id", None),
    )


def _error_type(body: object) -> str | None:
    """``error.type`` of an Anthropic error body ``{"type": "error", "error": {...}}``."""
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict) and isinstance(inner.get("type"), str):
            return str(inner["type"])
    return None


def _failure(error: anthropic.APIError, where: str) -> StepError:
    """The step error an SDK error becomes (table in :mod:`plandag.models.base`)."""
    import anthropic
    import httpx2

    if isinstance(error, anthropic.APIStatusError):
        status = error.response.status_code
        if status >= 400:
            return failures.status_failure(status, error.response.headers, error.message, where)
        return failures.stream_event_failure(_error_type(error.body), error.message, where)
    if isinstance(error, anthropic.APIConnectionError):
        cause = error.__cause__
        if isinstance(cause, httpx2.TransportError):
            return failures.transport_failure(cause, where)
        return failures.transport_failure(error, where)
    return PermanentStepError(f"{where}: {type(error).__name__}: {error}", reason="llm_error")


def _transport_cause(error: Exception, where: str) -> StepError | None:
    """An ``httpx2`` transport error raised while reading a body, mapped; else None."""
    import httpx2

    if isinstance(error, httpx2.TransportError):
        return failures.transport_failure(error, where)
    return None


def _schema_refusal(error: anthropic.APIStatusError, attempt: Attempt) -> bool:
    """Whether an HTTP error refuses the request's output format."""
    if attempt.mode != "strict":
        return False
    return is_schema_refusal(error.status_code, error.message)
