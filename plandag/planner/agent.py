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
import logging
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from plandag.brakes import Unlimited
from plandag.brakes.budget import Budget
from plandag.brakes.clock import Clock, SystemClock
from plandag.brakes.retry import RetryPolicy
from plandag.compiler import DEFAULT_MAX_STEPS, CompiledPlan
from plandag.dag.plan import Plan
from plandag.executors.access import DEFAULT_EXECUTOR_MODEL, ModelAccess
from plandag.models import DEFAULT_PRICES, LLMClient, PriceTable
from plandag.planner.agent_approval import require_approver
from plandag.planner.agent_replan import AgentRun
from plandag.planner.agent_result import AgentResult as AgentResult
from plandag.planner.agent_result import GaveUpReason as GaveUpReason
from plandag.planner.agent_result import LibraryReport as LibraryReport
from plandag.planner.agent_result import PlanAmendment as PlanAmendment
from plandag.planner.agent_run import StoredPlans, run_header
from plandag.planner.agent_run import deadline_reached as deadline_reached
from plandag.planner.agent_settings import RunningRuns
from plandag.planner.joiner import DEFAULT_JOIN_MAX_TOKENS
from plandag.planner.planner import DEFAULT_PLAN_MAX_TOKENS
from plandag.planner.replanner import DEFAULT_REPLAN_MAX_CHARS, DEFAULT_REPLAN_MAX_TOKENS
from plandag.planner.revisions import revision_context as revision_context
from plandag.planner.revisions import run_with_revisions
from plandag.planner.services import check_hooks
from plandag.planner.spans import start_agent
from plandag.planner.triggers import Instruction, InstructionSource
from plandag.scheduler import events, spans
from plandag.scheduler.gate import (
    DEFAULT_EXPIRY_S,
    ApprovalMode,
    ApproveArgument,
    Approver,
    resolve_approve,
)
from plandag.scheduler.result import EscalationMode
from plandag.scheduler.runner import RunLimits
from plandag.scheduler.session import RunSession
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
            under its task type (docs/library.md). None (the default): every
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
        check_hooks(on_escalation, on_alert)
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
        self._stored = StoredPlans()
        self.running = RunningRuns()

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
        target = self.running.target(run_id)
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
        can (docs/library.md): ``task_type`` given, its latest admitted plan
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
        result = await run_with_revisions(
            self.run_once,
            goal,
            context,
            params,
            plan=plan,
            run_id=run_id,
            max_revisions=self.max_revisions,
        )
        if result.status == "escalated" and self.on_escalation is not None:
            await self._notify(result, goal, params)
        return result

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
            plan: a stored plan to run instead of asking the planner (docs/planning.md): no
                planning call; its params and steps join the run at once, and only a
                failure brings in the replanner. Its steps are compiled once per agent
                and reused by later runs of an equal plan
                (:meth:`~plandag.planner.agent_run.StoredPlans.header`); the session then
                opens with them (``RunStarted.step_count`` counts them; no ``StepsAdded``
                event).

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
        require_approver(self, plan)
        budget = self.budget if self.budget is not None else self.limits.budget()
        given = dict(params or {})
        run = AgentRun(self, goal, context, given, budget)
        run.stored = plan
        header: Plan | CompiledPlan = (
            run_header(goal, given)
            if plan is None
            else self._stored.header(self, goal, plan, given)
        )
        return await run.start(header, run_id)

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
        run = AgentRun(self, goal, "", given, budget)
        run.replanner.used_ids = used_ids
        result = await run.go_on(
            plan,
            completed,
            instruction=instruction,
            earlier=earlier,
            run_id=run_id,
            on_resumed=on_resumed,
        )
        if result.status == "escalated" and self.on_escalation is not None:
            await self._notify(result, goal, params)
        return result
