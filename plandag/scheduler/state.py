"""The state of one run and its brakes: :class:`RunState`, the base of the runner
(:mod:`plandag.scheduler.runner`, which documents the rules).

A run's records, results and limiters; the HTTP allow-list and the taint of results
(ARCHITECTURE.md, "Untrusted content"); its events sent to the observers; the wall-clock
cap, the plan-relative budget and the clocks stopped while a person decides; heartbeats,
stalls, stops and escalations.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup

from plandag.brakes.budget import Budget, PlanBudget
from plandag.brakes.clock import Clock, SystemClock
from plandag.brakes.retry import RetryPolicy
from plandag.compiler.compiled import CompiledPlan, CompiledStep, allowed_hosts
from plandag.dag.graph import BottomLevels
from plandag.dag.references import ReferenceResolutionError
from plandag.errors import Classifier
from plandag.scheduler import events
from plandag.scheduler.breaker import CircuitBreaker, Dependency
from plandag.scheduler.estimate import PlanEstimate
from plandag.scheduler.limits import RunLimits
from plandag.scheduler.overrun import LIVE_RUNS, ToolCalls
from plandag.scheduler.result import ESCALATION_REASONS, EscalationMode, RunResult, StepRecord
from plandag.scheduler.tasks import StepTasks
from plandag.telemetry import LiveSpan, tracer_provider
from plandag.tools.boundary import WriteBoundary

if TYPE_CHECKING:
    from plandag.access import ModelAccessProtocol

logger = logging.getLogger("plandag.scheduler")

__all__ = ["RunState", "local_paths", "real_path"]


def local_paths(targets: Iterable[str]) -> list[str]:
    """The real paths of the local files among write targets (URLs left out)."""
    return [real_path(target) for target in targets if "://" not in target]


def real_path(path: str) -> str:
    """``os.path.realpath(path)``, or the absolute path when a link on it changes while it
    is resolved (``realpath`` then raises; the write itself checks the boundary again)."""
    try:
        return os.path.realpath(path)
    except OSError:
        return os.path.abspath(path)


@dataclasses.dataclass(frozen=True, slots=True)
class PlanShape:
    """What a run's set-up takes from its compiled plan alone (:func:`plan_shape`).

    Attributes:
        steps: the plan's compiled steps (the mapping this shape was worked out from).
        order: the plan's order (the tuple this shape was worked out from).
        names: ``(step id, tool name)`` of every step, in ``order``.
        remaining: each step's count of parents, by step id (a run counts down a copy).
        limited: a tool of the plan declares a ``max_concurrency``.
        all_inline: every step's tool is inline and sync (never suspends).
        listed: the hosts the plan lists, sorted (none for a read-only plan).
        http_allow: the run's HTTP allow-list (:func:`allowed_hosts` of the configured
            patterns and ``listed``).
        configured: the plan's configured allow-list patterns (``CompiledPlan.http_allow``).
        read_only: the plan's ``read_only``.
    """

    steps: Mapping[int, CompiledStep]
    order: tuple[int, ...]
    configured: tuple[str, ...] | None
    read_only: bool
    names: tuple[tuple[int, str], ...]
    remaining: dict[int, int]
    limited: bool
    all_inline: bool
    listed: tuple[str, ...]
    http_allow: tuple[str, ...]


_SHAPES_KEPT = 8
"""How many plans' shapes :func:`plan_shape` keeps (the latest ones)."""

_SHAPE_MAX_STEPS = 256
"""Plans with more steps are not kept: their set-up is small beside their run."""

_shapes: dict[tuple[int, int], PlanShape] = {}


