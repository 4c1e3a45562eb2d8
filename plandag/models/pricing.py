"""What a model call costs: model → US dollars per million tokens, from a maintained
catalogue, overridden by the person's own prices.

Where a price comes from, in order (:meth:`PriceTable.lookup`):

1. the table's own entries (:meth:`PriceTable.from_mapping`, :meth:`PriceTable.from_toml`,
   :meth:`PriceTable.with_prices`): model name → :class:`ModelPrice` (input, output, cache
   write and cache read, US dollars per million tokens);
2. the ``[prices]`` table of the project's configuration (``plandag.toml``, or
   ``[tool.plandag.prices]`` in ``pyproject.toml``), installed for the process by
   :func:`configure_prices` (the command line does it when a command starts);
3. the catalogue of the ``genai-prices`` package (:data:`CATALOGUE`, pydantic's
   maintained price data for every major provider), its **bundled** data only: plandag never
   starts its updater (``UpdatePrices``), so no price is ever fetched at run time. A model
   name it knows is priced wherever the model is reached: under the client's provider
   first, else under any provider whose models match the name (a gateway or an
   OpenAI-compatible server serving ``claude-...``); when the base URL is not that
   provider's own API (``genai-prices``' own pattern of it), a warning says once that the
   provider's list price is used;
4. the table's ``default`` (``"*"`` in a mapping), else none.

The offline model (:data:`plandag.models.offline.OFFLINE_MODEL`) runs in the process and
costs nothing: it is priced at 0.0 (source ``offline``) unless the table names it.

An unknown model is *not* an error: :meth:`PriceTable.lookup` returns None for it (a
warning says so once per model), and the call layer records it at 0.0 with
``priced=False``. The dollar cap counts priced models only; an unpriced one (a local vLLM,
Ollama or llama.cpp model, a model newer than the catalogue) is capped by the token cap
alone, which every run has by default (:mod:`plandag.brakes`), and is never refused for
having no price. :func:`prices_source` says, for the brakes line, where a run's prices come
from (``genai-prices 0.2.5``, ``config``, ``none (token cap only)``).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import logging
import math
import re
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from plandag.errors import InputError
from plandag.models.base import UnpricedModelError, Usage
from plandag.models.offline import OFFLINE_MODEL

__all__ = [
    "CATALOGUE",
    "DEFAULT_PRICES",
    "CatalogPrice",
    "ModelPrice",
    "Price",
    "PriceTable",
    "catalogue_version",
    "configure_prices",
    "configured_prices",
    "prices_source",
]

logger = logging.getLogger("plandag.models")

CATALOGUE = "genai-prices"
"""The package whose bundled price data prices every model it knows."""

NO_PRICE = "none (token cap only)"
"""What :func:`prices_source` says of a model without a price."""

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
        source: where the price comes from, for the brakes line (``config``: given by a
            person, in a configuration file or in Python).

    Raises:
        ValueError: a price that is negative or not finite.
    """

    input: float
    output: float
    cache_write: float
    cache_read: float
    source: str = dataclasses.field(default="config", compare=False)

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


_OFFLINE_PRICE = ModelPrice(0.0, 0.0, 0.0, 0.0, source="offline")
"""The offline model's price: nothing."""


class Price(Protocol):
    """What the call layer needs of a price: the cost of a call's usage and where the price
    comes from (:class:`ModelPrice`, :class:`CatalogPrice`)."""

    @property
    def source(self) -> str:
        """``config``, or ``genai-prices VERSION``."""
        ...

    def cost(self, usage: Usage) -> float:
        """US dollars for ``usage``."""
        ...


@functools.cache
def catalogue_version() -> str | None:
    """The installed ``genai-prices`` version, or None when it is not installed."""
    try:
        return importlib.metadata.version(CATALOGUE)
    except importlib.metadata.PackageNotFoundError:
        return None


