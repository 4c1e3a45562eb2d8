"""Prices, cost estimates and the request/usage value types of the LLM client layer."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from plandag.errors import InputError
from plandag.models import (
    DEFAULT_PRICES,
    LLMRequest,
    ModelPrice,
    PriceTable,
    UnpricedModelError,
    Usage,
    estimate_cost,
    estimate_input_tokens,
)
from plandag.models.pricing import catalogue_version

MILLION = 1_000_000


def per_million(model: str) -> tuple[float, float, float, float]:
    """The default table's price of ``model``: input, output, cache write, cache read."""
    price = DEFAULT_PRICES.lookup(model)
    assert price is not None
    return (
        price.cost(Usage(input_tokens=MILLION)),
        price.cost(Usage(output_tokens=MILLION)),
        price.cost(Usage(cache_creation_input_tokens=MILLION)),
        price.cost(Usage(cache_read_input_tokens=MILLION)),
    )


def test_default_prices_of_current_claude_models_come_from_the_catalogue() -> None:
    assert per_million("claude-opus-4-6") == pytest.approx((5.0, 25.0, 6.25, 0.5))
    assert per_million("claude-sonnet-4-6") == pytest.approx((3.0, 15.0, 3.75, 0.3))
    assert per_million("claude-haiku-4-5") == pytest.approx((1.0, 5.0, 1.25, 0.1))
    price = DEFAULT_PRICES.lookup("claude-sonnet-4-6", provider="anthropic")
    assert price is not None
    assert price.source == f"genai-prices {catalogue_version()}"


def test_models_of_other_providers_are_priced_too() -> None:
    assert per_million("gpt-4o-mini")[:2] == pytest.approx((0.15, 0.6))
    assert per_million("gpt-4.1")[:2] == pytest.approx((2.0, 8.0))


def test_every_model_name_the_catalogue_knows_is_priced_as_it_prices_it() -> None:
    """Each model of the bundled data, by its id, under its own provider: priced exactly when
    the catalogue finds it (under that provider, else under another whose names match), at
    the catalogue's own price."""
    from genai_prices import Usage as CatalogUsage
    from genai_prices import data_snapshot

    snapshot = data_snapshot.get_snapshot()
    usage = Usage(input_tokens=1000, output_tokens=100)
    checked = 0
    for provider in snapshot.providers:
        for model in provider.models:
            try:
                found, info = snapshot.find_provider_model(model.id, None, provider.id, None)
            except LookupError:
                try:
                    found, info = snapshot.find_provider_model(model.id, None, None, None)
                except LookupError:
                    assert DEFAULT_PRICES.lookup(model.id, provider=provider.id) is None
                    continue
            price = DEFAULT_PRICES.lookup(model.id, provider=provider.id)
            assert price is not None, (provider.id, model.id)
            expected = info.calc_price(
                CatalogUsage(input_tokens=1000, output_tokens=100), found
            ).total_price
            assert price.cost(usage) == pytest.approx(float(expected)), (provider.id, model.id)
            checked += 1
    assert checked > 2000


def test_a_model_reached_through_another_providers_api_is_priced_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    price = DEFAULT_PRICES.lookup(
        "claude-sonnet-4-6", provider="openai", base_url="http://127.0.0.1:9/v1"
    )
    assert price is not None
    assert price.cost(Usage(input_tokens=MILLION)) == pytest.approx(3.0)
    assert "is priced at anthropic's list price" in caplog.text
    caplog.clear()
    assert (
        DEFAULT_PRICES.lookup(
            "claude-sonnet-4-6", provider="anthropic", base_url="https://api.anthropic.com"
        )
        is not None
    )
    assert "list price" not in caplog.text


def test_a_dated_model_id_finds_its_alias_price() -> None:
    assert per_million("claude-haiku-4-5-20251001") == pytest.approx((1.0, 5.0, 1.25, 0.1))
    assert DEFAULT_PRICES.lookup("llama3.1:8b") is None
    assert DEFAULT_PRICES.lookup("my-finetune-7b") is None


def test_cost_counts_every_kind_of_token() -> None:
    usage = Usage(
        input_tokens=1_000,
        output_tokens=2_000,
        cache_creation_input_tokens=4_000,
        cache_read_input_tokens=10_000,
    )
    # 1000*5 + 2000*25 + 4000*6.25 + 10000*0.5 = 5000 + 50000 + 25000 + 5000 per million
    assert DEFAULT_PRICES.cost("claude-opus-4-6", usage) == pytest.approx(0.085)
    assert usage.total_tokens == 17_000
    assert DEFAULT_PRICES.cost("unknown-model", usage) is None


def test_price_of_an_unknown_model_says_what_to_add() -> None:
    with pytest.raises(UnpricedModelError) as caught:
        DEFAULT_PRICES.price("claude-future-9")
    assert caught.value.reason == "unpriced_model"
    assert '[prices."claude-future-9"] input = 3.0, output = 15.0' in str(caught.value)


