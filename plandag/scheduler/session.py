"""A dynamic run: steps join it while it runs
(ARCHITECTURE.md, "Execution", "Retry vs replan", "Replanning", "Streaming").

A :class:`RunSession` runs on the engine of :func:`~plandag.scheduler.run_plan` (the same
event-driven dispatch, limits, retries, checks, pruning and brakes), and lets its caller:

* **stream** steps in one by one (:meth:`RunSession.add`): each is compiled against the run
  as it stands (:func:`plandag.compiler.patch.compile_patch`) and starts at once when its
  parents have all succeeded, before the rest of the plan has arrived. With
  ``hold_effects`` (the default), a step whose tool has effects waits for
  :meth:`RunSession.release_effects`: "steps with effects wait until the whole plan is
  compiled (and approved when approval is required)". A streamed step may arrive after a
  step it needs has failed: with ``prune_on_ended_parents=True`` it is added already
  skipped (``upstream_failed``), as if it had been there when the failure came, and the
  replan that follows replaces it;
* **replan**: a failure prunes only its descendants; independent branches run on while the
  caller (a replanner) awaits :meth:`RunSession.settled` and thinks; a patch of new steps
  (new ids) may depend on completed steps, whose results are reused, never re-run; the
  ended steps it replaces gain ``superseded_by`` (:meth:`RunSession.supersede`) and no
  longer fail the run; :meth:`RunSession.set_output` replaces the output.

Usage::

    async with open_session(Plan(goal="...", steps=[]), registry, limits=limits) as session:
        async for step in planner_stream:          # streaming dispatch
            session.add([step], prune_on_ended_parents=True)
        session.set_output("<step_4_result>", allow_ended=True)
        session.seal()
        session.release_effects()                  # after approval, if any
        state = await session.settled()
        if state.failed:                           # replanning
            patch = await replanner(state, session.records)
            session.add(patch, supersedes=state.needs_replan)
    result = session.result()

Leaving the ``async with`` block waits for the running steps; steps still held (never
released) end ``skipped`` with reason ``effects_held``. If the caller's scope is cancelled,
running steps end ``cancelled`` and the others ``skipped`` (``interrupted``), as in
``run_plan``; if the block raises, the run is interrupted the same way and the error
propagates. The brakes (deadline, cost and token caps, heartbeat, stall) cover the whole
session, from its opening: time the replanner spends counts against the wall-clock cap.
"""

from __future__ import annotations

