"""A run through the plan library: find the plan, run it, save what succeeded (docs/library.md).

:func:`run_task` is what :meth:`plandag.planner.agent.Agent.run` does when the agent has a
library:

1. **find the plan.** With a task type: its latest admitted version, run with no model call
   at all (a task type with none is new: the planner writes the plan). Without one, and with
   at least one admitted entry: one *routing call* to the executor model
   (:mod:`plandag.library.routing`) picks an entry and fills its params (the user's
   ``--param`` values win), or names a new task type; an unusable answer, or params that do
   not fit the entry, fall back to the planner with nothing saved. With no admitted entry
   there is nothing to route to and no routing call: the planner plans, and the run's task
   type is the one given or, without one, a name derived from its plan
   (:func:`derived_task_type`), so that the first plain ``plandag run`` of a task already
   leaves a plan that later runs are routed to.
2. **run it** as any plan (:meth:`~plandag.planner.agent.Agent.run_revised`): a reused plan
   with effects passes the approval gate like any plan; a step that fails its check brings
   in the replanner, and the repaired plan becomes the task type's new version.
3. **save** (:func:`admission`): a plan is admitted only when its run succeeded, it was
   approved (a person, or ``--approve auto`` for writes) or is read-only, and no model that
   had read outside content wrote any of its steps; otherwise it is saved ``pending``, for a
   person (``plandag library approve``). A reused plan that ran unchanged is not saved again,
   nor is a plan of the offline model (:mod:`plandag.models.offline`): a model's run is
   never routed to a plan no model made.
4. **record** the run (:class:`~plandag.library.catalog.TaskRun`), with a ``library`` event
   in the run store (task type, version reused, steps written after reading outside
   content) that :func:`plandag.library.stored.finish_stored_run` reads when the run is
   finished later (``plandag approve``, ``plandag resume``), and report its
   out-of-registry alerts (:mod:`plandag.planner.alerts`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
import unicodedata
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from plandag.dag.limits import DEFAULT_MAX_STEPS
from plandag.dag.plan import Plan
from plandag.errors import InputError, PlanError
from plandag.library.entries import LibraryPlan, LibraryTables, TaskRun, check_task_type
from plandag.library.routing import (
    DEFAULT_EXECUTOR_MODELS,
    ROUTING_MAX_TOKENS,
    ROUTING_SYSTEM_PROMPT,
    RoutingChoice,
    parse_routing,
    routing_prompt,
    routing_schema,
)
from plandag.models.offline import OFFLINE_PROVIDER
from plandag.planner.alerts import report_alerts

if TYPE_CHECKING:
    from plandag.models import CallRecord
    from plandag.planner.agent import Agent, AgentResult
    from plandag.tools.boundary import WriteBoundary
    from plandag.tools.registry import Registry

__all__ = [
    "Admission",
    "LibraryOutcome",
    "admission",
    "decide_admission",
    "derived_task_type",
    "library_plan",
    "run_task",
]

How = Literal["library", "routed", "planned"]


@dataclasses.dataclass(frozen=True)
class Admission:
    """What :func:`admission` decided for a run's plan.

    Attributes:
        plan: the plan to save (the steps that succeeded, the output, the params), or None
            when nothing is saved.
        status: ``admitted`` or ``pending`` (with ``plan``), else None.
        reason: why it is pending, or why nothing is saved; None when admitted.
        approved_by: ``read-only``, ``auto`` or who approved it in the run, when admitted.
    """

    plan: Plan | None
    status: Literal["admitted", "pending"] | None
    reason: str | None = None
    approved_by: str | None = None


@dataclasses.dataclass(frozen=True)
class LibraryOutcome:
    """What the plan library did in a run (:attr:`AgentResult.library`).

    Attributes:
        task_type: the run's task type (given, or picked or named by the routing call), or
            None.
        how: ``library`` (the latest version, no model call), ``routed`` (the routing call
            picked it) or ``planned`` (the planner wrote the plan).
        version: the version reused, or None.
        routing: the routing call's answer, or None when there was no routing call.
        routing_error: why the routing answer was not used, or None.
        saved: the version saved by this run, or None.
        not_saved: why no version was saved (None when one was, or when a reused plan
            ran unchanged).
        derived: ``task_type`` was derived from the plan (:func:`derived_task_type`): no
            task type was given and the library had no entry to route to.
    """

    task_type: str | None
    how: How
    version: int | None = None
    routing: RoutingChoice | None = None
    routing_error: str | None = None
    saved: LibraryPlan | None = None
    not_saved: str | None = None
    derived: bool = False

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready data (``plandag run --json``, ``"library"``)."""
        return {
            "task_type": self.task_type,
            "how": self.how,
            "version": self.version,
            "routing": self.routing.as_dict() if self.routing is not None else None,
            "routing_error": self.routing_error,
            "saved": (
                {
                    "version": self.saved.version,
                    "status": self.saved.status,
                    "reason": self.saved.reason,
                    "plan_hash": self.saved.plan_hash,
                }
                if self.saved is not None
                else None
            ),
            "not_saved": self.not_saved,
            "derived": self.derived,
        }


