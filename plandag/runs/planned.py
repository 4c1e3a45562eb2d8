"""Planned runs in the run store: a run whose plan a model writes (``plandag run``, a
research run, ``exec --planner``'s repairs) recorded as it goes: each session's steps and
each plan version before its steps start (:class:`SessionRecorder`), then everything the
agent produced (:func:`record_agent_run`); a revision after a rejection (:func:`revise`);
and an escalated planned run brought back by a person (:class:`PlannerResume`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from plandag.dag.references import find_references
from plandag.errors import InputError
from plandag.runs.escalations import escalate_recorded

if TYPE_CHECKING:
    from plandag.approval import Approver
    from plandag.compiler.compiled import CompiledPlan
    from plandag.dag.plan import Plan
    from plandag.escalation import EscalationHooks
    from plandag.planner.agent import AgentResult
    from plandag.runs.options import DurableOutcome, RunOptions
    from plandag.store import Store

__all__ = [
    "MAX_REVISIONS",
    "PlannerResume",
    "SessionRecorder",
    "model_unreachable",
    "record_agent_run",
    "revise",
]


MAX_REVISIONS = 3
"""Rejections of one run that send its plan back to the planner (then it stays rejected)."""


def revise(store: Store, run_id: str, row: Any, options: RunOptions, writer: Any) -> list[str]:
    """A rejection of a run that has a planner (``plandag reject`` on a ``plandag run``):
    ask the planner for a revision with every rejection's feedback (the last one, verbatim,
    as the instruction), store the revised plan as a new version awaiting a decision, and
    record it in the trace (``writer``).

    Returns:
        What the person reads: the revised plan's summary and how to decide on it; or why
        there is no revision (past :data:`MAX_REVISIONS`, or the planner failed: the run
        stays rejected).

    Raises:
        InputError: the planner's key is not set, or the run's plan or tools cannot be
            read back (:func:`plandag.runs.stored.rebuild`).
    """
    import anyio

    from plandag.approval import ApprovalRequest, plan_hash, tool_schemas
    from plandag.compiler.compiled import allowed_hosts
    from plandag.dag.plan import Plan
    from plandag.executors.access import provider_client, require_key
    from plandag.planner.agent import revision_context
    from plandag.planner.planner import Planner
    from plandag.runs.segments import plan_estimate
    from plandag.runs.stored import rebuild, run_registry

    feedback = [
        decision.feedback or ""
        for decision in store.decisions(run_id)
        if decision.decision == "rejected"
    ]
    if len(feedback) > MAX_REVISIONS:
        return [
            f"run {run_id}: {len(feedback)} rejections, past the {MAX_REVISIONS} revisions a "
            "run gets; it stays rejected"
        ]
    assert options.planner is not None
    planner_options = dict(options.planner)
    versions = store.plan_versions(run_id)
    rejected = Plan.model_validate(versions[-1].plan)
    compiled, _ = rebuild(store, run_id, row, options=options)
    # a job's run is replanned with the tools of that job, as its first plan was
    registry = run_registry(options, row.command)
    provider, base_url = str(planner_options["provider"]), planner_options.get("base_url")
    client = provider_client(provider, base_url, require_key(provider, base_url))
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
        return [f"run {run_id}: the planner could not revise it: {error}"]
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
    revised, _ = rebuild(store, run_id, store.run(run_id), options=options)
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
    return [
        *request.summary_lines(),
        f"run {run_id}: revised plan version {version} awaits a decision "
        f"(`plandag approve {run_id} --hash {digest}`)",
    ]


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
        return escalate_recorded(store, run_id, result.run, hooks=hooks)
    return None


def model_unreachable(result: AgentResult) -> bool:
    """Whether a resumed run ended because the replanner's call failed past its retries
    before any patch joined: the person's instruction was never used."""
    return (
        result.gave_up == "replanner_error"
        and result.error is not None
        and not any(record.applied for record in result.replans)
    )


