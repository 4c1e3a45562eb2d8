"""At most N model calls of a contracts batch at once, whatever the contracts and chunks.

A batch runs ``jobs`` contracts at once and each contract's plan runs its ``llm`` steps in
parallel (chunks × field groups: 5 for a short CUAD contract, 170 for a 300-page one), so
without a bound a batch of long contracts would send hundreds of requests at once and meet
the provider's rate limits. The batch's model access has ``call_slots`` (an
:class:`anyio.CapacityLimiter` shared by every contract's run,
:class:`plandag.executors.ModelAccess`): each model call of an ``llm`` step takes one before
it reserves on the batch's budget and holds it until it has settled, so the calls waiting
for a slot hold nothing and cannot make the caps refuse calls that would fit.
"""

from __future__ import annotations

__all__ = ["DEFAULT_MODEL_CALLS"]

DEFAULT_MODEL_CALLS = 16
"""Model calls of one batch at once by default (``--max-model-calls``): within the request
rates of the providers' first usage tiers for a small model, and enough to keep 4
contracts of 5 field groups each busy (overlapped with the replies being parsed)."""