def plan_shape(compiled: CompiledPlan) -> PlanShape:
    """``compiled``'s :class:`PlanShape`, worked out once per compiled plan (and per copy
    of it with other params, as a batch runs one plan per input) for plans of at most
    :data:`_SHAPE_MAX_STEPS` steps, the latest :data:`_SHAPES_KEPT` of them kept; a kept
    shape is used only while the plan's ``steps`` and ``order`` are the very objects it was
    worked out from, with the same ``http_allow`` and ``read_only``."""
    steps, order = compiled.steps, compiled.order
    key = (id(steps), id(order))
    shape = _shapes.get(key)
    if (
        shape is not None
        and shape.steps is steps
        and shape.order is order
        and shape.configured == compiled.http_allow
        and shape.read_only == compiled.read_only
    ):
        return shape
    names: list[tuple[int, str]] = []
    remaining: dict[int, int] = {}
    hosts: set[str] = set()
    limited = False
    all_inline = True
    for step_id in order:
        compiled_step = steps[step_id]
        tool = compiled_step.tool
        names.append((step_id, tool.name))
        remaining[step_id] = len(compiled_step.parents)
        if tool.max_concurrency is not None:
            limited = True
        if compiled_step.hosts:
            hosts.update(compiled_step.hosts)
        if all_inline and not (tool.inline and not tool.is_async):
            all_inline = False
    if len(remaining) != len(steps):  # the order does not name every step: ask each one
        hosts = set(compiled.listed_hosts)
        all_inline = all(step.tool.inline and not step.tool.is_async for step in steps.values())
    listed: tuple[str, ...] = () if compiled.read_only else tuple(sorted(hosts))
    shape = PlanShape(
        steps,
        order,
        compiled.http_allow,
        compiled.read_only,
        tuple(names),
        remaining,
        limited,
        all_inline,
        listed,
        allowed_hosts(compiled.http_allow, listed),
    )
    if len(order) <= _SHAPE_MAX_STEPS:
        if len(_shapes) >= _SHAPES_KEPT:
            _shapes.pop(next(iter(_shapes)), None)  # another thread may have taken it
        _shapes[key] = shape
    return shape


