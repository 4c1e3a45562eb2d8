"""Stored plans with a planner attached: the plan runs with no model call, and only a step
that fails on an input is shown to the replanner, with that input's excerpt
(docs/planning.md; ARCHITECTURE.md, "Retry vs replan", "Replanning",
"Untrusted content").

:func:`run_with_repairs` runs a compiled stored plan in a run session
(:func:`~plandag.scheduler.session.open_session`, the plan sealed at once, effects not held:
it compiled whole before it started) and awaits :meth:`RunSession.settled`. When the run
settles with steps that need a replan (failed after their retries, pruned, cancelled) and
the caller's **trigger** says the failure is one a repair can fix, the
:class:`PlanRepairer` asks the model for a patch, the patch is compiled against the run
(:meth:`Replanner.apply`: the same compiler and write boundary as the stored plan) and runs
in the same run; completed steps keep their results and never run again. Caps, as
``plandag run``: at most ``max_replans`` (3) model replans, at most
``max_replans_without_progress`` (2) in a row with no step newly completed, counted per
failed subgraph (:class:`~plandag.planner.progress.ProgressLedger`); past a cap the
run ends ``escalated`` (handed to a person with its state; ``gave_up`` with
``escalate="never"``), never with an invented result. The cost caps pay the model
calls (the session's budget, which a batch shares), and each call is bounded by the
session's wall-clock cap.

What the model sees (:func:`repair_prompt`): the replanner's prompt
(:func:`~plandag.planner.replanner.replan_prompt`: the goal, every step with its state, the
completed steps' results as quoted data, the failed steps' errors, the pruned steps), then
the relevant excerpt of the input the run failed on, as one more quoted data block (at most
``excerpt_chars`` characters: a longer one keeps its first and last halves and says so).

**The trigger** (:data:`Trigger`): a function of the run that says whether its failure is
one to repair. Never a trigger, whatever the function says: a run stopped by a brake
(deadline, stall, interruption: ``stop_reason``) and steps skipped by the cost cap (reason
``budget``): a repair cannot undo those. :func:`any_failure` (``plandag exec --planner``)
repairs every failed, pruned or cancelled step. ``plandag extract nfe --planner`` uses a
narrower one (:func:`plandag.extract.nfe.document.nfe_needs_repair`): business outcomes of
the data are not plan failures.

**Reuse** (``reuse=True``, the default): a repair that succeeded with a single patch is
kept by the repairer, keyed by the stored plan (its JSON's SHA-256) and the steps it
replaced. A later run of the same plan (the next input of a batch) that fails on exactly the
same steps first gets that patch applied with no model call (``reused`` on the record); if
the reused patch does not compile or its steps fail again, the model is asked as usual
(the reuse is tried once per run and does not count against the caps). Two inputs failing
at the same moment may each call the model before either repair is known; that is accepted
(no input waits on another).

:func:`save_repair` writes a repaired plan that succeeded as a readable plan file (the whole
plan after the patch: the original steps that succeeded, the new steps, superseded steps
removed, the output updated) named ``NAME.HASH.json`` (``HASH``: the first 10 hex digits of
the plan file's SHA-256), and a sidecar ``NAME.HASH.repair.json`` saying what failed and
what the model changed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import anyio

from plandag.brakes.budget import Budget
from plandag.brakes.clock import Clock, SystemClock
from plandag.brakes.retry import RetryPolicy
from plandag.compiler import CompiledPlan
from plandag.dag.plan import Plan
from plandag.errors import PlanBudgetError
from plandag.executors.access import ModelAccess
from plandag.executors.data import quote_data
from plandag.models import (
    DEFAULT_PRICES,
    BudgetRefusedError,
    CallRecord,
    LLMClient,
    PriceTable,
    call_with_retries,
)
from plandag.models.calls import deadline_from
from plandag.planner.intents import IntentLedger
from plandag.planner.progress import ProgressLedger
from plandag.planner.replanner import (
    DEFAULT_REPLAN_MAX_CHARS,
    DEFAULT_REPLAN_MAX_TOKENS,
    Replanner,
    ReplanRecord,
    failure_summary,
    replan_prompt,
)
from plandag.planner.triggers import ReplanStrategy, StrategyChoice, choose_strategy
from plandag.scheduler import events
from plandag.scheduler.estimate import PlanEstimate, estimate_plan
from plandag.scheduler.result import EscalationMode, RunResult, RunStatus, StepErrorInfo
from plandag.scheduler.runner import RunLimits
from plandag.scheduler.session import RunSession, SessionState, open_session
from plandag.tools.registry import Registry

__all__ = [
    "DEFAULT_EXCERPT_CHARS",
    "KnownRepair",
    "PlanRepairer",
    "RepairGaveUp",
    "RepairedRun",
    "Trigger",
    "any_failure",
    "failed_steps",
    "plan_file_document",
    "repair_prompt",
    "run_with_repairs",
    "save_repair",
]

DEFAULT_EXCERPT_CHARS = 4000
"""Characters of the input excerpt shown to the model (first and last halves kept)."""

RepairGaveUp = Literal["max_replans", "no_progress", "blocked_intent", "budget", "replanner_error"]
"""Why a repair gave up: the replan cap, the no-progress cap, an intent failed
``max_blocked`` times (:mod:`plandag.planner.intents`), the cost cap refused a model call, or
a model call failed past its retries (or was cut at ``max_tokens``)."""

Trigger = Callable[[RunSession, SessionState], bool]
"""Whether a settled run's failure is one to repair: ``(session, state) -> bool``; called
only when ``state.needs_replan`` is not empty, no brake stopped the run and no step was
skipped by the cost cap."""

Excerpt = Callable[[RunSession, SessionState], Any]
"""The relevant excerpt of the run's input, for the model: ``(session, state) -> value``
(any JSON value, or a string; None: no excerpt). Quoted as data, never as instructions."""

REPAIR_NOTE = (
    "The plan above is a stored plan: it ran with no model until this input made a step "
    "fail. Repair it for this input: replace the failed part with steps that work on it "
    "(the excerpt shows what the input holds; read fields where the input has them)."
)


def any_failure(session: RunSession, state: SessionState) -> bool:
    """The trigger of ``plandag exec --planner``: every failed, pruned or cancelled step.

    Args:
        session: the run (unused).
        state: its settled state.

    Returns:
        True when ``state.needs_replan`` is not empty.
    """
    return bool(state.needs_replan)


def failed_steps(session: RunSession, state: SessionState) -> list[dict[str, Any]]:
    """What failed, as JSON-safe data (the sidecar's ``failed``).

    Args:
        session: the run.
        state: its state.

    Returns:
        ``[{"step", "tool", "reason", "error_type", "message", "checks"}]`` for each failed
        step (``checks``: the failing checks' ``{"kind", "detail"}``), in id order.
    """
    found = []
    for step_id, failure in state.failed.items():
        record = session.records[step_id]
        found.append(
            {
                "step": step_id,
                "tool": record.tool,
                "reason": failure.reason,
                "error_type": failure.error.type if failure.error is not None else None,
                "message": failure.error.message if failure.error is not None else failure.detail,
                "checks": [
                    {"kind": outcome.kind, "detail": outcome.detail}
                    for outcome in record.checks
                    if outcome.status == "fail"
                ],
            }
        )
    return found


def repair_prompt(
    goal: str,
    session: RunSession,
    state: SessionState,
    excerpt: Any = None,
    *,
    max_chars: int = DEFAULT_REPLAN_MAX_CHARS,
    excerpt_chars: int = DEFAULT_EXCERPT_CHARS,
    strategy: ReplanStrategy = "partial",
    registry: Registry | None = None,
) -> str:
    """The repair request's user message: the replanner's prompt, then the input excerpt.

    Args:
        goal: the stored plan's goal (trusted: the plan's author wrote it).
        session: the run.
        state: its settled state (the failure).
        excerpt: the input's relevant excerpt (any JSON value or text), or None.
        max_chars: characters of each step result shown.
        excerpt_chars: characters of the excerpt shown (>= 2).
        strategy: ``partial`` (a patch of the failed part) or ``total`` (plan again from
            the goal; :mod:`plandag.planner.triggers`).
        registry: the tools and checks patches may use: the steps are listed as the model
            writes them (:func:`~plandag.planner.replanner.replan_prompt`); None lists
            arguments as they are.

    Returns:
        The text; the results and the excerpt are inside data blocks.
    """
    text = replan_prompt(
        goal, session, state, max_chars=max_chars, strategy=strategy, registry=registry
    )
    parts = [text.rstrip("\n"), REPAIR_NOTE]
    if excerpt is not None:
        parts.append(
            "The input this run failed on (an excerpt):\n"
            + quote_data("input excerpt", excerpt, excerpt_chars)
        )
    return "\n\n".join(parts) + "\n"


def _fingerprint(plan: Plan) -> str:
    return hashlib.sha256(plan.model_dump_json().encode("utf-8")).hexdigest()


@dataclasses.dataclass(frozen=True)
class KnownRepair:
    """A repair that worked, kept for reuse (see the module's "Reuse"); picklable, so that
    a batch's worker processes can apply it too (:mod:`plandag.extract.parallel`).

    Attributes:
        plan: the stored plan's fingerprint (the SHA-256 of its JSON).
        replaced: the steps the repair replaced (the run's ``needs_replan``), in order.
        max_id: the run's largest step id when the repair was asked for.
        text: the patch, as the model wrote it (wire JSON).
    """

    plan: str
    replaced: tuple[int, ...]
    max_id: int
    text: str


class PlanRepairer:
    """The model side of stored plans run with a planner attached; one per command, shared
    by every input of a batch (it holds the repairs that worked, for reuse).

    Args:
        client: the model provider.
        model: the model name (``claude-sonnet-4-6``...).
        registry: the tools and check kinds patches may use (listed in the prompt).
        prices: the price table for call records and the budget.
        retry: retries of transient model call failures (default ``RetryPolicy()``).
        clock: where retry delays are slept (default the system clock).
        max_replans: model replans per run (>= 0; ARCHITECTURE.md, "Replanning": 3).
        max_replans_without_progress: replans in a row with no newly completed step (>= 1;
            ARCHITECTURE.md, "Replanning": 2).
        max_tokens: output tokens of a patch.
        max_chars: characters of each step result shown.
        excerpt_chars: characters of the input excerpt shown (>= 2).
        reuse: apply a repair that worked to a later run failing the same way, first,
            without a model call.
        max_blocked: failures of one intent (:mod:`plandag.planner.intents`) in a run
            after which its repairs stop and the run escalates (reason ``blocked_intent``);
            default 3, None: never.
        total_replan_below: a completion fraction (0 to 1) under which a repair plans
            again from the goal (``total``) instead of patching the failed part; None
            (default): off (:mod:`plandag.planner.triggers`).

    Attributes:
        calls: every model call attempt of every run, in order.

    Raises:
        ValueError: a cap out of range.
    """

    def __init__(
        self,
        client: LLMClient,
        model: str,
        registry: Registry,
        *,
        prices: PriceTable = DEFAULT_PRICES,
        retry: RetryPolicy | None = None,
        clock: Clock | None = None,
        max_replans: int = 3,
        max_replans_without_progress: int = 2,
        max_tokens: int = DEFAULT_REPLAN_MAX_TOKENS,
        max_chars: int = DEFAULT_REPLAN_MAX_CHARS,
        excerpt_chars: int = DEFAULT_EXCERPT_CHARS,
        reuse: bool = True,
        max_blocked: int | None = 3,
        total_replan_below: float | None = None,
    ) -> None:
        if max_blocked is not None and max_blocked < 1:
            raise ValueError(f"max_blocked must be >= 1 or None, not {max_blocked}")
        if total_replan_below is not None and not 0 <= total_replan_below <= 1:
            raise ValueError(
                f"total_replan_below must be a fraction from 0 to 1 or None, not "
                f"{total_replan_below}"
            )
        if max_replans < 0:
            raise ValueError(f"max_replans must be >= 0, not {max_replans}")
        if max_replans_without_progress < 1:
            raise ValueError(
                f"max_replans_without_progress must be >= 1, not {max_replans_without_progress}"
            )
        if excerpt_chars < 2:
            raise ValueError(f"excerpt_chars must be >= 2, not {excerpt_chars}")
        self.client = client
        self.model = model
        self.registry = registry
        self.prices = prices
        self.retry = retry if retry is not None else RetryPolicy()
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.max_replans = max_replans
        self.max_replans_without_progress = max_replans_without_progress
        self.max_tokens = max_tokens
        self.max_chars = max_chars
        self.excerpt_chars = excerpt_chars
        self.reuse = reuse
        self.max_blocked = max_blocked
        self.total_replan_below = total_replan_below
        self.calls: list[CallRecord] = []
        self._known: list[KnownRepair] = []

    def replanner(self, compiled: CompiledPlan) -> Replanner:
        """A :class:`Replanner` for one run of ``compiled`` (its read-only flag and write
        boundary), whose calls are reserved on the run's budget."""
        return Replanner(
            self.client,
            self.model,
            self.registry,
            prices=self.prices,
            retry=self.retry,
            clock=self.clock,
            max_tokens=self.max_tokens,
            max_chars=self.max_chars,
            read_only=compiled.read_only,
            write_boundary=compiled.write_boundary,
            http_allow=compiled.http_allow,
        )

    def known(self, plan: str, replaced: tuple[int, ...], max_id: int) -> KnownRepair | None:
        """The repair that worked for ``plan`` failing on ``replaced`` (largest id
        ``max_id``), or None."""
        if not self.reuse:
            return None
        for item in self._known:
            if (item.plan, item.replaced, item.max_id) == (plan, replaced, max_id):
                return item
        return None

    def known_repairs(self) -> tuple[KnownRepair, ...]:
        """Every repair kept for reuse so far, in the order they were kept (none when
        ``reuse`` is off); the list only grows."""
        return tuple(self._known) if self.reuse else ()

    def remember(self, item: KnownRepair) -> None:
        """Keep a repair that worked (once per plan and failure)."""
        if self.reuse and self.known(item.plan, item.replaced, item.max_id) is None:
            self._known.append(item)

    async def ask(
        self,
        session: RunSession,
        compiled: CompiledPlan,
        state: SessionState,
        excerpt: Any,
        *,
        number: int,
        previous: ReplanRecord | None,
        records: list[CallRecord],
        strategy: StrategyChoice | None = None,
        withdrawn: tuple[int, ...] = (),
    ) -> ReplanRecord:
        """One model replan of the run's failed part; the patch is applied if it compiles.

        Args:
            session: the open run.
            compiled: the stored plan as compiled (goal, read-only flag, boundary).
            state: the settled state the patch answers.
            excerpt: the input's excerpt, or None.
            number: this replan's number in the run.
            previous: the last replan when its patch did not compile (a repair: its answer
                and diagnostics go back to the model), else None.
            records: the run's call records (each attempt is appended here and to
                :attr:`calls`).
            strategy: the replan's strategy and why (default: partial).
            withdrawn: steps not started that were dropped for it.

        Returns:
            The :class:`ReplanRecord`.

        Raises:
            TimeoutError: the session's wall-clock cap passed during the call.
            BudgetRefusedError: the budget could not hold the call's estimate.
            StepError: the call failed past its retries; ``TruncatedResponseError`` when
                cut at ``max_tokens``.
        """
        replanner = self.replanner(compiled)
        prompt = repair_prompt(
            compiled.plan.goal,
            session,
            state,
            excerpt,
            max_chars=self.max_chars,
            excerpt_chars=self.excerpt_chars,
            strategy=strategy.strategy if strategy is not None else "partial",
            registry=self.registry,
        )
        request = replanner.request_for(prompt, previous)
        first = len(records)
        try:
            with anyio.fail_after(session.remaining_s):
                response = await call_with_retries(
                    self.client,
                    request,
                    self.retry,
                    self.clock,
                    session.budget,
                    prices=self.prices,
                    records=records,
                    deadline=deadline_from(self.clock, session.remaining_s),
                )
        finally:
            self.calls.extend(records[first:])
        replaced = state.needs_replan
        applied, new_ids, diagnostics, output_changed = replanner.apply(
            session, response.text, replaced
        )
        return ReplanRecord(
            number=number,
            trigger="failure",
            reason=failure_summary(session, state),
            replaced=replaced,
            new_ids=new_ids,
            applied=applied,
            text=response.text,
            output_tokens=response.usage.output_tokens,
            diagnostics=diagnostics,
            output_changed=output_changed,
            strategy=strategy.strategy if strategy is not None else "partial",
            strategy_reason=strategy.reason if strategy is not None else "",
            withdrawn=withdrawn,
        )


@dataclasses.dataclass(frozen=True)
class RepairedRun:
    """What :func:`run_with_repairs` produced.

    Attributes:
        status: the run's status (:attr:`RunResult.status`): ``escalated`` when a replan
            cap stopped the repairs (``gave_up`` with ``escalate="never"``), ``gave_up``
            when a model call was refused or failed.
        run: the run's :class:`RunResult` (superseded steps with ``superseded_by``).
        replans: every replan (model or reused), applied or not, in order.
        llm_calls: this run's model call attempts, in order (none when nothing failed, or
            a known repair was reused).
        triggered: the trigger fired at least once (a repair was wanted).
        reused: a known repair was applied with no model call.
        gave_up: why the repairs stopped (:data:`RepairGaveUp`), else None.
        error: a failed model call's type and message, else None.
        failed: what failed first (:func:`failed_steps` of the first triggering state).
        plan: the whole plan after the patches (original steps not superseded, new steps,
            the output), when at least one patch was applied; else None.
        plan_name: a name for saved files (the caller's).
    """

    status: RunStatus
    run: RunResult
    replans: tuple[ReplanRecord, ...] = ()
    llm_calls: tuple[CallRecord, ...] = ()
    triggered: bool = False
    reused: bool = False
    gave_up: RepairGaveUp | None = None
    error: StepErrorInfo | None = None
    failed: tuple[Mapping[str, Any], ...] = ()
    plan: Plan | None = None

    @property
    def repaired(self) -> bool:
        """The run succeeded thanks to at least one applied patch."""
        return self.status == "succeeded" and self.plan is not None

    def summary(self) -> dict[str, Any]:
        """A short JSON-safe note: ``{"replans", "model_calls", "reused", "gave_up",
        "replaced", "new_steps"}`` (``replaced``/``new_steps``: over the applied patches)."""
        applied = [record for record in self.replans if record.applied]
        return {
            "replans": len(self.replans),
            "model_calls": len(self.llm_calls),
            "reused": self.reused,
            "gave_up": self.gave_up,
            "replaced": sorted({key for record in applied for key in record.replaced}),
            "new_steps": sorted({key for record in applied for key in record.new_ids}),
        }

    def to_json_dict(self) -> dict[str, Any]:
        """The RunResult's JSON (``status`` replaced by :attr:`status`) plus ``replans``,
        ``llm_calls`` (count, tokens, cost), ``gave_up``, ``error`` and ``repaired``."""
        document = self.run.to_json_dict()
        document["status"] = self.status
        document["replans"] = [record.to_json_dict() for record in self.replans]
        document["llm_calls"] = [
            {
                "model": record.model,
                "attempt": record.attempt,
                "input_tokens": record.usage.input_tokens,
                "output_tokens": record.usage.output_tokens,
                "cost_usd": record.cost_usd,
                "error": record.error,
            }
            for record in self.llm_calls
        ]
        document["gave_up"] = self.gave_up
        document["error"] = self.error.as_dict() if self.error is not None else None
        document["repaired"] = self.repaired
        document["reused_repair"] = self.reused
        return document


def whole_plan(compiled: CompiledPlan, session: RunSession) -> Plan:
    """The plan after the patches: steps not superseded, in id order, and the output."""
    records = session.records
    steps = [
        session.steps[key].step
        for key in sorted(session.steps)
        if records[key].superseded_by is None
    ]
    original = compiled.plan
    return Plan(goal=original.goal, params=original.params, steps=steps, output=session.output)


async def run_with_repairs(
    compiled: CompiledPlan,
    registry: Registry,
    *,
    repairer: PlanRepairer | None,
    trigger: Trigger = any_failure,
    excerpt: Excerpt | None = None,
    limits: RunLimits | None = None,
    retry: RetryPolicy | None = None,
    observers: Sequence[events.Observer] = (),
    max_concurrency: int | None = None,
    tool_limits: Mapping[str, int] | None = None,
    budget: Budget | None = None,
    clock: Clock | None = None,
    run_id: str | None = None,
    on_session: Callable[[RunSession], None] | None = None,
    approve_patch: Callable[[RunSession, tuple[int, ...]], Awaitable[str]] | None = None,
    escalate: EscalationMode = "person",
    approve_plan: Callable[[RunSession], Awaitable[str]] | None = None,
    plan_estimate: PlanEstimate | None = None,
    tool_durations: Mapping[str, float] | None = None,
    models: ModelAccess | None = None,
) -> RepairedRun:
    """Run a compiled stored plan; repair the failures ``trigger`` accepts, within the caps.

    With no failure (or ``repairer`` None) no model is called: the run is that of
    :func:`~plandag.scheduler.run_plan` on a session.

    Args:
        compiled: the stored plan with this run's params.
        registry: the tools and check kinds (the plan's and the patches').
        repairer: the model side, or None (no repair: failures end the run as usual).
        trigger: which failures to repair (default :func:`any_failure`).
        excerpt: the input's relevant excerpt for the model, or None.
        limits, retry, observers, max_concurrency, tool_limits, budget, clock, run_id,
            models: as :func:`~plandag.scheduler.session.open_session`; the budget pays the
            model calls too.
        on_session: called with the session as soon as it opens (a run store's recorder).
        approve_patch: the approval gate for repairs (ARCHITECTURE.md, "Untrusted content": a
            revised plan passes the same approval as the first): steps with effects a patch adds
            are held until ``await approve_patch(session, new_ids)`` returns ``"approved"``;
            any other answer (``"rejected"``, ``"awaiting_approval"``) ends the repairs and
            becomes the run's status. None: patches' effects run at once, except steps that send
            tainted data out (a repair written after the model read outside content):
            those never run without an approval (they end ``skipped``, ``effects_held``).
        escalate: past a replan cap: ``person`` (default) ends the run ``escalated``
            (reason ``replan_caps``, or ``no_valid_replan`` when the last patches never
            compiled), ``never`` ends it ``gave_up``
            (:data:`~plandag.scheduler.result.EscalationMode`).
        approve_plan: the approval gate for the stored plan itself: its steps with effects
            are held until ``await approve_plan(session)`` returns ``"approved"``, while its
            steps without effects run (a pending approval never holds them); any other
            answer ends the run with that status once those steps have ended. None: the
            plan's effects run at once.
        plan_estimate: the plan's estimate that ``limits``' plan-relative limits
            (``plan_cost_factor``, ``plan_time_factor``) are measured against from the
            run's opening, as for :func:`~plandag.scheduler.run_plan`; default:
            :func:`~plandag.scheduler.estimate.estimate_plan` of ``compiled`` with
            ``tool_durations``. A run past them ends ``escalated`` (reason
            ``plan_budget``); a repair patch projected past them is not run.
        tool_durations: seconds per tool name measured in the run store
            (:meth:`plandag.store.Store.tool_durations`), replacing declared figures in
            the plan's and the patches' estimates.

    Returns:
        The :class:`RepairedRun`; never raises for a failed step or model call.

    Raises:
        ValueError: bad limits (as ``open_session``).
    """
    replans: list[ReplanRecord] = []
    calls: list[CallRecord] = []
    failed: tuple[Mapping[str, Any], ...] = ()
    triggered = False
    reuses: set[int] = set()  # numbers of the replans that reused a known repair
    gave_up: RepairGaveUp | None = None
    error: StepErrorInfo | None = None
    whole: Plan | None = None
    session_ref: list[RunSession] = []
    fingerprint: str | None = None
    bases: dict[int, int] = {}  # replan number -> the run's largest id when it was asked
    the_limits = limits if limits is not None else RunLimits()
    if plan_estimate is None and (
        the_limits.plan_cost_factor is not None or the_limits.plan_time_factor is not None
    ):
        plan_estimate = estimate_plan(
            compiled,
            measured=tool_durations,
            executor_model=models.model if models is not None else None,
        )
    async with open_session(
        compiled,
        registry,
        limits=limits,
        retry=retry,
        observers=observers,
        max_concurrency=max_concurrency,
        tool_limits=tool_limits,
        budget=budget,
        clock=clock,
        run_id=run_id,
        hold_effects=approve_plan is not None,
        escalate=escalate,
        plan_estimate=plan_estimate,
        tool_durations=tool_durations,
        models=models,
    ) as session:
        session_ref.append(session)
        if on_session is not None:
            on_session(session)
        session.seal()
        halted: str | None = None
        if approve_plan is not None:
            verdict = await approve_plan(session)
            if verdict == "approved":
                session.approve_effects(hold_again=approve_patch is not None)
            else:
                halted = verdict
                await session.settled()  # the effect-free steps end; the effects wait
        elif approve_patch is not None:
            session.hold_effects()  # a patch's steps with effects wait for approve_patch
        progress: ProgressLedger | None = None  # made when a model replan is first weighed
        previous: ReplanRecord | None = None
        tried_reuse = False
        model_replans = 0
        excerpt_value: Any = None
        ledger = IntentLedger(repairer.max_blocked if repairer is not None else None)
        down_seen = 0
        while halted is None:
            state = await session.settled()
            if state.stop_reason is not None or not state.needs_replan:
                break
            if any(session.records[key].reason == "budget" for key in state.needs_replan):
                break
            if repairer is None or not trigger(session, state):
                break
            if not triggered:
                triggered = True
                failed = tuple(failed_steps(session, state))
                excerpt_value = excerpt(session, state) if excerpt is not None else None
                fingerprint = _fingerprint(compiled.plan)
            max_id = max(session.steps, default=0)
            assert fingerprint is not None
            known = (
                repairer.known(fingerprint, state.needs_replan, max_id)
                if not tried_reuse and previous is None
                else None
            )
            if known is not None:
                tried_reuse = True
                # written by a model in an earlier run, which may have read outside content
                try:
                    applied, new_ids, diagnostics, changed = repairer.replanner(compiled).apply(
                        session, known.text, state.needs_replan, tainted_author=True
                    )
                except PlanBudgetError:
                    break  # the known repair would pass the plan-relative budget: escalated
                replans.append(
                    ReplanRecord(
                        number=len(replans) + 1,
                        trigger="failure",
                        reason="reused: " + failure_summary(session, state),
                        replaced=state.needs_replan,
                        new_ids=new_ids,
                        applied=applied,
                        text=known.text,
                        output_tokens=0,
                        diagnostics=diagnostics,
                        output_changed=changed,
                    )
                )
                reuses.add(len(replans))
                if applied and approve_patch is not None:
                    halted = await _gate_patch(session, new_ids, approve_patch)
                    if halted is not None:
                        break
                continue
            ledger.observe({key: item.step for key, item in session.steps.items()}, session.records)
            blocked = ledger.blocked()
            if blocked:
                gave_up = "blocked_intent"
                if not session.escalate(
                    "blocked_intent", "; ".join(item.describe() for item in blocked)
                ):
                    session.give_up()
                break
            if model_replans >= repairer.max_replans:
                gave_up = "max_replans"
            else:
                if progress is None:
                    progress = ProgressLedger(repairer.max_replans_without_progress)
                if progress.count(session.graph, state) >= progress.max_without_progress:
                    gave_up = "no_progress"
            if gave_up is not None:
                _escalate_caps(session, state, replans, gave_up, repairer)
                break
            newly_down, down_seen = state.down[down_seen:], len(state.down)
            live = [key for key, record in session.records.items() if record.superseded_by is None]
            choice = choose_strategy(
                newly_down=newly_down,
                completed=len(state.succeeded),
                steps=len(live),
                total_replan_below=repairer.total_replan_below,
            )
            withdrawn: tuple[int, ...] = ()
            if choice.strategy == "total":
                withdrawn = session.withdraw(
                    [*state.pending, *state.held],
                    f"dropped before it started: the run plans again from the goal "
                    f"({choice.reason})",
                )
                if withdrawn:
                    state = session.state()
            try:
                record = await repairer.ask(
                    session,
                    compiled,
                    state,
                    excerpt_value,
                    number=len(replans) + 1,
                    previous=previous,
                    records=calls,
                    strategy=choice,
                    withdrawn=withdrawn,
                )
            except TimeoutError:  # the cap passed, or the next attempt would start past it
                await session.settled()
                if session.stop_reason is None:
                    session.stop_at_deadline()
                break
            except PlanBudgetError:
                break  # the patch would pass the plan-relative budget: the run escalated
            except BudgetRefusedError as refused:
                error = StepErrorInfo(type(refused).__name__, str(refused))
                gave_up = "budget"
                session.give_up()
                break
            except Exception as failure:  # a call failed past its retries, or was cut
                error = StepErrorInfo(type(failure).__name__, str(failure))
                gave_up = "replanner_error"
                session.give_up()
                break
            model_replans += 1
            if progress is not None:
                progress.replanned(session.graph, state, record.new_ids)
            replans.append(record)
            bases[record.number] = max_id
            previous = None if record.applied else record
            if record.applied and approve_patch is not None:
                halted = await _gate_patch(session, record.new_ids, approve_patch)
                if halted is not None:
                    break
        if any(record.applied for record in replans):
            whole = whole_plan(compiled, session)
    run = session_ref[0].result()
    status = run.status
    if gave_up is not None and status in ("succeeded", "failed"):
        status = "gave_up"
    if halted in ("rejected", "awaiting_approval"):
        status = "rejected" if halted == "rejected" else "awaiting_approval"
    applied_records = [record for record in replans if record.applied]
    reused = (
        status == "succeeded"
        and bool(applied_records)
        and all(record.number in reuses for record in applied_records)
    )
    if (
        repairer is not None
        and status == "succeeded"
        and fingerprint is not None
        and len(applied_records) == 1
        and not reused
    ):
        only = applied_records[0]
        repairer.remember(KnownRepair(fingerprint, only.replaced, bases[only.number], only.text))
    return RepairedRun(
        status=status,
        run=run,
        replans=tuple(replans),
        llm_calls=tuple(calls),
        triggered=triggered,
        reused=reused,
        gave_up=gave_up,
        error=error,
        failed=failed,
        plan=whole if applied_records else None,
    )


def _escalate_caps(
    session: RunSession,
    state: SessionState,
    replans: Sequence[ReplanRecord],
    cap: RepairGaveUp,
    repairer: PlanRepairer,
) -> None:
    """A replan cap was hit: hand the run to a person (``gave_up`` in mode ``never``)."""
    failing = failure_summary(session, state)
    unapplied = 0
    for record in reversed(replans):
        if record.applied:
            break
        unapplied += 1
    if unapplied:
        session.escalate(
            "no_valid_replan",
            f"no valid repair: the last {unapplied} patch(es) did not compile; {failing}",
        )
    elif cap == "max_replans":
        session.escalate(
            "replan_caps",
            f"the repair cap was hit ({repairer.max_replans} model replans) and the run "
            f"still fails: {failing}",
        )
    else:
        session.escalate(
            "replan_caps",
            f"{repairer.max_replans_without_progress} repairs in a row of the failing part "
            f"of the plan completed none of its steps (the no-progress cap): {failing}",
        )


async def _gate_patch(
    session: RunSession,
    new_ids: tuple[int, ...],
    approve_patch: Callable[[RunSession, tuple[int, ...]], Awaitable[str]],
) -> str | None:
    """Ask ``approve_patch`` about a patch whose steps may have effects or send tainted
    data out; release them when approved (then hold later ones again). Returns None when
    approved, else the verdict."""
    if all(
        session.steps[step_id].tool.effects == "none" and not session.steps[step_id].tainted_egress
        for step_id in new_ids
    ):
        return None
    verdict = await approve_patch(session, new_ids)
    if verdict != "approved":
        return verdict
    session.approve_effects()  # released; a later patch's effects are held again
    return None


def plan_file_document(plan: Plan) -> dict[str, Any]:
    """A plan as the readable plan file ``plandag check`` and ``exec`` read: ``version``
    first, then the fields the plan sets.

    Args:
        plan: the plan.

    Returns:
        JSON-safe data.
    """
    document: dict[str, Any] = {"version": plan.version}
    document.update(plan.model_dump(mode="json", exclude_unset=True, exclude={"version"}))
    document["output"] = plan.output
    return document


def _write_atomically(path: Path, text: str) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def save_repair(
    directory: Path,
    name: str,
    repaired: RepairedRun,
    *,
    source: str | None = None,
    model: str | None = None,
) -> Path | None:
    """Write a repaired plan that succeeded, and its sidecar, into ``directory``.

    Files: ``NAME.HASH.json``, the whole plan after the patches (see
    :func:`plan_file_document`), and ``NAME.HASH.repair.json``: ``{"plan", "source",
    "model", "failed", "replaced", "new_steps", "output_changed", "reused", "replans"}``
    (``replans``: each replan's record, its patch text included). ``HASH``: the first 10 hex
    digits of the plan file's SHA-256, so the same repair found twice is one file. Writes
    are atomic (a temporary file renamed).

    Args:
        directory: where to write (created when missing).
        name: the original plan's name (its file's stem; ``nfe`` for the stored NF-e plan).
        repaired: the run.
        source: the input the repair was made for (the sidecar's ``source``), or None.
        model: the model that wrote the patch, or None.

    Returns:
        The plan file's path, or None when the run was not repaired (nothing written).

    Raises:
        OSError: the folder or a file cannot be written.
    """
    if not repaired.repaired or repaired.plan is None:
        return None
    text = json.dumps(plan_file_document(repaired.plan), ensure_ascii=False, indent=2) + "\n"
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:10]
    directory.mkdir(parents=True, exist_ok=True)
    plan_path = directory / f"{name}.{digest}.json"
    applied = [record for record in repaired.replans if record.applied]
    sidecar = {
        "plan": plan_path.name,
        "original": name,
        "source": source,
        "model": model,
        "failed": [dict(item) for item in repaired.failed],
        "replaced": sorted({key for record in applied for key in record.replaced}),
        "new_steps": sorted({key for record in applied for key in record.new_ids}),
        "output_changed": any(record.output_changed for record in applied),
        "output": repaired.plan.output,
        "reused": repaired.reused,
        "replans": [{**record.to_json_dict(), "patch": record.text} for record in repaired.replans],
    }
    _write_atomically(plan_path, text)
    _write_atomically(
        directory / f"{name}.{digest}.repair.json",
        json.dumps(sidecar, ensure_ascii=False, indent=2, default=str) + "\n",
    )
    return plan_path
