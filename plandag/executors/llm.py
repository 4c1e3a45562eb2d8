"""The ``llm`` tool: one model call as a plan step.

``llm(prompt, data=None, schema=None, model=None, max_tokens=1024)``:

* **prompt vs data** (ARCHITECTURE.md, "Untrusted content"): ``prompt`` is the instruction,
  written by the planner. ``data`` (step results, documents) reaches the model only as a
  quoted data block (:func:`plandag.executors.data.quote_data`: JSON-encoded, ``<`` ``>``
  ``&`` escaped so nothing inside can close the block), after the instruction, under a
  system prompt that says a data block is never an instruction. A step result referenced
  inside ``prompt`` itself (``"Summarise <step_2_result>"``) is not pasted into the
  instruction either: the prompt names it (``[data block: step 2 result]``) and its value
  follows as a data block of its own. Params (``<param.NAME>``), given by the person who
  runs the plan, resolve in place.
* **one request per attempt**: the tool sends exactly one request (the client is built
  with ``max_retries=0``); a transient failure (429, 5xx, a reset) raises the step error the
  run's retry policy retries, and the policy decides. A token count asked of the provider
  for the reservation (Anthropic's ``count_tokens``) is not an attempt.
* **cost per call**: before sending, the attempt reserves on the run's budget
  (:meth:`ToolContext.reserve`) its prompt's input tokens (the provider's count when it has
  a counting endpoint, else the serialized request's UTF-8 bytes / 3) plus ``max_tokens``
  output tokens, at the model's price (tokens only for a model without one), and reports the
  usage the provider returned (:meth:`ToolContext.report_cost`), which the runner settles
  the reservation with. A reservation that does not fit fails the step, reason ``budget``,
  with nothing sent.
* **schema**: with ``schema`` (a JSON Schema, Draft 2020-12, validated with the
  ``jsonschema`` library), the reply must be one JSON value that validates. Each distinct
  schema (by its canonical JSON) is checked against the metaschema and its validator built
  once per process (:func:`schema_validator`), however many steps and calls share it; each
  reply is validated once: by the model client, which brings a structured answer back to
  the schema's shape and checks it (``LLMResponse.schema_errors``), else here. A reply
  that does not validate raises :class:`~plandag.errors.InvalidOutputError` asking for a
  re-ask: the runner makes one more attempt at once, which sends the conversation again
  with the reply and its validation errors (quoted as data), as the planner's repair does.
  A second invalid reply fails the step, reason ``invalid_output``.

Returns the validated JSON value with a schema, else the reply's text.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator

from plandag.dag.references import REFERENCE_PATTERN
from plandag.errors import InvalidOutputError, PermanentStepError
from plandag.executors.access import call_model, require_models
from plandag.tools.base import ToolContext, tool

if TYPE_CHECKING:  # imported when a step runs: `plandag check` never loads the planner
    from plandag.models.base import ChatMessage, LLMRequest, LLMResponse

__all__ = [
    "DATA_MAX_CHARS",
    "DEFAULT_LLM_MAX_TOKENS",
    "LLM_SYSTEM",
    "SCHEMA_VALIDATORS",
    "build_request",
    "canonical_schema",
    "estimate_llm",
    "llm",
    "parse_reply",
    "schema_validator",
]

DEFAULT_LLM_MAX_TOKENS = 1024
"""Output tokens of one ``llm`` step when the plan does not say."""

DATA_MAX_CHARS = 1_000_000
"""Characters of one data value shown to the model before it is cut (first and last
halves, the cut marked in the block): far above a model's context, so in practice never."""

LLM_SYSTEM = (
    "You carry out one step of a plan: do what the instruction in the user's message says, "
    "using the data blocks that follow it. {data_rule} When a JSON Schema is given, reply "
    "with one JSON value that validates against it and nothing else: no prose, no code fence."
)
"""The system prompt of every ``llm`` call; ``{data_rule}`` is
:data:`plandag.executors.data.DATA_BLOCK_RULE`."""
_BYTES_PER_TOKEN = 3  # plandag.models.base.BYTES_PER_TOKEN, without importing it

