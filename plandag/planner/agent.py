"""The agent: plan, run, replan the failed part, join (ARCHITECTURE.md, "Execution",
"Retry vs replan", "Replanning", "Streaming", "Brakes").

:meth:`Agent.run` does, in one run session (:func:`~plandag.scheduler.session.open_session`,
opened before the first model request, so the wall-clock cap, the cost caps and the time to
first tool all count from the request):

1. **plan**: the :class:`~plandag.planner.planner.Planner` writes the whole plan (repaired
   from diagnostics at most twice) and its steps join the run; with ``stream=True`` the
   :class:`~plandag.planner.streaming.StreamingPlanner` adds each step as it arrives, and
   steps without effects start before the plan ends. Steps with effects start once the
   whole plan compiled (``release_effects``; approval is a later issue);
2. **run and replan**: the steps run; when a step fails (after its retries) the
   :class:`~plandag.planner.replanner.Replanner` gets the failed part at once, while
   independent branches keep running, and its patch joins the run. Caps: at most
   ``max_replans`` replans (3), at most ``max_replans_without_progress`` (2) in a row with
   no step newly completed, counted per failed subgraph
   (:class:`~plandag.planner.progress.ProgressLedger`: the failed step and its
   descendants, then the steps that replaced them), the cost caps (every model call is
   reserved on the session's budget) and the wall-clock cap (every model call is bounded by
   ``anyio.fail_after(session.remaining_s)``). A patch that does not compile is a replan
   too: its repair counts against the same caps. When a replan cap is hit the run ends
   ``escalated`` (:meth:`~plandag.scheduler.session.RunSession.escalate`, reason
   ``replan_caps``, or ``no_valid_replan`` when the last patches never compiled): handed to
   a person with its full state (what ran, what failed and why, what never ran, the last
   diagnostics); ``gave_up`` instead with ``escalate="never"``, or when a replanner call
   was refused by the budget or failed past its retries; never an invented result
   (``answer`` is None);
   Once the plan is accepted (and approved), the run is held to its limits relative to the
   plan's estimate (2x its steps' cost, 3x its time, the planning calls' time included;
   :meth:`~plandag.scheduler.session.RunSession.arm_plan_budget`): a run past them, or a
   replan patch projected past them, ends ``escalated`` (reason ``plan_budget``);
3. **join**: when nothing is left to run or replan: the plan has an ``output`` and every
   step succeeded (so every check passed): the output is assembled by code, no model call;
   the plan has no output: one joiner call decides ``finish(answer)`` or
   ``replan(reason)``, and a replan there counts against the same caps.

Planning failures end the run before or while its steps run (steps already started by a
streamed plan end cancelled, the others skipped): a plan cut at ``max_tokens`` (never a
shorter plan), a plan that still did not compile after its repairs, a model call that failed
past its retries. :class:`AgentResult` carries the error and a status (``failed``,
``budget_exceeded`` for a call the budget refused, ``timed_out`` for the wall clock).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio

from plandag.brakes import Unlimited
from plandag.brakes.budget import Budget
from plandag.brakes.clock import Clock, SystemClock
from plandag.brakes.retry import RetryPolicy
from plandag.compiler import DEFAULT_MAX_STEPS, CompiledPlan, Diagnostic, compile_plan
from plandag.compiler.compiled import allowed_hosts
from plandag.dag.diagnostics import OUT_OF_REGISTRY_CODES
from plandag.dag.plan import ParamSpec, Plan
from plandag.dag.references import find_references
from plandag.errors import PlanBudgetError, PlanError
from plandag.executors.access import DEFAULT_EXECUTOR_MODEL, ModelAccess
from plandag.models import (
    DEFAULT_PRICES,
    BudgetRefusedError,
    CallRecord,
    LLMClient,
    LLMRequest,
    PriceTable,
    Usage,
    call_with_retries,
)
from plandag.models.calls import deadline_from
from plandag.planner.intents import IntentLedger
from plandag.planner.joiner import (
    DEFAULT_JOIN_MAX_TOKENS,
    JOIN_SCHEMA,
    JOIN_SYSTEM_PROMPT,
    JoinDecision,
    join_prompt,
    parse_decision,
)
from plandag.planner.planner import (
    DEFAULT_PLAN_MAX_TOKENS,
    Planner,
    PlannerGaveUp,
    PlanOutcome,
)
from plandag.planner.progress import ProgressLedger
from plandag.planner.replanner import (
    DEFAULT_REPLAN_MAX_CHARS,
    DEFAULT_REPLAN_MAX_TOKENS,
    Replanner,
    ReplanRecord,
    ReplanTrigger,
    failure_summary,
)
from plandag.planner.spans import start_agent
from plandag.planner.streaming import StreamingPlanner
from plandag.planner.triggers import (
    INSTRUCTION_POLL_S,
    Instruction,
    InstructionSource,
    StrategyChoice,
    choose_strategy,
)
from plandag.scheduler import events, spans
from plandag.scheduler.decisions import StepDecision, step_decisions
from plandag.scheduler.estimate import ModelCallEstimate, PlanEstimate, estimate_steps
from plandag.scheduler.gate import (
    DEFAULT_EXPIRY_S,
    ApprovalMode,
    ApprovalRequest,
    ApprovalRequiredError,
    ApproveArgument,
    Approver,
    Decision,
    InvalidDecisionError,
    StaleDecisionError,
    approval_needed,
    approval_reason,
    downstream,
    resolve_approve,
    tainted_egress_steps,
)
from plandag.scheduler.result import (
    EscalationMode,
    RunResult,
    RunStatus,
    StepErrorInfo,
    to_jsonable,
)
from plandag.scheduler.runner import RunLimits
from plandag.scheduler.session import RunSession, SessionState, open_session
from plandag.tools.boundary import WriteBoundary
from plandag.tools.registry import Registry

if TYPE_CHECKING:
    from plandag.planner.alerts import AlertHooks
    from plandag.planner.services import AgentEscalationHook

__all__ = [
    "Agent",
    "AgentResult",
    "GaveUpReason",
    "LibraryReport",
    "PlanAmendment",
    "TaskLibrary",
    "deadline_reached",
    "revision_context",
]

logger = logging.getLogger("plandag.planner")

_STORED_KEPT = 8
"""Compiled stored plans an :class:`Agent` keeps (the oldest is dropped first)."""

GaveUpReason = Literal["max_replans", "no_progress", "blocked_intent", "budget", "replanner_error"]
"""Why the agent gave up: the replan cap, the no-progress cap, an intent failed
``max_blocked`` times, the cost cap refused a model call, or a model call of the replanner or
joiner failed past its retries."""

_PARAM_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (dict, "object"),
    (list, "array"),
)


def _header(goal: str, params: Mapping[str, Any]) -> Plan:
    """The run's header: the goal, and each given param declared (its type from its value,
    ``any`` when none fits). Steps join later."""
    specs = {}
    for name, value in params.items():
        kind = next((label for cls, label in _PARAM_TYPES if isinstance(value, cls)), "any")
        specs[name] = ParamSpec.model_validate({"type": kind})
    return Plan(goal=goal, params=specs, steps=[])


@dataclasses.dataclass(frozen=True)
class PlanAmendment:
    """A step-by-step approval in a run: the plan version decided on (``version``,
    ``plan_hash``; recorded ``amended``), the version it made (``new_version``,
    ``new_plan_hash``; approved by the same person, ``who``), the person's ``feedback``
    and the decision on each step of the version decided on (``steps``)."""

    version: int
    plan_hash: str
    new_version: int
    new_plan_hash: str
    who: str
    feedback: str
    steps: tuple[StepDecision, ...]


class LibraryReport(Protocol):
    """What a plan library did in a run, as :attr:`AgentResult.library` carries it
    (:class:`plandag.library.LibraryOutcome` is one, with the routing answer and the version
    saved besides)."""

    @property
    def task_type(self) -> str | None:
        """The run's task type, or None."""
        ...

    @property
    def how(self) -> str:
        """How the plan was found: ``library``, ``routed`` or ``planned``."""
        ...

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready data (``plandag run --json``, ``"library"``)."""
        ...


class TaskLibrary(Protocol):
    """The plan library an :class:`Agent` is handed (``library=``;
    :class:`plandag.library.PlanLibrary` is one): the library wraps the planner, so that
    :meth:`Agent.run` hands it a run without a plan and the planner imports no library."""

    async def run_task(
        self,
        agent: Agent,
        goal: str,
        context: str = "",
        params: Mapping[str, Any] | None = None,
        *,
        task_type: str | None = None,
        run_id: str | None = None,
    ) -> AgentResult:
        """Run ``goal`` through ``agent`` and this library: the plan found by task type or
        by a routing call, else planned; the result's ``library`` says what happened.

        Raises:
            InputError: ``task_type`` is not a valid name, or its plan uses tools that
                ``agent``'s registry does not have (nothing ran).
            PlanError: ``params`` do not fit the task type's plan (nothing ran).
        """
        ...


@dataclasses.dataclass(frozen=True)
class AgentResult:
    """What :meth:`Agent.run` produced.

    Attributes:
        status: the run's status (:attr:`RunResult.status`); ``escalated`` when a replan
            cap stopped the replans (even if every step that ran succeeded, as when the
            joiner asked for a replan past the caps; ``gave_up`` with
            ``escalate="never"``), ``gave_up`` when a replanner or joiner call was refused
            or failed; and when planning failed:
            ``failed`` (a plan cut at ``max_tokens``, a plan that never compiled, a failed
            call), ``budget_exceeded`` (the budget refused a planning call) or
            ``timed_out`` (the wall-clock cap passed while the model wrote).
        run: the run's :class:`RunResult` (every step's record, superseded ones with
            ``superseded_by``).
        answer: the task's result: the plan's output assembled by code, or the joiner's
            written answer; None unless the run succeeded (never invented).
        plan_versions: the plan as first accepted, then the run's plan after each applied
            patch (every step so far, superseded ones included, and the output).
        replans: every replan, applied or not, in order.
        llm_calls: every model call attempt (planner, replanner, joiner), in order.
        join: the joiner's decision (``by_model`` False when code assembled the output),
            or None when the run never got there.
        plan: the planner's outcome (attempts, output tokens), None when planning failed.
        error: what ended the run outside its steps (a planning or replanner failure),
            else None.
        gave_up: why the agent gave up (:data:`GaveUpReason`), else None.
        diagnostics: the last diagnostics a plan or a patch got (the errors of one that
            did not compile), else ().
        plan_did_not_compile: planning ended because the plan still did not compile after
            its repairs (``plandag run`` exits 2 then).
        approval: the last approval request (the one awaiting a decision when ``status`` is
            ``awaiting_approval``), or None when no decision was needed.
        decisions: every decision taken during the run (approvals of the plan and of
            replans with effects, rejections), in order.
        revisions: the feedback of every rejection that sent the plan back to the planner,
            in order (each reached the planner verbatim).
        amendments: every step-by-step approval (steps edited or rejected), in order: the
            version decided on, the new version it made, and the decision on each step.
        instructions: every instruction a person gave the run while it ran
            (:meth:`Agent.tell`, ``plandag tell``), in the order received.
        plan_estimates: the estimate of each plan version, in the order of
            ``plan_versions`` (None for a version that was not estimated).
        tainted_steps: ids of the run's steps whose literal args a model wrote after
            reading outside content (a replan shown tainted results or failures;
            ARCHITECTURE.md, "Untrusted content"), sorted.
        alerts: the out-of-registry diagnostics of every plan, repair and replan the model
            wrote in the run (``unknown_tool``, ``unknown_check``: the model named a tool or
            a check that is not registered), those a repair fixed included, in order.
        routing_calls: every attempt of the routing call (the executor model picking a
            plan library entry; not in ``llm_calls``), in order.
        library: what the plan library did in the run (the task type, how the plan was
            found, the version saved), or None when the agent has no library.
    """

    status: RunStatus
    run: RunResult
    answer: Any = None
    plan_versions: tuple[Plan, ...] = ()
    replans: tuple[ReplanRecord, ...] = ()
    llm_calls: tuple[CallRecord, ...] = ()
    join: JoinDecision | None = None
    plan: PlanOutcome | None = None
    error: StepErrorInfo | None = None
    gave_up: GaveUpReason | None = None
    diagnostics: tuple[Diagnostic, ...] = ()
    plan_did_not_compile: bool = False
    approval: ApprovalRequest | None = None
    decisions: tuple[Decision, ...] = ()
    revisions: tuple[str, ...] = ()
    amendments: tuple[PlanAmendment, ...] = ()
    instructions: tuple[Instruction, ...] = ()
    plan_estimates: tuple[PlanEstimate | None, ...] = ()
    tainted_steps: tuple[int, ...] = ()
    alerts: tuple[Diagnostic, ...] = ()
    routing_calls: tuple[CallRecord, ...] = ()
    library: LibraryReport | None = None

    @property
    def first_tool_start_s(self) -> float | None:
        """Seconds from the first model request to the first tool start (the run session
        opens just before the request), or None when no tool started."""
        return self.run.first_tool_start_s

    @property
    def output_tokens_per_step(self) -> float | None:
        """Output tokens of the accepted plan's answer per step (PlanOutcome), or None."""
        return self.plan.output_tokens_per_step if self.plan is not None else None

    def to_json_dict(self) -> dict[str, Any]:
        """The RunResult's JSON (:meth:`RunResult.to_json_dict`, ``status`` replaced by
        :attr:`status`) plus ``answer``, ``replans``, ``plan_versions`` (verbose Plan
        JSON), ``llm_calls``, ``join``, ``error``, ``gave_up``, ``diagnostics``,
        ``output_tokens_per_step``, ``alerts``, ``routing_calls`` (apart from
        ``llm_calls``), ``routing_cost_usd``, ``planner_cost_usd`` and ``library``."""
        document = self.run.to_json_dict()
        document["status"] = self.status
        document["answer"] = to_jsonable(self.answer)
        document["replans"] = [record.to_json_dict() for record in self.replans]
        document["plan_versions"] = [
            {"version": plan.version, **plan.model_dump(mode="json", exclude_defaults=True)}
            for plan in self.plan_versions
        ]
        document["llm_calls"] = [_call_json(record) for record in self.llm_calls]
        document["join"] = (
            {
                "action": self.join.action,
                "by_model": self.join.by_model,
                "reason": self.join.reason,
            }
            if self.join is not None
            else None
        )
        document["error"] = self.error.as_dict() if self.error is not None else None
        document["gave_up"] = self.gave_up
        document["diagnostics"] = [diagnostic.as_dict() for diagnostic in self.diagnostics]
        document["output_tokens_per_step"] = self.output_tokens_per_step
        document["approval"] = (
            {
                "version": self.approval.version,
                "plan_hash": self.approval.plan_hash,
                "reason": self.approval.reason,
                "expires_at": self.approval.expires_at,
                "estimate": (
                    self.approval.estimate.as_json() if self.approval.estimate is not None else None
                ),
                "estimate_text": (
                    self.approval.estimate.describe()
                    if self.approval.estimate is not None
                    else None
                ),
            }
            if self.approval is not None
            else None
        )
        document["decisions"] = [
            {"approved": d.approved, "plan_hash": d.plan_hash, "who": d.who, "feedback": d.feedback}
            for d in self.decisions
        ]
        document["revisions"] = list(self.revisions)
        document["instructions"] = [item.as_dict() for item in self.instructions]
        document["alerts"] = [diagnostic.as_dict() for diagnostic in self.alerts]
        document["planner_cost_usd"] = sum(record.cost_usd for record in self.llm_calls)
        document["routing_calls"] = [_call_json(record) for record in self.routing_calls]
        document["routing_cost_usd"] = sum(record.cost_usd for record in self.routing_calls)
        document["library"] = self.library.as_dict() if self.library is not None else None
        return document


