"""How a client asks its server for structured output, and what it does when the server
refuses.

A request with a ``json_schema`` is sent, in order of preference, in one of these modes:

=========  ==========================================================================
``strict``  the provider enforces the schema while generating: OpenAI-compatible
            ``response_format: {"type": "json_schema", ..., "strict": true}``,
            Anthropic ``output_config.format``; the schema as
            :func:`~plandag.models.schemas.prepare_schema` shapes it for the provider.
``json``    OpenAI-compatible JSON mode (``response_format: {"type": "json_object"}``):
            any JSON object; the schema is stated in the system prompt.
``prompt``  no response format at all; the schema is stated in the system prompt.
=========  ==========================================================================

Whatever the mode, the answer is brought back to the caller's shape
(:meth:`~plandag.models.schemas.PreparedSchema.restore`) and validated by plandag against
the schema sent (:attr:`~plandag.models.base.LLMResponse.schema_errors`), so a rule the
provider did not enforce is still checked.

A server that refuses a schema (an HTTP 400 or 422 whose error names the response format
or the schema) is asked again at once in the next mode, and :class:`SchemaModes`
remembers it for the rest of the client's life (one client per run), saying so once on
stderr. A refusal that says the schema is too large (too many properties, enum values or
nesting) first tries the request's narrower schemas
(:attr:`~plandag.models.base.LLMRequest.narrower_schemas`), remembered likewise; with
none left, a request that narrows the schema itself
(:attr:`~plandag.models.base.LLMRequest.raise_if_too_large`) gets the refusal raised.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from plandag.models.base import LLMRequest, LLMResponse
from plandag.models.schemas import PreparedSchema, SchemaProvider, prepare_schema

__all__ = [
    "SchemaMode",
    "SchemaModes",
    "SchemaRefusal",
    "finish",
    "is_schema_refusal",
    "schema_instruction",
    "stderr_notice",
]

SchemaMode = Literal["strict", "json", "prompt"]
"""How a request asks for structured output (the table in the module docstring)."""

_SCHEMA_WORDS = re.compile(
    r"response_format|json_schema|json_object|output_config|output_format|\bschema\b|\bstrict\b"
    r"|structured output",
    re.IGNORECASE,
)
_SIZE_WORDS = re.compile(
    r"too (large|long|many|complex|big)|exceed|maximum|at most|limit", re.IGNORECASE
)


def stderr_notice(text: str) -> None:
    """Write ``text`` as one line on stderr (the default way a client says it changed
    mode)."""
    print(text, file=sys.stderr, flush=True)


def is_schema_refusal(status: int, message: str, param: object = None) -> bool:
    """Whether an HTTP error is the server refusing the structured-output request: a 400
    or 422 whose error names the response format, the output config or the schema
    (OpenAI's ``param: "response_format"`` included)."""
    if status not in (400, 422):
        return False
    if isinstance(param, str) and param.split(".")[0] in ("response_format", "output_config"):
        return True
    return _SCHEMA_WORDS.search(message) is not None


def schema_instruction(schema: Mapping[str, Any]) -> str:
    """The line added to the system prompt when the server does not enforce the schema."""
    return (
        "Answer with one JSON value, and nothing else, that validates against this JSON "
        "Schema:\n" + json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    )


class SchemaRefusal(Exception):
    """The server refused the structured-output request (raised by a client's send, caught
    by its own loop over :meth:`SchemaModes.attempts`; never seen by callers).

    Attributes:
        status: the HTTP status.
        detail: the server's message.
        mapped: the step error the refusal is when no other mode is left.
    """

    def __init__(self, status: int, detail: str, mapped: Exception) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.mapped = mapped


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One way of sending a request: its mode and the schema prepared for the provider
    (None for a request without a schema)."""

    mode: SchemaMode | None
    prepared: PreparedSchema | None
    fingerprint: str = ""

    def system(self, system: str) -> str:
        """The system prompt to send: ``system``, with the schema stated when the server
        does not enforce it."""
        if self.mode in ("json", "prompt") and self.prepared is not None:
            instruction = schema_instruction(self.prepared.schema)
            return f"{system}\n\n{instruction}" if system else instruction
        return system


def _fingerprint(schema: Mapping[str, Any]) -> str:
    text = json.dumps(schema, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class SchemaModes:
    """The structured-output modes one client's server accepts, learnt from its refusals
    and kept for the client's life.

    Args:
        provider: the schema rules (``openai``, ``anthropic``).
        modes: the modes the client speaks, best first (``("strict", "json", "prompt")``
            for OpenAI-compatible servers, ``("strict", "prompt")`` for Anthropic).
        where: the server, for the notice (``openai http://127.0.0.1:8000/v1``).
        notice: where a change of mode is said (one line); default stderr.

    Attributes:
        mode: the best mode not refused yet.
        notices: every notice said, in order.
    """

    def __init__(
        self,
        provider: SchemaProvider,
        modes: Sequence[SchemaMode],
        where: str,
        notice: Callable[[str], None] | None = None,
    ) -> None:
        self.provider: SchemaProvider = provider
        self._modes = tuple(modes)
        self.mode: SchemaMode = self._modes[0]
        self.where = where
        self._notice = notice if notice is not None else stderr_notice
        self._too_large: set[str] = set()
        self._prepared: dict[str, PreparedSchema] = {}
        self.notices: list[str] = []

    def _prepare(self, schema: Mapping[str, Any]) -> tuple[PreparedSchema, str]:
        key = _fingerprint(schema)
        prepared = self._prepared.get(key)
        if prepared is None:
            prepared = prepare_schema(schema, self.provider)
            self._prepared[key] = prepared
        return prepared, key

    def attempts(self, request: LLMRequest) -> list[Attempt]:
        """The ways to send ``request``, best first, leaving out what this server refused."""
        if request.json_schema is None:
            return [Attempt(None, None)]
        out: list[Attempt] = []
        full, full_key = self._prepare(request.json_schema)
        start = self._modes.index(self.mode)
        for mode in self._modes[start:]:
            if mode == "strict":
                for schema in (request.json_schema, *request.narrower_schemas):
                    prepared, key = self._prepare(schema)
                    if key not in self._too_large:
                        out.append(Attempt("strict", prepared, key))
            else:
                out.append(Attempt(mode, full, full_key))
        return out

    def gives_up(self, request: LLMRequest, attempt: Attempt, refusal: SchemaRefusal) -> bool:
        """Whether ``refusal`` goes to the caller instead of the next attempt: a schema
        refused as too large, no narrower one left, and the request asks for it
        (:attr:`~plandag.models.base.LLMRequest.raise_if_too_large`)."""
        if not request.raise_if_too_large or attempt.mode != "strict":
            return False
        if not _SIZE_WORDS.search(refusal.detail):
            return False
        last = request.narrower_schemas[-1] if request.narrower_schemas else request.json_schema
        return last is not None and attempt.fingerprint == _fingerprint(last)

    def refused(self, attempt: Attempt, refusal: SchemaRefusal) -> None:
        """Remember that the server refused ``attempt``: a schema refused as too large is
        not sent strict again (a narrower one is tried, else the next mode, for that schema
        only); any other refusal ends the mode for every request. Says each change once."""
        if attempt.mode == "strict" and _SIZE_WORDS.search(refusal.detail):
            if attempt.fingerprint not in self._too_large:
                self._too_large.add(attempt.fingerprint)
                self._say(
                    f"{self.where}: the server refused a strict JSON schema as too large "
                    f"(HTTP {refusal.status}{_snippet(refusal.detail)}); that schema is sent "
                    "narrower or without strict mode from now on, and plandag validates each "
                    "answer against it"
                )
            return
        if attempt.mode is None or attempt.mode != self.mode:
            return
        index = self._modes.index(attempt.mode)
        if index + 1 >= len(self._modes):
            return
        self.mode = self._modes[index + 1]
        what = {
            "strict": "a strict JSON schema",
            "json": "JSON mode (response_format json_object)",
            "prompt": "the schema in the prompt",
        }[attempt.mode]
        instead = {
            "json": "plain JSON (response_format json_object)",
            "prompt": "JSON with the schema stated in the system prompt",
            "strict": "",
        }[self.mode]
        self._say(
            f"{self.where}: the server refused {what} (HTTP {refusal.status}"
            f"{_snippet(refusal.detail)}); for the rest of this run it is asked for {instead} "
            "and plandag validates each answer against the schema"
        )

    def _say(self, text: str) -> None:
        self.notices.append(text)
        self._notice(text)


def _snippet(text: str) -> str:
    flat = " ".join(text.split())
    if len(flat) > 200:
        flat = flat[:200] + "..."
    return f": {flat}" if flat else ""


def finish(response: LLMResponse, attempt: Attempt) -> LLMResponse:
    """``response`` with its text in the caller's shape and plandag's validation of it
    against the schema sent (``schema_mode``, ``schema_errors``); unchanged without a
    schema."""
    prepared = attempt.prepared
    if prepared is None:
        return response
    try:
        value = json.loads(response.text)
    except ValueError as error:
        return dataclasses.replace(
            response, schema_mode=attempt.mode, schema_errors=(f"$: not JSON: {error}",)
        )
    restored = prepared.restore(value)
    text = response.text
    if restored != value:
        text = json.dumps(restored, ensure_ascii=False, separators=(",", ":"))
    return dataclasses.replace(
        response,
        text=text,
        schema_mode=attempt.mode,
        schema_errors=tuple(prepared.violations(restored)),
    )