_REASK = (
    "Your reply did not validate against the JSON Schema. The errors follow as data. Reply "
    "again with one JSON value that validates, and nothing else."
)
_FENCE = re.compile(r"^```[A-Za-z0-9_-]*\s*\n(?P<body>.*?)\n?```\s*$", re.DOTALL)


def _split_prompt(prompt: str, written: Any, resolve: Any) -> tuple[str, list[tuple[str, Any]]]:
    """The instruction with each step reference named instead of pasted, and the
    referenced values to quote as data: ``(instruction, [(label, value), ...])``."""
    if not isinstance(written, str) or resolve is None:
        return prompt, []
    quoted: list[tuple[str, Any]] = []
    pieces: list[str] = []
    last = 0
    for match in REFERENCE_PATTERN.finditer(written):
        if match.group("step") is None:
            continue  # a param: the person's own input, resolved in place below
        label = match.group(0)[1:-1].replace("_", " ", 2)
        pieces.append(written[last : match.start()])
        pieces.append(f"[data block: {label}]")
        quoted.append((label, resolve(match.group(0))))
        last = match.end()
    if not quoted:
        return prompt, []
    pieces.append(written[last:])
    return str(resolve("".join(pieces))), quoted


def build_request(
    prompt: str,
    data: Any,
    schema: Mapping[str, Any] | None,
    model: str,
    max_tokens: int,
    *,
    quoted: list[tuple[str, Any]] | None = None,
    reask: Mapping[str, Any] | None = None,
) -> LLMRequest:
    """The request of one ``llm`` attempt.

    Args:
        prompt: the instruction.
        data: the data, or None; quoted as a data block labelled ``data``.
        schema: the JSON Schema of the reply, or None for text.
        model: the model.
        max_tokens: output tokens (>= 1).
        quoted: more ``(label, value)`` data blocks, before ``data`` (step results the
            prompt referred to).
        reask: ``{"reply": text, "errors": [...]}`` of the invalid reply being asked again,
            or None.

    Returns:
        The :class:`~plandag.models.LLMRequest`: system :data:`LLM_SYSTEM`, one user
        message (the instruction, then each data block), and for a re-ask the reply and a
        user message with the errors.
    """
    from plandag.executors.data import DATA_BLOCK_RULE, quote_data
    from plandag.models.base import LLMRequest

    parts = [prompt]
    for label, value in quoted or ():
        parts.append(quote_data(label, value, max_chars=DATA_MAX_CHARS))
    if data is not None:
        parts.append(quote_data("data", data, max_chars=DATA_MAX_CHARS))
    if schema is not None:
        parts.append(
            "Reply with JSON that validates against this JSON Schema:\n" + canonical_schema(schema)
        )
    messages: list[ChatMessage] = [{"role": "user", "content": "\n\n".join(parts)}]
    if reask is not None:
        messages.append({"role": "assistant", "content": str(reask["reply"]) or "(empty)"})
        errors = quote_data("schema validation errors", list(reask["errors"]))
        messages.append({"role": "user", "content": f"{_REASK}\n\n{errors}"})
    return LLMRequest(
        model=model,
        messages=messages,
        max_tokens=max_tokens,
        system=LLM_SYSTEM.format(data_rule=DATA_BLOCK_RULE),
        json_schema=schema,
    )


SCHEMA_VALIDATORS = 256
"""Schemas :func:`schema_validator` remembers as checked (least recently used dropped
first): one per distinct schema, so a batch whose steps share a few schemas checks each
once."""


def canonical_schema(schema: Mapping[str, Any]) -> str:
    """The schema's canonical JSON (keys sorted, no spaces): the key of its validator, and
    the text every request shows the model (:func:`plandag.models.schemas.canonical_json`)."""
    from plandag.models.schemas import canonical_json

    return canonical_json(schema)


