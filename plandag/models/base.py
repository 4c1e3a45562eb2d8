"""The provider interface every LLM client implements.

A call is an :class:`LLMRequest` (system prompt, messages, ``max_tokens``, an optional JSON
schema for structured output) answered by an :class:`LLMResponse` (text, stop reason,
:class:`Usage`). An :class:`LLMClient` answers it whole (:meth:`LLMClient.complete`) or as a
stream of text deltas (:meth:`LLMClient.stream`), so a streaming planner can parse partial
JSON as it arrives.

Every failure a client raises is one of plandag's step errors (``plandag.errors``), chosen
by the same rule for every provider:

=============================================  =========================================
what happened                                  error raised (``reason``)
=============================================  =========================================
HTTP 429                                       :class:`TransientStepError` with the
                                               server's Retry-After (``retry-after-ms``
                                               first), ``before_effect=True`` (``http_429``)
HTTP 500-599, 529 "overloaded" included        :class:`TransientStepError` with Retry-After
                                               when sent (``http_500`` ... ``http_529``)
an error event in the middle of a stream       :class:`TransientStepError` for
(``overloaded_error``, ``api_error``,          ``overloaded_error``/``api_error``/
``rate_limit_error``...)                       ``rate_limit_error``/``timeout_error``
                                               (reason: the event's type), else
                                               :class:`PermanentStepError`
connection refused, DNS failure, connect or    :class:`NotStartedError` (``connect_error``,
pool timeout                                   ``connect_timeout``): nothing was sent
read timeout after sending                     :class:`TransientStepError` (``timeout``)
connection broken after sending                :class:`TransientStepError` (``network_error``)
any other HTTP status >= 400                   :class:`PermanentStepError` (``http_400``...)
output cut off at ``max_tokens``               :class:`TruncatedResponseError`
(``max_tokens`` / ``length``)                  (``max_tokens``): never a shorter result
the model refused (``refusal``)                :class:`ModelRefusalError` (``refusal``)
=============================================  =========================================

Retries belong to plandag (:func:`plandag.models.calls.call_with_retries`), never to
the provider's SDK: the Anthropic client is built with ``max_retries=0``, so attempts never
multiply.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Literal, Protocol, TypedDict

from plandag.errors import BudgetRefusedError, InputError, PermanentStepError, StepTimeoutError

__all__ = [
    "BudgetRefusedError",
    "ChatMessage",
    "DeadlineReachedError",
    "LLMClient",
    "LLMRequest",
    "LLMResponse",
    "LLMStream",
    "MissingAPIKeyError",
    "ModelRefusalError",
    "PromptCache",
    "TokenCounter",
    "TruncatedResponseError",
    "UnpricedModelError",
    "UnusableResponseError",
    "Usage",
    "check_stop_reason",
    "estimate_input_tokens",
]

BYTES_PER_TOKEN = 3
"""UTF-8 bytes per token assumed when estimating a prompt's size without a provider's
token-counting endpoint (a conservative figure: see :func:`estimate_input_tokens`)."""

TRANSIENT_STREAM_ERRORS = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "timeout_error", "server_error"}
)
"""Error types of a mid-stream error event that a later attempt may not meet again (the
Anthropic API's error types, https://docs.anthropic.com/en/api/errors, plus OpenAI's
``server_error``)."""


class ChatMessage(TypedDict):
    """One turn of the conversation: ``{"role": "user" | "assistant", "content": ...}``.

    ``content`` is text, or a list of the Messages API's content blocks (``text``,
    ``tool_use``, ``tool_result``) for a conversation with native tool use (the ReAct
    baseline of ``plandag.react``); the Anthropic client sends blocks as they are.
    """

    role: Literal["user", "assistant"]
    content: str | list[dict[str, Any]]


@dataclasses.dataclass(frozen=True, slots=True)
class Usage:
    """Tokens one call consumed, as the provider reported them.

    Attributes:
        input_tokens: prompt tokens billed at the input price (for Anthropic, those not
            read from or written to the prompt cache; for OpenAI-compatible servers, the
            prompt tokens minus the cached ones).
        output_tokens: generated tokens.
        cache_creation_input_tokens: prompt tokens written to the cache.
        cache_read_input_tokens: prompt tokens read from the cache.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Every token of the call, cached ones included (what a token cap counts)."""
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_creation_input_tokens
            + self.cache_read_input_tokens
        )


PromptCache = Literal["none", "prefix", "conversation"]
"""What a request lets the provider cache (:attr:`LLMRequest.cache`)."""


@dataclasses.dataclass(frozen=True, slots=True)
class LLMRequest:
    """One call to a model.

    Attributes:
        model: the provider's model name (``claude-opus-4-6``, ``llama3.1:8b``...).
        messages: the conversation, oldest first; the last one is usually the user's.
        max_tokens: the most output tokens the model may produce (>= 1). Output cut off
            there raises :class:`TruncatedResponseError`.
        system: the system prompt ("" for none).
        json_schema: a JSON schema the output must follow (structured output), or None for
            free text.
        schema_name: the schema's name where a provider asks for one (OpenAI's
            ``response_format.json_schema.name``: letters, digits, ``_`` and ``-``).
        stop_sequences: strings that end the output when generated.
        temperature: sampling temperature, or None for the provider's default. Sent to
            OpenAI-compatible servers; the Anthropic SDK in use (2.14) has no such
            parameter on ``messages.create``, so the Anthropic client does not send it.
        tools: tool definitions for native tool use, in the Messages API's form
            (``{"name", "description", "input_schema"}``); () for none. The
            OpenAI-compatible client sends them as functions.
        tool_choice: the Messages API's ``tool_choice`` (``{"type": "auto",
            "disable_parallel_tool_use": True}``...), or None for the provider's default.
        cache: what the provider may keep in its prompt cache (Anthropic, "Prompt
            caching": ``cache_control`` breakpoints, writes billed 1.25x and reads 0.1x the
            input price): ``"prefix"`` (default) the fixed prefix, tools and system prompt
            (the planner's rules, tool signatures and example); ``"conversation"`` also the
            conversation up to its last message (an agent loop that resends a growing
            conversation, ReAct); ``"none"`` nothing. Providers that cache on their own
            (OpenAI-compatible servers) ignore it.
        narrower_schemas: schemas to send instead of ``json_schema``, in order, when the
            server refuses it as too large (a plan schema over the plan's own subset of
            tools, say); each accepts only answers ``json_schema`` accepts. () for none
            (:mod:`plandag.models.structured`).
        raise_if_too_large: when the server refuses the schema as too large and no narrower
            schema is left, raise its refusal (a :class:`PermanentStepError`, ``http_400``)
            instead of asking again without strict mode: for a caller that narrows the
            schema itself (the planner's subset of tools).

    Raises:
        ValueError: ``max_tokens`` < 1, no messages, or a temperature that is not finite
            and >= 0.
    """

    model: str
    messages: Sequence[ChatMessage]
    max_tokens: int
    system: str = ""
    json_schema: Mapping[str, Any] | None = None
    schema_name: str = "output"
    stop_sequences: Sequence[str] = ()
    temperature: float | None = None
    tools: Sequence[Mapping[str, Any]] = ()
    tool_choice: Mapping[str, Any] | None = None
    cache: PromptCache = "prefix"
    narrower_schemas: Sequence[Mapping[str, Any]] = ()
    raise_if_too_large: bool = False

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, not {self.max_tokens}")
        if not self.messages:
            raise ValueError("a request needs at least one message")
        if self.temperature is not None and (
            not math.isfinite(self.temperature) or self.temperature < 0
        ):
            raise ValueError(f"temperature must be a finite number >= 0, not {self.temperature}")


@dataclasses.dataclass(frozen=True, slots=True)
class LLMResponse:
    """A complete answer.

    Attributes:
        text: the generated text (every text block joined, in order).
        stop_reason: why generation stopped, in the provider's words (``end_turn``,
            ``stop_sequence``, ``stop``...), or None when not reported.
        usage: tokens consumed.
        model: the model that answered, as the provider named it.
        request_id: the provider's id for the request (for support tickets), or None.
        raw: the provider's own response object (the SDK's ``Message``, or the decoded
            JSON of a chat completion); for streams, the final accumulated message.
        schema_mode: how the request's ``json_schema`` was asked for (``strict``: the
            provider enforced it; ``json``: JSON mode; ``prompt``: stated in the prompt;
            :mod:`plandag.models.structured`), None for a request without one.
        schema_errors: the answer's violations of the schema, found by plandag's own
            validation after ``text`` was brought back to the caller's shape (rules the
            provider did not enforce: bounds it refuses, or everything in ``json`` and
            ``prompt`` modes), one ``"$.path: message"`` line each; () when it validates
            or there is no schema.
        response_id: the provider's id of the answer (Anthropic's message id
            ``msg_...``, a chat completion's ``chatcmpl-...``), or None when not reported.
    """

    text: str
    stop_reason: str | None
    usage: Usage
    model: str
    request_id: str | None = None
    raw: Any = dataclasses.field(default=None, repr=False, compare=False)
    schema_mode: Literal["strict", "json", "prompt"] | None = None
    schema_errors: tuple[str, ...] = ()
    response_id: str | None = None


class LLMStream(Protocol):
    """An open streamed call: iterate it for text deltas, then ask for the whole response.

    ``async for delta in stream`` yields each piece of text as it arrives (non-empty
    strings); errors arriving mid-stream are raised from the iteration, already mapped to
    plandag's step errors. :meth:`final_response` reads whatever is left and returns the
    :class:`LLMResponse`, raising :class:`TruncatedResponseError` when the output was cut at
    ``max_tokens``.
    """

    def __aiter__(self) -> AsyncIterator[str]:
        """The text deltas, in order."""
        ...

    @property
    def text(self) -> str:
        """The text received so far."""
        ...

    @property
    def usage(self) -> Usage:
        """The usage reported so far (what a failed stream had consumed)."""
        ...

    async def final_response(self) -> LLMResponse:
        """Read the rest of the stream and return the whole response.

        Raises:
            TruncatedResponseError: the output was cut off at ``max_tokens``.
            StepError: any failure, mapped as in the module docstring.
        """
        ...


class LLMClient(Protocol):
    """What the planner needs from a model provider.

    Attributes:
        provider: a short name for records and messages (``anthropic``, ``openai``).
    """

    provider: str

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Send ``request`` and return the whole answer.

        Raises:
            TruncatedResponseError: the output was cut off at ``max_tokens``.
            StepError: any other failure, mapped as in the module docstring.
        """
        ...

    def stream(self, request: LLMRequest) -> AbstractAsyncContextManager[LLMStream]:
        """Send ``request`` as a stream: ``async with client.stream(r) as s: async for ...``.

        Opening the context sends the request; failures before the first event (HTTP
        status, connection) are raised from ``__aenter__``, later ones from the iteration.
        """
        ...

    async def aclose(self) -> None:
        """Release the client's connections."""
        ...


