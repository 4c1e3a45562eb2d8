"""The hallucination guard on the shared CUAD contracts: replies that quote correctly for
some fields and fabricate or shift quotes for others. Every correct quote is accepted with
the right offsets; every fabricated or shifted one is rejected and fails ``quote_exists``.

Expected offsets are found independently of plandag's search: ``str.find`` inside the
chunk for exact quotes, and a regular expression over the quote's words for normalised
ones.
"""

from __future__ import annotations

import calendar
import dataclasses
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from plandag.jobs.contracts.chunks import Chunk, chunk_text
from plandag.jobs.contracts.fields import CUAD_FIELDS
from plandag.jobs.contracts.tools import merge_field_replies, quote_exists

CHUNK_CHARS = 3000


@dataclasses.dataclass
class Scripted:
    """Replies for one contract, by chunk, with what each quote should become."""

    text: str
    chunks: list[Chunk]
    replies: dict[int, dict[str, list[dict[str, Any]]]]
    correct: list[tuple[str, str, int, int, str]]  # field, quote, start, end, match
    bad: list[tuple[str, str, str]]  # field, quote, kind (fabricated | shifted)
    values: dict[tuple[str, int, int], Any]  # (field, start, end) → the normalised value

    def add(self, chunk: int, field: str, quote: str, value: Any = None) -> None:
        self.replies.setdefault(chunk, {}).setdefault(field, []).append(
            {"quote": quote, "value": value}
        )


def _chunk_of(chunks: list[Chunk], start: int, end: int) -> Chunk | None:
    return next((c for c in chunks if c.start <= start and end <= c.end), None)


def _fabrications(quote: str) -> list[str]:
    """Near misses a model produces: a changed number or word, an addition, a reordering."""
    variants = []
    digits = re.search(r"\d", quote)
    if digits:
        changed = str((int(digits.group()) + 1) % 10)
        variants.append(quote[: digits.start()] + changed + quote[digits.end() :])
    words = quote.split()
    variants.append(" ".join([*words[:3], "not", *words[3:]]))
    variants.append(quote.rstrip(".") + " and its affiliates.")
    if len(words) > 4:
        variants.append(" ".join([words[1], words[0], *words[2:]]))
    return variants


def _normalised_pattern(quote: str) -> re.Pattern[str]:
    return re.compile(r"\s+".join(re.escape(word) for word in quote.split()), re.IGNORECASE)


def _label_values(field: str, labelled: Mapping[str, Any]) -> dict[str, Any] | None:
    """The value a correct reply gives for each labelled passage of an answer category,
    written out from the label's answer (None: the category is not scripted)."""
    answer = labelled["answer"]
    if not answer or not labelled["clauses"]:
        return None
    if field in ("Document Name", "Governing Law"):
        return dict.fromkeys(labelled["clauses"], answer)
    if field.endswith("Date"):
        found = re.fullmatch(r"(\d{1,2})/(\d{1,2})/(\d{2})", answer)
        if found is None:  # "perpetual", "08/[]/2019": not a date, not scripted
            return None
        month, day, year = (int(part) for part in found.groups())
        iso = f"20{year:02d}-{month:02d}-{day:02d}"
        written = (
            f"{calendar.month_name[month]} {day}, 20{year:02d}",
            f"{month}/{day}/{year:02d}",
            f"{month}/{day}/20{year:02d}",
        )
        # a passage that does not write the date is evidence without a value (null)
        return {
            clause: iso if any(form in clause for form in written) else None
            for clause in labelled["clauses"]
        }
    if field == "Parties":
        roles = dict(re.findall(r"([^;()]+?)\s*\(\"([^\"]+)\"\)", answer))
        return {
            name: {"name": name, "role": roles[name]}
            for name in labelled["clauses"]
            if name in roles
        }
    return None