def _call_json(record: CallRecord) -> dict[str, Any]:
    return {
        "provider": record.provider,
        "model": record.model,
        "attempt": record.attempt,
        "streamed": record.streamed,
        "input_tokens": record.usage.input_tokens,
        "output_tokens": record.usage.output_tokens,
        "cost_usd": record.cost_usd,
        "duration_s": record.duration_s,
        "ttft_s": record.ttft_s,
        "stop_reason": record.stop_reason,
        "error": record.error,
        "error_reason": record.error_reason,
    }


class _FailureWatch:
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


async def _next_state(
    session: RunSession, watch: _FailureWatch, news: Callable[[], bool] = lambda: False
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


def _close_sync_loop(runner: asyncio.Runner, clients: Sequence[LLMClient]) -> None:
    """Close :meth:`Agent.run_sync`'s model clients on its event loop, then the loop (at
    :meth:`Agent.close`, or when the agent is garbage-collected). While another loop runs
    in the thread, nothing can run on this one: it is left to the garbage collector."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        return

    async def close_clients() -> None:
        for client in clients:
            with contextlib.suppress(Exception):  # one that fails does not keep the others open
                await client.aclose()

    try:
        runner.run(close_clients())
    finally:
        runner.close()


class Agent:
    """Plans a task with a model, runs the plan, replans what fails, joins the result.

    Args:
        client: the model provider (:class:`~plandag.models.AnthropicClient`...).
        model: the model name (``claude-sonnet-4-6``...).
        registry: the tools and check kinds plans may use.
        stream: streaming dispatch (steps start while the plan arrives).
        limits: the run's brakes (wall-clock cap from the first request, cost and token
            caps over tool steps and model calls alike, heartbeat, stall).
        retry: retries of failed steps and of transient model call failures.
        budget: the run's budget; default one from ``limits``' cost and token caps.
        prices: the price table for model calls.
        observers: run event observers (progress display, heartbeat writer...).
        clock: where model call retry delays are slept (a ``VirtualClock`` in tests);
            steps run on the system clock. Default the system clock.
        max_concurrency: steps at once across the run, or None.
        tool_limits: steps at once per tool name.
        read_only: allow only tools without effects.
        write_boundary: where the run may write; default the working directory (as
            ``plandag run``); :data:`~plandag.brakes.UNLIMITED`: no write checks.
        http_allow: the configured HTTP allow-list (host globs, ``--http-allow``), or
            None; hosts of the plan's literal URLs join it once their steps may run
            (ARCHITECTURE.md, "Untrusted content"). A step that sends tainted data out
            (a replan's egress step written after the model read a fetched page, a step
            passing a page's text to an HTTP request) waits for a person under every
            ``approve`` mode; with ``approve=None`` or no approver the run ends
            ``awaiting_approval`` instead of sending it.
        max_steps: the most steps the run may have, its replans' steps included (>= 1;
            default 500, the CLI's ``--max-steps``): a plan or replan past it does not
            compile (``too_many_steps``).
        max_replans: the most replans in a run (>= 0; ARCHITECTURE.md, "Replanning": 3).
        max_replans_without_progress: the most replans in a row of one failed subgraph
            with no step of it newly completed since its previous replan (>= 1;
            ARCHITECTURE.md, "Replanning": 2; :mod:`plandag.planner.progress`).
        max_repairs: repairs of a first plan that does not compile (default 2).
        plan_max_tokens: output tokens of a planning call.
        replan_max_tokens: output tokens of a replanning call.
        join_max_tokens: output tokens of the joiner's call.
        max_chars: characters of each step result shown to the replanner and the joiner.
        approve: who approves plans with effects (ARCHITECTURE.md, "People in the loop"):
            an approver (a callable taking an :class:`~plandag.approval.ApprovalRequest`
            and returning a :class:`~plandag.approval.Decision`, sync or async: it is
            asked for every plan with effects), ``"auto"`` (``write`` effects approved,
            ``irreversible`` ones ask ``approver``), ``"never"`` (a plan that needs
            approval ends the run ``awaiting_approval``), or ``"ask"`` with ``approver``.
            Required when plans can have effects: without it, :meth:`run` raises
            :class:`~plandag.approval.ApprovalRequiredError` before anything runs when
            the registry has a tool with effects (or a stored plan uses one) and the
            agent is not ``read_only``. Read-only plans never ask; a replan that adds
            steps with effects asks again. Time waiting for the approver counts against
            neither the wall-clock cap nor the stall detector.
        approver: who decides with ``approve="ask"`` or ``"auto"``
            (:class:`~plandag.approval.CallbackApprover`,
            :class:`~plandag.approval.TerminalApprover`); None: nobody here (as ``never``).
        approval_expiry_s: seconds a request stays valid (``ApprovalRequest.expires_at``).
        max_revisions: rejections whose feedback sends the plan back to the planner for a
            revision; past them the run ends ``rejected``.
        on_session: called with the run's session as soon as it opens (a run store binds
            its recorder to the session's steps).
        on_plan_version: called with each plan version as soon as it compiles, before any
            of its steps starts: ``(number, plan, source)``, numbered from 1 in the run,
            ``source`` ``planner``, ``library``, ``replan`` or ``amended`` (a run store
            keeps it there, so that a run whose process dies can be resumed). A streamed
            plan is given as it grows (the same number, its steps so far, then the whole
            plan). Called on the event loop; it must not block for long.
        escalate: when the run cannot go on by itself (its replan caps hit, no replan
            that compiles): ``person`` (the default) ends it ``escalated`` (reason
            ``replan_caps`` or ``no_valid_replan`` on ``RunResult.escalation``), handed to
            a person; ``never`` ends it ``gave_up``
            (:data:`~plandag.scheduler.result.EscalationMode`).
        max_blocked: failures of one intent (a step's description, else its tool and
            arguments as written; :mod:`plandag.planner.intents`) across replans after
            which the run stops replanning and escalates (reason ``blocked_intent``);
            default 3, None: never.
        total_replan_below: a completion fraction (0 to 1): a replan asked for while fewer
            of the run's steps than that have completed is ``total`` (planned again from
            the goal) instead of ``partial``; None (the default): off
            (:mod:`plandag.planner.triggers`).
        instructions: a source of a person's instructions polled every 0.5 s while the run
            runs (``plandag run`` reads the run store's ``instruction`` table); each one
            replans the steps not started (:mod:`plandag.planner.triggers`). None: only
            :meth:`tell`.
        on_escalation: the hook called once a run ended ``escalated``
            (:class:`~plandag.planner.services.AgentEscalationHook`, such as
            :class:`plandag.escalation.EscalationHooks`: its command, URL and callback get
            the case, :func:`plandag.escalation.run_context`: goal, plan versions, completed
            results, failures, spend, reason). A plain function is taken by
            :class:`plandag.Agent` (the Python API's face), which wraps it. Its failure does
            not change the result.
        tool_durations: seconds per tool name measured in a run store
            (:meth:`plandag.store.Store.tool_durations`), replacing the tools' declared
            ``typical_seconds`` in the plan's estimate; None: declared figures only.
        models: the model client the plan's ``llm`` and ``agent`` steps call
            (:class:`~plandag.executors.ModelAccess`); default: this agent's client, with
            the executor model (``executor_model``, else
            :data:`plandag.executors.DEFAULT_EXECUTOR_MODEL` for the ``anthropic``
            provider, else ``model``), ``prices`` and ``registry``.
        library: the plan library (a :class:`TaskLibrary`: :class:`plandag.library.PlanLibrary`
            is one, and a run without a plan is handed to it): a run reuses
            the latest plan of its task type with no model call (``run(task_type=...)``),
            or, without a task type, one routing call to ``executor_model`` picks a
            library entry and fills its params; the planner is called only for a new task
            type or when a reused plan fails, and a plan that succeeded is saved there
            under its task type (README, "The plan library"). None (the default): every
            run is planned, nothing is saved.
        executor_model: the small model of the routing call; None: the model of
            ``models`` when given, else ``claude-haiku-4-5`` with the Anthropic provider,
            else ``model`` (setting ``executor_model``).
        on_alert: the hooks called with each out-of-registry alert as a dict (the planner
            named a tool or check that is not registered; :mod:`plandag.planner.alerts`):
            an :class:`~plandag.planner.alerts.AlertHooks` such as
            :class:`plandag.escalation.EscalationHooks` (a plain function: through
            :class:`plandag.Agent`); None: ``on_escalation``'s hooks, when they are alert
            hooks too. Every alert
            is also a warning in the ``plandag.planner`` log, an OpenTelemetry metric
            (with the ``otel`` extra), and with a library an ``out_of_registry`` event in
            its store.

    Raises:
        ValueError: a cap out of range, or an ``approve`` that is neither an approver nor
            a mode.
        TypeError: ``on_escalation`` is not an
            :class:`~plandag.planner.services.AgentEscalationHook`, or ``on_alert`` not an
            :class:`~plandag.planner.alerts.AlertHooks` (a plain function: give it to
            :class:`plandag.Agent`, or wrap it:
            ``plandag.escalation.EscalationHooks(callback=fn)``).
    """

    def __init__(
        self,
        client: LLMClient,
        model: str,
        registry: Registry,
        *,
        stream: bool = False,
        limits: RunLimits | None = None,
        retry: RetryPolicy | None = None,
        budget: Budget | None = None,
        prices: PriceTable = DEFAULT_PRICES,
        observers: Sequence[events.Observer] = (),
        clock: Clock | None = None,
        max_concurrency: int | None = None,
        tool_limits: Mapping[str, int] | None = None,
        read_only: bool = False,
        write_boundary: WriteBoundary | Unlimited | None = None,
        http_allow: Sequence[str] | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        max_replans: int = 3,
        max_replans_without_progress: int = 2,
        max_repairs: int = 2,
        plan_max_tokens: int = DEFAULT_PLAN_MAX_TOKENS,
        replan_max_tokens: int = DEFAULT_REPLAN_MAX_TOKENS,
        join_max_tokens: int = DEFAULT_JOIN_MAX_TOKENS,
        max_chars: int = DEFAULT_REPLAN_MAX_CHARS,
        approve: ApproveArgument | None = None,
        approver: Approver | None = None,
        approval_expiry_s: float = DEFAULT_EXPIRY_S,
        max_revisions: int = 3,
        on_session: Callable[[RunSession], None] | None = None,
        on_plan_version: Callable[[int, Plan, str], None] | None = None,
        escalate: EscalationMode = "person",
        max_blocked: int | None = 3,
        total_replan_below: float | None = None,
        instructions: InstructionSource | None = None,
        on_escalation: AgentEscalationHook | None = None,
        tool_durations: Mapping[str, float] | None = None,
        models: ModelAccess | None = None,
        library: TaskLibrary | None = None,
        executor_model: str | None = None,
        on_alert: AlertHooks | None = None,
    ) -> None:
        _check_hooks(on_escalation, on_alert)
        if max_blocked is not None and max_blocked < 1:
            raise ValueError(f"max_blocked must be >= 1 or None, not {max_blocked}")
        if total_replan_below is not None and not 0 <= total_replan_below <= 1:
            raise ValueError(
                f"total_replan_below must be a fraction from 0 to 1 or None, not "
                f"{total_replan_below}"
            )
        if max_revisions < 0:
            raise ValueError(f"max_revisions must be >= 0, not {max_revisions}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, not {max_steps}")
        if max_replans < 0:
            raise ValueError(f"max_replans must be >= 0, not {max_replans}")
        if max_replans_without_progress < 1:
            raise ValueError(
                f"max_replans_without_progress must be >= 1, not {max_replans_without_progress}"
            )
        if join_max_tokens < 1:
            raise ValueError(f"join_max_tokens must be >= 1, not {join_max_tokens}")
        self.client = client
        self.model = model
        self.registry = registry
        self._runner: asyncio.Runner | None = None  # run_sync's event loop
        self._closer: weakref.finalize[Any, Any] | None = None  # closes it (close, GC)
        if models is None:
            anthropic = getattr(client, "provider", "anthropic") == "anthropic"
            executor = executor_model or (DEFAULT_EXECUTOR_MODEL if anthropic else model)
            models = ModelAccess(client, executor, prices, registry=registry)
        self.models = models
        self.stream = stream
        self.limits = limits if limits is not None else RunLimits()
        self.retry = retry if retry is not None else RetryPolicy()
        self.budget = budget
        self.prices = prices
        self.observers = tuple(observers)
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.max_concurrency = max_concurrency
        self.tool_limits = tool_limits
        self.read_only = read_only
        self.write_boundary: WriteBoundary | None = (
            WriteBoundary.from_specs([Path.cwd()])
            if write_boundary is None
            else None
            if isinstance(write_boundary, Unlimited)
            else write_boundary
        )
        self.http_allow = tuple(http_allow) if http_allow is not None else None
        self.max_steps = max_steps
        self.max_replans = max_replans
        self.max_replans_without_progress = max_replans_without_progress
        self.max_repairs = max_repairs
        self.plan_max_tokens = plan_max_tokens
        self.replan_max_tokens = replan_max_tokens
        self.join_max_tokens = join_max_tokens
        self.max_chars = max_chars
        self.approve: ApprovalMode | None = None
        self.approver: Approver | None = approver
        if approve is not None:
            self.approve, self.approver = resolve_approve(approve, approver)
        self.approval_expiry_s = approval_expiry_s
        self.max_revisions = max_revisions
        self.on_session = on_session
        self.on_plan_version = on_plan_version
        if escalate not in ("person", "never"):
            raise ValueError(f"escalate must be 'person' or 'never', not {escalate!r}")
        self.escalate: EscalationMode = escalate
        self.max_blocked = max_blocked
        self.total_replan_below = total_replan_below
        self.instructions = instructions
        self.on_escalation = on_escalation
        self.tool_durations: Mapping[str, float] = dict(tool_durations or {})
        self.library = library
        self.executor_model = executor_model
        self.on_alert = on_alert
        self._stored: dict[tuple[Registry, bool, int, str], CompiledPlan] = {}
        self._running: dict[str, _AgentRun] = {}
        self._running_lock = threading.Lock()

    def tell(
        self,
        text: str,
        *,
        goal_changed: bool = False,
        who: str | None = None,
        run_id: str | None = None,
    ) -> None:
        """Give a running run new input from a person (:mod:`plandag.planner.triggers`).

        The steps not started yet are dropped (``skipped``, reason ``replanned``) and
        replanned with ``text`` (verbatim, in this and every later replan request);
        completed steps keep their results; running steps finish. With ``goal_changed``,
        ``text`` becomes the run's goal and the replan is ``total``. Safe to call from any
        thread: from the run's own event loop it is seen at once, from another thread within
        0.5 s. Replans a person asked for do not count against the replan caps.

        Args:
            text: the instruction (or the new goal), not empty.
            goal_changed: ``text`` replaces the goal.
            who: who gives it (recorded), or None.
            run_id: which run, when several runs of this agent are running at once.

        Raises:
            ValueError: ``text`` is empty.
            RuntimeError: no run of this agent is running (or several are and ``run_id``
                does not say which).
        """
        if not text.strip():
            raise ValueError("Agent.tell: the text is empty; say what the run should do")
        with self._running_lock:
            running = dict(self._running)
        if run_id is not None:
            target = running.get(run_id)
            if target is None:
                raise RuntimeError(
                    f"Agent.tell: run {run_id} is not running in this agent (running: "
                    f"{', '.join(sorted(running)) or 'none'})"
                )
        elif len(running) == 1:
            target = next(iter(running.values()))
        elif not running:
            raise RuntimeError(
                "Agent.tell: no run of this agent is running; an instruction reaches a run "
                "only while Agent.run is running it"
            )
        else:
            raise RuntimeError(
                f"Agent.tell: {len(running)} runs of this agent are running; pass run_id= "
                f"(one of {', '.join(sorted(running))})"
            )
        target.deliver([Instruction(text, goal_changed, who, time.time())])

    async def _notify(
        self, result: AgentResult, goal: str, params: Mapping[str, Any] | None
    ) -> None:
        """Call ``on_escalation`` with an escalated run; a hook's failure is logged and
        changes nothing."""
        assert self.on_escalation is not None
        try:
            await self.on_escalation.agent_escalated(
                result.run, goal=goal, plans=result.plan_versions, params=params
            )
        except Exception:  # a hook's failure does not change the result
            logger.exception("run %s: the escalation hook failed", result.run.run_id)

    def _check_approver(self, plan: Plan | None) -> None:
        """Refuse to start without an approver when a plan could have effects.

        Raises:
            ApprovalRequiredError: no ``approve`` and, unless ``read_only``, a stored plan
                with a step whose tool has effects, or (a model plans) a registry with such
                a tool.
        """
        if self.approve is not None or self.read_only:
            return
        tools = self.registry.tools
        if plan is not None:
            names = [step.tool for step in plan.steps]
            where = "the plan has steps with effects"
        else:
            names = list(tools)
            where = "the model may plan steps with effects (the registry has tools with effects"
        effects = sorted(
            {
                f"{name} [{tools[name].effects}]"
                for name in names
                if name in tools and tools[name].effects != "none"
            }
        )
        if not effects:
            return
        shown = ", ".join(effects[:5]) + (
            f" and {len(effects) - 5} more" if len(effects) > 5 else ""
        )
        closing = ")" if plan is None else ""
        raise ApprovalRequiredError(
            f"Agent: {where}: {shown}{closing} and no approver; pass approve= an approver (a "
            'callable taking an ApprovalRequest and returning a Decision), "auto" (write '
            'effects approved, irreversible ones need an approver) or "never" (a plan with '
            "effects ends awaiting_approval), or read_only=True. Nothing ran."
        )

    def _stored_header(self, goal: str, plan: Plan, given: Mapping[str, Any]) -> CompiledPlan:
        """The session header of a run of the stored ``plan``: its steps already compiled.

        The header (``goal``, the plan's params, no steps) is compiled with ``given`` as
        :func:`~plandag.scheduler.session.open_session` would compile it (so a bad param
        raises the same :class:`~plandag.errors.PlanError`). The plan's steps are compiled
        once per plan (its JSON), against this agent's registry and ``read_only`` flag, and
        reused by every later run of an equal plan with only the params swapped in, as
        ``plandag extract nfe`` does: a step's compilation does not depend on param values
        except for literal write targets, so a plan one of whose tools writes is compiled
        afresh when a write boundary is set (the boundary's answer depends on the file
        system). A plan whose steps do not compile is not kept: the returned header then
        has no steps, and ``session.add`` reports the error as for any stored plan.

        Args:
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
            self.registry,
            params=given,
            read_only=self.read_only,
            write_boundary=self.write_boundary,
            http_allow=self.http_allow,
            max_steps=self.max_steps,
        )
        tools = self.registry.tools
        if self.write_boundary is not None and any(
            step.tool not in tools or tools[step.tool].writes is not None for step in plan.steps
        ):
            return header  # write targets are checked against the file system: each run
        key = (self.registry, self.read_only, self.max_steps, plan.model_dump_json())
        steps = self._stored.get(key)
        if steps is None:
            try:
                steps = compile_plan(
                    plan,
                    self.registry,
                    params=header.params,
                    read_only=self.read_only,
                    write_boundary=self.write_boundary,
                    http_allow=self.http_allow,
                    max_steps=self.max_steps,
                )
            except PlanError:
                return header  # session.add reports it, with the same diagnostics
            if len(self._stored) >= _STORED_KEPT:
                self._stored.pop(next(iter(self._stored)))
            self._stored[key] = steps
        return dataclasses.replace(header, steps=steps.steps, order=steps.order)

    async def run(
        self,
        goal: str,
        context: str = "",
        params: Mapping[str, Any] | None = None,
        *,
        plan: Plan | None = None,
        run_id: str | None = None,
        task_type: str | None = None,
    ) -> AgentResult:
        """Plan ``goal``, have the plan approved when it needs it, run it, replan what
        fails within the caps, join (arguments and result as :meth:`run_once`).

        With a plan library (``library=``) and no ``plan``, the plan comes from it when it
        can (README, "The plan library"): ``task_type`` given, its latest admitted plan
        runs with no model call (a new task type is planned, and saved under it once it
        succeeded); no ``task_type``, one routing call to ``executor_model`` picks an
        entry and fills its params (the library's :meth:`TaskLibrary.run_task`:
        :func:`plandag.library.run_task`). The result's
        ``library`` says what happened, ``routing_calls`` holds the routing call.

        Raises:
            ValueError: ``task_type`` without a library, or with ``plan``.
            InputError: a ``task_type`` that is not a valid name, or whose latest plan
                uses tools the registry does not have (nothing ran).
        """
        if task_type is not None and self.library is None:
            raise ValueError(
                "Agent.run: task_type needs a plan library; pass library=PlanLibrary(store) "
                "to Agent"
            )
        if self.library is not None and plan is None:
            return await self.library.run_task(
                self, goal, context, params, task_type=task_type, run_id=run_id
            )
        if task_type is not None:
            raise ValueError("Agent.run: give either plan= or task_type=, not both")
        result = await self.run_revised(goal, context, params, plan=plan, run_id=run_id)
        if result.alerts:
            from plandag.planner.alerts import report_alerts

            await report_alerts(result.alerts, run_id=result.run.run_id, hooks=self.alert_hooks())
        return result

    def run_sync(
        self,
        goal: str,
        context: str = "",
        params: Mapping[str, Any] | None = None,
        *,
        plan: Plan | None = None,
        run_id: str | None = None,
        task_type: str | None = None,
    ) -> AgentResult:
        """:meth:`run` from synchronous code (a script, a notebook cell without ``await``,
        a web handler that is not async): the same arguments, result and errors.

        The run goes on an event loop (asyncio) that this agent keeps between calls, so
        the model client's connections, opened on that loop, serve every later call too.
        :meth:`close` (or ``with Agent(...) as agent:``) closes those connections and the
        loop when the agent is no longer needed. One call at a time per agent: threads
        that run at once need an agent (and a client) each.

        Raises:
            RuntimeError: called while an event loop runs in this thread (inside ``async
                def`` code, or Jupyter's own loop): ``await agent.run(...)`` there instead.
            ValueError, InputError: as :meth:`run`.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError(
                "Agent.run_sync was called while an event loop runs in this thread; use "
                "`await agent.run(...)` there instead"
            )
        return self._sync_runner().run(
            self.run(goal, context, params, plan=plan, run_id=run_id, task_type=task_type)
        )

    def close(self) -> None:
        """Close what :meth:`run_sync` opened: the model clients' connections (the agent's
        client and its ``models``' client, closed on the loop that opened them), then that
        loop; the agent cannot run after it. The same happens when an agent that ran with
        :meth:`run_sync` is garbage-collected. Does nothing when :meth:`run_sync` was never
        called (async code closes its client itself: ``await client.aclose()``); calling
        it again does nothing.
        """
        if self._closer is not None:
            self._closer()

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _sync_runner(self) -> asyncio.Runner:
        """The event loop :meth:`run_sync` runs on (made on first use, one per agent)."""
        if self._runner is None:
            self._runner = asyncio.Runner()
            clients = list({id(c): c for c in (self.client, self.models.client)}.values())
            self._closer = weakref.finalize(self, _close_sync_loop, self._runner, clients)
        return self._runner

    def alert_hooks(self) -> AlertHooks | None:
        """The hooks an out-of-registry alert calls: ``on_alert``, else ``on_escalation``
        when it is an :class:`~plandag.planner.alerts.AlertHooks` too (as
        :class:`plandag.escalation.EscalationHooks` is), else None."""
        from plandag.planner.alerts import AlertHooks

        if self.on_alert is not None:
            return self.on_alert
        return self.on_escalation if isinstance(self.on_escalation, AlertHooks) else None

    async def run_revised(
        self,
        goal: str,
        context: str = "",
        params: Mapping[str, Any] | None = None,
        *,
        plan: Plan | None = None,
        run_id: str | None = None,
    ) -> AgentResult:
        """:meth:`run` without the plan library: plan ``goal`` (or run ``plan``), have the
        plan approved, run it, replan, join; a rejection sends it back to the planner.

        A rejected plan goes back to the planner with the person's feedback, verbatim, as
        the instruction for the revision (and the rejected plan), at most
        ``max_revisions`` times; each revision is a fresh run of the new plan under the
        same ``run_id``. The result's ``revisions`` lists the feedback texts.

        With tracing on, all of it runs inside one live ``invoke_agent plandag`` span
        (:mod:`plandag.trace.otel`): the planner's calls, the run, replans, the joiner.
        """
        span = start_agent(self.model, goal, self.client.provider)
        result: AgentResult | None = None
        try:
            result = await self.run_with_revisions(goal, context, params, plan=plan, run_id=run_id)
            return result
        finally:
            spans.end_run(span, result.status if result is not None else "interrupted")

    async def run_with_revisions(
        self,
        goal: str,
        context: str = "",
        params: Mapping[str, Any] | None = None,
        *,
        plan: Plan | None = None,
        run_id: str | None = None,
    ) -> AgentResult:
        """:meth:`run` without its span."""
        revisions: list[str] = []
        decisions: list[Decision] = []
        rejected: Plan | None = None
        while True:
            this_context = context
            if revisions:
                this_context = revision_context(context, rejected, revisions)
            result = await self.run_once(
                goal,
                this_context,
                params,
                plan=plan if not revisions else None,
                run_id=run_id,
            )
            decisions.extend(result.decisions)
            result = dataclasses.replace(
                result, decisions=tuple(decisions), revisions=tuple(revisions)
            )
            last = result.decisions[-1] if result.decisions else None
            if (
                result.status != "rejected"
                or last is None
                or last.approved
                or len(revisions) >= self.max_revisions
            ):
                if result.status == "escalated" and self.on_escalation is not None:
                    await self._notify(result, goal, params)
                return result
            revisions.append(last.feedback)
            rejected = result.plan_versions[-1] if result.plan_versions else None

    async def run_once(
        self,
        goal: str,
        context: str = "",
        params: Mapping[str, Any] | None = None,
        *,
        plan: Plan | None = None,
        run_id: str | None = None,
    ) -> AgentResult:
        """Plan ``goal``, run the plan, replan what fails within the caps, join.

        Args:
            goal: the task, in the user's words.
            context: trusted context from the user, or "".
            params: values given to the run by name (``<param.NAME>``), or None.
            plan: a stored plan to run instead of asking the planner (README, "Planning
                with a model"): no planning call; its params and steps
                join the run at once, and only a failure brings in the replanner. Its
                steps are compiled once per agent and reused by later runs of an equal
                plan (see :meth:`_stored_header`); the session then opens with them
                (``RunStarted.step_count`` counts them; no ``StepsAdded`` event).

        Returns:
            The :class:`AgentResult`; never raises for a failed plan, call or step (the
            result says what happened).

        Raises:
            ValueError: bad limits (as ``open_session``).
            PlanError: ``params`` do not fit the declared params (a missing, unknown or
                invalid param), as ``open_session`` raises it.
            ApprovalRequiredError: no ``approve`` while plans can have effects (see
                :class:`Agent`); nothing ran.
        """
        self._check_approver(plan)
        budget = self.budget if self.budget is not None else self.limits.budget()
        given = dict(params or {})
        run = _AgentRun(self, goal, context, given, budget)
        run.stored = plan
        header: Plan | CompiledPlan = (
            _header(goal, given) if plan is None else self._stored_header(goal, plan, given)
        )
        watch = _FailureWatch()
        session_ref: list[RunSession] = []
        try:
            async with open_session(
                header,
                self.registry,
                params=given if isinstance(header, Plan) else None,
                read_only=self.read_only,
                write_boundary=self.write_boundary,
                http_allow=self.http_allow if isinstance(header, Plan) else None,
                limits=self.limits,
                retry=self.retry,
                observers=(*self.observers, watch, run.streamed_steps),
                max_concurrency=self.max_concurrency,
                tool_limits=self.tool_limits,
                budget=budget,
                hold_effects=True,
                run_id=run_id,
                escalate=self.escalate,
                max_steps=self.max_steps,
                models=self.models,
            ) as session:
                session_ref.append(session)
                run.session = session
                run.watch = watch
                run.loop_thread = threading.get_ident()
                with self._running_lock:
                    self._running[session.run_id] = run
                if self.on_session is not None:
                    self.on_session(session)
                if self.approve is not None:
                    session.require_approval()
                await run.plan(session)
                run.estimate_version(session)
                await run.approve(session, first=True)
                run.arm(session)
                async with anyio.create_task_group() as listening:
                    listening.start_soon(run.listen)
                    await run.run_and_replan(session, watch)
                    listening.cancel_scope.cancel()
        except _PlanningFailed:
            pass
        except anyio.get_cancelled_exc_class():
            if not session_ref:
                raise
            # Cancelled from outside (Ctrl-C, SIGTERM, a caller's deadline): the session
            # closed every step (running ones cancelled, the rest skipped); report that
            # state instead of losing it. The cancelled scope re-raises at the caller's
            # next checkpoint, so the cancellation itself is not lost.
            return run.result(run.interrupted(session_ref[0].result()))
        finally:
            if session_ref:
                with self._running_lock:
                    self._running.pop(session_ref[0].run_id, None)
        return run.result(session_ref[0].result())

    async def resume(
        self,
        goal: str,
        plan: Plan,
        completed: Mapping[int, Any],
        *,
        instruction: str | None = None,
        earlier: Sequence[Mapping[str, Any]] = (),
        used_ids: int = 0,
        params: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        on_resumed: Callable[[], None] | None = None,
    ) -> AgentResult:
        """Go on with a run a person resumed (an escalated run: ``plandag resume RUN_ID
        --instruction TEXT``): its completed steps are kept, the replanner writes the
        remaining work with the person's instruction, and the run goes on as
        :meth:`run_once` does, with fresh replan caps.

        The replanner's first call (trigger ``resume``) gets the instruction verbatim,
        the completed steps with their results and ``earlier`` (what did not succeed
        before); its patch is compiled against the completed steps, passes the approval
        gate like any replan, and runs. A patch that does not compile is repaired within
        the caps; when none compiles the run escalates again (``no_valid_replan``).

        Args:
            goal: the task, in the user's words.
            plan: the completed steps (and the output, when it only uses them), with the
                run's params declared.
            completed: their results, by step id (they never run again).
            instruction: the person's instruction, or None (the remaining work is
                replanned from the goal).
            earlier: the steps of earlier segments that did not succeed
                (``{"id", "tool", "status", "reason", "detail", "error"}`` each).
            used_ids: the largest step id the run used so far (new ids go above it).
            params: the run's param values, or None.
            run_id: the run's id.
            on_resumed: called once, when the first patch joined the run (the instruction
                was taken), as it joins; not called when the run ends before
                (a model call failed past its retries, the endpoint unreachable: the
                instruction was never used, the caller may keep the person's case open).

        Returns:
            The :class:`AgentResult` (``plan_versions``: the run's plan after each applied
            patch of this segment).

        Raises:
            PlanError: ``plan`` does not compile with ``params``.
        """
        budget = self.budget if self.budget is not None else self.limits.budget()
        given = dict(params or {})
        run = _AgentRun(self, goal, "", given, budget)
        run.replanner.used_ids = used_ids
        watch = _FailureWatch()
        session_ref: list[RunSession] = []
        try:
            async with open_session(
                plan,
                self.registry,
                params=given,
                read_only=self.read_only,
                write_boundary=self.write_boundary,
                http_allow=self.http_allow,
                limits=self.limits,
                retry=self.retry,
                observers=(*self.observers, watch),
                max_concurrency=self.max_concurrency,
                tool_limits=self.tool_limits,
                budget=budget,
                hold_effects=True,
                run_id=run_id,
                escalate=self.escalate,
                completed=completed,
                models=self.models,
            ) as session:
                session_ref.append(session)
                run.session = session
                run.watch = watch
                run.loop_thread = threading.get_ident()
                with self._running_lock:
                    self._running[session.run_id] = run
                if self.on_session is not None:
                    self.on_session(session)
                session.seal()
                if self.approve is not None:
                    session.require_approval()
                else:
                    session.release_effects()
                if await run.replan_remaining(session, instruction, earlier, on_resumed):
                    async with anyio.create_task_group() as listening:
                        listening.start_soon(run.listen)
                        await run.run_and_replan(session, watch)
                        listening.cancel_scope.cancel()
        except _PlanningFailed:
            pass
        except anyio.get_cancelled_exc_class():
            if not session_ref:
                raise
            return run.result(session_ref[0].result())
        finally:
            if session_ref:
                with self._running_lock:
                    self._running.pop(session_ref[0].run_id, None)
        result = run.result(session_ref[0].result())
        if result.status == "escalated" and self.on_escalation is not None:
            await self._notify(result, goal, params)
        return result


def _check_hooks(on_escalation: object, on_alert: object) -> None:
    """Refuse hooks that are not the protocols the agent calls (a plain function).

    Raises:
        TypeError: as :class:`Agent` says.
    """
    from plandag.planner.alerts import AlertHooks
    from plandag.planner.services import AgentEscalationHook

    for name, value, kind in (
        ("on_escalation", on_escalation, AgentEscalationHook),
        ("on_alert", on_alert, AlertHooks),
    ):
        if value is not None and not isinstance(value, kind):
            raise TypeError(
                f"{name}={value!r}: plandag.planner.agent.Agent is handed its hooks (a "
                f"{kind.__module__}.{kind.__name__}); for a plain function use plandag.Agent, "
                "or wrap it: plandag.escalation.EscalationHooks(callback=fn)"
            )


def revision_context(context: str, rejected: Plan | None, feedback: Sequence[str]) -> str:
    """Trusted context for a revision: the user's context, the rejected plan, and the
    person's feedback in full (the last is the instruction for this revision).

    Args:
        context: the user's trusted context, or "".
        rejected: the plan the person rejected last, or None.
        feedback: every rejection's text so far, oldest first.

    Returns:
        The context text for the planner's revision call.
    """
    parts = [context] if context else []
    if rejected is not None:
        parts.append(
            "A person rejected the previous plan:\n"
            + json.dumps(rejected.model_dump(mode="json", exclude_none=True), ensure_ascii=False)
        )
    for number, text in enumerate(feedback, start=1):
        latest = number == len(feedback)
        parts.append(
            f"The person's feedback on plan {number}"
            + (" (the instruction for this revision, in full)" if latest else "")
            + ":\n"
            + text
        )
    parts.append("Write a revised plan that follows the feedback.")
    return "\n\n".join(parts)


class _PlanningFailed(Exception):
    """Raised inside the session to end it when planning failed (the run is interrupted:
    steps a streamed plan started end cancelled, the others skipped)."""


class _AgentRun:
    """The state of one :meth:`Agent.run`."""

    def __init__(
        self, agent: Agent, goal: str, context: str, params: dict[str, Any], budget: Budget
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
        self.watch: _FailureWatch | None = None
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
        """Write the plan into ``session``; raise :class:`_PlanningFailed` when it fails."""
        if self.stored is not None:  # a stored plan: no planning call
            try:
                if not session.steps:  # not compiled with the header (Agent._stored_header)
                    session.add(self.stored.steps)
                session.set_output(self.stored.output)
            except PlanError as error:
                self.diagnostics = tuple(error.diagnostics)
                self.plan_did_not_compile = True
                self.fail("failed", type(error).__name__, str(error))
                raise _PlanningFailed from None
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
            raise _PlanningFailed from None
        except PlannerGaveUp as error:
            self.diagnostics = tuple(error.diagnostics)
            self.failed_attempts = tuple(error.attempts)
            self.plan_did_not_compile = True
            self.fail("failed", type(error).__name__, str(error))
            raise _PlanningFailed from None
        except PlanError as error:  # the plan compiled alone, not in the run (params)
            self.diagnostics = tuple(error.diagnostics)
            self.plan_did_not_compile = True
            self.fail("failed", type(error).__name__, str(error))
            raise _PlanningFailed from None
        except BudgetRefusedError as error:
            self.fail("budget_exceeded", type(error).__name__, str(error))
            raise _PlanningFailed from None
        except Exception as error:  # TruncatedResponseError, a call failed past its retries
            self.fail("failed", type(error).__name__, str(error))
            raise _PlanningFailed from None
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

    async def approve(self, session: RunSession, *, first: bool) -> None:
        """The approval gate (ARCHITECTURE.md, "People in the loop"): release the held
        steps with effects when the plan needs no decision or a person approves it;
        otherwise end the run ``awaiting_approval`` or ``rejected`` (raising
        :class:`_PlanningFailed` for the first plan; a replan's rejection ends the run where
        it is).

        Raises:
            _PlanningFailed: the first plan was not approved.
        """
        agent = self.agent
        mode = agent.approve
        steps = session.steps
        tainted = tainted_egress_steps(steps)
        if mode is None and not tainted:
            return
        if mode is not None and not approval_needed(steps, mode):
            session.approve_effects()
            return
        plan = Plan(
            goal=self.goal,
            params=session.plan.params,
            steps=[steps[key].step for key in sorted(steps)],
            output=session.output,
        )
        reason = approval_reason(steps)
        if not first:
            reason = f"replan {len(self.replans)} adds steps: {reason}"
        listed = () if agent.read_only else (host for step in steps.values() for host in step.hosts)
        request = ApprovalRequest.for_steps(
            session.run_id,
            max(len(self.versions), 1),
            plan,
            self.params,
            steps,
            agent.write_boundary,
            reason=reason,
            expiry_s=agent.approval_expiry_s,
            http_allow=allowed_hosts(agent.http_allow, listed),
            estimate=self.estimates[-1] if first and self.estimates else None,
        )
        self.request = request
        if agent.approver is None or mode in ("never", None):
            # A pending approval never holds effect-free branches: they run to their end
            # (their results kept for the run's approval), then the run waits.
            await session.settled()
            self.fail(
                "awaiting_approval",
                "AwaitingApproval",
                f"{reason}; nobody here can approve it (plan hash {request.plan_hash})",
            )
            raise _PlanningFailed
        with session.waiting_for_person():
            decision = await agent.approver(request)
        try:
            decision.check(request)
            if decision.approved and decision.amends:
                self.amend(session, request, decision)
        except (StaleDecisionError, InvalidDecisionError) as error:
            self.fail("awaiting_approval", type(error).__name__, str(error))
            raise _PlanningFailed from None
        self.decisions.append(decision)
        if decision.approved:
            session.approve_effects()
            return
        self.fail("rejected", "Rejected", decision.feedback or "rejected without feedback")
        raise _PlanningFailed

    def amend(self, session: RunSession, request: ApprovalRequest, decision: Decision) -> None:
        """Apply a step-by-step approval to the session: edited steps take their new
        arguments, rejected steps and those downstream of them end ``skipped`` (reason
        ``rejected``; the replanner may replace them, and a replacement with effects asks
        again). The plan this makes is a new version, approved by the same person.

        Raises:
            InvalidDecisionError: a chosen step has already started, or an edit does not
                compile (nothing was changed when a step had started).
        """
        steps = session.steps
        try:
            session.amend(
                decision.reject_steps,
                decision.edit_steps,
                f"rejected by {decision.who} in the approval request"
                + (f": {decision.feedback}" if decision.feedback else ""),
            )
        except ValueError as error:
            raise InvalidDecisionError(f"run {session.run_id}: {error}") from None
        dropped = downstream(request.dependencies, decision.reject_steps)
        kept = {key: steps[key] for key in sorted(steps) if key not in dropped}
        output = session.output
        if output is not None and any(
            reference.step_id in dropped for _, reference in find_references(output)
        ):
            output = None
        plan = Plan(
            goal=self.goal,
            params=session.plan.params,
            steps=[step.step for step in kept.values()],
            output=output,
        )
        agent = self.agent
        listed = () if agent.read_only else (host for step in kept.values() for host in step.hosts)
        amended = ApprovalRequest.for_steps(
            session.run_id,
            request.version + 1,
            plan,
            self.params,
            kept,
            agent.write_boundary,
            reason=request.reason,
            expiry_s=agent.approval_expiry_s,
            http_allow=allowed_hosts(agent.http_allow, listed),
        )
        self.add_version(plan, "amended")
        self.request = amended
        self.amendments.append(
            PlanAmendment(
                version=request.version,
                plan_hash=request.plan_hash,
                new_version=amended.version,
                new_plan_hash=amended.plan_hash,
                who=decision.who,
                feedback=decision.feedback,
                steps=step_decisions(request.plan, decision, dropped),
            )
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

    # -- 2. run and replan ---------------------------------------------------------------------

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

    # -- 2. run and replan ---------------------------------------------------------------------

    def counted_replans(self) -> int:
        """Replans that count against the caps (a person's instructions do not)."""
        return sum(1 for record in self.replans if record.trigger != "instruction")

    async def replan_remaining(
        self,
        session: RunSession,
        instruction: str | None,
        earlier: Sequence[Mapping[str, Any]],
        on_resumed: Callable[[], None] | None = None,
    ) -> bool:
        """A resumed run's first replan (trigger ``resume``), repaired within the caps
        until its patch compiles. Returns True when a patch joined the run (and passed the
        approval gate); False when the run ended here (no valid replan: escalated; a
        refused or failed call: gave_up; rejected or awaiting approval). ``on_resumed``
        is called when the patch joined, before the approval gate."""
        agent = self.agent
        previous: ReplanRecord | None = None
        while len(self.replans) < max(agent.max_replans, 1):
            try:
                record = await self.replanner.replan(
                    session,
                    self.goal,
                    session.state(),
                    number=len(self.replans) + 1,
                    trigger="resume",
                    previous=previous,
                    records=self.calls,
                    instruction=instruction,
                    earlier=earlier,
                )
            except Exception as error:
                await self.model_call_failed(session, error)
                return False
            self.replans.append(record)
            self.diagnostics = record.diagnostics
            if not record.applied:
                previous = record
                continue
            if on_resumed is not None:
                on_resumed()
            self.add_version(self.plan_so_far(session), "replan")
            if agent.approve is not None:
                try:
                    await self.approve(session, first=False)
                except _PlanningFailed:
                    return False
            return True
        self.give_up(session, "max_replans")
        return False

    async def run_and_replan(self, session: RunSession, watch: _FailureWatch) -> None:
        """Wait for failures and instructions and replan them, within the caps; then join."""
        agent = self.agent
        previous: ReplanRecord | None = None
        while True:
            state = await _next_state(session, watch, self.has_news)
            if state.stop_reason is not None:
                return  # deadline, stall or interruption: the run's own status says
            if any(session.records[key].reason == "budget" for key in state.needs_replan):
                return  # the cost cap skipped steps: budget_exceeded
            told = self.take()
            trigger: ReplanTrigger = "failure"
            joiner_reason: str | None = None
            if told:
                trigger = "instruction"
            elif not state.needs_replan:
                if state.running:
                    continue
                decision = await self.decide(session)
                if decision is None or decision.action == "finish":
                    if self.has_news():
                        continue  # an instruction came during the joiner's call
                    return
                trigger, joiner_reason = "joiner", decision.reason
            if trigger == "failure":
                self.ledger.observe(
                    {key: item.step for key, item in session.steps.items()}, session.records
                )
                blocked = self.ledger.blocked()
                if blocked:
                    self.gave_up = "blocked_intent"
                    session.escalate(
                        "blocked_intent", "; ".join(item.describe() for item in blocked)
                    )
                    return
            if trigger != "instruction":
                if self.counted_replans() >= agent.max_replans:
                    self.give_up(session, "max_replans")
                    return
                if self.progress.count(session.graph, state) >= agent.max_replans_without_progress:
                    self.give_up(session, "no_progress")
                    return
            state, choice, withdrawn = self.prepare(session, state, told)
            try:
                record = await self.replanner.replan(
                    session,
                    self.goal,
                    state,
                    number=len(self.replans) + 1,
                    trigger=trigger,
                    joiner_reason=joiner_reason,
                    previous=previous,
                    records=self.calls,
                    strategy=choice.strategy,
                    strategy_reason=choice.reason,
                    instructions=[item.text for item in self.received if not item.goal_changed],
                    withdrawn=withdrawn,
                    original_goal=self.original_goal if self.goal != self.original_goal else None,
                    reason=(
                        "a person's instruction: " + " / ".join(item.text for item in told)
                        if told
                        else None
                    ),
                )
            except PlanBudgetError:
                return  # the session stopped the run: escalated, plan_budget
            except Exception as error:
                await self.model_call_failed(session, error)
                return
            self.replans.append(record)
            self.diagnostics = record.diagnostics
            previous = None if record.applied else record
            if trigger == "instruction":
                self.progress.joined(record.replaced, record.new_ids)
            else:
                self.progress.replanned(session.graph, state, record.new_ids)
            if record.applied:
                self.join = None
                self.add_version(self.plan_so_far(session), "replan")
                self.estimate_version(session, calls=False)
                new = [session.steps[key] for key in record.new_ids]
                if any(step.tainted_egress for step in new) or (
                    agent.approve is not None and any(step.tool.effects != "none" for step in new)
                ):
                    try:
                        await self.approve(session, first=False)
                    except _PlanningFailed:
                        return

    def prepare(
        self, session: RunSession, state: SessionState, told: Sequence[Instruction]
    ) -> tuple[SessionState, StrategyChoice, tuple[int, ...]]:
        """Choose the replan's strategy (:func:`~plandag.planner.triggers.choose_strategy`)
        and drop the steps it replaces that have not started: every one for a total replan
        or an instruction, none otherwise. Returns the state after that, the choice and the
        steps dropped."""
        goal_changed = [item for item in told if item.goal_changed]
        if goal_changed:
            self.goal = goal_changed[-1].text
        down = state.down
        newly_down = down[self.down_seen :]
        self.down_seen = len(down)
        live = [key for key, record in session.records.items() if record.superseded_by is None]
        choice = choose_strategy(
            goal_changed=bool(goal_changed),
            newly_down=newly_down,
            completed=len(state.succeeded),
            steps=len(live),
            total_replan_below=self.agent.total_replan_below,
            instruction=bool(told),
        )
        withdrawn: tuple[int, ...] = ()
        if choice.strategy == "total" or told:
            detail = (
                f"dropped before it started: the run plans again from the goal ({choice.reason})"
                if choice.strategy == "total"
                else "dropped before it started: replanned with a person's instruction"
            )
            withdrawn = session.withdraw([*state.pending, *state.held], detail)
            if withdrawn:
                state = session.state()
        return state, choice, withdrawn

    async def model_call_failed(self, session: RunSession, error: Exception) -> None:
        """End the run after a replanner or joiner call failed: the run's deadline came
        (``TimeoutError``: stopped where it got to), the budget refused the call
        (``gave_up``, reason ``budget``), or the call failed past its retries (``gave_up``,
        reason ``replanner_error``); the error is kept in :attr:`error`."""
        if isinstance(error, TimeoutError):
            await deadline_reached(session)
            return
        self.error = StepErrorInfo(type(error).__name__, str(error))
        self.give_up(
            session, "budget" if isinstance(error, BudgetRefusedError) else "replanner_error"
        )

    def give_up(self, session: RunSession, reason: GaveUpReason) -> None:
        """The replans stop. A replan cap (``max_replans``, ``no_progress``) hands the run
        to a person (:meth:`RunSession.escalate`: ``escalated``, reason ``replan_caps``, or
        ``no_valid_replan`` when the last replans' patches never compiled; ``gave_up``
        with ``escalate="never"``); a refused or failed model call ends it ``gave_up``."""
        self.gave_up = reason
        if reason not in ("max_replans", "no_progress"):
            session.give_up()
            return
        state = session.state()
        failing = failure_summary(session, state) if state.needs_replan else "no step failed"
        unapplied = 0
        for record in reversed(self.replans):
            if record.applied:
                break
            unapplied += 1
        agent = self.agent
        if unapplied:
            session.escalate(
                "no_valid_replan",
                f"no valid replan: the last {unapplied} replan patch(es) did not compile "
                f"(replan caps: {self.counted_replans()} of {agent.max_replans} replans used); "
                f"{failing}",
            )
        elif reason == "max_replans":
            session.escalate(
                "replan_caps",
                f"the replan cap was hit ({self.counted_replans()} of {agent.max_replans} "
                f"replans used) and the run still fails: {failing}",
            )
        else:
            session.escalate(
                "replan_caps",
                f"{agent.max_replans_without_progress} replans in a row of the failing part "
                f"of the plan completed none of its steps (the no-progress cap): {failing}",
            )

    # -- 3. join -------------------------------------------------------------------------------

    async def decide(self, session: RunSession) -> JoinDecision | None:
        """Every step succeeded: the output by code, or the joiner's one model call.

        Returns:
            The decision, or None when the joiner's call failed (the run then gives up).
        """
        if session.output is not None:
            self.join = JoinDecision("finish", by_model=False)
            return self.join
        records = session.records
        steps = {key: records[key] for key in sorted(records) if records[key].superseded_by is None}
        snapshot = RunResult(session.run_id, "succeeded", steps)
        request = LLMRequest(
            model=self.agent.model,
            messages=[
                {
                    "role": "user",
                    "content": join_prompt(self.goal, snapshot, self.agent.max_chars),
                }
            ],
            max_tokens=self.agent.join_max_tokens,
            system=JOIN_SYSTEM_PROMPT,
            json_schema=JOIN_SCHEMA,
            schema_name="plandag_join",
            temperature=0.0,
        )
        first = len(self.calls)
        try:
            with anyio.fail_after(session.remaining_s):
                response = await call_with_retries(
                    self.agent.client,
                    request,
                    self.agent.retry,
                    self.agent.clock,
                    self.budget,
                    prices=self.agent.prices,
                    records=self.calls,
                    deadline=deadline_from(self.agent.clock, session.remaining_s),
                )
            session.check_plan_budget()  # the call's time counts
            action, text = parse_decision(response)
        except Exception as error:
            await self.model_call_failed(session, error)
            return None
        calls = tuple(self.calls[first:])
        if action == "finish":
            self.join = JoinDecision("finish", answer=text, by_model=True, records=calls)
            self.answer = text
        else:
            self.join = JoinDecision("replan", reason=text, by_model=True, records=calls)
        return self.join

    # -- the result ----------------------------------------------------------------------------

    def alerts(self) -> tuple[Diagnostic, ...]:
        """The out-of-registry diagnostics of every plan, repair and replan the model wrote
        in the run, in order (those a repair fixed included)."""
        attempts = self.outcome.attempts if self.outcome is not None else self.failed_attempts
        found = [item for attempt in attempts for item in attempt.diagnostics]
        found.extend(item for record in self.replans for item in record.diagnostics)
        return tuple(item for item in found if item.code in OUT_OF_REGISTRY_CODES)

    def result(self, run: RunResult) -> AgentResult:
        """The :class:`AgentResult` of the closed session's ``run``."""
        tainted: tuple[int, ...] = ()
        if self.session is not None:
            tainted = tuple(
                sorted(key for key, step in self.session.steps.items() if step.tainted_literals)
            )
        status = self.status if self.status is not None else run.status
        if self.gave_up is not None and status in ("succeeded", "failed"):
            status = "gave_up"  # e.g. a model call failed past its retries
        answer = None
        if status == "succeeded" and self.join is not None and self.join.action == "finish":
            answer = run.output if not self.join.by_model else self.answer
            if not self.join.by_model:
                self.join = dataclasses.replace(self.join, answer=answer)
        return AgentResult(
            status=status,
            run=run,
            answer=answer,
            plan_versions=tuple(self.versions),
            replans=tuple(self.replans),
            llm_calls=tuple(self.calls),
            join=self.join,
            plan=self.outcome,
            error=self.error,
            gave_up=self.gave_up,
            diagnostics=self.diagnostics,
            plan_did_not_compile=self.plan_did_not_compile,
            approval=self.request,
            decisions=tuple(self.decisions),
            amendments=tuple(self.amendments),
            instructions=tuple(self.received),
            plan_estimates=tuple(
                self.estimates[index] if index < len(self.estimates) else None
                for index in range(len(self.versions))
            ),
            tainted_steps=tainted,
            alerts=self.alerts(),
        )