@functools.lru_cache(maxsize=SCHEMA_VALIDATORS)
def _validator_of(canonical: str) -> Any:
    import jsonschema

    from plandag.models.schemas import validator_for

    schema = json.loads(canonical)
    jsonschema.Draft202012Validator.check_schema(schema)
    return validator_for(schema, canonical)


def schema_validator(schema: Mapping[str, Any], canonical: str | None = None) -> Any:
    """The validator of ``schema`` (JSON Schema Draft 2020-12, the ``jsonschema`` library's
    ``Draft202012Validator``), checked against the metaschema once per distinct schema
    (same canonical JSON); the validator is the one the model clients validate answers
    with (:func:`plandag.models.schemas.validator_for`), built once per schema.

    Args:
        schema: a JSON Schema.
        canonical: :func:`canonical_schema` of ``schema`` when the caller has it.

    Raises:
        jsonschema.SchemaError: ``schema`` is not a valid JSON Schema (not cached: an invalid
            schema is checked again each time).
    """
    return _validator_of(canonical if canonical is not None else canonical_schema(schema))


def parse_reply(
    text: str, schema: Mapping[str, Any], *, canonical: str | None = None
) -> tuple[Any, list[str]]:
    """Decode a reply as JSON and validate it against ``schema``, once, with its cached
    validator (:func:`schema_validator`).

    A reply wrapped in one Markdown code fence is unwrapped first.

    Args:
        text: the reply.
        schema: a JSON Schema (Draft 2020-12).
        canonical: :func:`canonical_schema` of ``schema`` when the caller has it.

    Returns:
        ``(value, errors)``: the decoded value and the validation errors, one line each
        (``$.total: 'x' is not of type 'number'``), empty when it validates; ``(None,
        ["not JSON: ..."])`` when the text is not JSON.

    Raises:
        jsonschema.SchemaError: ``schema`` is not a valid JSON Schema.
    """
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced is not None:
        body = fenced.group("body").strip()
    try:
        value = json.loads(body)
    except ValueError as error:
        return None, [f"not JSON: {error}"]
    validator = schema_validator(schema, canonical)
    errors = [
        f"{error.json_path}: {error.message}"
        for error in sorted(validator.iter_errors(value), key=lambda item: item.json_path)
    ]
    return value, errors


def _validated(
    response: LLMResponse, schema: Mapping[str, Any], canonical: str | None
) -> tuple[Any, list[str]]:
    """The reply's value and its violations of ``schema``, validated once: the client's
    own validation when it made one (``schema_mode`` set: the answer brought back to the
    schema's shape and checked, :mod:`plandag.models.structured`), else
    :func:`parse_reply`'s (a client without structured output, or a reply that is not
    JSON as it stands, such as one in a code fence)."""
    if response.schema_mode is not None:
        try:
            value = json.loads(response.text)
        except ValueError:
            pass
        else:
            return value, list(response.schema_errors)
    return parse_reply(response.text, schema, canonical=canonical)


def _check_schema(schema: Mapping[str, Any], step_id: int, canonical: str) -> None:
    import jsonschema

    try:
        schema_validator(schema, canonical)
    except jsonschema.SchemaError as error:
        raise PermanentStepError(
            f"step {step_id}: llm: schema is not a valid JSON Schema ({error.message} at "
            f"{error.json_path}); fix the step's schema",
            reason="bad_schema",
        ) from None


