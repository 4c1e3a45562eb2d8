"""What a run of the agent reads from the agent that runs it: :class:`AgentSettings` (the
:class:`~plandag.planner.agent.Agent` is one, its arguments as it checked them) and the runs
it has running now (:class:`RunningRuns`). Typed here, below both, so that the agent and
its runs (:mod:`plandag.planner.agent_run`, :mod:`plandag.planner.agent_approval`,
:mod:`plandag.planner.agent_replan`) never import each other.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from plandag.brakes.clock import Clock
    from plandag.brakes.retry import RetryPolicy
    from plandag.dag.plan import Plan
    from plandag.executors.access import ModelAccess
    from plandag.models import LLMClient, PriceTable
    from plandag.planner.triggers import Instruction, InstructionSource
    from plandag.scheduler import events
    from plandag.scheduler.gate import ApprovalMode, Approver
    from plandag.scheduler.result import EscalationMode
    from plandag.scheduler.runner import RunLimits
    from plandag.scheduler.session import RunSession
    from plandag.tools.boundary import WriteBoundary
    from plandag.tools.registry import Registry

__all__ = ["AgentSettings", "InstructionTarget", "RunningRuns"]


class InstructionTarget(Protocol):
    """A running run that takes a person's instructions (:meth:`Agent.tell
    <plandag.planner.agent.Agent.tell>`)."""

    def deliver(self, items: Sequence[Instruction]) -> None:
        """Take ``items`` (from any thread)."""
        ...


class RunningRuns:
    """The runs of one agent running now, by run id; safe to read from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, InstructionTarget] = {}

    def add(self, run_id: str, run: InstructionTarget) -> None:
        """``run_id`` runs from now on."""
        with self._lock:
            self._runs[run_id] = run

    def remove(self, run_id: str) -> None:
        """``run_id`` no longer runs (nothing happens when it was not added)."""
        with self._lock:
            self._runs.pop(run_id, None)

    def target(self, run_id: str | None) -> InstructionTarget:
        """The run an instruction goes to (:meth:`Agent.tell
        <plandag.planner.agent.Agent.tell>`): ``run_id``, or the only one running.

        Raises:
            RuntimeError: ``run_id`` is not running, or none runs, or several do and
                ``run_id`` is None.
        """
        running = self.snapshot()
        if run_id is not None:
            target = running.get(run_id)
            if target is None:
                raise RuntimeError(
                    f"Agent.tell: run {run_id} is not running in this agent (running: "
                    f"{', '.join(sorted(running)) or 'none'})"
                )
            return target
        if len(running) == 1:
            return next(iter(running.values()))
        if not running:
            raise RuntimeError(
                "Agent.tell: no run of this agent is running; an instruction reaches a run "
                "only while Agent.run is running it"
            )
        raise RuntimeError(
            f"Agent.tell: {len(running)} runs of this agent are running; pass run_id= "
            f"(one of {', '.join(sorted(running))})"
        )

    def snapshot(self) -> dict[str, InstructionTarget]:
        """The runs running now, by run id (a copy)."""
        with self._lock:
            return dict(self._runs)


class AgentSettings(Protocol):
    """What a run reads from its agent: each attribute is the
    :class:`~plandag.planner.agent.Agent` argument of the same name, as the agent checked
    and completed it (``approve`` and ``approver`` resolved, ``write_boundary`` None when
    unlimited, ``models`` the executor steps' client and model).
    """

    client: LLMClient
    model: str
    registry: Registry
    models: ModelAccess
    stream: bool
    limits: RunLimits
    retry: RetryPolicy
    prices: PriceTable
    observers: tuple[events.Observer, ...]
    clock: Clock
    max_concurrency: int | None
    tool_limits: Mapping[str, int] | None
    read_only: bool
    write_boundary: WriteBoundary | None
    http_allow: tuple[str, ...] | None
    max_steps: int
    max_replans: int
    max_replans_without_progress: int
    max_repairs: int
    plan_max_tokens: int
    replan_max_tokens: int
    join_max_tokens: int
    max_chars: int
    approve: ApprovalMode | None
    approver: Approver | None
    approval_expiry_s: float
    on_session: Callable[[RunSession], None] | None
    on_plan_version: Callable[[int, Plan, str], None] | None
    escalate: EscalationMode
    max_blocked: int | None
    total_replan_below: float | None
    instructions: InstructionSource | None
    tool_durations: Mapping[str, float]
    running: RunningRuns
