"""An in-process model client that calls no provider: :class:`OfflineClient`.

It answers each :class:`~plandag.models.base.LLMRequest` with the text a *responder* (a
function of the request) writes, in the process, with no server, no network and no key.
plandag's offline mode (``--offline``, ``--provider offline``) gives it the extractive
responder of :mod:`plandag.testing.offline`, whose answers are built from the request's own
documents; tests may give it any other.

What a real client does, it does too, so the brakes and the records work unchanged:

* **usage** is estimated the way plandag's local test servers estimate it
  (:mod:`plandag.testing.script`): one token per four characters, rounded up, at least one;
  input counts the system prompt, every message and the JSON schema's canonical JSON;
  output counts the answer. Reservations, the token cap and the records use these figures;
  the model :data:`OFFLINE_MODEL` has no price, so it costs 0.0 (``priced=False``).
* an answer longer than the request's ``max_tokens`` is cut there and raises
  :class:`~plandag.models.base.TruncatedResponseError`, never a shorter result;
* the answer is returned as written (``schema_mode`` None): the caller validates it against
  its schema as it validates any provider's answer that the provider did not check.

Every :class:`~plandag.models.base.LLMResponse` names :data:`OFFLINE_MODEL` as its model and
the client's provider is :data:`OFFLINE_PROVIDER`, so every record says it was made offline.

The extractive responder reads what the jobs and the planner put in a request, so it lives
above them, in :mod:`plandag.testing.offline`; a run that needs the offline client from below
(a resumed or approved segment, ``exec``'s model steps) finds it by name through the
``plandag.models`` entry-point group (:func:`load_offline_client`), as the registry finds the
jobs' tools.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Final

from plandag.errors import InputError
from plandag.models.base import LLMRequest, LLMResponse, LLMStream, Usage, check_stop_reason

if TYPE_CHECKING:
    from plandag.tools.registry import Registry

__all__ = [
    "CHARS_PER_TOKEN",
    "ENTRY_POINT_GROUP",
    "OFFLINE_MODEL",
    "OFFLINE_PROVIDER",
    "OfflineClient",
    "OfflineMessage",
    "Responder",
    "TextBlock",
    "load_offline_client",
    "offline_usage",
]

ENTRY_POINT_GROUP: Final = "plandag.models"
"""The entry-point group whose ``offline`` entry builds the offline model's client (a
function of the run's registry, or None, returning an :class:`OfflineClient`)."""

OFFLINE_PROVIDER: Final = "offline"
"""The provider name of :class:`OfflineClient` (``--provider offline``)."""

OFFLINE_MODEL: Final = "offline-extractive"
"""The model name every offline answer carries: extracts of the request's documents, not a
model's words."""

CHARS_PER_TOKEN: Final = 4
"""Characters counted as one token (the rule of plandag's local test servers)."""

Responder = Callable[[LLMRequest], str]
"""Writes the answer's text for a request (JSON text when the request has a schema)."""


def _tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True, default=str)


def offline_usage(request: LLMRequest, answer: str) -> Usage:
    """The usage of one offline call, estimated as the local test servers estimate it.

    Args:
        request: the call.
        answer: the answer's text.

    Returns:
        ``input_tokens``: ``ceil(characters / 4)`` of the system prompt, each message's
        content (content blocks as compact JSON) and the schema's canonical JSON, at least
        1; ``output_tokens``: the same of ``answer``, at least 1.
    """
    size = len(request.system)
    for message in request.messages:
        content = message["content"]
        size += len(content if isinstance(content, str) else _canonical(content))
    if request.json_schema is not None:
        size += len(_canonical(request.json_schema))
    return Usage(
        input_tokens=max(1, math.ceil(size / CHARS_PER_TOKEN)),
        output_tokens=max(1, _tokens(answer)),
    )


@dataclasses.dataclass(frozen=True, slots=True)
class TextBlock:
    """A text content block of an offline answer (the Messages API's ``{"type": "text"}``)."""

    text: str
    type: str = "text"


