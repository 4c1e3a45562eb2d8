"""A generated 300-page PDF through its plan: every chunk goes to exactly one llm step per
field group, and the evidence each chunk gives lands at offsets in the whole text."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from plandag.brakes.budget import Budget
from plandag.executors import ModelAccess
from plandag.executors.data import parse_data_blocks
from plandag.jobs.contracts.chunks import chunk_text
from plandag.jobs.contracts.document import extract_contract
from plandag.jobs.contracts.fields import FieldSpec
from plandag.jobs.contracts.text import read_contract
from plandag.models import AnthropicClient
from plandag.scheduler import RunLimits
from plandag.testing import MessagesServer, ScriptedResponse

HEADINGS = FieldSpec("Headings", "Section headings", "text", "only")


def first_line(body: dict[str, Any]) -> ScriptedResponse:
    """Quote the excerpt's first line (its section heading)."""
    text = body["messages"][0]["content"]
    (block,) = [b for b in parse_data_blocks(text) if b.attributes["label"] == "data"]
    heading = block.value["excerpt"].split("\n", 1)[0]
    return ScriptedResponse.json({"fields": {"Headings": [{"quote": heading, "value": heading}]}})


@pytest.mark.anyio
async def test_a_300_page_pdf_sends_every_chunk_once_and_places_its_evidence(
    make_pdf: Callable[..., Path],
) -> None:
    body = "The Supplier shall deliver the goods on time and in full."
    path = make_pdf(
        "long.pdf", [[f"Section {n}. Delivery terms", *[body] * 28] for n in range(1, 301)]
    )
    text = read_contract(path).text
    chunks = chunk_text(text)
    with MessagesServer(default=first_line) as server:
        client = AnthropicClient(api_key="test", base_url=server.url)
        try:
            record = await extract_contract(
                path,
                fields=(HEADINGS,),
                run_options={
                    "models": ModelAccess(client, "claude-haiku-4-5"),
                    "budget": Budget(20.0, 5_000_000),
                    "limits": RunLimits.lifted(),
                },
            )
        finally:
            await client.aclose()
        asked = []
        for request in server.message_requests:
            (block,) = [
                b
                for b in parse_data_blocks(request.body["messages"][0]["content"])
                if b.attributes["label"] == "data"
            ]
            start, _, end = block.value["characters"].partition(" to ")
            assert block.value["excerpt"] == text[int(start) : int(end)]
            asked.append((int(start), int(end)))
    assert record["status"] == "ok", json.dumps(record["errors"])
    assert record["chunks"] == len(chunks) == 34
    assert record["chars"] == len(text)
    assert sorted(asked) == [(c.start, c.end) for c in chunks]
    values = record["fields"]["Headings"]["values"]
    assert [(v["start"], v["match"]) for v in values] == [(c.start, "exact") for c in chunks]
    assert all(text[v["start"] : v["end"]] == v["quote"] for v in values)
    assert values[-1]["quote"] == "Section 298. Delivery terms"
