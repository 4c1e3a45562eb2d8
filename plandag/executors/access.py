"""What a run gives its model-backed steps: :class:`ModelAccess`.

A plan's ``llm`` and ``agent`` steps call a model through the same client layer as the
planner (:mod:`plandag.planner.llm`): the run holds one client (the provider and base URL of
``--provider`` / ``--base-url``, or an :class:`~plandag.planner.llm.AnthropicClient` /
:class:`~plandag.planner.llm.OpenAICompatibleClient` built in Python), the model steps use
when they name none (``--executor-model``, setting ``executor_model``), and the price table
their reservations and costs are priced with. ``run_plan(..., models=ModelAccess(...))``
passes it; tools read it as ``ctx.models``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from plandag.errors import PermanentStepError

if TYPE_CHECKING:  # the planner's client layer is imported when a step calls a model
    from plandag.planner.llm.base import LLMClient
    from plandag.planner.llm.pricing import PriceTable

__all__ = ["DEFAULT_EXECUTOR_MODEL", "ModelAccess", "NoModelAccessError", "require_models"]

DEFAULT_EXECUTOR_MODEL = "claude-haiku-4-5"
"""The model ``llm`` and ``agent`` steps use with the ``anthropic`` provider when neither the
step nor the configuration names one (setting ``executor_model``): smaller and cheaper than
the planner's. With an OpenAI-compatible server the default is the run's ``--model``."""


@dataclasses.dataclass(frozen=True)
class ModelAccess:
    """The model client a run's ``llm`` and ``agent`` steps call.

    Args:
        client: the provider's client (its ``provider`` is ``anthropic`` or ``openai``);
            built with ``max_retries=0``: a step's retries belong to the run's retry policy.
        model: the executor model, used by a step that names no ``model``.
        prices: US dollars per million tokens by model (default
            :data:`~plandag.planner.llm.DEFAULT_PRICES`); a model without a price costs
            0.0 and is limited by the token cap alone.

    Raises:
        ValueError: an empty ``model``.
    """

    client: LLMClient
    model: str
    prices: PriceTable = dataclasses.field(default_factory=lambda: _default_prices())

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("ModelAccess needs a model name (the default executor model)")

    @property
    def provider(self) -> str:
        """The client's provider (``anthropic``, ``openai``)."""
        return self.client.provider

    def tokens_cost(self, tokens: int) -> float | None:
        """US dollars of ``tokens`` output tokens on the executor model (the dearer side of
        its price, so an estimate is not low), or None when the model has no price: how a
        plan's estimate prices a model step that names no model of its own."""
        from plandag.planner.llm.base import Usage

        return self.prices.cost(self.model, Usage(output_tokens=tokens))


def _default_prices() -> PriceTable:
    from plandag.planner.llm.pricing import DEFAULT_PRICES

    return DEFAULT_PRICES


class NoModelAccessError(PermanentStepError):
    """A model-backed step ran in a run given no :class:`ModelAccess`; reason ``no_model``."""

    reason = "no_model"


def require_models(models: ModelAccess | None, tool: str, step_id: int) -> ModelAccess:
    """``models``, or the error that says how to give a run one.

    Args:
        models: ``ctx.models``.
        tool: the tool's name, for the message.
        step_id: the step, for the message.

    Raises:
        NoModelAccessError: ``models`` is None.
    """
    if models is None:
        raise NoModelAccessError(
            f"step {step_id}: tool {tool} calls a model, but this run was given none: pass "
            "--provider and --model (and --base-url for an OpenAI-compatible server) on the "
            "command line, or models=ModelAccess(client, model) to run_plan in Python"
        )
    return models
