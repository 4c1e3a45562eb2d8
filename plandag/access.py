"""What a run hands its steps to reach a model, typed below the tools and the scheduler
that carry it (ARCHITECTURE.md, "Layout": the scheduler is handed model access for steps
and imports none of it).

A run given model access (``run_plan(models=...)``) passes it to every step as
``ToolContext.models``; the model-backed tools (``llm``, ``agent``) call the model through
it, and the scheduler reads from it only what a plan's estimate needs: the name of the
model a step that names none uses, and the price of its output tokens.
:class:`plandag.executors.ModelAccess` is the implementation (a provider's client, the
executor model, the price table). :func:`model_steps` tells the steps that call a model
from the others without importing the model-backed tools (a run opens a client only for
them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

__all__ = ["MODEL_TOOLS", "ModelAccessProtocol", "model_steps"]

MODEL_TOOLS = frozenset({"llm", "agent"})
"""The tools that call the run's model (``ctx.models``)."""


def model_steps(steps: Mapping[int, Any]) -> list[int]:
    """The ids of the steps whose tool calls a model (:data:`MODEL_TOOLS`), sorted.

    Args:
        steps: a compiled plan's steps by id (``CompiledPlan.steps``).
    """
    return sorted(step_id for step_id, step in steps.items() if step.tool.name in MODEL_TOOLS)


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
