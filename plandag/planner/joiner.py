"""The joiner: turn a finished run into the task's result (LLMCompiler, Kim et al.,
ICML 2024: the joiner).

* The plan has an ``output`` and the run succeeded (every step succeeded, so every check
  passed): the result is assembled by code, :func:`plandag.dag.references.resolve_value`
  on the run's step results and params. No model call.
* The plan has an ``output`` but the run did not succeed: the output cannot be assembled,
  and no model is asked to invent it; the decision is ``replan`` with the failed steps as
  the reason. No model call.
* The plan has no ``output`` (the task asks for a written answer): one call to the model
  with the goal and the results, each quoted as data
  (:func:`plandag.executors.data.quote_data`), decides ``finish(answer)`` or
  ``replan(reason)``, through a structured-output schema whose ``action`` field is the
  discriminator (:data:`JOIN_SCHEMA`). A replan there counts against the run's replan
  caps (the caller's business).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, Literal

from plandag.brakes.budget import Budget
from plandag.brakes.clock import Clock, SystemClock
from plandag.brakes.retry import RetryPolicy
from plandag.compiler import CompiledPlan
from plandag.dag.references import ReferenceResolutionError, find_references, resolve_value
from plandag.errors import PermanentStepError
from plandag.executors.data import DATA_BLOCK_RULE, DEFAULT_MAX_CHARS, quote_data
from plandag.models import (
    DEFAULT_PRICES,
    CallRecord,
    LLMClient,
    LLMRequest,
    LLMResponse,
    PriceTable,
    UnusableResponseError,
    call_with_retries,
)
from plandag.scheduler.result import RunResult

__all__ = [
    "DEFAULT_JOIN_MAX_TOKENS",
    "JOIN_SCHEMA",
    "JOIN_SYSTEM_PROMPT",
    "JoinAction",
    "JoinDecision",
    "Joiner",
    "join_by_code",
    "join_prompt",
    "parse_decision",
]

DEFAULT_JOIN_MAX_TOKENS = 4096
"""Output tokens the joiner's answer may take."""

JoinAction = Literal["finish", "replan"]

JOIN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {
            "anyOf": [
                {
                    "type": "object",
                    "properties": {
                        "action": {"const": "finish"},
                        "answer": {"type": "string"},
                    },
                    "required": ["action", "answer"],
                    "additionalProperties": False,
                },
                {
                    "type": "object",
                    "properties": {
                        "action": {"const": "replan"},
                        "reason": {"type": "string"},
                    },
                    "required": ["action", "reason"],
                    "additionalProperties": False,
                },
            ]
        }
    },
    "required": ["decision"],
    "additionalProperties": False,
}
"""The joiner's structured output: ``{"decision": {"action": "finish", "answer": ...}}`` or
``{"decision": {"action": "replan", "reason": ...}}``. Within the Anthropic API's schema
subset (``const``, ``anyOf``, closed objects)."""

JOIN_SYSTEM_PROMPT = (
    "You are the joiner of plandag. From a task and the outcome of each step run for it, decide: "
    "finish, with the answer the task asks for, from the results alone; or replan, with the "
    "reason, when they do not answer it. Never invent a result.\n"
    f"{DATA_BLOCK_RULE}\n"
)
"""The joiner's system prompt."""


@dataclasses.dataclass(frozen=True, slots=True)
class JoinDecision:
    """What to do with a finished run.

    Attributes:
        action: ``finish`` (``answer`` is the result) or ``replan`` (``reason`` says why).
        answer: the task's result: the resolved ``output`` (any JSON-like value) when code
            assembled it, the model's written answer (a string) otherwise; None for a
            replan.
        reason: why a replan is needed ("" for finish).
        by_model: True when a model call made the decision.
        records: the model call attempts (empty when code decided).
    """

    action: JoinAction
    answer: Any = None
    reason: str = ""
    by_model: bool = False
    records: tuple[CallRecord, ...] = ()


def _step_result(run: RunResult) -> Any:
    def step_result(step_id: int) -> Any:
        return run.steps[step_id].result

    return step_result


def _failure_summary(run: RunResult) -> str:
    parts = []
    for step_id in sorted(run.steps):
        record = run.steps[step_id]
        if record.status == "succeeded" or record.superseded_by is not None:
            continue
        detail = record.detail or (record.error.message if record.error is not None else "")
        parts.append(f"step {step_id} {record.status} ({record.reason or 'no reason'}: {detail})")
    return "; ".join(parts) or f"the run ended {run.status}"


def join_by_code(compiled: CompiledPlan, run: RunResult) -> JoinDecision | None:
    """The decision code can take alone, or None when a model must decide (no ``output``).

    Args:
        compiled: the plan that ran (after any replans: the steps ``output`` names).
        run: the run's result.

    Returns:
        ``finish`` with ``output`` resolved on the step results (the run succeeded and
        every step the output references succeeded); ``replan`` when the run did not
        succeed or the output cannot be resolved from the results; None when the plan has
        no ``output``.
    """
    output = compiled.plan.output
    if output is None:
        return None
    if not run.succeeded:
        return JoinDecision("replan", reason=f"the run ended {run.status}: {_failure_summary(run)}")
    needed = sorted(
        {reference.step_id for _, reference in find_references(output) if reference.step_id}
    )
    missing = [
        step_id
        for step_id in needed
        if step_id not in run.steps or run.steps[step_id].status != "succeeded"
    ]
    if missing:
        names = ", ".join(map(str, missing))
        return JoinDecision(
            "replan", reason=f"the output needs step(s) {names}, which did not succeed"
        )
    try:
        answer = resolve_value(output, _step_result(run), compiled.params)
    except ReferenceResolutionError as error:
        return JoinDecision("replan", reason=f"the output cannot be assembled: {error}")
    return JoinDecision("finish", answer=answer)


