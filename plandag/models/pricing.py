"""What a model call costs: a price table, model → US dollars per million tokens.

The defaults are plain data (:data:`DEFAULT_PRICES`), Anthropic's list prices for a few
current Claude models (https://docs.anthropic.com/en/docs/about-claude/pricing: input and
output per million tokens; a 5-minute cache write costs 1.25 times the input price, a cache
read 0.1 times). Prices change: override or extend them from a mapping
(:meth:`PriceTable.from_mapping`) or a TOML file (:meth:`PriceTable.from_toml`).

An unknown model is *not* an error here: :meth:`PriceTable.cost` returns None for it, and the
call layer records it at 0.0 with ``priced=False``. The dollar cap counts priced models
only; an unpriced one (a local vLLM, Ollama or llama.cpp model, a model newer than this
table) is capped by the token cap alone, which every run has by default
(:mod:`plandag.brakes`), and is never refused for having no price.
"""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from plandag.errors import InputError
from plandag.models.base import UnpricedModelError, Usage

__all__ = ["DEFAULT_PRICES", "ModelPrice", "PriceTable"]

_PER_TOKEN = 1_000_000
_DATE_SUFFIX = re.compile(r"-\d{8}$")
_CACHE_WRITE_FACTOR = 1.25
_CACHE_READ_DIVISOR = 10  # a cache read costs a tenth of the input price


@dataclasses.dataclass(frozen=True, slots=True)
class ModelPrice:
    """One model's prices, US dollars per million tokens.

    Attributes:
        input: per million input tokens.
        output: per million output tokens.
        cache_write: per million tokens written to the prompt cache.
        cache_read: per million tokens read from the prompt cache.

    Raises:
        ValueError: a price that is negative or not finite.
    """

    input: float
    output: float
    cache_write: float
    cache_read: float

    def __post_init__(self) -> None:
        for name in ("input", "output", "cache_write", "cache_read"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ValueError(
                    f"{name} must be a finite number of US dollars per million tokens >= 0, "
                    f"not {value!r}"
                )

    @classmethod
    def of(
        cls,
        input: float,
        output: float,
        *,
        cache_write: float | None = None,
        cache_read: float | None = None,
    ) -> ModelPrice:
        """A price with the cache prices derived from the input price when not given.

        Args:
            input: US dollars per million input tokens.
            output: US dollars per million output tokens.
            cache_write: per million cached-write tokens; default ``1.25 * input``.
            cache_read: per million cached-read tokens; default ``0.1 * input``.
        """
        return cls(
            input=input,
            output=output,
            cache_write=input * _CACHE_WRITE_FACTOR if cache_write is None else cache_write,
            cache_read=input / _CACHE_READ_DIVISOR if cache_read is None else cache_read,
        )

    def cost(self, usage: Usage) -> float:
        """US dollars for ``usage`` at these prices."""
        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_creation_input_tokens * self.cache_write
            + usage.cache_read_input_tokens * self.cache_read
        ) / _PER_TOKEN


