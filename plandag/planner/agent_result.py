"""What a run of the :class:`~plandag.planner.agent.Agent` produced
(:class:`AgentResult`), with the step-by-step approvals it recorded (:class:`PlanAmendment`),
why it gave up (:data:`GaveUpReason`) and what a plan library did in it
(:class:`LibraryReport`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, Protocol

from plandag.compiler import Diagnostic
from plandag.dag.plan import Plan
from plandag.models import CallRecord
from plandag.planner.joiner import JoinDecision
from plandag.planner.planner import PlanOutcome
from plandag.planner.replanner import ReplanRecord
from plandag.planner.triggers import Instruction
from plandag.scheduler.decisions import StepDecision
from plandag.scheduler.estimate import PlanEstimate
from plandag.scheduler.gate import ApprovalRequest, Decision
from plandag.scheduler.result import RunResult, RunStatus, StepErrorInfo, to_jsonable

__all__ = ["AgentResult", "GaveUpReason", "LibraryReport", "PlanAmendment", "call_json"]

GaveUpReason = Literal["max_replans", "no_progress", "blocked_intent", "budget", "replanner_error"]
"""Why the agent gave up: the replan cap, the no-progress cap, an intent failed
``max_blocked`` times, the cost cap refused a model call, or a model call of the replanner or
joiner failed past its retries."""


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


@dataclasses.dataclass(frozen=True)
class AgentResult:
    """What :meth:`Agent.run <plandag.planner.agent.Agent.run>` produced.

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
            (:meth:`Agent.tell <plandag.planner.agent.Agent.tell>`, ``plandag tell``), in
            the order received.
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
        document["llm_calls"] = [call_json(record) for record in self.llm_calls]
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
        document["routing_calls"] = [call_json(record) for record in self.routing_calls]
        document["routing_cost_usd"] = sum(record.cost_usd for record in self.routing_calls)
        document["library"] = self.library.as_dict() if self.library is not None else None
        return document


def call_json(record: CallRecord) -> dict[str, Any]:
    """One model call as JSON-ready data (``--json``'s ``llm_calls`` and ``routing_calls``)."""
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
