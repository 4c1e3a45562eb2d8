"""``plandag exec PLAN.json``: compile a stored plan and run it through the run store and
the approval gate (:mod:`plandag.cli.durable`); with ``--planner``, a step that fails is
repaired by a model in the same run (:class:`plandag.runs.repairs.RepairGate`)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import typer

from plandag.cli.common import (
    EXIT_CODES,
    boundary_words,
    brake_flags,
    command_registry,
    command_settings,
    fail,
    fraction_setting,
    parse_params,
    print_brakes,
    print_progress,
    progress_observers,
    read_plan_file,
    report_plan_error,
    require_text_folder,
    run_limits_for,
    stderr,
    stdout,
    write_boundary_for,
)
from plandag.cli.display import diagnostic_lines, run_table
from plandag.cli.durable import (
    durable_exec,
    escalation_hooks,
    open_cli_store,
    report,
    run_options,
    terminal_approver,
)
from plandag.cli.models_options import (
    OFFLINE,
    OFFLINE_HINT,
    OFFLINE_MODEL,
    ExecModelOption,
    ExecProviderOption,
    ExecUrlOption,
    ExecutorModelOption,
    OfflineOption,
    PlannerOption,
    attached_planner_model,
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
    MaxPlanBytesOption,
    MaxSecondsOption,
    MaxStepsOption,
    MaxTokensOption,
    McpOption,
    ParamOption,
    PlanArgument,
    PlanCostFactorOption,
    PlanTimeFactorOption,
    ReadOnlyOption,
    RedactOption,
    RetriesOption,
    RpmOption,
    SaveRepairsOption,
    SlowStartOption,
    StallAfterOption,
    StopOnStallOption,
    StoreOption,
    ToolsOption,
    TotalReplanBelowOption,
    TpmOption,
)
from plandag.cli.signals import Interruptible, exit_code_for_signal
from plandag.compiler import CompiledPlan, compile_plan
from plandag.config import Settings
from plandag.errors import InputError, PlanError
from plandag.scheduler import RunLimits
from plandag.scheduler.result import to_jsonable
from plandag.tools.registry import Registry
from plandag.trace.redact import scrub_secrets

__all__ = ["exec_command", "register"]


def exec_command(
    plan_file: PlanArgument,
    tools: ToolsOption = None,
    mcp: McpOption = None,
    param: ParamOption = None,
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
    max_plan_bytes: MaxPlanBytesOption = None,
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
    as_json: JsonOption = False,
    planner: PlannerOption = None,
    provider: ExecProviderOption = None,
    offline: OfflineOption = False,
    model: ExecModelOption = None,
    base_url: ExecUrlOption = None,
    executor_model: ExecutorModelOption = None,
    save_repairs: SaveRepairsOption = None,
    store: StoreOption = None,
    approve: ApproveOption = None,
    redact: RedactOption = False,
    escalate: EscalateOption = None,
) -> None:
    """Compile and run a plan; print each step's outcome.

    Every run is recorded in the run store (--store, PLANDAG_STORE) with its trace; see
    `plandag runs`, `resume`, `trace`. A plan with effects needs approval (--approve ask,
    the default: asks on the terminal, or waits with exit 4 when there is none; auto:
    writes approved, irreversible effects still ask; never: saved awaiting_approval, exit 4).

    Defaults for every brake can live in [tool.plandag] of pyproject.toml or in
    plandag.toml (see `plandag config`); flags override them.

    With --planner, the plan still runs with no model call; a step that fails (after its
    retries) goes to the replanner with the completed results and the run's params (as
    quoted data), and its repair runs in the same run (at most 3 replans, 2 without
    progress; then the run is escalated to a person, exit 5, listed by `plandag inbox`;
    with --escalate never it ends gave_up, exit 1).

    A plan with llm or agent steps calls a model for those steps only: --provider (default
    anthropic, also when only --model or --base-url is given, as for `run`), --model and
    --base-url choose it as for `run`, --executor-model the model of
    steps that name none; the key is checked before anything runs (exit 2 without it).
    --offline (--provider offline) answers them in the process with extracts of their data
    (offline-extractive), no key needed.
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
                max_plan_bytes=max_plan_bytes,
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
            "executor_model": executor_model,
        }
    )
    if offline or provider == OFFLINE:
        provider = offline_provider(provider or "anthropic", offline, base_url)
        planner_model(provider, model, executor_model=executor_model)  # no other model
        model = model or OFFLINE_MODEL
    if planner is None and provider is None and (model is not None or base_url is not None):
        provider = "anthropic"  # as `plandag run`: --model and --base-url default to anthropic
    if planner is None and provider is not None:
        model_name = attached_planner_model(None, None, None, save_repairs)  # --model is the run's
    else:
        model_name = attached_planner_model(planner, model, base_url, save_repairs)
    require_text_folder(Path.cwd(), "the working folder")
    registry = command_registry(tools, mcp=mcp or [])
    params = parse_params(param)
    boundary = write_boundary_for(settings["write_boundary"], Path.cwd())
    limits = run_limits_for(settings)
    plan_text = read_plan_file(plan_file, settings["max_plan_bytes"])
    compile_started = time.time()
    try:
        compiled = compile_plan(
            plan_text,
            registry,
            params=params,
            read_only=read_only,
            write_boundary=boundary,
            http_allow=settings["http_allow"],
            max_steps=settings["max_steps"],
        )
    except PlanError as error:
        report_plan_error(str(plan_file), error, as_json=as_json, tools=tools)
    compile_span = (compile_started, time.time())
    for line in diagnostic_lines(str(plan_file), list(compiled.diagnostics)):
        stderr.print(line, markup=False)
    executor = _executor_options(
        str(plan_file), compiled, planner, provider, model, base_url, settings["executor_model"]
    )
    # the run starts here: its plan compiled and its models are known
    if executor is not None and executor["provider"] == OFFLINE:
        print_offline_note()
    print_brakes(
        settings,
        boundary_words(settings["write_boundary"], Path.cwd()),
        [(model_name, planner, base_url)] if planner is not None and model_name else [],
    )
    progress, observers = progress_observers(compiled, settings)
    options = run_options(
        settings,
        limits,
        tools=tools,
        registry=registry,
        read_only=read_only,
        redact=redact,
        planner=(
            {"provider": planner, "model": model_name, "base_url": base_url}
            if planner is not None and model_name is not None
            else None
        ),
        executor=executor,
    )
    if planner is not None and model_name is not None:
        _exec_with_planner(
            plan_file,
            compiled,
            registry,
            settings,
            limits,
            planner=planner,
            model=model_name,
            base_url=base_url,
            save_repairs=save_repairs,
            as_json=as_json,
            options=options,
            store_path=store,
            compile_span=compile_span,
        )
    durable_exec(
        compiled,
        options,
        store_path=store,
        observers=observers,
        progress=progress,
        as_json=as_json,
        compile_span=compile_span,
        hooks=escalation_hooks(settings),
    )