def library_plan(result: AgentResult) -> Plan | None:
    """The plan a succeeded run leaves for reuse: the steps that succeeded (the superseded
    and withdrawn ones left out), the output, and the params of its first version; None
    when the run has no plan version."""
    if not result.plan_versions:
        return None
    first, last = result.plan_versions[0], result.plan_versions[-1]
    records = result.run.steps
    steps = [
        step for step in last.steps if step.id in records and records[step.id].status == "succeeded"
    ]
    return Plan(goal=last.goal or first.goal, params=first.params, steps=steps, output=last.output)


_STOPWORDS = frozenset(
    {"a", "an", "and", "as", "at", "by", "for", "from", "in", "into", "of", "on", "or"}
    | {"the", "then", "this", "that", "to", "with"}
)
_NAME_WORDS = 4


def derived_task_type(goal: str, plan: Plan) -> str:
    """The task type of a run that was given none when the library had no entry to route
    to: ``WORDS-HASH``, the same for the same task and plan shape.

    ``WORDS``: the first four words of the plan's goal (the task's when the plan has
    none), folded to ASCII and lowercased, keeping only words of two or more letters
    that are not common short words (``the``, ``of``, ...), joined by ``_`` (``task``
    when none is left). ``HASH``: the first 8 hex digits of the SHA-256 of the plan's
    shape, the JSON of ``[tools of its steps in order, sorted param names]``. E.g. the
    plan "Score a name" with one ``lookup`` step and the param ``name`` gives
    ``score_name-`` and 8 hex digits.

    Args:
        goal: the task, in the user's words.
        plan: the plan the planner wrote for it.

    Returns:
        A valid task type (:func:`plandag.library.catalog.check_task_type`).
    """
    text = unicodedata.normalize("NFKD", plan.goal or goal)
    folded = text.encode("ascii", "ignore").decode("ascii").lower()
    words: list[str] = []
    for word in "".join(char if char.isalpha() else " " for char in folded).split():
        if len(word) >= 2 and word not in _STOPWORDS:
            words.append(word[:12])
        if len(words) == _NAME_WORDS:
            break
    shape = json.dumps([[step.tool for step in plan.steps], sorted(plan.params)])
    digest = hashlib.sha256(shape.encode("utf-8")).hexdigest()[:8]
    return check_task_type(f"{'_'.join(words) or 'task'}-{digest}")


def decide_admission(
    plan: Plan | None,
    *,
    run_status: str,
    registry: Registry,
    params: Mapping[str, Any],
    tainted: Sequence[int],
    approved_by: str | None,
    approve: str | None,
    read_only: bool = False,
    write_boundary: WriteBoundary | None = None,
    http_allow: Sequence[str] | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
) -> Admission:
    """The admission rule (module docstring, step 3) on a plan and what its run came to,
    whether the run just ended (:func:`admission`) or was finished later by ``plandag
    approve`` or ``plandag resume`` (:func:`plandag.library.stored.finish_stored_run`).

    Args:
        plan: the plan to keep (the steps that succeeded, the output, the params), or None.
        run_status: the run's final status.
        registry: the run's tools and checks.
        params: the run's param values, by name.
        tainted: ids of steps written by a model that had read outside content.
        approved_by: who approved the plan in the run (a person), or None.
        approve: the run's approval mode (``ask``, ``auto``, ``never``), or None.
        read_only, write_boundary, http_allow, max_steps: as the run compiled its plan.

    Returns:
        The :class:`Admission`.
    """
    from plandag.compiler import compile_plan

    if run_status != "succeeded":
        return Admission(None, None, f"the run ended {run_status}")
    if plan is None or not plan.steps:
        return Admission(None, None, "the run has no step to keep")
    try:
        compile_plan(
            plan,
            registry,
            params=dict(params),
            read_only=read_only,
            write_boundary=write_boundary,
            http_allow=http_allow,
            max_steps=max_steps,
        )
    except PlanError as error:
        return Admission(None, None, f"its steps do not compile on their own: {error}")
    ids = {step.id for step in plan.steps}
    kept_tainted = [step_id for step_id in tainted if step_id in ids]
    if kept_tainted:
        return Admission(
            plan,
            "pending",
            f"step {', '.join(map(str, kept_tainted))} was written by a model that had read "
            "outside content (a replan or repair shown a failing input or a fetched result); "
            "a person reads it before runs reuse it",
        )
    tools = registry.tools
    effects = {
        step.tool: tools[step.tool].effects
        for step in plan.steps
        if step.tool in tools and tools[step.tool].effects != "none"
    }
    if not effects:
        return Admission(plan, "admitted", approved_by="read-only")
    if approved_by is not None:
        return Admission(plan, "admitted", approved_by=approved_by)
    if approve == "auto" and set(effects.values()) <= {"write"}:
        return Admission(plan, "admitted", approved_by="auto")
    shown = ", ".join(f"{name} [{kind}]" for name, kind in sorted(effects.items()))
    return Admission(
        plan,
        "pending",
        f"its steps have effects ({shown}) and nobody approved the plan in the run",
    )


