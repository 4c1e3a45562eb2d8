"""``plandag run "TASK"``: a model plans, plandag runs, replans what fails, joins
(docs/planning.md).

The :class:`~plandag.planner.agent.Agent` does the work: one planning call (``--stream``:
steps start while the plan arrives), the run with every brake of ``exec`` (the same options,
the same ``[tool.plandag]`` / ``plandag.toml`` defaults), replans of the failed part (at most
3, at most 2 in a row without progress), and the joiner. The final output is printed (the
plan's output assembled by code, or the joiner's answer); with ``--json`` the RunResult JSON
of ``exec --json`` (its ``status`` the agent's) plus ``answer``, ``replans``,
``plan_versions``, ``llm_calls``, ``join``, ``error``, ``gave_up``, ``diagnostics``,
``output_tokens_per_step`` and ``instructions`` (what ``plandag tell`` brought in).

The plan library (docs/library.md): with ``--task-type NAME`` the latest plan
of that task type runs with no model call at all (a new task type is planned, and saved
under NAME once it succeeded); without it, when the library has plans, one routing call to
the executor model (``--executor-model``, setting ``executor_model``) picks one and fills
its params; when it has none, the plan is saved under a task type named from it
(:func:`plandag.library.runner.derived_task_type`). ``--json`` adds ``library``,
``routing_calls`` and ``routing_cost_usd``.

While it runs, the process reads the run store's ``instruction`` table every 0.5 s: an
instruction given with ``plandag tell RUN_ID "TEXT"`` replans the steps not started
(:mod:`plandag.planner.triggers`).

The API key comes from ``ANTHROPIC_API_KEY`` (``--provider anthropic``, the default) or
``OPENAI_API_KEY`` (``--provider openai``; not needed with ``--base-url``). A missing key is
an error before anything runs (exit 2). ``--offline`` (``--provider offline``) needs none:
the offline model answers in the process with extracts of the request's own documents
(:mod:`plandag.testing.offline`), and the output says so (``"offline": true`` with
``--json``). An offline run does not use the plan library: its plan is never saved where a
model's run could be routed to it, and ``--task-type`` is refused (exit 2).

Exit codes as ``exec`` (ARCHITECTURE.md, "States and exit codes"): 0 succeeded; 1 failed or
gave_up (a model call that failed past its retries, a plan cut at ``max_tokens``, the replan
caps with ``--escalate never``); 2 unusable arguments, a missing key, or a first plan that
still did not compile after its repairs; 3 timed_out or budget_exceeded; 4
awaiting_approval or rejected; 5 escalated (the replan caps, no valid replan, an intent
blocked ``--max-blocked`` times); 130/143
interrupted by SIGINT/SIGTERM.

:func:`register` adds the command to the ``plandag`` typer app.
"""

from __future__ import annotations

import functools
import uuid
from pathlib import Path
from typing import Annotated

import anyio
import typer

from plandag.brakes.retry import RetryPolicy
from plandag.cli.common import (
    boundary_words,
    brake_flags,
    command_registry,
    command_settings,
    fail,
    fraction_setting,
    parse_params,
    print_brakes,
    require_text_folder,
    run_limits_for,
    stderr,
    write_boundary_for,
)
from plandag.cli.durable import (
    approve_mode,
    escalation_hooks,
    json_at_deadline,
    open_cli_store,
    planned_at_deadline,
    planned_exit_code,
    report_planned,
    run_options,
    terminal_approver,
)
from plandag.cli.models_options import (
    OFFLINE,
    BaseUrlOption,
    ModelOption,
    OfflineOption,
    ProviderOption,
    RunExecutorModelOption,
    executor_for,
    model_client,
    offline_provider,
    planner_model,
    print_offline_note,
)
from plandag.cli.options import (
    ApproveOption,
    BoundaryOption,
    BreakerAfterOption,
    EscalateOption,
    HeartbeatEveryOption,
    HeartbeatOption,
    HttpAllowOption,
    JsonOption,
    MaxBlockedOption,
    MaxConcurrencyOption,
    MaxCostOption,
    MaxSecondsOption,
    MaxStepsOption,
    MaxTokensOption,
    McpOption,
    ParamOption,
    PlanCostFactorOption,
    PlannerMaxTokensOption,
    PlanTimeFactorOption,
    ReadOnlyOption,
    RedactOption,
    RetriesOption,
    RpmOption,
    SlowStartOption,
    StallAfterOption,
    StopOnStallOption,
    StoreOption,
    ToolsOption,
    TotalReplanBelowOption,
    TpmOption,
)
from plandag.cli.signals import Interruptible, exit_code_for_signal
from plandag.cli.watchdog import deadline_guard
from plandag.errors import InputError, PlanError
from plandag.executors.access import ModelAccess
from plandag.library import LibraryOutcome, PlanLibrary
from plandag.library.catalog import check_task_type
from plandag.planner.agent import Agent, AgentResult
from plandag.planner.prompt import format_diagnostics
from plandag.planner.triggers import Instruction
from plandag.runs.planned import SessionRecorder, record_agent_run
from plandag.runs.traces import trace_factory
from plandag.scheduler import JsonlHeartbeatWriter
from plandag.scheduler.events import Observer

