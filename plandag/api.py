"""The Python API's faces: :func:`run_plan` and :func:`run_plan_sync` (``plandag.run_plan``)
and :class:`Agent` (``plandag.Agent``), with the services a caller gives by value wired in.

:func:`plandag.scheduler.run_plan` is handed its services and imports none of them
(ARCHITECTURE.md, "Layout"): its ``on_escalation`` is an
:class:`~plandag.scheduler.services.EscalationHook`. Here ``on_escalation`` may also be a
plain function called with the run's case as a dict
(:class:`plandag.escalation.EscalationHooks` builds the case and calls it). Everything
else is passed through unchanged.

:class:`plandag.planner.agent.Agent` is handed its hooks the same way
(:class:`~plandag.planner.services.AgentEscalationHook`,
:class:`~plandag.planner.alerts.AlertHooks`); :class:`Agent` here takes plain functions too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from plandag.errors import Classifier, classify_error
from plandag.escalation.hooks import EscalationCallback, EscalationHooks, as_hooks
from plandag.planner import agent
from plandag.planner.alerts import AlertHooks
from plandag.planner.services import AgentEscalationHook
from plandag.scheduler import entry
from plandag.scheduler.services import EscalationHook

if TYPE_CHECKING:
    from plandag.access import ModelAccessProtocol
    from plandag.brakes import Unlimited
    from plandag.brakes.budget import Budget
    from plandag.brakes.clock import Clock
    from plandag.brakes.retry import RetryPolicy
    from plandag.compiler.compiled import CompiledPlan
    from plandag.models import LLMClient
    from plandag.scheduler import events
    from plandag.scheduler.estimate import PlanEstimate
    from plandag.scheduler.gate import ApproveArgument
    from plandag.scheduler.limits import RunLimits
    from plandag.scheduler.result import EscalationMode, RunResult
    from plandag.tools.boundary import WriteBoundary
    from plandag.tools.registry import Registry

__all__ = ["Agent", "run_plan", "run_plan_sync"]


async def run_plan(
    compiled: CompiledPlan,
    *,
    approve: ApproveArgument | None = None,
    write_boundary: WriteBoundary | Unlimited | None = None,
    run_id: str | None = None,
    max_concurrency: int | None = None,
    tool_limits: Mapping[str, int] | None = None,
    observers: Sequence[events.Observer] = (),
    limits: RunLimits | None = None,
    retry: RetryPolicy | None = None,
    classify: Classifier = classify_error,
    clock: Clock | None = None,
    budget: Budget | None = None,
    completed: Mapping[int, Any] | None = None,
    escalate: EscalationMode = "person",
    on_escalation: EscalationHook | EscalationHooks | EscalationCallback | None = None,
    plan_estimate: PlanEstimate | None = None,
    tool_durations: Mapping[str, float] | None = None,
    models: ModelAccessProtocol | None = None,
    escape_results: bool = True,
) -> RunResult:
    """Run a compiled plan: :func:`plandag.scheduler.run_plan`, whose arguments, return
    value and errors these are, with ``on_escalation`` also a plain function.

    ``on_escalation`` is called once the run ended ``escalated``, with its case as a dict
    (:func:`plandag.escalation.run_context`): a function or a coroutine function, a
    :class:`plandag.escalation.EscalationHooks` (its command, URL and callback), or any
    :class:`~plandag.scheduler.services.EscalationHook`. Its failure does not change the
    result.
    """
    arguments = dict(locals())  # every parameter above by name, passed on as given
    if on_escalation is not None and not isinstance(on_escalation, EscalationHook):
        arguments["on_escalation"] = as_hooks(on_escalation)  # a plain function
    return await entry.run_plan(**arguments)


def run_plan_sync(
    compiled: CompiledPlan,
    *,
    approve: ApproveArgument | None = None,
    write_boundary: WriteBoundary | Unlimited | None = None,
    run_id: str | None = None,
    max_concurrency: int | None = None,
    tool_limits: Mapping[str, int] | None = None,
    observers: Sequence[events.Observer] = (),
    limits: RunLimits | None = None,
    retry: RetryPolicy | None = None,
    classify: Classifier = classify_error,
    clock: Clock | None = None,
    budget: Budget | None = None,
    models: ModelAccessProtocol | None = None,
) -> RunResult:
    """:func:`run_plan` from synchronous code, on a new event loop (``anyio.run``, asyncio).

    Arguments, return value and errors as :func:`plandag.scheduler.run_plan_sync`. Must not
    be called from a thread that already runs an event loop.
    """
    arguments = dict(locals())  # every parameter above by name, passed on as given

    # A closure, not functools.partial: anyio names the main task after repr(func), and a
    # partial's repr would format the whole compiled plan (O(steps) before anything runs).
    async def main() -> RunResult:
        return await run_plan(**arguments)

    return anyio.run(main)


class Agent(agent.Agent):
    """Plan, run, replan, join: :class:`plandag.planner.agent.Agent`, whose arguments,
    methods, results and errors these are, with ``on_escalation`` and ``on_alert`` also
    plain functions.

    ``on_escalation`` is called once a run ended ``escalated``, with its case as a dict
    (:func:`plandag.escalation.run_context`: goal, plan versions, completed results,
    failures, spend, reason): a function or a coroutine function, a
    :class:`plandag.escalation.EscalationHooks` (its command, URL and callback), or any
    :class:`~plandag.planner.services.AgentEscalationHook`. ``on_alert`` is called with
    each out-of-registry alert as a dict, given the same ways
    (:class:`~plandag.planner.alerts.AlertHooks`); None: ``on_escalation``'s. A hook's
    failure does not change the result.

    Args:
        client: the planner's model client.
        model: the planner's model.
        registry: the tools and checks plans may use.
        on_escalation: as above.
        on_alert: as above.
        **options: every other keyword argument of
            :class:`plandag.planner.agent.Agent`.

    Raises:
        ValueError: as :class:`plandag.planner.agent.Agent`.
    """

    def __init__(
        self,
        client: LLMClient,
        model: str,
        registry: Registry,
        *,
        on_escalation: AgentEscalationHook | EscalationHooks | EscalationCallback | None = None,
        on_alert: AlertHooks | EscalationHooks | EscalationCallback | None = None,
        **options: Any,
    ) -> None:
        super().__init__(
            client,
            model,
            registry,
            on_escalation=(
                on_escalation
                if on_escalation is None or isinstance(on_escalation, AgentEscalationHook)
                else as_hooks(on_escalation)  # a plain function
            ),
            on_alert=(
                on_alert
                if on_alert is None or isinstance(on_alert, AlertHooks)
                else as_hooks(on_alert)  # a plain function
            ),
            **options,
        )