def test_from_mapping_extends_a_base_and_sets_a_default() -> None:
    table = PriceTable.from_mapping(
        {
            "claude-opus-4-6": {"input": 4.0, "output": 20.0, "cache_read": 0.3},
            "my-local": {"input": 0, "output": 0},
            "*": {"input": 1, "output": 1},
        },
        base=DEFAULT_PRICES,
    )
    assert table["claude-opus-4-6"] == ModelPrice(4.0, 20.0, 5.0, 0.3)
    assert table["my-local"] == ModelPrice(0.0, 0.0, 0.0, 0.0)
    assert table.lookup("claude-haiku-4-5") == DEFAULT_PRICES.lookup("claude-haiku-4-5")
    assert table.lookup("anything-else") == ModelPrice(1.0, 1.0, 1.25, 0.1)
    assert "*" not in table
    assert per_million("claude-opus-4-6")[0] == pytest.approx(5.0)  # the base is unchanged


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (3.0, "expected a table of prices"),
        ({"input": 1.0}, "'output' is missing"),
        ({"input": 1.0, "output": -2}, "output must be a finite number >= 0"),
        ({"input": "1", "output": 2}, "input must be a number"),
        ({"input": 1.0, "output": 2, "cached": 1}, "unknown key(s) cached"),
        ({"input": True, "output": 2}, "input must be a number"),
    ],
)
def test_from_mapping_rejects_bad_entries(entry: object, message: str) -> None:
    with pytest.raises(InputError) as caught:
        PriceTable.from_mapping({"m": entry})
    assert message in str(caught.value)


def test_from_toml_reads_the_prices_table(tmp_path: Path) -> None:
    path = tmp_path / "prices.toml"
    path.write_text('[prices."claude-opus-4-6"]\ninput = 6.0\noutput = 30.0\n', encoding="utf-8")
    table = PriceTable.from_toml(path, base=DEFAULT_PRICES)
    assert table["claude-opus-4-6"] == ModelPrice(6.0, 30.0, 7.5, 0.6)
    assert table.lookup("claude-sonnet-4-6") == DEFAULT_PRICES.lookup("claude-sonnet-4-6")


def test_from_toml_without_prices_or_unreadable_is_an_input_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty.toml"
    empty.write_text("[other]\nx = 1\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"no \[prices\] table"):
        PriceTable.from_toml(empty)
    with pytest.raises(InputError, match="cannot read it"):
        PriceTable.from_toml(tmp_path / "missing.toml")


def test_model_price_rejects_negative_prices() -> None:
    with pytest.raises(ValueError, match="input must be a finite number"):
        ModelPrice(-1.0, 1.0, 1.0, 1.0)


def test_estimate_counts_system_messages_and_schema_at_three_bytes_a_token() -> None:
    request = LLMRequest(
        model="claude-opus-4-6",
        system="a" * 10,
        messages=[{"role": "user", "content": "b" * 20}, {"role": "assistant", "content": "c"}],
        max_tokens=100,
        json_schema={"type": "object"},  # {"type":"object"}: 17 bytes
    )
    assert estimate_input_tokens(request) == 16  # 48 bytes / 3
    usd, tokens = estimate_cost(request, DEFAULT_PRICES.lookup("claude-opus-4-6"))
    assert tokens == 116
    # the input at the cache-write price (1.25 x $5 per million): the request lets the
    # provider cache its prompt, and an honest bill may charge the write
    assert usd == pytest.approx(16 * 6.25e-6 + 100 * 25e-6)
    uncached = dataclasses.replace(request, cache="none")
    assert estimate_cost(uncached, DEFAULT_PRICES.lookup("claude-opus-4-6"))[0] == pytest.approx(
        16 * 5e-6 + 100 * 25e-6
    )
    assert estimate_cost(request, None) == (0.0, 116)
    # a count from the provider replaces the estimate
    assert estimate_cost(request, None, input_tokens=9) == (0.0, 109)


def test_estimate_rounds_up_and_counts_bytes_not_characters() -> None:
    request = LLMRequest(model="m", messages=[{"role": "user", "content": "abcd"}], max_tokens=1)
    assert estimate_input_tokens(request) == 2
    # "ação" is 4 characters and 6 UTF-8 bytes: 2 tokens, where characters / 4 said 1
    accented = LLMRequest(model="m", messages=[{"role": "user", "content": "ação"}], max_tokens=1)
    assert estimate_input_tokens(accented) == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_tokens": 0}, "max_tokens must be >= 1"),
        ({"messages": []}, "at least one message"),
        ({"temperature": -0.1}, "temperature must be"),
        ({"temperature": float("nan")}, "temperature must be"),
    ],
)
def test_request_validation(kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}],
        "max_tokens": 10,
        **kwargs,
    }
    with pytest.raises(ValueError, match=message):
        LLMRequest(**arguments)  # type: ignore[arg-type]
