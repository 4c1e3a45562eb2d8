"""Model-backed step executors: tools a plan names like any other (ARCHITECTURE.md,
"Layout": executors).

* ``llm`` (:mod:`plandag.executors.llm`): one model call; the prompt is the instruction,
  step results and documents reach the model as quoted data; an optional JSON Schema for
  the reply (asked again once, then ``invalid_output``); one request per attempt; cost
  reserved per call and settled from the provider's usage.
* ``agent`` (:mod:`plandag.executors.agent`): a short scoped ReAct agent for one step:
  an explicit list of effect-free tools, its own caps on turns, tokens, cost and seconds,
  its tool and model calls children of the step in the trace.
* :class:`ModelAccess`: what a run gives these steps (``run_plan(models=...)``,
  ``ctx.models``).
* :mod:`plandag.executors.data`: how outside content (a step's result, a document's
  excerpt) is quoted to a model as a data block, by these steps and by the planner.

Both are built-ins of :func:`plandag.tools.registry.default_registry`, which finds them
through the ``executors`` entry point of the ``plandag.tools`` group
(:func:`plandag_tools`), as it finds applications.
"""

from plandag.checks.base import CheckDefinition
from plandag.executors.access import DEFAULT_EXECUTOR_MODEL as DEFAULT_EXECUTOR_MODEL
from plandag.executors.access import ModelAccess as ModelAccess
from plandag.executors.access import NoModelAccessError as NoModelAccessError
from plandag.executors.access import call_model as call_model
from plandag.executors.access import connect as connect
from plandag.executors.agent import agent as agent
from plandag.executors.llm import llm as llm
from plandag.tools.base import Tool

EXECUTOR_TOOLS = (llm, agent)
"""The model-backed tools, in the order ``plandag tools`` lists them."""


def plandag_tools() -> tuple[tuple[Tool, ...], tuple[CheckDefinition, ...]]:
    """The ``executors`` entry point of the ``plandag.tools`` group: the model-backed tools
    and no check."""
    return EXECUTOR_TOOLS, ()


__all__ = [
    "DEFAULT_EXECUTOR_MODEL",
    "EXECUTOR_TOOLS",
    "ModelAccess",
    "NoModelAccessError",
    "agent",
    "call_model",
    "connect",
    "llm",
    "plandag_tools",
]
