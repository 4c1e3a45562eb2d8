"""The ``agent`` tool: a short scoped ReAct agent for one step.

``agent(task, tools, data=None, model=None, max_turns=6, max_tokens=20000,
max_cost_usd=0.10, max_seconds=120)``: the ReAct loop (Yao et al., ICLR 2023: think, call
one tool, read its result, again, until it answers) of the baseline in :mod:`plandag.react`,
with the same rules, the same tool descriptions and the data-block rule
(:mod:`plandag.executors.tool_use`), through the native tool use of either client (the
Messages API's ``tool_use`` blocks, or an OpenAI-compatible server's ``tool_calls``), inside
one step of a plan:

* **scoped tools**: ``tools`` lists the tool names the agent may call, from the run's
  registry (``ModelAccess.registry``, default :func:`~plandag.tools.registry.default_registry`).
  Only they are offered to the model, and a call of any other name is refused (an error the
  model reads), never run. The tools are effect-free unless the plan's approval covers more:
  a step whose literal list names tools with effects is compiled with the most of those
  effects (``effects_of``, :func:`plandag.tools.base.bind_effects`), so a read-only run
  refuses it, approval asks for it as for any step with effects, and its writes stay inside
  the write boundary; at run time the agent may call only tools whose effects the step was
  compiled (and approved) with (``ctx.effects``). Tools with egress (sending data out) are
  never listed, nor ``agent`` itself. A list that breaks these rules fails the step before
  any request (reason ``tool_not_allowed``, or ``unknown_tool``).
* **its own caps**, within the run's: at most ``max_turns`` model calls, ``max_tokens``
  tokens and ``max_cost_usd`` US dollars over them, ``max_seconds`` seconds. Each turn's
  call also reserves on the run's budget (:func:`~plandag.executors.access.call_model`), so
  the run's caps hold as for any model call. A cap reached before an answer fails the step:
  reason ``agent_max_turns``, ``agent_budget`` or ``agent_timeout``.
* **one retry layer**: each turn is one request; a transient failure fails the attempt and
  the run's retry policy decides. The conversation so far is kept in the step's state, so
  the next attempt goes on from the failed turn (tools already called are not called again,
  their spend is not counted twice against the agent's caps).
* **what it returns**: ``{"answer": text, "steps": [{"turn", "tool", "args", "result" |
  "error", "duration_s"}], "turns": n}``; each model call and each tool call is also a child
  of the step's attempt in the trace (``llm_call`` and ``tool_call`` spans).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio

from plandag.errors import PermanentStepError
from plandag.executors.access import call_model, require_models
from plandag.tools.base import EFFECTS_ORDER, Effects, Tool, ToolContext, tool

if TYPE_CHECKING:
    from plandag.models.base import ChatMessage
    from plandag.tools.registry import Registry

__all__ = [
    "AGENT_ROLE",
    "AGENT_TURN_MAX_TOKENS",
    "DEFAULT_AGENT_MAX_COST_USD",
    "DEFAULT_AGENT_MAX_SECONDS",
    "DEFAULT_AGENT_MAX_TOKENS",
    "DEFAULT_AGENT_MAX_TURNS",
    "agent",
    "agent_effects",
    "estimate_agent",
    "scoped_tools",
]

DEFAULT_AGENT_MAX_TURNS = 6
"""Model calls of one ``agent`` step when the plan does not say."""
DEFAULT_AGENT_MAX_TOKENS = 20_000
"""Tokens (input and output, every turn) of one ``agent`` step when the plan does not say."""
DEFAULT_AGENT_MAX_COST_USD = 0.10
"""US dollars of one ``agent`` step when the plan does not say (priced models only)."""
DEFAULT_AGENT_MAX_SECONDS = 120.0
"""Seconds of one ``agent`` step when the plan does not say."""
AGENT_TURN_MAX_TOKENS = 1024
"""Output tokens of one turn (a thought and one tool call, or the answer)."""

AGENT_ROLE = (
    "You are a scoped agent carrying out one step of a plan. Work one step at a time: think "
    "about what you know and what is missing, then call exactly one of the tools provided "
    "and read its result; repeat until you can answer. When you can, answer the task in "
    "text, with no tool call. You have few turns: answer as soon as you can."
)
"""The first paragraph of the agent's system prompt (the rules follow, from
:data:`plandag.executors.tool_use.REACT_RULES`, with the data-block rule)."""


def agent_effects(args: Mapping[str, Any], tools: Mapping[str, Tool]) -> Effects:
    """The effects of an ``agent`` step: the most effects among the registered tools its
    literal ``tools`` list names (``none`` for a list written as a reference, which may
    then name only tools without effects).

    Args:
        args: the step's arguments as the plan writes them.
        tools: the registered tools by name.

    Returns:
        ``none``, ``write`` or ``irreversible``.
    """
    names = args.get("tools")
    effects: Effects = "none"
    if not isinstance(names, list):
        return effects
    for name in names:
        item = tools.get(name) if isinstance(name, str) else None
        if item is not None and EFFECTS_ORDER.index(item.effects) > EFFECTS_ORDER.index(effects):
            effects = item.effects
    return effects


def scoped_tools(
    registry: Registry, names: list[str], step_id: int, allowed_effects: Effects = "none"
) -> dict[str, Tool]:
    """The tools an agent step may call, by name, checked against the rules.

    Args:
        registry: the run's tools.
        names: the step's ``tools`` list.
        step_id: the step, for messages.
        allowed_effects: the effects the step was compiled and approved with
            (``ctx.effects``): no listed tool may have more.

    Returns:
        ``{name: Tool}`` in the list's order.

    Raises:
        PermanentStepError: an empty list, a name not registered (reason
            ``unknown_tool``; a literal list's names are checked when the plan compiles,
            a list given by reference only here), or a tool with effects, with egress, or
            ``agent`` itself (reason ``tool_not_allowed``): effects beyond ``allowed_effects``.
    """
    if not names:
        raise PermanentStepError(
            f"step {step_id}: agent: tools is empty; list the tools the agent may call",
            reason="tool_not_allowed",
        )
    chosen: dict[str, Tool] = {}
    for name in names:
        item = registry.tools.get(name)
        if item is None:
            near = ", ".join(registry.nearest_tools(name)) or "none"
            raise PermanentStepError(
                f"step {step_id}: agent: tool {name!r} is not registered (nearest: {near})",
                reason="unknown_tool",
            )
        if name == "agent":
            raise PermanentStepError(
                f"step {step_id}: agent: an agent cannot call another agent; give the "
                "sub-task its own step",
                reason="tool_not_allowed",
            )
        if item.egress:
            raise PermanentStepError(
                f"step {step_id}: agent: tool {name} sends data out (egress); an agent step "
                "may not use it: make that call a step of the plan, where the taint rules "
                "and approval see it",
                reason="tool_not_allowed",
            )
        if EFFECTS_ORDER.index(item.effects) > EFFECTS_ORDER.index(allowed_effects):
            raise PermanentStepError(
                f"step {step_id}: agent: tool {name} has effects {item.effects!r}, beyond "
                f"what this step was compiled and approved with ({allowed_effects!r}); list "
                "it literally in the step's tools (the plan then needs approval for it), or "
                "make that call a step of the plan",
                reason="tool_not_allowed",
            )
        chosen[name] = item
    return chosen


def estimate_agent(args: Mapping[str, Any]) -> tuple[float | None, int]:
    """What one ``agent`` step may cost: its own caps, ``max_cost_usd`` US dollars and
    ``max_tokens`` tokens (what it is allowed to spend at most).

    Returns:
        ``(usd, tokens)``.
    """
    usd = args.get("max_cost_usd", DEFAULT_AGENT_MAX_COST_USD)
    tokens = args.get("max_tokens", DEFAULT_AGENT_MAX_TOKENS)
    if isinstance(usd, bool) or not isinstance(usd, int | float) or usd < 0:
        usd = DEFAULT_AGENT_MAX_COST_USD
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        tokens = DEFAULT_AGENT_MAX_TOKENS
    return float(usd), tokens


def _system() -> str:
    from plandag.executors.data import DATA_BLOCK_RULE
    from plandag.executors.tool_use import REACT_RULES

    return f"{AGENT_ROLE}\n\n{REACT_RULES}\n- {DATA_BLOCK_RULE}\n"


def _first_message(task: str, data: Any) -> str:
    from plandag.executors.data import quote_data
    from plandag.executors.llm import DATA_MAX_CHARS

    parts = [f"Task:\n{task.strip()}"]
    if data is not None:
        parts.append(quote_data("data", data, max_chars=DATA_MAX_CHARS))
    parts.append("Think, then call one tool; answer in text when you can.")
    return "\n\n".join(parts)


@tool(
    name="agent",
    effects="none",
    typical_seconds=30.0,
    estimate=estimate_agent,
    effects_of=agent_effects,
    names_tools="tools",
)
async def agent(
    task: str,
    tools: list[str],
    data: Any = None,
    model: str | None = None,
    max_turns: int = DEFAULT_AGENT_MAX_TURNS,
    max_tokens: int = DEFAULT_AGENT_MAX_TOKENS,
    max_cost_usd: float = DEFAULT_AGENT_MAX_COST_USD,
    max_seconds: float = DEFAULT_AGENT_MAX_SECONDS,
    ctx: ToolContext | None = None,
) -> dict[str, Any]:
    """A short scoped agent for one step: calls only the tools in ``tools`` (their effects
    need approval), one per turn, until it answers ``task`` (``data`` quoted as data); own
    caps ``max_turns``, ``max_tokens``, ``max_cost_usd``, ``max_seconds``. Returns
    {"answer", "steps", "turns"}."""
    from plandag.brakes.budget import Budget
    from plandag.errors import BudgetRefusedError
    from plandag.executors.data import DEFAULT_MAX_CHARS, quote_data
    from plandag.executors.tool_use import content_blocks, tool_definitions, tool_result_block
    from plandag.models.base import LLMRequest
    from plandag.tools.registry import Registry, default_registry

    context = ctx or ToolContext(run_id="adhoc", step_id=0)
    step_id = context.step_id
    models = require_models(context.models, "agent", step_id)
    for name, value, low in (("max_turns", max_turns, 1), ("max_tokens", max_tokens, 1)):
        if value < low:
            raise PermanentStepError(
                f"step {step_id}: agent: {name} must be >= {low}, not {value}",
                reason="bad_argument",
            )
    if max_cost_usd < 0 or max_seconds <= 0:
        raise PermanentStepError(
            f"step {step_id}: agent: max_cost_usd must be >= 0 and max_seconds > 0",
            reason="bad_argument",
        )
    registry = models.registry if models.registry is not None else default_registry()
    allowed = scoped_tools(registry, tools, step_id, context.effects)
    definitions = tool_definitions(Registry(allowed.values()))
    name = model or models.model
    state: dict[str, Any] = context.step_state.setdefault(
        "agent",
        {
            "messages": [{"role": "user", "content": _first_message(task, data)}],
            "steps": [],
            "turns": 0,
            "spent_usd": 0.0,
            "spent_tokens": 0,
            "seconds": 0.0,
        },
    )
    messages: list[ChatMessage] = state["messages"]
    steps: list[dict[str, Any]] = state["steps"]
    system = _system()
    where = f"step {step_id}: agent {models.provider} {name}"
    started = time.monotonic()
    seconds_left = max_seconds - state["seconds"]

    def failed(reason: str, words: str) -> PermanentStepError:
        return PermanentStepError(
            f"{where}: {words} after {state['turns']} turn(s) and {len(steps)} tool call(s), "
            "without an answer; raise the cap in the step's arguments, or give the agent a "
            "narrower task",
            reason=reason,
        )

    try:
        with anyio.fail_after(max(seconds_left, 0.0)):
            while True:
                if state["turns"] >= max_turns:
                    raise failed("agent_max_turns", f"max_turns={max_turns} reached")
                request = LLMRequest(
                    model=name,
                    messages=tuple(messages),
                    max_tokens=min(AGENT_TURN_MAX_TOKENS, max_tokens),
                    system=system,
                    temperature=0.0,
                    tools=definitions,
                    tool_choice={"type": "auto", "disable_parallel_tool_use": True},
                )
                # the agent's own caps: what it spent on earlier turns (and attempts),
                # plus this turn's reservation, must fit them
                own = Budget(
                    max(max_cost_usd - state["spent_usd"], 0.0),
                    max(max_tokens - state["spent_tokens"], 0),
                )
                before_usd, before_tokens = context.cost_usd, context.tokens
                try:
                    response = await call_model(
                        context, models, request, f"agent turn {state['turns'] + 1}", budget=own
                    )
                except BudgetRefusedError as error:
                    if error.reason == "agent_budget":
                        raise failed("agent_budget", str(error)) from None
                    raise
                finally:
                    state["spent_usd"] += context.cost_usd - before_usd
                    state["spent_tokens"] += context.tokens - before_tokens
                state["turns"] += 1
                blocks = content_blocks(response.raw)
                uses = [block for block in blocks if block.get("type") == "tool_use"]
                if not uses:
                    return {"answer": response.text, "steps": list(steps), "turns": state["turns"]}
                results: list[dict[str, Any]] = []
                for index, use in enumerate(uses):
                    if index > 0:  # one tool per turn: a second call is not run
                        results.append(
                            tool_result_block(use, "error: one tool call per turn; not run", True)
                        )
                        continue
                    step = await _call_tool(context, allowed, use, state["turns"])
                    steps.append(step)
                    if "error" in step:
                        shown = quote_data(f"{step['tool']} error", step["error"])
                        results.append(tool_result_block(use, shown, True))
                    else:
                        shown = quote_data(
                            f"{step['tool']} result", step["result"], DEFAULT_MAX_CHARS
                        )
                        results.append(tool_result_block(use, shown, False))
                messages.append({"role": "assistant", "content": blocks})
                messages.append({"role": "user", "content": results})
    except TimeoutError:
        raise failed("agent_timeout", f"max_seconds={max_seconds:g} passed") from None
    finally:
        state["seconds"] += time.monotonic() - started


async def _call_tool(
    context: ToolContext, allowed: Mapping[str, Tool], use: Mapping[str, Any], turn: int
) -> dict[str, Any]:
    """Run one tool call of the agent, if its tool is on the list; its failure (or its
    refusal) is the observation. Recorded as a ``tool_call`` child of the attempt."""
    name = str(use.get("name", ""))
    arguments = use.get("input")
    given: dict[str, Any] = dict(arguments) if isinstance(arguments, Mapping) else {}
    step: dict[str, Any] = {"turn": turn, "tool": name, "args": given}
    start = context.clock()
    clock_started = time.monotonic()
    item = allowed.get(name)
    if item is None:
        listed = ", ".join(allowed)
        step["error"] = (
            f"ToolNotAllowed: {name!r} is not in this agent's tool list ({listed}); not run"
        )
    else:
        inner = dataclasses.replace(
            context,
            step_state={},
            cost_usd=0.0,
            tokens=0,
            cost_reported=False,
            charged_usd=0.0,
            charged_tokens=0,
            step_args=None,
            resolve=None,
        )
        try:
            with anyio.fail_after(item.timeout):
                step["result"] = await item.invoke(given, inner)
        except Exception as error:
            step["error"] = f"{type(error).__name__}: {error}"
        finally:
            # what a tool spent (an llm inside the agent) is this attempt's spend
            context.cost_usd += inner.cost_usd
            context.tokens += inner.tokens
            context.cost_reported = context.cost_reported or inner.cost_reported
            context.charged_usd += inner.charged_usd
            context.charged_tokens += inner.charged_tokens
    step["duration_s"] = time.monotonic() - clock_started
    context.add_child(
        "tool_call",
        name,
        start,
        context.clock(),
        turn=turn,
        args=given,
        error=step.get("error"),
        allowed=item is not None,
    )
    return step
