"""What a run gives its model-backed steps: :class:`ModelAccess`.

A plan's ``llm`` and ``agent`` steps call a model through the same client layer as the
planner (:mod:`plandag.models`): the run holds one client (the provider and base URL of
``--provider`` / ``--base-url``, or an :class:`~plandag.models.AnthropicClient` /
:class:`~plandag.models.OpenAICompatibleClient` built in Python), the model steps use
when they name none (``--executor-model``, setting ``executor_model``), and the price table
their reservations and costs are priced with. ``run_plan(..., models=ModelAccess(...))``
passes it; tools read it as ``ctx.models``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from plandag.access import MODEL_TOOLS as MODEL_TOOLS
from plandag.access import model_steps as model_steps
from plandag.errors import (
    InputError,
    PermanentStepError,
    error_message,
    model_endpoint_failure,
)

if TYPE_CHECKING:  # the planner's client layer is imported when a step calls a model
    import anyio

    from plandag.access import ModelAccessProtocol
    from plandag.brakes.budget import Budget
    from plandag.models.base import LLMClient, LLMRequest, LLMResponse
    from plandag.models.pricing import PriceTable
    from plandag.tools.base import ToolContext
    from plandag.tools.registry import Registry

__all__ = [
    "DEFAULT_EXECUTOR_MODEL",
    "KEY_VARIABLES",
    "MODEL_TOOLS",
    "OPENAI_URL",
    "ModelAccess",
    "NoModelAccessError",
    "call_model",
    "connect",
    "executor_model_for",
    "model_steps",
    "provider_client",
    "require_key",
    "require_models",
]

DEFAULT_EXECUTOR_MODEL = "claude-haiku-4-5"
"""The model ``llm`` and ``agent`` steps use with the ``anthropic`` provider when neither the
step nor the configuration names one (setting ``executor_model``): smaller and cheaper than
the planner's. With an OpenAI-compatible server the default is the run's ``--model``."""


@dataclasses.dataclass(frozen=True)
class ModelAccess:
    """The model client a run's ``llm`` and ``agent`` steps call.

    Args:
        client: the provider's client (its ``provider`` is ``anthropic`` or ``openai``);
            built with ``max_retries=0``: a step's retries belong to the run's retry policy.
        model: the executor model, used by a step that names no ``model``.
        prices: US dollars per million tokens by model (default
            :data:`~plandag.models.DEFAULT_PRICES`); a model without a price costs
            0.0 and is limited by the token cap alone.
        registry: the tools an ``agent`` step may list (the run's: the CLI passes the one
            its plan compiled against, ``--tools`` included); None: the default registry.
        call_slots: at most this limiter's total of model calls at once, across every run
            given this access (``extract contracts --max-model-calls``); a call takes its
            slot before it reserves, so calls waiting for a slot hold nothing on the budget.
            None: no bound beyond the run's.

    Raises:
        ValueError: an empty ``model``.
    """

    client: LLMClient
    model: str
    prices: PriceTable = dataclasses.field(default_factory=lambda: _default_prices())
    registry: Registry | None = None
    call_slots: anyio.CapacityLimiter | None = None

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("ModelAccess needs a model name (the default executor model)")

    @property
    def provider(self) -> str:
        """The client's provider (``anthropic``, ``openai``)."""
        return self.client.provider

    def tokens_cost(self, tokens: int) -> float | None:
        """US dollars of ``tokens`` output tokens on the executor model (the dearer side of
        its price, so an estimate is not low), or None when the model has no price: how a
        plan's estimate prices a model step that names no model of its own."""
        from plandag.models.base import Usage

        return self.prices.cost(self.model, Usage(output_tokens=tokens))


def _default_prices() -> PriceTable:
    from plandag.models.pricing import DEFAULT_PRICES

    return DEFAULT_PRICES


class NoModelAccessError(PermanentStepError):
    """A model-backed step ran in a run given no :class:`ModelAccess`; reason ``no_model``."""

    reason = "no_model"


