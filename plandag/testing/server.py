"""A local server that speaks the Anthropic Messages API over real HTTP.

:class:`MessagesServer` listens on 127.0.0.1 only, in a background thread, so sync and async
tests alike can point the official SDK at it::

    with MessagesServer() as server:
        server.push_json({"steps": []})
        client = anthropic.AsyncAnthropic(api_key="test", base_url=server.url, max_retries=0)
        message = await client.messages.create(model="m", max_tokens=100, messages=[...])
        assert server.requests[0].body["messages"] == [...]

What it speaks (the wire format the ``anthropic`` SDK 2.x parses, and the API documents
under "Messages", "Streaming Messages" and "Errors"):

* ``POST /v1/messages`` → ``200 application/json``: ``{"id", "type": "message", "role":
  "assistant", "model", "content": [...], "stop_reason", "stop_sequence": null, "usage":
  {...}}``, with a ``request-id`` header;
* the same with ``"stream": true`` → ``200 text/event-stream`` (chunked): ``message_start``,
  then for each block ``content_block_start`` (the first followed by ``ping``),
  ``content_block_delta`` events (``text_delta``, or ``input_json_delta`` for a
  ``tool_use`` block), ``content_block_stop``; then ``message_delta`` (stop reason and
  usage) and ``message_stop``. Each event is ``event: NAME\\ndata: JSON\\n\\n``. A scripted
  stream error sends ``event: error`` with ``{"type": "error", "error": {...}}`` in the
  middle instead and ends the stream;
* errors: ``{"type": "error", "error": {"type", "message"}, "request_id"}`` with the status
  of the error type (400, 401, 404, 429, 500, 529...), ``retry-after`` when scripted, and
  ``x-should-retry: true`` for 429 and 5xx;
* ``POST /v1/messages/count_tokens`` → ``{"input_tokens": n}``: the same count as the
  ``usage.input_tokens`` a message with this body reports (system prompt, messages,
  tools); it takes no scripted reply, is not in :attr:`MessagesServer.message_requests`,
  and does not move the numbering of message and tool-use ids;
* a request missing ``model``, ``max_tokens`` or ``messages`` → 400
  ``invalid_request_error``, as the API does; so is an ``output_config.format.schema`` that
  breaks the rules of Anthropic's structured outputs (``additionalProperties: false`` on
  every object, no numeric bounds, no recursion...:
  :func:`plandag.models.schemas.strict_problems`), unless ``check_schemas=False``; any
  other path → 404 ``not_found_error``.

Tokens are estimated at four characters a token (:func:`~plandag.testing.script.estimate_tokens`):
input from the system prompt, the messages, the tool definitions and the structured-output
schema (``output_config.format.schema``, counted over its canonical JSON,
:func:`~plandag.testing.script.schema_text`, as the API bills the schema it compiles into
the prompt); output from the text and tool inputs sent. A reply's own ``usage`` replaces
the estimate. With ``enforce_max_tokens`` (default) an output longer than the request's
``max_tokens`` is cut to it and ends with stop reason ``max_tokens``, as the API does.

Prompt caching (Anthropic, "Prompt caching"): a ``cache_control`` breakpoint on a tool, a
system block or a message block caches the prompt up to it, in the API's order (tools, the
structured-output schema, system, messages: a breakpoint on the system prompt caches the
schema too, and another schema is another prefix). A request whose prompt starts with a
cached prefix of the same model reports those tokens as ``cache_read_input_tokens``; the
tokens from there to its last breakpoint are written (``cache_creation_input_tokens``)
when that prefix is at least ``cache_min_tokens`` long (the API's minimum: 1024 tokens for
Sonnet and Opus 4.1, more for some models); ``input_tokens`` is the rest. An entry lives
``cache_ttl_s`` seconds (five minutes), renewed by each read.
:attr:`MessagesServer.cache_reads` and :attr:`~MessagesServer.cache_writes` count the
tokens the cache read and wrote; a reply with a scripted ``usage`` reports that usage alone
(no cache counts unless it scripts them).

Latency: ``ttft`` seconds pass before the first content delta (a non-streamed reply waits
``ttft`` + output tokens / ``tokens_per_second``); streamed deltas of ``chunk_chars``
characters are paced so token *k* leaves ``ttft + k / tokens_per_second`` seconds after the
request arrived. Every wait ends at once when the server stops.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import http.server
import itertools
import json
import math
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any

from plandag.testing.script import (
    CHARS_PER_TOKEN,
    ERROR_STATUS,
    Responder,
    Script,
    ScriptedResponse,
    estimate_tokens,
    resolve_reply,
    schema_text,
)

__all__ = ["MessagesServer", "RecordedRequest", "system_text"]

_HOST = "127.0.0.1"
_JOIN_SECONDS = 5.0
MAX_BODY_BYTES = 32 * 1024 * 1024
"""The largest request body read; a larger ``content-length`` gets 400."""


@dataclasses.dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request the server received, as it arrived.

    Attributes:
        method: ``POST``, ``GET``...
        path: the path with any query, e.g. ``/v1/messages``.
        headers: every header, names lower case (``x-api-key``, ``anthropic-version``...);
            a repeated header keeps its last value.
        body: the decoded JSON body (a dict for the SDK's requests), or None when the body
            was empty or not JSON.
        raw_body: the body's bytes.
        received_at: ``time.monotonic()`` seconds when the body had been read.
    """

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any
    raw_body: bytes
    received_at: float

    @property
    def api_key(self) -> str | None:
        """The key the client sent: ``x-api-key``, else the token of ``authorization:
        Bearer ...`` (how the ``anthropic`` SDK 2.x sends ``api_key``), else None."""
        return api_key_of(self.headers)

    @property
    def system_text(self) -> str:
        """The system prompt's text, sent as a string or as text blocks (with
        ``cache_control``), joined; "" when there is none."""
        return system_text(self.body if isinstance(self.body, dict) else {})

    @property
    def json(self) -> dict[str, Any]:
        """The body as a dict (for the SDK's requests, always one).

        Raises:
            TypeError: the body was not a JSON object.
        """
        if not isinstance(self.body, dict):
            raise TypeError(f"the body of {self.method} {self.path} is not a JSON object")
        return self.body


