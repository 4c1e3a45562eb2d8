"""The planner: a model writes the whole plan, the compiler checks it (README, "Planning
with a model").

:meth:`Planner.plan` asks the model once for the plan, with structured output (the wire
format's JSON schema, :func:`plandag.planner.wire.wire_json_schema`, tool names and check
kinds as enums) at temperature 0, then compiles the answer. A plan that does not compile
goes back to the model with the full diagnostics list (formatted like ``plandag check``,
quoted as data: :func:`plandag.planner.prompt.repair_message`), at most ``max_repairs``
times (default 2); then :class:`PlannerGaveUp` (a :class:`PlanError`: the CLI
exits 2) carries the last diagnostics. Every call goes through
:func:`plandag.models.call_with_retries`: transient failures (429, 5xx, 529) are
retried on the injected clock, within the budget, and every attempt is recorded.

A response cut off by ``max_tokens`` is an error, never a shorter plan: the
:class:`~plandag.models.TruncatedResponseError` of the client layer propagates, with
no repair attempt (the same request would be cut again).

Temperature: requests carry ``temperature=0.0``. The OpenAI-compatible client sends it; the
Anthropic SDK in use (2.14) has no temperature parameter on ``messages.create``, so
Anthropic requests go at the model's default temperature (see
:mod:`plandag.models.anthropic`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from plandag.brakes import DEFAULT_PLANNER_MAX_TOKENS
from plandag.brakes.budget import Budget
from plandag.brakes.clock import Clock, SystemClock
from plandag.brakes.retry import RetryPolicy
from plandag.compiler import DEFAULT_MAX_STEPS, CompiledPlan, Diagnostic, compile_plan
from plandag.dag.plan import Plan
from plandag.errors import PlanError
from plandag.models import (
    DEFAULT_PRICES,
    CallRecord,
    ChatMessage,
    LLMClient,
    LLMRequest,
    PriceTable,
    call_with_retries,
)
from plandag.models.calls import deadline_from
from plandag.planner.prompt import repair_message, system_prompt, user_prompt
from plandag.planner.wire import WIRE_SCHEMA_NAME, wire_json_schema, wire_to_document
from plandag.tools.boundary import WriteBoundary
from plandag.tools.registry import Registry

__all__ = ["DEFAULT_PLAN_MAX_TOKENS", "PlanAttempt", "PlanOutcome", "Planner", "PlannerGaveUp"]

DEFAULT_PLAN_MAX_TOKENS = DEFAULT_PLANNER_MAX_TOKENS
"""Output tokens a plan may take (``max_tokens`` of each planning call): 4,096, sized to
plans (:data:`plandag.brakes.DEFAULT_PLANNER_MAX_TOKENS` says how)."""


@dataclasses.dataclass(frozen=True, slots=True)
class PlanAttempt:
    """One answer of the model and what the compiler said of it.

    Attributes:
        number: 1 for the first plan, 2 for the first repair...
        text: the model's answer (wire JSON).
        output_tokens: output tokens of the call, as the provider reported them.
        diagnostics: every diagnostic: the errors of a plan that did not compile, or the
            warnings of one that did.
        compiled: whether this attempt's plan compiled.
    """

    number: int
    text: str
    output_tokens: int
    diagnostics: tuple[Diagnostic, ...]
    compiled: bool


@dataclasses.dataclass(frozen=True, slots=True)
class PlanOutcome:
    """A plan the model wrote and the compiler accepted.

    Attributes:
        plan: the plan (the Plan model, converted from the wire format).
        compiled: the compiled plan, ready for the scheduler.
        attempts: every attempt, in order; the last one compiled.
        records: every model call attempt (retries of a call included), in order.
    """

    plan: Plan
    compiled: CompiledPlan
    attempts: tuple[PlanAttempt, ...]
    records: tuple[CallRecord, ...]

    @property
    def output_tokens(self) -> int:
        """Output tokens over every call attempt (repairs and failed attempts included)."""
        return sum(record.output_tokens for record in self.records)

    @property
    def output_tokens_per_step(self) -> float:
        """Output tokens of the accepted plan's answer divided by its steps (0.0 if none)."""
        steps = len(self.plan.steps)
        return self.attempts[-1].output_tokens / steps if steps else 0.0


