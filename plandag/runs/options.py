"""How a durable run runs and what it came to: :class:`RunOptions` (stored with the run, so
that a later segment, ``resume`` or ``approve``, runs it the same way) and
:class:`DurableOutcome`; :data:`RESUMABLE`, the states ``plandag resume`` continues."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from plandag.approval import (
    DEFAULT_EXPIRY_S,
    ApprovalMode,
    ApprovalRequest,
)
from plandag.dag.limits import DEFAULT_MAX_STEPS
from plandag.errors import InputError
from plandag.scheduler.result import EscalationMode, RunResult, RunStatus
from plandag.scheduler.runner import RunLimits
from plandag.store.base_urls import stored_model_options

if TYPE_CHECKING:
    from plandag.compiler.compiled import CompiledPlan
    from plandag.executors.access import ModelAccess
    from plandag.tools.registry import Registry

__all__ = [
    "RESUMABLE",
    "DurableOutcome",
    "RunOptions",
    "TraceFactory",
    "changed_mcp_tools",
    "mcp_fields",
    "ran_offline",
]


RESUMABLE = frozenset({"running", "interrupted", "timed_out", "budget_exceeded"})
"""Run states ``plandag resume`` continues (``running``: the process died)."""


def ran_offline(options: Mapping[str, Any] | None) -> bool:
    """Whether a run's model answers are the offline model's extracts, not a model's.

    Args:
        options: the run's stored options (``run.options``, :meth:`RunOptions.as_json`),
            or None.

    Returns:
        True when its planner, the model of its ``llm`` and ``agent`` steps, or its
        ``provider`` (an ``extract contracts`` batch's) is the offline provider
        (:data:`plandag.models.offline.OFFLINE_PROVIDER`), or it says ``planned_offline``.
    """
    if not options:
        return False
    if options.get("planned_offline"):
        return True
    planner = options.get("planner") or {}
    executor = options.get("executor") or {}
    providers = (planner.get("provider"), executor.get("provider"), options.get("provider"))
    if all(provider is None for provider in providers):
        return False  # no model at all: the model clients are not even imported
    from plandag.models.offline import OFFLINE_PROVIDER

    return OFFLINE_PROVIDER in providers


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How a run runs, stored with it so that resume and approve can run it again.

    Attributes:
        tools: ``--tools`` files or modules (absolute paths for files).
        tools_sha256: each tools file's SHA-256 when the run started: resume and approve
            refuse to run the plan with code changed since (a person approved it with that).
        write_boundary: ``--write-boundary`` specs, or None for the default (the working
            folder); ``base``: the folder relative specs are taken against.
        read_only: only tools without effects.
        limits: the :class:`RunLimits` fields (``max_seconds`` is the whole run's cap).
        retries: retries per step (:class:`RetryPolicy`).
        max_concurrency: the global step limit, or None.
        max_steps: the most steps the run's plan may have, replans included (runs stored
            before this option existed get the default, 500).
        approve: the approval mode.
        expiry_s: seconds a pending approval stays valid (24 h by default).
        redact: mask personal data in the trace (``--redact``).
        http_allow: the configured HTTP allow-list (``--http-allow`` host globs), or None.
        planner: ``{"planner", "model", "base_url"}`` for runs that have a planner (revisions
            after a rejection), else None. A ``base_url`` with a user and password is
            stored without them (:mod:`plandag.store.base_urls`).
        escalate: what a run that cannot go on by itself comes to: ``person`` (escalated,
            handed to a person) or ``never`` (gave_up); see
            :data:`~plandag.scheduler.result.EscalationMode`.
        executor: ``{"provider", "model", "base_url", "executor_model"}`` of the model the
            plan's ``llm`` and ``agent`` steps call (``exec --provider``), or None; each
            segment (a resume, an approval) builds its client again from it, the key read
            from the environment (:func:`plandag.executors.connect`).
        withheld_tools: built-in tools the run's registry leaves out
            (:meth:`~plandag.tools.registry.Registry.withhold`): a research run's file and
            HTTP tools; every later segment builds its registry without them too.
        mcp: the MCP servers the run started (:meth:`plandag.config.McpServerSpec.as_json`,
            each with its name): each segment starts them again.
        planned_offline: the offline model planned the run though no planner is stored
            with it (a console run of ``plandag serve --offline``): :func:`ran_offline`.
        mcp_tools: the definition hash of each of their tools when the run started
            (:attr:`plandag.tools.base.Tool.schema_sha256`), by tool name: resume and
            approve refuse to run a plan whose MCP tool changed since
            (:func:`changed_mcp_tools`), as they refuse a changed tools file.
    """

    tools: tuple[str, ...] = ()
    tools_sha256: Mapping[str, str] = dataclasses.field(default_factory=dict)
    write_boundary: tuple[str, ...] | None = None
    base: str = "."
    read_only: bool = False
    limits: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    retries: int = 2
    max_concurrency: int | None = None
    max_steps: int = DEFAULT_MAX_STEPS
    approve: ApprovalMode = "ask"
    expiry_s: float = DEFAULT_EXPIRY_S
    redact: bool = False
    planner: Mapping[str, Any] | None = None
    escalate: EscalationMode = "person"
    http_allow: tuple[str, ...] | None = None
    executor: Mapping[str, Any] | None = None
    withheld_tools: tuple[str, ...] = ()
    mcp: tuple[Mapping[str, Any], ...] = ()
    mcp_tools: Mapping[str, str] = dataclasses.field(default_factory=dict)
    planned_offline: bool = False

    def as_json(self) -> dict[str, Any]:
        """The options as stored (``run.options``): a ``base_url`` of ``planner`` or
        ``executor`` without its user and password
        (:func:`plandag.store.base_urls.stored_model_options`)."""
        document = dataclasses.asdict(self)
        document["limits"] = dict(self.limits)
        document["tools_sha256"] = dict(self.tools_sha256)
        document["planner"] = dict(self.planner) if self.planner is not None else None
        document["executor"] = dict(self.executor) if self.executor is not None else None
        document["mcp"] = [dict(spec) for spec in self.mcp]
        document["mcp_tools"] = dict(self.mcp_tools)
        return stored_model_options(document)

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> RunOptions:
        """Options from ``run.options`` (unknown keys ignored)."""
        fields = {field.name for field in dataclasses.fields(cls)}
        values = {key: value for key, value in document.items() if key in fields}
        if values.get("tools") is not None:
            values["tools"] = tuple(values["tools"])
        if values.get("write_boundary") is not None:
            values["write_boundary"] = tuple(values["write_boundary"])
        if values.get("http_allow") is not None:
            values["http_allow"] = tuple(values["http_allow"])
        if values.get("withheld_tools") is not None:
            values["withheld_tools"] = tuple(values["withheld_tools"])
        values["mcp"] = tuple(values.get("mcp") or ())
        values["mcp_tools"] = dict(values.get("mcp_tools") or {})
        return cls(**values)

    @property
    def offline(self) -> bool:
        """Whether the run's model answers are the offline model's extracts
        (:func:`ran_offline`)."""
        return ran_offline(self.as_json())

    @property
    def executor_model(self) -> str | None:
        """The model of the plan's model steps that name none, or None without
        ``executor``."""
        if self.executor is None:
            return None
        from plandag.executors.access import executor_model_for

        try:
            return executor_model_for(
                str(self.executor.get("provider")),
                self.executor.get("model"),
                self.executor.get("executor_model"),
            )
        except InputError:
            return None

    def models(self) -> ModelAccess | None:
        """The :class:`~plandag.executors.ModelAccess` of ``executor`` (a new client, with
        the registry of ``tools``, less ``withheld_tools``), or None without it.

        Raises:
            InputError: the key is missing (:class:`~plandag.models.MissingAPIKeyError`)
                or the options name no usable model.
        """
        if self.executor is None:
            return None
        from plandag.executors.access import connect
        from plandag.tools.registry import default_registry

        registry = default_registry()
        registry.withhold(self.withheld_tools)
        for file in self.tools:
            registry.load_file(file)
        return connect(
            str(self.executor.get("provider")),
            model=self.executor.get("model"),
            base_url=self.executor.get("base_url"),
            executor_model=self.executor.get("executor_model"),
            registry=registry,
        )

    def run_limits(self, elapsed_s: float = 0.0) -> RunLimits:
        """The :class:`RunLimits` of a segment that starts after ``elapsed_s`` seconds of
        earlier segments (the wall-clock cap is the run's, not each segment's)."""
        limits = RunLimits.from_json(self.limits)
        if limits.seconds_cap is not None:
            limits = dataclasses.replace(
                limits, max_seconds=max(limits.seconds_cap - elapsed_s, 0.001)
            )
        return limits


@dataclasses.dataclass(frozen=True)
class DurableOutcome:
    """What a durable run came to.

    Attributes:
        run_id: the run's id in the store.
        status: the run's state (a :data:`RunStatus`).
        result: the segment's :class:`RunResult` when steps ran, else None.
        request: the approval request when the run waits for (or was refused) a decision.
        message: a sentence for the person (why it waits, what to do next), or None.
        store_error: the run ran but the store could not record its end (a locked or full
            database), with what to do; None when everything was recorded.
        escalation: when ``status`` is ``escalated``, why (one of
            :data:`~plandag.scheduler.result.ESCALATION_REASONS`); else None.
        escalation_detail: the sentence for the person who gets the case; else None.
    """

    run_id: str
    status: RunStatus
    result: RunResult | None = None
    request: ApprovalRequest | None = None
    message: str | None = None
    store_error: str | None = None
    escalation: str | None = None
    escalation_detail: str | None = None


TraceFactory = Callable[[str, int], Any]
"""``factory(run_id, segment)`` returning a trace writer (an observer with ``run_started``,
``plan``, ``approval`` and ``close`` methods), or None for no trace."""


def mcp_fields(registry: Registry) -> dict[str, Any]:
    """The :class:`RunOptions` fields ``mcp`` and ``mcp_tools`` of a run whose tools are
    ``registry``'s: the MCP servers it started and the definition hash of each of their
    tools."""
    return {
        "mcp": tuple(spec.as_json() for spec in registry.mcp_servers),
        "mcp_tools": {
            item.name: item.schema_sha256
            for item in registry.tools.values()
            if item.schema_sha256 is not None
        },
    }


def changed_mcp_tools(compiled: CompiledPlan, options: RunOptions) -> str | None:
    """Why the approval of a stored run no longer covers its plan because an MCP tool
    changed, or None when none did.

    Each tool of the plan defined outside the process (an MCP server's) must have the
    definition hash (:attr:`~plandag.tools.base.Tool.schema_sha256`: its schemas and
    effects) the run recorded when it started (:attr:`RunOptions.mcp_tools`); the plan's
    hash covers it too (:func:`plandag.approval.plan_hash`).

    Args:
        compiled: the run's current plan version, compiled again with the servers started
            again.
        options: the run's stored options.

    Returns:
        One sentence naming each changed tool and its hashes (before -> now), or None.
    """
    changed: dict[str, tuple[str | None, str]] = {}
    for step in compiled.steps.values():
        tool = step.tool
        before = options.mcp_tools.get(tool.name)
        if tool.schema_sha256 is not None and before != tool.schema_sha256:
            changed[tool.name] = (before, tool.schema_sha256)
    if not changed:
        return None
    described = "; ".join(
        f"{name} (definition sha256 {(before or 'none')[:12]}... -> {now[:12]}...)"
        for name, (before, now) in sorted(changed.items())
    )
    return (
        f"the MCP tool(s) {described} changed since the plan was made: the approval no "
        "longer matches the plan (its hash covers each tool's schemas and effects); start a "
        "new run, or put the server back as it was"
    )
