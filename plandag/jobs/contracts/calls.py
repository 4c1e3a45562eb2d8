"""At most N model calls of a contracts batch at once, whatever the contracts and chunks.

A batch runs ``jobs`` contracts at once and each contract's plan runs its ``llm`` steps in
parallel (chunks × field groups: 5 for a short CUAD contract, 170 for a 300-page one), so
without a bound a batch of long contracts would send hundreds of requests at once and meet
the provider's rate limits. :class:`LimitedClient` wraps the run's model client: every
``complete`` (one attempt of one ``llm`` step) waits for one of ``limit`` slots shared by
the whole batch; token counting and the rest pass through unchanged.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from plandag.planner.llm.base import LLMClient, LLMRequest, LLMResponse, LLMStream

__all__ = ["DEFAULT_MODEL_CALLS", "LimitedClient"]

DEFAULT_MODEL_CALLS = 16
"""Model calls of one batch at once by default (``--max-model-calls``): within the request
rates of the providers' first usage tiers for a small model, and enough to keep 4
contracts of 5 field groups each busy (overlapped with the replies being parsed)."""


class LimitedClient:
    """``client`` with at most ``limit`` ``complete`` calls at once.

    Args:
        client: the provider's client.
        limit: calls at once (>= 1).

    Raises:
        ValueError: ``limit`` < 1.
    """

    def __init__(self, client: LLMClient, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"the model calls at once must be at least 1, not {limit}")
        self.client = client
        self.provider = client.provider
        self.limiter = anyio.CapacityLimiter(limit)

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """The wrapped client's ``complete``, once a slot is free."""
        async with self.limiter:
            return await self.client.complete(request)

    def stream(self, request: LLMRequest) -> AbstractAsyncContextManager[LLMStream]:
        """The wrapped client's ``stream`` (not limited: extraction does not stream)."""
        return self.client.stream(request)

    async def aclose(self) -> None:
        """Close the wrapped client."""
        await self.client.aclose()

    def __getattr__(self, name: str) -> Any:
        # count_tokens (Anthropic) and anything else the wrapped client offers
        return getattr(self.client, name)