class TokenCounter(Protocol):
    """A client whose provider counts a request's input tokens for free (Anthropic's
    ``POST /v1/messages/count_tokens``); :func:`~plandag.models.calls.call_with_retries`
    reserves that count instead of an estimate. A counting request is not an attempt: it
    is not recorded and costs nothing."""

    async def count_tokens(self, request: LLMRequest) -> int:
        """The input tokens ``request`` would be billed for.

        Raises:
            StepError: the count failed (the caller falls back to the estimate).
        """
        ...


# -- errors ---------------------------------------------------------------------------------


class UnusableResponseError(PermanentStepError):
    """The model answered, but the answer cannot be used; a retry would get the same.

    Attributes:
        response: the answer received (its text and usage are those of the call, so its
            tokens are still counted and priced).
    """

    def __init__(self, message: str, *, response: LLMResponse, reason: str | None = None) -> None:
        super().__init__(message, reason=reason)
        self.response = response


class TruncatedResponseError(UnusableResponseError):
    """The model's output was cut off at ``max_tokens`` (or at the context window).

    A cut plan is never used as a shorter plan: the call fails, permanently (the same
    request would be cut again). Raise ``max_tokens`` or ask for less. ``reason`` is
    ``max_tokens``, or ``context_window`` when the model's context window was the limit.

    Attributes:
        response: the cut response.
        max_tokens: the request's limit.
    """

    reason = "max_tokens"

    def __init__(
        self, message: str, *, response: LLMResponse, max_tokens: int, reason: str | None = None
    ) -> None:
        super().__init__(message, response=response, reason=reason)
        self.max_tokens = max_tokens