def system_text(body: Mapping[str, Any]) -> str:
    """The text of a Messages API body's ``system``: a string as is, text blocks joined.

    Args:
        body: a request body (a mapping; ``system`` may be absent).

    Returns:
        The text, "" for none.
    """
    system = body.get("system", "")
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "".join(str(block.get("text", "")) for block in system if isinstance(block, dict))
    return ""


def api_key_of(headers: Mapping[str, str]) -> str | None:
    """The key a client sent: ``x-api-key``, else the token of ``authorization: Bearer``,
    else None (``headers`` with lower-case names)."""
    key = headers.get("x-api-key")
    if key is not None:
        return key
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return token if scheme.lower() == "bearer" and token else None


def cannot_listen(port: int, error: OSError) -> str:
    """The one-line message for a server that cannot bind 127.0.0.1:``port``.

    Args:
        port: the port asked for (0 for any free one).
        error: what binding raised.

    Returns:
        What failed, why (the system's reason) and what to do.
    """
    return (
        f"cannot listen on 127.0.0.1:{port} ({error.strerror or error}); "
        "choose another --port, or leave it out for any free one"
    )


def _schema_problem(body: Any, max_bytes: int | None) -> str | None:
    """The API's refusal of a request's output schema, or None (Anthropic's rules)."""
    from plandag.models.schemas import strict_problems

    config = body.get("output_config") if isinstance(body, dict) else None
    output = config.get("format") if isinstance(config, dict) else None
    if not isinstance(output, dict) or output.get("type") != "json_schema":
        return None
    size = len(json.dumps(output.get("schema"), separators=(",", ":")))
    if max_bytes is not None and size > max_bytes:
        return (
            f"output_config.format.schema: the schema is too large ({size} bytes; at most "
            f"{max_bytes})"
        )
    problems = strict_problems(output.get("schema"), "anthropic")
    if not problems:
        return None
    return f"output_config.format.schema: {problems[0]}"


class _Abort(Exception):
    """The client went away or the server is stopping: drop the connection."""


