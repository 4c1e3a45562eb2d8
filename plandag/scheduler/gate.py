"""The approval gate of plans with effects (ARCHITECTURE.md, "People in the loop"): which
plans need a person, what the person is shown and how the answer is bound to the plan.
The scheduler asks the approver it is handed (:class:`Approver`); who decides (a person at
the terminal, the web console, the run store's gate) lives above it, in
:mod:`plandag.approval`, which hands these names on.

* :func:`plan_hash` binds a decision to one plan version: SHA-256 of the RFC 8785 (JSON
  Canonicalization Scheme) form of ``{"plan", "params", "write_boundary"}``, plus
  ``"http_allow"`` (the run's HTTP allow-list: configured patterns and the hosts the plan
  lists) when that list is not empty, and ``"tool_schemas"`` (the definition hash of each
  MCP tool the plan uses) when it has any; a decision carrying another hash is refused
  (:class:`StaleDecisionError`). A plan version that reaches no host and runs with no
  configured allow-list keeps the hash it had before allow-lists existed; a plan version
  stored earlier keeps the hash it was stored with (the run store's, which decisions use).
* :func:`approval_needed` says whether a compiled plan needs a person under a mode:
  ``ask`` (the default for plans with effects): every plan with effects; ``auto``: only
  plans with ``irreversible`` effects (``write`` effects are approved automatically);
  ``never``: nothing is approved here — a plan that needs approval is saved as
  ``awaiting_approval`` (exit code 4) for ``plandag approve``/``reject``. A plan with a
  tainted egress (a step that sends data which came from outside: ARCHITECTURE.md,
  "Untrusted content") needs a person under every mode, even when it has no other effect.
  Read-only plans (no effects, no tainted egress) never ask.
* :class:`ApprovalRequest` is what the person sees: the whole plan at once (steps, DAG,
  effects and write targets, the plan's estimate of cost and time,
  :mod:`plandag.scheduler.estimate`); :class:`Decision` is the answer (approve, or
  reject with feedback that reaches the planner in full), for the whole plan or step by
  step: approve it while rejecting some steps (``reject_steps``: they and every step
  downstream of them are dropped) and editing others' arguments (``edit_steps``). Such an
  answer makes a new plan version with its own hash, decided in the same request by the
  same person (:mod:`plandag.scheduler.decisions`).
* :class:`Approver` is what decides; :class:`CallbackApprover` makes one of a Python
  callable (sync or async), and :func:`resolve_approve` reads ``approve=``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, Protocol

from plandag.compiler.compiled import CompiledPlan, CompiledStep
from plandag.dag.plan import Plan
from plandag.errors import PlandagError
from plandag.scheduler.canonical import (
    NOT_PLAIN,
    STANDARD,
    canonical_bytes,
    canonical_json,
    json_form,
)
from plandag.scheduler.estimate import PlanEstimate, estimate_steps
from plandag.scheduler.result import to_jsonable
from plandag.tools.boundary import WriteBoundary

__all__ = [
    "DEFAULT_EXPIRY_S",
    "ApprovalMode",
    "ApprovalRequest",
    "ApprovalRequiredError",
    "ApproveArgument",
    "Approver",
    "CallbackApprover",
    "Decision",
    "InvalidDecisionError",
    "PlanDocument",
    "StaleDecisionError",
    "approval_needed",
    "approval_reason",
    "boundary_spec",
    "compiled_plan_document",
    "compiled_plan_hash",
    "downstream",
    "effect_summary",
    "plan_hash",
    "resolve_approve",
    "tainted_egress_steps",
    "tool_schemas",
]


def tainted_egress_steps(steps: Mapping[int, CompiledStep]) -> tuple[int, ...]:
    """Ids of the steps that send tainted data out, sorted (each needs a person)."""
    return tuple(sorted(key for key, step in steps.items() if step.tainted_egress))


ApprovalMode = Literal["ask", "auto", "never"]
DEFAULT_EXPIRY_S = 24 * 3600.0
"""A pending approval expires after this many seconds (24 hours; configurable)."""


class StaleDecisionError(PlandagError, ValueError):
    """A decision names a plan hash other than the plan version awaiting it."""


class InvalidDecisionError(PlandagError, ValueError):
    """A step-by-step decision that cannot apply to the plan it answers: a step that does
    not exist, one both rejected and edited, an edit that is not a JSON object or does not
    compile, a step that has already started, or per-step choices on a rejection."""


class ApprovalRequiredError(PlandagError, ValueError):
    """A plan with effects was given to :func:`plandag.run_plan` or an
    :class:`~plandag.planner.agent.Agent` without ``approve=``; raised before anything
    runs. Pass an approver, ``"auto"`` or ``"never"`` (read-only plans need none)."""


def boundary_spec(boundary: WriteBoundary | None) -> dict[str, list[str]] | None:
    """The write boundary as JSON for hashing and storage: resolved folders, glob patterns
    and host rules, each sorted; None for no boundary."""
    if boundary is None:
        return None
    return {
        "roots": sorted(str(root) for root in boundary.roots),
        "globs": sorted(f"{glob.pattern}{'/' if glob.tree else ''}" for glob in boundary.globs),
        "hosts": sorted(
            f"{host.scheme}://{host.host}:{host.port}{host.path}" for host in boundary.hosts
        ),
    }


def tool_schemas(steps: Mapping[int, CompiledStep]) -> dict[str, str]:
    """The definition hashes of the tools ``steps`` use that are defined outside the
    process (an MCP server's: :attr:`~plandag.tools.base.Tool.schema_sha256`), by tool
    name; empty for a plan of Python tools only."""
    return {
        step.tool.name: step.tool.schema_sha256
        for step in steps.values()
        if step.tool.schema_sha256 is not None
    }


def plan_hash(
    plan: Plan | Mapping[str, Any],
    params: Mapping[str, Any] | None = None,
    write_boundary: WriteBoundary | None = None,
    http_allow: Sequence[str] | None = None,
    schemas: Mapping[str, str] | None = None,
) -> str:
    """The plan version's hash: SHA-256 (hex) of the RFC 8785 canonical JSON of
    ``{"plan": plan, "params": params, "write_boundary": boundary_spec(...)}``, with
    ``"http_allow": sorted(http_allow)`` added when ``http_allow`` is not empty and
    ``"tool_schemas": schemas`` when ``schemas`` is not empty.

    Args:
        plan: the plan (None fields left out) or its JSON dict.
        params: the run's param values ({} when None).
        write_boundary: the run's write boundary, or None.
        http_allow: the run's HTTP allow-list (``CompiledPlan.allowed_hosts``: configured
            patterns and the hosts the plan lists), or None/empty for none.
        schemas: the definition hash of each tool of the plan defined outside the process
            (:func:`tool_schemas`: an MCP server's tools), by name, or None/empty for none:
            a server that changes such a tool after the plan was approved changes the hash.

    Returns:
        64 lowercase hex characters. The same plan, params, boundary and allow-list give
        the same hash whatever the key order or number formatting (RFC 8785, section 3.2).
    """
    document = plan.model_dump(mode="json", exclude_none=True) if isinstance(plan, Plan) else plan
    return _hashed(document, params, write_boundary, http_allow, schemas)[0]


def _hashed(
    document: Mapping[str, Any],
    params: Mapping[str, Any] | None,
    write_boundary: WriteBoundary | None,
    http_allow: Sequence[str] | None,
    schemas: Mapping[str, str] | None,
) -> tuple[str, int]:
    """:func:`plan_hash` of a plan's JSON ``document``, and the
    :func:`~plandag.scheduler.canonical.json_form` of everything hashed (``NOT_PLAIN``:
    not JSON data that ``to_jsonable`` returns as it is)."""
    hashed: dict[str, Any] = {
        "plan": document,
        "params": dict(params or {}),
        "write_boundary": boundary_spec(write_boundary),
    }
    if http_allow:
        hashed["http_allow"] = sorted(set(http_allow))
    if schemas:
        hashed["tool_schemas"] = dict(schemas)
    form = json_form(hashed)
    if form == NOT_PLAIN:
        return hashlib.sha256(canonical_json(to_jsonable(hashed))).hexdigest(), form
    return hashlib.sha256(canonical_bytes(hashed, form)).hexdigest(), form


@dataclasses.dataclass(frozen=True)
class PlanDocument:
    """A compiled plan's JSON and hash, made once for everything that records the plan
    (the run store's plan version, the trace's ``plan`` line, a decision's hash).

    Attributes:
        json: ``plan.model_dump(mode="json", exclude_none=True)``.
        hash: :func:`compiled_plan_hash` of the plan.
        plain: whether ``json`` is JSON data that
            :func:`~plandag.scheduler.result.to_jsonable` returns as it is (exactly
            ``dict`` with ``str`` keys, ``list``, ``str``, ``int``, ``bool``, None and
            finite ``float``, well within its depth and size limits): a recorder may then
            write it without converting it again.
        standard: plain, and of the :data:`~plandag.scheduler.canonical.STANDARD` form
            (ASCII keys, integers within ±(2**53 - 1), every float not whole and at least
            1e-4 in magnitude): pydantic's ``model_dump_json(exclude_none=True)`` of the
            plan is then the text ``json.dumps`` writes of ``json`` (compact, UTF-8 kept).
    """

    json: dict[str, Any]
    hash: str
    plain: bool
    standard: bool = False


def compiled_plan_document(compiled: CompiledPlan) -> PlanDocument:
    """The :class:`PlanDocument` of ``compiled``: its plan dumped once, hashed as
    :func:`compiled_plan_hash` hashes it."""
    document = compiled.plan.model_dump(mode="json", exclude_none=True)
    digest, form = _hashed(
        document,
        compiled.params,
        compiled.write_boundary,
        compiled.allowed_hosts,
        tool_schemas(compiled.steps),
    )
    return PlanDocument(document, digest, form != NOT_PLAIN, form == STANDARD)


def compiled_plan_hash(compiled: CompiledPlan) -> str:
    """:func:`plan_hash` of a compiled plan: its plan, params, write boundary, HTTP
    allow-list (:attr:`CompiledPlan.allowed_hosts`) and the definitions of its MCP tools
    (:func:`tool_schemas`)."""
    return compiled_plan_document(compiled).hash


def approval_needed(
    compiled: CompiledPlan | Mapping[int, CompiledStep], mode: ApprovalMode
) -> bool:
    """Whether a plan (compiled, or a session's compiled steps) needs a person's decision
    under ``mode`` (module docstring): effects as the mode says, and a tainted egress
    under every mode.

    Raises:
        ValueError: an unknown mode.
    """
    if mode not in ("ask", "auto", "never"):
        raise ValueError(f"approve mode must be ask, auto or never, not {mode!r}")
    steps = compiled.steps if isinstance(compiled, CompiledPlan) else compiled
    effects = {step.tool.effects for step in steps.values()}
    if any(step.tainted_egress for step in steps.values()):
        return True
    if effects <= {"none"}:
        return False
    if mode == "auto":
        return "irreversible" in effects
    return True


def approval_reason(steps: Mapping[int, CompiledStep]) -> str:
    """Why a plan with these steps asks a person, in words: its tainted egress first, then
    irreversible effects, then effects."""
    tainted = tainted_egress_steps(steps)
    if tainted:
        names = ", ".join(f"{key} ({steps[key].tool.name})" for key in tainted)
        return (
            f"step(s) {names} send data that came from outside (tainted egress); a person "
            "must see where it goes"
        )
    if any(step.tool.effects == "irreversible" for step in steps.values()):
        return "the plan has irreversible effects"
    return "the plan has effects"


@dataclasses.dataclass(frozen=True)
class ApprovalRequest:
    """What a person decides on: the whole plan at once.

    Attributes:
        run_id: the run.
        version: the plan version (1 for the first plan, then one more per revision).
        plan_hash: :func:`plan_hash` of this version; a decision must carry it.
        plan: the plan.
        params: the run's param values.
        effects: ``(step_id, tool, effects, write targets)`` for every step with effects.
        estimated_cost_usd: the plan's estimated cost, US dollars (``estimate.cost_usd``;
            None when unknown).
        reason: why a person is asked (``irreversible effects``, ``unknown outcome of
            step 3``...).
        expires_at: when the request expires, seconds since the epoch.
        dependencies: each step's parents in the compiled DAG (declared and implied by
            references), by step id.
        http_allow: the run's HTTP allow-list under this version (configured patterns
            and the hosts the plan lists); part of the hash.
        tainted_egress: ids of the steps that send tainted data out (data that came from
            outside: ARCHITECTURE.md, "Untrusted content"), sorted.
        estimate: the plan's estimate of cost and time
            (:class:`~plandag.scheduler.estimate.PlanEstimate`), shown with the request.
    """

    run_id: str
    version: int
    plan_hash: str
    plan: Plan
    params: Mapping[str, Any]
    effects: tuple[tuple[int, str, str, tuple[str, ...]], ...]
    estimated_cost_usd: float | None
    reason: str
    expires_at: float
    dependencies: Mapping[int, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    http_allow: tuple[str, ...] = ()
    tainted_egress: tuple[int, ...] = ()
    estimate: PlanEstimate | None = None

    @classmethod
    def for_plan(
        cls,
        run_id: str,
        version: int,
        compiled: CompiledPlan,
        *,
        reason: str,
        expiry_s: float = DEFAULT_EXPIRY_S,
        now: float | None = None,
        estimate: PlanEstimate | None = None,
    ) -> ApprovalRequest:
        """The request for a compiled plan version (targets of arguments that hold
        references are shown as written in the plan); ``estimate``: the plan's estimate
        (default: from the tools' declared figures)."""
        return cls.for_steps(
            run_id,
            version,
            compiled.plan,
            compiled.params,
            compiled.steps,
            compiled.write_boundary,
            reason=reason,
            expiry_s=expiry_s,
            now=now,
            http_allow=compiled.allowed_hosts,
            estimate=estimate,
        )

    @classmethod
    def for_steps(
        cls,
        run_id: str,
        version: int,
        plan: Plan,
        params: Mapping[str, Any],
        steps: Mapping[int, CompiledStep],
        write_boundary: WriteBoundary | None,
        *,
        reason: str,
        expiry_s: float = DEFAULT_EXPIRY_S,
        now: float | None = None,
        http_allow: Sequence[str] | None = None,
        estimate: PlanEstimate | None = None,
    ) -> ApprovalRequest:
        """The request for ``plan`` whose steps are compiled as ``steps`` (a run session's:
        :attr:`~plandag.scheduler.session.RunSession.steps`); ``http_allow`` is the run's
        HTTP allow-list under this version (hashed with it); ``estimate``: the plan's
        estimate (default: :func:`~plandag.scheduler.estimate.estimate_steps` of ``steps``
        from the tools' declared figures)."""
        compiled_steps = steps
        effects = []
        for step_id in sorted(compiled_steps):
            step = compiled_steps[step_id]
            if step.tool.effects == "none":
                continue
            try:
                targets = tuple(step.tool.write_targets(step.step.args))
            except Exception:  # a writes function that needs resolved args
                targets = ()
            effects.append((step_id, step.tool.name, step.tool.effects, targets))
        if estimate is None:  # over each step's parents among ``steps``
            estimate = estimate_steps(compiled_steps)
        return cls(
            run_id=run_id,
            version=version,
            plan_hash=plan_hash(
                plan, params, write_boundary, http_allow, tool_schemas(compiled_steps)
            ),
            plan=plan,
            params=dict(params),
            effects=tuple(effects),
            estimated_cost_usd=estimate.cost_usd,
            reason=reason,
            expires_at=(time.time() if now is None else now) + expiry_s,
            dependencies={step_id: tuple(step.parents) for step_id, step in compiled_steps.items()},
            http_allow=tuple(sorted(set(http_allow or ()))),
            tainted_egress=tainted_egress_steps(compiled_steps),
            estimate=estimate,
        )

    def summary_lines(self) -> list[str]:
        """The request as plain text lines: header, every step with its dependencies and
        effects, write targets, the estimate (``Estimate: estimated cost $0.0123, time 4.2
        s (critical path 1 -> 3 -> 4)``), and the hash the decision binds to."""
        lines = [
            f"Run {self.run_id}, plan version {self.version}: {self.plan.goal or '(no goal)'}",
            f"Why you are asked: {self.reason}",
            f"Steps ({len(self.plan.steps)}):",
        ]
        marked = {step_id: (effects, targets) for step_id, _, effects, targets in self.effects}
        for step in self.plan.steps:
            parents = self.dependencies.get(step.id, tuple(step.depends_on))
            after = f" after {', '.join(map(str, parents))}" if parents else ""
            line = f"  {step.id}. {step.tool}{after}"
            if step.id in marked:
                effects, targets = marked[step.id]
                line += f"  [{effects.upper()}" + (f": {', '.join(targets)}]" if targets else "]")
            if step.id in self.tainted_egress:
                line += "  [SENDS DATA THAT CAME FROM OUTSIDE]"
            lines.append(line)
            if step.description:
                lines.append(f"       {step.description}")
        if self.estimate is not None:
            lines.append(f"Estimate: {self.estimate.describe()}")
        else:
            cost = (
                f"${self.estimated_cost_usd:.4f}"
                if self.estimated_cost_usd is not None
                else "no estimate"
            )
            lines.append(f"Estimated cost: {cost}")
        if self.http_allow:
            lines.append(f"HTTP requests may reach: {', '.join(self.http_allow)}")
        lines.append(f"Plan hash: {self.plan_hash}")
        return lines


@dataclasses.dataclass(frozen=True)
class Decision:
    """A person's answer to an :class:`ApprovalRequest`.

    Attributes:
        approved: True to run the plan, False to reject it.
        plan_hash: the hash of the plan version decided on (must match the request's).
        feedback: for a rejection, the person's text; it reaches the planner in full (for
            an approval that rejects steps: why they were rejected).
        who: who decided (a user name, ``auto``, ``callback``).
        reject_steps: step ids rejected (with an approval): each, and every step
            downstream of it, is dropped from the plan; a run with a planner may replan
            them (a replan with effects asks again).
        edit_steps: new argument values by step id (with an approval): each JSON object's
            keys replace those arguments of the step, the others are kept (a value may be
            a reference to a step the step already depends on).

    An approval with ``reject_steps`` or ``edit_steps`` approves the plan they make: a
    new plan version, with its own hash, decided by the same person in the same request.
    """

    approved: bool
    plan_hash: str
    feedback: str = ""
    who: str = "unknown"
    reject_steps: tuple[int, ...] = ()
    edit_steps: Mapping[int, Mapping[str, Any]] = dataclasses.field(default_factory=dict)

    @property
    def amends(self) -> bool:
        """The decision rejects or edits steps (it approves a new plan version)."""
        return bool(self.reject_steps or self.edit_steps)

    def check(self, request: ApprovalRequest) -> None:
        """Refuse a decision made for another plan version, or step choices that do not
        fit the plan.

        Raises:
            StaleDecisionError: ``plan_hash`` differs from the request's.
            InvalidDecisionError: a rejected or edited step the plan does not have, a step
                both rejected and edited, an edit of a step dropped with a rejected one, an
                edit that is not a JSON object, or step choices on a rejection.
        """
        if self.plan_hash != request.plan_hash:
            raise StaleDecisionError(
                f"run {request.run_id}: the decision is for plan hash {self.plan_hash[:12]}..., "
                f"but version {request.version} awaiting a decision has hash "
                f"{request.plan_hash[:12]}...; decide again on the current plan"
            )
        if not self.amends:
            return
        where = f"run {request.run_id}, plan version {request.version}"
        if not self.approved:
            raise InvalidDecisionError(
                f"{where}: steps are rejected or edited in an approval; to refuse the whole "
                "plan, reject it without step choices"
            )
        known = {step.id for step in request.plan.steps}
        chosen = sorted(set(self.reject_steps) | set(self.edit_steps))
        unknown = [step_id for step_id in chosen if step_id not in known]
        if unknown:
            raise InvalidDecisionError(
                f"{where}: no step {', '.join(map(str, unknown))} in the plan (its steps: "
                f"{', '.join(map(str, sorted(known)))})"
            )
        both = sorted(set(self.reject_steps) & set(self.edit_steps))
        if both:
            raise InvalidDecisionError(
                f"{where}: step {', '.join(map(str, both))} is both rejected and edited; choose one"
            )
        dropped = downstream(request.dependencies, self.reject_steps)
        inside = sorted(set(self.edit_steps) & dropped)
        if inside:
            raise InvalidDecisionError(
                f"{where}: step {', '.join(map(str, inside))} is dropped with a rejected step "
                "upstream of it; do not edit it"
            )
        for step_id, edit in self.edit_steps.items():
            if not isinstance(edit, Mapping) or not all(isinstance(key, str) for key in edit):
                raise InvalidDecisionError(
                    f"{where}: the edit of step {step_id} must be a JSON object of argument "
                    f'names and values, like {{"path": "out/b.json"}}'
                )


def downstream(dependencies: Mapping[int, Sequence[int]], step_ids: Sequence[int]) -> set[int]:
    """``step_ids`` and every step downstream of them, from each step's parents by id."""
    children: dict[int, list[int]] = {}
    for child, parents in dependencies.items():
        for parent in parents:
            children.setdefault(parent, []).append(child)
    found = set(step_ids)
    stack = list(step_ids)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


class Approver(Protocol):
    """Anything that decides on a request (may take a person's time)."""

    async def __call__(self, request: ApprovalRequest) -> Decision: ...


class CallbackApprover:
    """An approver from a Python callable ``callback(request) -> Decision`` (sync or
    async)."""

    def __init__(
        self, callback: Callable[[ApprovalRequest], Decision | Awaitable[Decision]]
    ) -> None:
        self.callback = callback

    async def __call__(self, request: ApprovalRequest) -> Decision:
        answer = self.callback(request)
        if inspect.isawaitable(answer):
            answer = await answer
        assert isinstance(answer, Decision)
        return answer


ApproveArgument = (
    Approver | Callable[[ApprovalRequest], "Decision | Awaitable[Decision]"] | ApprovalMode
)
"""What ``approve=`` takes in Python (:func:`plandag.run_plan`,
:class:`~plandag.planner.agent.Agent`): an approver (anything called with an
:class:`ApprovalRequest` that returns a :class:`Decision`, sync or async), ``"auto"``
(``write`` effects approved, ``irreversible`` ones need an approver: without one the run
ends ``awaiting_approval``), or ``"never"`` (nothing with effects is approved: such a plan
ends ``awaiting_approval``). ``"ask"`` is kept for ``Agent(approve="ask", approver=...)``."""


def resolve_approve(
    approve: ApproveArgument, approver: Approver | None = None
) -> tuple[ApprovalMode, Approver | None]:
    """``approve=`` (and an ``approver=``, for the older ``Agent`` spelling) as a mode and
    an approver.

    Returns:
        ``("ask", approver)`` for an approver; ``(mode, approver)`` for a mode.

    Raises:
        ValueError: an unknown mode, or an approver given twice.
    """
    if isinstance(approve, str):
        if approve not in ("ask", "auto", "never"):
            raise ValueError(
                f"approve={approve!r}: pass an approver (a callable taking an ApprovalRequest "
                'and returning a Decision), "auto" or "never"'
            )
        return approve, approver
    if approver is not None:
        raise ValueError("approve= is already an approver: leave approver= out")
    if not callable(approve):
        raise ValueError(f"approve={approve!r} is neither an approver nor a mode")
    if inspect.iscoroutinefunction(approve) or inspect.iscoroutinefunction(
        getattr(approve, "__call__", None)  # noqa: B004 (an object with an async __call__)
    ):
        return "ask", approve  # type: ignore[return-value]
    return "ask", CallbackApprover(approve)


def effect_summary(steps: Mapping[int, CompiledStep]) -> str:
    """The steps with effects or a tainted egress, in words: ``2: write_json [write], 5:
    http_post [irreversible]``, ``3: http_get [tainted egress]`` (the first five, then a
    count)."""
    marked = [
        f"{step_id}: {steps[step_id].tool.name} ["
        + (steps[step_id].tool.effects if steps[step_id].tool.effects != "none" else "")
        + (", " if steps[step_id].tool.effects != "none" and steps[step_id].tainted_egress else "")
        + ("tainted egress" if steps[step_id].tainted_egress else "")
        + "]"
        for step_id in sorted(steps)
        if steps[step_id].tool.effects != "none" or steps[step_id].tainted_egress
    ]
    shown = ", ".join(marked[:5])
    return shown + (f" and {len(marked) - 5} more" if len(marked) > 5 else "")
