"""The in-process offline client: usage estimated as the local servers estimate it, the
answer cut at ``max_tokens`` raises as a provider's would, streams give the same text."""

from __future__ import annotations

import anyio
import pytest

from plandag.models import LLMRequest, TruncatedResponseError
from plandag.models.offline import OFFLINE_MODEL, OfflineClient, offline_usage
from plandag.models.pricing import DEFAULT_PRICES
from plandag.testing import estimate_tokens, schema_text


def request(max_tokens: int = 100, schema: dict[str, object] | None = None) -> LLMRequest:
    return LLMRequest(
        model=OFFLINE_MODEL,
        system="sys",
        messages=[{"role": "user", "content": "What is in the data?"}],
        max_tokens=max_tokens,
        json_schema=schema,
    )


def test_usage_follows_the_local_servers_rule() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    usage = offline_usage(request(schema=schema), "x" * 41)
    assert usage.output_tokens == estimate_tokens("x" * 41) == 11
    assert usage.input_tokens == estimate_tokens(
        "sys" + "What is in the data?" + schema_text(schema)
    )


def test_complete_names_the_offline_model_and_costs_nothing() -> None:
    client = OfflineClient(lambda r: "an answer")
    response = anyio.run(client.complete, request())
    assert client.provider == "offline"
    assert response.model == OFFLINE_MODEL
    assert response.text == "an answer"
    assert response.schema_mode is None  # the caller validates, as for any unchecked answer
    assert DEFAULT_PRICES.cost(OFFLINE_MODEL, response.usage) == 0.0


def test_an_answer_longer_than_max_tokens_is_never_used() -> None:
    client = OfflineClient(lambda r: "word " * 100)
    with pytest.raises(TruncatedResponseError):
        anyio.run(client.complete, request(max_tokens=5))


def test_the_stream_gives_the_answer_in_pieces() -> None:
    text = "a long answer " * 20
    client = OfflineClient(lambda r: text)

    async def read() -> tuple[list[str], str]:
        async with client.stream(request()) as stream:
            pieces = [piece async for piece in stream]
            final = await stream.final_response()
        return pieces, final.text

    pieces, final = anyio.run(read)
    assert len(pieces) > 1
    assert "".join(pieces) == final == text


def test_a_stored_run_finds_the_offline_client_by_its_entry_point() -> None:
    from plandag.executors.access import connect
    from plandag.runs.options import RunOptions

    access = connect("offline", model="offline-extractive")
    assert access.provider == "offline"
    assert access.model == OFFLINE_MODEL
    assert isinstance(access.client, OfflineClient)
    options = RunOptions(executor={"provider": "offline", "model": None, "base_url": None})
    stored = options.models()
    assert stored is not None
    assert isinstance(stored.client, OfflineClient)