import contextlib
import dataclasses
import types
import uuid
from collections.abc import (
    AsyncIterator,
    Callable,
    Collection,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import networkx as nx

from plandag.brakes.budget import Budget, PlanBudget
from plandag.brakes.clock import Clock
from plandag.brakes.retry import RetryPolicy
from plandag.compiler.compile import DEFAULT_MAX_ARG_BYTES, DEFAULT_MAX_STEPS, compile_plan
from plandag.compiler.compiled import CompiledPlan, CompiledStep
from plandag.compiler.patch import PatchBase, check_output, compile_patch
from plandag.dag.diagnostics import Diagnostic
from plandag.dag.plan import Plan, Step
from plandag.errors import Classifier, PlanBudgetError, classify_error
from plandag.scheduler import events
from plandag.scheduler.breaker import DownDependency
from plandag.scheduler.estimate import PlanEstimate, estimate_steps
from plandag.scheduler.limits import RunLimits
from plandag.scheduler.result import EscalationMode, RunResult, StepRecord
from plandag.scheduler.session_run import (
    EndedView,
    ReplacementsView,
    SessionRun,
    SessionState,
    StepFailure,
    TaintedView,
)
from plandag.tools.boundary import WriteBoundary
from plandag.tools.registry import Registry

if TYPE_CHECKING:
    from plandag.access import ModelAccessProtocol

__all__ = ["RunSession", "SessionState", "StepFailure", "open_session"]

_ENDED = ("failed", "skipped", "cancelled")

StepsInput = Step | Mapping[str, Any] | Sequence[Step | Mapping[str, Any]]
"""What :meth:`RunSession.add` takes: one step, or a list of steps (Step objects or their
JSON objects)."""


class RunSession:
    """A run that takes new steps while it runs; opened by :func:`open_session`.

    Methods that change the run (:meth:`add`, :meth:`supersede`, :meth:`set_output`,
    :meth:`release_effects`...) are plain functions: call them from the event loop, inside
    the ``async with`` block. They raise :class:`RuntimeError` once the block has exited.
    """

    def __init__(
        self,
        run: SessionRun,
        registry: Registry,
        *,
        max_steps: int,
        max_arg_bytes: int,
    ) -> None:
        self._run = run
        self._registry = registry
        self._max_steps = max_steps
        self._max_arg_bytes = max_arg_bytes
        self._sealed = False
        self._result: RunResult | None = None
        self._gated = False

    # -- what it holds -----------------------------------------------------------------------

    @property
    def max_steps(self) -> int:
        """The most steps the session may hold in all (steps added past it do not compile)."""
        return self._max_steps

    @property
    def run_id(self) -> str:
        """The run's id (tools see it in ``ctx.run_id``)."""
        return self._run.run_id

    @property
    def plan(self) -> Plan:
        """The plan header the session was opened with (goal, params)."""
        return self._run.compiled.plan

    @property
    def records(self) -> Mapping[int, StepRecord]:
        """Every step's record by id, live (read-only view): results of succeeded steps,
        errors of failed ones."""
        return types.MappingProxyType(self._run.records)

    @property
    def steps(self) -> Mapping[int, CompiledStep]:
        """Every step of the run, compiled, by id (read-only view)."""
        return types.MappingProxyType(self._run.steps)

    @property
    def graph(self) -> nx.DiGraph:
        """The run's dependency graph so far (step ids, edges parent → child). Read it;
        do not change it."""
        return self._run.graph

    @property
    def output(self) -> Any:
        """The output that will be resolved at the end (the header's, or the last
        :meth:`set_output`)."""
        return self._run.output

    @property
    def tainted(self) -> tuple[int, ...]:
        """Ids of the succeeded steps whose results are tainted (came from outside, or
        were computed from such results), sorted: a model shown them writes tainted text
        (ARCHITECTURE.md, "Untrusted content")."""
        return tuple(
            sorted(
                key
                for key, record in self._run.records.items()
                if record.status == "succeeded" and record.tainted
            )
        )

    @property
    def outside_content_seen(self) -> bool:
        """A step whose result is tainted has run (succeeded with a tainted result, or
        failed or was cancelled after an attempt, its error possibly quoting outside
        content): a model shown the run's state now reads outside content, and what it
        writes is tainted (ARCHITECTURE.md, "Untrusted content")."""
        steps = self._run.steps
        return any(
            record.attempts > 0
            and (record.tainted or (record.status != "succeeded" and steps[key].tainted_output))
            for key, record in self._run.records.items()
        )

    @property
    def http_allow(self) -> tuple[str, ...]:
        """The run's HTTP allow-list now: configured patterns, then the hosts listed by
        the steps released so far (none in a read-only run)."""
        return self._run.http_allow

    @property
    def sealed(self) -> bool:
        """:meth:`seal` was called."""
        return self._sealed

    @property
    def holding_effects(self) -> bool:
        """Steps with effects added now wait for :meth:`release_effects`."""
        return self._run.holding

    def stop_at_deadline(self) -> None:
        """End the run now, as its wall-clock cap would: for a caller whose model call
        cannot finish before the deadline (a Retry-After longer than the time left,
        :class:`~plandag.models.DeadlineReachedError`). Running steps end
        ``cancelled`` and the others ``skipped``, reason ``deadline``; the result is
        ``timed_out`` with ``stop_reason`` ``deadline``.

        Raises:
            RuntimeError: the session is closed.
        """
        self._check_open()
        self._run.stop("deadline")

    @property
    def plan_budget(self) -> PlanBudget | None:
        """The limits relative to the plan's estimate (:meth:`arm_plan_budget`), or None
        while none applies."""
        return self._run.plan_budget

    @property
    def stop_reason(self) -> str | None:
        """``deadline``, ``stalled``, ``plan_budget`` or ``interrupted`` once the run was
        stopped, else None."""
        run = self._run
        return run.stop_cause() if run.run_scope.cancel_called else None

    @property
    def budget(self) -> Budget:
        """The run's :class:`~plandag.brakes.budget.Budget` (the one given to
        :func:`open_session`, else the session's own from ``limits``): a planner reserves
        and settles its model calls on it, so they count against the same caps."""
        return self._run.budget

    @property
    def paused_s(self) -> float:
        """Seconds the wall-clock cap stood still so far (a person deciding while no step
        ran; :meth:`waiting_for_person`)."""
        return self._run.paused_total

    @property
    def remaining_s(self) -> float | None:
        """Seconds left before the session's wall-clock cap (``limits.max_seconds``), or
        None without one. The cap stops the steps, not the caller's own awaits: a planner
        bounds its model calls with it (``anyio.fail_after(session.remaining_s)``)."""
        return self._run.remaining_s()

    @property
    def first_tool_start_s(self) -> float | None:
        """Seconds from the session's opening to the first attempt of any step (wall
        clock), or None while no step has started: the "time to first tool"."""
        run = self._run
        if run.first_started_at is None:
            return None
        return max(0.0, run.first_started_at - run.started_at)

    # -- changing the run --------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._result is not None:
            raise RuntimeError("the session is closed: its async with block has exited")

    def _base(self) -> PatchBase:
        run = self._run
        return PatchBase(
            run.compiled.plan,
            run.plan_steps,
            EndedView(run.records),
            ReplacementsView(run.records),
            TaintedView(run.steps),
        )

    def add(
        self,
        steps: StepsInput,
        *,
        supersedes: Collection[int] = (),
        prune_on_ended_parents: bool = False,
        tainted_author: bool = False,
    ) -> tuple[Diagnostic, ...]:
        """Compile steps against the run and add them; those whose parents have all
        succeeded start at once (steps with effects wait while effects are held).

        Args:
            steps: one step or a list of steps (:class:`~plandag.dag.plan.Step` objects
                or their JSON objects). New ids only; ``depends_on`` and references may
                name existing steps that succeeded or have not ended, and each other.
            supersedes: ids of ended steps (failed, skipped, cancelled) these steps
                replace: once the steps are added, each gains ``superseded_by`` = the new
                ids, as :meth:`supersede` does. Checked before anything is added.
            prune_on_ended_parents: the steps may also name steps that ended without
                succeeding (streaming dispatch: a step of the plan arrived after its
                upstream failed). Those downstream of one are added already ``skipped``
                with the reason and detail they would have got had they been there when
                it ended (``upstream_failed``, ``"upstream N failed"``; or ``budget``),
                so they are in :attr:`SessionState.pruned` and ``needs_replan`` and a
                replan replaces them. False (a replan's patch): naming them is a
                ``PlanError``.
            tainted_author: the steps were written by a model that had read outside
                content (a replan shown tainted results): their literal args are tainted,
                so an ``egress`` step among them is held until :meth:`approve_effects`
                (ARCHITECTURE.md, "Untrusted content").

        Returns:
            The warnings (``implied_dependency``: the dependency was added).

        Raises:
            PlanError: the steps do not compile (every diagnostic at once; see
                :func:`plandag.compiler.patch.compile_patch`); nothing was added.
            ValueError: ``supersedes`` names a step that does not exist, has not ended,
                succeeded, or is already superseded; nothing was added.
            RuntimeError: the session is closed.

        After a stop (deadline, stall, interruption) steps are still compiled and added,
        and end ``skipped`` at once with the stop's reason.
        """
        self._check_open()
        run = self._run
        self._check_superseded(supersedes)
        items: Sequence[Step | Mapping[str, Any]] = (
            [steps] if isinstance(steps, Step | Mapping) else steps
        )
        patch = compile_patch(
            self._base(),
            items,
            self._registry,
            params=run.params,
            read_only=run.compiled.read_only,
            write_boundary=run.compiled.write_boundary,
            replaces=supersedes,
            max_steps=self._max_steps,
            max_arg_bytes=self._max_arg_bytes,
            prune_on_ended_parents=prune_on_ended_parents,
            http_allow=run.compiled.http_allow,
            tainted_author=tainted_author,
        )
        if run.plan_budget is not None and patch.steps:
            self._check_patch_budget(patch.steps)
        run.register(patch.steps, patch.pruned)
        if supersedes and patch.steps:
            self.supersede(supersedes, patch.ids)
        return patch.diagnostics

    def _check_patch_budget(self, new_steps: Sequence[CompiledStep]) -> None:
        """Refuse a patch whose projection passes the plan-relative limits: stop the run
        (escalated, ``plan_budget``) and raise :class:`PlanBudgetError`."""
        run = self._run
        budget = run.plan_budget
        assert budget is not None
        steps = {item.id: item for item in new_steps}
        graph = nx.DiGraph()
        graph.add_nodes_from(steps)
        graph.add_edges_from(
            (parent, item.id) for item in new_steps for parent in item.parents if parent in steps
        )
        estimate = estimate_steps(
            steps, graph, measured=run.plan_measured, tokens_cost=run.plan_tokens_cost
        )
        refusal = budget.patch_refusal(
            run.plan_spent(), run.plan_elapsed(), estimate, tuple(sorted(steps))
        )
        if refusal is not None:
            run.stop_plan_budget(refusal)
            raise PlanBudgetError(refusal)

    def arm_plan_budget(
        self,
        estimate: PlanEstimate,
        *,
        measured: Mapping[str, float] | None = None,
        tokens_cost: Callable[[int], float | None] | None = None,
    ) -> PlanBudget | None:
        """Hold the run to its limits relative to the plan's estimate (``limits``'
        ``plan_cost_factor`` and ``plan_time_factor``), spend and time counted from the
        session's opening (time waiting for a person left out): call it once the plan is
        known (after planning, and approval where needed). From then on every step added
        is a replan patch, checked when it has compiled: projected spend (spent so far +
        the patch's estimated cost) and time (elapsed + the patch's critical path) past a
        limit stop the run instead, and :meth:`add` raises :class:`PlanBudgetError`.

        Args:
            estimate: the plan's estimate (:mod:`plandag.scheduler.estimate`); a planner
                adds the time of its own model calls (:class:`ModelCallEstimate`), since
                elapsed time counts from the session's opening.
            measured: seconds per tool measured in the run store, for patches' estimates.
            tokens_cost: US dollars of a number of tokens on the run's model, likewise.

        Returns:
            The :class:`~plandag.brakes.budget.PlanBudget`, or None when no limit
            applies (both factors lifted, or the estimate unknown). A run already past a
            limit is stopped at once.

        Raises:
            RuntimeError: the session is closed.
        """
        self._check_open()
        return self._run.arm_plan_budget(estimate, measured, tokens_cost)

    def check_plan_budget(self) -> None:
        """Check the plan-relative limits now (the runner checks them as steps end and
        attempts are settled; a planner checks them after its own model calls, whose time
        counts): a run past one stops, escalated (``plan_budget``).

        Raises:
            RuntimeError: the session is closed.
        """
        self._check_open()
        self._run.check_plan_budget()

    def _check_superseded(self, old_ids: Collection[int]) -> None:
        records = self._run.records
        for step_id in old_ids:
            record = records.get(step_id)
            if record is None:
                raise ValueError(f"step {step_id} does not exist: nothing to supersede")
            if record.status not in _ENDED:
                raise ValueError(
                    f"step {step_id} is {record.status}: only failed, skipped or cancelled "
                    "steps can be superseded"
                )
            if record.superseded_by is not None:
                raise ValueError(
                    f"step {step_id} is already superseded by steps "
                    f"{', '.join(map(str, record.superseded_by))}"
                )

    def supersede(self, old_ids: Collection[int], new_ids: Collection[int]) -> None:
        """Mark ended steps as replaced by a replan's steps.

        Each record of ``old_ids`` keeps its status and error and gains ``superseded_by``
        (``new_ids``, sorted); a superseded step no longer fails the run
        (ARCHITECTURE.md, "States and exit codes"). Emits one
        :class:`~plandag.scheduler.events.StepSuperseded` per old id.

        Args:
            old_ids: failed, skipped or cancelled steps, not superseded yet.
            new_ids: the steps replacing them (already added; at least one).

        Raises:
            ValueError: an old id that does not exist, has not ended, succeeded or is
                already superseded; a new id that does not exist or is also old; no new
                id. Nothing is marked then.
            RuntimeError: the session is closed.
        """
        self._check_open()
        run = self._run
        replacement = sorted(set(new_ids))
        if not replacement:
            raise ValueError("supersede needs at least one new step id")
        self._check_superseded(old_ids)
        for step_id in replacement:
            if step_id not in run.records:
                raise ValueError(f"step {step_id} does not exist: add it before superseding")
            if step_id in old_ids:
                raise ValueError(f"step {step_id} cannot supersede itself")
        now = run.now()
        for step_id in sorted(set(old_ids)):
            run.records[step_id].superseded_by = list(replacement)
            if run.observers:
                run.emit(events.StepSuperseded(run.run_id, step_id, tuple(replacement), now))

    async def discard(self, step_ids: Collection[int]) -> tuple[int, ...]:
        """Take steps out of the run whole, with every step downstream of them: the steps
        of a planner attempt that broke off mid-stream, so that the retried attempt's plan
        runs as if it were the first (ARCHITECTURE.md, "Streaming").

        Running ones are cancelled (reason ``discarded``) and waited for; then their
        records, results and edges are dropped, and their ids may be added again. Steps
        with effects among them had not started (they wait for the whole plan). Spend
        already charged stays charged.

        Args:
            step_ids: ids of steps in the run (unknown ids are ignored).

        Returns:
            Every id removed (``step_ids`` and their descendants), sorted.

        Raises:
            RuntimeError: the session is closed.
        """
        self._check_open()
        return await self._run.discard(step_ids)

    def set_output(self, output: Any, *, allow_ended: bool = False) -> tuple[Diagnostic, ...]:
        """Replace the run's output (a streamed plan's, or a replan's).

        Args:
            output: any JSON value; references (``<step_N_result.path>``,
                ``<param.NAME>``) at any depth. Resolved when the session closes, if every
                step it references succeeded (else the result's output is None).
            allow_ended: references may name steps that ended without succeeding (a
                streamed plan's output: its steps may have failed or been pruned before
                the plan ended; a replan then replaces the output). False: an error.

        Returns:
            The warnings (none today).

        Raises:
            PlanError: a reference to a step that does not exist or (unless
                ``allow_ended``) ended without succeeding, an undeclared param, a
                malformed reference.
            RuntimeError: the session is closed.
        """
        self._check_open()
        diagnostics = check_output(self._base(), output, allow_ended=allow_ended)
        self._run.output = output
        return diagnostics

    def seal(self) -> None:
        """Say the plan is complete (the stream has ended). Informational: it releases
        nothing (:meth:`release_effects` does), and a replan may still :meth:`add`."""
        self._check_open()
        self._sealed = True

    def release_effects(self) -> None:
        """Let steps with effects start: every held step whose parents have succeeded
        starts now, and steps with effects added later are not held (until
        :meth:`hold_effects`). Call it once the whole plan compiled, and was approved
        where approval is required. Steps that send tainted data out stay held: only
        :meth:`approve_effects` (a person's decision) releases them.

        Raises:
            RuntimeError: the session is closed.
        """
        self._check_open()
        if self._gated:
            return  # released by approve_effects()
        self._run.release()

    def require_approval(self) -> None:
        """Gate effects behind a person's decision: from now on :meth:`release_effects`
        releases nothing until :meth:`approve_effects` is called (ARCHITECTURE.md, "People
        in the loop")."""
        self._check_open()
        self._gated = True

    def approve_effects(self, *, hold_again: bool = True) -> None:
        """A person approved the plan so far: release the held steps with effects.

        Args:
            hold_again: steps with effects added later (a replan's) are held again, and
                wait for the next :meth:`approve_effects` (every revised plan passes the same
                approval as the first).

        Raises:
            RuntimeError: the session is closed.
        """
        self._check_open()
        self._run.release(tainted=True)
        if hold_again:
            self._run.holding = True

    @contextlib.contextmanager
    def waiting_for_person(self) -> Iterator[None]:
        """A block during which the run waits for a person (an approval). Steps without
        effects go on running (a pending approval never holds them), and the wall-clock
        cap and the stall detector count while any step runs; they stop only while no step
        runs, and go on afterwards moved on by the time stopped (ARCHITECTURE.md, "People
        in the loop")."""
        self._check_open()
        resume = self._run.pause()
        try:
            yield
        finally:
            resume()

    def hold_effects(self) -> None:
        """Hold again the steps with effects added from now on (a replan that must be
        approved before its effects run). Steps already released are not affected.

        Raises:
            RuntimeError: the session is closed.
        """
        self._check_open()
        self._run.holding = True

    def withdraw(self, step_ids: Collection[int], detail: str) -> tuple[int, ...]:
        """Drop steps that have not started: each ends ``skipped`` with reason ``replanned``
        and ``detail``, and never starts (a replan replaces them; ARCHITECTURE.md,
        "Replanning", total and partial strategies). Steps running or ended are left as
        they are.

        Args:
            step_ids: the steps to drop; those not pending (or held) are ignored.
            detail: why, in words (``"replanned with a person's instruction"``).

        Returns:
            The ids dropped, sorted.

        Raises:
            ValueError: an id the run does not have.
            RuntimeError: the session is closed.
        """
        self._check_open()
        run = self._run
        unknown = sorted(set(step_ids) - set(run.records))
        if unknown:
            raise ValueError(f"steps {unknown} do not exist: nothing to withdraw")
        dropped = []
        now = run.now()
        for step_id in sorted(set(step_ids)):
            record = run.records[step_id]
            if record.status != "pending":
                continue
            run.held.discard(step_id)
            record.status = "skipped"
            record.reason = "replanned"
            record.detail = detail
            record.ended_at = now
            dropped.append(step_id)
            if run.observers:
                run.emit(events.StepSkipped(run.run_id, step_id, "replanned", detail, now))
        return tuple(dropped)

    def edit_step(self, step_id: int, args: Mapping[str, Any]) -> CompiledStep:
        """Give a step that has not started new arguments (a person edited it in the
        approval request; ARCHITECTURE.md, "People in the loop"). The step keeps its id,
        tool, checks and place in the graph; it is compiled again with ``args``.

        Args:
            step_id: a pending (or held) step.
            args: its whole new arguments (references allowed, to the steps it already
                depends on).

        Returns:
            The step compiled again.

        Raises:
            ValueError: no such step, it has started or ended, or the new arguments would
                change which steps it depends on (edit values, not dependencies).
            PlanError: the edited step does not compile (bad arguments for its tool, a
                write target outside the boundary...).
            RuntimeError: the session is closed.
        """
        self._check_open()
        run = self._run
        record = run.records.get(step_id)
        if record is None:
            raise ValueError(f"step {step_id} does not exist: nothing to edit")
        if record.status != "pending" or step_id in run.claimed:
            raise ValueError(
                f"step {step_id} is {record.status}: only a step that has not started can be edited"
            )
        old = run.steps[step_id]
        document = old.step.model_dump(mode="json", exclude_none=True)
        document["args"] = dict(args)
        others = {key: step for key, step in run.plan_steps.items() if key != step_id}
        base = PatchBase(
            run.compiled.plan,
            others,
            EndedView(run.records),
            ReplacementsView(run.records),
            TaintedView(run.steps),
        )
        patch = compile_patch(
            base,
            [document],
            self._registry,
            params=run.params,
            read_only=run.compiled.read_only,
            write_boundary=run.compiled.write_boundary,
            max_steps=self._max_steps,
            max_arg_bytes=self._max_arg_bytes,
            http_allow=run.compiled.http_allow,
        )
        [new] = patch.steps
        if tuple(new.parents) != tuple(old.parents):
            raise ValueError(
                f"step {step_id}: the edit changes the steps it depends on "
                f"({', '.join(map(str, old.parents)) or 'none'} -> "
                f"{', '.join(map(str, new.parents)) or 'none'}); edit values, not references"
            )
        edited = dataclasses.replace(new, children=old.children)
        run.steps[step_id] = edited
        run.plan_steps[step_id] = edited.step
        return edited

    def reject_steps(self, step_ids: Collection[int], detail: str) -> tuple[int, ...]:
        """Drop steps a person rejected in the approval request, with every step
        downstream of them: each ends ``skipped`` with reason ``rejected`` and ``detail``
        (its descendants: ``"upstream N was rejected"``) and never starts; a replan may
        replace them.

        Args:
            step_ids: steps that have not started.
            detail: why, in words (who rejected it, and their feedback).

        Returns:
            Every id dropped, sorted.

        Raises:
            ValueError: no such step, or one that has started or ended.
            RuntimeError: the session is closed.
        """
        self._check_open()
        run = self._run
        for step_id in step_ids:
            record = run.records.get(step_id)
            if record is None:
                raise ValueError(f"step {step_id} does not exist: nothing to reject")
            if record.status != "pending" or step_id in run.claimed:
                raise ValueError(
                    f"step {step_id} is {record.status}: only a step that has not started "
                    "can be rejected"
                )
        rejected = set(step_ids)
        doomed = set(rejected)
        for step_id in rejected:
            doomed.update(nx.descendants(run.graph, step_id))
        now = run.now()
        dropped = []
        for step_id in sorted(doomed):
            record = run.records[step_id]
            if record.status != "pending":
                continue
            run.held.discard(step_id)
            record.status = "skipped"
            record.reason = "rejected"
            if step_id in rejected:
                record.detail = detail
            else:
                upstream = sorted(rejected & nx.ancestors(run.graph, step_id))
                record.detail = f"upstream {', '.join(map(str, upstream))} was rejected"
            record.ended_at = now
            dropped.append(step_id)
            if run.observers:
                run.emit(events.StepSkipped(run.run_id, step_id, "rejected", record.detail, now))
        return tuple(dropped)

    def amend(
        self,
        reject_steps: Collection[int],
        edit_steps: Mapping[int, Mapping[str, Any]],
        detail: str,
    ) -> tuple[int, ...]:
        """Apply a person's step-by-step approval to the run (ARCHITECTURE.md, "People in
        the loop"): each edited step takes its new argument values (an edit's keys replace
        those arguments, the others are kept; :meth:`edit_step`), then the rejected steps
        and every step downstream of them end ``skipped`` with reason ``rejected``
        (:meth:`reject_steps`, with ``detail``).

        Every chosen step is checked before anything changes: when one has started (a
        step without effects runs while the person decides), nothing is changed.

        Args:
            reject_steps: ids of steps not to run.
            edit_steps: new argument values by step id (JSON objects).
            detail: why the rejected steps do not run, in words (who rejected them, and
                their feedback).

        Returns:
            Every id dropped, sorted.

        Raises:
            ValueError: a chosen step that does not exist or has already started (nothing
                changed), or an edit that changes the steps it depends on or does not
                compile (the edits before it are applied).
            RuntimeError: the session is closed.
        """
        self._check_open()
        run = self._run
        chosen = sorted(set(reject_steps) | set(edit_steps))
        unknown = [step_id for step_id in chosen if step_id not in run.records]
        if unknown:
            raise ValueError(f"step {', '.join(map(str, unknown))} does not exist")
        started = [
            step_id
            for step_id in chosen
            if run.records[step_id].status != "pending" or step_id in run.claimed
        ]
        if started:
            raise ValueError(
                f"step {', '.join(map(str, started))} has already started while the person "
                "decided (steps without effects run meanwhile); only steps that have not "
                "started can be edited or rejected"
            )
        for step_id, edit in sorted(edit_steps.items()):
            try:
                self.edit_step(step_id, {**dict(run.steps[step_id].step.args), **dict(edit)})
            except ValueError as error:  # a PlanError too: it is a ValueError
                raise ValueError(f"the edit of step {step_id} does not apply: {error}") from error
        return self.reject_steps(reject_steps, detail) if reject_steps else ()

    def reject(self, detail: str) -> tuple[int, ...]:
        """A person rejected the whole plan: every step that has not started ends
        ``skipped`` with reason ``rejected`` and ``detail`` (steps running go on to their
        end), and the run's status is ``rejected``.

        Returns:
            The ids dropped, sorted.

        Raises:
            RuntimeError: the session is closed.
        """
        self._check_open()
        run = self._run
        run.rejected = True
        pending = [
            step_id
            for step_id, record in run.records.items()
            if record.status == "pending" and step_id not in run.claimed
        ]
        now = run.now()
        for step_id in sorted(pending):
            record = run.records[step_id]
            run.held.discard(step_id)
            record.status = "skipped"
            record.reason = "rejected"
            record.detail = detail
            record.ended_at = now
            if run.observers:
                run.emit(events.StepSkipped(run.run_id, step_id, "rejected", detail, now))
        return tuple(sorted(pending))

    @property
    def dependencies_down(self) -> tuple[DownDependency, ...]:
        """The tools and HTTP hosts the circuit breaker took out of the run so far."""
        breaker = self._run.breaker
        return breaker.snapshot() if breaker is not None else ()

    def give_up(self) -> None:
        """Record that the planner gave up (its replan caps were hit): the result's status
        is ``gave_up`` instead of ``failed`` (the brakes' statuses still come first)."""
        self._check_open()
        self._run.gave_up = True

    def escalate(self, reason: str, detail: str) -> bool:
        """Hand the run to a person (ARCHITECTURE.md, "States"): the result's status is
        ``escalated``, with ``RunResult.escalation`` = ``reason`` and
        ``escalation_detail`` = ``detail``, whatever its steps came to (only an
        interruption from outside comes first). With the session's escalation mode
        ``never`` (:func:`open_session` ``escalate``) it is :meth:`give_up` instead. The
        first escalation's reason is kept. The caller stops what it was doing; steps still
        running finish as usual when the block exits.

        Args:
            reason: one of :data:`~plandag.scheduler.result.ESCALATION_REASONS`.
            detail: a sentence for the person who gets the case (what happened, where).

        Returns:
            True when the run escalates, False when the mode is ``never`` (gave up).

        Raises:
            ValueError: an unknown ``reason``.
            RuntimeError: the session is closed.
        """
        self._check_open()
        return self._run.escalate(reason, detail)

    @property
    def escalation(self) -> tuple[str, str] | None:
        """``(reason, detail)`` once :meth:`escalate` handed the run to a person, else
        None."""
        return self._run.escalation

    # -- waiting and reading -----------------------------------------------------------------

    def state(self) -> SessionState:
        """Where the run stands now (O(steps)); see :class:`SessionState`."""
        run = self._run
        groups: dict[str, list[int]] = {
            name: []
            for name in (
                "succeeded",
                "pruned",
                "cancelled",
                "superseded",
                "held",
                "pending",
                "running",
            )
        }
        failed: dict[int, StepFailure] = {}
        for step_id in sorted(run.records):
            record = run.records[step_id]
            status = record.status
            if record.superseded_by is not None:
                groups["superseded"].append(step_id)
            elif status == "failed":
                failed[step_id] = StepFailure(record.reason, record.error, record.detail)
            elif status == "skipped":
                groups["pruned"].append(step_id)
            elif status == "pending" and step_id in run.held:
                groups["held"].append(step_id)
            else:
                groups[status].append(step_id)
        return SessionState(
            succeeded=tuple(groups["succeeded"]),
            failed=types.MappingProxyType(failed),
            pruned=tuple(groups["pruned"]),
            cancelled=tuple(groups["cancelled"]),
            superseded=tuple(groups["superseded"]),
            held=tuple(groups["held"]),
            pending=tuple(groups["pending"]),
            running=tuple(groups["running"]),
            stop_reason=self.stop_reason,
            sealed=self._sealed,
            down=run.breaker.snapshot() if run.breaker is not None else (),
        )

    async def settled(self) -> SessionState:
        """Wait until no step is running or can start, then return the state.

        That is: every step ended, or those left wait on held effects (``held``,
        ``pending``); failed steps' descendants are already pruned. Returns at once when
        nothing runs. Steps added later start again; call it again after them.

        Raises:
            RuntimeError: the session is closed.
        """
        self._check_open()
        await self._run.wait_idle()
        return self.state()

    def result(self) -> RunResult:
        """The final :class:`~plandag.scheduler.result.RunResult`, once the ``async with``
        block has exited.

        ``status``: ``interrupted``; ``escalated`` after :meth:`escalate`;
        ``timed_out``, ``budget_exceeded`` as in ``run_plan``; else ``succeeded`` when
        every step succeeded or was superseded; else ``gave_up`` after :meth:`give_up`;
        else ``failed``. ``output``: the (possibly replaced) output resolved.
        ``first_tool_start_s``: seconds from the session's opening to the first step's
        start.

        Raises:
            RuntimeError: the session is still open.
        """
        if self._result is None:
            raise RuntimeError("the session is still open: leave its async with block first")
        return self._result


@asynccontextmanager
async def open_session(
    header: Plan | CompiledPlan,
    registry: Registry,
    *,
    params: Mapping[str, Any] | None = None,
    read_only: bool = False,
    write_boundary: WriteBoundary | None = None,
    run_id: str | None = None,
    limits: RunLimits | None = None,
    retry: RetryPolicy | None = None,
    observers: Sequence[events.Observer] = (),
    max_concurrency: int | None = None,
    tool_limits: Mapping[str, int] | None = None,
    budget: Budget | None = None,
    clock: Clock | None = None,
    classify: Classifier = classify_error,
    hold_effects: bool = True,
    max_steps: int | None = None,
    max_arg_bytes: int = DEFAULT_MAX_ARG_BYTES,
    escalate: EscalationMode = "person",
    http_allow: Sequence[str] | None = None,
    completed: Mapping[int, Any] | None = None,
    plan_estimate: PlanEstimate | None = None,
    tool_durations: Mapping[str, float] | None = None,
    models: ModelAccessProtocol | None = None,
) -> AsyncIterator[RunSession]:
    """Open a :class:`RunSession`: a run that takes steps while it runs.

    Args:
        header: the plan so far: a :class:`~plandag.dag.plan.Plan` (goal, params; steps
            possibly empty; output possibly None, set later with ``set_output``),
            compiled here with ``params``, ``read_only`` and ``write_boundary``; or a
            :class:`~plandag.compiler.compiled.CompiledPlan`, whose own params, read-only
            flag and write boundary then apply (``params`` must be None, and
            ``read_only`` / ``write_boundary`` left at their defaults or equal to its own).
        registry: the tools and check kinds steps added later may use.
        params: values of the header's params (CLI strings coerced); None means none
            given (a required param is then a compile error).
        read_only: allow only tools without effects, for every step added.
        write_boundary: where the run may write (checked at compile and at run time).
        run_id: the run's id (default: a random hex id).
        limits: the brakes (:class:`~plandag.scheduler.limits.RunLimits`), over the whole
            session from its opening.
        retry, observers, max_concurrency, tool_limits, budget, clock, classify, models:
            as :func:`~plandag.scheduler.run_plan`.
        hold_effects: steps whose tool has effects wait for ``release_effects()``
            (ARCHITECTURE.md, "Streaming": they must not start before the whole plan
            compiled).
        max_steps: the most steps the session may hold in all; None: the limit a
            CompiledPlan header was compiled with, else 500.
        max_arg_bytes: the most bytes a step's args may take as JSON.
        escalate: what :meth:`RunSession.escalate` does
            (:data:`~plandag.scheduler.result.EscalationMode`): ``person`` (default) ends
            the run ``escalated``, ``never`` ends it ``gave_up``.
        http_allow: the configured HTTP allow-list (host globs), or None; hosts of the
            steps' literal URLs join it as the steps are released (not in a read-only
            run). Ignored for a CompiledPlan header (its own applies).
        completed: results of header steps that already succeeded (a stored run taken up
            again), by id: they are never run again, their results feed their children.
        plan_estimate: hold the run to ``limits``' plan-relative limits from its opening,
            as :meth:`RunSession.arm_plan_budget` does (None: not until that is called).
        tool_durations: seconds per tool measured in the run store, for the estimates of
            patches added later.

    Yields:
        The :class:`RunSession`; its :meth:`~RunSession.result` is final once the block
        exits.

    Raises:
        PlanError: the header does not compile.
        ValueError: bad limits (as ``run_plan``), or options that contradict a
            CompiledPlan header.
        Whatever the block raises, after the run was interrupted and closed.
    """
    if isinstance(header, CompiledPlan):
        if params is not None:
            raise ValueError("params were resolved when the plan compiled: pass params=None")
        if read_only and not header.read_only:
            raise ValueError("read_only=True, but the compiled plan was compiled read-write")
        if write_boundary is not None and write_boundary != header.write_boundary:
            raise ValueError("write_boundary differs from the compiled plan's")
        compiled = header
        if max_steps is None:
            max_steps = header.max_steps
    else:
        if max_steps is None:
            max_steps = DEFAULT_MAX_STEPS
        compiled = compile_plan(
            header,
            registry,
            params=params if params is not None else {},
            read_only=read_only,
            write_boundary=write_boundary,
            max_steps=max_steps,
            max_arg_bytes=max_arg_bytes,
            http_allow=http_allow,
        )
    the_limits = limits if limits is not None else RunLimits()
    run = SessionRun(
        compiled,
        run_id if run_id is not None else uuid.uuid4().hex[:16],
        max_concurrency,
        tool_limits,
        observers,
        the_limits,
        retry,
        classify,
        clock,
        budget,
        completed,
        hold_effects=hold_effects,
        models=models,
    )
    run.escalate_mode = escalate
    if plan_estimate is not None:
        run.pending_estimate = (plan_estimate, dict(tool_durations or {}))
    session = RunSession(run, registry, max_steps=max_steps, max_arg_bytes=max_arg_bytes)
    send = bool(run.observers) and (
        the_limits.heartbeat_every is not None or the_limits.stall_cap is not None
    )
    watch = send or (the_limits.stop_on_stall and the_limits.stall_cap is not None)
    error: BaseException | None = None
    try:
        async with anyio.create_task_group() as session_group:
            await session_group.start(run.host)
            if watch:
                session_group.start_soon(run.watch_session, send)
            try:
                yield session
            except (anyio.get_cancelled_exc_class(), GeneratorExit):
                raise  # the caller's scope: the task group cancels the steps
            except BaseException as raised:
                # Raised again below, outside the task group (which would wrap it in an
                # ExceptionGroup): the run is interrupted first.
                error = raised
                if run.active:
                    run.stop("interrupted")
            finally:
                run.closing.set()
    finally:
        session._result = run.close_session()
    if error is not None:
        raise error
