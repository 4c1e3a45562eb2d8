"""Scripted replies for the local Messages API server (docs/testing.md).

A :class:`Script` is a first-in, first-out queue of replies. Each request to
``POST /v1/messages`` takes the next one: a :class:`ScriptedResponse` (a message, an error,
a stream that breaks) or a :data:`Responder`, a function called with the request's JSON
body that returns the reply. Tests queue replies in the order the code under test will ask::

    script = Script()
    script.push_json({"steps": []})          # first call: a JSON text reply
    script.push_error(529)                   # second call: overloaded
    script.push_responder(lambda body: ScriptedResponse.text(str(len(body["messages"]))))

A script can also be read from a JSON Lines file, one reply a line (:meth:`Script.from_jsonl`,
the format is in :meth:`ScriptedResponse.from_mapping`), for ``python -m plandag.testing``.

Token counts are estimates by the usual rule of thumb for English text and JSON: one token
per four characters, rounded up, at least one (Anthropic's documentation gives "about 3.5
characters per token"; exact counts need the real tokenizer). :func:`estimate_tokens`.
A structured-output schema a request carries is input too (providers bill it: Anthropic
turns ``output_config.format`` into part of the prompt, OpenAI counts ``response_format``'s
schema among the prompt tokens); the servers count it by the same rule over its canonical
JSON, :func:`schema_text`.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from plandag.errors import InputError

__all__ = [
    "ERROR_STATUS",
    "Reply",
    "Responder",
    "Script",
    "ScriptedResponse",
    "estimate_tokens",
    "schema_text",
]

ERROR_STATUS: Mapping[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}
"""The HTTP status the Messages API sends with each error type (docs: "Errors")."""

CHARS_PER_TOKEN = 4
"""Characters counted as one token by :func:`estimate_tokens`."""


def estimate_tokens(text: str) -> int:
    """Tokens in ``text`` by the four-characters-a-token rule: ``max(1, ceil(len(text) / 4))``.

    Args:
        text: any text (the characters are counted, not bytes).

    Returns:
        The estimate, >= 1 (the API never reports zero output tokens, even for "").
    """
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def schema_text(schema: Any) -> str:
    """The text a structured-output schema is counted as input from: its canonical JSON
    (keys sorted, no whitespace, non-ASCII characters as they are), so the same schema
    counts the same however its keys were ordered.

    Args:
        schema: the JSON Schema a request carries (Anthropic ``output_config.format.schema``,
            OpenAI ``response_format.json_schema.schema``).

    Returns:
        The text; :func:`estimate_tokens` of it is the schema's input tokens.
    """
    return json.dumps(
        schema, ensure_ascii=False, separators=(",", ":"), sort_keys=True, default=str
    )


@dataclasses.dataclass(frozen=True, slots=True)
class ScriptedResponse:
    """One reply the server plays: a message, an HTTP error, or a stream that breaks.

    Build one with the class methods (:meth:`text`, :meth:`json`, :meth:`tool_use`,
    :meth:`error`, :meth:`max_tokens`, :meth:`stream_error_after`) rather than by hand.

    Attributes:
        content: the message's content blocks, in order, as the API writes them:
            ``{"type": "text", "text": ...}`` or ``{"type": "tool_use", "id": ..., "name":
            ..., "input": {...}}`` (an ``id`` of None is filled in by the server).
        stop_reason: ``end_turn``, ``max_tokens``, ``stop_sequence`` or ``tool_use``.
        stop_sequence: the stop sequence matched, with ``stop_reason="stop_sequence"``.
        usage: exact usage numbers to report (``input_tokens``, ``output_tokens``,
            ``cache_read_input_tokens``...), each replacing the server's estimate; None to
            estimate them all.
        status: the HTTP status; 200 for a message, 4xx/5xx for an error reply.
        error_type: the error's ``type`` (``overloaded_error``...) for an error reply, None
            for a message.
        error_message: the error's ``message``.
        retry_after: seconds sent in the ``retry-after`` header of an error reply, or None
            for no header.
        headers: more response headers to send, names lower case.
        stream_error_after: for a streamed request, the number of output characters (text,
            and the JSON of tool inputs) sent before an ``error`` event breaks the stream;
            None for a stream that completes. A request that is not streamed gets the error
            as an HTTP error instead (the status of :data:`ERROR_STATUS`).
        stream_error_type: the ``type`` of that error event (default ``overloaded_error``).
        model: the ``model`` to report; None echoes the request's.
    """

    content: tuple[Mapping[str, Any], ...] = ()
    stop_reason: str = "end_turn"
    stop_sequence: str | None = None
    usage: Mapping[str, int] | None = None
    status: int = 200
    error_type: str | None = None
    error_message: str | None = None
    retry_after: float | None = None
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    stream_error_after: int | None = None
    stream_error_type: str = "overloaded_error"
    model: str | None = None

    @property
    def is_error(self) -> bool:
        """True for an HTTP error reply (``error_type`` set or a status other than 200)."""
        return self.error_type is not None or self.status != 200

    @property
    def text_output(self) -> str:
        """The text of every text block, joined (what ``get_final_text()`` would give)."""
        return "".join(str(block["text"]) for block in self.content if block["type"] == "text")

    @classmethod
    def text(
        cls,
        text: str,
        *,
        usage: Mapping[str, int] | None = None,
        stop_reason: str = "end_turn",
    ) -> ScriptedResponse:
        """A message of one text block.

        Args:
            text: the assistant's text.
            usage: exact usage numbers (see the class attributes), or None to estimate.
            stop_reason: default ``end_turn``.
        """
        return cls(content=({"type": "text", "text": text},), usage=usage, stop_reason=stop_reason)

    @classmethod
    def json(cls, value: Any, *, usage: Mapping[str, int] | None = None) -> ScriptedResponse:
        """A text message whose text is ``value`` as compact JSON (what structured output gives).

        Args:
            value: anything :func:`json.dumps` accepts; written with ``separators=(",", ":")``
                and ``ensure_ascii=False``.
            usage: exact usage numbers, or None to estimate.
        """
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        return cls.text(text, usage=usage)

    @classmethod
    def tool_use(
        cls,
        name: str,
        input: Mapping[str, Any],
        *,
        text: str | None = None,
        id: str | None = None,
        usage: Mapping[str, int] | None = None,
    ) -> ScriptedResponse:
        """A message calling one tool: an optional text block, then a ``tool_use`` block.

        Args:
            name: the tool's name.
            input: the tool's input, a JSON object.
            text: text said before the call, or None for none.
            id: the block's id; None lets the server number it (``toolu_local_000001``...).
            usage: exact usage numbers, or None to estimate.

        The stop reason is ``tool_use``.
        """
        blocks: list[Mapping[str, Any]] = []
        if text is not None:
            blocks.append({"type": "text", "text": text})
        blocks.append({"type": "tool_use", "id": id, "name": name, "input": dict(input)})
        return cls(content=tuple(blocks), stop_reason="tool_use", usage=usage)

    @classmethod
    def error(
        cls,
        status: int = 529,
        error_type: str | None = None,
        *,
        message: str | None = None,
        retry_after: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> ScriptedResponse:
        """An HTTP error reply with the API's error body.

        Args:
            status: the HTTP status (429, 500, 529, 400...).
            error_type: the body's ``error.type``; None picks the one the API sends with
                ``status`` (:data:`ERROR_STATUS`), else ``api_error``.
            message: the body's ``error.message``; None for a stock message.
            retry_after: seconds for the ``retry-after`` header, or None for none.
            headers: more headers to send.

        Raises:
            ValueError: ``status`` is below 400, or ``retry_after`` is negative or not finite.
        """
        if status < 400:
            raise ValueError(f"an error reply needs a status >= 400, not {status}")
        if retry_after is not None and (not math.isfinite(retry_after) or retry_after < 0):
            raise ValueError(f"retry_after must be a finite number >= 0, not {retry_after}")
        if error_type is None:
            by_status = {code: name for name, code in ERROR_STATUS.items()}
            error_type = by_status.get(status, "api_error")
        return cls(
            status=status,
            error_type=error_type,
            error_message=message if message is not None else _STOCK_MESSAGES.get(error_type),
            retry_after=retry_after,
            headers=dict(headers or {}),
        )

    @classmethod
    def max_tokens(
        cls, partial_text: str, *, usage: Mapping[str, int] | None = None
    ) -> ScriptedResponse:
        """A text message cut off by the request's ``max_tokens`` (stop reason ``max_tokens``).

        Args:
            partial_text: the text as far as it got.
            usage: exact usage numbers; by default ``output_tokens`` is the request's
                ``max_tokens`` (what the API reports for a cut reply).
        """
        return cls.text(partial_text, usage=usage, stop_reason="max_tokens")

    @classmethod
    def stream_error(
        cls,
        n_chars: int,
        error_type: str = "overloaded_error",
        *,
        text: str | None = None,
        message: str | None = None,
    ) -> ScriptedResponse:
        """A reply whose stream breaks with an ``error`` event after ``n_chars`` characters.

        Args:
            n_chars: output characters sent before the error event (>= 0).
            error_type: the event's ``error.type`` (default ``overloaded_error``).
            text: the text the stream would have carried; None for ``n_chars * 2``
                characters of filler (so the break always falls inside the text).
            message: the event's ``error.message``; None for a stock message.

        Raises:
            ValueError: ``n_chars`` is negative.
        """
        if n_chars < 0:
            raise ValueError(f"n_chars must be >= 0, not {n_chars}")
        if text is None:
            text = ("lorem ipsum " * (n_chars // 6 + 1))[: max(2 * n_chars, 1)]
        return cls(
            content=({"type": "text", "text": text},),
            stream_error_after=n_chars,
            stream_error_type=error_type,
            error_message=message,
        )

    @classmethod
    def from_mapping(cls, item: Mapping[str, Any]) -> ScriptedResponse:
        """A reply from its JSON form (one line of a ``--script`` file).

        The forms, each with optional ``"usage": {...}`` and ``"model": "..."``::

            {"text": "Hello"}
            {"json": {"steps": []}}
            {"tool_use": {"name": "get_weather", "input": {"city": "Recife"}}, "text": "..."}
            {"error": {"status": 529, "type": "overloaded_error", "message": "...",
                       "retry_after": 2}}
            {"max_tokens": "partial text"}
            {"stream_error_after": 10, "text": "...", "error_type": "overloaded_error"}

        Args:
            item: the decoded JSON object.

        Raises:
            ValueError: not one of those forms, or a field of the wrong type.
        """
        keys = set(item)
        extra: dict[str, Any] = {}
        if "usage" in item:
            extra["usage"] = dict(item["usage"])
        if "model" in item:
            extra["model"] = str(item["model"])
        keys -= {"usage", "model"}
        reply: ScriptedResponse
        if "error" in keys and keys == {"error"}:
            spec = item["error"]
            reply = cls.error(
                int(spec.get("status", 529)),
                spec.get("type"),
                message=spec.get("message"),
                retry_after=spec.get("retry_after"),
            )
        elif "stream_error_after" in keys and keys <= {"stream_error_after", "text", "error_type"}:
            reply = cls.stream_error(
                int(item["stream_error_after"]),
                str(item.get("error_type", "overloaded_error")),
                text=item.get("text"),
            )
        elif "tool_use" in keys and keys <= {"tool_use", "text"}:
            spec = item["tool_use"]
            reply = cls.tool_use(
                str(spec["name"]), dict(spec["input"]), text=item.get("text"), id=spec.get("id")
            )
        elif keys == {"json"}:
            reply = cls.json(item["json"])
        elif keys == {"max_tokens"}:
            reply = cls.max_tokens(str(item["max_tokens"]))
        elif keys == {"text"}:
            reply = cls.text(str(item["text"]))
        else:
            raise ValueError(
                f"unknown reply form with keys {sorted(item)}; expected one of text, json, "
                "tool_use, error, max_tokens, stream_error_after (plus usage, model)"
            )
        return dataclasses.replace(reply, **extra) if extra else reply


_STOCK_MESSAGES = {
    "overloaded_error": "Overloaded",
    "rate_limit_error": "This request would exceed the rate limit (scripted).",
    "api_error": "Internal server error (scripted).",
    "invalid_request_error": "Invalid request (scripted).",
}

Responder = Callable[[dict[str, Any]], "ScriptedResponse | str"]
"""``responder(body) -> reply``: called with the request's JSON body (a dict) to make the
reply; a ``str`` is shorthand for :meth:`ScriptedResponse.text`."""

Reply = ScriptedResponse | Responder
"""What a :class:`Script` holds: a fixed reply, or a function that makes one."""


class Script:
    """A thread-safe first-in, first-out queue of replies for ``POST /v1/messages``.

    Args:
        replies: replies to queue at once, in order.

    Each request takes the next reply (:meth:`next_reply`); an empty script makes the
    server answer 500 ``no scripted response left``.
    """

    def __init__(self, replies: Iterable[Reply] = ()) -> None:
        self._lock = threading.Lock()
        self._queue: collections.deque[Reply] = collections.deque(replies)

    def __len__(self) -> int:
        """Replies still queued."""
        with self._lock:
            return len(self._queue)

    def push(self, reply: Reply) -> None:
        """Queue ``reply`` (a :class:`ScriptedResponse` or a :data:`Responder`) last."""
        with self._lock:
            self._queue.append(reply)

    def push_text(self, text: str, *, usage: Mapping[str, int] | None = None) -> None:
        """Queue a text message (:meth:`ScriptedResponse.text`)."""
        self.push(ScriptedResponse.text(text, usage=usage))

    def push_json(self, value: Any, *, usage: Mapping[str, int] | None = None) -> None:
        """Queue a text message whose text is ``value`` as JSON (:meth:`ScriptedResponse.json`)."""
        self.push(ScriptedResponse.json(value, usage=usage))

    def push_tool_use(
        self,
        name: str,
        input: Mapping[str, Any],
        *,
        text: str | None = None,
        id: str | None = None,
        usage: Mapping[str, int] | None = None,
    ) -> None:
        """Queue a tool call (:meth:`ScriptedResponse.tool_use`)."""
        self.push(ScriptedResponse.tool_use(name, input, text=text, id=id, usage=usage))

    def push_error(
        self,
        status: int = 529,
        error_type: str | None = None,
        *,
        message: str | None = None,
        retry_after: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Queue an HTTP error reply (:meth:`ScriptedResponse.error`)."""
        self.push(
            ScriptedResponse.error(
                status, error_type, message=message, retry_after=retry_after, headers=headers
            )
        )

    def push_stream_error_after(
        self,
        n_chars: int,
        error_type: str = "overloaded_error",
        *,
        text: str | None = None,
        message: str | None = None,
    ) -> None:
        """Queue a stream that breaks after ``n_chars`` (:meth:`ScriptedResponse.stream_error`)."""
        self.push(ScriptedResponse.stream_error(n_chars, error_type, text=text, message=message))

    def push_max_tokens(self, partial_text: str, *, usage: Mapping[str, int] | None = None) -> None:
        """Queue a reply cut by ``max_tokens`` (:meth:`ScriptedResponse.max_tokens`)."""
        self.push(ScriptedResponse.max_tokens(partial_text, usage=usage))

    def push_responder(self, responder: Responder) -> None:
        """Queue a function that makes the reply from the request's JSON body (used once)."""
        self.push(responder)

    def clear(self) -> None:
        """Drop every queued reply."""
        with self._lock:
            self._queue.clear()

    def next_reply(self, body: dict[str, Any]) -> ScriptedResponse | None:
        """Take the next reply for a request with JSON ``body``.

        Args:
            body: the request's decoded JSON object, given to a :data:`Responder`.

        Returns:
            The reply, or None when the script is empty.

        Raises:
            Exception: whatever a responder raises (the server answers 500 with it).
            TypeError: a responder returned something other than a ScriptedResponse or str.
        """
        with self._lock:
            if not self._queue:
                return None
            reply = self._queue.popleft()
        return resolve_reply(reply, body)

    @classmethod
    def from_jsonl(cls, path: str | Path) -> Script:
        """A script read from a JSON Lines file, one reply a line; blank lines are skipped.

        Args:
            path: the file; each line one of the forms of :meth:`ScriptedResponse.from_mapping`.

        Raises:
            InputError: the file cannot be read, or a line is not JSON or not a reply form
                (the message names the file and line).
        """
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except OSError as error:
            raise InputError(f"cannot read script {path}: {error}") from error
        replies: list[Reply] = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                if not isinstance(item, dict):
                    raise ValueError("a line must be a JSON object")
                replies.append(ScriptedResponse.from_mapping(item))
            except (ValueError, TypeError, KeyError, AttributeError) as error:
                raise InputError(f"{path}:{number}: not a scripted reply: {error}") from error
        return cls(replies)


def resolve_reply(reply: Reply, body: dict[str, Any]) -> ScriptedResponse:
    """The :class:`ScriptedResponse` for ``reply``, calling it when it is a responder.

    Raises:
        TypeError: a responder returned something other than a ScriptedResponse or str.
    """
    if isinstance(reply, ScriptedResponse):
        return reply
    made = reply(body)
    if isinstance(made, str):
        return ScriptedResponse.text(made)
    if not isinstance(made, ScriptedResponse):
        raise TypeError(
            f"a responder must return a ScriptedResponse or a str, not {type(made).__name__}"
        )
    return made