def scripted_contract(
    folder: Path, label: Mapping[str, Any], chunk_chars: int = CHUNK_CHARS
) -> Scripted:
    """Build one contract's replies from its CUAD labels (see the module docstring)."""
    text = (folder / label["file"]).read_text(encoding="utf-8")
    chunks = chunk_text(text, chunk_chars)
    script = Scripted(text, chunks, {}, [], [], {})
    kinds = {spec.name: spec.type for spec in CUAD_FIELDS}
    for field, labelled in label["labels"].items():
        values = None if kinds[field] == "clause" else _label_values(field, labelled)
        if kinds[field] != "clause" and values is None:
            continue
        for clause in labelled["clauses"]:
            value = None if values is None else values.get(clause)
            if values is not None and clause not in values:
                continue
            if "<omitted>" in clause:  # a spliced passage: exactly what must be refused
                script.add(0, field, clause.replace("<omitted>", " "), value)
                script.bad.append((field, clause.replace("<omitted>", " "), "fabricated"))
                continue
            start = text.find(clause)
            if start < 0:
                continue
            chunk = _chunk_of(chunks, start, start + len(clause))
            if chunk is None:
                continue
            inside = text.find(clause, chunk.start, chunk.end)
            found = _normalised_pattern(clause).search(text, chunk.start, chunk.end)
            assert found is not None
            loose = "  " + "\n".join(clause.upper().split(" ")) + "\n"
            if (
                len(script.correct) % 2
                and found.start() == inside
                and text.find(loose.strip(), chunk.start, chunk.end) < 0
            ):
                # every other passage with its spacing and case changed: a normalised match
                script.add(chunk.index, field, loose, value)
                script.correct.append(
                    (field, loose.strip(), found.start(), found.end(), "normalized")
                )
                span = (found.start(), found.end())
            else:
                script.add(chunk.index, field, clause, value)
                script.correct.append((field, clause, inside, inside + len(clause), "exact"))
                span = (inside, inside + len(clause))
            clause_text = text[span[0] : span[1]]
            script.values[(field, *span)] = clause_text if kinds[field] == "clause" else value
            for fabricated in _fabrications(clause):
                if _normalised_pattern(fabricated).search(text) is None:
                    script.add(chunk.index, field, fabricated, value)
                    script.bad.append((field, fabricated, "fabricated"))
            # shifted: the passage answered for a chunk that does not hold it
            if len(chunks) > 1:
                other = chunks[chunk.index + 1 if chunk.index + 1 < len(chunks) else 0]
                if _normalised_pattern(clause).search(text, other.start, other.end) is None:
                    script.add(other.index, field, clause, value)
                    script.bad.append((field, clause, "shifted"))
    # shifted across a cut: 60 characters either side of each chunk boundary
    for before in chunks[:-1]:
        window = text[before.end - 60 : before.end + 60]
        if window.strip() and window.strip() not in text[before.start : before.end]:
            script.add(before.index, "Audit Rights", window)
            script.bad.append(("Audit Rights", window, "shifted"))
    return script


def _labels(folder: Path) -> list[dict[str, Any]]:
    with (folder / "cuad_labels.jsonl").open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def merge(script: Scripted) -> dict[str, dict[str, Any]]:
    answers = [
        {"chunk": chunk.index, "reply": {"fields": script.replies.get(chunk.index, {})}}
        for chunk in script.chunks
    ]
    spans = [{"index": c.index, "start": c.start, "end": c.end} for c in script.chunks]
    return merge_field_replies(
        script.text, spans, [spec.as_dict() for spec in CUAD_FIELDS], answers
    )


def assert_guarded(script: Scripted, fields: Mapping[str, Any]) -> tuple[int, int]:
    """Every correct quote accepted at its offsets, every bad one rejected; returns the
    counts (accepted, rejected)."""
    accepted = {
        (name, value["quote"], value["start"], value["end"], value["match"])
        for name, field in fields.items()
        for value in field["values"]
    }
    assert accepted == set(script.correct)
    rejected = {
        (name, item["quote"])
        for name, field in fields.items()
        for item in field["rejected"]
        if item["reason"] == "quote_not_found"
    }
    assert rejected == {(field, quote) for field, quote, _ in script.bad}
    kinds = {spec.name: spec.type for spec in CUAD_FIELDS}
    for name, field in fields.items():
        for value in field["values"]:
            assert value["value"] == script.values[(name, value["start"], value["end"])]
        if kinds[name] == "clause":
            assert field["answer"] == ("Yes" if field["values"] else "No"), name
    return len(accepted), len(rejected)


def test_on_the_cuad_contracts_correct_quotes_pass_and_invented_ones_never_do(
    contracts_dir: Path,
) -> None:
    totals = {"exact": 0, "normalized": 0, "fabricated": 0, "shifted": 0}
    for label in _labels(contracts_dir):
        script = scripted_contract(contracts_dir, label)
        fields = merge(script)
        assert_guarded(script, fields)
        for *_, match in script.correct:
            totals[match] += 1
        for _, _, kind in script.bad:
            totals[kind] += 1
        outcome = quote_exists.evaluate({"fields": fields}, {"text": script.text})
        assert outcome.status == "fail"
        assert outcome.detail.startswith(f"{len(script.bad)} quote(s) not in the document: ")
    # the corpus exercises every kind, in numbers
    assert totals == {"exact": 27, "normalized": 21, "fabricated": 149, "shifted": 63}


def test_quote_exists_passes_when_every_quote_is_there(contracts_dir: Path) -> None:
    label = _labels(contracts_dir)[3]
    script = scripted_contract(contracts_dir, label)
    script.replies = {}
    clauses = {spec.name for spec in CUAD_FIELDS if spec.type == "clause"}
    for field, quote, start, end, _ in script.correct:
        chunk = _chunk_of(script.chunks, start, end)
        assert chunk is not None
        value = None if field in clauses else script.values[(field, start, end)]
        script.add(chunk.index, field, quote, value)
    fields = merge(script)
    outcome = quote_exists.evaluate({"fields": fields}, {"text": script.text})
    assert outcome.status == "pass"
    exact = sum(1 for *_, match in script.correct if match == "exact")
    assert outcome.detail == (
        f"{len(script.correct)} quote(s) found: {exact} exact, "
        f"{len(script.correct) - exact} normalized (whitespace, case, quote marks, dashes)"
    )


