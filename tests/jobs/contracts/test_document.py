"""One contract's record when a field group's model calls fail: the other groups' fields
stay, the failed group's fields have no answer, and the error names the group and reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from plandag.brakes.budget import Budget
from plandag.executors import ModelAccess
from plandag.jobs.contracts.document import extract_contract
from plandag.jobs.contracts.fields import FieldSpec
from plandag.models import AnthropicClient
from plandag.scheduler import RunLimits
from plandag.testing import MessagesServer, ScriptedResponse

FIELDS = (
    FieldSpec("Governing Law", "Which law governs", "text", "law"),
    FieldSpec("Audit Rights", "Audits", "clause", "audit"),
)


def replies(body: dict[str, Any]) -> ScriptedResponse:
    text = body["messages"][0]["content"]
    group = json.loads(text.rsplit("JSON Schema:\n", 1)[1])["properties"]["fields"]["required"]
    if group == ["Audit Rights"]:
        return ScriptedResponse.text("I cannot find any audit clause, sorry.")
    return ScriptedResponse.json(
        {
            "fields": {
                "Governing Law": [{"quote": "laws of the State of Delaware", "value": "Delaware"}]
            }
        }
    )


@pytest.mark.anyio
async def test_a_group_whose_replies_never_validate_is_an_error_beside_the_others(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.txt"
    path.write_text("This Agreement is governed by the laws of the State of Delaware.", "utf-8")
    with MessagesServer(default=replies) as server:
        client = AnthropicClient(api_key="test", base_url=server.url)
        try:
            record = await extract_contract(
                path,
                fields=FIELDS,
                run_options={
                    "models": ModelAccess(client, "claude-haiku-4-5"),
                    "budget": Budget(20.0, 5_000_000),
                    "limits": RunLimits.lifted(),
                },
            )
        finally:
            await client.aclose()
        assert len(server.message_requests) == 3  # the audit group asked again once
    assert record["status"] == "error"
    assert record["fields"]["Governing Law"]["answer"] == "Delaware"
    assert record["fields"]["Governing Law"]["values"] == [
        {"value": "Delaware", "quote": "laws of the State of Delaware", "start": 34, "end": 63,
         "match": "exact"}
    ]  # fmt: skip
    assert record["fields"]["Audit Rights"] == {
        "type": "clause",
        "values": [],
        "answer": None,
        "rejected": [],
    }
    (error,) = record["errors"]
    assert error["code"] == "invalid_output"
    assert error["message"].startswith(
        "fields Audit Rights: chunk 1 of 1: step 3: llm anthropic claude-haiku-4-5: the reply "
        "asked again still does not validate"
    )
    assert record["checks"]["quote_exists"]["status"] == "pass"
