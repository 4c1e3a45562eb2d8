"""``exec --planner`` through the run store (:class:`RepairGate`): a stored plan run whose
failed steps a planner repairs, recorded like ``exec``'s, each plan version behind the
approval gate."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from plandag.runs.escalations import escalate_recorded
from plandag.runs.planned import SessionRecorder

if TYPE_CHECKING:
    from plandag.approval import Approver
    from plandag.compiler.compiled import CompiledPlan
    from plandag.escalation import EscalationHooks
    from plandag.runs.options import DurableOutcome, RunOptions
    from plandag.store import Store

__all__ = ["RepairGate"]


def _log_warning(message: str) -> None:
    logging.getLogger(__name__).warning("%s", message)


class RepairGate:
    """A stored plan run with a planner that repairs what fails (``exec --planner``,
    :func:`plandag.planner.repair.run_with_repairs`) through the run store: the run
    recorded like ``exec``'s, the stored plan behind the approval gate, and each repair that
    adds steps with effects behind it too (a new plan version; ARCHITECTURE.md: any revised
    plan passes the same approval as the first).

    Args:
        store: the open run store (closed by :meth:`close`).
        compiled: the stored plan, compiled with its params.
        options: the run's options (approval mode, expiry, redaction...).
        compile_span: when the plan compiled (seconds since the epoch), for the trace.
        hooks: called when the run escalates (its case is stored in any case).
        approver: who decides when a plan or a repair needs a person (None: nobody here,
            the run waits ``awaiting_approval``).
        say: shown to the person when an answer cannot be taken (the run then waits for
            a decision it can take); default: logged as a warning.
    """

    def __init__(
        self,
        store: Store,
        compiled: CompiledPlan,
        options: RunOptions,
        *,
        compile_span: tuple[float, float],
        hooks: EscalationHooks | None = None,
        approver: Approver | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        import uuid

        from plandag.runs.traces import trace_factory

        self.store = store
        self.compiled = compiled
        self.options = options
        self.run_id = uuid.uuid4().hex[:16]
        self.writer = trace_factory(self.store, options.redact)(self.run_id, 0)
        self.recorder = SessionRecorder(self.store, self.run_id, compiled.params)
        self.observers: list[Any] = [self.recorder, self.writer]
        self.approver = approver
        self.say = say if say is not None else _log_warning
        self.outcome: DurableOutcome | None = None
        self.request: Any = None
        self.rejection: str | None = None
        self.pending: Any = None
        self.version = 1
        self.compile_span = compile_span
        self.hooks = hooks
        self._closed = False

    async def start(self) -> bool:
        """Record the run (the decision on the stored plan, when it needs one, is asked by
        :meth:`approve_plan` once its effect-free steps run). Returns True."""
        from plandag.runs.segments import record_run

        self.request = record_run(
            self.store,
            self.run_id,
            self.compiled,
            self.options,
            command="exec",
            writer=self.writer,
            source="stored",
            compile_span=self.compile_span,
        )
        return True

    async def approve_plan(self, session: Any) -> str:
        """``run_with_repairs(approve_plan=...)``: ``approved``, ``rejected`` or
        ``awaiting_approval`` for the stored plan, asked while its effect-free steps run."""
        from plandag.approval import InvalidDecisionError
        from plandag.runs.decisions import ask_decision

        request = self.request
        if request is None:
            return "approved"
        with session.waiting_for_person():
            try:
                decision = await ask_decision(
                    self.store, request, self.approver, self.options.approve, self.writer
                )
            except InvalidDecisionError as error:  # the run waits for a decision it can take
                self.say(f"error: {error}")
                decision = None
        if decision is None:
            self.pending = request
            return "awaiting_approval"
        if not decision.approved:
            self.rejection = decision.feedback or None
            return "rejected"
        return "approved"

    def tool_durations(self) -> dict[str, float]:
        """Seconds per tool of the stored plan measured in the run store (a tool's median
        over its latest 1,000 succeeded steps, once it succeeded in 5 runs), for
        ``run_with_repairs(tool_durations=...)``: the plan-relative limits then measure the
        run against the estimate stored with the plan version."""
        tools = {step.tool.name for step in self.compiled.steps.values()}
        return dict(self.store.tool_durations(tools))

    def bind(self, session: Any) -> None:
        """``run_with_repairs(on_session=...)``: record the session's steps."""
        self.recorder.bind(session)

    async def approve_patch(self, session: Any, new_ids: tuple[int, ...]) -> str:
        """``run_with_repairs(approve_patch=...)``: ``approved``, ``rejected`` or
        ``awaiting_approval`` for a repair that added ``new_ids``."""
        from plandag.approval import ApprovalRequest, approval_needed, approval_reason
        from plandag.compiler.compiled import allowed_hosts
        from plandag.planner.repair import whole_plan
        from plandag.runs.decisions import ask_decision

        steps = session.steps
        if not approval_needed(
            {step_id: steps[step_id] for step_id in new_ids}, self.options.approve
        ):
            return "approved"
        self.version += 1
        plan = whole_plan(self.compiled, session)
        kept = {step.id: steps[step.id] for step in plan.steps}
        request = ApprovalRequest.for_steps(
            self.run_id,
            self.version,
            plan,
            self.compiled.params,
            kept,
            self.compiled.write_boundary,
            reason=f"a repair adds steps with effects ({', '.join(map(str, new_ids))})"
            if not any(steps[step_id].tainted_egress for step_id in new_ids)
            else f"a repair adds steps ({', '.join(map(str, new_ids))}): "
            + approval_reason({step_id: steps[step_id] for step_id in new_ids}),
            expiry_s=self.options.expiry_s,
            http_allow=allowed_hosts(
                self.compiled.http_allow,
                () if self.compiled.read_only else (h for s in kept.values() for h in s.hosts),
            ),
        )
        plan_json = plan.model_dump(mode="json", exclude_none=True)
        self.store.add_plan_version(
            self.run_id,
            self.version,
            plan_json,
            request.plan_hash,
            "replan",
            estimate=request.estimate.as_json() if request.estimate is not None else None,
        )
        self.writer.plan(self.version, plan_json, request.plan_hash, "replan")
        with session.waiting_for_person():
            decision = await ask_decision(
                self.store, request, self.approver, self.options.approve, self.writer
            )
        if decision is None:
            self.pending = request
            return "awaiting_approval"
        return "approved" if decision.approved else "rejected"

    def finish(self, repaired: Any) -> None:
        """Record the model calls, replans and final state of ``repaired`` (None: the run
        was interrupted before it could report)."""
        from plandag.runs.decisions import save_awaiting

        store = self.store
        if repaired is None:
            store.update_run(self.run_id, status="interrupted", pid=None)
            return
        for call in repaired.llm_calls:
            store.record_llm_call(self.run_id, "repair", call)
            self.writer.llm_call(call, "replan")
        for replan in repaired.replans:
            store.record_event(self.run_id, "replan", replan.to_json_dict(), time.time())
        if repaired.status == "awaiting_approval" and self.pending is not None:
            self.outcome = save_awaiting(store, self.pending, self.pending.reason)
            return
        store.update_run(
            self.run_id,
            status=repaired.status,
            detail=(
                self.rejection if repaired.status == "rejected" else repaired.run.escalation_detail
            ),
            spent_usd=repaired.run.spent_usd,
            spent_tokens=repaired.run.spent_tokens,
            pid=None,
        )
        if repaired.status == "escalated":
            self.outcome = escalate_recorded(store, self.run_id, repaired.run, hooks=self.hooks)

    def close(self) -> None:
        """Close the trace and the store (once)."""
        if self._closed:
            return
        self._closed = True
        self.writer.close()
        self.store.close()