def admission(result: AgentResult, agent: Agent, params: Mapping[str, Any]) -> Admission:
    """Decide whether the plan of ``result`` is admitted, saved pending, or not saved
    (module docstring, step 3; :func:`decide_admission`).

    Args:
        result: the run's result.
        agent: the agent that ran it (its registry and approval mode).
        params: the run's param values, by name.

    Returns:
        The :class:`Admission`.
    """
    approved = [decision for decision in result.decisions if decision.approved]
    return decide_admission(
        library_plan(result) if result.status == "succeeded" else None,
        run_status=result.status,
        registry=agent.registry,
        params=params,
        tainted=result.tainted_steps,
        approved_by=approved[-1].who if approved else None,
        approve=agent.approve,
        read_only=agent.read_only,
        write_boundary=agent.write_boundary,
        http_allow=agent.http_allow,
        max_steps=agent.max_steps,
    )


def _executor_model(agent: Agent) -> str:
    """The routing call's model: ``executor_model``, else the model of the agent's
    ``models`` (what its ``llm`` steps use), else the provider's default executor model,
    else the planner's model."""
    if agent.executor_model is not None:
        return agent.executor_model
    if agent.models is not None:
        return agent.models.model
    return DEFAULT_EXECUTOR_MODELS.get(agent.client.provider, agent.model)


async def _route(
    agent: Agent,
    goal: str,
    entries: list[LibraryPlan],
    given: Mapping[str, Any],
    records: list[CallRecord],
) -> tuple[RoutingChoice | None, str | None]:
    """The routing call: ``(choice, None)``, or ``(None, why)`` when it failed."""
    import anyio

    from plandag.models import LLMRequest, call_with_retries
    from plandag.models.calls import deadline_from

    request = LLMRequest(
        model=_executor_model(agent),
        messages=[{"role": "user", "content": routing_prompt(goal, entries, given)}],
        max_tokens=ROUTING_MAX_TOKENS,
        system=ROUTING_SYSTEM_PROMPT,
        json_schema=routing_schema(entries),
        schema_name="plandag_route",
        temperature=0.0,
    )
    seconds = agent.limits.max_seconds
    remaining = seconds if isinstance(seconds, int | float) else None
    try:
        with anyio.fail_after(remaining):
            response = await call_with_retries(
                agent.client,
                request,
                agent.retry,
                agent.clock,
                agent.budget if agent.budget is not None else agent.limits.budget(),
                prices=agent.prices,
                records=records,
                deadline=deadline_from(agent.clock, remaining),
            )
        return parse_routing(response, entries), None
    except Exception as error:  # a failed call or an unusable answer: the planner plans
        return None, f"{type(error).__name__}: {error}"