class ModelRefusalError(UnusableResponseError):
    """The model declined to answer (Anthropic's ``refusal`` stop reason, OpenAI's
    ``content_filter`` finish reason); ``reason`` is ``refusal``."""

    reason = "refusal"


class DeadlineReachedError(StepTimeoutError):
    """A model call cannot finish before the run's deadline, so it is not tried (again).

    Raised by :func:`~plandag.models.calls.call_with_retries` instead of waiting when
    the run has no time left, or when the next attempt would start past the deadline (a
    429's ``Retry-After`` longer than the time left, say): the call fails at once rather
    than sleeping into the deadline. A :class:`TimeoutError`; ``reason`` ``deadline``.
    The failure that was not retried is its ``__cause__``.
    """

    reason = "deadline"


class UnpricedModelError(PermanentStepError, LookupError):
    """The price table has no price for a model, and the run has a dollar cap to enforce.

    Without a dollar cap an unpriced model costs 0.0 (its records say ``priced=False``);
    with one, the call is refused before sending: add the model's price to the table.

    Attributes:
        model: the model name looked up.
    """

    reason = "unpriced_model"

    def __init__(self, message: str, *, model: str) -> None:
        super().__init__(message)
        self.model = model


class MissingAPIKeyError(InputError):
    """A client needs an API key and none was given nor found in the environment.

    Raised when the client is built, before any request.

    Attributes:
        variable: the environment variable that was read (``ANTHROPIC_API_KEY``...).
    """

    def __init__(self, message: str, *, variable: str) -> None:
        super().__init__(message)
        self.variable = variable