__all__ = ["OFFLINE_LIBRARY", "register"]

OFFLINE_LIBRARY = (
    "library: not used offline (an offline plan is never saved where a model's run could reuse it)"
)
"""What an offline ``plandag run`` says about the plan library (on stderr)."""


def register(app: typer.Typer) -> None:
    """Add the ``run`` command to ``app`` (the ``plandag`` typer app).

    Args:
        app: the typer application to add the command to.
    """

    @app.command("run")
    def run_command(
        task: Annotated[str, typer.Argument(metavar="TASK", help="The task, in your words.")],
        tools: ToolsOption = None,
        mcp: McpOption = None,
        stream: Annotated[
            bool,
            typer.Option("--stream", help="Start steps while the plan is still arriving."),
        ] = False,
        context: Annotated[
            Path | None,
            typer.Option(
                "--context", metavar="FILE", help="Trusted context for the planner (a text file)."
            ),
        ] = None,
        provider: ProviderOption = "anthropic",
        offline: OfflineOption = False,
        model: ModelOption = None,
        base_url: BaseUrlOption = None,
        param: ParamOption = None,
        task_type: Annotated[
            str | None,
            typer.Option(
                "--task-type",
                metavar="NAME",
                help="Run the latest library plan of this task type with no model call (a "
                "new task type is planned and saved under NAME once it succeeds).",
            ),
        ] = None,
        executor_model: RunExecutorModelOption = None,
        read_only: ReadOnlyOption = False,
        write_boundary: BoundaryOption = None,
        http_allow: HttpAllowOption = None,
        max_seconds: MaxSecondsOption = None,
        max_cost: MaxCostOption = None,
        max_tokens: MaxTokensOption = None,
        rpm: RpmOption = None,
        tpm: TpmOption = None,
        max_concurrency: MaxConcurrencyOption = None,
        max_steps: MaxStepsOption = None,
        retries: RetriesOption = None,
        heartbeat: HeartbeatOption = None,
        heartbeat_every: HeartbeatEveryOption = None,
        stall_after: StallAfterOption = None,
        stop_on_stall: StopOnStallOption = None,
        breaker_after: BreakerAfterOption = None,
        max_blocked: MaxBlockedOption = None,
        total_replan_below: TotalReplanBelowOption = None,
        plan_cost_factor: PlanCostFactorOption = None,
        plan_time_factor: PlanTimeFactorOption = None,
        slow_start: SlowStartOption = None,
        planner_max_tokens: PlannerMaxTokensOption = None,
        as_json: JsonOption = False,
        store: StoreOption = None,
        approve: ApproveOption = None,
        redact: RedactOption = False,
        escalate: EscalateOption = None,
    ) -> None:
        """Plan TASK with a model, run the plan, replan what fails, print the result.

        Every brake of exec applies to the whole run, model calls included (the cost caps
        count their tokens; the wall clock counts from the first request; time waiting for
        a person's decision does not count).

        The run is recorded in the run store with its trace (see `plandag runs`, `trace`).
        A plan with effects needs approval (--approve ask, the default, asks on the
        terminal and otherwise waits, exit 4; auto approves writes, irreversible effects
        still ask; never saves the plan awaiting_approval, exit 4): `plandag approve RUN_ID`
        runs it, `plandag reject RUN_ID --feedback TEXT` sends it back to the planner.

        The plan's llm and agent steps call the same provider, with --executor-model
        (default claude-haiku-4-5 with anthropic, --model with openai).

        When the replan caps are hit (3 replans, 2 in a row without progress) or no replan
        compiles, the run is escalated to a person (exit 5; `plandag inbox` lists it;
        `plandag resume RUN_ID --instruction TEXT` or `plandag abandon RUN_ID --reason
        TEXT` closes it); with --escalate never it ends gave_up (exit 1).
        """
        settings = command_settings(
            {
                "write_boundary": write_boundary,
                "http_allow": http_allow,
                **brake_flags(
                    max_seconds=max_seconds,
                    max_cost=max_cost,
                    max_tokens=max_tokens,
                    rpm=rpm,
                    tpm=tpm,
                    max_concurrency=max_concurrency,
                    max_steps=max_steps,
                    retries=retries,
                    heartbeat=heartbeat,
                    heartbeat_every=heartbeat_every,
                    stall_after=stall_after,
                    stop_on_stall=stop_on_stall,
                    breaker_after=breaker_after,
                    max_blocked=max_blocked,
                    total_replan_below=total_replan_below,
                    plan_cost_factor=plan_cost_factor,
                    plan_time_factor=plan_time_factor,
                    slow_start=slow_start,
                ),
                "approve": approve,
                "escalate": escalate,
                "planner_max_tokens": planner_max_tokens,
                "executor_model": executor_model,
            },
            "run",
        )
        if task_type is not None:
            try:
                check_task_type(task_type)
            except InputError as error:
                fail(f"--task-type: {error}")
        provider = offline_provider(provider, offline, base_url)
        if provider == OFFLINE and task_type is not None:
            fail(
                "--task-type with --offline: the plan library is not used offline (an "
                "offline plan is never saved where a model's run could reuse it); drop "
                "--task-type, or run with a model"
            )
        routing_model: str | None = settings["executor_model"]  # None: by provider
        mode = approve_mode(settings["approve"])
        replan_below = fraction_setting(settings, "total_replan_below")
        hooks = escalation_hooks(settings)
        name = planner_model(provider, model, executor_model=executor_model)
        context_text = ""
        if context is not None:
            try:
                context_text = context.read_text(encoding="utf-8-sig")
            except (OSError, UnicodeDecodeError) as error:
                fail(f"cannot read --context {context}: {error}")
        # The planner is shown the built-ins and --tools (files or installed applications),
        # and the run compiles exactly those (ARCHITECTURE.md, "Layout").
        registry = command_registry(tools, resolve_installed=False, mcp=mcp or [])
        params = parse_params(param)
        require_text_folder(Path.cwd(), "the working folder")
        boundary = write_boundary_for(settings["write_boundary"], Path.cwd())
        limits = run_limits_for(settings)
        executor = executor_for(provider, name, settings["executor_model"])
        if provider == OFFLINE:
            routing_model = executor
            print_offline_note()
        print_brakes(
            settings,
            boundary_words(settings["write_boundary"], Path.cwd()),
            [(name, provider, base_url), (executor, provider, base_url)],
        )
        observers: list[Observer] = []
        if settings["heartbeat"]:
            heartbeat_file = Path(settings["heartbeat"])
            if not heartbeat_file.parent.is_dir():
                fail(f"--heartbeat {heartbeat_file}: its folder does not exist")
            observers.append(JsonlHeartbeatWriter(heartbeat_file))
        client = model_client(provider, base_url, registry)  # a missing key stops here
        run_store = open_cli_store(store)
        run_id = uuid.uuid4().hex[:16]
        options = run_options(
            settings,
            limits,
            tools=tools,
            registry=registry,
            read_only=read_only,
            redact=redact,
            planner={
                "provider": provider,
                "model": name,
                "base_url": base_url,
                "context": context_text,
            },
            # the model of the plan's llm and agent steps, for a later segment (approve,
            # resume) to call the same server; the URL's user and password are not stored
            executor={
                "provider": provider,
                "model": name,
                "base_url": base_url,
                "executor_model": settings["executor_model"],
            },
        )
        run_store.create_run(
            run_id, command="run", goal=task, params=params, options=options.as_json()
        )
        writer = trace_factory(run_store, redact)(run_id, 0)
        writer.run_started("run", task, params)
        recorder = SessionRecorder(run_store, run_id, params, write_boundary=boundary)

        def instruction_reader() -> list[Instruction]:
            """A person's instructions from the run store (`plandag tell`)."""
            return [
                Instruction(row.text, row.new_goal, row.who, row.time)
                for row in run_store.take_instructions(run_id)
            ]

        observers.extend([recorder, writer])
        agent = Agent(
            client,
            name,
            registry,
            stream=stream,
            limits=limits,
            retry=RetryPolicy(retries=settings["retries"]),
            observers=observers,
            max_concurrency=settings["max_concurrency"],
            read_only=read_only,
            write_boundary=boundary,
            http_allow=settings["http_allow"],
            max_steps=settings["max_steps"],
            approve=mode,
            approver=terminal_approver() if mode == "ask" else None,
            approval_expiry_s=settings["approval_expiry"],
            plan_max_tokens=settings["planner_max_tokens"],
            on_session=recorder.bind,
            on_plan_version=recorder.plan_version,
            escalate=options.escalate,
            max_blocked=settings["max_blocked"] or None,
            total_replan_below=replan_below,
            instructions=instruction_reader,
            tool_durations=run_store.tool_durations(registry.tools),
            # an offline plan never enters the library a model's runs are routed to
            library=None if provider == OFFLINE else PlanLibrary(run_store),
            executor_model=routing_model,
            on_alert=hooks,
            models=ModelAccess(client, executor, registry=registry),
        )

        async def work() -> AgentResult:
            try:
                return await agent.run(
                    task, context_text, params or None, run_id=run_id, task_type=task_type
                )
            finally:
                with anyio.CancelScope(shield=True):  # close even when interrupted
                    await client.aclose()

        try:
            try:
                at_deadline = (
                    json_at_deadline(run_store.path, planned_at_deadline(run_store.path))
                    if as_json
                    else None
                )
                with deadline_guard(run_store.path, at_deadline):
                    outcome = Interruptible(functools.partial(work)).run()
            except PlanError as error:  # the params do not fit the task type's plan
                run_store.update_run(run_id, status="failed", pid=None, detail=str(error))
                for line in format_diagnostics(error.diagnostics).splitlines():
                    stderr.print(line, markup=False)
                fail(f"--task-type {task_type}: {error}; nothing ran")
            except InputError as error:  # the task type's plan needs tools not given
                run_store.update_run(run_id, status="failed", pid=None, detail=str(error))
                fail(f"--task-type {task_type}: {error}; nothing ran")
            escalated = None
            if outcome.result is not None:
                routed = outcome.result.library
                if (
                    isinstance(routed, LibraryOutcome)
                    and routed.how == "routed"
                    and routed.routing is not None
                ):
                    # the plan ran with the params the routing call filled: a later
                    # `plandag approve` or `resume` compiles it with them
                    params = {**routed.routing.params, **params}
                    run_store.update_run(run_id, params=params)
                escalated = record_agent_run(
                    run_store,
                    writer,
                    run_id,
                    outcome.result,
                    write_boundary=boundary,
                    params=params,
                    hooks=hooks,
                )
            else:
                run_store.update_run(run_id, status="interrupted", pid=None)
        finally:
            writer.close()
            run_store.close()
        if outcome.result is None:
            code = exit_code_for_signal(outcome.signal) if outcome.signal is not None else 130
            fail("the run was interrupted before it could report", code)
        report_planned(outcome.result, as_json, offline=provider == OFFLINE)
        if provider == OFFLINE and not as_json:
            stderr.print(OFFLINE_LIBRARY, markup=False, highlight=False)
        if escalated is not None and escalated.message:
            stderr.print(escalated.message, markup=False, highlight=False)
        if outcome.result.status == "awaiting_approval" and outcome.result.approval is not None:
            for line in outcome.result.approval.summary_lines():
                stderr.print(line, markup=False, highlight=False)
            stderr.print(
                f"run {run_id} awaits a decision: `plandag approve {run_id}` runs this plan, "
                f"`plandag reject {run_id} --feedback TEXT` sends it back to the planner",
                markup=False,
            )
        if outcome.signal is not None:
            raise typer.Exit(exit_code_for_signal(outcome.signal))
        raise typer.Exit(planned_exit_code(outcome.result))
