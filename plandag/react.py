"""A sequential ReAct baseline over plandag's tools and model client.

:class:`ReactAgent` is the loop of Yao et al., *ReAct: Synergizing Reasoning and Acting in
Language Models* (ICLR 2023), as LLMCompiler (Kim et al., ICML 2024) measures it: the model
thinks, calls **one** tool, reads the observation, and again, until it answers. It shares
with :class:`~plandag.planner.agent.Agent` everything but the orchestration:

* the tools: the same :class:`~plandag.tools.registry.Registry`; each tool is offered through
  the Messages API's native tool use (``tools``, ``tool_use`` / ``tool_result`` blocks),
  with the same name, the same docstring the planner's system prompt shows (its
  effects and result type in the description line) and the same compact JSON schema
  (:func:`plandag.executors.tool_use.compact_schema`); ``tool_choice`` has
  ``disable_parallel_tool_use`` so a turn calls at most one tool;
* the system text: the planner's rules that are not about writing a plan, and the
  data-block rule (:data:`plandag.executors.data.DATA_BLOCK_RULE`): every observation is
  quoted as data (:func:`~plandag.executors.data.quote_data`), as plandag quotes results to
  its replanner and joiner;
* the client layer and the brakes: every call goes through
  :func:`~plandag.models.call_with_retries` (the same :class:`RetryPolicy`, the same
  :class:`Budget` reservation and settlement, a :class:`CallRecord` per attempt), the
  wall-clock cap of :class:`~plandag.scheduler.runner.RunLimits` ``max_seconds`` counts
  from the first request, and ``max_turns`` bounds the loop;
* prompt caching: each request lets the provider cache the conversation so far
  (``LLMRequest.cache="conversation"``: a ``cache_control`` breakpoint after the system
  prompt and after the last message), as Anthropic advises for an agent loop that resends a
  growing conversation; the prompt's text is the same with or without it, and a client
  built with ``prompt_cache=False`` sends none.

A tool that fails is an observation (its error, quoted as data), as in ReAct; the model
decides what to do next. Tools with effects follow plandag's approval modes when ``approve``
is given (nobody is asked: the loop runs unattended): ``never`` refuses every call with an
effect, ``auto`` runs ``write`` effects, each write target checked against the write
boundary first, and refuses ``irreversible`` ones (they need a person); a refused call is
an error observation. The answer is the text of the first turn without a tool call.
The Messages API's content blocks are read from the Anthropic client's ``raw`` message, or
translated from an OpenAI-compatible chat completion's ``tool_calls``
(:func:`content_blocks`), so the loop works with both clients.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import anyio

from plandag.brakes.budget import Budget
from plandag.brakes.clock import Clock, SystemClock
from plandag.brakes.retry import RetryPolicy
from plandag.executors.data import DATA_BLOCK_RULE, DEFAULT_MAX_CHARS, quote_data
from plandag.executors.tool_use import REACT_RULES as REACT_RULES
from plandag.executors.tool_use import content_blocks as content_blocks
from plandag.executors.tool_use import tool_definitions as tool_definitions
from plandag.executors.tool_use import tool_description as tool_description
from plandag.executors.tool_use import tool_result_block as tool_result_block
from plandag.models import (
    DEFAULT_PRICES,
    BudgetRefusedError,
    CallRecord,
    ChatMessage,
    LLMClient,
    LLMRequest,
    PriceTable,
    call_with_retries,
)
from plandag.scheduler.runner import RunLimits
from plandag.tools.boundary import WriteBoundary
from plandag.tools.registry import Registry

__all__ = [
    "DEFAULT_REACT_MAX_TOKENS",
    "REACT_EXAMPLE",
    "REACT_ROLE",
    "ReactAgent",
    "ReactResult",
    "ReactStatus",
    "ReactStep",
    "content_blocks",
    "react_system_prompt",
    "react_user_prompt",
    "tool_definitions",
    "tool_description",
    "tool_result_block",
]

DEFAULT_REACT_MAX_TOKENS = 2048
"""Output tokens of one ReAct turn (a thought and one tool call, or the answer)."""

REACT_ROLE = (
    "You are a ReAct agent of plandag. For a task, you work one step at a time: think about "
    "what you know and what is missing, then call exactly one of the tools provided and read "
    "its result; repeat until you can answer. When you can, answer the task in text, with "
    "no tool call."
)
"""The first paragraph of the ReAct system prompt (the planner's is
:data:`plandag.planner.prompt.ROLE`)."""

REACT_EXAMPLE = """\
An example (it uses built-in tools; use only the tools provided). It solves the task of \
the planner's good example, one tool call per turn.
Task: Total the paid and the refunded orders of a JSON file into out/summary.json.
Thought: I need the orders first.
Action: read_file {"path": "orders.json"}
Observation: <data label="read_file result" type="text" ...>"{\\"orders\\":[...]}"</data>
Thought: I have the orders; now the total of the paid ones.
Action: json_select {"data": "{...}", "expr": "sum(orders[?status=='paid'].amount)"}
Observation: <data label="json_select result" type="json" ...>120.5</data>
Thought: Paid is 120.5; now the refunded ones.
Action: json_select {"data": "{...}", "expr": "sum(orders[?status=='refunded'].amount)"}
Observation: <data label="json_select result" type="json" ...>20.0</data>
Thought: Both totals are known; write them.
Action: write_json {"path": "out/summary.json", "data": {"paid": 120.5, "refunded": 20.0}}
Observation: <data label="write_json result" type="text" ...>"out/summary.json"</data>
Thought: The file is written; I can answer.
Answer: paid 120.5, refunded 20.0, written to out/summary.json."""
"""One example run, the counterpart of the planner's good example plan (the same task)."""

