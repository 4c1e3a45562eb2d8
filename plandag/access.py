"""What a run hands its steps to reach a model, typed below the tools and the scheduler
that carry it (ARCHITECTURE.md, "Layout": the scheduler is handed model access for steps
and imports none of it).

A run given model access (``run_plan(models=...)``) passes it to every step as
``ToolContext.models``; the model-backed tools (``llm``, ``agent``) call the model through
it, and the scheduler reads from it only what a plan's estimate needs: the name of the
model a step that names none uses, and the price of its output tokens.
:class:`plandag.executors.ModelAccess` is the implementation (a provider's client, the
executor model, the price table).
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["ModelAccessProtocol"]


class ModelAccessProtocol(Protocol):
    """A run's model access as the tools and the scheduler see it.

    Attributes:
        model: the executor model: the one a model-backed step uses when it names none.
        provider: the provider of its client (``anthropic``, ``openai``).
    """

    @property
    def model(self) -> str: ...

    @property
    def provider(self) -> str: ...

    def tokens_cost(self, tokens: int) -> float | None:
        """US dollars of ``tokens`` output tokens on :attr:`model`, or None when the model
        has no price (a plan's estimate then counts its tokens only)."""
        ...
