"""The contract tools and the ``quote_exists`` check, registered through the ``plandag.tools``
entry-point group (``contracts``).

* ``contract_text``: a contract file → its extracted text, SHA-256, extractor and chunks
  (for plans a planner writes; the batch reads files itself and passes the text as the
  plan's ``document`` param).
* ``contract_merge``: the ``llm`` replies of one field group, one per chunk → each field's
  values with their evidence (offsets computed here, :mod:`~plandag.jobs.contracts.evidence`),
  its answer, and the quotes rejected.
* check ``quote_exists``: every value's ``text[start:end]`` is its quote (exactly, or under
  the documented normalised match its ``match`` reports), and no quote was rejected for not
  being in the document.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from plandag.checks.base import CheckDefinition, CheckOutcome, check
from plandag.errors import PermanentStepError
from plandag.jobs.contracts.chunks import DEFAULT_CHUNK_CHARS, chunk_text
from plandag.jobs.contracts.evidence import locate_quote, quote_matches
from plandag.jobs.contracts.text import ContractInputError, read_contract
from plandag.jobs.contracts.values import InvalidValue, normalize_value
from plandag.tools.base import Tool, tool

__all__ = [
    "CONTRACT_CHECKS",
    "CONTRACT_TOOLS",
    "NOT_FOUND_REASONS",
    "contract_merge",
    "contract_text",
    "field_answer",
    "merge_field_replies",
    "plandag_tools",
    "quote_exists",
]

NOT_FOUND_REASONS: frozenset[str] = frozenset({"quote_not_found", "empty_quote"})
"""Reasons of rejected quotes that fail ``quote_exists`` (the quote is not evidence)."""

_SHOWN_QUOTE = 80


@tool(reads="path", typical_seconds=0.05)
def contract_text(path: str, chunk_chars: int = DEFAULT_CHUNK_CHARS) -> dict[str, Any]:
    """Read a contract (.txt, .md, .pdf, .docx) and cut its text into chunks.

    Args:
        path: the contract file.
        chunk_chars: characters per chunk at most (section and clause boundaries preferred).

    Returns:
        ``{"file", "text", "text_sha256", "extractor": {"name", "version"}, "chars",
        "chunks": [{"index", "start", "end", "text"}]}``; offsets index ``text``.

    Raises:
        PermanentStepError: reason ``unsupported_type``, ``unreadable``, ``encrypted_pdf``,
            ``empty``, ``no_text`` or ``too_large`` (past the default limits of
            :func:`~plandag.jobs.contracts.text.read_contract`); the message says what to
            do.
    """
    try:
        contract = read_contract(Path(path))
    except ContractInputError as error:
        raise PermanentStepError(str(error), reason=error.code) from error
    return {
        "file": path,
        "text": contract.text,
        "text_sha256": contract.sha256,
        "extractor": contract.extractor,
        "chars": len(contract.text),
        "chunks": [c.as_dict(contract.text) for c in chunk_text(contract.text, chunk_chars)],
    }


def _shown(quote: str) -> str:
    flat = " ".join(quote.split())
    return flat if len(flat) <= _SHOWN_QUOTE else flat[: _SHOWN_QUOTE - 1] + "…"


def field_answer(kind: str, values: Sequence[Mapping[str, Any]]) -> Any:
    """A field's answer from its accepted values (in document order).

    ``clause``: ``"Yes"`` when a passage was found, else ``"No"`` (CUAD's answers for clause
    categories). ``parties``: every party once (names compared ignoring case; the first role
    given kept), or None. Other types: the first value, or None.
    """
    if kind == "clause":
        return "Yes" if values else "No"
    if not values:
        return None
    if kind == "parties":
        parties: dict[str, dict[str, Any]] = {}
        for item in values:
            value = item["value"]
            for party in value if isinstance(value, list) else [value]:
                key = " ".join(str(party["name"]).casefold().split())
                known = parties.get(key)
                if known is None:
                    parties[key] = dict(party)
                elif known.get("role") is None and party.get("role") is not None:
                    known["role"] = party["role"]
        return list(parties.values())
    return values[0]["value"]


def merge_field_replies(
    text: str,
    chunks: Sequence[Mapping[str, Any]],
    fields: Sequence[Mapping[str, Any]],
    answers: Sequence[Mapping[str, Any]],
) -> dict[str, dict[str, Any]]:
    """Merge one field group's replies (one per chunk) into each field's evidence.

    Args:
        text: the document's extracted text.
        chunks: ``{"index", "start", "end"}`` of each chunk.
        fields: ``{"name", "type", ...}`` of each field of the group.
        answers: ``{"chunk": index, "reply": {"fields": {name: [{"quote", "value"}]}}}``.

    Returns:
        By field name: ``{"type", "values": [{"value", "quote", "start", "end", "match"}],
        "answer", "rejected": [{"quote", "reason", "detail"?}]}``. Each quote is searched
        in its own chunk (:func:`~plandag.jobs.contracts.evidence.locate_quote`); one not
        there is rejected (``quote_not_found``; ``empty_quote`` when blank), and one whose
        value cannot be normalised is rejected (``invalid_value``, with ``detail``). The
        same span with the same value found in two replies counts once; values are in
        document order.
    """
    spans = {int(chunk["index"]): (int(chunk["start"]), int(chunk["end"])) for chunk in chunks}
    merged: dict[str, dict[str, Any]] = {}
    for spec in fields:
        name, kind = str(spec["name"]), str(spec["type"])
        values: list[dict[str, Any]] = []
        rejected: list[dict[str, Any]] = []
        seen: set[tuple[int, int, str]] = set()
        for answer in answers:
            start, end = spans.get(int(answer.get("chunk", -1)), (0, len(text)))
            reply = answer.get("reply")
            found = reply.get("fields") if isinstance(reply, Mapping) else None
            items = found.get(name) if isinstance(found, Mapping) else None
            for item in items if isinstance(items, list) else []:
                quote = item.get("quote") if isinstance(item, Mapping) else None
                if not isinstance(quote, str) or not quote.strip():
                    rejected.append(
                        {"quote": quote if isinstance(quote, str) else "", "reason": "empty_quote"}
                    )
                    continue
                located = locate_quote(text, quote, start, end)
                if located is None:
                    rejected.append({"quote": quote, "reason": "quote_not_found"})
                    continue
                exact = text[located.start : located.end]
                try:
                    value = normalize_value(kind, item.get("value"), exact)
                except InvalidValue as error:
                    rejected.append(
                        {"quote": quote, "reason": "invalid_value", "detail": str(error)}
                    )
                    continue
                if isinstance(value, list) and len(value) == 1:
                    value = value[0]
                key = (located.start, located.end, json.dumps(value, sort_keys=True))
                if key in seen:
                    continue
                seen.add(key)
                values.append(
                    {
                        "value": value,
                        "quote": quote.strip() if located.match == "normalized" else exact,
                        "start": located.start,
                        "end": located.end,
                        "match": located.match,
                    }
                )
        values.sort(key=lambda item: (item["start"], item["end"]))
        merged[name] = {
            "type": kind,
            "values": values,
            "answer": field_answer(kind, values),
            "rejected": rejected,
        }
    return merged


@tool(inline=True, typical_seconds=0.005)
def contract_merge(
    text: str,
    chunks: list[dict[str, Any]],
    fields: list[dict[str, Any]],
    answers: list[dict[str, Any]],
) -> dict[str, Any]:
    """Merge one field group's ``llm`` replies (one per chunk) per field, with evidence.

    Args:
        text: the document's extracted text (offsets index it).
        chunks: ``{"index", "start", "end"}`` of each chunk.
        fields: ``{"name", "description", "type"}`` of each field of the group.
        answers: ``{"chunk": index, "reply": the llm step's result}`` per chunk; a reply is
            ``{"fields": {name: [{"quote": exact text, "value": normalised value}]}}``.

    Returns:
        ``{"fields": {name: {"type", "values", "answer", "rejected"}}}`` (see
        :func:`merge_field_replies`): offsets computed here, never taken from the model.
    """
    return {"fields": merge_field_replies(text, chunks, fields, answers)}


@check
def quote_exists(result: Any, *, text: str) -> CheckOutcome:
    """Every value's quote is in the document at its offsets (exact, or the documented
    normalised match its ``match`` says), and no quote was rejected as not found.

    Args:
        result: ``contract_merge``'s result, or one field's ``{"values", "rejected"}``
            mapping keyed by name under ``fields``.
        text: the document's extracted text.

    Returns:
        ``pass`` with the counts of exact and normalised matches; ``fail`` naming each
        quote not in the document (the hallucination guard) and each value whose
        ``text[start:end]`` is not its quote; ``not_applicable`` when no field was asked.
    """
    fields = result.get("fields") if isinstance(result, Mapping) else None
    if not isinstance(fields, Mapping) or not fields:
        return CheckOutcome("quote_exists", "not_applicable", "no field in the result")
    counts = {"exact": 0, "normalized": 0}
    missing: list[str] = []
    mismatched: list[str] = []
    for name, field in fields.items():
        for value in field.get("values", []) if isinstance(field, Mapping) else []:
            quote, start, end, match = (
                value.get("quote"),
                value.get("start"),
                value.get("end"),
                value.get("match"),
            )
            if (
                isinstance(quote, str)
                and isinstance(start, int)
                and isinstance(end, int)
                and isinstance(match, str)
                and quote_matches(text, quote, start, end, match)
            ):
                counts[match] += 1
            else:
                mismatched.append(f"{name}: [{start}, {end}) is not {_shown(str(quote))!r}")
        for rejected in field.get("rejected", []) if isinstance(field, Mapping) else []:
            if rejected.get("reason") in NOT_FOUND_REASONS:
                missing.append(f"{name}: {_shown(str(rejected.get('quote', '')))!r}")
    if missing or mismatched:
        parts = []
        if missing:
            parts.append(f"{len(missing)} quote(s) not in the document: " + "; ".join(missing))
        if mismatched:
            parts.append(
                f"{len(mismatched)} value(s) whose offsets do not hold the quote: "
                + "; ".join(mismatched)
            )
        return CheckOutcome("quote_exists", "fail", "; ".join(parts))
    return CheckOutcome(
        "quote_exists",
        "pass",
        f"{counts['exact'] + counts['normalized']} quote(s) found: {counts['exact']} exact, "
        f"{counts['normalized']} normalized (whitespace, case, quote marks, dashes)",
    )


CONTRACT_TOOLS: tuple[Tool, ...] = (contract_text, contract_merge)
CONTRACT_CHECKS: tuple[CheckDefinition, ...] = (quote_exists,)


def plandag_tools() -> tuple[tuple[Tool, ...], tuple[CheckDefinition, ...]]:
    """The contract application's tools and checks, for the ``plandag.tools`` entry-point
    group (``plandag.tools.registry.default_registry`` discovers them there)."""
    return CONTRACT_TOOLS, CONTRACT_CHECKS
