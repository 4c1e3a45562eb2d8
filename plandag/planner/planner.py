"""The planner: a model writes the whole plan, the compiler checks it (docs/planning.md).

:meth:`Planner.plan` asks the model once for the plan, with structured output (the plan
schema built from the registry, :func:`plandag.planner.schema.plan_json_schema`: each step
one variant per tool with that tool's typed arguments) at temperature 0, then compiles the
answer. A plan that does not compile
goes back to the model with the full diagnostics list (formatted like ``plandag check``,
quoted as data: :func:`plandag.planner.prompt.repair_message`), at most ``max_repairs``
times (default 2); then :class:`PlannerGaveUp` (a :class:`PlanError`: the CLI
exits 2) carries the last diagnostics. Every call goes through
:func:`plandag.models.call_with_retries`: transient failures (429, 5xx, 529) are
retried on the injected clock, within the budget, and every attempt is recorded.

A provider that refuses the schema as too large (:func:`schema_too_large`: an HTTP 400 whose
message says the grammar or schema is too large, too complex or has too many parts, as
Anthropic's "The compiled grammar is too large" does) gets the plan's subset of tools: one
short call asks the model which tools the plan will call (an array of the registered names,
:data:`TOOL_CHOICE_SCHEMA_NAME`), and the plan is asked again with a schema of those tools
only. The subset is remembered for the planner's later calls (repairs, later plans); a
refusal of the subset's schema is raised as it is.

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
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from plandag.brakes import DEFAULT_PLANNER_MAX_TOKENS
from plandag.brakes.budget import Budget
from plandag.brakes.clock import Clock, SystemClock
from plandag.brakes.retry import RetryPolicy
from plandag.compiler import DEFAULT_MAX_STEPS, CompiledPlan, Diagnostic
from plandag.dag.plan import Plan
from plandag.errors import PermanentStepError, PlanError, StepError
from plandag.models import (
    DEFAULT_PRICES,
    CallRecord,
    ChatMessage,
    LLMClient,
    LLMRequest,
    LLMResponse,
    PriceTable,
    call_with_retries,
)
from plandag.models.calls import deadline_from
from plandag.planner.prompt import repair_message, system_prompt, user_prompt
from plandag.planner.schema import plan_json_schema
from plandag.planner.wire import WIRE_SCHEMA_NAME, compile_wire
from plandag.tools.boundary import WriteBoundary
from plandag.tools.registry import Registry

__all__ = [
    "DEFAULT_PLAN_MAX_TOKENS",
    "TOOL_CHOICE_MAX_TOKENS",
    "TOOL_CHOICE_SCHEMA_NAME",
    "PlanAttempt",
    "PlanOutcome",
    "Planner",
    "PlannerGaveUp",
    "schema_too_large",
]

_log = logging.getLogger("plandag.planner")

TOOL_CHOICE_SCHEMA_NAME = "plandag_tools"
"""The schema name of the call that picks the plan's tools (a too-large schema refused)."""

TOOL_CHOICE_MAX_TOKENS = 1024
"""Output tokens of that call."""

_TOO_LARGE = re.compile(
    r"(grammar|schema|strict tools|union|anyOf|response_format|output_config|json_schema)"
    r".{0,120}?(too large|too big|too complex|too many|exceed|limit)"
    r"|(too large|too big|too complex|too many|exceed|limit).{0,120}?"
    r"(grammar|schema|strict tools|union|anyOf|response_format|output_config|json_schema)",
    re.IGNORECASE | re.DOTALL,
)


