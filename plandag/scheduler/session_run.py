"""The engine of a :class:`~plandag.scheduler.session.RunSession`: the run that takes new
steps while it runs (:class:`SessionRun`), what a replanner is told of it
(:class:`SessionState`, :class:`StepFailure`), and the read-only views the patch compiler
is handed of the run as it stands."""

from __future__ import annotations

import dataclasses
from collections.abc import (
    Collection,
    Container,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any

import anyio
import anyio.lowlevel
import networkx as nx
from anyio.abc import TaskStatus

from plandag.brakes.waiting import observe_waits
from plandag.compiler.compiled import CompiledPlan, CompiledStep, allowed_hosts
from plandag.dag.graph import BottomLevels
from plandag.dag.plan import Step
from plandag.scheduler import events, spans
from plandag.scheduler.breaker import DownDependency
from plandag.scheduler.result import RunResult, StepErrorInfo, StepRecord
from plandag.scheduler.runner import _Run

__all__ = [
    "EndedView",
    "ReplacementsView",
    "SessionRun",
    "SessionState",
    "StepFailure",
    "TaintedView",
]

_ENDED = ("failed", "skipped", "cancelled")

StepsInput = Step | Mapping[str, Any] | Sequence[Step | Mapping[str, Any]]
"""What :meth:`RunSession.add` takes: one step, or a list of steps (Step objects or their
JSON objects)."""


@dataclasses.dataclass(frozen=True, slots=True)
class StepFailure:
    """Why a step did not succeed, for a replanner.

    Attributes:
        reason: the stable reason code (see :class:`~plandag.scheduler.result.StepRecord`).
        error: the error's type and message (None for a step that never ran).
        detail: the same in words, one line.
    """

    reason: str | None
    error: StepErrorInfo | None
    detail: str | None


@dataclasses.dataclass(frozen=True)
class SessionState:
    """Where a session stands (:meth:`RunSession.state`, :meth:`RunSession.settled`).

    Every id is in exactly one of ``succeeded``, ``failed``, ``pruned``, ``cancelled``,
    ``superseded``, ``held``, ``pending`` and ``running``; each tuple is sorted.

    Attributes:
        succeeded: steps that succeeded (their results are on :attr:`RunSession.records`).
        failed: steps that failed and are not superseded, with why.
        pruned: steps skipped (never started: an upstream failed, the budget, a stop) and
            not superseded.
        cancelled: steps cancelled while running (a deadline, a stall, an interruption)
            and not superseded.
        superseded: ended steps a replan replaced.
        held: steps with effects waiting for :meth:`RunSession.release_effects`.
        pending: other steps not started (waiting for parents, or for a limit).
        running: steps running (between their first attempt and their end).
        stop_reason: ``deadline``, ``stalled``, ``plan_budget`` or ``interrupted`` once the
            run was stopped (no step starts any more), else None.
        sealed: :meth:`RunSession.seal` was called.
        down: the tools and HTTP hosts the circuit breaker took out of the run, in the
            order they went down (:mod:`plandag.scheduler.breaker`).
    """

    succeeded: tuple[int, ...]
    failed: Mapping[int, StepFailure]
    pruned: tuple[int, ...]
    cancelled: tuple[int, ...]
    superseded: tuple[int, ...]
    held: tuple[int, ...]
    pending: tuple[int, ...]
    running: tuple[int, ...]
    stop_reason: str | None
    sealed: bool
    down: tuple[DownDependency, ...] = ()

    @property
    def needs_replan(self) -> tuple[int, ...]:
        """Ended steps not superseded (failed, pruned, cancelled), sorted: what a replan
        must replace for the run to succeed."""
        return tuple(sorted([*self.failed, *self.pruned, *self.cancelled]))


class EndedView(Mapping[int, str]):
    """Live view: the status of each step that ended without succeeding (O(1) lookups,
    so compiling a streamed step costs no pass over the run's records)."""

    def __init__(self, records: Mapping[int, StepRecord]) -> None:
        self._records = records

    def __getitem__(self, step_id: int) -> str:
        record = self._records.get(step_id)
        if record is None or record.status not in _ENDED:
            raise KeyError(step_id)
        return record.status

    def __iter__(self) -> Iterator[int]:
        return (key for key, record in self._records.items() if record.status in _ENDED)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class TaintedView(Container[int]):
    """Live view: the ids of steps whose results are tainted (known at compile time)."""

    def __init__(self, steps: Mapping[int, CompiledStep]) -> None:
        self._steps = steps

    def __contains__(self, step_id: object) -> bool:
        step = self._steps.get(step_id) if isinstance(step_id, int) else None
        return step is not None and step.tainted_output


class ReplacementsView(Mapping[int, Sequence[int]]):
    """Live view: the replacements of each superseded step."""

    def __init__(self, records: Mapping[int, StepRecord]) -> None:
        self._records = records

    def __getitem__(self, step_id: int) -> Sequence[int]:
        record = self._records.get(step_id)
        if record is None or record.superseded_by is None:
            raise KeyError(step_id)
        return record.superseded_by

    def __iter__(self) -> Iterator[int]:
        return (key for key, record in self._records.items() if record.superseded_by is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class SessionRun(_Run):
    """The engine of :func:`run_plan` with steps added while it runs."""

    def __init__(
        self, compiled: CompiledPlan, *args: Any, hold_effects: bool, **kwargs: Any
    ) -> None:
        super().__init__(compiled, *args, **kwargs)
        # Each ready step in a task of its own: whoever holds the session (an agent setting
        # a stored plan's output, a person's decision) gets its turn between the steps'.
        self.queues_inline_steps = False
        self.steps: dict[int, CompiledStep] = dict(compiled.steps)
        self.plan_steps: dict[int, Step] = {key: item.step for key, item in self.steps.items()}
        self.graph: nx.DiGraph = compiled.graph.copy()
        self.holding = hold_effects
        self.held: set[int] = set()
        self.host_done = False
        self.ended_normally = False
        self.started_at = 0.0
        self.closing = anyio.Event()
        self.monitor_scope = anyio.CancelScope()
        self.listed_hosts = set()
        self.http_allow = allowed_hosts(compiled.http_allow, ())
        self.claimed: set[int] = set()
        """Steps a task has taken to run (each runs in exactly one task)."""
        self.step_scopes: dict[int, anyio.CancelScope] = {}
        self.step_done: dict[int, anyio.Event] = {}
        self.discarding: set[int] = set()
        self.added: list[int] = []
        """Steps added while the run runs, in the order added (each after its parents)."""
        self.reshaped = False
        """Steps were added or discarded: the compiled plan's bottom levels no longer hold."""
        for step_id in compiled.order:
            self.hold_if_effects(step_id)

    # -- registering steps -----------------------------------------------------------------

    def hold_if_effects(self, step_id: int) -> None:
        """While effects are held, give a step with effects one more thing to wait for; a
        step that sends tainted data out (``tainted_egress``) is held whatever the session
        does, until a person approves (:meth:`release` with ``tainted=True``). Hosts of a
        step not held join the run's allow-list now, those of a held step on release."""
        compiled_step = self.steps[step_id]
        if compiled_step.tainted_egress or (self.holding and compiled_step.tool.effects != "none"):
            self.held.add(step_id)
            self.remaining[step_id] += 1
        elif compiled_step.hosts:
            self.list_hosts(compiled_step.hosts)

    @property
    def stopped(self) -> bool:
        """No step starts any more: the run was stopped, or its task group has ended."""
        return self.host_done or self.run_scope.cancel_called

    def register(self, new_steps: Sequence[CompiledStep], pruned: Collection[int] = ()) -> None:
        """Add compiled steps (in topological order) and start those that are ready.

        ``pruned``: ids among them downstream of a step that already ended without
        succeeding (:attr:`~plandag.compiler.patch.PatchResult.pruned`); they end skipped
        at once (:meth:`prune`), as if they had been in the run when it ended.
        """
        steps = self.steps
        records = self.records
        new_ids = {item.id for item in new_steps}
        for compiled_step in new_steps:
            step_id = compiled_step.id
            tool = compiled_step.tool
            steps[step_id] = compiled_step
            self.plan_steps[step_id] = compiled_step.step
            records[step_id] = StepRecord(id=step_id, tool=tool.name)
            waiting = 0
            for parent in compiled_step.parents:
                if parent not in new_ids:
                    # Children are read when the parent succeeds (runner.succeed): a new
                    # CompiledStep makes the new child visible to it.
                    old = steps[parent]
                    steps[parent] = dataclasses.replace(old, children=(*old.children, step_id))
                if records[parent].status != "succeeded":
                    waiting += 1
            self.remaining[step_id] = waiting
            limit = self.limits_by_name.get(tool.name, tool.max_concurrency)
            if limit is not None and tool.name not in self.limiters_by_tool:
                self.limiters_by_tool[tool.name] = anyio.CapacityLimiter(limit)
            self.tool_limiter[step_id] = self.limiters_by_tool.get(tool.name)
            self.graph.add_node(step_id)
            self.graph.add_edges_from((parent, step_id) for parent in compiled_step.parents)
            self.hold_if_effects(step_id)
        ids = tuple(item.id for item in new_steps)
        self.added.extend(ids)
        self.reshaped = True
        self.start_order = None  # the levels of the new steps' ancestors may have grown
        if self.observers:
            self.emit(events.StepsAdded(self.run_id, ids, self.now()))
        if pruned:
            to_prune = set(pruned)
            for step_id in ids:
                if step_id in to_prune:
                    self.prune(step_id)
        if self.stopped:
            cause = self.stop_cause()
            for step_id in ids:
                self.interrupt(records[step_id], cause)
            return
        for step_id in ids:
            if self.remaining[step_id] == 0:
                self.spawn(step_id)

    def prune(self, step_id: int) -> None:
        """Skip a new step whose upstream already ended without succeeding, with the
        reason and detail :meth:`skip_descendants` would have given it then.

        Its parents are read from their records (each already ended, or pending):
        failed parents, and the failed steps upstream of skipped ones (``upstream_failed``),
        make ``upstream_failed`` with ``"upstream N failed"`` (every such id, sorted); a
        failure comes first. Else a parent the cost cap skipped makes ``budget`` with the
        detail its descendants have. A step whose parents ended only because the run was
        stopped is left pending: :meth:`register` then ends it with the stop's reason.
        """
        records = self.records
        record = records[step_id]
        if record.status != "pending":
            return
        failed: set[int] = set()
        budget_detail: str | None = None
        for parent in self.steps[step_id].parents:
            parent_record = records[parent]
            if parent_record.status == "failed":
                failed.add(parent)
            elif parent_record.status == "skipped" and parent in self.failed_upstream:
                failed.update(self.failed_upstream[parent])
            elif (
                parent_record.status == "skipped"
                and parent_record.reason == "budget"
                and budget_detail is None
            ):
                budget_detail = self.budget_detail(parent)
        if failed:
            upstream = sorted(failed)
            self.failed_upstream[step_id] = upstream
            reason = "upstream_failed"
            detail = f"upstream {', '.join(map(str, upstream))} failed"
        elif budget_detail is not None:
            reason, detail = "budget", budget_detail
        else:
            return
        now = self.now()
        record.status = "skipped"
        record.reason = reason
        record.detail = detail
        record.ended_at = now
        if self.observers:
            self.emit(events.StepSkipped(self.run_id, step_id, reason, detail, now))

    def budget_detail(self, step_id: int) -> str:
        """The detail of a step skipped downstream of ``step_id``, which the cost cap
        skipped: the refused step's own, or (``step_id`` is itself downstream of it) the
        one ``step_id`` already has."""
        records = self.records
        downstream = any(
            records[parent].status == "skipped" and records[parent].reason == "budget"
            for parent in self.steps[step_id].parents
        )
        detail = records[step_id].detail
        if downstream and detail:
            return detail
        return f"upstream {step_id} was not started: the cost cap left no room"

    def priorities(self) -> BottomLevels:
        """As the engine's, over the steps the run holds now: the plan's, then those added
        (worked out again after steps were added or discarded)."""
        levels = self.start_order
        if levels is None:
            order: Sequence[int] = self.compiled.order
            if self.reshaped:
                steps = self.steps
                order = [step_id for step_id in (*order, *self.added) if step_id in steps]
            levels = self.start_order = self.weigh(order, not self.reshaped)
        return levels

    def spawn(self, step_id: int) -> None:
        """Start a ready step in a task of its own."""
        task_group = self.task_group
        assert task_group is not None
        self.active += 1
        task_group.start_soon(self.run_step, step_id)

    def release(self, *, tainted: bool = False) -> None:
        """Stop holding effects; start every held step whose parents have succeeded.

        Args:
            tainted: release the steps that send tainted data out too (a person approved
                them); otherwise they stay held.
        """
        self.holding = False
        steps = self.steps
        held = sorted(
            step_id for step_id in self.held if tainted or not steps[step_id].tainted_egress
        )
        self.held.difference_update(held)
        for step_id in held:
            self.remaining[step_id] -= 1
            self.list_hosts(steps[step_id].hosts)
        if self.stopped:
            return
        for step_id in held:
            if self.remaining[step_id] == 0 and self.records[step_id].status == "pending":
                self.spawn(step_id)

    async def run_one_step(self, step_id: int) -> int | None:
        """Run one step (as the engine does) in a cancel scope of its own, so that
        :meth:`discard` can cancel it alone; a step already taken by another task, or
        discarded, withdrawn or rejected before its task began, is not run."""
        if (
            step_id in self.claimed
            or step_id not in self.records
            or self.records[step_id].status != "pending"
        ):
            return None
        self.claimed.add(step_id)
        scope = self.step_scopes[step_id] = anyio.CancelScope()
        done = self.step_done[step_id] = anyio.Event()
        try:
            with scope:
                return await super().run_one_step(step_id)
            return None  # discarded while running: cancelled by its own scope only
        finally:
            if self.step_scopes.get(step_id) is scope:
                del self.step_scopes[step_id]
            done.set()

    def interrupt(self, record: StepRecord, reason: str = "interrupted") -> None:
        """As the engine's; a step being discarded ends ``cancelled`` with reason
        ``discarded``."""
        if record.id not in self.discarding or record.status != "running":
            super().interrupt(record, reason)
            return
        now = self.now()
        record.status = "cancelled"
        record.reason = "discarded"
        record.detail = (
            "the planner's attempt that wrote this step broke off mid-stream; the step was "
            "cancelled and its attempt discarded whole"
        )
        self.close(record.id, record)
        if self.observers:
            self.emit(events.StepCancelled(self.run_id, record.id, "discarded", now, record))

    async def discard(self, step_ids: Collection[int]) -> tuple[int, ...]:
        """Remove steps and their descendants from the run whole: running ones are
        cancelled (and waited for), then every record, result and edge of them is dropped;
        emits :class:`~plandag.scheduler.events.StepsDiscarded`. Returns the ids removed,
        sorted."""
        graph = self.graph
        doomed: set[int] = set()
        for step_id in step_ids:
            if step_id in self.records and step_id not in doomed:
                doomed.add(step_id)
                doomed.update(nx.descendants(graph, step_id))
        if not doomed:
            return ()
        self.discarding.update(doomed)
        try:
            waits = []
            for step_id in sorted(doomed):
                scope = self.step_scopes.get(step_id)
                if scope is not None:
                    scope.cancel()
                    waits.append(self.step_done[step_id])
            for done in waits:
                await done.wait()
        finally:
            self.discarding.difference_update(doomed)
        steps = self.steps
        for step_id in doomed:
            for parent in steps[step_id].parents:
                if parent in doomed or parent not in steps:
                    continue
                old = steps[parent]
                steps[parent] = dataclasses.replace(
                    old, children=tuple(child for child in old.children if child not in doomed)
                )
        for step_id in doomed:
            del steps[step_id]
            del self.plan_steps[step_id]
            del self.records[step_id]
            self.remaining.pop(step_id, None)
            self.held.discard(step_id)
            self.claimed.discard(step_id)
            self.step_done.pop(step_id, None)
            self.results.pop(step_id, None)
            self.started_monotonic.pop(step_id, None)
            self.failed_upstream.pop(step_id, None)
            self.tool_limiter.pop(step_id, None)
        graph.remove_nodes_from(doomed)
        self.added = [step_id for step_id in self.added if step_id not in doomed]
        self.reshaped = True
        self.start_order = None
        removed = tuple(sorted(doomed))
        if self.observers:
            self.emit(events.StepsDiscarded(self.run_id, removed, self.now()))
        return removed

    # -- the session's tasks ---------------------------------------------------------------

    async def host(self, *, task_status: TaskStatus[None]) -> None:
        """Hold the steps' task group open, under the run's deadline, until the session
        closes (then wait for the running steps) or the run is stopped."""
        limits = self.limits
        self.started_at = self.now()
        self.started = self.last_progress = self.monotonic()
        max_seconds = limits.seconds_cap
        if max_seconds is not None:
            self.deadline = self.started + max_seconds
            self.cap_loop_deadline = anyio.current_time() + max_seconds
            self.run_scope = anyio.CancelScope(deadline=self.cap_loop_deadline)
            self.guard()
        if self.observers:
            self.emit(events.RunStarted(self.run_id, len(self.records), self.started_at))
        if self.pending_estimate is not None:
            estimate, measured = self.pending_estimate
            self.arm_plan_budget(estimate, measured)
        self.run_span = spans.start_run(self.run_id, len(self.records))
        try:
            with self.run_scope, observe_waits(self):
                async with anyio.create_task_group() as task_group:
                    self.task_group = task_group
                    starts = self.seed() if self.completed else self.compiled.roots
                    if len(starts) > 1:
                        starts = self.priorities().highest_first(starts)
                    for step_id in starts:
                        if self.remaining[step_id] == 0:
                            self.spawn(step_id)
                    task_status.started()
                    await self.closing.wait()
            self.ended_normally = not self.run_scope.cancel_called
        finally:
            # the run's outcome is the agent's to tell (its replans and joiner follow)
            spans.end_run(self.run_span, "ended" if self.ended_normally else "stopped")
            self.host_done = True
            self.task_group = None
            self.monitor_scope.cancel()
            if self.idle_event is not None:
                self.idle_event.set()

    async def watch_session(self, send: bool) -> None:
        """The heartbeat monitor, until the host ends."""
        with self.monitor_scope:
            await self.watch(send)

    async def wait_idle(self) -> None:
        """Return when no step task runs (or the run's task group has ended)."""
        await anyio.lowlevel.checkpoint()
        while self.active and not self.host_done:
            event = self.idle_event = anyio.Event()
            await event.wait()

    def close_session(self) -> RunResult:
        """End the records still open and build the result (after the host ended)."""
        self.tool_calls.close()
        if self.ended_normally:
            now = self.now()
            for step_id, record in self.records.items():
                if record.status != "pending":
                    continue
                record.status = "skipped"
                record.reason = "effects_held"
                record.detail = (
                    "never started: its tool has effects, which wait for approval, and the "
                    "run ended before they were approved"
                    if step_id in self.held
                    else "never started: it waits on a step with effects that was never approved"
                )
                record.ended_at = now
                if self.observers:
                    self.emit(
                        events.StepSkipped(self.run_id, step_id, "effects_held", record.detail, now)
                    )
        return self.finish(self.started_at, self.started)