class PlannerResume:
    """An escalated run that has a planner (``plandag run``, ``exec --planner``) brought
    back by a person (``plandag resume RUN_ID [--instruction TEXT]``).

    The run's completed steps are kept with their results; what did not succeed before is
    shown to the replanner (and superseded by its patch); the instruction reaches the
    replanner verbatim; the replan caps start again (:meth:`Agent.resume`). Making it takes
    the run for this process and opens the new segment; :meth:`work` runs it (a coroutine
    function, so that the caller runs it under its own signal handling), :meth:`finish`
    records it like ``plandag run``'s, :meth:`close` closes its trace. Its escalation is
    closed as ``resumed`` (who, when, the instruction) once the replanner's patch joined
    the run (``keep_endpoint``, when given, then stores the endpoint the run was pointed
    at), or when the run ends otherwise.

    When the replanner's call fails past its retries before any patch joined (the model
    endpoint unreachable, or refusing the call), the instruction was never used:
    :meth:`finish` puts the run back ``escalated`` with its case open and its failed calls
    recorded, and sets :attr:`unreachable` (the caller tells the person; exit 5, the run's
    state: ARCHITECTURE.md, "States and exit codes").

    Args:
        store, run_id, row: the run store, the run and its row.
        prepared: its current plan version compiled again and its options
            (:func:`plandag.runs.stored.prepare`).
        instruction: the person's instruction, or None.
        who: the person's name.
        hooks: called when the run escalates again (its case is stored in any case).
        observers: more run event observers (progress display, heartbeat...).
        approver: who decides when a plan with effects needs a person, or None.
        keep_endpoint: ``keep_endpoint(store, run_id, row, options)`` stores where the run
            was pointed (``plandag resume --provider --model --base-url``), called when its
            escalation is closed; or None.

    Raises:
        InputError: the planner's or the model steps' key is not set, the run's tools
            cannot be loaded, or another process took the run first (nothing is recorded).
    """

    def __init__(
        self,
        store: Store,
        run_id: str,
        row: Any,
        prepared: tuple[CompiledPlan, RunOptions],
        *,
        instruction: str | None,
        who: str,
        hooks: EscalationHooks | None,
        observers: Sequence[Any] = (),
        approver: Approver | None = None,
        keep_endpoint: Callable[[Store, str, Any, RunOptions], None] | None = None,
    ) -> None:
        import os

        from plandag.brakes.retry import RetryPolicy
        from plandag.dag.plan import Plan
        from plandag.executors.access import provider_client, require_key
        from plandag.planner.agent import Agent
        from plandag.planner.triggers import Instruction
        from plandag.runs.stored import run_registry
        from plandag.runs.traces import trace_factory
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
        self.header = Plan(
            goal=current.goal,
            params=current.params,
            steps=[step for step in current.steps if step.id in done],
            output=output,
        )
        self.earlier: list[dict[str, Any]] = [
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
        self.used_ids = max([*rows, *compiled.steps, 0])
        self.first_version = len(store.plan_versions(run_id)) + 1
        # a job's run is replanned with the tools of that job, as its first plan was
        registry = run_registry(options, row.command)
        provider, base_url = str(planner_options["provider"]), planner_options.get("base_url")
        self.client = provider_client(provider, base_url, require_key(provider, base_url))
        try:  # the plan's llm and agent steps get their model back (the key read again)
            self.models = options.models() if options.executor is not None else None
        except InputError as error:
            raise InputError(f"run {run_id}: its plan has llm or agent steps: {error}") from error
        if not store.claim_run(run_id, ["escalated"], row.pid):
            raise InputError(
                f"run {run_id}: another process took it first; `plandag runs` shows it"
            )
        self.who, self.keep_endpoint = who, keep_endpoint
        self.case_closed = False
        self.unreachable = False
        """Whether the model could not be reached: the run was put back escalated
        (:meth:`finish`)."""
        segment = row.segment + 1
        store.update_run(run_id, status="running", segment=segment, pid=os.getpid(), detail=None)
        self.store, self.run_id, self.row = store, run_id, row
        self.compiled, self.options = compiled, options
        self.instruction, self.hooks, self.done = instruction, hooks, done
        self.writer = trace_factory(store, options.redact)(run_id, segment)
        self.writer.run_started("resume", row.goal, row.params)
        self.params = dict(compiled.params)  # the secrets put back, as compiled
        recorder = SessionRecorder(
            store,
            run_id,
            self.params,
            segment=segment,
            completed=done,
            write_boundary=compiled.write_boundary,
            first_version=self.first_version,
        )

        def instruction_reader() -> list[Instruction]:
            """A person's instructions from the run store (`plandag tell`)."""
            return [
                Instruction(item.text, item.new_goal, item.who, item.time)
                for item in store.take_instructions(run_id)
            ]

        self.agent = Agent(
            self.client,
            str(planner_options["model"]),
            registry,
            limits=options.run_limits(float(row.options.get("elapsed_s", 0.0))),
            retry=RetryPolicy(retries=options.retries),
            observers=[*observers, recorder, self.writer],
            max_concurrency=options.max_concurrency,
            read_only=options.read_only,
            write_boundary=compiled.write_boundary,
            approve=options.approve,
            approver=approver,
            approval_expiry_s=options.expiry_s,
            on_session=recorder.bind,
            on_plan_version=recorder.plan_version,
            escalate=options.escalate,
            instructions=instruction_reader if row.command == "run" else None,
            http_allow=options.http_allow,
            models=self.models,
        )
        self._closed = False

    async def work(self) -> AgentResult:
        """Replan and run the rest of the run; the clients are closed after."""
        import anyio

        try:
            return await self.agent.resume(
                self.row.goal or self.compiled.plan.goal or "",
                self.header,
                self.done,
                instruction=self.instruction,
                earlier=self.earlier,
                used_ids=self.used_ids,
                params=self.params,
                run_id=self.run_id,
                on_resumed=self.close_case,
            )
        finally:
            with anyio.CancelScope(shield=True):
                await self.client.aclose()
                if self.models is not None:
                    await self.models.client.aclose()

    def close_case(self) -> None:
        """The instruction was taken (or the run ended otherwise): close the escalation as
        ``resumed`` and store the endpoint the run was pointed at, once."""
        if self.case_closed:
            return
        from plandag.runs.escalations import close_escalation

        self.case_closed = True
        close_escalation(self.store, self.run_id, "resumed", who=self.who, note=self.instruction)
        if self.keep_endpoint is not None:
            self.keep_endpoint(self.store, self.run_id, self.row, self.options)

    def finish(self, result: AgentResult | None) -> tuple[DurableOutcome | None, list[str]]:
        """Record what the segment produced (``interrupted`` when ``result`` is None): the
        steps the replan superseded, the plan versions, decisions and model calls
        (:func:`record_agent_run`), and the plan library's bookkeeping. A run whose model
        could not be reached before any patch joined goes back to ``escalated`` as it was,
        its case open and its failed calls recorded (:attr:`unreachable`).

        Returns:
            The outcome of a run that escalated again (its message for the person), or
            None; and the library's lines (:func:`plandag.runs.library.finish_library`).
        """
        store, run_id = self.store, self.run_id
        if result is not None and not self.case_closed and model_unreachable(result):
            self._keep_escalated(result)
            self.unreachable = True
            return None, []
        self.close_case()
        if result is None:
            store.update_run(run_id, status="interrupted", pid=None)
            return None, []
        first = next((r for r in result.replans if r.trigger == "resume" and r.applied), None)
        if first is not None:
            for item in self.earlier:
                store.supersede(run_id, int(item["id"]), first.new_ids)
        escalated = record_agent_run(
            store,
            self.writer,
            run_id,
            result,
            write_boundary=self.compiled.write_boundary,
            params=self.params,
            hooks=self.hooks,
            first_version=self.first_version,
            spent_before=(self.row.spent_usd, self.row.spent_tokens),
        )
        lines: list[str] = []
        if result.plan_versions:
            from plandag.runs.library import finish_library

            lines = finish_library(
                store,
                run_id,
                self.compiled,
                self.options,
                plan=result.plan_versions[-1],
                tainted=result.tainted_steps,
                replanned=bool(result.replans),
            )
        return escalated, lines

    def _keep_escalated(self, result: AgentResult) -> None:
        """Put the run back as it was: ``escalated``, its case open, its detail and spend
        unchanged; the failed calls recorded."""
        for call in result.llm_calls:
            self.store.record_llm_call(self.run_id, "model", call)
            self.writer.llm_call(call, "model")
        self.store.update_run(
            self.run_id,
            status="escalated",
            detail=self.row.detail,
            spent_usd=self.row.spent_usd + result.run.spent_usd,
            spent_tokens=self.row.spent_tokens + result.run.spent_tokens,
            pid=None,
        )

    def close(self) -> None:
        """Close the segment's trace and write what the store queued (once)."""
        if self._closed:
            return
        self._closed = True
        self.writer.close()
        self.store.flush()