# -- helpers --------------------------------------------------------------------------------


def estimate_input_tokens(request: LLMRequest) -> int:
    """A conservative count of the prompt's tokens, before sending it, for a provider with
    no token-counting endpoint: the UTF-8 bytes of the serialized request / 3, rounded up.

    Counts the system prompt, every message's content (content blocks as compact JSON),
    the JSON schema and the tool definitions (providers put both in the prompt). BPE
    tokenizers average about four characters a token on English prose and fewer on JSON,
    code and other languages; three *bytes* a token overestimates all of these (a
    Portuguese accent or any non-ASCII character counts two bytes or more), so a call
    reserved with it cannot take spend past a cap by more than its output. Providers with a
    counting endpoint (Anthropic's ``POST /v1/messages/count_tokens``) are asked instead
    (:func:`~plandag.models.calls.call_with_retries`).

    Args:
        request: the call to estimate.

    Returns:
        Estimated input tokens, >= 0.
    """
    size = len(request.system.encode("utf-8"))
    for message in request.messages:
        content = message["content"]
        size += len((content if isinstance(content, str) else _compact(content)).encode("utf-8"))
    if request.json_schema is not None:
        size += len(_compact(request.json_schema).encode("utf-8"))
    if request.tools:
        size += len(_compact(list(request.tools)).encode("utf-8"))
    return -(-size // BYTES_PER_TOKEN)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


def stream_error_kind(error_type: str | None) -> Literal["transient", "permanent"]:
    """Whether a mid-stream error event of type ``error_type`` may pass on a retry.

    Args:
        error_type: the event's ``error.type`` (``overloaded_error``...), or None.

    Returns:
        ``transient`` for the types in :data:`TRANSIENT_STREAM_ERRORS`, else ``permanent``.
    """
    return "transient" if error_type in TRANSIENT_STREAM_ERRORS else "permanent"


_TRUNCATED = {"max_tokens": "max_tokens", "length": "max_tokens"}
_CONTEXT_WINDOW = "model_context_window_exceeded"
_REFUSED = frozenset({"refusal", "content_filter"})


def check_stop_reason(response: LLMResponse, request: LLMRequest, where: str) -> LLMResponse:
    """Return ``response`` when it is whole; raise when the model was cut off or refused.

    Args:
        response: the answer, with the provider's stop reason.
        request: the request it answers (for ``max_tokens``).
        where: what was called, for the message (``anthropic claude-opus-4-6``).

    Returns:
        ``response`` itself.

    Raises:
        TruncatedResponseError: stop reason ``max_tokens`` (Anthropic) or ``length``
            (OpenAI), reason ``max_tokens``; ``model_context_window_exceeded``, reason
            ``context_window``.
        ModelRefusalError: stop reason ``refusal`` (Anthropic) or ``content_filter``
            (OpenAI).
    """
    stop = response.stop_reason
    if stop in _TRUNCATED or stop == _CONTEXT_WINDOW:
        limit = f"max_tokens={request.max_tokens}" if stop in _TRUNCATED else "the context window"
        raise TruncatedResponseError(
            f"{where}: the output was cut off at {limit} after "
            f"{response.usage.output_tokens} output tokens (stop reason {stop!r}); a cut "
            "answer is never used: raise max_tokens or ask for less",
            response=response,
            max_tokens=request.max_tokens,
            reason=_TRUNCATED.get(stop or "", "context_window"),
        )
    if stop in _REFUSED:
        raise ModelRefusalError(
            f"{where}: the model declined to answer (stop reason {stop!r})", response=response
        )
    return response