@dataclasses.dataclass(frozen=True, slots=True)
class CatalogPrice:
    """A model's price from ``genai-prices``' bundled data (tiers and cache prices as the
    catalogue has them).

    Attributes:
        model: the catalogue's id of the model (``claude-sonnet-4-6``).
        provider: the catalogue's id of its provider (``anthropic``, ``openai``...).
        source: ``genai-prices VERSION``.
    """

    model: str
    provider: str
    source: str
    _info: Any = dataclasses.field(repr=False, compare=False)
    _provider: Any = dataclasses.field(repr=False, compare=False)

    def cost(self, usage: Usage) -> float:
        """US dollars for ``usage``: the catalogue's calculation, the prompt tokens read
        from and written to the cache at their own prices."""
        from genai_prices import Usage as CatalogUsage

        counted = CatalogUsage(
            input_tokens=usage.input_tokens
            + usage.cache_read_input_tokens
            + usage.cache_creation_input_tokens,
            cache_read_tokens=usage.cache_read_input_tokens,
            cache_write_tokens=usage.cache_creation_input_tokens,
            output_tokens=usage.output_tokens,
        )
        return float(self._info.calc_price(counted, self._provider).total_price)


@functools.cache
def _catalog_price(model: str, provider: str | None) -> CatalogPrice | None:
    """``model``'s price in the bundled catalogue: under ``provider`` first, else under the
    provider whose models match the name; None when it knows none."""
    version = catalogue_version()
    if version is None:
        return None
    from genai_prices import data_snapshot

    snapshot = data_snapshot.get_snapshot()
    attempts: list[str | None] = [provider, None] if provider else [None]
    for provider_id in attempts:
        try:
            found, info = snapshot.find_provider_model(model, None, provider_id, None)
        except LookupError:
            continue
        return CatalogPrice(info.id, found.id, f"{CATALOGUE} {version}", info, found)
    return None


@functools.cache
def _own_api(provider: str, base_url: str) -> bool:
    """Whether ``base_url`` is the catalogue ``provider``'s own API."""
    from genai_prices import data_snapshot

    for candidate in data_snapshot.get_snapshot().providers:
        if candidate.id == provider:
            return re.match(candidate.api_pattern, base_url) is not None
    return False


_said: set[tuple[str, ...]] = set()


def _say_once(key: tuple[str, ...], message: str) -> None:
    if key not in _said:
        _said.add(key)
        logger.warning("%s", message)


class PriceTable(Mapping[str, ModelPrice]):
    """Model name → price; a read-only mapping of the table's own entries.

    A model is looked up (:meth:`lookup`) by its exact name, then without a trailing
    ``-YYYYMMDD`` date (``claude-haiku-4-5-20251001`` → ``claude-haiku-4-5``), in the
    table's own entries, then in the configuration's ``[prices]`` (:func:`configure_prices`),
    then in the catalogue (when ``catalogue`` is on), then ``default``.

    Args:
        prices: model name → price.
        default: the price of any model found nowhere else (say ``ModelPrice.of(0, 0)`` for
            a local server under a dollar cap), or None: such models are unpriced.
        catalogue: look models up in the configuration's prices and ``genai-prices``'
            bundled data (:data:`DEFAULT_PRICES` does); False for a table of these
            entries only.
    """

    def __init__(
        self,
        prices: Mapping[str, ModelPrice],
        *,
        default: ModelPrice | None = None,
        catalogue: bool = False,
    ) -> None:
        self._prices = dict(prices)
        self.default = default
        self.catalogue = catalogue

    def __getitem__(self, model: str) -> ModelPrice:
        return self._prices[model]

    def __iter__(self) -> Iterator[str]:
        return iter(self._prices)

    def __len__(self) -> int:
        return len(self._prices)

    def _own(self, model: str) -> ModelPrice | None:
        price = self._prices.get(model)
        return price if price is not None else self._prices.get(_DATE_SUFFIX.sub("", model))

    def lookup(
        self, model: str, *, provider: str | None = None, base_url: str | None = None
    ) -> Price | None:
        """The price of ``model`` (order in the class docstring), or None when unpriced.

        Args:
            model: the model name as sent.
            provider: the client's provider (``anthropic``, ``openai``): the catalogue
                looks under it first.
            base_url: where the model is reached; a catalogue price of a provider whose
                own API this is not is used with a warning (once).
        """
        price: Price | None = self._own(model)
        if price is None and model == OFFLINE_MODEL:
            return _OFFLINE_PRICE
        if price is None and self.catalogue:
            price = _configured._own(model) if _configured is not None else None
            if price is None:
                found = _catalog_price(model.lower(), provider)
                if found is not None and base_url and not _own_api(found.provider, base_url):
                    _say_once(
                        ("url", model, base_url),
                        f"model {model} at {base_url} is priced at {found.provider}'s list "
                        f"price ({found.source}), though that is not {found.provider}'s own "
                        f'API; set [prices."{model}"] in plandag.toml if it charges otherwise',
                    )
                price = found
        if price is None:
            price = self.default
        if price is None and self.catalogue:
            _say_once(
                ("unpriced", model),
                f"no price for model {model} ({CATALOGUE} {catalogue_version() or '(missing)'} "
                "does not know it and no [prices] entry names it): the cost cap does not "
                'count its calls, the token cap does; set [prices."'
                f'{model}"] input and output (US dollars per million tokens) to price it',
            )
        return price

    def price(self, model: str) -> Price:
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
        return PriceTable(
            {**self._prices, **prices}, default=self.default, catalogue=self.catalogue
        )

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
                keep the catalogue behind them), or None for these entries only.

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
        return cls(merged, default=default, catalogue=base.catalogue if base is not None else False)

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