def _executor_options(
    source: str,
    compiled: CompiledPlan,
    planner: str | None,
    provider: str | None,
    model: str | None,
    base_url: str | None,
    executor_model: str | None,
) -> dict[str, Any] | None:
    """The model of the plan's llm and agent steps, as stored with the run, or None when
    the plan has none; exit 2 (before anything runs) on a missing key or model."""
    from plandag.access import model_steps

    if planner is not None and provider is not None and planner != provider:
        fail(
            f"--planner {planner} and --provider {provider}: the planner and the plan's model "
            "steps share one provider (and --model, --base-url); give one of them"
        )
    steps = model_steps(compiled.steps)
    if not steps:
        return None
    from plandag.executors.access import executor_model_for, require_key
    from plandag.models.base import MissingAPIKeyError

    chosen = provider or planner or "anthropic"
    where = ", ".join(f"{step} ({compiled.steps[step].tool.name})" for step in steps)
    try:
        require_key(chosen, base_url)
        executor_model_for(chosen, model, executor_model)
    except MissingAPIKeyError as error:
        fail(f"{source}: steps {where} call a model: {error}{OFFLINE_HINT}")
    except InputError as error:
        fail(f"{source}: steps {where} call a model: {error}")
    return {
        "provider": chosen,
        "model": model,
        "base_url": base_url,
        "executor_model": executor_model,
    }


