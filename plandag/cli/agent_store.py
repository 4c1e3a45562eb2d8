"""Recording model-driven runs in the run store: ``plandag run`` (the agent's
sessions, plan versions, decisions, model calls and replans), ``exec --planner`` (the stored
plan and each repair behind the approval gate) and the revision a rejection asks the planner
for (``plandag reject`` on a ``plandag run``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from plandag.cli import common
from plandag.cli.store_command import (
    _rebuild,
    job_registry,
    open_cli_store,
    terminal_approver,
    trace_factory,
)
from plandag.dag.references import find_references

if TYPE_CHECKING:
    from plandag.compiler.compiled import CompiledPlan
    from plandag.dag.plan import Plan
    from plandag.escalation import EscalationHooks
    from plandag.planner.agent import AgentResult
    from plandag.runs.options import DurableOutcome, RunOptions
    from plandag.scheduler.result import RunResult
    from plandag.store import Store

__all__ = [
    "MAX_REVISIONS",
    "RepairGate",
    "SessionRecorder",
    "escalate_stored",
    "record_agent_run",
    "resume_with_planner",
    "revise",
]


MAX_REVISIONS = 3
"""Rejections of one run that send its plan back to the planner (then it stays rejected)."""


def revise(store: Store, run_id: str, row: Any, options: RunOptions, writer: Any) -> None:
    """``plandag reject`` on a run that has a planner: ask it for a revision with every
    rejection's feedback (the last one, verbatim, as the instruction), store the revised
    plan as a new version awaiting a decision, and show it."""
    import anyio

    from plandag.approval import ApprovalRequest, plan_hash, tool_schemas
    from plandag.cli.models_options import model_client
    from plandag.compiler.compiled import allowed_hosts
    from plandag.dag.plan import Plan
    from plandag.planner.agent import revision_context
    from plandag.planner.planner import Planner
    from plandag.runs.segments import plan_estimate

    feedback = [
        decision.feedback or ""
        for decision in store.decisions(run_id)
        if decision.decision == "rejected"
    ]
    if len(feedback) > MAX_REVISIONS:
        common.stderr.print(
            f"run {run_id}: {len(feedback)} rejections, past the {MAX_REVISIONS} revisions a "
            "run gets; it stays rejected"
        )
        return
    assert options.planner is not None
    planner_options = dict(options.planner)
    versions = store.plan_versions(run_id)
    rejected = Plan.model_validate(versions[-1].plan)
    compiled, _ = _rebuild(store, run_id, row, options=options)
    # a job's run is replanned with the tools of that job, as its first plan was
    registry = job_registry(row, options)
    client = model_client(str(planner_options["provider"]), planner_options.get("base_url"))
    planner = Planner(
        client,
        str(planner_options["model"]),
        registry,
        read_only=options.read_only,
        write_boundary=compiled.write_boundary,
        http_allow=options.http_allow,
        max_steps=options.max_steps,
    )
    context = revision_context(str(planner_options.get("context") or ""), rejected, feedback)

    async def revise() -> Any:
        try:
            return await planner.plan(row.goal or "", context, row.params or None)
        finally:
            await client.aclose()

    try:
        outcome = anyio.run(revise)
    except Exception as error:  # the run stays rejected; say why no revision came
        common.stderr.print(f"run {run_id}: the planner could not revise it: {error}")
        return
    plan = outcome.plan
    version = len(versions) + 1
    digest = plan_hash(
        plan,
        compiled.params,  # the secrets put back from the environment, as compiled
        compiled.write_boundary,
        allowed_hosts(
            compiled.http_allow, () if options.read_only else outcome.compiled.listed_hosts
        ),
        tool_schemas(outcome.compiled.steps),
    )
    store.add_plan_version(
        run_id, version, plan.model_dump(mode="json", exclude_none=True), digest, "revision"
    )
    store.reset_steps(run_id, keep=_still_valid(store.steps(run_id), versions[-1].plan, plan))
    revised, _ = _rebuild(store, run_id, store.run(run_id), options=options)
    estimate = plan_estimate(store, revised)
    store.set_plan_estimate(run_id, version, estimate.as_json())
    for call in outcome.records:
        store.record_llm_call(run_id, "revision", call)
        writer.llm_call(call, "revision")
    writer.plan(version, plan, digest, "revision")
    request = ApprovalRequest.for_plan(
        run_id,
        version,
        revised,
        reason="revised after a rejection",
        expiry_s=options.expiry_s,
        estimate=estimate,
    )
    store.record_decision(run_id, version, digest, "asked")
    writer.approval(version, digest, "asked", None, None)
    store.update_run(
        run_id,
        status="awaiting_approval",
        awaiting_since=time.time(),
        expires_at=request.expires_at,
        awaiting_reason="revised after a rejection",
    )
    for line in request.summary_lines():
        common.stderr.print(line, markup=False, highlight=False)
    common.stderr.print(
        f"run {run_id}: revised plan version {version} awaits a decision "
        f"(`plandag approve {run_id} --hash {digest}`)"
    )


def _still_valid(rows: Mapping[int, Any], rejected: Mapping[str, Any], revised: Any) -> list[int]:
    """Steps of the rejected plan whose results the revision keeps: effect-free steps that
    succeeded (while the approval was pending) and that the revised plan has unchanged, as
    it has every step upstream of them. Their results are facts the rejection did not
    touch; every other step row is forgotten."""
    before = {step["id"]: step for step in rejected.get("steps", [])}
    after = {step.id: step.model_dump(mode="json", exclude_none=True) for step in revised.steps}

    def parents(step_id: int) -> set[int]:
        document = after[step_id]
        found = set(document.get("depends_on", []))
        for field in ("args", "check"):
            found.update(
                reference.step_id
                for _, reference in find_references(document.get(field))
                if reference.step_id is not None
            )
        return found

    def same(step_id: int, seen: frozenset[int]) -> bool:
        if step_id in seen or before.get(step_id) != after.get(step_id):
            return False
        row = rows.get(step_id)
        if row is None or row.status != "succeeded" or row.effects != "none":
            return False
        return all(same(parent, seen | {step_id}) for parent in parents(step_id))

    return [step_id for step_id in sorted(after) if same(step_id, frozenset())]


class SessionRecorder:
    """The run store's observer for ``plandag run``: a
    :class:`~plandag.store.StoreRecorder` bound to each session the agent opens (a revision
    after a rejection opens a new one, whose steps replace the rejected plan's rows), and
    the keeper of each plan version as it compiles (:meth:`plan_version`).

    Args:
        store, run_id, params: the run store, the run, its params (for the plan hashes).
        segment: 0 for the run's first process, one more per resume.
        completed: results of steps that succeeded in earlier segments.
        write_boundary: the run's, for the plan hashes.
        first_version: the number the agent's first plan version gets in the store (a
            resumed run continues its numbering).
    """

    def __init__(
        self,
        store: Store,
        run_id: str,
        params: Mapping[str, Any],
        *,
        segment: int = 0,
        completed: Mapping[int, Any] | None = None,
        write_boundary: Any = None,
        first_version: int = 1,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.params = params
        self.segment = segment
        self.completed = completed
        self.write_boundary = write_boundary
        self.first_version = first_version
        self.sessions = 0
        self.recorder: Any = None

    def plan_version(self, number: int, plan: Plan, source: str) -> None:
        """``Agent(on_plan_version=...)``: store plan version ``number`` (the agent's
        numbering) now, before any of its steps starts, so that a process that dies from
        here on leaves a run ``plandag resume`` can finish (:func:`record_agent_run`
        records it again, whole, at the end). A store that cannot be written is logged;
        its steps with effects are then refused too (the recorder vetoes their start)."""
        import logging
        import sqlite3

        from plandag.approval import plan_hash

        try:
            self.store.add_plan_version(
                self.run_id,
                self.first_version + number - 1,
                plan.model_dump(mode="json", exclude_none=True),
                plan_hash(plan, self.params, self.write_boundary),
                source,
            )
        except sqlite3.Error as error:
            logging.getLogger(__name__).warning(
                "run %s: plan version %d could not be stored (%s)", self.run_id, number, error
            )

    def bind(self, session: Any) -> None:
        """``Agent(on_session=...)``: record the steps of ``session`` from now on."""
        from plandag.store import StoreRecorder

        if self.sessions:
            self.store.reset_steps(self.run_id)
        self.sessions += 1
        self.recorder = StoreRecorder(
            self.store,
            self.run_id,
            session.steps,
            self.params,
            segment=self.segment,
            completed=self.completed,
        )

    def __call__(self, event: Any) -> None:
        if self.recorder is not None:
            self.recorder(event)


def escalate_stored(
    store: Store,
    run_id: str,
    run: RunResult,
    *,
    hooks: EscalationHooks | None,
    status: str = "escalated",
) -> DurableOutcome:
    """Persist the case of a run recorded outside the durable layer's own segments
    (``plandag run``, ``exec --planner``) that ended ``escalated``, and call the hooks
    (:func:`plandag.runs.escalations.escalate_run`, on a loop of its own: the run's loop has
    ended). Returns the outcome with the message for the person."""
    import functools

    import anyio

    from plandag.runs.escalations import escalate_run
    from plandag.runs.options import DurableOutcome

    reason = run.escalation or "replan_caps"
    message = anyio.run(
        functools.partial(escalate_run, store, run_id, reason, run.escalation_detail, hooks=hooks)
    )
    return DurableOutcome(
        run_id,
        "escalated",
        result=run,
        message=message,
        escalation=reason,
        escalation_detail=run.escalation_detail,
    )


def record_agent_run(
    store: Store,
    writer: Any,
    run_id: str,
    result: AgentResult,
    *,
    write_boundary: Any,
    params: Mapping[str, Any],
    hooks: EscalationHooks | None = None,
    first_version: int = 1,
    spent_before: tuple[float, int] = (0.0, 0),
) -> DurableOutcome | None:
    """Store what ``plandag run`` produced beyond its steps: every plan version (with its
    hash), every decision, every LLM call, and the run's state; the same in the trace.

    Args:
        store, writer, run_id, result: the run store, the trace writer (or None), the run
            and what the agent produced.
        write_boundary, params: the run's, for the plan hashes.
        hooks: called when the run ended ``escalated`` (its case is stored in any case).
        first_version: the number of the first plan version ``result`` holds (a resumed
            run continues its numbering).
        spent_before: US dollars and tokens the run's earlier segments spent (added to
            this one's).

    Returns:
        The outcome of an escalated run (its message says what a person can do), else None.
    """
    from plandag.approval import plan_hash

    routing_usd = sum(call.cost_usd for call in result.routing_calls)
    reused = result.library is not None and result.library.how in ("library", "routed")
    versions = list(result.plan_versions)
    estimates = list(result.plan_estimates) + [None] * (len(versions) - len(result.plan_estimates))
    request = result.approval
    if request is not None and (not versions or request.plan != versions[-1]):
        versions.append(request.plan)
        estimates.append(request.estimate)
    shift = first_version - 1  # the agent numbers its versions from 1
    decided = {a.version + shift: a.plan_hash for a in result.amendments}
    made = {a.new_version + shift: a.new_plan_hash for a in result.amendments}
    for number, plan in enumerate(versions, start=first_version):
        digest = (
            request.plan_hash
            if request is not None and plan is request.plan
            else decided.get(number) or made.get(number) or plan_hash(plan, params, write_boundary)
        )
        source = (
            "amended"
            if number in made
            else ("library" if reused else "planner")
            if number == 1
            else ("revision" if first_version == 1 else "replan")
        )
        estimate = estimates[number - first_version]
        store.add_plan_version(
            run_id,
            number,
            plan.model_dump(mode="json", exclude_none=True),
            digest,
            source,
            estimate=estimate.as_json() if estimate is not None else None,
        )
        if writer is not None:
            writer.plan(number, plan, digest, source)
    last_version = first_version + len(versions) - 1
    for amendment in result.amendments:
        feedback = amendment.feedback or None
        decided_on, made_version = amendment.version + shift, amendment.new_version + shift
        store.record_decision(
            run_id, decided_on, amendment.plan_hash, "amended", who=amendment.who, feedback=feedback
        )
        store.record_step_decisions(
            run_id,
            decided_on,
            [(step.step_id, step.decision, step.args) for step in amendment.steps],
            who=amendment.who,
        )
        store.record_decision(
            run_id, made_version, amendment.new_plan_hash, "approved", who=amendment.who
        )
        if writer is not None:
            writer.approval(decided_on, amendment.plan_hash, "amended", amendment.who, feedback)
            writer.approval(made_version, amendment.new_plan_hash, "approved", amendment.who, None)
    for decision in result.decisions:
        if decision.approved and decision.amends:
            continue  # recorded with its amendment above
        state = "approved" if decision.approved else "rejected"
        store.record_decision(
            run_id,
            last_version,
            decision.plan_hash,
            state,
            who=decision.who,
            feedback=decision.feedback or None,
        )
        if writer is not None:
            writer.approval(
                last_version, decision.plan_hash, state, decision.who, decision.feedback
            )
    for call in result.llm_calls:
        store.record_llm_call(run_id, "model", call)
        if writer is not None:
            writer.llm_call(call, "model")
    for call in result.routing_calls:  # counted and priced apart from the planner's calls
        store.record_llm_call(run_id, "routing", call)
        if writer is not None:
            writer.llm_call(call, "routing")
    outcome = result.plan
    if writer is not None and outcome is not None and outcome.records:
        first, last = outcome.records[0], outcome.records[-1]
        writer.planning(
            1, first.started_at, last.started_at + last.duration_s, len(outcome.records)
        )
        # each answer was compiled as soon as it arrived (repairs included)
        answered = [call for call in outcome.records if call.error is None]
        for attempt, call in zip(outcome.attempts, answered, strict=False):
            at = call.started_at + call.duration_s
            writer.compile(1, at, at, list(attempt.diagnostics), ok=attempt.compiled)
    for replan in result.replans:
        pruned = [
            step_id
            for step_id in replan.replaced
            if step_id in result.run.steps and result.run.steps[step_id].status == "skipped"
        ]
        failed = [step_id for step_id in replan.replaced if step_id not in pruned]
        store.record_event(
            run_id,
            "replan",
            replan.to_json_dict(),
            replan.ended_at if replan.ended_at is not None else time.time(),
        )
        if writer is not None and replan.started_at is not None and replan.ended_at is not None:
            writer.compile(
                replan.number + 1,
                replan.ended_at,
                replan.ended_at,
                list(replan.diagnostics),
                ok=replan.applied,
            )
            writer.replan(
                replan.number,
                failed=failed,
                pruned=pruned,
                new_steps=list(replan.new_ids),
                version=replan.number + 1,
                start=replan.started_at,
                end=replan.ended_at,
                trigger=replan.trigger,
                strategy=replan.strategy,
                strategy_reason=replan.strategy_reason,
                withdrawn=list(replan.withdrawn),
            )
    if result.status == "awaiting_approval" and request is not None:
        store.record_decision(run_id, last_version, request.plan_hash, "asked")
        if writer is not None:
            writer.approval(last_version, request.plan_hash, "asked", None, None)
        store.update_run(
            run_id,
            status="awaiting_approval",
            awaiting_since=time.time(),
            expires_at=request.expires_at,
            awaiting_reason=request.reason,
            spent_usd=spent_before[0] + result.run.spent_usd + routing_usd,
            spent_tokens=spent_before[1] + result.run.spent_tokens,
            pid=None,
        )
        return None
    detail = result.error.message if result.error is not None else None
    if result.status == "escalated":
        detail = result.run.escalation_detail
    store.update_run(
        run_id,
        status=result.status,
        spent_usd=spent_before[0] + result.run.spent_usd + routing_usd,
        spent_tokens=spent_before[1] + result.run.spent_tokens,
        detail=detail,
        pid=None,
    )
    if result.status == "escalated":
        return escalate_stored(store, run_id, result.run, hooks=hooks)
    return None


class RepairGate:
    """``exec --planner`` through the run store: the run recorded like ``exec``'s, the
    stored plan behind the approval gate, and each repair that adds steps with effects
    behind it too (a new plan version; ARCHITECTURE.md: any revised plan passes the same
    approval as the first).

    Args:
        store_path: ``--store`` (None: the default store).
        compiled: the stored plan, compiled with its params.
        options: the run's options (approval mode, expiry, redaction...).
        compile_span: when the plan compiled (seconds since the epoch), for the trace.
        hooks: called when the run escalates (its case is stored in any case).
    """

    def __init__(
        self,
        store_path: Path | None,
        compiled: CompiledPlan,
        options: RunOptions,
        *,
        compile_span: tuple[float, float],
        hooks: EscalationHooks | None = None,
    ) -> None:
        import uuid

        self.store = open_cli_store(store_path)
        self.compiled = compiled
        self.options = options
        self.run_id = uuid.uuid4().hex[:16]
        self.writer = trace_factory(self.store, options.redact)(self.run_id, 0)
        self.recorder = SessionRecorder(self.store, self.run_id, compiled.params)
        self.observers: list[Any] = [self.recorder, self.writer]
        self.approver = terminal_approver() if options.approve == "ask" else None
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
                common.stderr.print(f"error: {error}", markup=False, highlight=False)
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
        once it succeeded in 5 runs), for ``run_with_repairs(tool_durations=...)``: the
        plan-relative limits then measure the run against the estimate stored with the
        plan version."""
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
            self.outcome = escalate_stored(
                store, self.run_id, repaired.run, hooks=self.hooks, status=repaired.status
            )

    def close(self) -> None:
        """Close the trace and the store (once)."""
        if self._closed:
            return
        self._closed = True
        self.writer.close()
        self.store.close()


