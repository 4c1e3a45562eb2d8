"""The course of a run of the agent (ARCHITECTURE.md, "Retry vs replan", "Replanning"):
its session opened, the plan run, what fails replanned within the caps while independent
branches go on, a person's instructions replanned in, the run given up or escalated when
the caps are hit, the output joined, and the :class:`~plandag.planner.agent_result.AgentResult`.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anyio

from plandag.compiler import CompiledPlan, Diagnostic
from plandag.dag.diagnostics import OUT_OF_REGISTRY_CODES
from plandag.dag.plan import Plan
from plandag.errors import PlanBudgetError
from plandag.models import BudgetRefusedError, LLMRequest, call_with_retries
from plandag.models.calls import deadline_from
from plandag.planner.agent_approval import ApprovingRun
from plandag.planner.agent_result import AgentResult, GaveUpReason
from plandag.planner.agent_run import FailureWatch, PlanningFailed, deadline_reached, next_state
from plandag.planner.joiner import (
    JOIN_SCHEMA,
    JOIN_SYSTEM_PROMPT,
    JoinDecision,
    join_prompt,
    parse_decision,
)
from plandag.planner.replanner import ReplanRecord, ReplanTrigger, failure_summary
from plandag.planner.triggers import Instruction, StrategyChoice, choose_strategy
from plandag.scheduler.result import RunResult, StepErrorInfo
from plandag.scheduler.session import RunSession, SessionState, open_session

__all__ = ["AgentRun"]

logger = logging.getLogger("plandag.planner")


class AgentRun(ApprovingRun):
    """A run of the agent (:class:`~plandag.planner.agent_approval.ApprovingRun`) with its
    course: its session, the replan loop, the join and the result."""

    # -- the run's session ----------------------------------------------------------------------

    def attach(self, session: RunSession, watch: FailureWatch) -> None:
        """Make ``session`` this run's, watched by ``watch``: the agent counts it as running
        (a person's instruction finds it) and its ``on_session`` callback is given it."""
        self.session = session
        self.watch = watch
        self.loop_thread = threading.get_ident()
        self.agent.running.add(session.run_id, self)
        if self.agent.on_session is not None:
            self.agent.on_session(session)

    async def start(self, header: Plan | CompiledPlan, run_id: str | None) -> AgentResult:
        """Open the run's session on ``header`` (the goal and params, or a stored plan's
        compiled header) and plan, approve, run, replan and join in it
        (:meth:`Agent.run_once <plandag.planner.agent.Agent.run_once>`).

        Returns:
            The result; a run cancelled from outside is ``interrupted`` (the cancellation
            itself goes on at the caller's next checkpoint).

        Raises:
            ValueError, PlanError: as :func:`~plandag.scheduler.session.open_session`.
        """
        agent = self.agent
        watch = FailureWatch()
        session_ref: list[RunSession] = []
        try:
            async with open_session(
                header,
                agent.registry,
                params=self.params if isinstance(header, Plan) else None,
                read_only=agent.read_only,
                write_boundary=agent.write_boundary,
                http_allow=agent.http_allow if isinstance(header, Plan) else None,
                limits=agent.limits,
                retry=agent.retry,
                observers=(*agent.observers, watch, self.streamed_steps),
                max_concurrency=agent.max_concurrency,
                tool_limits=agent.tool_limits,
                budget=self.budget,
                hold_effects=True,
                run_id=run_id,
                escalate=agent.escalate,
                max_steps=agent.max_steps,
                models=agent.models,
            ) as session:
                session_ref.append(session)
                self.attach(session, watch)
                if agent.approve is not None:
                    session.require_approval()
                await self.plan(session)
                self.estimate_version(session)
                await self.approve(session, first=True)
                self.arm(session)
                async with anyio.create_task_group() as listening:
                    listening.start_soon(self.listen)
                    await self.run_and_replan(session, watch)
                    listening.cancel_scope.cancel()
        except PlanningFailed:
            pass
        except anyio.get_cancelled_exc_class():
            if not session_ref:
                raise
            # Cancelled from outside (Ctrl-C, SIGTERM, a caller's deadline): the session
            # closed every step (running ones cancelled, the rest skipped); report that
            # state instead of losing it. The cancelled scope re-raises at the caller's
            # next checkpoint, so the cancellation itself is not lost.
            return self.result(self.interrupted(session_ref[0].result()))
        finally:
            if session_ref:
                agent.running.remove(session_ref[0].run_id)
        return self.result(session_ref[0].result())

    async def go_on(
        self,
        plan: Plan,
        completed: Mapping[int, Any],
        *,
        instruction: str | None,
        earlier: Sequence[Mapping[str, Any]],
        run_id: str | None,
        on_resumed: Callable[[], None] | None,
    ) -> AgentResult:
        """Open the session of a resumed run on its completed steps and replan the
        remaining work, then run, replan and join as :meth:`start` does (arguments as
        :meth:`Agent.resume <plandag.planner.agent.Agent.resume>`).

        Raises:
            PlanError: ``plan`` does not compile with the run's params.
        """
        agent = self.agent
        watch = FailureWatch()
        session_ref: list[RunSession] = []
        try:
            async with open_session(
                plan,
                agent.registry,
                params=self.params,
                read_only=agent.read_only,
                write_boundary=agent.write_boundary,
                http_allow=agent.http_allow,
                limits=agent.limits,
                retry=agent.retry,
                observers=(*agent.observers, watch),
                max_concurrency=agent.max_concurrency,
                tool_limits=agent.tool_limits,
                budget=self.budget,
                hold_effects=True,
                run_id=run_id,
                escalate=agent.escalate,
                completed=completed,
                models=agent.models,
            ) as session:
                session_ref.append(session)
                self.attach(session, watch)
                session.seal()
                if agent.approve is not None:
                    session.require_approval()
                else:
                    session.release_effects()
                if await self.replan_remaining(session, instruction, earlier, on_resumed):
                    async with anyio.create_task_group() as listening:
                        listening.start_soon(self.listen)
                        await self.run_and_replan(session, watch)
                        listening.cancel_scope.cancel()
        except PlanningFailed:
            pass
        except anyio.get_cancelled_exc_class():
            if not session_ref:
                raise
            return self.result(session_ref[0].result())
        finally:
            if session_ref:
                agent.running.remove(session_ref[0].run_id)
        return self.result(session_ref[0].result())

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
                except PlanningFailed:
                    return False
            return True
        self.give_up(session, "max_replans")
        return False

    async def run_and_replan(self, session: RunSession, watch: FailureWatch) -> None:
        """Wait for failures and instructions and replan them, within the caps; then join."""
        agent = self.agent
        previous: ReplanRecord | None = None
        while True:
            state = await next_state(session, watch, self.has_news)
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
                    except PlanningFailed:
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