async def run_task(
    agent: Agent,
    goal: str,
    context: str = "",
    params: Mapping[str, Any] | None = None,
    *,
    task_type: str | None = None,
    run_id: str | None = None,
) -> AgentResult:
    """Run ``goal`` through ``agent``'s plan library (module docstring).

    Args:
        agent: an agent with a library (``Agent(library=...)``).
        goal: the task, in the user's words.
        context: trusted context for the planner, or "".
        params: param values given by the user (``--param``), by name, or None.
        task_type: the task type (``--task-type``), or None to route.
        run_id: the run's id, or None.

    Returns:
        The agent's result with ``library`` and ``routing_calls`` filled.

    Raises:
        InputError: ``task_type`` is not a valid name, or its latest plan uses tools that
            ``agent``'s registry does not have (nothing ran).
        PlanError: ``params`` do not fit the task type's latest plan (nothing ran).
        ApprovalRequiredError: as :meth:`Agent.run`.
    """
    library = agent.library
    assert isinstance(library, LibraryTables)
    started = time.monotonic()
    given = dict(params or {})
    routing_calls: list[CallRecord] = []
    entry: LibraryPlan | None = None
    choice: RoutingChoice | None = None
    routing_error: str | None = None
    how: How = "planned"
    registered = set(agent.registry.tools)
    if task_type is not None:
        check_task_type(task_type)
        entry = library.latest(task_type)
        if entry is not None:
            missing = sorted(set(entry.tools) - registered)
            if missing:
                raise InputError(
                    f"version {entry.version} uses tool(s) {', '.join(missing)}, not "
                    "registered in this run; pass --tools with the file or application that "
                    f"defines them (`plandag library show {task_type}` shows its plan)"
                )
            how = "library"
    else:
        # an entry whose tools this run does not have cannot run here: not offered
        entries = [item for item in library.admitted() if set(item.tools) <= registered]
        if entries:
            choice, routing_error = await _route(agent, goal, entries, given, routing_calls)
            if choice is not None:
                task_type = choice.task_type
                given = {**choice.params, **given}
                if not choice.new:
                    entry = next(item for item in entries if item.task_type == task_type)
                    how = "routed"
    result: AgentResult | None = None
    if entry is not None:
        try:
            result = await agent.run_revised(
                goal, context, given or None, plan=entry.plan, run_id=run_id
            )
        except PlanError as error:
            if how == "library":
                raise
            routing_error = f"the routed params do not fit {task_type}: {error}"
            entry, task_type, how = None, None, "planned"
            given = dict(params or {})
    if result is None:
        result = await agent.run_revised(goal, context, given or None, run_id=run_id)
    derived = False
    if task_type is None and choice is None and routing_error is None and result.plan_versions:
        # no task type given and nothing to route to: name one from the plan, so that the
        # first plain run of a task leaves a plan that later runs are routed to
        task_type, derived = derived_task_type(goal, result.plan_versions[0]), True
    saved: LibraryPlan | None = None
    not_saved: str | None = None
    # a replan, a step-by-step edit or a revision after a rejection made a new plan
    replanned = len(result.plan_versions) > 1 or bool(result.amendments or result.revisions)
    if task_type is None:
        not_saved = "the run has no task type (give one to keep its plan in the library)"
    elif agent.client.provider == OFFLINE_PROVIDER:
        # a model's run routed to it would run a plan no model made
        not_saved = "the offline model made this plan, not a model: it is not kept"
    elif entry is None or replanned:
        decided = admission(result, agent, given)
        if decided.plan is None or decided.status is None:
            not_saved = decided.reason
        else:
            saved = library.save(
                task_type,
                decided.plan,
                status=decided.status,
                reason=decided.reason,
                source_run=result.run.run_id,
                approved_by=decided.approved_by,
            )
    routing_usd = sum(record.cost_usd for record in routing_calls)
    planner_usd = sum(record.cost_usd for record in result.llm_calls)
    library.record_run(
        TaskRun(
            run_id=result.run.run_id,
            task_type=task_type or "",
            version=entry.version if entry is not None else None,
            how=how,
            status=result.status,
            replans=len(result.replans),
            escalated=result.status == "escalated",
            # the routing call is on the run's budget only when the agent shares one
            spent_usd=result.run.spent_usd + (routing_usd if agent.budget is None else 0.0),
            planner_calls=len(result.llm_calls),
            planner_usd=planner_usd,
            routing_calls=len(routing_calls),
            routing_usd=routing_usd,
            alerts=len(result.alerts),
            duration_s=time.monotonic() - started,
            time=time.time(),
        )
    )
    library.store.record_event(
        result.run.run_id,
        "library",
        {
            "task_type": task_type,
            "version": entry.version if entry is not None else None,
            "how": how,
            "derived": derived,
            "tainted_steps": list(result.tainted_steps),
        },
        time.time(),
    )
    if result.alerts:
        await report_alerts(
            result.alerts,
            run_id=result.run.run_id,
            task_type=task_type,
            store=library.store,
            hooks=agent.alert_hooks(),
        )
    outcome = LibraryOutcome(
        task_type=task_type,
        how=how,
        version=entry.version if entry is not None else None,
        routing=choice,
        routing_error=routing_error,
        saved=saved,
        not_saved=not_saved,
        derived=derived,
    )
    return dataclasses.replace(result, library=outcome, routing_calls=tuple(routing_calls))