class MessagesServer:
    """An Anthropic Messages API server on 127.0.0.1 that plays a :class:`Script`.

    Args:
        script: the replies to play; None for an empty one (fill it with the ``push_*``
            methods, which forward to :attr:`script`).
        port: the port to bind on 127.0.0.1; 0 (default) picks a free one (see :attr:`url`).
        ttft: time to first token, seconds (>= 0).
        tokens_per_second: output pace, tokens per second (> 0), or None for no pacing.
        chunk_chars: characters of output per streamed delta (>= 1), default 16.
        enforce_max_tokens: cut an output longer than the request's ``max_tokens`` (at four
            characters a token) and report stop reason ``max_tokens``; default True.
        default: a responder used when the script is empty, instead of answering 500.
        api_key: when set, a request whose key differs gets 401 ``authentication_error``
            (the key is read from ``x-api-key`` or ``authorization: Bearer KEY``, which is
            how the SDK 2.x sends ``api_key``); None accepts any key, or none.
        cache_min_tokens: the shortest prefix, in tokens, that a breakpoint caches (the
            module docstring); default 1024, the API's for Sonnet.
        cache_ttl_s: seconds a cached prefix lives after its last write or read (300).
        clock: monotonic seconds for the cache's lifetimes (default ``time.monotonic``;
            a test passes its own to expire entries).
        check_schemas: refuse a structured-output schema the real API would refuse (400,
            the first problem in the message); default True.
        max_schema_bytes: a structured-output schema whose compact JSON is longer is
            refused as too large (400), or None for no limit.
        rpm: requests per ``rate_period_s`` the server takes (message requests; token
            counts are free), or None for no limit: a token bucket of ``rpm`` requests that
            refills continuously (the algorithm Anthropic documents for its limits). A
            request past it gets 429 (``rate_limit_error``) with ``retry-after`` (whole
            seconds, rounded up) and ``retry-after-ms`` until a request would be taken, and
            no scripted reply is used; :attr:`rate_limited` counts them.
        rate_period_s: the period of ``rpm``, seconds (60: per minute; a test or a
            benchmark gives a shorter one).

    Raises:
        ValueError: a negative or non-finite ``ttft``, a ``tokens_per_second`` that is not
            a positive finite number, or ``chunk_chars`` < 1.

    Use it as a context manager (``with MessagesServer() as server``) or call
    :meth:`start` and :meth:`stop`. :attr:`ttft` and :attr:`tokens_per_second` may be
    changed while it runs; each request reads them when it arrives.
    """

    def __init__(
        self,
        script: Script | None = None,
        *,
        port: int = 0,
        ttft: float = 0.0,
        tokens_per_second: float | None = None,
        chunk_chars: int = 16,
        enforce_max_tokens: bool = True,
        default: Responder | None = None,
        api_key: str | None = None,
        cache_min_tokens: int = 1024,
        cache_ttl_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        check_schemas: bool = True,
        max_schema_bytes: int | None = None,
        rpm: float | None = None,
        rate_period_s: float = 60.0,
    ) -> None:
        if rpm is not None and (not math.isfinite(rpm) or rpm <= 0):
            raise ValueError(f"rpm must be a finite number > 0, not {rpm}")
        if not math.isfinite(rate_period_s) or rate_period_s <= 0:
            raise ValueError(f"rate_period_s must be a finite number > 0, not {rate_period_s}")
        if not math.isfinite(ttft) or ttft < 0:
            raise ValueError(f"ttft must be a finite number of seconds >= 0, not {ttft}")
        if tokens_per_second is not None and (
            not math.isfinite(tokens_per_second) or tokens_per_second <= 0
        ):
            raise ValueError(
                f"tokens_per_second must be a finite number > 0, not {tokens_per_second}"
            )
        if chunk_chars < 1:
            raise ValueError(f"chunk_chars must be >= 1, not {chunk_chars}")
        self.script = script if script is not None else Script()
        self.ttft = ttft
        self.tokens_per_second = tokens_per_second
        self.chunk_chars = chunk_chars
        self.enforce_max_tokens = enforce_max_tokens
        self.default = default
        self.api_key = api_key
        self.cache_min_tokens = cache_min_tokens
        self.cache_ttl_s = cache_ttl_s
        self.clock = clock
        self.check_schemas = check_schemas
        self.max_schema_bytes = max_schema_bytes
        self.rpm = rpm
        self.rate_period_s = rate_period_s
        self.rate_limited = 0
        """How many requests got 429 for the ``rpm`` limit."""
        self._bucket = float(rpm) if rpm is not None else 0.0
        self._bucket_at = clock()
        self.cache_reads = 0
        self.cache_writes = 0
        self._cache: dict[str, float] = {}
        self._port = port
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._counter = itertools.count(1)
        self._count_counter = itertools.count(1)
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._connections: dict[socket.socket, threading.Thread] = {}

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> MessagesServer:
        """Bind 127.0.0.1:``port`` and serve in a background thread; returns ``self``.

        Raises:
            RuntimeError: already started (a server runs once).
            OSError: the port cannot be bound.
        """
        if self._httpd is not None or self._stopping.is_set():
            raise RuntimeError("this MessagesServer was already started; make a new one")
        self._httpd = _HTTPServer((_HOST, self._port), self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"plandag-messages-server-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving: end every wait, close every connection, join the threads.

        Bounded: each join waits at most 5 seconds. Calling it twice, or before
        :meth:`start`, does nothing.
        """
        httpd = self._httpd
        if httpd is None or self._stopping.is_set():
            self._stopping.set()
            return
        self._stopping.set()
        httpd.shutdown()
        with self._lock:
            connections = dict(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):  # already closed by the other side
                connection.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + _JOIN_SECONDS
        for thread in connections.values():
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=_JOIN_SECONDS)

    def __enter__(self) -> MessagesServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound port.

        Raises:
            RuntimeError: the server has not been started.
        """
        if self._httpd is None:
            raise RuntimeError("the server has not been started; call start() or use `with`")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """The base URL for the SDK's ``base_url``: ``http://127.0.0.1:PORT``."""
        return f"http://{_HOST}:{self.port}"

    # -- what was received -------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def message_requests(self) -> list[RecordedRequest]:
        """The requests to ``POST /v1/messages`` only (no ``count_tokens``), in order."""
        return [r for r in self.requests if r.path.split("?")[0] == "/v1/messages"]

    def clear_requests(self) -> None:
        """Forget the requests recorded so far."""
        with self._lock:
            self._requests.clear()

    # -- the script ---------------------------------------------------------------------------

    def push(self, reply: ScriptedResponse | Responder) -> None:
        """Queue a reply (see :meth:`Script.push`)."""
        self.script.push(reply)

    def push_text(self, text: str, *, usage: Mapping[str, int] | None = None) -> None:
        """Queue a text message (:meth:`ScriptedResponse.text`)."""
        self.script.push_text(text, usage=usage)

    def push_json(self, value: Any, *, usage: Mapping[str, int] | None = None) -> None:
        """Queue a text message whose text is ``value`` as compact JSON."""
        self.script.push_json(value, usage=usage)

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
        self.script.push_tool_use(name, input, text=text, id=id, usage=usage)

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
        self.script.push_error(
            status, error_type, message=message, retry_after=retry_after, headers=headers
        )

    def push_stream_error_after(
        self,
        n_chars: int,
        error_type: str = "overloaded_error",
        *,
        text: str | None = None,
        message: str | None = None,
    ) -> None:
        """Queue a stream broken by an ``error`` event after ``n_chars`` output characters."""
        self.script.push_stream_error_after(n_chars, error_type, text=text, message=message)

    def push_max_tokens(self, partial_text: str, *, usage: Mapping[str, int] | None = None) -> None:
        """Queue a text reply cut by ``max_tokens`` (stop reason ``max_tokens``)."""
        self.script.push_max_tokens(partial_text, usage=usage)

    def push_responder(self, responder: Responder) -> None:
        """Queue a function ``responder(body) -> ScriptedResponse | str`` (used once)."""
        self.script.push_responder(responder)

    # -- serving (called on the connection's thread) ------------------------------------------

    def _register(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections[connection] = threading.current_thread()

    def _unregister(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.pop(connection, None)

    def _record(self, request: RecordedRequest) -> int:
        """Keep ``request``; its number among message requests (token counts have their own
        numbering, so they never move a message's or a tool call's id)."""
        counting = request.path.split("?")[0].endswith("/count_tokens")
        with self._lock:
            self._requests.append(request)
            return next(self._count_counter if counting else self._counter)

    def _over_limit(self) -> float | None:
        """Take a request from the ``rpm`` bucket; the seconds until one would be there
        when it is empty (the request is then refused), else None."""
        if self.rpm is None:
            return None
        with self._lock:
            now = self.clock()
            rate = self.rpm / self.rate_period_s
            self._bucket = min(self.rpm, self._bucket + max(now - self._bucket_at, 0.0) * rate)
            self._bucket_at = now
            if self._bucket >= 1.0:
                self._bucket -= 1.0
                return None
            self.rate_limited += 1
            return (1.0 - self._bucket) / rate

    def _wait(self, seconds: float) -> None:
        if seconds > 0 and self._stopping.wait(seconds):
            raise _Abort
        if self._stopping.is_set():
            raise _Abort

    def _handle(self, handler: RequestHandler) -> None:
        length_text = handler.headers.get("content-length")
        try:
            length = int(length_text) if length_text is not None else 0
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            handler.close_connection = True
            _send_error(handler, 400, "invalid_request_error", "bad content-length", "req_local_0")
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
        path = handler.path.split("?")[0]
        request_id = (
            f"req_local_count_{number:06d}"
            if path.endswith("/count_tokens")
            else f"req_local_{number:06d}"
        )
        if handler.command != "POST" or path not in ("/v1/messages", "/v1/messages/count_tokens"):
            message = f"{handler.command} {path} is not served here"
            _send_error(handler, 404, "not_found_error", message, request_id)
            return
        if self.api_key is not None and api_key_of(headers) != self.api_key:
            message = "invalid x-api-key or authorization header"
            _send_error(handler, 401, "authentication_error", message, request_id)
            return
        problem = _validate(body, count_only=path.endswith("count_tokens"))
        if problem is None and self.check_schemas:
            problem = _schema_problem(body, self.max_schema_bytes)
        if problem is not None:
            _send_error(handler, 400, "invalid_request_error", problem, request_id)
            return
        assert isinstance(body, dict)
        input_tokens = estimate_tokens(input_text(body))
        if path.endswith("count_tokens"):
            send_json(handler, 200, {"input_tokens": input_tokens}, request_id)
            return
        wait = self._over_limit()
        if wait is not None:
            message = f"rate limit of {self.rpm:g} requests per {self.rate_period_s:g} s exceeded"
            _send_error(handler, 429, "rate_limit_error", message, request_id, retry_headers(wait))
            return
        try:
            reply = self.script.next_reply(body)
            if reply is None and self.default is not None:
                reply = resolve_reply(self.default, body)
        except Exception as error:  # a test's responder failed: say so in the 500
            message = f"the scripted responder raised {type(error).__name__}: {error}"
            _send_error(handler, 500, "api_error", message, request_id)
            return
        if reply is None:
            message = (
                f"no scripted response left (request {number} to {path}); "
                "queue one with push_text(), push_json(), push_error()..."
            )
            _send_error(handler, 500, "api_error", message, request_id)
            return
        streamed = body.get("stream") is True
        if reply.is_error or (reply.stream_error_after is not None and not streamed):
            self._send_scripted_error(handler, reply, request_id)
            return
        read, written = self._prompt_cache(body)
        message_body = self._message(reply, body, number, input_tokens, read, written)
        if streamed:
            self._stream(handler, reply, message_body, request_id, received_at)
        else:
            output_tokens = int(message_body["usage"]["output_tokens"])
            self._wait_until(received_at, self._delay_for(output_tokens))
            send_json(handler, 200, message_body, request_id)

    def _delay_for(self, output_tokens: float) -> float:
        rate = self.tokens_per_second
        return self.ttft + (output_tokens / rate if rate is not None else 0.0)

    def _wait_until(self, start: float, delay: float) -> None:
        self._wait(start + delay - time.monotonic())

    def _send_scripted_error(
        self, handler: RequestHandler, reply: ScriptedResponse, request_id: str
    ) -> None:
        if reply.is_error:
            status = reply.status
            error_type = reply.error_type or "api_error"
        else:  # a stream error asked of a request that is not streamed
            error_type = reply.stream_error_type
            status = ERROR_STATUS.get(error_type, 500)
        headers = dict(reply.headers)
        if reply.retry_after is not None:
            headers["retry-after"] = number_text(reply.retry_after)
        message = reply.error_message or error_type
        _send_error(handler, status, error_type, message, request_id, headers)

    def _prompt_cache(self, body: Mapping[str, Any]) -> tuple[int, int]:
        """Tokens of ``body``'s prompt read from and written to the cache (module docstring).

        Returns:
            ``(read, written)``; ``(0, 0)`` for a prompt without a breakpoint.
        """
        blocks = _cache_blocks(body)
        if not any(marked for _, marked in blocks):
            return 0, 0
        digest = hashlib.sha256(str(body.get("model", "")).encode())
        prefixes: list[tuple[int, str, bool]] = []  # (characters, key, breakpoint)
        characters = 0
        for text, marked in blocks:
            digest.update(len(text).to_bytes(8, "big") + text.encode("utf-8", "surrogatepass"))
            characters += len(text)
            prefixes.append((characters, digest.hexdigest(), marked))
        last = max(index for index, (_, _, marked) in enumerate(prefixes) if marked)
        with self._lock:
            now = self.clock()
            read_characters = 0
            for index in range(last, -1, -1):
                chars, key, _ = prefixes[index]
                if self._cache.get(key, -math.inf) > now:
                    read_characters = chars
                    self._cache[key] = now + self.cache_ttl_s
                    break
            read = math.ceil(read_characters / CHARS_PER_TOKEN)
            written = 0
            for chars, key, marked in prefixes[: last + 1]:
                tokens = math.ceil(chars / CHARS_PER_TOKEN)
                if marked and chars > read_characters and tokens >= self.cache_min_tokens:
                    self._cache[key] = now + self.cache_ttl_s
                    written = tokens - read
            self.cache_reads += read
            self.cache_writes += written
        return read, written

    def _message(
        self,
        reply: ScriptedResponse,
        body: dict[str, Any],
        number: int,
        input_tokens: int,
        cache_read: int = 0,
        cache_written: int = 0,
    ) -> dict[str, Any]:
        """The complete message for ``reply``: blocks with ids, cut to max_tokens, usage."""
        content: list[dict[str, Any]] = []
        for index, block in enumerate(reply.content):
            item = dict(block)
            if item["type"] == "tool_use" and item.get("id") is None:
                item["id"] = f"toolu_local_{number:06d}_{index}"
            content.append(item)
        stop_reason = reply.stop_reason
        max_tokens = int(body["max_tokens"])
        output_tokens = estimate_tokens("".join(block_output(block) for block in content))
        if reply.stop_reason == "max_tokens":
            output_tokens = max_tokens
        elif self.enforce_max_tokens and output_tokens > max_tokens:
            content = _cut(content, max_tokens * CHARS_PER_TOKEN)
            stop_reason = "max_tokens"
            output_tokens = max_tokens
        if reply.usage:  # a scripted usage replaces the estimate, cache counts included
            cache_read = cache_written = 0
        usage: dict[str, Any] = {
            "input_tokens": max(0, input_tokens - cache_read - cache_written),
            "cache_creation_input_tokens": cache_written,
            "cache_read_input_tokens": cache_read,
            "output_tokens": output_tokens,
            "service_tier": "standard",
        }
        usage.update(reply.usage or {})
        return {
            "id": f"msg_local_{number:06d}",
            "type": "message",
            "role": "assistant",
            "model": reply.model if reply.model is not None else str(body["model"]),
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": reply.stop_sequence,
            "usage": usage,
        }

    def _stream(
        self,
        handler: RequestHandler,
        reply: ScriptedResponse,
        message: dict[str, Any],
        request_id: str,
        received_at: float,
    ) -> None:
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream; charset=utf-8")
        handler.send_header("cache-control", "no-cache")
        handler.send_header("request-id", request_id)
        handler.send_header("transfer-encoding", "chunked")
        handler.end_headers()
        writer = EventWriter(handler)
        usage = message["usage"]
        start = dict(message, content=[], stop_reason=None, stop_sequence=None)
        start["usage"] = dict(usage, output_tokens=1)
        writer.event("message_start", {"type": "message_start", "message": start})
        if not message["content"]:
            writer.event("ping", {"type": "ping"})
        budget = reply.stream_error_after
        sent_chars = 0
        for index, block in enumerate(message["content"]):
            empty = (
                {"type": "text", "text": ""} if block["type"] == "text" else {**block, "input": {}}
            )
            writer.event(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": empty},
            )
            if index == 0:
                writer.event("ping", {"type": "ping"})
            if block["type"] == "tool_use":
                delta = {"type": "input_json_delta", "partial_json": ""}
                writer.event(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            for piece in text_chunks(block_output(block), self.chunk_chars):
                if budget is not None and sent_chars + len(piece) > budget:
                    piece = piece[: budget - sent_chars]
                    if piece:
                        self._wait_until(received_at, self._delay_for(sent_chars / CHARS_PER_TOKEN))
                        writer.event("content_block_delta", _delta(index, block, piece))
                    writer.error(reply, request_id)
                    return
                self._wait_until(received_at, self._delay_for(sent_chars / CHARS_PER_TOKEN))
                writer.event("content_block_delta", _delta(index, block, piece))
                sent_chars += len(piece)
            writer.event("content_block_stop", {"type": "content_block_stop", "index": index})
        if budget is not None:  # the break point lies at or past the end of the output
            writer.error(reply, request_id)
            return
        self._wait_until(received_at, self._delay_for(int(usage["output_tokens"])))
        writer.event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": message["stop_reason"],
                    "stop_sequence": message["stop_sequence"],
                },
                "usage": {
                    key: usage[key]
                    for key in (
                        "input_tokens",
                        "cache_creation_input_tokens",
                        "cache_read_input_tokens",
                        "output_tokens",
                    )
                    if key in usage
                },
            },
        )
        writer.event("message_stop", {"type": "message_stop"})
        writer.close()


# -- HTTP plumbing -----------------------------------------------------------------------------


class _HTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    # connections waiting to be accepted: socketserver's 5 drops the connections of many
    # parallel calls, which the client's kernel sends again a second later
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], app: MessagesServer) -> None:
        self.app = app
        super().__init__(address, RequestHandler)