def _model_unreachable(result: AgentResult) -> bool:
    """Whether a resumed run ended because the replanner's call failed past its retries
    before any patch joined: the person's instruction was never used."""
    return (
        result.gave_up == "replanner_error"
        and result.error is not None
        and not any(record.applied for record in result.replans)
    )


def _keep_escalated(store: Store, writer: Any, run_id: str, row: Any, result: AgentResult) -> None:
    """Put a resumed run whose model could not be reached back as it was: ``escalated``,
    its case open, its detail and spend unchanged; the failed calls recorded."""
    for call in result.llm_calls:
        store.record_llm_call(run_id, "model", call)
        writer.llm_call(call, "model")
    store.update_run(
        run_id,
        status="escalated",
        detail=row.detail,
        spent_usd=row.spent_usd + result.run.spent_usd,
        spent_tokens=row.spent_tokens + result.run.spent_tokens,
        pid=None,
    )


def _tell_unreachable(
    run_id: str, planner: Mapping[str, Any], result: AgentResult, as_json: bool
) -> NoReturn:
    """Tell the person the model could not be reached and the escalation stays open;
    exit 5 (the run is escalated)."""
    import json
    import sys

    import typer

    assert result.error is not None
    where = planner.get("base_url") or f"the {planner.get('provider')} API"
    unreachable = result.error.type == "NotStartedError"  # nothing was sent
    what = "is unreachable" if unreachable else "failed the call"
    if as_json:
        document = {
            "run_id": run_id,
            "status": "escalated",
            "instruction_used": False,
            "error": {"type": result.error.type, "message": result.error.message},
        }
        sys.stdout.write(json.dumps(document, ensure_ascii=False, indent=2) + "\n")
    common.stderr.print(
        f"error: run {run_id}: the model endpoint {where} {what} ({result.error.message}); your "
        "instruction was not used and the run stays escalated: run the same command again "
        f"when the model answers, or point the run at another endpoint with `plandag resume "
        f"{run_id} --instruction TEXT --base-url URL` (or --provider, --model)",
        markup=False,
        highlight=False,
    )
    raise typer.Exit(common.EXIT_CODES["escalated"])