class PlannerGaveUp(PlanError):
    """The model's plan still did not compile after ``max_repairs`` repairs.

    A :class:`PlanError` (the CLI exits 2) whose ``diagnostics`` are those of the last
    attempt.

    Attributes:
        diagnostics: the last attempt's diagnostics.
        attempts: every attempt, in order.
        records: every model call attempt, in order.
    """

    def __init__(
        self,
        diagnostics: Sequence[Diagnostic],
        *,
        attempts: Sequence[PlanAttempt],
        records: Sequence[CallRecord],
    ) -> None:
        super().__init__(diagnostics)
        self.attempts = tuple(attempts)
        self.records = tuple(records)
        self.add_note(
            f"the planner gave up after {len(self.attempts)} plan(s), none of which compiled"
        )


class Planner:
    """Writes a plan for a task with a model, repairing it from the compiler's diagnostics.

    Args:
        client: the model provider (:class:`~plandag.models.AnthropicClient`,
            :class:`~plandag.models.OpenAICompatibleClient`...).
        model: the model name (``claude-sonnet-4-6``...).
        registry: the tools and check kinds a plan may use (all listed in the prompt;
            the plan is compiled against it).
        prices: the price table for the call records and the budget.
        budget: the run's budget, reserved before and settled after every call; None for
            none.
        retry: how transient call failures are retried (default ``RetryPolicy()``).
        clock: where retry delays are slept (a ``VirtualClock`` in tests); default the
            system clock.
        max_tokens: output tokens each planning call may take (>= 1).
        max_repairs: how many times a plan that does not compile goes back to the model
            (>= 0; default 2).
        temperature: sampling temperature sent where the provider supports it (default 0).
        read_only: compile for a read-only run (tools with effects are errors).
        write_boundary: compile against this write boundary, or None for no write checks.
        http_allow: the configured HTTP allow-list (host globs), or None; a read-only plan
            reaches only these hosts (``host_not_allowed`` otherwise).
        max_steps: the most steps a plan may have (>= 1; default 500): a longer plan does
            not compile (``too_many_steps``, sent back to the model like any diagnostic).

    Raises:
        ValueError: ``max_tokens`` < 1, ``max_repairs`` < 0 or ``max_steps`` < 1.
    """

    def __init__(
        self,
        client: LLMClient,
        model: str,
        registry: Registry,
        *,
        prices: PriceTable = DEFAULT_PRICES,
        budget: Budget | None = None,
        retry: RetryPolicy | None = None,
        clock: Clock | None = None,
        max_tokens: int = DEFAULT_PLAN_MAX_TOKENS,
        max_repairs: int = 2,
        temperature: float = 0.0,
        read_only: bool = False,
        write_boundary: WriteBoundary | None = None,
        http_allow: Sequence[str] | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
    ) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, not {max_steps}")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, not {max_tokens}")
        if max_repairs < 0:
            raise ValueError(f"max_repairs must be >= 0, not {max_repairs}")
        self.client = client
        self.model = model
        self.registry = registry
        self.prices = prices
        self.budget = budget
        self.retry = retry if retry is not None else RetryPolicy()
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.max_tokens = max_tokens
        self.max_repairs = max_repairs
        self.temperature = temperature
        self.read_only = read_only
        self.write_boundary = write_boundary
        self.http_allow = tuple(http_allow) if http_allow is not None else None
        self.max_steps = max_steps

    @property
    def system(self) -> str:
        """The system prompt (:func:`plandag.planner.prompt.system_prompt` of the registry)."""
        return system_prompt(self.registry)

    @property
    def json_schema(self) -> dict[str, Any]:
        """The structured-output schema sent: the wire schema, tools and checks as enums.

        OpenAI's strict mode needs every property required (optional ones nullable); the
        Anthropic API takes optional properties, which the model may leave out.
        """
        return wire_json_schema(
            tools=sorted(self.registry.tools),
            checks=sorted(self.registry.checks),
            all_required=self.client.provider == "openai",
        )

    async def plan(
        self,
        goal: str,
        context: str = "",
        params: Mapping[str, Any] | None = None,
        *,
        records: list[CallRecord] | None = None,
        tainted_author: bool = False,
        remaining_s: float | None = None,
    ) -> PlanOutcome:
        """Ask the model for a plan for ``goal``; repair it from diagnostics until it compiles.

        Args:
            goal: the task, in the user's words.
            context: trusted context from the user (shown as is, not as data), or "".
            params: the values the run will be given, by name, or None; the plan is
                compiled with them (missing, unknown and mistyped params are errors).
            records: a list every call attempt's record is also appended to as it is made
                (so a caller keeps the records of a call that raised), or None.
            tainted_author: ``context`` quotes outside content (an investigation's
                results): the plan's literal args are tainted, so its ``egress`` steps need
                approval (``compile_plan(tainted_author=True)``).
            remaining_s: seconds left before the run's deadline, or None: no call (nor
                repair) starts past it, and a retry delay that would end past it is not
                waited (:class:`~plandag.models.DeadlineReachedError`).

        Returns:
            A :class:`PlanOutcome` with the plan, its compiled form, every attempt and
            every call record.

        Raises:
            PlannerGaveUp: ``1 + max_repairs`` plans in a row did not compile; carries the
                last diagnostics.
            TruncatedResponseError: an answer was cut off at ``max_tokens`` (never used as a
                shorter plan).
            StepError: a call failed past its retries (``BudgetRefusedError`` when the
                budget could not hold its estimate).
        """
        system = self.system
        schema = self.json_schema
        messages: list[ChatMessage] = [
            {"role": "user", "content": user_prompt(goal, context, params)}
        ]
        calls: list[CallRecord] = records if records is not None else []
        first_call = len(calls)
        attempts: list[PlanAttempt] = []
        deadline = deadline_from(self.clock, remaining_s)
        for number in range(1, self.max_repairs + 2):
            request = LLMRequest(
                model=self.model,
                messages=tuple(messages),
                max_tokens=self.max_tokens,
                system=system,
                json_schema=schema,
                schema_name=WIRE_SCHEMA_NAME,
                temperature=self.temperature,
            )
            response = await call_with_retries(
                self.client,
                request,
                self.retry,
                self.clock,
                self.budget,
                prices=self.prices,
                records=calls,
                deadline=deadline,
            )
            try:
                compiled = compile_plan(
                    wire_to_document(response.text),
                    self.registry,
                    params=params,
                    read_only=self.read_only,
                    write_boundary=self.write_boundary,
                    http_allow=self.http_allow,
                    tainted_author=tainted_author,
                    max_steps=self.max_steps,
                )
            except PlanError as error:
                attempts.append(
                    PlanAttempt(
                        number,
                        response.text,
                        response.usage.output_tokens,
                        tuple(error.diagnostics),
                        compiled=False,
                    )
                )
                messages.append({"role": "assistant", "content": response.text})
                messages.append(
                    {"role": "user", "content": repair_message(error.diagnostics, number)}
                )
                continue
            attempts.append(
                PlanAttempt(
                    number,
                    response.text,
                    response.usage.output_tokens,
                    tuple(compiled.diagnostics),
                    compiled=True,
                )
            )
            return PlanOutcome(compiled.plan, compiled, tuple(attempts), tuple(calls[first_call:]))
        raise PlannerGaveUp(attempts[-1].diagnostics, attempts=attempts, records=calls[first_call:])
