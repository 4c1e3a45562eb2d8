"""One run of the agent, its state and its first plan (ARCHITECTURE.md, "Execution"): the
plan written (or a stored plan taken), its estimate and the brakes armed from it, the plan
versions handed on as they compile, and a person's instructions taken while it runs.

:class:`RunState` is the base of a run; the approval gate
(:class:`~plandag.planner.agent_approval.ApprovingRun`) and the replan-and-join loop
(:class:`~plandag.planner.agent_replan.AgentRun`) build on it, and the
:class:`~plandag.planner.agent.Agent` starts an :class:`~plandag.planner.agent_replan.AgentRun`
for each run.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anyio

from plandag.brakes.budget import Budget
from plandag.compiler import CompiledPlan, Diagnostic, compile_plan
from plandag.dag.plan import ParamSpec, Plan
from plandag.errors import PlanError
from plandag.models import BudgetRefusedError, CallRecord, Usage
from plandag.planner.agent_result import GaveUpReason, PlanAmendment
from plandag.planner.agent_settings import AgentSettings
from plandag.planner.intents import IntentLedger
from plandag.planner.joiner import JoinDecision
from plandag.planner.planner import Planner, PlannerGaveUp, PlanOutcome
from plandag.planner.progress import ProgressLedger
from plandag.planner.replanner import Replanner, ReplanRecord
from plandag.planner.streaming import StreamingPlanner
from plandag.planner.triggers import INSTRUCTION_POLL_S, Instruction
from plandag.scheduler import events
from plandag.scheduler.estimate import ModelCallEstimate, PlanEstimate, estimate_steps
from plandag.scheduler.gate import ApprovalRequest, Decision
from plandag.scheduler.result import RunResult, RunStatus, StepErrorInfo
from plandag.scheduler.session import RunSession, SessionState
from plandag.tools.registry import Registry

__all__ = [
    "STORED_KEPT",
    "FailureWatch",
    "PlanningFailed",
    "RunState",
    "StoredPlans",
    "deadline_reached",
    "next_state",
    "run_header",
]

logger = logging.getLogger("plandag.planner")


_PARAM_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (dict, "object"),
    (list, "array"),
)


def run_header(goal: str, params: Mapping[str, Any]) -> Plan:
    """The header a run of the agent opens its session with: the goal, and each given
    param declared (its type from its value, ``any`` when none fits). Steps join later.

    Args:
        goal: the run's goal.
        params: the run's param values by name.

    Returns:
        A plan with no steps.
    """
    specs = {}
    for name, value in params.items():
        kind = next((label for cls, label in _PARAM_TYPES if isinstance(value, cls)), "any")
        specs[name] = ParamSpec.model_validate({"type": kind})
    return Plan(goal=goal, params=specs, steps=[])


STORED_KEPT = 8
"""Compiled stored plans an agent keeps (the oldest is dropped first)."""


class StoredPlans:
    """The stored plans an agent ran, their steps compiled once per plan (:meth:`header`)."""

    def __init__(self) -> None:
        self.compiled: dict[tuple[Registry, bool, int, str], CompiledPlan] = {}
        """The compiled steps by (registry, read-only, step cap, the plan's JSON); at most
        :data:`STORED_KEPT`, the oldest dropped first."""

    def header(
        self, agent: AgentSettings, goal: str, plan: Plan, given: Mapping[str, Any]
    ) -> CompiledPlan:
        """The session header of a run of the stored ``plan``: its steps already compiled.

        The header (``goal``, the plan's params, no steps) is compiled with ``given`` as
        :func:`~plandag.scheduler.session.open_session` would compile it (so a bad param
        raises the same :class:`~plandag.errors.PlanError`). The plan's steps are compiled
        once per plan (its JSON), against the agent's registry and ``read_only`` flag, and
        reused by every later run of an equal plan with only the params swapped in, as
        ``plandag extract nfe`` does: a step's compilation does not depend on param values
        except for literal write targets, so a plan one of whose tools writes is compiled
        afresh when a write boundary is set (the boundary's answer depends on the file
        system). A plan whose steps do not compile is not kept: the returned header then
        has no steps, and ``session.add`` reports the error as for any stored plan.

        Args:
            agent: the agent that runs it.
            goal: the run's goal.
            plan: the stored plan.
            given: the run's param values by name.

        Returns:
            A compiled header: the session's plan is the header (goal, params, no steps,
            no output) and its steps are the stored plan's, compiled, or none.

        Raises:
            PlanError: the header does not compile (a missing, unknown or invalid param).
        """
        header = compile_plan(
            Plan(goal=goal, params=plan.params, steps=[]),
            agent.registry,
            params=given,
            read_only=agent.read_only,
            write_boundary=agent.write_boundary,
            http_allow=agent.http_allow,
            max_steps=agent.max_steps,
        )
        tools = agent.registry.tools
        if agent.write_boundary is not None and any(
            step.tool not in tools or tools[step.tool].writes is not None for step in plan.steps
        ):
            return header  # write targets are checked against the file system: each run
        key = (agent.registry, agent.read_only, agent.max_steps, plan.model_dump_json())
        steps = self.compiled.get(key)
        if steps is None:
            try:
                steps = compile_plan(
                    plan,
                    agent.registry,
                    params=header.params,
                    read_only=agent.read_only,
                    write_boundary=agent.write_boundary,
                    http_allow=agent.http_allow,
                    max_steps=agent.max_steps,
                )
            except PlanError:
                return header  # session.add reports it, with the same diagnostics
            if len(self.compiled) >= STORED_KEPT:
                self.compiled.pop(next(iter(self.compiled)))
            self.compiled[key] = steps
        return dataclasses.replace(header, steps=steps.steps, order=steps.order)


class PlanningFailed(Exception):
    """Raised inside the session to end it when planning failed (the run is interrupted:
    steps a streamed plan started end cancelled, the others skipped)."""


class FailureWatch:
    """An observer that wakes the agent when a step fails or is cancelled (and
    :meth:`wake`, when a person's instruction arrives)."""

    def __init__(self) -> None:
        self.event = anyio.Event()

    def __call__(self, event: events.Event) -> None:
        if isinstance(event, events.StepFailed | events.StepCancelled):
            self.event.set()

    def arm(self) -> None:
        """Wait for the next failure from now on."""
        if self.event.is_set():
            self.event = anyio.Event()

    def wake(self) -> None:
        """Wake the agent now (from its event loop's thread only)."""
        self.event.set()


async def next_state(
    session: RunSession, watch: FailureWatch, news: Callable[[], bool] = lambda: False
) -> SessionState:
    """Return when something needs the agent: a step failed, ``news()`` (an instruction
    waits), or nothing runs any more."""
    watch.arm()
    state = session.state()
    if state.needs_replan or state.stop_reason is not None or news():
        return state
    if not state.running and not state.pending:
        return state  # settled already: every step ended or waits on held effects
    async with anyio.create_task_group() as group:

        async def settled() -> None:
            await session.settled()
            group.cancel_scope.cancel()

        async def failed() -> None:
            await watch.event.wait()
            group.cancel_scope.cancel()

        group.start_soon(settled)
        group.start_soon(failed)
    return session.state()


async def deadline_reached(session: RunSession, *, wait_for_steps: bool = True) -> None:
    """A model call the run needs cannot finish before its wall-clock cap (the cap passed
    during the call, or :class:`~plandag.models.DeadlineReachedError`: its next
    attempt would start past it): the run ends ``timed_out``, reason ``deadline``, without
    sleeping out the time left. With ``wait_for_steps``, steps still running go on until
    they end (their results are kept) or the deadline stops them; then the run stops."""
    if wait_for_steps:
        await session.settled()
    if session.stop_reason is None:
        session.stop_at_deadline()


class RunState:
    """The state of one run of the agent (:meth:`Agent.run <plandag.planner.agent.Agent.run>`,
    :meth:`~plandag.planner.agent.Agent.resume`), and its first plan."""

    def __init__(
        self, agent: AgentSettings, goal: str, context: str, params: dict[str, Any], budget: Budget
    ) -> None:
        self.agent = agent
        self.goal = goal
        self.context = context
        self.params = params
        self.budget = budget
        self.calls: list[CallRecord] = []
        self.replans: list[ReplanRecord] = []
        self.versions: list[Plan] = []
        self.outcome: PlanOutcome | None = None
        self.join: JoinDecision | None = None
        self.answer: Any = None
        self.error: StepErrorInfo | None = None
        self.status: RunStatus | None = None
        self.gave_up: GaveUpReason | None = None
        self.diagnostics: tuple[Diagnostic, ...] = ()
        self.plan_did_not_compile = False
        self.stored: Plan | None = None
        self.request: ApprovalRequest | None = None
        self.decisions: list[Decision] = []
        self.amendments: list[PlanAmendment] = []
        self.original_goal = goal
        self.ledger = IntentLedger(agent.max_blocked)
        self.progress = ProgressLedger(agent.max_replans_without_progress)
        self.received: list[Instruction] = []
        """Every instruction received, in order."""
        self.inbox: list[Instruction] = []
        """Instructions received and not acted on yet (guarded by ``inbox_lock``)."""
        self.inbox_lock = threading.Lock()
        self.watch: FailureWatch | None = None
        self.loop_thread: int | None = None
        self.down_seen = 0
        """Dependencies down at the previous replan (a new one makes the next total)."""
        self.estimates: list[PlanEstimate | None] = []
        self.session: RunSession | None = None
        self.failed_attempts: tuple[Any, ...] = ()
        """The attempts of a first plan that never compiled (their diagnostics are alerts)."""
        agent_ = agent
        self.planner = Planner(
            agent_.client,
            agent_.model,
            agent_.registry,
            prices=agent_.prices,
            budget=budget,
            retry=agent_.retry,
            clock=agent_.clock,
            max_tokens=agent_.plan_max_tokens,
            max_repairs=agent_.max_repairs,
            read_only=agent_.read_only,
            write_boundary=agent_.write_boundary,
            http_allow=agent_.http_allow,
            max_steps=agent_.max_steps,
        )
        self.replanner = Replanner(
            agent_.client,
            agent_.model,
            agent_.registry,
            prices=agent_.prices,
            budget=budget,
            retry=agent_.retry,
            clock=agent_.clock,
            max_tokens=agent_.replan_max_tokens,
            max_chars=agent_.max_chars,
            read_only=agent_.read_only,
            write_boundary=agent_.write_boundary,
            http_allow=agent_.http_allow,
        )

    # -- 1. plan -------------------------------------------------------------------------------

    async def plan(self, session: RunSession) -> None:
        """Write the plan into ``session``; raise :class:`PlanningFailed` when it fails."""
        if self.stored is not None:  # a stored plan: no planning call
            try:
                if not session.steps:  # not compiled with the header (StoredPlans.header)
                    session.add(self.stored.steps)
                session.set_output(self.stored.output)
            except PlanError as error:
                self.diagnostics = tuple(error.diagnostics)
                self.plan_did_not_compile = True
                self.fail("failed", type(error).__name__, str(error))
                raise PlanningFailed from None
            session.seal()
            session.release_effects()
            self.add_version(self.stored, "library")
            return
        try:
            if self.agent.stream:
                outcome = await StreamingPlanner(self.planner).plan_into(
                    session, self.goal, self.context, self.params, records=self.calls
                )
            else:
                with anyio.fail_after(session.remaining_s):
                    outcome = await self.planner.plan(
                        self.goal,
                        self.context,
                        self.params,
                        records=self.calls,
                        remaining_s=session.remaining_s,
                    )
                session.add(outcome.plan.steps)
                session.set_output(outcome.plan.output)
                session.seal()
                session.release_effects()
        except TimeoutError as error:
            await deadline_reached(session, wait_for_steps=False)
            self.fail(
                "timed_out",
                type(error).__name__,
                str(error) or "the wall-clock cap passed during planning",
            )
            raise PlanningFailed from None
        except PlannerGaveUp as error:
            self.diagnostics = tuple(error.diagnostics)
            self.failed_attempts = tuple(error.attempts)
            self.plan_did_not_compile = True
            self.fail("failed", type(error).__name__, str(error))
            raise PlanningFailed from None
        except PlanError as error:  # the plan compiled alone, not in the run (params)
            self.diagnostics = tuple(error.diagnostics)
            self.plan_did_not_compile = True
            self.fail("failed", type(error).__name__, str(error))
            raise PlanningFailed from None
        except BudgetRefusedError as error:
            self.fail("budget_exceeded", type(error).__name__, str(error))
            raise PlanningFailed from None
        except Exception as error:  # TruncatedResponseError, a call failed past its retries
            self.fail("failed", type(error).__name__, str(error))
            raise PlanningFailed from None
        self.outcome = outcome
        self.add_version(outcome.plan, "planner")

    def tokens_cost(self, tokens: int) -> float | None:
        """US dollars of ``tokens`` output tokens on the agent's model (None: unpriced), for
        model-backed tools that declare ``tokens_estimate``."""
        return self.agent.prices.cost(self.agent.model, Usage(output_tokens=tokens))

    def model_calls(self, session: RunSession) -> list[ModelCallEstimate]:
        """The model calls whose time the plan's estimate counts beside its steps (elapsed
        time counts from the session's opening, before the planning call): the planning
        calls made so far (their real time), and the joiner's call when the plan has no
        output (as long as the accepted planning call). Their cost is not counted: model
        calls of the planner, replanner and joiner are not steps, and the absolute caps
        and the replan caps hold them."""
        calls: list[ModelCallEstimate] = []
        planning = list(self.calls)
        if planning:
            calls.append(
                ModelCallEstimate("planner", sum(record.duration_s for record in planning))
            )
        if session.output is None:
            calls.append(ModelCallEstimate("joiner", planning[-1].duration_s if planning else 0.0))
        return calls

    def estimate_version(self, session: RunSession, *, calls: bool = True) -> PlanEstimate:
        """Estimate the run's plan as it stands (steps not superseded; those that already
        succeeded count nothing) and record it for the latest plan version."""
        steps = {
            key: item
            for key, item in session.steps.items()
            if session.records[key].superseded_by is None
        }
        done = [key for key in steps if session.records[key].status == "succeeded"]
        estimate = estimate_steps(
            steps,
            session.graph,
            measured=self.agent.tool_durations,
            tokens_cost=self.tokens_cost,
            done=done,
            calls=self.model_calls(session) if calls else (),
            executor_model=self.agent.models.model,
        )
        while len(self.estimates) < len(self.versions) - 1:
            self.estimates.append(None)
        if len(self.estimates) < len(self.versions):
            self.estimates.append(estimate)
        else:
            self.estimates[-1] = estimate
        return estimate

    def arm(self, session: RunSession) -> None:
        """Hold the run to the plan-relative limits from now on (time counted from the
        session's opening, the planning calls' time included in the estimate)."""
        estimate = self.estimates[-1] if self.estimates else None
        if estimate is None:
            return
        session.arm_plan_budget(
            estimate, measured=self.agent.tool_durations, tokens_cost=self.tokens_cost
        )

    def plan_so_far(self, session: RunSession) -> Plan:
        """The run's plan as it stands: every step the session holds, its output."""
        return Plan(
            goal=self.goal,
            params=session.plan.params,
            steps=[session.steps[key].step for key in sorted(session.steps)],
            output=session.output,
        )

    def add_version(self, plan: Plan, source: str) -> None:
        """Record a new plan version and hand it to ``Agent.on_plan_version`` at once: each
        caller adds it as soon as it compiled, with no await since its steps joined the
        session, so no step of it has started yet."""
        self.versions.append(plan)
        if self.agent.on_plan_version is not None:
            self.agent.on_plan_version(len(self.versions), plan, source)

    def streamed_steps(self, event: events.Event) -> None:
        """While a streamed first plan arrives, hand it to ``Agent.on_plan_version`` as it
        grows: steps start as they arrive, so each is kept before it starts (the observer
        is called as a step joins, before the step's task runs)."""
        session = self.session
        if (
            not isinstance(event, events.StepsAdded)
            or self.agent.on_plan_version is None
            or session is None
            or self.versions
            or not self.agent.stream
        ):
            return
        self.agent.on_plan_version(1, self.plan_so_far(session), "planner")

    def fail(self, status: RunStatus, error_type: str, message: str) -> None:
        """Record what ended the run outside its steps."""
        self.status = status
        self.error = StepErrorInfo(error_type, message)

    def interrupted(self, run: RunResult) -> RunResult:
        """The result of a run cancelled from outside: ``interrupted`` whatever its steps
        say (a run cancelled while the planner wrote has no steps at all, and one cancelled
        while the joiner thought has no answer), unless a brake had already stopped it
        (``timed_out``, ``budget_exceeded``)."""
        if run.status in ("timed_out", "budget_exceeded"):
            return run
        if self.status is None or self.status in ("succeeded", "failed"):
            phase = (
                "while the planner wrote the plan"
                if self.outcome is None and not self.versions
                else "before the run ended"
            )
            self.fail("interrupted", "Interrupted", f"the run was cancelled {phase}")
        if run.status == "interrupted":
            return run
        return dataclasses.replace(run, status="interrupted", stop_reason="interrupted")

    # -- a person's instructions ----------------------------------------------------------------

    def deliver(self, items: Sequence[Instruction]) -> None:
        """Take instructions into the inbox (any thread); wake the agent when called from
        its own event loop (otherwise :meth:`listen` does within a poll period)."""
        if not items:
            return
        with self.inbox_lock:
            self.inbox.extend(items)
            self.received.extend(items)
        if self.watch is not None and threading.get_ident() == self.loop_thread:
            self.watch.wake()

    def has_news(self) -> bool:
        """An instruction waits in the inbox."""
        with self.inbox_lock:
            return bool(self.inbox)

    def take(self) -> list[Instruction]:
        """Empty the inbox; return what it held, oldest first."""
        with self.inbox_lock:
            items, self.inbox = self.inbox, []
        return items

    async def listen(self) -> None:
        """While the run runs: every :data:`INSTRUCTION_POLL_S` seconds, read the agent's
        instruction source and wake the agent when an instruction waits."""
        source = self.agent.instructions
        while True:
            if source is not None:
                try:
                    items = list(source())
                except Exception:
                    logger.warning("the instruction source failed; tried again", exc_info=True)
                    items = []
                self.deliver(items)
            if self.watch is not None and self.has_news():
                self.watch.wake()
            await anyio.sleep(INSTRUCTION_POLL_S)