@dataclasses.dataclass(frozen=True, slots=True)
class OfflineMessage:
    """An offline answer's ``raw``: its content blocks, shaped as the Messages API's (one
    text block: the offline model never calls a tool), so a ReAct loop reads it as it reads
    an Anthropic message."""

    content: tuple[TextBlock, ...]


class OfflineClient:
    """An :class:`~plandag.models.base.LLMClient` answered in the process by ``responder``.

    Args:
        responder: writes the answer of a request (``plandag.testing.offline.OfflineModel``
            for plandag's offline mode).

    Attributes:
        provider: :data:`OFFLINE_PROVIDER`.
        calls: requests answered so far.
    """

    provider: str = OFFLINE_PROVIDER

    def __init__(self, responder: Responder) -> None:
        self.responder = responder
        self.calls = 0

    def _answer(self, request: LLMRequest) -> LLMResponse:
        self.calls += 1
        text = self.responder(request)
        usage = offline_usage(request, text)
        stop = "end_turn"
        if usage.output_tokens > request.max_tokens:
            text = text[: request.max_tokens * CHARS_PER_TOKEN]
            usage = Usage(input_tokens=usage.input_tokens, output_tokens=request.max_tokens)
            stop = "max_tokens"
        response = LLMResponse(
            text=text,
            stop_reason=stop,
            usage=usage,
            model=OFFLINE_MODEL,
            request_id=f"offline-{self.calls}",
            raw=OfflineMessage((TextBlock(text),)),
            response_id=f"offline-{self.calls}",
        )
        return check_stop_reason(response, request, f"{OFFLINE_PROVIDER} {OFFLINE_MODEL}")

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """The answer to ``request``.

        Raises:
            TruncatedResponseError: the answer is longer than ``request.max_tokens``.
        """
        return self._answer(request)

    @contextlib.asynccontextmanager
    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStream]:
        """The answer to ``request`` as a stream of text pieces (of at most 64 characters);
        ``final_response`` raises :class:`~plandag.models.base.TruncatedResponseError` when
        the answer is longer than ``request.max_tokens``."""
        yield _OfflineStream(self, request)

    async def aclose(self) -> None:
        """Nothing to release: the client holds no connection."""


class _OfflineStream:
    def __init__(self, client: OfflineClient, request: LLMRequest) -> None:
        self._client = client
        self._request = request
        self._text = ""
        self._response: LLMResponse | None = None
        self._error: Exception | None = None

    def _whole(self) -> LLMResponse:
        if self._response is None and self._error is None:
            try:
                self._response = self._client._answer(self._request)
            except Exception as error:
                self._error = error
        if self._error is not None:
            raise self._error
        assert self._response is not None
        return self._response

    async def _pieces(self) -> AsyncIterator[str]:
        try:
            text = self._whole().text
        except Exception as error:
            response = getattr(error, "response", None)
            text = response.text if isinstance(response, LLMResponse) else ""
        for start in range(len(self._text), len(text), 64):
            piece = text[start : start + 64]
            self._text += piece
            yield piece

    def __aiter__(self) -> AsyncIterator[str]:
        return self._pieces()

    @property
    def text(self) -> str:
        return self._text

    @property
    def usage(self) -> Usage:
        return self._response.usage if self._response is not None else Usage()

    async def final_response(self) -> LLMResponse:
        response = self._whole()
        self._text = response.text
        return response


def load_offline_client(registry: Registry | None = None) -> Any:
    """The offline model's client, built by the ``offline`` entry of the
    :data:`ENTRY_POINT_GROUP` group (plandag's own: ``plandag.testing.offline.offline_client``).

    Args:
        registry: the run's tools (the plans of ``run`` use them), or None for the default.

    Returns:
        The client (an :class:`OfflineClient`).

    Raises:
        InputError: no such entry point is installed (plandag installed without its entry
            points: reinstall it).
    """
    from importlib.metadata import entry_points

    found = list(entry_points(group=ENTRY_POINT_GROUP, name=OFFLINE_PROVIDER))
    if not found:
        raise InputError(
            f"the offline model is not installed (no {OFFLINE_PROVIDER!r} entry point in "
            f"the {ENTRY_POINT_GROUP!r} group): reinstall plandag"
        )
    return found[0].load()(registry)