_configured: PriceTable | None = None


def configure_prices(table: Mapping[str, Any] | None, where: str = "the configuration") -> None:
    """Install the configuration's ``[prices]`` for the process: every catalogue-backed
    table (:data:`DEFAULT_PRICES` and tables made from it) finds these entries before the
    catalogue. None (or an empty table) removes them.

    Args:
        table: model name → ``{"input", "output", "cache_read", "cache_write"}`` (US
            dollars per million tokens; as :meth:`PriceTable.from_mapping`; ``"*"`` is not
            taken here: a default would hide the catalogue).
        where: the file the table came from, for error messages.

    Raises:
        InputError: an entry is invalid (the message names ``where``).
    """
    global _configured
    if not table:
        _configured = None
        return
    if "*" in table:
        raise InputError(
            f'{where} [prices]: "*" is not taken in a configuration (it would hide the '
            f"{CATALOGUE} prices of every other model); name each model"
        )
    try:
        _configured = PriceTable.from_mapping(table)
    except InputError as error:
        raise InputError(f"{where} [prices]: {error}") from error


def configured_prices() -> PriceTable | None:
    """The configuration's prices installed by :func:`configure_prices`, or None."""
    return _configured


def prices_source(
    models: Sequence[tuple[str, str | None, str | None]], prices: PriceTable | None = None
) -> str:
    """Where a run's prices come from, for the brakes line.

    Args:
        models: ``(model, provider, base_url)`` of each model the run may call (repeats
            are taken once).
        prices: the run's table (default :data:`DEFAULT_PRICES`).

    Returns:
        One source when every model has the same (``genai-prices 0.2.5``, ``config``,
        ``none (token cap only)``), else ``MODEL SOURCE`` for each, comma-separated.
    """
    table = prices if prices is not None else DEFAULT_PRICES
    sources: dict[str, str] = {}
    for model, provider, base_url in models:
        if model in sources:
            continue
        found = table.lookup(model, provider=provider, base_url=base_url)
        sources[model] = found.source if found is not None else NO_PRICE
    distinct = set(sources.values())
    if len(distinct) == 1:
        return distinct.pop()
    return ", ".join(f"{model} {source}" for model, source in sources.items())


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


DEFAULT_PRICES = PriceTable({}, catalogue=True)
"""Every model ``genai-prices``' bundled data knows, behind the configuration's
``[prices]`` (:func:`configure_prices`); extend it with :meth:`PriceTable.with_prices` or
:meth:`PriceTable.from_mapping` (``base=DEFAULT_PRICES``)."""
