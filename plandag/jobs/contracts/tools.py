"""The contract tools and the ``quote_exists`` check, registered through the ``plandag.tools``
entry-point group (``contracts``).

* ``contract_text``: a contract file → its extracted text, SHA-256, extractor and chunks
  (for plans a planner writes; the batch reads files itself and passes the text as the
  plan's ``document`` param).
* ``contract_merge``: the ``llm`` replies of one field group, one per chunk → each field's
  values with their evidence (offsets computed here, :mod:`~plandag.jobs.contracts.evidence`;
  each value read from its own quote, :mod:`~plandag.jobs.contracts.grounding`), its
  answer, and the quotes rejected.
* check ``quote_exists``: every value's ``text[start:end]`` is its quote (exactly, or under
  the documented normalised match its ``match`` reports) and holds its value, and no quote
  was rejected for not being in the document or for not holding its value.
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
from plandag.jobs.contracts.grounding import (
    CLAUSE_FLOOR_TYPES,
    clause_quote_too_short,
    raw_not_in_quote,
    value_not_in_quote,
)
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

NOT_FOUND_REASONS: frozenset[str] = frozenset(
    {"quote_not_found", "empty_quote", "value_not_in_quote"}
)
"""Reasons of rejected quotes that fail ``quote_exists``: the quote is not in the document,
or it does not hold the value the model gave (a fabricated value). A clause quote under the
floor (``quote_too_short``) is rejected without failing the check: the passage is real but
proves nothing."""

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
            ``empty``, ``no_text``, ``missing_extra`` or ``too_large`` (past the default limits of
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
    given kept), or None. Other types: the first value, or None. Values kept with
    ``value_normalized: false`` are evidence, not answers: only a clause counts them.
    """
    if kind == "clause":
        return "Yes" if values else "No"
    values = [item for item in values if item.get("value_normalized", True)]
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


def _evidence(
    kind: str, item: Mapping[str, Any], text: str, start: int, end: int
) -> dict[str, Any]:
    """One reply item checked: ``{"accepted": value entry}`` or ``{"rejected": entry}``."""
    quote = item.get("quote")
    if not isinstance(quote, str) or not quote.strip():
        return {
            "rejected": {"quote": quote if isinstance(quote, str) else "", "reason": "empty_quote"}
        }
    located = locate_quote(text, quote, start, end)
    if located is None:
        return {"rejected": {"quote": quote, "reason": "quote_not_found"}}
    exact = text[located.start : located.end]
    if kind in CLAUSE_FLOOR_TYPES:
        short = clause_quote_too_short(exact)
        if short is not None:
            return {"rejected": {"quote": quote, "reason": "quote_too_short", "detail": short}}
    raw = item.get("value")
    entry: dict[str, Any] = {
        "value": None,
        "quote": quote.strip() if located.match == "normalized" else exact,
        "start": located.start,
        "end": located.end,
        "match": located.match,
    }
    try:
        value = normalize_value(kind, raw, exact)
    except InvalidValue as error:
        why = raw_not_in_quote(raw, exact)
        if why is not None:
            return {"rejected": {"quote": quote, "reason": "value_not_in_quote", "detail": why}}
        entry.update(value=raw, value_normalized=False, detail=str(error))
        return {"accepted": entry}
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    why = value_not_in_quote(kind, value, exact)
    if why is not None:
        return {"rejected": {"quote": quote, "reason": "value_not_in_quote", "detail": why}}
    entry["value"] = value
    return {"accepted": entry}


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
        in its own chunk (:func:`~plandag.jobs.contracts.evidence.locate_quote`) and checked
        against the document's text there; it is rejected, with its reason, when:

        - ``empty_quote``: it is blank;
        - ``quote_not_found``: it is not in the chunk;
        - ``quote_too_short``: a ``clause`` or ``yes_no`` quote under the floor
          (:func:`~plandag.jobs.contracts.grounding.clause_quote_too_short`);
        - ``value_not_in_quote``: its value cannot be read from it
          (:func:`~plandag.jobs.contracts.grounding.value_not_in_quote`; ``detail`` says
          what is missing).

        A value that cannot be normalised (:mod:`~plandag.jobs.contracts.values`) keeps its
        evidence when the quote holds it as given: the entry carries the value as given,
        ``"value_normalized": false`` and ``detail`` (why it is not normalised); no value
        (null) is kept the same way. The same span with the same value found in two
        replies counts once; values are in document order.
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
                checked = _evidence(
                    kind, item if isinstance(item, Mapping) else {}, text, start, end
                )
                if "rejected" in checked:
                    rejected.append(checked["rejected"])
                    continue
                entry = checked["accepted"]
                key = (entry["start"], entry["end"], json.dumps(entry["value"], sort_keys=True))
                if key in seen:
                    continue
                seen.add(key)
                values.append(entry)
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


def _value_held(kind: Any, value: Mapping[str, Any], exact: str) -> bool:
    """Whether an accepted value is read from ``exact`` (its quote in the document)."""
    if not isinstance(kind, str):
        return True  # a field given without its type: only its quote is checked
    if value.get("value_normalized", True) is False:
        return raw_not_in_quote(value.get("value"), exact) is None
    return value_not_in_quote(kind, value.get("value"), exact) is None


@check
def quote_exists(result: Any, *, text: str) -> CheckOutcome:
    """Every value's quote is in the document at its offsets (exact, or the documented
    normalised match its ``match`` says) and holds the value, and no quote was rejected as
    not found or as not holding its value (:data:`NOT_FOUND_REASONS`).

    Args:
        result: ``contract_merge``'s result, or one field's ``{"values", "rejected"}``
            mapping keyed by name under ``fields`` (with its ``type``, values are checked
            against their quotes too).
        text: the document's extracted text.

    Returns:
        ``pass`` with the counts of exact and normalised matches; ``fail`` naming each
        quote not in the document (the hallucination guard), each value its quote does not
        hold, and each value whose ``text[start:end]`` is not its quote; ``not_applicable``
        when no field was asked.
    """
    fields = result.get("fields") if isinstance(result, Mapping) else None
    if not isinstance(fields, Mapping) or not fields:
        return CheckOutcome("quote_exists", "not_applicable", "no field in the result")
    counts = {"exact": 0, "normalized": 0}
    missing: list[str] = []
    unheld: list[str] = []
    mismatched: list[str] = []
    for name, field in fields.items():
        if not isinstance(field, Mapping):
            continue
        for value in field.get("values", []):
            quote, start, end, match = (
                value.get("quote"),
                value.get("start"),
                value.get("end"),
                value.get("match"),
            )
            if not (
                isinstance(quote, str)
                and isinstance(start, int)
                and isinstance(end, int)
                and isinstance(match, str)
                and quote_matches(text, quote, start, end, match)
            ):
                mismatched.append(f"{name}: [{start}, {end}) is not {_shown(str(quote))!r}")
            elif not _value_held(field.get("type"), value, text[start:end]):
                unheld.append(f"{name}: {_shown(str(value.get('value')))!r}")
            else:
                counts[match] += 1
        for rejected in field.get("rejected", []):
            shown = f"{name}: {_shown(str(rejected.get('quote', '')))!r}"
            if rejected.get("reason") == "value_not_in_quote":
                unheld.append(shown)
            elif rejected.get("reason") in NOT_FOUND_REASONS:
                missing.append(shown)
    if missing or unheld or mismatched:
        parts = []
        if missing:
            parts.append(f"{len(missing)} quote(s) not in the document: " + "; ".join(missing))
        if unheld:
            parts.append(f"{len(unheld)} value(s) their quote does not hold: " + "; ".join(unheld))
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