class RequestHandler(http.server.BaseHTTPRequestHandler):
    """One connection's handler: hands every request to the server's ``_handle``."""

    protocol_version = "HTTP/1.1"
    server_version = "plandag-messages-server"
    timeout = 30  # seconds an idle keep-alive connection is held
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.server.app._register(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass  # the client reset the connection
        finally:
            self.server.app._unregister(self.connection)

    def _serve(self) -> None:
        try:
            self.server.app._handle(self)
        except (_Abort, OSError):
            self.close_connection = True

    def do_POST(self) -> None:
        self._serve()

    def do_GET(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read :attr:`MessagesServer.requests` instead of a log."""


class EventWriter:
    """Writes server-sent events as HTTP/1.1 chunks, one chunk an event."""

    def __init__(self, handler: RequestHandler) -> None:
        self._handler = handler

    def write_chunk(self, data: bytes) -> None:
        try:
            self._handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self._handler.wfile.flush()
        except OSError as error:
            raise _Abort from error

    def event(self, name: str, data: Mapping[str, Any]) -> None:
        payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        self.write_chunk(f"event: {name}\ndata: {payload}\n\n".encode())

    def error(self, reply: ScriptedResponse, request_id: str) -> None:
        error_type = reply.stream_error_type
        message = reply.error_message or _stock_message(error_type)
        self.event("error", _error_body(error_type, message, request_id))
        self.close()

    def close(self) -> None:
        self.write_chunk(b"")  # the zero-length chunk ends the body


def _stock_message(error_type: str) -> str:
    return "Overloaded" if error_type == "overloaded_error" else error_type


def _error_body(error_type: str, message: str, request_id: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": request_id,
    }


def send_json(
    handler: RequestHandler,
    status: int,
    data: Mapping[str, Any],
    request_id: str,
    headers: Mapping[str, str] | None = None,
    *,
    request_id_header: str = "request-id",
) -> None:
    """Send ``data`` as one JSON response with its length and the request id under
    ``request_id_header`` (the Messages API's ``request-id``; ``x-request-id`` for the
    OpenAI-compatible server), plus ``headers``. Text UTF-8 cannot encode (a scripted reply
    with a lone surrogate) is sent as JSON's ``\\uXXXX`` escapes, as a server may send it."""
    try:
        payload = json.dumps(data, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        payload = json.dumps(data).encode()
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(payload)))
    handler.send_header(request_id_header, request_id)
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(payload)
    handler.wfile.flush()


def _send_error(
    handler: RequestHandler,
    status: int,
    error_type: str,
    message: str,
    request_id: str,
    headers: Mapping[str, str] | None = None,
) -> None:
    extra = dict(headers or {})
    if status == 429 or status >= 500:
        extra.setdefault("x-should-retry", "true")
    send_json(handler, status, _error_body(error_type, message, request_id), request_id, extra)


def retry_headers(seconds: float) -> dict[str, str]:
    """``retry-after`` (whole seconds, rounded up) and ``retry-after-ms`` for a wait."""
    return {
        "retry-after": str(max(math.ceil(seconds), 1)),
        "retry-after-ms": str(max(math.ceil(seconds * 1000), 1)),
    }


def number_text(seconds: float) -> str:
    """Seconds as a header value: ``2`` for a whole number, ``0.5`` otherwise."""
    return str(int(seconds)) if float(seconds).is_integer() else repr(float(seconds))


# -- request and content helpers ---------------------------------------------------------------


def _validate(body: Any, *, count_only: bool) -> str | None:
    """The API's message for a malformed request body, or None when it is usable."""
    if not isinstance(body, dict):
        return "the request body must be a JSON object"
    required = ("model", "messages") if count_only else ("model", "max_tokens", "messages")
    for field in required:
        if field not in body:
            return f"{field}: Field required"
    if not isinstance(body["model"], str):
        return "model: Input should be a valid string"
    if not count_only:
        max_tokens = body["max_tokens"]
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            return "max_tokens: Input should be an integer >= 1"
    if not isinstance(body["messages"], list) or not body["messages"]:
        return "messages: at least one message is required"
    return None


def content_text(content: Any) -> str:
    """The characters a content value counts for: text as is, anything else as JSON."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(content_text(block) for block in content)
    if isinstance(content, dict):
        if content.get("type") == "text" and isinstance(content.get("text"), str):
            return str(content["text"])
        if content.get("type") == "tool_result":
            return content_text(content.get("content", ""))
        if content.get("type") == "tool_use":
            return json.dumps(content.get("input", {}))
    return json.dumps(content)


def _without_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: item for key, item in value.items() if key != "cache_control"}
    return value


def _cache_blocks(body: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """The prompt's blocks in the cache's order (tools, the structured-output schema,
    system, messages): each one's counted text and whether it carries a ``cache_control``
    breakpoint. The schema has no breakpoint of its own: a breakpoint after it caches it,
    and another schema is another prefix."""
    blocks: list[tuple[str, bool]] = []
    for definition in body.get("tools") or []:
        marked = isinstance(definition, dict) and "cache_control" in definition
        blocks.append((json.dumps(_without_cache_control(definition)), marked))
    schema = output_schema(body)
    if schema is not None:
        blocks.append((schema_text(schema), False))
    system = body.get("system", "")
    for block in system if isinstance(system, list) else [system]:
        marked = isinstance(block, dict) and "cache_control" in block
        blocks.append((content_text(block), marked))
    for message in body.get("messages", []):
        content = message.get("content", "") if isinstance(message, dict) else message
        for block in content if isinstance(content, list) else [content]:
            marked = isinstance(block, dict) and "cache_control" in block
            blocks.append((content_text(block), marked))
    return blocks


def output_schema(body: Mapping[str, Any]) -> Any:
    """The structured-output schema a request carries (``output_config.format.schema`` of a
    ``json_schema`` format), or None."""
    output = body.get("output_config")
    form = output.get("format") if isinstance(output, Mapping) else None
    if not isinstance(form, Mapping) or form.get("type") != "json_schema":
        return None
    return form.get("schema")


def input_text(body: Mapping[str, Any]) -> str:
    """What input tokens are counted from: system prompt, messages' content, tools, and the
    structured-output schema (its canonical JSON, :func:`~plandag.testing.script.schema_text`:
    the API bills the schema it compiles into the prompt). ``POST /v1/messages/count_tokens``
    and a message's ``usage.input_tokens`` count the same text, so a count matches the bill,
    as the API's does."""
    parts = [content_text(body.get("system", ""))]
    for message in body.get("messages", []):
        parts.append(
            content_text(message.get("content", "") if isinstance(message, dict) else message)
        )
    if body.get("tools"):
        parts.append(json.dumps([_without_cache_control(tool) for tool in body["tools"]]))
    schema = output_schema(body)
    if schema is not None:
        parts.append(schema_text(schema))
    return "".join(parts)


def block_output(block: Mapping[str, Any]) -> str:
    """The characters a content block streams: its text, or its input as JSON."""
    if block["type"] == "text":
        return str(block["text"])
    return json.dumps(block.get("input", {}), ensure_ascii=False, separators=(",", ":"))


def _cut(content: list[dict[str, Any]], chars: int) -> list[dict[str, Any]]:
    """The blocks that fit in ``chars`` output characters: text cut, tool calls whole or not."""
    kept: list[dict[str, Any]] = []
    left = chars
    for block in content:
        size = len(block_output(block))
        if size <= left:
            kept.append(block)
            left -= size
            continue
        if block["type"] == "text" and left > 0:
            kept.append({**block, "text": str(block["text"])[:left]})
        break
    return kept


def text_chunks(text: str, size: int) -> Iterator[str]:
    """``text`` in pieces of ``size`` characters (the last one shorter), as streamed."""
    for offset in range(0, len(text), size):
        yield text[offset : offset + size]


def _delta(index: int, block: Mapping[str, Any], piece: str) -> dict[str, Any]:
    delta = (
        {"type": "text_delta", "text": piece}
        if block["type"] == "text"
        else {"type": "input_json_delta", "partial_json": piece}
    )
    return {"type": "content_block_delta", "index": index, "delta": delta}