def schema_too_large(error: BaseException) -> bool:
    """Whether ``error`` is a provider refusing the structured-output schema as too large.

    An HTTP 400 or 422 (a :class:`PermanentStepError` with reason ``http_400`` or
    ``http_422``) whose message names the grammar or schema together with a size word:
    Anthropic's "The compiled grammar is too large, which would cause performance issues",
    OpenAI's "schema ... exceeds ..." and "too many properties"-style limits. A prompt
    that is too long is not one (nothing about a schema).

    Args:
        error: the error a call raised.

    Returns:
        True for such a refusal.
    """
    if not isinstance(error, PermanentStepError) or error.reason not in ("http_400", "http_422"):
        return False
    return _TOO_LARGE.search(str(error)) is not None


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
        self.tool_subset: tuple[str, ...] | None = None

    @property
    def system(self) -> str:
        """The system prompt (:func:`plandag.planner.prompt.system_prompt` of the registry)."""
        return system_prompt(self.registry)

    @property
    def json_schema(self) -> dict[str, Any]:
        """The structured-output schema asked for (:func:`plan_json_schema` of the registry,
        or of :attr:`tool_subset` once a provider refused the whole union as too large).

        The same for every provider: the client shapes it for its own
        (:func:`plandag.models.schemas.prepare_schema`: every property required, the
        optional ones nullable, for OpenAI's strict mode; the numeric bounds Anthropic
        refuses in descriptions, the compiler checking them).
        """
        return plan_json_schema(self.registry, tools=self.tool_subset)

    def tool_choice_schema(self) -> dict[str, Any]:
        """The schema of the call that names the plan's tools: ``{"tools": [names]}``."""
        return {
            "type": "object",
            "properties": {
                "tools": {"type": "array", "items": {"enum": sorted(self.registry.tools)}}
            },
            "required": ["tools"],
            "additionalProperties": False,
        }

    async def request_plan(
        self,
        messages: Sequence[ChatMessage],
        *,
        calls: list[CallRecord],
        deadline: float | None,
        budget: Budget | None = None,
        on_text: Callable[[str], Awaitable[None]] | None = None,
        on_restart: Callable[[], Awaitable[None]] | None = None,
    ) -> LLMResponse:
        """One planning call with :attr:`json_schema`; a schema refused as too large
        (:func:`schema_too_large`) is replaced by the plan's subset of tools
        (:meth:`choose_tools`) and the call made again.

        Args:
            messages: the conversation (the task first, then any repairs).
            calls: every call attempt's record is appended here.
            deadline: ``clock.monotonic()`` past which no attempt starts, or None.
            budget: the budget to reserve on (default the planner's).
            on_text, on_restart: streaming hooks (``call_with_retries``).

        Returns:
            The model's answer.

        Raises:
            StepError: the call failed past its retries, or the subset's schema was refused
                too.
        """
        while True:
            request = LLMRequest(
                model=self.model,
                messages=tuple(messages),
                max_tokens=self.max_tokens,
                system=self.system,
                json_schema=self.json_schema,
                schema_name=WIRE_SCHEMA_NAME,
                temperature=self.temperature,
                raise_if_too_large=self.tool_subset is None,
            )
            try:
                return await call_with_retries(
                    self.client,
                    request,
                    self.retry,
                    self.clock,
                    budget if budget is not None else self.budget,
                    prices=self.prices,
                    records=calls,
                    deadline=deadline,
                    on_text=on_text,
                    on_restart=on_restart,
                )
            except StepError as error:
                if self.tool_subset is not None or not schema_too_large(error):
                    raise
                first = messages[0]["content"] if messages else ""
                task = first if isinstance(first, str) else json.dumps(first)
                self.tool_subset = await self.choose_tools(
                    task, calls=calls, deadline=deadline, budget=budget
                )
                _log.warning(
                    "the provider refused the plan schema of %d tools as too large; planning "
                    "with the %d tools the model chose: %s",
                    len(self.registry.tools),
                    len(self.tool_subset),
                    ", ".join(self.tool_subset),
                )

    async def choose_tools(
        self,
        task: str,
        *,
        calls: list[CallRecord],
        deadline: float | None,
        budget: Budget | None = None,
    ) -> tuple[str, ...]:
        """Ask the model which registered tools the plan for ``task`` will call.

        Args:
            task: the planner's user message (the task, context and params).
            calls: every call attempt's record is appended here.
            deadline: ``clock.monotonic()`` past which no attempt starts, or None.
            budget: the budget to reserve on (default the planner's).

        Returns:
            The registered names it gave, sorted, without repeats (at least one: every
            registered tool when it gave none that is registered).

        Raises:
            StepError: the call failed past its retries.
        """
        request = LLMRequest(
            model=self.model,
            messages=(
                {
                    "role": "user",
                    "content": task.rstrip()
                    + "\n\nBefore the plan: list every tool the plan will call, by name, "
                    'as {"tools": [NAME, ...]}.',
                },
            ),
            max_tokens=TOOL_CHOICE_MAX_TOKENS,
            system=self.system,
            json_schema=self.tool_choice_schema(),
            schema_name=TOOL_CHOICE_SCHEMA_NAME,
            temperature=self.temperature,
        )
        response = await call_with_retries(
            self.client,
            request,
            self.retry,
            self.clock,
            budget if budget is not None else self.budget,
            prices=self.prices,
            records=calls,
            deadline=deadline,
        )
        try:
            data = json.loads(response.text)
        except ValueError:
            data = None
        named = data.get("tools") if isinstance(data, dict) else None
        chosen = sorted(
            {name for name in named or () if isinstance(name, str) and name in self.registry.tools}
        )
        return tuple(chosen) if chosen else tuple(sorted(self.registry.tools))

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
        messages: list[ChatMessage] = [
            {"role": "user", "content": user_prompt(goal, context, params)}
        ]
        calls: list[CallRecord] = records if records is not None else []
        first_call = len(calls)
        attempts: list[PlanAttempt] = []
        deadline = deadline_from(self.clock, remaining_s)
        for number in range(1, self.max_repairs + 2):
            response = await self.request_plan(messages, calls=calls, deadline=deadline)
            try:
                compiled = compile_wire(
                    response.text,
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
