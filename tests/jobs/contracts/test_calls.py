"""At most N model calls of a batch at once (``--max-model-calls``)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from plandag.brakes.budget import Budget
from plandag.cli.contracts_command import model_options
from plandag.jobs.contracts.batch import expand_contract_inputs, extract_contracts
from plandag.jobs.contracts.fields import FieldSpec
from plandag.models import AnthropicClient
from plandag.scheduler import RunLimits
from plandag.testing import MessagesServer, ScriptedResponse


@pytest.mark.anyio
async def test_the_batch_never_has_more_model_calls_at_once_than_its_limit(
    tmp_path: Path,
) -> None:
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.txt").write_text(f"Contract {name}. Delaware law.", encoding="utf-8")
    fields = [FieldSpec(f"F{n}", "anything", "text", f"group {n}") for n in range(4)]
    lock = threading.Lock()
    running = [0, 0]  # now, most

    def slow(body: dict[str, Any]) -> ScriptedResponse:
        with lock:
            running[0] += 1
            running[1] = max(running)
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        schema = json.loads(body["messages"][0]["content"].rsplit("JSON Schema:\n", 1)[1])
        group = schema["properties"]["fields"]["required"]
        return ScriptedResponse.json({"fields": {name: [] for name in group}})

    with MessagesServer(default=slow) as server:
        client = AnthropicClient(api_key="test", base_url=server.url)
        try:
            files, missing = expand_contract_inputs([str(tmp_path)])
            summary = await extract_contracts(
                files,
                tmp_path / "out.jsonl",
                fields=fields,
                jobs=3,
                missing=missing,
                run_options={
                    **model_options(client, "claude-haiku-4-5", 2),
                    "budget": Budget(20.0, 5_000_000),
                    "limits": RunLimits.lifted(),
                },
            )
        finally:
            await client.aclose()
        assert len(server.message_requests) == 12  # 3 contracts x 4 field groups
    assert summary.by_status == {"ok": 3}
    assert running[1] == 2


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        model_options(object(), "claude-haiku-4-5", 0)