ReactStatus = Literal["succeeded", "failed", "gave_up", "budget_exceeded", "timed_out"]
"""How a ReAct run ended: answered; a model call failed past its retries; ``max_turns``
reached without an answer; the budget refused a call; the wall-clock cap passed."""


def react_system_prompt() -> str:
    """The ReAct system prompt: role, rules, the data-block rule and one example run (the
    tools go in the request's ``tools``, described as the planner's prompt describes them;
    the example solves the task of the planner's good example plan)."""
    return f"{REACT_ROLE}\n\n{REACT_RULES}\n- {DATA_BLOCK_RULE}\n\n{REACT_EXAMPLE}\n"


def react_user_prompt(goal: str, context: str = "", params: Mapping[str, Any] | None = None) -> str:
    """The first user message: the task, the trusted context, the given params (as the
    planner's :func:`~plandag.planner.prompt.user_prompt` shows them).

    Args:
        goal: the task, in the user's words.
        context: trusted context from the user, or "".
        params: values given to the task by name, or None.

    Returns:
        The text.
    """
    parts = [f"Task:\n{goal.strip()}"]
    if context.strip():
        parts.append(f"Trusted context (from the user):\n{context.strip()}")
    if params:
        lines = [
            f"- {name} = {json.dumps(value, ensure_ascii=False, default=str)}"
            for name, value in params.items()
        ]
        parts.append("Values given with the task:\n" + "\n".join(lines))
    parts.append("Think, then call one tool; answer in text when you can.")
    return "\n\n".join(parts) + "\n"


@dataclasses.dataclass(frozen=True, slots=True)
class ReactStep:
    """One tool call of a ReAct run.

    Attributes:
        number: 1 for the first call.
        thought: the text the model wrote before the call ("" for none).
        tool: the tool called.
        input: its arguments, as the model wrote them.
        result: what the tool returned (None when it failed).
        error: ``"ErrorType: message"`` when the call failed or was refused, else None.
        duration_s: seconds the tool took.
    """

    number: int
    thought: str
    tool: str
    input: Mapping[str, Any]
    result: Any = None
    error: str | None = None
    duration_s: float = 0.0


@dataclasses.dataclass(frozen=True)
class ReactResult:
    """What :meth:`ReactAgent.run` produced.

    Attributes:
        status: :data:`ReactStatus`.
        answer: the model's final text; None unless ``succeeded``.
        steps: every tool call, in order.
        llm_calls: every model call attempt, in order.
        wall_s: seconds from the first request to the end.
        error: what ended the run when it did not succeed, else None.
    """

    status: ReactStatus
    answer: str | None
    steps: tuple[ReactStep, ...]
    llm_calls: tuple[CallRecord, ...]
    wall_s: float
    error: str | None = None

    @property
    def input_tokens(self) -> int:
        """Input tokens over every call attempt (cache reads and writes included)."""
        return sum(
            call.usage.input_tokens
            + call.usage.cache_creation_input_tokens
            + call.usage.cache_read_input_tokens
            for call in self.llm_calls
        )

    @property
    def output_tokens(self) -> int:
        """Output tokens over every call attempt."""
        return sum(call.usage.output_tokens for call in self.llm_calls)

    @property
    def cost_usd(self) -> float:
        """US dollars over every call attempt."""
        return sum(call.cost_usd for call in self.llm_calls)