def resume_with_planner(
    store: Store,
    run_id: str,
    row: Any,
    prepared: tuple[CompiledPlan, RunOptions],
    *,
    instruction: str | None,
    who: str,
    hooks: EscalationHooks | None,
    as_json: bool,
    keep_endpoint: Callable[[Store, str, Any, RunOptions], None] | None = None,
) -> NoReturn:
    """``plandag resume RUN_ID [--instruction TEXT]`` on an escalated run that has a
    planner (``plandag run``, ``exec --planner``): the planner is brought back.

    The run's completed steps are kept with their results; what did not succeed before is
    shown to the replanner (and superseded by its patch); the instruction reaches the
    replanner verbatim; the replan caps start again (:meth:`Agent.resume`). The run is
    taken for this process and the new segment is recorded like ``plandag run``'s. Its
    escalation is closed as ``resumed`` (who, when, the instruction) once the replanner's
    patch joined the run (``keep_endpoint``, when given, then stores the endpoint the run
    was pointed at), or when the run ends otherwise.

    When the replanner's call fails past its retries before any patch joined (the model
    endpoint unreachable, or refusing the call), the instruction was never used: the run
    goes back to ``escalated`` with its case open, its failed calls recorded, and the
    person is told on stderr (exit 5, the run's state; ARCHITECTURE.md, "States and exit
    codes"). Never returns: prints the result and exits with its code.
    """
    import os

    import typer

    from plandag.brakes.retry import RetryPolicy
    from plandag.cli.models_options import model_client
    from plandag.cli.run_command import _report, exit_code
    from plandag.cli.signals import Interruptible, exit_code_for_signal
    from plandag.dag.plan import Plan
    from plandag.dag.references import find_references
    from plandag.errors import InputError
    from plandag.planner.agent import Agent
    from plandag.planner.triggers import Instruction
    from plandag.runs.escalations import close_escalation
    from plandag.store.sealing import unseal

    compiled, options = prepared
    assert options.planner is not None
    planner_options = dict(options.planner)
    rows = store.steps(run_id)
    current = compiled.plan
    done = {  # results as they were: secrets put back from the environment
        step_id: unseal(step.result, run_id=run_id)
        for step_id, step in rows.items()
        if step.status == "succeeded" and not step.superseded_by and step_id in compiled.steps
    }
    output = current.output
    if output is not None and any(
        reference.step_id not in done for _, reference in find_references(output)
    ):
        output = None  # it needs a step that did not succeed: the replan writes a new one
    header = Plan(
        goal=current.goal,
        params=current.params,
        steps=[step for step in current.steps if step.id in done],
        output=output,
    )
    earlier: list[dict[str, Any]] = [
        {
            "id": step_id,
            "tool": step.tool,
            "status": step.status,
            "reason": step.reason,
            "detail": step.detail,
            "error": step.error,
        }
        for step_id, step in sorted(rows.items())
        if step.status != "succeeded" and not step.superseded_by
    ]
    used_ids = max([*rows, *compiled.steps, 0])
    versions = store.plan_versions(run_id)
    # a job's run is replanned with the tools of that job, as its first plan was
    registry = job_registry(row, options)
    client = model_client(str(planner_options["provider"]), planner_options.get("base_url"))
    try:  # the plan's llm and agent steps get their model back (the key read again)
        models = options.models() if options.executor is not None else None
    except InputError as error:
        common.fail(f"run {run_id}: its plan has llm or agent steps: {error}")
    if not store.claim_run(run_id, ["escalated"], row.pid):
        common.fail(f"run {run_id}: another process took it first; `plandag runs` shows it")
    closed: list[bool] = []

    def close() -> None:
        """The instruction was taken (or the run ended otherwise): close the case once."""
        if closed:
            return
        closed.append(True)
        close_escalation(store, run_id, "resumed", who=who, note=instruction)
        if keep_endpoint is not None:
            keep_endpoint(store, run_id, row, options)

    segment = row.segment + 1
    store.update_run(run_id, status="running", segment=segment, pid=os.getpid(), detail=None)
    writer = trace_factory(store, options.redact)(run_id, segment)
    writer.run_started("resume", row.goal, row.params)
    params = dict(compiled.params)  # the secrets put back from the environment, as compiled
    recorder = SessionRecorder(
        store,
        run_id,
        params,
        segment=segment,
        completed=done,
        write_boundary=compiled.write_boundary,
        first_version=len(versions) + 1,
    )
    progress, observers = common.progress_observers(compiled, common.command_settings({}))

    def instruction_reader() -> list[Instruction]:
        """A person's instructions from the run store (`plandag tell`)."""
        return [
            Instruction(item.text, item.new_goal, item.who, item.time)
            for item in store.take_instructions(run_id)
        ]

    agent = Agent(
        client,
        str(planner_options["model"]),
        registry,
        limits=options.run_limits(float(row.options.get("elapsed_s", 0.0))),
        retry=RetryPolicy(retries=options.retries),
        observers=[*observers, recorder, writer],
        max_concurrency=options.max_concurrency,
        read_only=options.read_only,
        write_boundary=compiled.write_boundary,
        approve=options.approve,
        approver=terminal_approver(progress) if options.approve == "ask" else None,
        approval_expiry_s=options.expiry_s,
        on_session=recorder.bind,
        on_plan_version=recorder.plan_version,
        escalate=options.escalate,
        instructions=instruction_reader if row.command == "run" else None,
        http_allow=options.http_allow,
        models=models,
    )

    async def work() -> AgentResult:
        import anyio

        try:
            return await agent.resume(
                row.goal or current.goal or "",
                header,
                done,
                instruction=instruction,
                earlier=earlier,
                used_ids=used_ids,
                params=params,
                run_id=run_id,
                on_resumed=close,
            )
        finally:
            with anyio.CancelScope(shield=True):
                await client.aclose()
                if models is not None:
                    await models.client.aclose()

    escalated: DurableOutcome | None = None
    try:
        with progress:
            outcome = Interruptible(work).run()
        result = outcome.result
        if result is not None and not closed and _model_unreachable(result):
            _keep_escalated(store, writer, run_id, row, result)
            _tell_unreachable(run_id, planner_options, result, as_json)  # exits 5
        close()
        if result is not None:
            first = next((r for r in result.replans if r.trigger == "resume" and r.applied), None)
            if first is not None:
                for item in earlier:
                    store.supersede(run_id, int(item["id"]), first.new_ids)
            escalated = record_agent_run(
                store,
                writer,
                run_id,
                result,
                write_boundary=compiled.write_boundary,
                params=params,
                hooks=hooks,
                first_version=len(versions) + 1,
                spent_before=(row.spent_usd, row.spent_tokens),
            )
            if result.plan_versions:
                from plandag.cli.store_command import library_after_continue

                library_after_continue(
                    store,
                    run_id,
                    compiled,
                    options,
                    plan=result.plan_versions[-1],
                    tainted=result.tainted_steps,
                    replanned=bool(result.replans),
                )
        else:
            store.update_run(run_id, status="interrupted", pid=None)
    finally:
        writer.close()
        store.flush()
    if result is None:
        code = exit_code_for_signal(outcome.signal) if outcome.signal is not None else 130
        common.fail("the run was interrupted before it could report", code)
    assert result is not None
    _report(result, as_json)
    if escalated is not None and escalated.message:
        common.stderr.print(escalated.message, markup=False, highlight=False)
    common.stderr.print(f"run {run_id} ({result.status}); store {store.path}")
    if outcome.signal is not None:
        raise typer.Exit(exit_code_for_signal(outcome.signal))
    raise typer.Exit(exit_code(result))