def require_models(models: ModelAccessProtocol | None, tool: str, step_id: int) -> ModelAccess:
    """``models`` as the :class:`ModelAccess` a model-backed tool calls through, or the
    error that says how to give a run one.

    Args:
        models: ``ctx.models``.
        tool: the tool's name, for the message.
        step_id: the step, for the message.

    Raises:
        NoModelAccessError: ``models`` is None, or is not a :class:`ModelAccess`.
    """
    if models is None:
        raise NoModelAccessError(
            f"step {step_id}: tool {tool} calls a model, but this run was given none: pass "
            "--provider and --model (and --base-url for an OpenAI-compatible server) on the "
            "command line, or models=ModelAccess(client, model) to run_plan in Python"
        )
    if not isinstance(models, ModelAccess):
        raise NoModelAccessError(
            f"step {step_id}: tool {tool} calls a model through "
            "plandag.executors.ModelAccess, but this run was given a "
            f"{type(models).__name__}: pass models=ModelAccess(client, model) to run_plan"
        )
    return models


async def call_model(
    context: ToolContext,
    models: ModelAccess,
    request: LLMRequest,
    purpose: str,
    *,
    budget: Budget | None = None,
) -> LLMResponse:
    """Make one model call of a step's attempt: reserve, send once, settle, record.

    1. the reservation: the prompt's input tokens (the provider's count when its client
       has a counting endpoint, such as Anthropic's ``count_tokens``: not an attempt, not
       billed; else :func:`~plandag.models.base.estimate_input_tokens`) plus
       ``request.max_tokens``, at the model's price (0.0 for an unpriced model: tokens
       only), held on the run's budget with :meth:`ToolContext.acquire` (which waits
       while the budget holds new calls back: :mod:`plandag.brakes.budget`);
    2. exactly one request (:meth:`LLMClient.complete`; the clients never retry): a failure
       is raised as the step error the run's retry policy reads;
    3. the hold settled with the usage the provider reported (the usage of an unusable
       answer too; nothing for a call that got no answer);
    4. an ``llm_call`` child of the attempt for the trace: model, tokens (``input_tokens``:
       every prompt token, cached ones included; ``output_tokens``), cost, and for a call
       that failed its ``error`` (``Type: message``), ``error_reason`` (the step error's
       reason, ``connect_error``, ``http_529``...) and ``failure`` (in a person's words,
       naming the endpoint when the call did not get through:
       :func:`plandag.errors.model_endpoint_failure`); and the live OpenTelemetry ``chat
       MODEL`` span of the call (:mod:`plandag.models.telemetry`).

    All four hold one of ``models.call_slots`` when the access has them.

    Args:
        context: the attempt's context.
        models: the run's :class:`ModelAccess`.
        request: the call.
        purpose: what the call is for, shown on the child (``llm``, ``agent turn 2``).
        budget: a budget of the step's own (an agent's caps), reserved and settled as the
            run's is, before it.

    Returns:
        The :class:`~plandag.models.LLMResponse`.

    Raises:
        BudgetRefusedError: the reservation does not fit the run's caps (nothing sent);
            reason ``agent_budget`` when it is ``budget`` that it does not fit.
        StepError: the call failed (mapped by the client: transient or permanent).
    """
    if models.call_slots is None:
        return await _call_model(context, models, request, purpose, budget)
    async with models.call_slots:
        return await _call_model(context, models, request, purpose, budget)