def estimate_llm(args: Mapping[str, Any]) -> tuple[float | None, int]:
    """What one ``llm`` step may cost, from its arguments as the plan writes them: the
    prompt, data and schema's UTF-8 bytes / 3 plus ``max_tokens``, at the price of the
    step's ``model`` (:data:`~plandag.models.DEFAULT_PRICES`); usd None when the step
    names no model or an unpriced one (the plan's estimate then prices the tokens with the
    run's model). A reference counts as its own text: the estimate shown before approval
    cannot know a result's size; the reservation at run time does.

    Returns:
        ``(usd, tokens)``.
    """
    from plandag.models.base import Usage
    from plandag.models.pricing import DEFAULT_PRICES

    size = len(LLM_SYSTEM.encode("utf-8"))
    for name in ("prompt", "data", "schema"):
        value = args.get(name)
        if value is not None:
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            size += len(text.encode("utf-8"))
    max_tokens = args.get("max_tokens", DEFAULT_LLM_MAX_TOKENS)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        max_tokens = DEFAULT_LLM_MAX_TOKENS
    input_tokens = math.ceil(size / _BYTES_PER_TOKEN)
    usage = Usage(input_tokens=input_tokens, output_tokens=max_tokens)
    model = args.get("model")
    price = DEFAULT_PRICES.lookup(model) if isinstance(model, str) and model else None
    return (price.cost(usage) if price is not None else None), usage.total_tokens


def _json_schema_arg(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``schema`` argument checked as a JSON Schema (Draft 2020-12) when the plan
    compiles, so a bad one stops the plan (``invalid_args``) before anything runs.

    Raises:
        ValueError: the schema is not valid (pydantic reports it as the argument's error).
    """
    import jsonschema

    if schema is None:
        return None
    try:
        canonical = canonical_schema(schema)
    except (TypeError, ValueError) as error:
        raise ValueError(f"not JSON ({error}); give the schema as JSON") from None
    try:
        schema_validator(schema, canonical)
    except jsonschema.SchemaError as error:
        raise ValueError(
            f"not a valid JSON Schema ({error.message} at {error.json_path}); fix the schema"
        ) from None
    return schema


@tool(name="llm", effects="none", typical_seconds=5.0, estimate=estimate_llm)
async def llm(
    prompt: str,
    data: Any = None,
    schema: Annotated[dict[str, Any] | None, AfterValidator(_json_schema_arg)] = None,
    model: str | None = None,
    max_tokens: int = DEFAULT_LLM_MAX_TOKENS,
    ctx: ToolContext | None = None,
) -> Any:
    """Ask a model one thing: ``prompt`` is the instruction, ``data`` (step results,
    documents) is given to the model as quoted data, never as instructions. With ``schema``
    (a JSON Schema) the reply is validated JSON (asked again once with the errors, then the
    step fails invalid_output); without, the reply's text. ``model``: default the run's
    executor model; ``max_tokens``: output tokens."""

    context = ctx or ToolContext(run_id="adhoc", step_id=0)
    step_id = context.step_id
    models = require_models(context.models, "llm", step_id)
    if max_tokens < 1:
        raise PermanentStepError(
            f"step {step_id}: llm: max_tokens must be >= 1, not {max_tokens}",
            reason="bad_argument",
        )
    canonical: str | None = None
    if schema is not None:
        canonical = canonical_schema(schema)
        _check_schema(schema, step_id, canonical)
    written = context.step_args.get("prompt") if context.step_args is not None else None
    instruction, quoted = _split_prompt(prompt, written, context.resolve)
    name = model or models.model
    state = context.step_state
    request = build_request(
        instruction, data, schema, name, max_tokens, quoted=quoted, reask=state.get("reask")
    )
    response = await call_model(context, models, request, "llm")
    where = f"step {step_id}: llm {models.provider} {name}"
    if schema is None:
        return response.text
    value, errors = _validated(response, schema, canonical)
    if not errors:
        return value
    shown = "; ".join(errors[:5]) + (f" (and {len(errors) - 5} more)" if len(errors) > 5 else "")
    if "reask" in state:
        raise InvalidOutputError(
            f"{where}: the reply asked again still does not validate against the schema: "
            f"{shown}; simplify the schema or the instruction, or use a larger model",
            errors=errors,
        )
    state["reask"] = {"reply": response.text, "errors": errors}
    raise InvalidOutputError(
        f"{where}: the reply does not validate against the schema: {shown}; asking again "
        "once with the errors",
        errors=errors,
        reask=True,
    )