def _exec_with_planner(
    plan_file: Path,
    compiled: CompiledPlan,
    registry: Registry,
    settings: Settings,
    limits: RunLimits,
    *,
    planner: str,
    model: str,
    base_url: str | None,
    save_repairs: Path | None,
    as_json: bool,
    options: Any,
    store_path: Path | None,
    compile_span: tuple[float, float],
) -> NoReturn:
    """``exec --planner``: run the stored plan in a session, repairing what fails; the
    run, its steps, decisions and repairs go to the run store and the trace, and a repair
    that adds steps with effects passes the same approval as the plan."""
    from plandag.brakes.retry import RetryPolicy
    from plandag.planner.repair import PlanRepairer, RepairedRun, run_with_repairs, save_repair
    from plandag.runs.repairs import RepairGate

    progress, observers = progress_observers(compiled, settings)
    client = model_client(planner, base_url)  # a missing key stops here (exit 2)
    repairer = PlanRepairer(
        client,
        model,
        registry,
        max_blocked=settings["max_blocked"] or None,
        total_replan_below=fraction_setting(settings, "total_replan_below"),
    )
    params = dict(compiled.params)
    gate = RepairGate(
        open_cli_store(store_path),
        compiled,
        options,
        compile_span=compile_span,
        hooks=escalation_hooks(settings),
        approver=terminal_approver() if options.approve == "ask" else None,
        say=lambda line: stderr.print(line, markup=False, highlight=False),
    )

    def excerpt(session: Any, state: Any) -> Any:
        return {"params": params} if params else None

    async def work() -> RepairedRun | None:
        models = options.models() if options.executor is not None else None
        try:
            if not await gate.start():
                return None  # the plan itself awaits a decision or was rejected
            return await run_with_repairs(
                compiled,
                registry,
                repairer=repairer,
                excerpt=excerpt,
                limits=limits,
                retry=RetryPolicy(retries=settings["retries"]),
                observers=[*observers, *gate.observers],
                max_concurrency=settings["max_concurrency"],
                run_id=gate.run_id,
                on_session=gate.bind,
                approve_patch=gate.approve_patch,
                escalate=options.escalate,
                approve_plan=gate.approve_plan,
                tool_durations=gate.tool_durations(),
                models=models,
            )
        finally:
            await client.aclose()
            if models is not None:
                await models.client.aclose()

    try:
        with progress:
            outcome = Interruptible(work).run()
        if outcome.result is None and gate.outcome is not None:
            gate.close()
            report(gate.outcome, as_json=as_json, store=gate.store)
        repaired = outcome.result
        if repaired is None:
            gate.finish(None)
            fail("the run was interrupted before it could report", 130)
        gate.finish(repaired)
        if gate.outcome is not None and gate.outcome.message:
            stderr.print(gate.outcome.message, markup=False, highlight=False)
    finally:
        gate.close()
    saved: Path | None = None
    if save_repairs is not None and repaired.repaired:
        try:
            saved = save_repair(
                save_repairs, plan_file.stem, repaired, source=str(plan_file), model=model
            )
        except OSError as error:
            fail(f"--save-repairs {save_repairs}: cannot write it ({error.strerror or error})")
    result = repaired.run
    if as_json:
        document = repaired.to_json_dict()
        document["saved_plan"] = str(saved) if saved is not None else None
        document = scrub_secrets(document)  # values under secret-named keys too
        sys.stdout.write(json.dumps(document, ensure_ascii=False, indent=2) + "\n")
    else:
        stdout.print(run_table(result, console_width=stdout.width, status=repaired.status))
        print_progress(result)
        calls = len(repaired.llm_calls)
        cost = sum(record.cost_usd for record in repaired.llm_calls)
        if repaired.triggered:
            stderr.print(
                f"planner: {len(repaired.replans)} replan(s), {calls} model call(s), "
                f"${cost:.4f}" + (", a known repair reused" if repaired.reused else ""),
                markup=False,
            )
        if repaired.error is not None:
            stderr.print(f"error: {repaired.error.type}: {repaired.error.message}", markup=False)
        if repaired.status == "escalated":
            stderr.print(
                f"escalated ({result.escalation}) after {len(repaired.replans)} replan(s): "
                f"{result.escalation_detail}; no result was made up",
                markup=False,
            )
        elif repaired.gave_up is not None:
            stderr.print(
                f"gave up ({repaired.gave_up}) after {len(repaired.replans)} replan(s); no "
                "result was made up",
                markup=False,
            )
        if saved is not None:
            stderr.print(f"repaired plan written to {saved}", markup=False)
        if repaired.status == "succeeded" and result.output is not None:
            shown = scrub_secrets(to_jsonable(result.output))
            stdout.print_json(json.dumps(shown, ensure_ascii=False))
    if outcome.signal is not None:
        raise typer.Exit(exit_code_for_signal(outcome.signal))
    raise typer.Exit(EXIT_CODES.get(repaired.status, 1))


def register(app: typer.Typer) -> None:
    """Add ``exec`` to ``app`` (the ``plandag`` typer app)."""
    app.command("exec")(exec_command)