async def _call_model(
    context: ToolContext,
    models: ModelAccess,
    request: LLMRequest,
    purpose: str,
    budget: Budget | None,
) -> LLMResponse:
    from plandag.errors import BudgetRefusedError
    from plandag.models import telemetry
    from plandag.models.base import UnusableResponseError, Usage
    from plandag.models.calls import estimate_cost, rate_slot

    price = models.prices.lookup(
        request.model,
        provider=models.client.provider,
        base_url=getattr(models.client, "base_url", None),
    )
    counted = await _count_tokens(models, request)
    usd, tokens = estimate_cost(request, price, counted)
    own = budget.reserve(usd, tokens) if budget is not None else None
    if budget is not None and own is None:
        refusal = budget.refusal(usd, tokens).removeprefix("not started: its ")
        refused = BudgetRefusedError(
            f"{purpose}: call not sent: its {refusal.replace('the run', 'the step')}",
            estimated_usd=usd,
            estimated_tokens=tokens,
        )
        refused.reason = "agent_budget"
        raise refused
    try:
        hold = await context.acquire(usd, tokens)
    except BaseException:
        if budget is not None and own is not None:
            budget.settle(own, 0.0, 0)
        raise
    try:
        permit = await rate_slot(models.client, tokens)
    except BaseException:
        hold.settle(0.0, 0)
        if budget is not None and own is not None:
            budget.settle(own, 0.0, 0)
        raise
    start = context.clock()
    usage = Usage()
    error_text: str | None = None
    failure: str | None = None
    error_reason: str | None = None
    stop: str | None = None
    span = telemetry.start_model_call(models.client, request, context.attempt)
    try:
        response = await models.client.complete(request)
    except BaseException as error:
        telemetry.end_model_call(span, None, error)
        if isinstance(error, UnusableResponseError):
            usage = error.response.usage
            stop = error.response.stop_reason
        error_text = f"{type(error).__name__}: {error_message(error)}"
        if isinstance(error, Exception):
            failure = model_endpoint_failure(error) or error_text
            error_reason = getattr(error, "reason", None) or type(error).__name__
        else:  # a cancellation: the call was abandoned, not failed
            failure = "cancelled"
            error_reason = "cancelled"
        raise
    else:
        telemetry.end_model_call(span, response, None)
        usage = response.usage
        stop = response.stop_reason
        return response
    finally:
        if permit is not None:
            permit.settle(usage.total_tokens)
        cost = price.cost(usage) if price is not None else 0.0
        hold.settle(cost, usage.total_tokens)
        if budget is not None and own is not None:
            budget.settle(own, cost, usage.total_tokens)
        context.add_child(
            "llm_call",
            f"{models.provider}:{request.model}",
            start,
            context.clock(),
            purpose=purpose,
            attempt=context.attempt,
            input_tokens=usage.total_tokens - usage.output_tokens,
            output_tokens=usage.output_tokens,
            cost_usd=cost,
            priced=price is not None,
            reserved_usd=usd,
            reserved_tokens=tokens,
            stop_reason=stop,
            error=error_text,
            error_reason=error_reason,
            failure=failure,
        )


async def _count_tokens(models: ModelAccess, request: LLMRequest) -> int | None:
    """The provider's count of the prompt's tokens, or None (no endpoint, or it failed)."""
    counter = getattr(models.client, "count_tokens", None)
    if counter is None:
        return None
    try:
        counted = await counter(request)
    except Exception:  # only an optimisation: the estimate is used instead
        return None
    return counted if isinstance(counted, int) and counted >= 0 else None


OFFLINE_PROVIDER = "offline"
"""The offline model's provider (:mod:`plandag.models.offline`): in the process, no key."""
OFFLINE_MODEL = "offline-extractive"
"""The offline model's name (:data:`plandag.models.offline.OFFLINE_MODEL`)."""
KEY_VARIABLES = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
"""The environment variable each provider's API key is read from."""
OPENAI_URL = "https://api.openai.com/v1"
"""The OpenAI API's base URL, used with ``--provider openai`` and no ``--base-url``."""


def executor_model_for(provider: str, model: str | None, executor_model: str | None) -> str:
    """The model a run's model steps use when they name none: ``offline-extractive`` for the
    offline model (``offline``), else ``executor_model`` when given, else
    :data:`DEFAULT_EXECUTOR_MODEL` for ``anthropic``, else ``model`` (an OpenAI-compatible
    server names its own models).

    Raises:
        InputError: ``openai`` with neither name.
    """
    if provider == OFFLINE_PROVIDER:
        return OFFLINE_MODEL
    if executor_model:
        return executor_model
    if provider == "anthropic":
        return DEFAULT_EXECUTOR_MODEL
    if model:
        return model
    raise InputError(
        f"--provider {provider}: give --model NAME (or --executor-model NAME), the model of "
        "the plan's llm and agent steps"
    )