class ReactAgent:
    """A sequential ReAct agent: think, one tool call, observe, repeat, answer.

    Args:
        client: the model provider; its responses' ``raw`` must hold Messages API content
            blocks (:class:`~plandag.models.AnthropicClient`).
        model: the model name.
        registry: the tools offered (all of them, as the planner is shown all of them).
        limits: the brakes: ``max_seconds`` (wall clock from the first request),
            ``max_cost_usd`` and ``max_tokens`` (a budget over the model calls).
        retry: retries of transient model call failures (the planner's policy).
        budget: the run's budget; default one from ``limits``' caps.
        prices: the price table for model calls.
        clock: where retry delays are slept; default the system clock.
        max_turns: the most model calls that may ask for a tool before the run gives up
            (>= 1).
        max_tokens: output tokens of each turn (>= 1).
        max_chars: characters of each observation shown before it is cut
            (:func:`~plandag.executors.data.quote_data`).
        read_only: refuse tools with effects (the call becomes an error observation).
        approve: ``None`` (no gate: every tool runs, the baseline as measured), ``"never"``
            (every call with an effect refused) or ``"auto"`` (``write`` effects run
            within ``write_boundary``; ``irreversible`` ones refused: nobody approves).
        write_boundary: where ``auto`` lets tools write; default the working directory.

    Raises:
        ValueError: ``max_turns`` or ``max_tokens`` < 1, or ``approve`` not one of
            ``None``, ``"auto"``, ``"never"``.
    """

    def __init__(
        self,
        client: LLMClient,
        model: str,
        registry: Registry,
        *,
        limits: RunLimits | None = None,
        retry: RetryPolicy | None = None,
        budget: Budget | None = None,
        prices: PriceTable = DEFAULT_PRICES,
        clock: Clock | None = None,
        max_turns: int = 30,
        max_tokens: int = DEFAULT_REACT_MAX_TOKENS,
        max_chars: int = DEFAULT_MAX_CHARS,
        read_only: bool = False,
        approve: Literal["auto", "never"] | None = None,
        write_boundary: WriteBoundary | None = None,
    ) -> None:
        if approve not in (None, "auto", "never"):
            raise ValueError(f"approve must be None, 'auto' or 'never', not {approve!r}")
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, not {max_turns}")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, not {max_tokens}")
        self.client = client
        self.model = model
        self.registry = registry
        self.limits = limits if limits is not None else RunLimits()
        self.retry = retry if retry is not None else RetryPolicy()
        self.budget = budget
        self.prices = prices
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.max_turns = max_turns
        self.max_tokens = max_tokens
        self.max_chars = max_chars
        self.read_only = read_only
        self.approve = approve
        self.write_boundary = (
            write_boundary
            if write_boundary is not None or approve != "auto"
            else WriteBoundary.from_specs([Path.cwd()])
        )
        self.system = react_system_prompt()
        self.tools = tool_definitions(registry)

    async def run(
        self, goal: str, context: str = "", params: Mapping[str, Any] | None = None
    ) -> ReactResult:
        """Answer ``goal`` one tool call at a time.

        Args:
            goal: the task, in the user's words.
            context: trusted context from the user, or "".
            params: values given with the task, by name, or None.

        Returns:
            The :class:`ReactResult`; never raises for a failed call or tool (the result
            says what happened).
        """
        budget = self.budget if self.budget is not None else self.limits.budget()
        started = time.monotonic()
        max_seconds = self.limits.seconds_cap
        deadline = None if max_seconds is None else started + max_seconds
        messages: list[ChatMessage] = [
            {"role": "user", "content": react_user_prompt(goal, context, params)}
        ]
        calls: list[CallRecord] = []
        steps: list[ReactStep] = []

        def end(status: ReactStatus, answer: str | None, error: str | None) -> ReactResult:
            return ReactResult(
                status, answer, tuple(steps), tuple(calls), time.monotonic() - started, error
            )

        for _ in range(self.max_turns):
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return end("timed_out", None, "the wall-clock cap passed")
            request = LLMRequest(
                model=self.model,
                messages=tuple(messages),
                max_tokens=self.max_tokens,
                system=self.system,
                temperature=0.0,
                tools=self.tools,
                tool_choice={"type": "auto", "disable_parallel_tool_use": True},
                # the prompt as it is; the provider may cache the conversation so far
                cache="conversation",
            )
            retry_deadline = None if remaining is None else self.clock.monotonic() + remaining
            try:
                with anyio.fail_after(remaining):
                    response = await call_with_retries(
                        self.client,
                        request,
                        self.retry,
                        self.clock,
                        budget,
                        prices=self.prices,
                        records=calls,
                        deadline=retry_deadline,
                    )
            except TimeoutError:
                return end("timed_out", None, "the wall-clock cap passed during a model call")
            except BudgetRefusedError as error:
                return end("budget_exceeded", None, f"{type(error).__name__}: {error}")
            except Exception as error:
                return end("failed", None, f"{type(error).__name__}: {error}")
            blocks = content_blocks(response.raw)
            uses = [block for block in blocks if block.get("type") == "tool_use"]
            if not uses:
                return end("succeeded", response.text, None)
            messages.append({"role": "assistant", "content": blocks})
            results: list[dict[str, Any]] = []
            for index, use in enumerate(uses):
                if index > 0:  # one tool per turn: a second call is not run
                    results.append(
                        tool_result_block(use, "error: one tool call per turn; not run", True)
                    )
                    continue
                step = await self._call(len(steps) + 1, response.text, use, deadline)
                steps.append(step)
                if step.error is not None:
                    shown = quote_data(f"{step.tool} error", step.error, self.max_chars)
                    results.append(tool_result_block(use, shown, True))
                else:
                    shown = quote_data(f"{step.tool} result", step.result, self.max_chars)
                    results.append(tool_result_block(use, shown, False))
            messages.append({"role": "user", "content": results})
        return end("gave_up", None, f"no answer after {self.max_turns} turns")

    async def _call(
        self, number: int, thought: str, use: Mapping[str, Any], deadline: float | None
    ) -> ReactStep:
        """Run one tool call; its failure is the observation."""
        name = str(use.get("name", ""))
        arguments = use.get("input")
        given: dict[str, Any] = dict(arguments) if isinstance(arguments, Mapping) else {}
        item = self.registry.tools.get(name)
        if item is None:
            known = ", ".join(sorted(self.registry.tools))
            return ReactStep(
                number, thought, name, given, error=f"UnknownTool: no tool {name!r} ({known})"
            )
        if self.read_only and item.effects != "none":
            return ReactStep(
                number,
                thought,
                name,
                given,
                error=f"Refused: {name} has effects ({item.effects}) and the run is read-only",
            )
        refusal = self._refusal(name, given)
        if refusal is not None:
            return ReactStep(number, thought, name, given, error=refusal)
        started = time.monotonic()
        try:
            remaining = None if deadline is None else max(0.0, deadline - started)
            with anyio.fail_after(remaining):
                result = await item.invoke(given)
        except Exception as error:
            return ReactStep(
                number,
                thought,
                name,
                given,
                error=f"{type(error).__name__}: {error}",
                duration_s=time.monotonic() - started,
            )
        return ReactStep(
            number, thought, name, given, result=result, duration_s=time.monotonic() - started
        )

    def _refusal(self, name: str, given: Mapping[str, Any]) -> str | None:
        """Why the approval mode refuses this call (an error observation), or None."""
        item = self.registry.tools[name]
        if self.approve is None or item.effects == "none":
            return None
        if self.approve == "never" or item.effects == "irreversible":
            why = (
                "no effect is approved in this run"
                if self.approve == "never"
                else "an irreversible effect needs a person's approval and nobody approves "
                "in this run"
            )
            return f"Refused: {name} has effects ({item.effects}): {why}"
        if self.write_boundary is not None and item.writes is not None:
            try:
                for target in item.write_targets(given):
                    self.write_boundary.check(target)
            except Exception as error:
                return f"Refused: {type(error).__name__}: {error}"
        return None