def test_quote_exists_fails_on_offsets_that_do_not_hold_the_quote() -> None:
    text = "The Term is one year. Delaware law governs."
    shifted = {
        "fields": {
            "Governing Law": {
                "values": [
                    {
                        "value": "Delaware",
                        "quote": "Delaware",
                        "start": 23,
                        "end": 31,
                        "match": "exact",
                    }
                ],
                "rejected": [],
            }
        }
    }
    outcome = quote_exists.evaluate(shifted, {"text": text})
    assert outcome.status == "fail"
    assert outcome.detail == (
        "1 value(s) whose offsets do not hold the quote: Governing Law: [23, 31) is not 'Delaware'"
    )
    shifted["fields"]["Governing Law"]["values"][0].update(start=22, end=30)
    assert quote_exists.evaluate(shifted, {"text": text}).status == "pass"


@pytest.mark.parametrize("reply", [None, "text", {"fields": None}, {"fields": {"Audit Rights": 3}}])
def test_malformed_replies_give_no_value(reply: Any) -> None:
    fields = merge_field_replies(
        "Audit.",
        [{"index": 0, "start": 0, "end": 6}],
        [{"name": "Audit Rights", "type": "clause"}],
        [{"chunk": 0, "reply": reply}],
    )
    assert fields == {
        "Audit Rights": {"type": "clause", "values": [], "answer": "No", "rejected": []}
    }


# -- the same through the llm steps of each contract's plan, on the local Messages API -------


def responder_for(scripts: list[Scripted]) -> Any:
    """A scripted model: finds the contract and chunk from the request's data block and the
    field group from its schema, and replies with that contract's scripted quotes."""
    from plandag.executors.data import parse_data_blocks
    from plandag.testing import ScriptedResponse

    def reply(body: dict[str, Any]) -> ScriptedResponse:
        text = body["messages"][0]["content"]
        text = text if isinstance(text, str) else "".join(b["text"] for b in text)
        (block,) = [b for b in parse_data_blocks(text) if b.attributes["label"] == "data"]
        start, _, end = block.value["characters"].partition(" to ")
        excerpt = block.value["excerpt"]
        script = next(s for s in scripts if s.text[int(start) : int(end)] == excerpt)
        chunk = next(c for c in script.chunks if c.start == int(start))
        schema = json.loads(text.rsplit("JSON Schema:\n", 1)[1])
        group = schema["properties"]["fields"]["required"]
        found = script.replies.get(chunk.index, {})
        return ScriptedResponse.json({"fields": {name: found.get(name, []) for name in group}})

    return reply


@pytest.mark.anyio
async def test_through_the_plans_llm_steps_the_guard_holds_on_every_contract(
    contracts_dir: Path, tmp_path: Path
) -> None:
    from plandag.brakes.budget import Budget
    from plandag.executors import ModelAccess
    from plandag.jobs.contracts.batch import expand_contract_inputs, extract_contracts
    from plandag.models import AnthropicClient
    from plandag.scheduler import RunLimits
    from plandag.testing import MessagesServer

    labels = _labels(contracts_dir)
    chunk_chars = 6000  # fewer model calls than the direct test, still several chunks
    scripts = [scripted_contract(contracts_dir, label, chunk_chars) for label in labels]
    calls = sum(len(script.chunks) for script in scripts) * 5  # five CUAD field groups
    assert calls == 65
    out = tmp_path / "cuad.jsonl"
    with MessagesServer() as server:
        for _ in range(calls):
            server.push_responder(responder_for(scripts))
        client = AnthropicClient(api_key="test", base_url=server.url)
        budget = Budget(20.0, 5_000_000)
        try:
            files, missing = expand_contract_inputs(
                [str(contracts_dir / label["file"]) for label in labels]
            )
            summary = await extract_contracts(
                files,
                out,
                missing=missing,
                chunk_chars=chunk_chars,
                run_options={
                    "models": ModelAccess(client, "claude-haiku-4-5"),
                    "budget": budget,
                    "limits": RunLimits.lifted(),
                },
            )
        finally:
            await client.aclose()
        assert len(server.message_requests) == calls
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [Path(r["file"]).name for r in records] == [label["file"] for label in labels]
    for script, record in zip(scripts, records, strict=True):
        assert record["status"] == "check_failed"
        assert record["chunks"] == len(script.chunks)
        assert record["chars"] == len(script.text)
        assert list(record["fields"]) == [spec.name for spec in CUAD_FIELDS]
        assert_guarded(script, record["fields"])
        assert record["checks"]["quote_exists"]["status"] == "fail"
        assert record["errors"] == []
    assert summary.by_status == {"check_failed": 7}
    assert summary.values == sum(len(script.correct) for script in scripts) == 49
    bad = sum(len(script.bad) for script in scripts)
    assert summary.rejected == {"quote_not_found": bad}
    assert budget.spent_tokens > 0