def join_prompt(goal: str, run: RunResult, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """The joiner's user message: the task and every step's outcome, results as data.

    Args:
        goal: the task.
        run: the run's result.
        max_chars: the most characters of each result shown (see
            :func:`~plandag.executors.data.quote_data`).

    Returns:
        The text: the task, then for each step its id, tool and status, and a data block
        with its result (succeeded steps) or its error (the others).
    """
    parts = [f"Task:\n{goal.strip()}\n\nSteps:"]
    for step_id in sorted(run.steps):
        record = run.steps[step_id]
        if record.status == "succeeded":
            label, value = f"step {step_id} result", record.result
        else:
            detail = record.detail or (record.error.message if record.error is not None else "")
            label = f"step {step_id} error"
            value = f"{record.status}, {record.reason or 'no reason'}: {detail}"
        parts.append(f"{record.tool}: {quote_data(label, value, max_chars)}")
    return "\n".join(parts) + "\n"


def parse_decision(response: LLMResponse) -> tuple[JoinAction, str]:
    """Read the model's decision from its answer (:data:`JOIN_SCHEMA`).

    Returns:
        ``("finish", answer)`` or ``("replan", reason)``.

    Raises:
        UnusableResponseError: the answer is not such an object (reason
            ``invalid_decision``).
    """

    def unusable(why: str) -> UnusableResponseError:
        return UnusableResponseError(
            f"the joiner's answer is unusable: {why}; expected "
            '{"decision": {"action": "finish"|"replan", ...}}',
            response=response,
            reason="invalid_decision",
        )

    try:
        data = json.loads(response.text)
    except ValueError as error:
        raise unusable(f"not JSON ({error})") from None
    decision = data.get("decision") if isinstance(data, Mapping) else None
    if not isinstance(decision, Mapping):
        raise unusable('no "decision" object')
    action = decision.get("action")
    field = (
        {"finish": "answer", "replan": "reason"}.get(action) if isinstance(action, str) else None
    )
    if field is None:
        raise unusable(f"action {action!r} is neither 'finish' nor 'replan'")
    value = decision.get(field)
    if not isinstance(value, str):
        raise unusable(f'"{field}" must be a string')
    return ("finish" if action == "finish" else "replan"), value


class Joiner:
    """Decides what a finished run means for its task (module docstring).

    Args:
        client: the model provider, used only for plans without ``output``.
        model: the model name.
        prices: the price table for the call records and the budget.
        budget: the run's budget, or None.
        retry: how transient call failures are retried (default ``RetryPolicy()``).
        clock: where retry delays are slept; default the system clock.
        max_tokens: output tokens the answer may take (>= 1).
        max_chars: the most characters of each step result shown to the model.
        temperature: sampling temperature where the provider supports it (default 0).
    """

    def __init__(
        self,
        client: LLMClient | None,
        model: str,
        *,
        prices: PriceTable = DEFAULT_PRICES,
        budget: Budget | None = None,
        retry: RetryPolicy | None = None,
        clock: Clock | None = None,
        max_tokens: int = DEFAULT_JOIN_MAX_TOKENS,
        max_chars: int = DEFAULT_MAX_CHARS,
        temperature: float = 0.0,
    ) -> None:
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, not {max_tokens}")
        self.client = client
        self.model = model
        self.prices = prices
        self.budget = budget
        self.retry = retry if retry is not None else RetryPolicy()
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.max_tokens = max_tokens
        self.max_chars = max_chars
        self.temperature = temperature

    async def join(self, compiled: CompiledPlan, run: RunResult) -> JoinDecision:
        """Decide ``finish(answer)`` or ``replan(reason)`` for a finished run.

        Args:
            compiled: the plan that ran.
            run: its result.

        Returns:
            The :class:`JoinDecision`: by code when the plan has an ``output``
            (:func:`join_by_code`), else by one model call.

        Raises:
            PermanentStepError: a model is needed and the joiner has no client (reason
                ``no_model``).
            UnusableResponseError: the model's answer is not a decision.
            TruncatedResponseError: the answer was cut off at ``max_tokens``.
            StepError: the call failed past its retries.
        """
        decided = join_by_code(compiled, run)
        if decided is not None:
            return decided
        if self.client is None:
            raise PermanentStepError(
                "the plan has no output, so a model must write the answer, and the joiner "
                "has no model client; give the plan an output or the joiner a client",
                reason="no_model",
            )
        request = LLMRequest(
            model=self.model,
            messages=[
                {"role": "user", "content": join_prompt(compiled.plan.goal, run, self.max_chars)}
            ],
            max_tokens=self.max_tokens,
            system=JOIN_SYSTEM_PROMPT,
            json_schema=JOIN_SCHEMA,
            schema_name="plandag_join",
            temperature=self.temperature,
        )
        records: list[CallRecord] = []
        response = await call_with_retries(
            self.client,
            request,
            self.retry,
            self.clock,
            self.budget,
            prices=self.prices,
            records=records,
        )
        action, text = parse_decision(response)
        if action == "finish":
            return JoinDecision("finish", answer=text, by_model=True, records=tuple(records))
        return JoinDecision("replan", reason=text, by_model=True, records=tuple(records))