class RunState:
    """The state of one run (:func:`~plandag.scheduler.run_plan` is its public face); the
    runner's layers (:class:`~plandag.scheduler.attempts.StepAttempts`,
    :class:`~plandag.scheduler.outcomes.StepOutcomes`, the runner) build on it."""

    # Slots: a run has some 80 attributes, set once per run (a batch makes a run per input)
    # and read on every step; CPython keeps so many in a per-instance dict of its own,
    # slower to fill and to read than slots.
    __slots__ = (
        "_run_scope",
        "active",
        "boundary",
        "breaker",
        "broken_observers",
        "budget",
        "budget_refused",
        "calling",
        "cap_loop_deadline",
        "capped",
        "classify",
        "clean_files",
        "clock",
        "compiled",
        "completed",
        "deadline",
        "dependencies",
        "driving_in_order",
        "escalate_mode",
        "escalation",
        "escape_results",
        "escaped_steps",
        "failed_upstream",
        "final_result",
        "finished",
        "first_started_at",
        "gave_up",
        "global_limiter",
        "http_allow",
        "idle_event",
        "in_order",
        "last_progress",
        "limiters_by_tool",
        "limits",
        "limits_by_name",
        "listed_hosts",
        "loop_paused_at",
        "models",
        "monotonic",
        "now",
        "observers",
        "output",
        "params",
        "paused",
        "paused_at",
        "paused_total",
        "pending_clean",
        "pending_estimate",
        "plan_budget",
        "plan_budget_detail",
        "plan_loop_deadline",
        "plan_loop_stopped_at",
        "plan_measured",
        "plan_stopped_at",
        "plan_stopped_total",
        "plan_tokens_cost",
        "queues_inline_steps",
        "ready_here",
        "ready_queue",
        "records",
        "rejected",
        "remaining",
        "results",
        "retry",
        "run_id",
        "run_span",
        "slot_wait_since",
        "slot_waited_total",
        "slot_waits",
        "standbys",
        "start_estimate",
        "start_order",
        "started",
        "started_at",
        "started_monotonic",
        "step_spent_nanodollars",
        "step_states",
        "steps",
        "stop_reason",
        "taint_of",
        "task_group",
        "tool_calls",
        "tool_limiter",
        "tracing",
        "waiting_for_person",
    )

    run_span: LiveSpan | None
    """The run's live trace span, parent of its steps' spans (None without tracing)."""

    _run_scope: anyio.CancelScope | None

    @property
    def run_scope(self) -> anyio.CancelScope:
        """The cancel scope the steps run in, which :meth:`stop` and the deadlines cancel;
        made on first use (a run that nothing can stop never needs one)."""
        scope = self._run_scope
        if scope is None:
            scope = self._run_scope = anyio.CancelScope()
        return scope

    @run_scope.setter
    def run_scope(self, scope: anyio.CancelScope) -> None:
        self._run_scope = scope

    @property
    def stopping(self) -> bool:
        """The run scope was cancelled (:meth:`stop`, a deadline): the run is stopping."""
        scope = self._run_scope
        return scope is not None and scope.cancel_called

    def __init__(
        self,
        compiled: CompiledPlan,
        run_id: str,
        max_concurrency: int | None,
        tool_limits: Mapping[str, int] | None,
        observers: Sequence[events.Observer],
        limits: RunLimits,
        retry: RetryPolicy | None,
        classify: Classifier,
        clock: Clock | None,
        budget: Budget | None = None,
        completed: Mapping[int, Any] | None = None,
        boundary: WriteBoundary | None = None,
        models: ModelAccessProtocol | None = None,
    ) -> None:
        if max_concurrency is not None and max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1 or None, not {max_concurrency}")
        limits_by_name: dict[str, int | None] = dict(tool_limits or {})
        for name, limit in limits_by_name.items():
            if limit is None or limit < 1:
                raise ValueError(f"tool_limits[{name!r}] must be >= 1, not {limit}")
        self.compiled = compiled
        self.run_id = run_id
        self.run_span = None
        self._run_scope = None
        # A session (plandag.scheduler.session) replaces this with a dict of its own that
        # grows while it runs; a parent's CompiledStep is then replaced by one whose
        # ``children`` include the new steps, so the hot path reads children as before.
        self.steps: Mapping[int, CompiledStep] = compiled.steps
        self.output: Any = compiled.plan.output
        self.first_started_at: float | None = None
        self.params = compiled.params
        self.boundary = compiled.write_boundary if boundary is None else boundary
        self.listed_hosts: set[str] = set()
        self.http_allow: tuple[str, ...] = ()
        """The run's HTTP allow-list, given to each step in ``ToolContext.http_allow``."""
        self.taint_of: dict[int, bool] = {}
        """Whether each started step's result is (or would be) tainted."""
        self.clean_files: set[str] = set()
        """Real paths of files this run wrote from untainted data."""
        self.pending_clean: dict[int, list[str]] = {}
        self.observers = tuple(observers)
        self.tool_calls = ToolCalls()
        """Where async tools are called when the run has a deadline (abandoned if they
        ignore their cancellation; :mod:`plandag.scheduler.overrun`)."""
        self.tracing = tracer_provider() is not None
        """Whether steps get live trace spans: a tracer provider was configured when the
        run was made (asked once per run, not per attempt)."""
        self.broken_observers: set[int] = set()
        self.limits = limits
        self.retry = retry
        self.classify = classify
        self.clock: Clock = clock if clock is not None else SystemClock()
        # The system clock's functions are called directly: a bound method per call would
        # cost the hot path for nothing.
        self.now: Callable[[], float]
        self.monotonic: Callable[[], float]
        if type(self.clock) is SystemClock:
            self.now, self.monotonic = time.time, time.perf_counter
        else:
            self.now, self.monotonic = self.clock.time, self.clock.monotonic
        self.budget = budget if budget is not None else limits.budget()
        self.capped = self.budget.capped
        self.budget_refused = False
        self.rejected = False
        """A person rejected the whole plan while steps without effects ran (the run ends
        ``rejected``; :meth:`plandag.scheduler.session.RunSession.reject`)."""
        self.stop_reason: str | None = None
        self.started = 0.0
        self.finished = False
        """The run returned its result (a :class:`~.overrun.DeadlineGuard` reads it)."""
        self.final_result: RunResult | None = None
        """The result the run returned (a :class:`~.overrun.DeadlineGuard` reads it)."""
        self.started_at = 0.0
        """When the run started, seconds since the epoch."""
        self.deadline: float | None = None
        self.last_progress = 0.0
        self.paused = False
        self.waiting_for_person = 0
        """How many approvals are being asked now (:meth:`pause`)."""
        self.slot_waits = 0
        """How many model calls of the run wait for a rate-limit slot now."""
        self.slot_wait_since: float | None = None
        """Since when (run's clock) at least one call waits for a slot, or None."""
        self.slot_waited_total = 0.0
        """Seconds during which at least one call of the run waited for a slot."""
        self.paused_at: float | None = None
        self.paused_total = 0.0
        self.loop_paused_at = 0.0
        """When the clocks stopped for a person, on the event loop's clock."""
        self.cap_loop_deadline: float | None = None
        """The wall-clock cap's deadline on the event loop's clock, or None."""
        self.plan_budget: PlanBudget | None = None
        self.plan_loop_deadline: float | None = None
        """The plan-relative time limit's deadline on the event loop's clock, or None."""
        self.plan_stopped_at: float | None = None
        """Since when (run's clock) the plan-relative clock stands still (a person deciding,
        or calls waiting for rate-limit slots), or None."""
        self.plan_loop_stopped_at = 0.0
        """``plan_stopped_at`` on the event loop's clock."""
        self.plan_stopped_total = 0.0
        """Seconds the plan-relative clock stood still so far."""
        self.plan_measured: Mapping[str, float] = {}
        self.plan_tokens_cost: Callable[[int], float | None] | None = None
        self.step_spent_nanodollars = 0
        """This run's own step spend (a shared batch budget also holds other runs')."""
        self.plan_budget_detail: str | None = None
        self.records: dict[int, StepRecord] = {}
        self.models = models
        """What model-backed steps use (``ToolContext.models``), or None."""
        self.step_states: dict[int, dict[str, Any]] = {}
        """``ToolContext.step_state`` of each step that took a context, kept across attempts."""
        self.active = 0
        """Step tasks started and not yet ended (each may run a chain of steps), and steps
        waiting in :attr:`ready_queue` (each as good as a task started)."""
        self.idle_event: anyio.Event | None = None
        """Set when ``active`` drops to 0 (a session's ``settled()`` waits on it)."""
        self.gave_up = False
        self.escalate_mode: EscalationMode = "person"
        self.escalation: tuple[str, str] | None = None
        """``(reason, detail)`` once the run was handed to a person (:meth:`escalate`)."""
        self.breaker = (
            CircuitBreaker(limits.breaker_after) if limits.breaker_after is not None else None
        )
        self.dependencies: dict[int, tuple[Dependency, ...]] = {}
        self.results: dict[int, Any] = {}
        self.escaped_steps: set[int] = set()
        """Steps with a value that held lone surrogates, escaped (:mod:`plandag.surrogates`)."""
        self.escape_results = True
        """Whether each result is looked through for lone surrogates (``run_plan``)."""
        self.started_monotonic: dict[int, float] = {}
        self.failed_upstream: dict[int, list[int]] = {}
        self.global_limiter = (
            anyio.CapacityLimiter(max_concurrency) if max_concurrency is not None else None
        )
        self.tool_limiter: dict[int, anyio.CapacityLimiter | None] = {}
        limiters_by_tool: dict[str, anyio.CapacityLimiter] = {}
        self.limits_by_name = limits_by_name
        self.limiters_by_tool = limiters_by_tool
        shape = plan_shape(compiled)
        steps = self.steps
        records = self.records
        for step_id, name in shape.names:
            records[step_id] = StepRecord(step_id, name)
        self.remaining: dict[int, int] = shape.remaining.copy()
        """Each step's count of parents that have not succeeded yet."""
        if shape.limited or limits_by_name:
            tool_limiter = self.tool_limiter
            for step_id, name in shape.names:
                limit = limits_by_name.get(name, steps[step_id].tool.max_concurrency)
                if limit is not None and name not in limiters_by_tool:
                    limiters_by_tool[name] = anyio.CapacityLimiter(limit)
                tool_limiter[step_id] = limiters_by_tool.get(name)
        else:
            self.tool_limiter = dict.fromkeys(records)
        self.listed_hosts = set(shape.listed)
        self.http_allow = shape.http_allow
        self.task_group: TaskGroup | StepTasks | None = None
        self.calling: dict[Any, Any] | None = None
        """The abandonable calls of the run's task group (:attr:`StepTasks.calling`): set
        when the run has a deadline and its steps run in a :class:`StepTasks`, whose host
        abandons a step's task whose async tool ignores its cancellation; None otherwise
        (async tools are then called through :attr:`tool_calls`)."""
        self.queues_inline_steps = True
        """Whether ready steps are queued in :attr:`ready_here` and :attr:`ready_queue` (a
        session starts each ready step in a task of its own: its caller works on the
        session between the steps' turns, and that order is kept)."""
        self.ready_here: collections.deque[int] = collections.deque()
        """Ready steps of inline tools under no concurrency limit, waiting to run in a
        task already running steps (the one that queued them runs them when its chain
        ends; :meth:`~plandag.scheduler.runner._Run.succeed`)."""
        self.ready_queue: collections.deque[int] = collections.deque()
        """Ready steps that may suspend, made ready beside a step its task runs next: the
        run's tasks take them in turn as their own steps end, and a standby task takes
        one whenever the tasks running steps are all suspended
        (:meth:`~plandag.scheduler.runner._Run.stand_by`)."""
        self.standbys = 0
        """Standby tasks started that have not run yet (at least one while
        :attr:`ready_queue` holds a step)."""
        self.in_order = not self.observers and shape.all_inline
        """Whether :meth:`run_steps` may run the steps one after another in plan order, in
        one task (every tool inline, nobody observing: see :meth:`run_in_order`)."""
        self.driving_in_order = False
        self.pending_estimate: tuple[PlanEstimate, Mapping[str, float]] | None = None
        """Armed when :meth:`run` starts (``run_plan``'s plan estimate)."""
        self.start_estimate: PlanEstimate | None = None
        """The plan estimate whose steps' seconds weigh the order ready steps start in
        (the one the plan-relative limits are armed with, or ``run_plan``'s), or None:
        every step weighs 1."""
        self.start_order: BottomLevels | None = None
        """The bottom levels ready steps start by, highest first, once worked out
        (:meth:`~plandag.scheduler.runner._Run.priorities`); None until then, and again
        when the plan or its estimate changes."""
        self.completed: Mapping[int, Any] = {}
        if completed:
            unknown = sorted(set(completed) - set(self.records))
            if unknown:
                raise ValueError(f"completed names steps the plan does not have: {unknown}")
            self.completed = completed

    def list_hosts(self, hosts: Iterable[str]) -> None:
        """Add hosts an approved (or effect-free, untainted) part of the plan lists to the
        run's HTTP allow-list; a read-only run lists none (ARCHITECTURE.md, "Untrusted
        content")."""
        if self.compiled.read_only:
            return
        new = set(hosts) - self.listed_hosts
        if new:
            self.listed_hosts |= new
            self.http_allow = allowed_hosts(self.compiled.http_allow, self.listed_hosts)

    def output_tainted(self, compiled_step: CompiledStep, args: Mapping[str, Any]) -> bool:
        """Whether the step's result will be tainted, now that its args resolved.

        The compile-time answer (``tainted_output``) is refined: an input counts as tainted
        only when a parent's result really was, and a ``taint_source`` tool reading back a
        file this run wrote from untainted data (its ``reads`` argument) gives untainted
        data.
        """
        if not compiled_step.tainted_output:
            return False
        if compiled_step.tainted_literals:
            return True
        if compiled_step.tainted_input:
            steps = self.steps
            taint_of = self.taint_of
            for parent in compiled_step.parents:
                if taint_of.get(parent, True) and steps[parent].tainted_output:
                    return True
        tool = compiled_step.tool
        if not tool.taint_source:
            return False
        if tool.reads is None or not self.clean_files:
            return True
        path = args.get(tool.reads)
        return not isinstance(path, str) or real_path(path) not in self.clean_files

    def emit(self, event: events.Event) -> None:
        """Send ``event`` to every observer; an observer that raises is logged once.

        Raises:
            StartVeto: an observer vetoed a ``StepStarted`` (the caller fails the attempt).
        """
        for observer in self.observers:
            try:
                observer(event)
            except events.StartVeto:
                if isinstance(event, events.StepStarted):
                    raise
                logger.warning(
                    "run %s: observer %r vetoed a %s; only a StepStarted can be vetoed",
                    self.run_id,
                    observer,
                    type(event).__name__,
                )
            except Exception:
                if id(observer) not in self.broken_observers:
                    self.broken_observers.add(id(observer))
                    logger.warning(
                        "run %s: observer %r raised on %s; the run goes on and later errors "
                        "of this observer are not logged",
                        self.run_id,
                        observer,
                        type(event).__name__,
                        exc_info=True,
                    )

    def guard(self) -> None:
        """Let a command line's :class:`~plandag.scheduler.overrun.DeadlineGuard` watch
        this run (a run on the system clock with a wall-clock cap)."""
        if type(self.clock) is SystemClock:
            LIVE_RUNS.add(self)

    def running_step_ids(self) -> tuple[int, ...]:
        """Ids of the running steps, sorted."""
        return self.running_steps()[0]

    def deadline_result(self) -> RunResult:
        """The run's result for a :class:`~plandag.scheduler.overrun.DeadlineGuard` that
        ends the process past the deadline (called from the guard's thread): the result the
        run returned when it has, else its records as they stand, each step still running
        ``cancelled`` and each not started ``skipped`` (reason ``deadline``), the run
        ``timed_out``; the records themselves are left as they are."""
        if self.final_result is not None:
            return self.final_result
        now = self.now()
        records: list[tuple[int, StepRecord]] = []
        for _ in range(3):  # the loop may still add a step meanwhile
            try:
                records = list(self.records.items())
                break
            except RuntimeError:
                continue
        steps: dict[int, StepRecord] = {}
        for step_id, record in records:
            copy = dataclasses.replace(record)
            if copy.status == "running":
                copy.status, copy.reason, copy.ended_at = "cancelled", "deadline", now
                copy.detail = (
                    "the run reached its wall-clock cap while this step ignored cancellation"
                )
            elif copy.status == "pending":
                copy.status, copy.reason, copy.ended_at = "skipped", "deadline", now
                copy.detail = "the run reached its wall-clock cap before this step started"
            steps[step_id] = copy
        return RunResult(
            run_id=self.run_id,
            status="timed_out",
            steps=steps,
            started_at=self.started_at,
            ended_at=now,
            duration_s=self.monotonic() - self.started,
            spent_usd=self.budget.spent_usd,
            spent_tokens=self.budget.spent_tokens,
            stop_reason="deadline",
        )

    def past_deadline(self) -> bool:
        """The wall-clock cap has passed (and the run is not waiting for a person): what a
        step that ignored cancellation, or blocked the event loop, finds when it returns."""
        return self.deadline is not None and not self.paused and self.monotonic() >= self.deadline

    def running_steps(self) -> tuple[tuple[int, ...], tuple[str, ...]]:
        """Ids of the running steps (sorted) and their tools' names."""
        running = sorted(
            record.id for record in self.records.values() if record.status == "running"
        )
        return tuple(running), tuple(self.records[step_id].tool for step_id in running)

    def heartbeat(self) -> events.Heartbeat:
        """A :class:`~plandag.scheduler.events.Heartbeat` for now (O(steps))."""
        counts = dict.fromkeys(
            ("pending", "running", "succeeded", "failed", "skipped", "cancelled"), 0
        )
        for record in self.records.values():
            counts[record.status] += 1
        running_steps, running_tools = self.running_steps()
        return events.Heartbeat(
            run_id=self.run_id,
            elapsed_s=self.monotonic() - self.started,
            total=len(self.records),
            succeeded=counts["succeeded"],
            failed=counts["failed"],
            skipped=counts["skipped"],
            cancelled=counts["cancelled"],
            running=counts["running"],
            pending=counts["pending"],
            spent_usd=self.budget.spent_usd,
            spent_tokens=self.budget.spent_tokens,
            running_steps=running_steps,
            running_tools=running_tools,
            time=self.now(),
        )

    def stall(self, idle_s: float, stopping: bool) -> events.Stall:
        """A :class:`~plandag.scheduler.events.Stall` for now."""
        running_steps, running_tools = self.running_steps()
        return events.Stall(
            run_id=self.run_id,
            elapsed_s=self.monotonic() - self.started,
            idle_s=idle_s,
            running_steps=running_steps,
            running_tools=running_tools,
            stopping=stopping,
            time=self.now(),
        )

    def escalate(self, reason: str, detail: str) -> bool:
        """Hand the run to a person: it ends ``escalated`` with ``reason`` (one of
        :data:`~plandag.scheduler.result.ESCALATION_REASONS`) and ``detail`` (a sentence for
        that person); with escalation mode ``never`` it ends ``gave_up`` instead. The first
        escalation's reason is kept. Returns True when the run escalates.

        Raises:
            ValueError: ``reason`` is not one of ``ESCALATION_REASONS``.
        """
        if reason not in ESCALATION_REASONS:
            raise ValueError(
                f"escalation reason {reason!r} is unknown; use one of "
                f"{', '.join(sorted(ESCALATION_REASONS))}"
            )
        if self.escalate_mode == "never":
            self.gave_up = True
            return False
        if self.escalation is None:
            self.escalation = (reason, detail)
        return True

    def stop(self, reason: str) -> None:
        """Stop the run now: running steps end cancelled, the others skipped (``reason``)."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self.run_scope.cancel()
        task_group = self.task_group
        if type(task_group) is StepTasks:  # its tasks are outside the run scope's tree
            task_group.cancel()

    def stop_cause(self) -> str:
        """Why the run's steps are being cancelled: ``stalled``, ``deadline`` or
        ``interrupted`` (from outside)."""
        if self.stop_reason is not None:
            return self.stop_reason
        if self.stopping:
            # only stop() and the deadlines cancel run_scope: the earlier deadline fired
            plan_deadline = self.plan_loop_deadline
            cap_deadline = self.cap_loop_deadline
            budget = self.plan_budget
            if (
                budget is not None
                and plan_deadline is not None
                and (cap_deadline is None or plan_deadline < cap_deadline)
            ):
                limit = budget.time_limit_s or 0.0
                detail = budget.time_words(max(self.plan_elapsed(), limit))
                self.plan_budget_detail = detail
                self.stop_reason = "plan_budget"
                self.escalate("plan_budget", detail)
                return "plan_budget"
            return "deadline"
        return "interrupted"

    def remaining_s(self) -> float | None:
        """Seconds left before the run's deadline (run's clock), or None without one."""
        if self.deadline is None:
            return None
        return self.deadline - self.monotonic()

    def arm_plan_budget(
        self,
        estimate: PlanEstimate,
        measured: Mapping[str, float] | None = None,
        tokens_cost: Callable[[int], float | None] | None = None,
    ) -> PlanBudget | None:
        """Hold the run to ``limits.plan_cost_factor`` / ``plan_time_factor`` times
        ``estimate``, counted from the run's start; call it inside the run, once its
        deadline is set. ``measured`` and ``tokens_cost`` estimate later replan patches as
        the plan was. The estimate's steps' seconds weigh the order ready steps start in
        from then on (:attr:`start_estimate`). Returns the budget, or None when no limit
        applies (factors lifted, estimate unknown)."""
        if estimate is not self.start_estimate:
            self.start_estimate = estimate
            self.start_order = None  # weighed again by this estimate's seconds
        limits = self.limits
        budget = PlanBudget(estimate, limits.plan_cost_factor, limits.plan_time_factor)
        self.plan_measured = dict(measured or {})
        self.plan_tokens_cost = tokens_cost
        if not budget.enforced:
            self.plan_budget = None
            self.plan_loop_deadline = None
            self.apply_deadlines()
            return None
        self.plan_budget = budget
        if budget.time_limit_s is not None:
            # counted from when the clock stopped, if it stands still: it moves on from there
            base = (
                self.plan_loop_stopped_at
                if self.plan_stopped_at is not None
                else anyio.current_time()
            )
            self.plan_loop_deadline = base + budget.time_limit_s - self.plan_elapsed()
        else:
            self.plan_loop_deadline = None
        self.apply_deadlines()
        self.check_plan_budget()
        return budget

    def apply_deadlines(self) -> None:
        """Set the run scope's deadline to the earlier of the wall-clock cap's and the
        plan-relative limit's (none while paused for a person; the plan-relative one not
        while its clock stands still)."""
        if self.paused:
            return
        plan_deadline = self.plan_loop_deadline if self.plan_stopped_at is None else None
        deadlines = [
            deadline for deadline in (self.cap_loop_deadline, plan_deadline) if deadline is not None
        ]
        self.run_scope.deadline = min(deadlines) if deadlines else math.inf

    def update_plan_clock(self) -> None:
        """Stop the plan-relative clock while a person decides or a model call of the run
        waits for a rate-limit slot (either or both); start it again, its deadline moved on
        by the time stopped, when neither does. The caller applies the deadlines."""
        stopped = self.paused_at is not None or self.slot_waits > 0
        if stopped and self.plan_stopped_at is None:
            self.plan_stopped_at = self.monotonic()
            self.plan_loop_stopped_at = anyio.current_time()
        elif not stopped and self.plan_stopped_at is not None:
            self.plan_stopped_total += max(self.monotonic() - self.plan_stopped_at, 0.0)
            if self.plan_loop_deadline is not None:
                self.plan_loop_deadline += max(
                    anyio.current_time() - self.plan_loop_stopped_at, 0.0
                )
            self.plan_stopped_at = None

    def plan_elapsed(self) -> float:
        """Seconds since the run started (run's clock), time waiting for a person and time
        in which calls only waited for rate-limit slots left out."""
        now = self.plan_stopped_at if self.plan_stopped_at is not None else self.monotonic()
        return max(now - self.started - self.plan_stopped_total, 0.0)

    def plan_spent(self) -> float:
        """US dollars this run's steps spent (every attempt; a planner's own model calls
        are not steps: the absolute caps and the replan caps hold them)."""
        return self.step_spent_nanodollars / 1_000_000_000

    def check_plan_budget(self) -> None:
        """Stop the run (escalated, ``plan_budget``) when it is past a plan-relative limit."""
        budget = self.plan_budget
        if budget is None or self.stop_reason is not None or self.stopping:
            return
        if self.budget.exceeded:
            return  # past an absolute cap: that brake acts (budget_exceeded) and comes first
        detail = budget.passed(self.plan_spent(), self.plan_elapsed())
        if detail is not None:
            self.stop_plan_budget(detail)

    def stop_plan_budget(self, detail: str) -> None:
        """Stop the run now because of the plan-relative budget; ``detail`` says why."""
        if self.stop_reason is None and not self.stopping:
            self.plan_budget_detail = detail
            self.escalate("plan_budget", detail)
        self.stop("plan_budget")

    def pause(self) -> Callable[[], None]:
        """A person is deciding: from now until the returned function is called, the
        wall-clock cap and the stall detector stop whenever no step runs, and go on while
        steps run (effect-free branches keep running during an approval, and their time
        counts); each stop moves them on by the time it lasted."""
        self.waiting_for_person += 1
        self.update_pause()
        done = False

        def resume() -> None:
            nonlocal done
            if done:
                return
            done = True
            self.waiting_for_person -= 1
            self.update_pause()

        return resume

    def update_pause(self) -> None:
        """Stop the clocks when a person is deciding and no step runs; start them again,
        moved on by the time stopped, otherwise (the wall-clock cap's deadline and the
        plan-relative limit's alike)."""
        should = self.waiting_for_person > 0 and self.active == 0
        if should and self.paused_at is None:
            self.paused_at = self.monotonic()
            self.loop_paused_at = anyio.current_time()
            self.run_scope.deadline = math.inf
            self.paused = True
            self.update_plan_clock()
        elif not should and self.paused_at is not None:
            waited = max(self.monotonic() - self.paused_at, 0.0)
            loop_waited = max(anyio.current_time() - self.loop_paused_at, 0.0)
            self.paused_at = None
            self.paused_total += waited
            self.stall_clock_moved(waited)
            if self.deadline is not None:
                self.deadline += waited
            if self.cap_loop_deadline is not None:
                self.cap_loop_deadline += loop_waited
            self.paused = False
            self.update_plan_clock()
            # one assignment: the old deadline, already past, would cancel the scope at once
            self.apply_deadlines()

    @property
    def waiting_for_slot(self) -> bool:
        """A model call of the run waits for a slot of the process's rate limit
        (:mod:`plandag.models.ratelimit`): the stall detector leaves that time out."""
        return self.slot_waits > 0

    def slot_wait_started(self) -> None:
        """A model call of the run began to wait for a rate-limit slot: the stall detector
        and the plan-relative time limit stand still until no call of the run waits."""
        self.slot_waits += 1
        if self.slot_waits == 1:
            self.slot_wait_since = self.monotonic()
            self.update_plan_clock()
            self.apply_deadlines()

    def slot_wait_ended(self) -> None:
        """A model call of the run has its rate-limit slot (or stopped waiting)."""
        self.slot_waits = max(self.slot_waits - 1, 0)
        if self.slot_waits == 0 and self.slot_wait_since is not None:
            waited = max(self.monotonic() - self.slot_wait_since, 0.0)
            self.slot_wait_since = None
            self.slot_waited_total += waited
            if self.paused_at is None:
                self.last_progress += waited
            else:  # a person's pause moves the stall clock itself, from its start on
                self.last_progress += max(self.paused_at - (self.monotonic() - waited), 0.0)
            self.update_plan_clock()
            self.apply_deadlines()

    def stall_clock_moved(self, waited: float) -> None:
        """Move the stall detector's last progress on by ``waited`` seconds of a person's
        decision, less the part of it already left out while calls waited for a slot."""
        since = self.slot_wait_since
        if since is not None and self.paused_at is not None:
            waited = max(waited - max(self.monotonic() - since, 0.0), 0.0)
        self.last_progress += waited

    def result_of(self, step_id: int) -> Any:
        """The result of a succeeded step, for reference resolution.

        Raises:
            ReferenceResolutionError: the step has no result (it has not succeeded).
        """
        try:
            return self.results[step_id]
        except KeyError:
            raise ReferenceResolutionError(
                f"<step_{step_id}_result>: step {step_id} has no result (it has not "
                "succeeded); add it to depends_on"
            ) from None