def connect(
    provider: str,
    *,
    model: str | None = None,
    base_url: str | None = None,
    executor_model: str | None = None,
    registry: Registry | None = None,
) -> ModelAccess:
    """Build the :class:`ModelAccess` of a run from the command line's choices: the
    provider's client (``max_retries=0``), the executor model, the default prices.

    The key is read from :data:`KEY_VARIABLES` (``ANTHROPIC_API_KEY``, ``OPENAI_API_KEY``),
    before anything runs: a missing key is an error here. An OpenAI-compatible server at
    ``base_url`` needs none.

    Args:
        provider: ``anthropic``, ``openai`` or ``offline`` (the offline model, in the
            process: :func:`plandag.models.offline.load_offline_client`; no key).
        model: the run's ``--model`` (the executor model's default with ``openai``).
        base_url: the API's base URL, or None for the provider's own.
        executor_model: ``--executor-model`` / setting ``executor_model``, or None.
        registry: the tools ``agent`` steps may list (and the offline model's plans use).

    Returns:
        The :class:`ModelAccess`; close its client (``await access.client.aclose()``).

    Raises:
        InputError: an unknown provider, or no executor model for ``openai``.
        MissingAPIKeyError: the key's variable is not set (and, for ``openai``, no
            ``base_url``).
    """
    name = executor_model_for(provider, model, executor_model)
    if provider == OFFLINE_PROVIDER:
        from plandag.models.offline import load_offline_client

        return ModelAccess(load_offline_client(registry), name, registry=registry)
    client = provider_client(provider, base_url, require_key(provider, base_url))
    return ModelAccess(client, name, registry=registry)


def provider_client(provider: str, base_url: str | None, key: str | None) -> LLMClient:
    """The client of ``provider`` (``anthropic``: the Messages API; ``openai``: chat
    completions at ``base_url``, default :data:`OPENAI_URL`) with ``max_retries=0`` (the
    scheduler's retry policy decides); ``key`` as :func:`require_key` read it."""
    if provider == "anthropic":
        from plandag.models.anthropic import AnthropicClient

        return AnthropicClient(api_key=key, base_url=base_url)
    from plandag.models.openai import OpenAICompatibleClient

    return OpenAICompatibleClient(base_url or OPENAI_URL, api_key=key or None)


def require_key(provider: str, base_url: str | None) -> str | None:
    """The API key of ``provider`` from its environment variable (:data:`KEY_VARIABLES`),
    checked before anything runs.

    Args:
        provider: ``anthropic``, ``openai`` or ``offline``.
        base_url: the API's base URL, or None; an OpenAI-compatible server given here
            needs no key.

    Returns:
        The key, or None (``openai`` with a ``base_url`` and no key; ``offline``).

    Raises:
        InputError: an unknown provider.
        MissingAPIKeyError: the variable is not set (an :class:`InputError`).
    """
    import os

    from plandag.models.base import MissingAPIKeyError

    if provider == OFFLINE_PROVIDER:
        return None  # the offline model runs in the process
    if provider not in KEY_VARIABLES:
        raise InputError(f"--provider {provider!r}: choose anthropic, openai or offline")
    variable = KEY_VARIABLES[provider]
    key = os.environ.get(variable) or None
    if provider == "anthropic" and key is None:
        raise MissingAPIKeyError(
            f"no Anthropic API key: set {variable} (for an offline server from "
            "plandag.testing, any value with --base-url), or choose --provider openai "
            "--base-url URL for a local OpenAI-compatible server",
            variable=variable,
        )
    if provider == "openai" and key is None and base_url is None:
        raise MissingAPIKeyError(
            f"no OpenAI API key: set {variable}, or give --base-url for a local "
            "OpenAI-compatible server (vLLM, Ollama, llama.cpp), which needs none",
            variable=variable,
        )
    return key