class PriceTable(Mapping[str, ModelPrice]):
    """Model name → :class:`ModelPrice`; a read-only mapping.

    A model is looked up by its exact name, then without a trailing ``-YYYYMMDD`` date
    (``claude-haiku-4-5-20251001`` → ``claude-haiku-4-5``), then ``default``.

    Args:
        prices: model name → price.
        default: the price of any model not in ``prices`` (say ``ModelPrice.of(0, 0)`` for a
            local server under a dollar cap), or None: unknown models are unpriced.
    """

    def __init__(
        self, prices: Mapping[str, ModelPrice], *, default: ModelPrice | None = None
    ) -> None:
        self._prices = dict(prices)
        self.default = default

    def __getitem__(self, model: str) -> ModelPrice:
        return self._prices[model]

    def __iter__(self) -> Iterator[str]:
        return iter(self._prices)

    def __len__(self) -> int:
        return len(self._prices)

    def lookup(self, model: str) -> ModelPrice | None:
        """The price of ``model`` (rules in the class docstring), or None when unpriced."""
        price = self._prices.get(model)
        if price is None:
            price = self._prices.get(_DATE_SUFFIX.sub("", model))
        return price if price is not None else self.default

    def price(self, model: str) -> ModelPrice:
        """The price of ``model``.

        Raises:
            UnpricedModelError: no price for it and no default.
        """
        price = self.lookup(model)
        if price is None:
            raise UnpricedModelError(
                f"no price for model {model!r} in the price table (known: "
                f"{', '.join(sorted(self._prices)) or 'none'}); add it, e.g. "
                f'[prices."{model}"] input = 3.0, output = 15.0 (US dollars per million '
                "tokens)",
                model=model,
            )
        return price

    def cost(self, model: str, usage: Usage) -> float | None:
        """US dollars for ``usage`` on ``model``, or None when the model is unpriced."""
        price = self.lookup(model)
        return None if price is None else price.cost(usage)

    def with_prices(self, prices: Mapping[str, ModelPrice]) -> PriceTable:
        """A new table: this one with ``prices`` added or replacing entries of the same name."""
        return PriceTable({**self._prices, **prices}, default=self.default)

    @classmethod
    def from_mapping(
        cls, mapping: Mapping[str, Any], *, base: PriceTable | None = None
    ) -> PriceTable:
        """A table from plain data, e.g. a TOML or JSON document's ``prices`` table.

        Args:
            mapping: model name → ``{"input": float, "output": float, "cache_write":
                float, "cache_read": float}`` in US dollars per million tokens; the cache
                prices are optional (default 1.25 × and 0.1 × input). The model name
                ``"*"`` sets the default price for every other model.
            base: the table the entries extend or replace (pass :data:`DEFAULT_PRICES` to
                keep the Claude defaults), or None for these entries only.

        Returns:
            The new table.

        Raises:
            InputError: an entry that is not a table, an unknown key, a missing input or
                output price, a price that is not a number >= 0.
        """
        prices: dict[str, ModelPrice] = {}
        default = base.default if base is not None else None
        for model, entry in mapping.items():
            price = _price_from_entry(str(model), entry)
            if model == "*":
                default = price
            else:
                prices[str(model)] = price
        merged = {**(dict(base) if base is not None else {}), **prices}
        return cls(merged, default=default)

    @classmethod
    def from_toml(cls, path: str | Path, *, base: PriceTable | None = None) -> PriceTable:
        """A table from the ``[prices]`` table of a TOML file.

        The file looks like::

            [prices."claude-opus-4-6"]
            input = 5.0
            output = 25.0

            [prices."*"]          # every other model (optional)
            input = 0.0
            output = 0.0

        Args:
            path: the TOML file.
            base: as for :meth:`from_mapping`.

        Raises:
            InputError: the file cannot be read, is not TOML, has no ``prices`` table, or an
                entry is invalid (see :meth:`from_mapping`).
        """
        try:
            with open(path, "rb") as file:
                document = tomllib.load(file)
        except (OSError, tomllib.TOMLDecodeError) as error:
            raise InputError(f"price table {path}: cannot read it: {error}") from error
        table = document.get("prices")
        if not isinstance(table, dict):
            raise InputError(
                f'price table {path}: no [prices] table; write [prices."MODEL"] with input '
                "and output in US dollars per million tokens"
            )
        return cls.from_mapping(table, base=base)


def _price_from_entry(model: str, entry: object) -> ModelPrice:
    where = f"price of {model!r}"
    if not isinstance(entry, Mapping):
        raise InputError(f"{where}: expected a table of prices, not {entry!r}")
    unknown = set(entry) - {"input", "output", "cache_write", "cache_read"}
    if unknown:
        raise InputError(
            f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}; the keys are "
            "input, output, cache_write, cache_read (US dollars per million tokens)"
        )
    for key in ("input", "output"):
        if entry.get(key) is None:
            raise InputError(f"{where}: {key!r} is missing (US dollars per million tokens)")
    values: dict[str, float | None] = {}
    for key in ("input", "output", "cache_write", "cache_read"):
        value = entry.get(key)
        if value is None:
            values[key] = None
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InputError(f"{where}: {key} must be a number, not {value!r}")
        if not math.isfinite(value) or value < 0:
            raise InputError(f"{where}: {key} must be a finite number >= 0, not {value!r}")
        values[key] = float(value)
    return ModelPrice.of(
        float(entry["input"]),
        float(entry["output"]),
        cache_write=values["cache_write"],
        cache_read=values["cache_read"],
    )


DEFAULT_PRICES = PriceTable(
    {
        "claude-opus-4-6": ModelPrice.of(5.0, 25.0),
        "claude-opus-4-5": ModelPrice.of(5.0, 25.0),
        "claude-opus-4-1": ModelPrice.of(15.0, 75.0),
        "claude-opus-4-0": ModelPrice.of(15.0, 75.0),
        "claude-opus-4": ModelPrice.of(15.0, 75.0),
        "claude-sonnet-4-6": ModelPrice.of(3.0, 15.0),
        "claude-sonnet-4-5": ModelPrice.of(3.0, 15.0),
        "claude-sonnet-4-0": ModelPrice.of(3.0, 15.0),
        "claude-sonnet-4": ModelPrice.of(3.0, 15.0),
        "claude-haiku-4-5": ModelPrice.of(1.0, 5.0),
        "claude-3-5-haiku": ModelPrice.of(0.8, 4.0),
    }
)
"""Anthropic list prices, US dollars per million tokens (input, output; cache write 1.25 ×
input, cache read 0.1 × input), for the Claude models whose prices were published when this
table was written. Models missing here (newer ones included) are unpriced: add them with
:meth:`PriceTable.from_mapping` or :meth:`PriceTable.from_toml`."""
